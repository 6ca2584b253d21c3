"""The user crate's cloud-in-cell deposit reading particles as records (issue 40: an array of
structs, the spec's `particle`) against the same deposit over a float32 (n, 3) array of
positions (structure of arrays): `deposit_records` from NumPy structured arrays and the crate's
`Particles` class, on the host (the same sums in the same order: equal to the last bit) and on
the GPU (`cic_deposit_records` in src/cic.cu, reading `particles(p).pos[d]`; atomics reorder
the sums). The GPU tests skip without a CUDA device."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_typed_args import BOX, SHAPE, particles, reference

import amso

ue = pytest.importorskip("amso_user_example")
gpu = pytest.mark.skipif(not amso.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[2]
PARTICLE = np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")])


def records(p, seed=1):
    """Particles at positions `p` ((n, 3) float32), with velocities, masses and ids that a
    kernel reading the wrong bytes of a record would deposit instead."""
    rng = np.random.default_rng(seed)
    x = np.zeros(len(p), PARTICLE)
    x["pos"] = p
    x["vel"] = rng.uniform(-100, 100, size=(len(p), 3))
    x["mass"] = rng.uniform(1, 2, size=len(p))
    x["id"] = np.arange(len(p)) * 1_000_003
    return x


def particle_array(x):
    """The crate's amso record class over a copy of structured array `x`."""
    a = ue.Particles(len(x))
    a.read_numpy_array(x)
    return a


def soa(p, times=1):
    """The structure-of-arrays deposit of positions `p` on the host, `times` over."""
    density = np.zeros(SHAPE)
    for _ in range(times):
        ue.deposit(p, density, BOX)
    return density


# --- the host ---

def test_records_deposit_what_positions_deposit_to_the_last_bit():
    p = particles(2_000)
    x = records(p)
    density = np.zeros(SHAPE)
    ue.deposit_records(x, density, BOX)
    np.testing.assert_array_equal(density, soa(p))
    np.testing.assert_allclose(density, reference(p), rtol=1e-12, atol=1e-12)
    assert np.isclose(density.sum(), len(p))  # unit mass: the records' `mass` is not read
    ue.deposit_records(x, density, BOX)  # accumulates
    np.testing.assert_array_equal(density, soa(p, times=2))


def test_the_record_class_is_read_in_place():
    p = particles(1_000)
    a = particle_array(records(p))
    assert isinstance(a, amso.MemArray) and a.dtype == PARTICLE and a.shape == (len(p),)
    density = ue.Density(SHAPE)
    ue.deposit_records(a, density, BOX)
    np.testing.assert_array_equal(np.asarray(density), soa(p))
    view = np.asarray(a)  # a zero-copy structured view: a write through it is what the next call reads
    view["pos"] = p[::-1]
    grid = np.zeros(SHAPE)
    ue.deposit_records(a, grid, BOX)
    np.testing.assert_array_equal(grid, soa(p[::-1]))
    empty = ue.Particles(0)
    ue.deposit_records(empty, grid, BOX)
    np.testing.assert_array_equal(grid, soa(p[::-1]))


def test_strided_and_reversed_record_views_deposit_their_particles():
    p = particles(1_000)
    x = records(p)
    for view, positions in [(x[::-1], p[::-1]), (x[1::3], p[1::3])]:
        density = np.zeros(SHAPE)
        ue.deposit_records(view, density, BOX)
        np.testing.assert_array_equal(density, soa(np.ascontiguousarray(positions)))
    aligned = np.dtype(PARTICLE.descr, align=True)  # the same layout, spelled aligned
    density = np.zeros(SHAPE)
    ue.deposit_records(x.astype(aligned), density, BOX)
    np.testing.assert_array_equal(density, soa(p))


