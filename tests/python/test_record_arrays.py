"""amso's own record arrays (issue 40): the spec's `particle` compiled into the bundled module.
`amso.MemArray(n, "particle")` (or the NumPy structured dtype itself) makes one; NumPy's
structured view reads and writes its records and fields without a copy; memoryview gives the
PEP 3118 struct format; DLPack, which has no records, is refused with the field views to export
instead; pickles, copies, NumPy round trips, adoption of NumPy structured arrays, typed
arguments of Rust functions, and moves to the device keep the records. NumPy is the reference."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import amso

PARTICLE = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])


def reference(n=5):
    x = np.zeros(n, PARTICLE)
    x["pos"] = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
    x["vel"] = -x["pos"] / 2
    x["mass"] = np.arange(n) + 0.5
    x["id"] = np.arange(n) * 11
    return x


def particles(n=5):
    a = amso.MemArray(n, "particle")
    a.read_numpy_array(reference(n))
    return a


@pytest.mark.parametrize("dtype", ["particle", PARTICLE, PARTICLE.descr])
def test_made_by_name_or_by_its_numpy_dtype(dtype):
    a = amso.MemArray((4,), dtype)
    assert type(a).__name__ == "MemArray1DParticle" and isinstance(a, amso.MemArray)
    assert a.dtype == PARTICLE and a.dtype.itemsize == 40 and a.itemsize == 40 and a.nbytes == 160
    np.testing.assert_array_equal(np.asarray(a), np.zeros(4, PARTICLE))
    assert amso.empty(3, dtype).shape == (3,)
    assert ("particle", 1) in amso.supported()


def test_a_layout_that_is_not_the_records_is_no_record_dtype():
    other = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f4"), ("id", "<i8")])
    with pytest.raises(TypeError, match="is the layout of no compiled record"):
        amso.MemArray(2, other)
    with pytest.raises(TypeError, match="no compiled array for dtype particle with ndim 2"):
        amso.MemArray((2, 2), "particle")


def test_numpy_views_read_and_write_the_same_memory():
    a = particles()
    view = np.asarray(a)
    assert view.dtype == PARTICLE and not view.flags.owndata
    np.testing.assert_array_equal(view, reference())
    view["mass"][2] = 99.0
    assert a["mass"][2] == 99.0 and a.to_numpy()["mass"][2] == 99.0
    assert np.shares_memory(a["pos"], view)


def test_records_and_fields_by_index():
    a, x = particles(), reference()
    assert a[1] == x[1] and a[-1]["id"] == x[-1]["id"]
    np.testing.assert_array_equal(a[1:4], x[1:4])
    np.testing.assert_array_equal(a["pos"], x["pos"])
    source = reference()[3:5]
    for target in (a, x):
        target[0] = ([1, 2, 3], [4, 5, 6], 7.5, 8)
        target["id"] = [10, 20, 30, 40, 50]
        target[1:3] = source
    np.testing.assert_array_equal(np.asarray(a), x)
    with pytest.raises(ValueError, match="no field of name spin"):
        a["spin"]


def test_len_iteration_and_repr():
    a, x = particles(3), reference(3)
    assert len(a) == 3
    assert [record["id"] for record in a] == x["id"].tolist()
    assert all(mine == theirs for mine, theirs in zip(a, x))
    text = repr(a)
    assert text.startswith("MemArray1DParticle([") and "dtype=particle" in text


def test_memoryview_gives_the_struct_format_numpy_reads():
    a = particles()
    view = memoryview(a)
    assert view.format == "T{(3)f:pos:(3)f:vel:d:mass:q:id:}" and view.itemsize == 40 and view.shape == (5,)
    assert np.asarray(view).dtype == PARTICLE
    np.testing.assert_array_equal(np.asarray(view), reference())
    assert bytes(a) == reference().tobytes()


def test_dlpack_has_no_records_and_the_refusal_names_the_field_views():
    a = particles()
    for export in (a.__dlpack__, lambda: a.__dlpack__(max_version=(1, 0)), lambda: np.from_dlpack(a)):
        with pytest.raises(BufferError, match=r'particle is a record .*\(a\["pos"\], a\["vel"\], a\["mass"\], a\["id"\]'):
            export()
    np.testing.assert_array_equal(np.from_dlpack(a["mass"]), reference()["mass"])  # the field views export


@pytest.mark.parametrize("consumer", ["torch", "tvm_ffi", "jax"])
def test_other_frameworks_meet_the_same_refusal(consumer):
    """Consumers that read amso arrays through the C exchange API (PyTorch, TVM-FFI) or
    `__dlpack__` (JAX) get the record refusal, never a tensor of opaque bytes."""
    module = pytest.importorskip(consumer)
    take = {"torch": lambda a: module.from_dlpack(a), "tvm_ffi": lambda a: module.from_dlpack(a),
            "jax": lambda a: module.numpy.from_dlpack(a)}[consumer]
    # Each framework raises its own exception type around amso's BufferError; the message is amso's.
    with pytest.raises(Exception, match="DLPack has no record type"):
        take(particles())


def test_pickles_copies_and_bytes_keep_the_records():
    a = particles()
    for other in (pickle.loads(pickle.dumps(a, protocol=5)), pickle.loads(pickle.dumps(a, protocol=2)), a.copy(),
                  copy.deepcopy(a), copy.copy(a)):
        assert type(other) is type(a)
        np.testing.assert_array_equal(np.asarray(other), reference())
    b = a.copy()
    b["mass"] = 0
    assert (np.asarray(a)["mass"] == reference()["mass"]).all()


def test_numpy_structured_arrays_are_adopted_without_a_copy():
    x = reference()
    a = amso.asarray(x, copy=False)
    assert type(a).__name__ == "MemArray1DParticle" and np.shares_memory(np.asarray(a), x)
    x["id"][0] = -1
    assert a["id"][0] == -1
    copied = amso.asarray(x, copy=True)
    assert not np.shares_memory(np.asarray(copied), x)
    np.testing.assert_array_equal(np.asarray(copied), x)


MISMATCHES = {
    "type": ([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f4"), ("id", "<i8")],
             "field 2 `mass` is float32, where the record has float64"),
    "order": ([("vel", "<f4", (3,)), ("pos", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")],
              "field 0 is named `vel`, where the record has `pos`"),
    "extra": ([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8"), ("q", "<f8")],
              "field 4 `q` is not in the record"),
    "itemsize": ({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
                  "offsets": [0, 12, 24, 32], "itemsize": 48}, "itemsize is 48 bytes, where the record has 40"),
}


@pytest.mark.parametrize("case", MISMATCHES)
def test_adopting_another_layout_names_the_first_difference(case):
    fields, difference = MISMATCHES[case]
    with pytest.raises(TypeError, match="expected an array of record particle") as error:
        amso.asarray(np.zeros(3, fields), copy=False)
    assert difference in str(error.value)


def test_rust_typed_arguments_read_the_bundled_record_arrays_in_place():
    peers = pytest.importorskip("amso_peers")
    a = particles()
    assert peers.record_total_mass(a) == reference()["mass"].sum()
    peers.record_kick(a, 2.0)
    x = reference()
    np.testing.assert_array_equal(a["pos"], x["pos"] + x["vel"] * np.float32(2))
    assert peers.record_ids(a) == x["id"].tolist()
    with pytest.raises(TypeError, match="expected a particle record array with 1 dimension, got a float32 array"):
        peers.record_total_mass(amso.MemArray(3, "float32"))


def test_a_locked_record_array_refuses_other_writers_and_its_context_refuses_dlpack():
    a = particles()
    with a.get_dlpack() as ctx:
        assert a.locked
        with pytest.raises(BufferError, match="locked by context"):
            a["mass"] = 1.0
        with pytest.raises(BufferError, match="DLPack has no record type"):
            ctx.__dlpack__()
    assert not a.locked
    a["mass"] = 1.0
    assert (a["mass"] == 1.0).all()


needs_gpu = pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA GPU")


@needs_gpu
def test_records_move_to_the_device_and_back():
    a = particles()
    a.move_memory(amso.dlpack.kDLCUDA)
    assert a.on_device
    interface = a.__cuda_array_interface__
    assert interface["typestr"] == "|V40" and interface["shape"] == (5,)
    assert interface["descr"] == [("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")]
    assert np.dtype(interface["descr"]) == PARTICLE
    with pytest.raises(BufferError, match="DLPack has no record type"):
        a.__dlpack__()
    a.move_memory(amso.dlpack.kDLCPU)
    np.testing.assert_array_equal(np.asarray(a), reference())


@needs_gpu
def test_rust_typed_arguments_read_device_record_arrays():
    peers = pytest.importorskip("amso_peers")
    a = particles()
    a.move_memory(amso.dlpack.kDLCUDA)
    with pytest.raises(ValueError, match="in CUDA device memory"):
        peers.record_total_mass(a)  # host views of device data are refused, as for every dtype


def test_a_titled_spelling_names_the_record_and_another_layout_says_which_records_exist():
    titled = np.dtype({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
                       "offsets": [0, 12, 24, 32], "titles": ["position", None, None, None], "itemsize": 40})
    assert type(amso.MemArray(2, titled)).__name__ == "MemArray1DParticle"
    with pytest.raises(TypeError, match=r"is the layout of no compiled record \(the records: particle "):
        amso.MemArray(2, [("pos", ">f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])


def test_asarray_takes_the_record_by_name_and_by_its_dtype():
    """`amso.asarray(x, dtype="particle")` and `dtype=a.dtype`, as NumPy users write them (issue 56):
    a structured array of the layout is adopted, an amso record array is itself, copy=True copies."""
    x = reference()
    a = particles()
    for dtype in ("particle", a.dtype, np.dtype(a.dtype)):
        adopted = amso.asarray(x, dtype=dtype)
        assert type(adopted).__name__ == "MemArray1DParticle" and np.shares_memory(np.asarray(adopted), x)
        assert amso.asarray(a, dtype=dtype) is a
    copied = amso.asarray(a, dtype="particle", copy=True)
    assert copied is not a and not np.shares_memory(np.asarray(copied), np.asarray(a))
    np.testing.assert_array_equal(np.asarray(copied), np.asarray(a))
    with pytest.raises(TypeError, match="no compiled array for dtype particle with ndim 2"):
        amso.asarray(np.zeros((2, 2), a.dtype), dtype="particle")


def test_a_record_rank_the_wheel_lacks_says_what_a_wheel_user_can_do():
    """The bundled record is compiled at ndim 1: another rank names the 1-D array and NumPy's
    reshaped view, never "install amso from its wheel" (issue 56)."""
    with pytest.raises(TypeError) as error:
        amso.MemArray((2, 2), "particle")
    text = str(error.value)
    assert "this module compiles particle with ndim 1" in text and "np.asarray(a).reshape(...)" in text
    assert "install amso from its wheel" not in text
    flat = amso.MemArray(4, "particle")
    grid = np.asarray(flat).reshape(2, 2)
    grid["mass"][1, 1] = 5.0
    assert flat["mass"][3] == 5.0
