"""Records (issue 40) as typed arguments of Rust functions (benchmarks/peers' `records.rs`): a
`#[repr(C)]` particle taken from NumPy structured arrays without a copy, whatever dtype spelling
gives its layout; the first difference of any other layout named; fields as strided views;
records written in place; owned record results as NumPy structured arrays. NumPy is the
reference for every value."""

from __future__ import annotations

import numpy as np
import pytest

peers = pytest.importorskip("amso_peers")

PACKED = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])
SPELLINGS = {
    "packed list": PACKED,
    "aligned": np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")], align=True),
    "dict": np.dtype({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
                      "offsets": [0, 12, 24, 32], "itemsize": 40}),
}


def particles(n=6, dtype=PACKED):
    x = np.zeros(n, dtype)
    x["pos"] = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
    x["vel"] = np.linspace(-1, 1, 3 * n, dtype=np.float32).reshape(n, 3)
    x["mass"] = np.arange(n) * 0.25 + 1
    x["id"] = np.arange(n) * 7
    return x


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_any_spelling_of_the_layout_is_read_in_place(spelling):
    x = particles(dtype=SPELLINGS[spelling])
    assert peers.record_total_mass(x) == x["mass"].sum()
    assert peers.record_ids(x) == x["id"].tolist()
    shape, values = peers.record_positions(x)
    assert shape == [6, 3] and values == x["pos"].ravel().tolist()


@pytest.mark.parametrize("view", ["reversed", "every other", "2-d", "2-d transposed"])
def test_field_views_follow_any_layout(view):
    x = particles(12)
    x = {"reversed": x[::-1], "every other": x[::2], "2-d": x.reshape(3, 4), "2-d transposed": x.reshape(3, 4).T}[view]
    shape, values = peers.record_positions(x)
    assert shape == list(x["pos"].shape)
    assert values == x["pos"].ravel().tolist()  # C order of the view, as NumPy reads it
    assert peers.record_ids(x) == x["id"].ravel().tolist()


def test_records_are_written_in_place():
    x = particles()
    expected = x["pos"] + x["vel"] * np.float32(0.5)
    peers.record_kick(x, 0.5)
    np.testing.assert_array_equal(x["pos"], expected)
    mass = x["mass"].copy()
    peers.record_scale_mass(x[1::2], 3.0)
    np.testing.assert_array_equal(x["mass"][1::2], mass[1::2] * 3)
    np.testing.assert_array_equal(x["mass"][::2], mass[::2])


def test_a_misaligned_structured_array_is_read_and_written_back():
    raw = bytearray(PACKED.itemsize * 4 + 1)
    x = np.frombuffer(raw, dtype=PACKED, offset=1, count=4)
    x[...] = particles(4)
    assert x.ctypes.data % 8 != 0  # not aligned for the record (NumPy calls a packed dtype aligned)
    assert peers.record_total_mass(x) == x["mass"].sum()
    expected = x["pos"] + x["vel"] * np.float32(2)
    peers.record_kick(x, 2.0)
    np.testing.assert_array_equal(x["pos"], expected)


def test_owned_records_go_to_numpy_with_the_layout():
    r = peers.record_new(4)
    assert r.dtype == PACKED and r.dtype.itemsize == 40
    assert r.dtype.fields["id"][1] == 32
    np.testing.assert_array_equal(r["pos"], np.arange(4, dtype=np.float32)[:, None] * [1, 2, 3])
    np.testing.assert_array_equal(r["vel"], -r["pos"])
    np.testing.assert_array_equal(r["mass"], np.arange(4) / 2)
    assert r["id"].tolist() == [0, 1, 2, 3]
    assert peers.record_total_mass(r) == r["mass"].sum()  # and back in


