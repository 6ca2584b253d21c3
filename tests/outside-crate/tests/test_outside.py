"""The outside crate, built against the packaged amso crates by version: its classes, typed
arguments, owned results, and its own element type (float8 e5m2), checked against ml_dtypes,
NumPy and, where installed, PyTorch and a GPU."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import amso
import amso_outside as out

E5M2 = np.dtype(ml_dtypes.float8_e5m2)
GPU = amso.cuda.is_available()


def address(array) -> int:
    return array.__array_interface__["data"][0]


def every_e5m2_value() -> np.ndarray:
    """All 256 bit patterns but the NaNs, as ml_dtypes reads them."""
    values = np.arange(256, dtype=np.uint8).view(E5M2)
    return values[~np.isnan(values.astype(np.float32))]


def test_classes_of_its_own_dtype_and_of_the_spec_s():
    grid = out.Grid((2, 3, 4))
    assert grid.shape == (2, 3, 4) and grid.dtype == "float32"
    scales = out.Scales((2, 2))
    assert scales.shape == (2, 2) and scales.dtype == "float8_e5m2"
    scales[0, 1] = 1.5
    scales[1, 0] = -3.0
    assert scales[0, 1] == 1.5 and scales[1, 0] == -3.0
    np.testing.assert_array_equal(np.asarray(scales), np.array([[0, 1.5], [-3.0, 0]], dtype=E5M2))
    assert np.asarray(scales).dtype == E5M2


def test_typed_arguments_of_the_spec_s_types():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out.scale(x[:, ::-1, :], 2.0)  # a reversed view, written through
    np.testing.assert_array_equal(x, 2 * np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    y = np.linspace(-1, 1, 30).reshape(2, 3, 5)
    assert out.norm(y) == pytest.approx(np.linalg.norm(y))
    assert out.norm(y.ravel()) == pytest.approx(np.linalg.norm(y))
    with pytest.raises(TypeError, match="expected a float64 array"):
        out.norm(y.astype(np.float32))
    assert out.describe(x) == "float32, 3"


def test_its_own_dtype_as_a_numpy_argument_and_result():
    values = every_e5m2_value()
    widened = out.widen(values)
    assert isinstance(widened, np.ndarray) and widened.dtype == np.float32
    np.testing.assert_array_equal(widened, values.astype(np.float32))
    assert out.describe(values) == "float8_e5m2, 1"
    with pytest.raises(TypeError, match="expected a float8_e5m2 array with 1 dimension, got a float32"):
        out.widen(values.astype(np.float32))


def test_quantizing_matches_ml_dtypes_and_hands_the_vec_over():
    rng = np.random.default_rng(0)
    finite = every_e5m2_value().astype(np.float32)
    beyond = np.array([57344, 60000, 61439, 61440, 70000, 1e30, np.inf], dtype=np.float32)  # rounding to inf
    samples = np.concatenate([finite, rng.normal(0, 1000, 2000).astype(np.float32), beyond, -beyond,
                              (finite[:-1] + finite[1:]) / 2])  # the ties between neighbours
    quantized, vec = out.quantize(samples, "numpy")
    assert quantized.dtype == E5M2 and address(quantized) == vec
    np.testing.assert_array_equal(quantized.view(np.uint8), samples.astype(E5M2).view(np.uint8))
    # amso's own float8_e5m2 arrays (the bundled module compiles them) take the vector too.
    mine, vec = out.quantize(samples[:4], "amso")
    assert isinstance(mine, amso.MemArray) and address(np.asarray(mine)) == vec
    np.testing.assert_array_equal(np.asarray(mine).view(np.uint8), samples[:4].astype(E5M2).view(np.uint8))


def test_doubling_in_place_on_the_host():
    values = np.array([0.5, -1.5, 3.0, 0.0], dtype=E5M2)
    out.double(values)
    np.testing.assert_array_equal(values.astype(np.float32), [1.0, -3.0, 6.0, 0.0])
    with pytest.raises(ValueError, match="read-only"):
        frozen = values.copy()
        frozen.flags.writeable = False
        out.double(frozen)


def test_torch_float8_arrives_without_a_copy():
    torch = pytest.importorskip("torch")
    t = torch.tensor([1.0, -2.0, 0.25], dtype=torch.float8_e5m2)
    np.testing.assert_array_equal(out.widen(t).numpy(), [1.0, -2.0, 0.25])
    out.double(t)
    assert t.float().tolist() == [2.0, -4.0, 0.5]


@pytest.mark.skipif(not GPU, reason="needs a CUDA device")
def test_the_kernel_doubles_float8_on_the_device():
    torch = pytest.importorskip("torch")
    values = every_e5m2_value()
    values = values[np.abs(values.astype(np.float32)) < 20000]  # doubling stays finite
    t = torch.from_numpy(values.view(np.uint8).copy()).view(torch.float8_e5m2).cuda()
    before = t.data_ptr()
    out.double(t)
    torch.cuda.synchronize()
    assert t.data_ptr() == before
    expected = (2 * values.astype(np.float32)).astype(E5M2)
    np.testing.assert_array_equal(t.cpu().view(torch.uint8).numpy(), expected.view(np.uint8))
