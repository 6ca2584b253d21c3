"""Bad input gets a specific exception with a message that says what to do, and never a crash."""

from __future__ import annotations

import numpy as np
import pytest

import amso


@pytest.mark.parametrize(
    "shape, error, message",
    [
        ((2, -3), ValueError, "negative dimension -3 on axis 1"),
        ((2.5, 3), TypeError, "must be integers"),
        (("3",), TypeError, "must be integers"),
        ((True, 2), TypeError, "must be integers"),
        (None, TypeError, "sequence of integers"),
        ((2**62, 2**62), ValueError, "too big"),
        ((2**70,), OverflowError, "too large|does not fit"),
        ((2**44,), MemoryError, "cannot allocate"),  # 128 TiB: beyond any 47-bit address space
    ],
)
def test_bad_shapes(shape, error, message):
    with pytest.raises(error, match=message):
        amso.MemArray(shape, np.float64)


def test_unknown_and_uncompiled_dtypes():
    with pytest.raises(TypeError, match="unknown dtype 'float17'"):
        amso.MemArray((2,), "float17")
    with pytest.raises(TypeError, match=r"float16 with ndim 9: amso arrays have 1 to 8 dimensions"):
        amso.MemArray((1,) * 9, np.float16)
    with pytest.raises(TypeError) as info:
        amso.MemArray(3, object)
    message = str(info.value)
    assert message.startswith("amso has no compiled array for dtype object with ndim 1: amso's dtypes are bool, int8")
    assert "#[amso_array(YourType, NDIM)]" in message
    with pytest.raises(TypeError, match=r"ndim 0: .*np.atleast_1d\(x\)"):
        amso.MemArray((), np.float32)


def test_bad_device_ids_and_types():
    with pytest.raises(ValueError, match="device_id must be >= 0"):
        amso.MemArray(2, np.float32, device_id=-1)
    a = amso.MemArray(2, np.float32)
    with pytest.raises(ValueError, match="unsupported device type 8"):
        a.move_memory(8)
    with pytest.raises(ValueError, match="device id 0 only"):
        a.move_memory(amso.dlpack.kDLCPU, 3)
    assert not a.on_device and not a.locked
    for too_large in (lambda: amso.MemArray(2, np.float32, device_id=2**40), lambda: amso.memory_info(2**40)):
        with pytest.raises(OverflowError):
            too_large()
    with pytest.raises(TypeError, match="device_id must be an int, got str"):
        amso.memory_info("0")
    # A device no machine has is one the producer cannot export to: DLPack's BufferError.
    with pytest.raises(BufferError, match=r"cannot export to dl_device=\(2, -1\): device_id must be >= 0, got -1"):
        a.__dlpack__(dl_device=(2, -1))


def test_a_give_back_naming_no_device_is_refused_and_counted():
    """A plug-in's give-back (`_reclaim`) of a device id that names no device is refused and
    counted as every refused give-back is; a reset of such a device takes back nothing."""
    before = amso._amso._refused_frees()
    with pytest.raises(ValueError, match="device_id must be >= 0, got -1"):
        amso._amso._reclaim(0xDEAD0000, -1, 2)
    assert amso._amso._refused_frees() == before + 1
    assert amso._amso._reset_loans(2, -1) == 0


@pytest.mark.skipif(amso.cuda.is_available(), reason="needs a machine without a CUDA driver")
def test_cuda_requests_without_a_driver_are_clear_runtime_errors():
    a = amso.MemArray(2, np.float32)
    a[0] = 3.0
    for request in [
        lambda: a.move_memory(amso.dlpack.kDLCUDA),
        lambda: a.get_dlpack(amso.dlpack.kDLCUDA),
        lambda: a.add_index_tuple(),
        lambda: amso.MemArray(2, np.float32, pinned=True),
        lambda: amso.cuda.memory_info(),
    ]:
        with pytest.raises(RuntimeError, match="no CUDA driver found"):
            request()
    with pytest.raises(BufferError, match="no CUDA driver found"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(AttributeError, match="host memory"):
        a.__cuda_array_interface__
    assert amso.cuda.is_available() is False
    assert amso.cuda.device_count() == 0  # as torch.cuda.device_count()
    assert not a.on_device and not a.locked and a[0] == 3.0


@pytest.mark.parametrize(
    "key, error, message",
    [
        ((0, 0, 0), IndexError, "expected 2 indices"),
        ((2, 0), IndexError, "index 2 is out of bounds for axis 0 with size 2"),
        ((0, -4), IndexError, "index -4 is out of bounds for axis 1 with size 3"),
        ((2,), IndexError, "index 2 is out of bounds for axis 0 with size 2"),  # a row: NumPy's message
        ((slice(None), 3), IndexError, "index 3 is out of bounds for axis 1 with size 3"),
        ((0.0, 1), TypeError, "basic indices .* got 0.0 \\(float\\)"),
        ((True, 1), TypeError, "got True \\(bool: NumPy reads it as a mask\\)"),
        (([0, 1], 1), TypeError, "np.asarray\\(a\\)\\[...\\]"),
        ((2**70, 0), IndexError, "does not fit"),
        ((slice(None), 2**70), IndexError, "does not fit"),
        ("0", TypeError, "basic indices .* got '0' \\(str\\)"),
    ],
)
def test_bad_indices(key, error, message):
    a = amso.MemArray((2, 3), np.float32)
    with pytest.raises(error, match=message):
        a[key]
    with pytest.raises(error, match=message):
        a[key] = 1.0


@pytest.mark.parametrize(
    "dtype, value, error, message",
    [
        (np.int32, 2**31, OverflowError, "out of bounds for int32"),
        (np.uint8, -1, OverflowError, "out of bounds for uint8"),
        (np.int64, 2**64, OverflowError, "out of bounds for int64"),
        (np.int32, float("nan"), OverflowError, "cannot convert float NaN"),
        (np.float32, 1 + 2j, TypeError, "complex value"),
        (np.int32, 1j, TypeError, "complex value"),
        (np.float64, "1.0", TypeError, "expected a number"),
        (np.float64, None, TypeError, "expected a number"),
    ],
)
def test_bad_values_keep_the_old_value(dtype, value, error, message):
    a = amso.MemArray((1, 1) if dtype == np.uint8 else 1, dtype)
    index = (0, 0) if dtype == np.uint8 else 0
    a[index] = 1
    with pytest.raises(error, match=message):
        a[index] = value
    assert a[index] == 1


def test_capsule_from_another_library_is_not_array_data():
    foreign = np.arange(3.0).__dlpack__()
    a = amso.MemArray(3, np.float64)
    with pytest.raises((TypeError, ValueError)):
        a.read_numpy_array(foreign)
    assert a.to_numpy().tolist() == [0.0, 0.0, 0.0]


def test_constructor_arguments_are_checked():
    with pytest.raises(TypeError):
        amso.MemArray((2,), np.float32, device_id="0")
    with pytest.raises(TypeError):
        amso.MemArray((2,), np.float32, 0, True)  # readonly is keyword-only
    cls = amso.class_for((2, 2), np.float32)
    with pytest.raises(ValueError, match="expected 2 dimensions"):
        cls((2, 2, 2))
