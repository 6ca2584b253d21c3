"""The bad-input corpus: hostile capsules, interface dicts, streams, arguments and lock misuse.
Every case names the exception type and message it must raise, and checks that an array
holding data before the attack still holds it afterwards, unlocked and with no export left
behind. (Spec files with mistakes: amso-codegen/tests/spec_corpus.rs; the C ABI: test_capi.py.)"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import re
import threading

import numpy as np
import pytest
from hostile import Interface, Tensor, amso_c_functions, impostors, interface
from test_dlpack import DLTensor
from test_share import UID, handle_bytes

import amso

GPU = amso.cuda.is_available()
NO_DRIVER = (RuntimeError, "no CUDA driver found")


def witness() -> amso.MemArray:
    a = amso.MemArray((2, 3), np.float64)
    a.read_numpy_array(np.arange(6.0).reshape(2, 3) + 0.5)
    return a


def intact(a) -> None:
    gc.collect()
    np.testing.assert_array_equal(a.to_numpy(), np.arange(6.0).reshape(2, 3) + 0.5)
    assert not a.locked and a.export_count == 0


# --- DLPack import of hostile tensors: (id, Tensor arguments, capsule name, error, message) ---
CAPSULES = [
    ("ndim-0", dict(shape=(), ndim=0), None, TypeError, "with ndim 0: amso arrays have 1 to 8 dimensions"),
    ("ndim-negative", dict(ndim=-1), None, ValueError, "ndim -1 is outside"),
    ("ndim-huge", dict(ndim=1 << 30), None, ValueError, "ndim 1073741824 is outside"),
    ("ndim-9", dict(shape=(1,) * 9), None, TypeError, "with ndim 9: amso arrays have 1 to 8 dimensions"),
    ("shape-null", dict(shape_null=True), None, ValueError, "shape is NULL"),
    ("shape-negative", dict(shape=(2, -3)), None, ValueError, "negative dimension -3"),
    ("shape-overflow", dict(shape=(1 << 62, 1 << 62), nbytes=8), None, ValueError, "too big"),
    # NumPy's rule: a zero dimension does not excuse the others, in either order.
    ("shape-zero-then-huge", dict(shape=(0, 1 << 62)), None, ValueError, "too big"),
    ("shape-huge-then-zero", dict(shape=(1 << 62, 0)), None, ValueError, "too big"),
    ("strides-outside", dict(shape=(4,), strides=(1000,)), None, BufferError, "C-contiguous"),
    ("strides-negative", dict(shape=(4,), strides=(-1,)), None, BufferError, "C-contiguous"),
    ("strides-transposed", dict(shape=(2, 3), strides=(1, 2)), None, BufferError, "C-contiguous"),
    ("dtype-unknown-code", dict(dtype=(99, 32, 1)), None, TypeError, r"type code 99 is not an element type"),
    ("dtype-zero-bits", dict(dtype=(2, 0, 1)), None, TypeError, "kDLFloat with 0 bits x 1 lanes; DLPack's kDLFloat"),
    # Low-precision floats: a producer lying about bits or lanes, packed sub-byte elements (an
    # odd count of them cannot even fill whole bytes), and a padded flag on a byte-sized type.
    ("float8-lies-about-bits", dict(dtype=(10, 16, 1)), None, TypeError, "kDLFloat8_e4m3fn with 16 bits"),
    ("float8-zero-lanes", dict(dtype=(12, 8, 0)), None, TypeError, "kDLFloat8_e5m2 with 8 bits x 0 lanes"),
    ("float4-lies-about-lanes", dict(dtype=(17, 4, 3), nbytes=12), None, TypeError, "packs 4-bit elements"),
    ("subbyte-packed-odd-count", dict(dtype=(17, 4, 1), shape=(5,), nbytes=3), None, TypeError,
     "packs 4-bit elements"),
    ("subbyte-padded-flag-on-float32", dict(dtype=(2, 32, 1), flags=4), None, TypeError,
     "sets the sub-byte padded flag on 1 x 32-bit elements"),
    ("dtype-lanes", dict(dtype=(2, 32, 2)), None, TypeError, "lanes 2"),
    ("dtype-uncompiled-ndim", dict(dtype=(2, 16, 1), shape=(1,) * 9), None, TypeError, "float16 with ndim 9"),
    ("version-future-major", dict(version=(2, 0)), None, BufferError, "major version 2 is not supported"),
    ("version-zero-major", dict(version=(0, 9)), None, BufferError, "major version 0 is not supported"),
    ("device-unknown-type", dict(device=(7, 0)), None, ValueError, "unsupported device type 7"),
    ("device-cpu-nonzero-id", dict(device=(1, 3)), None, ValueError, "device id 3 is not valid"),
    ("device-negative-id", dict(device=(2, -1)), None, ValueError, "device id -1 is not valid"),
    ("data-null", dict(data=None), None, ValueError, "data pointer is NULL"),
    ("data-misaligned", dict(byte_offset=3), None, ValueError, "not aligned for float64"),
    ("offset-overflow", dict(byte_offset=(1 << 64) - 8), None, ValueError, "overflows the data pointer"),
    ("legacy-ndim-0", dict(shape=(), ndim=0, legacy=True), None, TypeError, "with ndim 0: amso arrays have 1"),
    ("legacy-null-deleter", dict(shape_null=True, legacy=True, deleter=False), None, ValueError, "shape is NULL"),
    ("versioned-null-deleter", dict(version=(9, 9), deleter=False), None, BufferError, "major version 9"),
]


# Refused from what __dlpack_device__ says, before __dlpack__ is called: nothing was handed over.
BEFORE_HANDSHAKE = {"device-negative-id"}


@pytest.mark.parametrize("case, fields, name, error, message", CAPSULES, ids=[c[0] for c in CAPSULES])
def test_hostile_capsules_are_refused_and_freed_once(case, fields, name, error, message):
    a = witness()
    tensor = Tensor(**fields)
    with pytest.raises(error, match=message):
        amso.from_dlpack(tensor.producer(name))
    gc.collect()
    # amso consumed the capsule (renamed it), so the producer's deleter ran exactly once.
    consumed = case not in BEFORE_HANDSHAKE
    assert tensor.deleted == (1 if fields.get("deleter", True) and consumed else 0)
    intact(a)


@pytest.mark.skipif(GPU, reason="without a driver; the device case is test_cuda_pointer_claims_are_checked")
def test_cuda_tensor_without_a_driver():
    """The handshake needs a stream on the device, which needs the driver: refused before
    __dlpack__ is called, so the producer hands nothing over."""
    tensor = Tensor(device=(2, 0))
    with pytest.raises(NO_DRIVER[0], match=NO_DRIVER[1]):
        amso.from_dlpack(tensor.producer())
    assert tensor.deleted == 0


@pytest.mark.skipif(not GPU, reason="needs a CUDA driver")
def test_cuda_pointer_claims_are_checked():
    tensor = Tensor(device=(2, 0))  # host memory claiming to be on the device
    with pytest.raises(ValueError, match="is not CUDA device memory"):
        amso.from_dlpack(tensor.producer())
    assert tensor.deleted == 1


@pytest.mark.parametrize(
    "case, returned, error, message",
    [
        ("capsule-wrong-name", lambda: Tensor().capsule(b"not_dltensor"), TypeError, "not an unconsumed DLPack capsule"),
        ("capsule-used", lambda: Tensor().capsule(b"used_dltensor_versioned"), TypeError, "not an unconsumed"),
        ("not-a-capsule", lambda: 42, TypeError, "not an unconsumed DLPack capsule"),
        ("none", lambda: None, TypeError, "not an unconsumed DLPack capsule"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_producers_returning_non_capsules(case, returned, error, message):
    a = witness()
    value = returned()

    class Producer:
        def __dlpack__(self, **_):
            return value

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(error, match=message):
        amso.from_dlpack(Producer())
    intact(a)


def test_producer_exceptions_and_bad_devices_propagate():
    a = witness()

    class Raising:
        def __dlpack__(self, **_):
            raise RuntimeError("producer exploded")

        def __dlpack_device__(self):
            return (1, 0)

    class BadDevice:
        def __dlpack__(self, **_):
            return Tensor().capsule()

        def __dlpack_device__(self):
            return "cpu"

    with pytest.raises(RuntimeError, match="producer exploded"):
        amso.from_dlpack(Raising())
    with pytest.raises(TypeError):
        amso.from_dlpack(BadDevice())
    intact(a)


# --- __cuda_array_interface__ import: (id, interface value, error, message) ---
INTERFACES = [
    ("not-a-dict", [1, 2], TypeError, "must be a dict"),
    ("missing-shape", interface(shape=...), TypeError, "has no `shape`"),
    ("missing-typestr", interface(typestr=...), TypeError, "has no `typestr`"),
    ("missing-data", interface(data=...), TypeError, "has no `data`"),
    ("shape-not-ints", interface(shape=("a",)), TypeError, r"\['shape'\] must be a tuple of ints"),
    ("shape-empty", interface(shape=()), ValueError, "ndim 0 is outside"),
    ("shape-negative", interface(shape=(2, -1)), ValueError, "negative dimension -1"),
    ("data-not-a-pair", interface(data=12345), TypeError, r"\['data'\] must be a \(pointer, read_only\) tuple"),
    ("data-pointer-negative", interface(data=(-8, False)), OverflowError, r"\['data'\] must be"),
    ("typestr-unknown", interface(typestr="<f3"), TypeError, "typestr \"<f3\" is not a dtype amso knows"),
    ("typestr-not-a-string", interface(typestr=4), TypeError, r"\['typestr'\] must be a str"),
    ("strides-not-contiguous", interface(shape=(2, 2), strides=(4, 8)), BufferError, "C-contiguous"),
    ("strides-short", interface(shape=(2, 2), strides=(8,)), ValueError, "has 1 strides for 2 dimensions"),
    ("stream-not-an-int", interface(stream="default"), TypeError, r"\['stream'\] must be None or an int"),
]


@pytest.mark.parametrize("case, value, error, message", INTERFACES, ids=[c[0] for c in INTERFACES])
def test_hostile_interface_dicts(case, value, error, message):
    a = witness()
    with pytest.raises(error, match=message):
        amso.asarray(Interface(value))
    intact(a)


def test_interface_address_that_is_not_device_memory():
    error, message = (ValueError, "is not CUDA device memory") if GPU else NO_DRIVER
    with pytest.raises(error, match=message):
        amso.asarray(Interface(interface()))


# --- __dlpack__ arguments a consumer may get wrong: (id, kwargs, error, message) ---
EXPORTS = [
    ("stream-below-minus-one", dict(stream=-2), ValueError, "stream -2 is not a valid"),
    ("stream-on-host", dict(stream=5), ValueError, "stream must be None for a host"),
    ("stream-not-an-int", dict(stream="s"), TypeError, "cannot be interpreted as an integer"),
    ("max-version-string", dict(max_version="1.0"), TypeError, "must be a \\(major, minor\\) tuple"),
    ("max-version-short", dict(max_version=(1,)), TypeError, "must be a \\(major, minor\\) tuple"),
    ("max-version-negative", dict(max_version=(-1, 0)), TypeError, "tuple of ints, got \\(-1, 0\\)"),
    ("max-version-huge", dict(max_version=(1 << 70, 0)), TypeError, "tuple of ints, got \\(1180591620717411303424, 0\\)"),
    ("max-version-past-u32", dict(max_version=(1, 1 << 32)), TypeError, "tuple of ints, got \\(1, 4294967296\\)"),
    ("max-version-floats", dict(max_version=(1.0, 0)), TypeError, "tuple of ints, got \\(1.0, 0\\)"),
    ("dl-device-unknown", dict(dl_device=(99, 0)), BufferError, "cannot export to dl_device=\\(99, 0\\)"),
    ("dl-device-host-id", dict(dl_device=(1, 5)), BufferError, "host devices have id 0 only"),
    ("dl-device-cuda-host-unpinned", dict(dl_device=(3, 0)), BufferError, "pinned=True"),
    ("dl-device-not-a-pair", dict(dl_device=2), TypeError, "not an instance of 'tuple'"),
    ("copy-not-a-bool", dict(copy="yes"), TypeError, "not an instance of 'bool'"),
    ("unknown-keyword", dict(device="cpu"), TypeError, "unexpected keyword"),
]


@pytest.mark.parametrize("case, kwargs, error, message", EXPORTS, ids=[c[0] for c in EXPORTS])
def test_bad_dlpack_requests(case, kwargs, error, message):
    a = witness()
    with pytest.raises(error, match=message):
        a.__dlpack__(**kwargs)
    intact(a)


# The same bad values through one call site that a good call warmed first: `__dlpack__`'s fast
# entry knows a call site's keyword names by their tuple, and must still read every value.
WARM = [
    ("stream", 5, ValueError, "stream must be None for a host"),
    ("stream", "s", TypeError, "cannot be interpreted as an integer"),
    ("max_version", "1.0", TypeError, "must be a \\(major, minor\\) tuple"),
    ("max_version", (-1, 0), TypeError, "tuple of ints, got \\(-1, 0\\)"),
    ("max_version", (1.0, 0), TypeError, "tuple of ints, got \\(1.0, 0\\)"),
    ("copy", "yes", TypeError, "not an instance of 'bool'"),
]


@pytest.mark.parametrize("keyword, bad, error, message", WARM, ids=[f"{w[0]}-{w[1]!r}" for w in WARM])
def test_bad_dlpack_values_at_a_call_site_a_good_call_warmed(keyword, bad, error, message):
    a = witness()
    good = {"stream": None, "max_version": (1, 0), "copy": None}
    for value in (good[keyword], bad, good[keyword]):
        kwargs = {**good, keyword: value}
        if value is bad:
            with pytest.raises(error, match=message):
                a.__dlpack__(stream=kwargs["stream"], max_version=kwargs["max_version"], copy=kwargs["copy"])
        else:
            a.__dlpack__(stream=kwargs["stream"], max_version=kwargs["max_version"], copy=kwargs["copy"])
    intact(a)


def test_cuda_dl_device_without_a_driver_or_copy():
    a = witness()
    with pytest.raises(BufferError, match="that needs a copy, but copy=False"):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    intact(a)


# --- Locks: another context, a stale id, unbalanced exits ---
def test_locked_array_touched_from_another_context():
    a = witness()
    with a.get_dlpack() as first:
        view = np.from_dlpack(first)
        with pytest.raises(BufferError, match="locked"):
            a[0, 0] = 99.0
        with pytest.raises(BufferError, match="locked"):
            a.read_numpy_array(np.zeros((2, 3)))
        with pytest.raises(BufferError, match="locked"):
            a.__dlpack__()
        with pytest.raises(BufferError, match="locked"):
            a.get_dlpack().__enter__()
        errors = []

        def other_thread():
            try:
                a[1, 1] = -1.0
            except BufferError as error:
                errors.append(error)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert len(errors) == 1
        del view
    intact(a)


def test_stale_and_unbalanced_contexts():
    a = witness()
    context = a.get_dlpack()
    with context:
        pass
    with pytest.raises(BufferError, match="not entered"):
        context.__exit__(None, None, None)  # exited twice
    with context:  # like a lock, a context can be entered again once released
        assert a.locked
    with pytest.raises(BufferError, match="not entered"):
        amso.MemArray(2, np.float32).get_dlpack().__exit__(None, None, None)  # never entered
    intact(a)


# --- The Python API ---
def _move_while_viewed(a):
    with memoryview(a):
        a.move_memory(amso.dlpack.kDLCUDA)


def _typed_argument(a):
    ue = pytest.importorskip("amso_user_example")
    ue.deposit(a, a, 1.0)  # positions must be float32 (n, 3)


PYTHON_API = [
    # NumPy's habits (issue 56): conversions, methods and ufuncs refuse as NumPy does, or name the NumPy way.
    ("bool-of-many-elements", lambda a: bool(a), ValueError, re.escape("np.asarray(a).any()")),
    ("float-of-many-elements", lambda a: float(a), TypeError, "arrays can be converted to Python scalars"),
    ("numpy-method-amso-leaves-to-numpy", lambda a: a.sort(), AttributeError, re.escape("np.asarray(a).sort()")),
    ("fill-with-two-values", lambda a: a.fill(1, 2), TypeError, r"fill\(\) takes one value"),
    ("numpy-attribute-of-a-foreign-object", lambda a: vars(amso._amso.MemArrayBase)["sum"].__get__(object(), object),
     TypeError, "is not an instance of 'MemArrayBase'"),
    ("ufunc-into-a-read-only-output", lambda a: np.add(a, 1, out=amso.MemArray((2, 3), np.float64, readonly=True)),
     ValueError, "read-only"),
    ("non-native-byte-order", lambda a: amso.MemArray(3, ">f8"), ValueError, "big-endian"),
    ("array-conversion-without-copy", lambda a: a.__array__(np.int8, copy=False), ValueError, "needs a copy, but copy=False"),
    ("move-while-a-buffer-lives", _move_while_viewed, BufferError, "1 live buffer export"),
    ("stream-object-returns-junk", lambda a: a.move_memory(1, stream=type("S", (), {"__cuda_stream__": lambda s: None})()),
     TypeError, "must return a \\(version, handle\\) tuple"),
    ("typed-argument-wrong-dtype", _typed_argument, TypeError, "expected a float32 array with 2 dimensions, got a float64"),
    ("rebuild-short-data", lambda a: amso._amso._amso_rebuild("float64", (2, 3), False, False, None, b"short"),
     ValueError, "holds 5 bytes, but a float64 array of shape \\[2, 3\\] needs 48"),
    ("read-wrong-shape", lambda a: a.read_numpy_array(np.zeros((3, 2))), ValueError, "shape"),
    ("read-wrong-dtype", lambda a: a.read_numpy_array(np.zeros((2, 3), np.complex128)), TypeError, "cannot cast complex128 to float64"),
    ("read-not-an-array", lambda a: a.read_numpy_array("abc"), ValueError, "shape mismatch"),
    ("move-unknown-device", lambda a: a.move_memory(42), ValueError, "unsupported device type 42"),
    ("move-negative-id", lambda a: a.move_memory(1, -1), ValueError, "device id 0 only, got -1"),
    ("set-array-value", lambda a: a.__setitem__((0, 0), np.zeros(2)), TypeError, "expected a number"),
    ("set-string-index", lambda a: a.__setitem__("x", 1.0), TypeError, "NumPy's basic indices"),
    ("asarray-ragged", lambda a: amso.asarray([[1.0, 2.0], [3.0]]), ValueError, "inhomogeneous shape"),
    ("asarray-object", lambda a: amso.asarray([object()]), TypeError, "dtype object with ndim 1"),
    ("from-dlpack-copy-not-bool", lambda a: amso.from_dlpack(np.zeros(3), copy="no"), TypeError, "not an instance of 'bool'"),
    ("class-for-string-shape", lambda a: amso.class_for("abc", np.float32), TypeError, "got str"),
    ("empty-negative", lambda a: amso.empty((-1,), np.float32), ValueError, "negative dimension"),
    ("empty-string-shape", lambda a: amso.empty("abc", np.float32), TypeError, "shape must be an integer or a sequence"),
    ("empty-string-dimension", lambda a: amso.empty([2, "3"], np.float32), TypeError, "shape dimensions must be integers, got str"),
    ("empty-unknown-dtype", lambda a: amso.empty(2, "float17"), TypeError, "unknown dtype 'float17'"),
    ("empty-uncompiled-ndim", lambda a: amso.empty((1,) * 9, np.float32), TypeError, "no compiled array for dtype float32 with ndim 9"),
    ("empty-device-id-not-int", lambda a: amso.empty(2, np.float32, "0"), TypeError, "device_id must be an int, got str"),
    ("empty-device-id-negative", lambda a: amso.empty(2, np.float32, -1), ValueError, "device_id must be >= 0"),
    ("empty-device-id-too-large", lambda a: amso.empty(2, np.float32, 2**40), OverflowError, r"device_id must be a device ordinal \(0 to 2147483647\), got 1099511627776"),
    ("memory-info-device-id-negative", lambda a: amso.memory_info(-1), ValueError, "device_id must be >= 0, got -1"),
    ("dlpack-device-id-negative", lambda a: a.__dlpack__(dl_device=(2, -1)), BufferError, r"dl_device=\(2, -1\): device_id must be >= 0"),
    ("move-cuda-name-negative", lambda a: a.move_memory("cuda:-1"), ValueError, "unknown device 'cuda:-1'"),
    ("memarray-flag-not-bool", lambda a: amso.MemArray(2, np.float32, pinned="yes"), TypeError, "pinned must be a bool, got str"),
    ("empty-on-device-not-bool", lambda a: amso.empty(2, np.float32, on_device="yes"), TypeError, "on_device must be a bool, got str"),
    ("memarray-shape-overflow", lambda a: amso.MemArray((1 << 62, 1 << 62), np.float64), ValueError, "too big"),
    # One rule for zero-size shapes with a huge dimension, whatever the order of the dims.
    ("constructor-zero-then-huge", lambda a: type(a)((0, 2**63 - 1)), ValueError, "too big"),
    ("constructor-huge-then-zero", lambda a: type(a)((2**63 - 1, 0)), ValueError, "too big"),
    ("memarray-zero-then-huge", lambda a: amso.MemArray((0, 1 << 61), np.float64), ValueError, "too big"),
    ("rebuild-zero-then-huge", lambda a: amso._amso._amso_rebuild("float64", (0, 2**63 - 1), False, False, None, b""),
     ValueError, "needs more than any address space"),
    # Messages give the real ndim, however many dimensions a shape has.
    ("constructor-ndim-1000000", lambda a: type(a)((1,) * 1_000_000), ValueError, "ndim 1000000 is outside amso's 1..=8"),
    ("constructor-ndim-1000000-list", lambda a: type(a)([1] * 1_000_000), ValueError, "ndim 1000000 is outside"),
    ("constructor-ndim-1000000-iterator", lambda a: type(a)(iter([1] * 1_000_000)), ValueError, "ndim 1000000 is outside"),
    ("empty-ndim-1000000", lambda a: amso.empty((1,) * 1_000_000, np.float32), TypeError,
     "no compiled array for dtype float32 with ndim 1000000"),
    ("stream-context-not-a-stream", lambda a: amso.cuda.stream("fast").__enter__(), TypeError, "expected a stream handle"),
    ("stream-context-negative", lambda a: amso.cuda.stream(-5).__enter__(), ValueError, "stream -5 is not a CUDA stream"),
    ("set-allocator-not-callable", lambda a: amso.set_allocator(1, 2), TypeError, "callable"),
    ("set-allocator-half", lambda a: amso.set_allocator(lambda *x: 0, None), ValueError, "both malloc and free"),
    ("deferred-limits-negative", lambda a: amso.deferred_limits(count=-1), OverflowError, "negative int"),
    ("deferred-limits-fraction", lambda a: amso.deferred_limits(fraction=1.5), ValueError, "fraction"),
    ("release-threshold-negative", lambda a: amso.set_release_threshold(-5), OverflowError, "negative int"),
    ("cache-limit-negative", lambda a: amso.set_cache_limit(-5), OverflowError, "negative int"),
    ("cupy-hooks-not-a-capsule", lambda a: amso._amso._cupy_hooks(object(), MemoryError), TypeError,
     r"expected cupy_backends.cuda.stream.__pyx_capi__\['get_stream_ptr'\]"),
    ("cupy-hooks-foreign-capsule", lambda a: amso._amso._cupy_hooks(amso._amso._C_API, MemoryError), TypeError,
     "a capsule named"),
    ("rmm-hooks-device-negative", lambda a: amso._amso._RmmHooks(-1), ValueError, "device_id must be >= 0, got -1"),
    ("pool-pair-client-unknown", lambda a: amso._amso._pool_pair_ns(256, 1, 9, 1), ValueError,
     "client 9 is not one of amso's plug-in clients"),
    # Each class's own DLPack descriptors refuse another class's instance (the witness is 2-D float64).
    ("dlpack-descriptor-foreign-instance", lambda a: type(amso.MemArray(2, np.int32)).__dlpack__(a),
     TypeError, "MemArray1DInt32"),
    ("dlpack-device-descriptor-foreign-instance", lambda a: type(amso.MemArray(2, np.int32)).__dlpack_device__(a),
     TypeError, "MemArray1DInt32"),
    ("dlpack-descriptor-not-an-array", lambda a: type(a).__dlpack__(np.zeros(2)), TypeError, "ndarray"),
    # Shared-array handles, refused before any driver call (test_share.py has the rest).
    ("share-a-host-array", lambda a: a.share(), ValueError, "this array's data is on the host"),
    ("handle-from-junk", lambda a: amso.cuda.SharedHandle.from_bytes(b"junk"), ValueError, "not an amso shared-array handle"),
    ("handle-describes-too-much", lambda a: _own_handle(dims=(3, 3), dtype=b"float64").open(), ValueError,
     "more than the 16 bytes it shares"),
    ("handle-negative-dims", lambda a: _own_handle(dims=(3, -2)).open(), ValueError,
     r"shape \[3, -2\], with a negative dimension \(-2\)"),
    ("handle-forged-serial", lambda a: _own_handle(serial=99999).open(), ValueError,
     f"process {os.getpid()} has no shared array 99999 matching this handle"),
    ("handle-of-another-user", lambda a: amso.cuda.SharedHandle.from_bytes(handle_bytes(uid=UID + 1)).open(),
     PermissionError, "amso opens only its own user's shares"),
    # Memory that is read-only leaves only through paths that can say so.
    ("dlpack-legacy-read-only", lambda a: amso.MemArray(2, np.float64, readonly=True).__dlpack__(), BufferError,
     "read-only, which a legacy"),
]


def _own_handle(serial=1, **description):
    """A handle naming this process as its exporter, written field by field."""
    return amso.cuda.SharedHandle.from_bytes(handle_bytes(pid=os.getpid(), serial=serial, **description))


@pytest.mark.parametrize("case, action, error, message", PYTHON_API, ids=[c[0] for c in PYTHON_API])
def test_bad_python_api_calls(case, action, error, message):
    a = witness()
    with pytest.raises(error, match=message):
        action(a)
    intact(a)


def test_an_endless_shape_is_counted_until_interrupted():
    """A shape longer than 8 is counted for its message, not stored; an endless one stops at a
    signal (Ctrl-C's path) instead of hanging."""
    import itertools
    import signal

    def stop(*_):
        raise TimeoutError("the count was interrupted")

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(TimeoutError, match="interrupted"):
            type(witness())(itertools.repeat(1))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- Pickles that were truncated or altered: (id, how to damage a pickle of witness(), error) ---
FIELDS = ("dtype", "shape", "readonly", "pinned", "device", "data", "class")


def _altered(**changes):
    """A pickle of witness()'s own reduce, with some of its rebuild arguments changed; it is
    pickled as a plain (function, arguments) tuple so the change survives to the rebuild."""
    def damage(_payload: bytes) -> bytes:
        function, arguments = witness().__reduce_ex__(4)
        arguments = dict(zip(FIELDS, arguments), **changes)
        return pickle.dumps((function, tuple(arguments[f] for f in FIELDS)), protocol=4)
    return damage


PICKLES = [
    ("truncated", lambda payload: payload[: len(payload) // 2], (pickle.UnpicklingError, EOFError), None),
    ("empty", lambda payload: b"", EOFError, "Ran out of input"),
    ("dtype-renamed", lambda payload: payload.replace(b"float64", b"float65", 1), TypeError,
     "cannot unpickle: amso has no compiled array for dtype float65 with ndim 2: amso's dtypes are"),
    ("dtype-uncompiled", _altered(dtype="int4", shape=(2, 3)), TypeError, "no compiled array for dtype int4 with ndim 2"),
    ("shape-grown", _altered(shape=(2, 4)), ValueError, r"holds 48 bytes, but a float64 array of shape \[2, 4\] needs 64"),
    ("shape-negative", _altered(shape=(-2, 3)), ValueError, "negative dimension -2"),
    ("shape-huge", _altered(shape=(1 << 62, 1 << 62)), ValueError, "needs more than any address space"),
    ("shape-ndim-9", _altered(shape=(1,) * 9), ValueError, "ndim 9 is outside"),
    ("shape-ndim-1000000", _altered(shape=(1,) * 1_000_000), ValueError, "ndim 1000000 is outside amso's 1..=8"),
    # A zero dimension does not excuse a huge one, in either order (NumPy's rule).
    ("shape-zero-then-huge", _altered(shape=(0, 2**63 - 1), data=b""), ValueError, "needs more than any address space"),
    ("shape-huge-then-zero", _altered(shape=(2**63 - 1, 0), data=b""), ValueError, "needs more than any address space"),
    ("shape-not-ints", _altered(shape=("2", 3)), TypeError, "shape dimensions must be integers"),
    ("data-short", _altered(data=bytes(40)), ValueError, "holds 40 bytes, but a float64 array of shape \\[2, 3\\] needs 48"),
    ("data-not-bytes", _altered(data=7), TypeError, "must be a bytes-like object, got int"),
    ("flag-not-bool", _altered(readonly="yes"), TypeError, "readonly"),
    ("device-not-int", _altered(device="cuda"), TypeError, "device"),
    ("class-unknown", _altered(**{"class": "NoSuchClass"}), None, None),  # falls back to the dtype's class
]


# Zero-size shapes with huge dimensions, each also in another order of its dims.
ZERO_SIZE_SHAPES = [(0, 2**63 - 1), (2**63 - 1, 0), (0, 2**62), (2**62, 0), (0, 2**61, 4), (2**61, 4, 0), (4, 0, 2**61)]


@pytest.mark.parametrize("dtype", ["uint8", "float32", "float64"])
@pytest.mark.parametrize("shape", ZERO_SIZE_SHAPES, ids=str)
def test_zero_size_shapes_follow_numpy(shape, dtype):
    """NumPy is the reference: amso.empty and a pickle's rebuild accept exactly the zero-size
    shapes np.empty accepts, whatever the order of the dims; an accepted one's byte strides
    are its C-order strides (a zero dimension counts as 1), exact in Python's integers."""
    try:
        np.empty(shape, dtype)
        accepted = True
    except ValueError:
        accepted = False
    itemsize = np.dtype(dtype).itemsize
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.insert(0, step)
        step *= max(dim, 1)
    for make in (lambda: amso.empty(shape, dtype), lambda: amso._amso._amso_rebuild(dtype, shape, False, False, None, b"")):
        if not accepted:
            with pytest.raises(ValueError, match="too big|more than any address space"):
                make()
        else:
            a = make()
            assert a.shape == shape and a.nbytes == 0
            assert memoryview(a).strides == tuple(strides)


def _rebuilt(payload: bytes):
    """Unpickle `payload`, where a plain tuple (function, arguments) stands for a reduce."""
    loaded = pickle.loads(payload)
    return loaded[0](*loaded[1]) if isinstance(loaded, tuple) else loaded


@pytest.mark.parametrize("case, damage, error, message", PICKLES, ids=[c[0] for c in PICKLES])
def test_damaged_pickles_are_refused(case, damage, error, message):
    a = witness()
    if error is None:  # harmless damage: the array comes back as it was
        np.testing.assert_array_equal(_rebuilt(damage(pickle.dumps(a, protocol=2))).to_numpy(), a.to_numpy())
    else:
        with pytest.raises(error, match=message):
            _rebuilt(damage(pickle.dumps(a, protocol=2)))
    intact(a)


IMPOSTORS = impostors()


@pytest.mark.parametrize("case, impostor", IMPOSTORS, ids=[case for case, _ in IMPOSTORS])
def test_impostors_from_python_through_the_c_functions(case, impostor):
    a = witness()
    get_handle, dltensor, managed = amso_c_functions()
    handle = ctypes.c_void_p()
    assert get_handle(impostor, ctypes.byref(handle)) == 2  # AMSO_ERR_NOT_AN_AMSO_ARRAY
    with pytest.raises(TypeError, match="is not an amso array"):
        dltensor(impostor, ctypes.byref(DLTensor()))
    # The owning export too, whatever the object's type copied of amso's (its table, its
    # type capsule): a TypeError naming the object, never its missing __dlpack__.
    tensor = ctypes.c_void_p()
    with pytest.raises(TypeError, match="is not an amso array"):
        managed(impostor, ctypes.byref(tensor))
    assert tensor.value is None
    intact(a)


# --- typed arguments read at the C level: hostile buffer exporters, NumPy oddities ---

def _hostile_buffers(tmp_path_factory):
    """tests/c/hostile_buffers.c, built as an extension module with cc."""
    import importlib.util
    import shutil
    import subprocess
    import sysconfig
    from pathlib import Path

    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = Path(__file__).resolve().parents[1] / "c" / "hostile_buffers.c"
    output = tmp_path_factory.mktemp("hostile") / ("hostile_buffers" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
                    f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(output)], check=True)
    spec = importlib.util.spec_from_file_location("hostile_buffers", output)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hostile_buffers(tmp_path_factory):
    return _hostile_buffers(tmp_path_factory)


# (id, exporter kind, error, message): each refused with the argument named, nothing written,
# every buffer taken released.
BUFFERS = [
    ("itemsize-lie", "itemsize", ValueError, "format \"d\" describes 8-byte items, but its itemsize is 4"),
    ("length-lie", "length", ValueError, "shape \\[8\\] of 8-byte items is not its length of 72 bytes"),
    ("format-struct", "format-struct", TypeError, "has format \"T\\{d:x:\\}\", which is not one number"),
    ("format-big-endian", "format-big", TypeError, "has format \">d\", which is big-endian"),
    ("shape-null", "no-shape", ValueError, "ndim 1 without a shape"),
    ("shape-negative", "negative-dim", ValueError, "a negative dimension -8"),
    ("suboffsets", "suboffsets", TypeError, "indirect \\(PIL-style suboffsets\\)"),
    ("stride-misfit", "stride-misfit", ValueError, "stride of 4 bytes on axis 0 is not a multiple of its itemsize"),
    ("export-raises", "raises", RuntimeError, "the exporter refused to export"),
    ("readonly-as-writable", "readonly", ValueError, "expected a writable float64 array, got a read-only one"),
]


@pytest.mark.parametrize("case, kind, error, message", BUFFERS, ids=[c[0] for c in BUFFERS])
def test_hostile_buffer_exporters(case, kind, error, message, hostile_buffers):
    ue = pytest.importorskip("amso_user_example")
    exporter = hostile_buffers.Exporter(kind, 8)
    with pytest.raises(error, match=message) as raised:
        ue.while_writing(exporter, lambda: pytest.fail("the argument was accepted"))
    assert "while processing 'x'" in raised.value.__notes__
    assert exporter.values() == [float(i) for i in range(8)]
    gets, releases = exporter.counts()
    assert gets == releases and gets == (0 if kind == "raises" else 1)
    assert amso._amso._live_borrows() == 0


def test_honest_buffer_exporters_are_read_and_written_in_place(hostile_buffers):
    ue = pytest.importorskip("amso_user_example")
    exporter = hostile_buffers.Exporter("honest", 8)
    assert ue.sum_any(exporter) == 28.0
    ue.while_writing(exporter, lambda: None)
    assert exporter.counts() == (2, 2)
    readonly = hostile_buffers.Exporter("readonly", 8)
    assert ue.sum_any(readonly) == 28.0, "a read-only buffer is fine for reading"


def test_strided_buffer_views_are_read_in_place():
    """PEP 3118 gives a strided view's logical size as its length, so a step or a reversal
    reaches outside it: its strides are read as the exporter gives them, as NumPy reads them."""
    ue = pytest.importorskip("amso_user_example")
    values = np.arange(10.0)
    for view in (memoryview(values)[::2], memoryview(values)[::-1], memoryview(values)[7:1:-3]):
        assert ue.sum_any(view) == sum(view.tolist()) == ue.sum_any(np.asarray(view))
    assert amso._amso._live_borrows() == 0


class _LyingSubclass(np.ndarray):
    """A NumPy subclass whose Python-level protocols lie: amso reads the array struct."""

    @property
    def shape(self):
        return (99,)

    def __dlpack__(self, **_):
        raise RuntimeError("never called")

    def __array__(self, *_, **__):
        raise RuntimeError("never called")


NUMPY_ODDITIES = [
    ("big-endian", lambda: np.arange(4.0).astype(">f8"), ValueError, "is big-endian \\(dtype '>f8'\\); .*newbyteorder"),
    # A typed argument names both sides (issue 39: object arrays are an element kind of their own).
    ("object-dtype", lambda: np.array([1.0, None]), TypeError, "expected a writable float64 array, got an object array"),
    ("long-double", lambda: np.zeros(3, np.longdouble), TypeError, "has no DLPack type"),
    ("readonly", lambda: np.frombuffer(bytes(32), np.float64), ValueError, "got a read-only one"),
    # Issue 40: a structured array is a record array, never reinterpreted as another dtype.
    ("structured", lambda: np.zeros(3, [("a", "<f8"), ("b", "<f8")]), TypeError,
     "expected a writable float64 array, got a record array"),
    ("plain-void", lambda: np.zeros(3, "V8"), TypeError, "has no DLPack type"),
]


@pytest.mark.parametrize("case, make, error, message", NUMPY_ODDITIES, ids=[c[0] for c in NUMPY_ODDITIES])
def test_numpy_arrays_amso_cannot_take(case, make, error, message):
    ue = pytest.importorskip("amso_user_example")
    x = make()
    before = x.copy()
    with pytest.raises(error, match=message) as raised:
        ue.while_writing(x, lambda: pytest.fail("the argument was accepted"))
    assert "while processing 'x'" in raised.value.__notes__
    np.testing.assert_array_equal(x, before)
    assert amso._amso._live_borrows() == 0


def test_numpy_subclasses_are_read_from_the_array_struct(tmp_path):
    ue = pytest.importorskip("amso_user_example")
    x = np.arange(6.0).reshape(2, 3).view(_LyingSubclass)
    assert ue.sum_any(x) == 15.0
    ue.while_writing(x, lambda: None)
    mapped = np.memmap(tmp_path / "values", dtype=np.float64, mode="w+", shape=(4,))
    mapped[:] = [1.0, 2.0, 3.0, 4.0]
    assert ue.sum_any(mapped) == 10.0 and ue.sum_any(mapped[::-1]) == 10.0
    masked = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    assert ue.sum_any(masked) == 6.0, "a masked array's data, mask ignored (as np.asarray does)"
    assert amso._amso._live_borrows() == 0


# --- an op's eager entry (`#[amso_macros::op]`, docs/ops.md): (id, call on the witnesses, error, message) ---
# `x` is 6 float64 values and `out` an output of the same shape (running_sum); `p` and `moved`
# are 4 float32 particles (drift). Each refusal leaves every argument as it was.
OPS = [
    ("op-dtype", lambda ue, w: ue.running_sum(w["x"].astype(np.float32), w["out"], False, -1), TypeError,
     "argument 'x'.*float64"),
    ("op-rank", lambda ue, w: ue.running_sum(w["x"].reshape(2, 3), w["out"], False, -1), TypeError, "argument 'x'"),
    ("op-output-shape", lambda ue, w: ue.running_sum(w["x"], w["out"][:4], False, -1), ValueError,
     r"running_sum\(\): .*'out'"),
    ("op-strided-output", lambda ue, w: ue.drift(w["p"], w["v"], w["wide"][:, ::2], 0.1, 10.0), ValueError,
     "argument 'moved': drift.. takes arrays in C order"),
    ("op-readonly-output", lambda ue, w: ue.running_sum(w["x"], np.frombuffer(bytes(48), np.float64), False, -1),
     ValueError, "read-only"),
    ("op-output-is-input", lambda ue, w: ue.running_sum(w["x"], w["x"], False, -1), BufferError,
     "argument 'out': the array overlaps another array argument"),
    ("op-int-attr-float", lambda ue, w: ue.running_sum(w["x"], w["out"], False, 1.7), TypeError, "int"),
    ("op-bool-attr-none", lambda ue, w: ue.running_sum(w["x"], w["out"], None, -1), TypeError, "bool"),
    ("op-missing-argument", lambda ue, w: ue.running_sum(w["x"], w["out"], False), TypeError, "panic_at"),
    ("op-function-error", lambda ue, w: ue.drift(w["p"], w["v"], w["moved"], 0.1, -1.0), RuntimeError,
     r"drift\(\): .*box_size"),
    ("op-panic", lambda ue, w: ue.running_sum(w["x"], w["out"], False, 2), RuntimeError,
     r"running_sum\(\) panicked: running_sum was asked to panic at index 2"),
]

OP_ATTRIBUTES = {"op-int-attr-float": "panic_at", "op-bool-attr-none": "reverse"}


@pytest.mark.parametrize("case, call, error, message", OPS, ids=[c[0] for c in OPS])
def test_an_ops_eager_entry_refuses_bad_input_and_keeps_its_arguments(case, call, error, message):
    ue = pytest.importorskip("amso_user_example")
    witnesses = {"x": np.arange(6.0) + 0.5, "out": np.full(6, -1.0), "p": np.full((4, 3), 1.5, np.float32),
                 "v": np.full((4, 3), 0.25, np.float32), "moved": np.full((4, 3), -1.0, np.float32),
                 "wide": np.full((4, 6), -1.0, np.float32)}
    before = {name: array.copy() for name, array in witnesses.items()}
    with pytest.raises(error, match=message) as raised:
        call(ue, witnesses)
    if case in OP_ATTRIBUTES:  # PyO3's conversion error, its argument named in a note
        assert raised.value.__notes__ == [f"while processing '{OP_ATTRIBUTES[case]}'"]
    for name, array in witnesses.items():
        if case != "op-panic" or name != "out":  # a panicking function may have written part of its output
            np.testing.assert_array_equal(array, before[name], err_msg=f"{case} changed {name}")
    assert amso._amso._live_borrows() == 0
    ue.running_sum(witnesses["x"], witnesses["out"], False, -1)  # the entry still works afterwards
    np.testing.assert_array_equal(witnesses["out"], np.cumsum(witnesses["x"]))


# --- Results built in the caller's framework (NewArray::from_vec2, from_vec3, resize), through
# the benchmark crate's functions: (id, call, error, message) ---
NEW_ARRAYS = [
    ("from-vec2-ragged", lambda p, like: p.from_vec2_like(like, [[1.0, 2.0], [3.0]]), ValueError,
     "from_vec2 needs rows of one length: row 0 has 2 elements, row 1 has 1"),
    ("from-vec3-ragged", lambda p, like: p.from_vec3_like(like, [[[1, 2]], [[3]]]), ValueError,
     r"row \[0\]\[0\] has 2 elements, row \[1\]\[0\] has 1"),
    ("from-vec2-not-numbers", lambda p, like: p.from_vec2_like(like, [["a"]]), TypeError, "must be real number, not str"),
    ("resize-beyond-i64", lambda p, like: p.resized_like(like, [[1.0]], [2**64 - 1, 0]), ValueError,
     r"too big: shape \[18446744073709551615, 0\]"),
    ("resize-overflowing-bytes", lambda p, like: p.resized_like(like, [[1.0]], [1 << 62, 4]), ValueError, "too big"),
    ("resize-negative", lambda p, like: p.resized_like(like, [[1.0]], [-1, 2]), OverflowError, "can't convert negative int to unsigned"),
]


@pytest.mark.parametrize("framework", ["numpy", "amso"])
@pytest.mark.parametrize("case, call, error, message", NEW_ARRAYS, ids=[c[0] for c in NEW_ARRAYS])
def test_new_arrays_refuse_bad_input_and_leave_the_callers_array(case, call, error, message, framework):
    peers = pytest.importorskip("amso_peers")
    kept = witness()
    like = np.zeros(1) if framework == "numpy" else amso.asarray(np.zeros(1))
    with pytest.raises(error, match=message):
        call(peers, like)
    intact(kept)
    np.testing.assert_array_equal(np.asarray(like), np.zeros(1))
    assert amso._amso._live_borrows() == 0
    np.testing.assert_array_equal(peers.resized_like(like, [[1.0, 2.0]], [2, 2]), [[1.0, 2.0], [0.0, 0.0]])


def test_corpus_size():
    """The issue asks for at least 60 distinct cases across the paths; count them here."""
    from test_bad_input import test_bad_indices, test_bad_shapes, test_bad_values_keep_the_old_value

    parametrized = sum(len(m.args[1]) for f in (test_bad_shapes, test_bad_indices, test_bad_values_keep_the_old_value)
                       for m in f.pytestmark if m.name == "parametrize")
    here = len(CAPSULES) + len(INTERFACES) + len(EXPORTS) + len(PYTHON_API) + len(IMPOSTORS) + len(PICKLES) + 4
    here += len(BUFFERS) + len(NUMPY_ODDITIES) + len(OPS) + len(NEW_ARRAYS)
    assert here + parametrized >= 60, (here, parametrized)