def test_record_results_go_to_the_callers_framework_numpy_or_amso():
    """docs/dtypes.md: a record result goes to the caller's framework: NumPy for a NumPy
    argument, amso's record class (over the same memory) for an amso record argument; a rank
    the bundled module has no class for is amso's TypeError naming the spec."""
    import amso

    r = peers.record_new(3)
    echoed = peers.record_echo(r)
    assert isinstance(echoed, np.ndarray) and echoed.dtype == r.dtype
    np.testing.assert_array_equal(echoed, r)
    as_amso = peers.record_echo(amso.asarray(r, dtype="particle"))
    assert type(as_amso).__name__ == "MemArray1DParticle" and as_amso.shape == (3,)
    np.testing.assert_array_equal(np.asarray(as_amso), r)
    with pytest.raises(TypeError, match=r"no compiled record class of 40 bytes with 2 dimensions.*specs/types.yaml"):
        peers.record_echo_2d_to_amso(peers.record_new(4).reshape(2, 2))
    # A result in reverse memory order reaches amso as a C-order copy, in the same order.
    reversed_amso = peers.record_reversed(amso.asarray(r, dtype="particle"))
    assert type(reversed_amso).__name__ == "MemArray1DParticle"
    np.testing.assert_array_equal(np.asarray(reversed_amso), r[::-1])
    np.testing.assert_array_equal(peers.record_reversed(r), r[::-1])


@pytest.mark.parametrize("framework", ["numpy", "amso"])
def test_an_owned_record_memarray_goes_to_numpy_and_amso(framework):
    out = peers.record_memarray_to(3, framework)
    assert np.asarray(out).dtype == PACKED and out.shape == (3,)
    assert not np.asarray(out)["mass"].any()
    if framework == "amso":
        assert type(out).__name__ == "Particles"  # the benchmark crate's own class of particle arrays


def test_an_owned_record_memarray_is_refused_by_a_dlpack_framework():
    with pytest.raises(ValueError, match=r"particle arrays go to NumPy \(and, on the host, to amso\) only"):
        peers.record_memarray_to(3, "tvm_ffi")


def test_a_field_view_has_the_arrays_dimensions_then_the_fields_shape():
    r = peers.record_new(4).reshape(2, 2)
    shape, values = peers.record_positions(r)
    assert shape == [2, 2, 3] and values == r["pos"].ravel().tolist()


def test_static_rank_field_views_reduce_and_write_as_numpy_does():
    r = peers.record_new(5)
    r["pos"] *= 1.5
    expected_total, expected_mass = r["pos"].sum(axis=0), r["mass"] * 2
    assert peers.record_pos_total_and_double_mass(r) == pytest.approx(expected_total.tolist())
    np.testing.assert_array_equal(r["mass"], expected_mass)
    strided = peers.record_new(6)[::2]  # every other record: the field views step over them
    masses = strided["mass"] * 2
    peers.record_pos_total_and_double_mass(strided)
    np.testing.assert_array_equal(strided["mass"], masses)
    with pytest.raises(TypeError, match=r"field `pos` has 2 dimensions \(the array's, then the field's own shape\), not 1 dimension: ask for Ix2"):
        peers.record_pos_as_1d(r)