@pytest.mark.parametrize("dtype, message", [
    (np.dtype([("pos", "<f8", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")]), "field 0 `pos`"),
    (np.dtype([("vel", "<f4", (3,)), ("pos", "<f4", (3,)), ("mass", "<f8"), ("id", "<i8")]), "field 0"),
    (np.dtype([("pos", "<f4", (3,)), ("vel", "<f4", (3,)), ("mass", "<f8")]), "fields end after 3"),
    (np.dtype({"names": ["pos", "vel", "mass", "id"], "formats": [("<f4", (3,)), ("<f4", (3,)), "<f8", "<i8"],
               "offsets": [0, 12, 24, 32], "itemsize": 48}), "itemsize is 48 bytes"),
])
def test_a_record_array_of_another_layout_is_refused(dtype, message):
    density = np.zeros(SHAPE)
    with pytest.raises(TypeError, match="expected an array of record particle") as error:
        ue.deposit_records(np.zeros(4, dtype), density, BOX)
    assert message in str(error.value)
    assert not density.any()


def test_other_arrays_and_arguments_are_refused():
    p = particles(11)  # 18 particles with the special ones
    density = np.zeros(SHAPE)
    with pytest.raises(TypeError, match=r"expected a particle record array with 1 dimension, got a float32 array"):
        ue.deposit_records(p, density, BOX)  # positions are not records
    with pytest.raises(TypeError, match=r"got a record array with 2 dimensions"):
        ue.deposit_records(records(p).reshape(3, 6), density, BOX)
    with pytest.raises(TypeError, match=r"got a record array"):
        ue.deposit(records(p), density, BOX)  # records are not positions
    with pytest.raises(TypeError, match=r"got a record array"):
        ue.deposit(particle_array(records(p)), density, BOX)
    with pytest.raises(ValueError, match=r"deposit_records\(\): argument 'box_size' must be a positive number"):
        ue.deposit_records(records(p), density, 0.0)
    with pytest.raises(ValueError, match="read-only"):
        ue.deposit_records(records(p), amso.MemArray(SHAPE, np.float64, readonly=True), BOX)
    assert not density.any()


def test_the_guides_records_kernel_is_the_examples():
    """docs/kernels.md's ```cuda block is an excerpt of the example's src/cic.cu, and its ```text
    block that starts `// examples/...` one of that file, verbatim (the block's Python runs in
    test_docs.py on the GPU machine)."""
    page = (ROOT / "docs" / "kernels.md").read_text()
    kernel = (ROOT / "examples" / "rust" / "user-crate" / "src" / "cic.cu").read_text()
    excerpts = re.findall(r"^```cuda\n(.*?)^```$", page, flags=re.S | re.M)
    assert excerpts and all(code in kernel for code in excerpts), excerpts
    assert "cic_deposit_records(amso::particle_indexer<1> particles" in excerpts[0]
    named = [code.partition("\n") for code in re.findall(r"^```text\n(.*?)^```$", page, flags=re.S | re.M)]
    named = [(first[3:], rest) for first, _, rest in named if first.startswith("// examples/")]
    assert named, "the launch's excerpt"
    for path, code in named:
        assert code in (ROOT / path).read_text(), path


# --- the GPU ---

def on_device(x):
    """`x` (structured) as the crate's record class on the GPU."""
    a = particle_array(x)
    a.move_memory(amso.dlpack.kDLCUDA)
    assert a.on_device
    return a


@gpu
def test_the_records_kernel_matches_the_host_and_the_positions_kernel():
    p = particles(20_000)
    x = records(p)
    host = np.zeros(SHAPE)
    ue.deposit_records(x, host, BOX)
    a = on_device(x)
    grid = amso.MemArray(SHAPE, np.float64, on_device=True)
    ue.deposit_records(a, grid, BOX)
    got = grid.to_numpy()
    np.testing.assert_allclose(got, host, rtol=1e-9)
    np.testing.assert_allclose(got, reference(p), rtol=1e-9)
    positions = amso.asarray(p)
    positions.move_memory(amso.dlpack.kDLCUDA)
    soa_grid = amso.MemArray(SHAPE, np.float64, on_device=True)
    ue.deposit(positions, soa_grid, BOX)
    np.testing.assert_allclose(got, soa_grid.to_numpy(), rtol=1e-9)
    ue.deposit_records(a, grid, BOX)  # accumulates
    np.testing.assert_allclose(grid.to_numpy(), 2 * host, rtol=1e-9)
    mine = ue.Density(SHAPE)  # the crate's own density class, moved there too
    mine.move_memory(amso.dlpack.kDLCUDA)
    ue.deposit_records(a, mine, BOX)
    np.testing.assert_allclose(mine.to_numpy(), host, rtol=1e-9)


@gpu
def test_the_records_kernel_refuses_host_and_device_mixed():
    x = records(particles(10))
    with pytest.raises(ValueError, match="deposit_records\\(\\): arguments 'particles' and 'density' must be on the same device"):
        ue.deposit_records(x, amso.MemArray(SHAPE, np.float64, on_device=True), BOX)
    host = np.zeros(SHAPE)
    with pytest.raises(ValueError, match="must be on the same device"):
        ue.deposit_records(on_device(x), host, BOX)
    assert not host.any()
    with pytest.raises(TypeError, match=r"got a record array"):
        ue.deposit(on_device(x), amso.MemArray(SHAPE, np.float64, on_device=True), BOX)


@gpu
def test_the_records_kernel_on_torchs_current_stream():
    torch = pytest.importorskip("torch")
    p = particles(20_000)
    x = records(p)
    a = on_device(x)
    expected = np.zeros(SHAPE)
    ue.deposit_records(x, expected, BOX)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        density = torch.zeros(SHAPE, dtype=torch.float64, device="cuda")
        ue.deposit_records(a, density, BOX)  # launched on torch's current stream, the density's
        got = density.cpu().numpy()  # ordered on the same stream
        positions = torch.from_numpy(p).cuda()
        soa_density = torch.zeros(SHAPE, dtype=torch.float64, device="cuda")
        ue.deposit(positions, soa_density, BOX)
        soa_got = soa_density.cpu().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    np.testing.assert_allclose(got, soa_got, rtol=1e-9)


@gpu
def test_the_records_kernel_on_the_stream_amso_cuda_stream_names_is_ordered_before_cupys_reads():
    """As the positions kernel's test in test_kernels.py: on any stream but the named one,
    CuPy's copy of the grid right after the call reads it before the kernel is done (a slow
    deposit: 400,000 particles into 192 cells)."""
    cupy = pytest.importorskip("cupy")
    p = particles(400_000)
    expected = reference(p)
    a = on_device(records(p))
    side = cupy.cuda.Stream(non_blocking=True)
    for stream in [cupy.cuda.Stream.null, side] * 4:
        with stream:
            density = cupy.zeros(SHAPE, dtype=cupy.float64)
            with amso.cuda.stream(stream.ptr):
                ue.deposit_records(a, density, BOX)
            got = cupy.asnumpy(density, stream=stream)  # waits for this stream's work only
        np.testing.assert_allclose(got, expected, rtol=1e-9)