MISMATCHES = {
    "order": ([("vel", "<f4", (3,)), ("pos", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")], "field 0 is named `vel`"),
    "type": ([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f4"), ("id", "<i8")], "field 2 `mass` is float32"),
    "shape": ([("pos", "<f4", (2,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")], "field 0 `pos` has shape [2]"),
    "missing": ([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8")], "fields end after 3"),
    "extra": ([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8"), ("q", "<f4")],
              "field 4 `q` is not in the record"),
    "byte order": ([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", ">f8"), ("id", "<i8")], "field 2 `mass` is >f8"),
}


@pytest.mark.parametrize("case", MISMATCHES)
def test_a_different_layout_names_its_first_difference(case):
    fields, difference = MISMATCHES[case]
    x = np.zeros(3, fields)
    with pytest.raises(TypeError, match="expected an array of record particle") as error:
        peers.record_total_mass(x)
    assert difference in str(error.value)


def test_offsets_and_itemsize_must_match():
    moved = np.dtype({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
                      "offsets": [0, 12, 32, 40], "itemsize": 48})
    with pytest.raises(TypeError, match="field 2 `mass` is at offset 32, where the record has it at 24"):
        peers.record_total_mass(np.zeros(2, moved))
    padded = np.dtype({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
                       "offsets": [0, 12, 24, 32], "itemsize": 48})
    with pytest.raises(TypeError, match="itemsize is 48 bytes, where the record has 40"):
        peers.record_total_mass(np.zeros(2, padded))


def test_other_arguments_refuse_records_and_records_refuse_other_arrays():
    with pytest.raises(TypeError, match=r"expected a particle record array with 1 dimension, got a float64 array"):
        peers.record_total_mass(np.zeros(3))
    with pytest.raises(TypeError, match=r"expected a particle record array with 1 dimension, got a record array with 2"):
        peers.record_total_mass(particles(4).reshape(2, 2))
    with pytest.raises(TypeError, match=r"got a record array"):
        peers.amso_sum(particles(4))
    with pytest.raises(TypeError, match=r"has no DLPack type"):
        peers.record_total_mass(np.zeros(3, "V40"))
    with pytest.raises(ValueError, match=r"read-only"):
        x = particles()
        x.flags.writeable = False
        peers.record_kick(x, 1.0)


def test_field_errors_name_the_fields():
    x = particles()
    with pytest.raises(TypeError, match=r"field `mass` of record particle holds float64, not float32"):
        peers.record_field_f32(x, "mass")
    with pytest.raises(ValueError, match=r"record particle has no field `spin`; its fields are pos, vel, mass, id"):
        peers.record_field_f32(x, "spin")
    assert peers.record_field_f32(x, "pos") == x["pos"].ravel().tolist()


def test_bool_fields_must_hold_0_or_1():
    flagged = np.dtype({"names": ["alive", "weight"], "formats": ["?", "<f8"], "offsets": [0, 8], "itemsize": 16})
    x = np.zeros(4, flagged)
    x["alive"] = [True, False, True, True]
    x["weight"] = [1, 2, 4, 8]
    assert peers.flagged_live_weight(x) == 13
    x.view(np.uint8).reshape(4, 16)[3, 0] = 2  # the last record's alive byte
    with pytest.raises(ValueError, match="a bool field of the records holds bytes other than 0 and 1"):
        peers.flagged_live_weight(x)
    assert peers.flagged_live_weight(x[:3]) == 5  # the bad byte lies outside this view


def test_a_matched_dtype_is_remembered_and_a_new_one_is_still_checked():
    x = particles()
    for _ in range(3):
        assert peers.record_total_mass(x) == x["mass"].sum()
    wrong = np.zeros(2, [("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<i8"), ("id", "<i8")])
    with pytest.raises(TypeError, match="field 2 `mass` is int64"):
        peers.record_total_mass(wrong)


def test_the_same_record_with_padding_in_any_spelling():
    packed = np.dtype({"names": ["alive", "weight"], "formats": ["?", "<f8"], "offsets": [0, 8], "itemsize": 16})
    aligned = np.dtype([("alive", "?"), ("weight", "<f8")], align=True)
    assert aligned.itemsize == 16 and aligned.fields["weight"][1] == 8
    for dtype in (packed, aligned):
        x = np.zeros(3, dtype)
        x["alive"], x["weight"] = [True, False, True], [1, 2, 4]
        assert peers.flagged_live_weight(x) == 5
    with pytest.raises(TypeError, match="field 1 `weight` is at offset 1, where the record has it at 8"):
        peers.flagged_live_weight(np.zeros(3, [("alive", "?"), ("weight", "<f8")]))


def test_titles_are_not_part_of_the_layout():
    titled = np.dtype({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
                       "offsets": [0, 12, 24, 32], "titles": ["position", None, "m", None], "itemsize": 40})
    x = particles(dtype=titled)
    assert peers.record_total_mass(x) == x["mass"].sum()


def test_fields_renamed_after_a_match_are_refused():
    dtype = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])
    x = np.zeros(3, dtype)
    assert peers.record_total_mass(x) == 0.0  # matched, and remembered
    dtype.names = ("a", "b", "c", "d")  # NumPy renames in place: the same descriptor object
    with pytest.raises(TypeError, match="field 0 is named `a`, where the record has `pos`"):
        peers.record_total_mass(np.zeros(3, dtype))
    dtype.names = ("pos", "vel", "mass", "id")
    assert peers.record_total_mass(np.zeros(3, dtype)) == 0.0


def test_a_bad_bool_byte_in_amsos_own_record_array_is_refused():
    a = peers.FlaggedArray(3)
    view = np.asarray(a)
    view["alive"] = [True, True, False]
    view["weight"] = [1, 2, 4]
    assert peers.flagged_live_weight(a) == 3
    view.view(np.uint8).reshape(3, 16)[0, 0] = 7
    with pytest.raises(ValueError, match="a bool field of the records holds bytes other than 0 and 1"):
        peers.flagged_live_weight(a)
