"""Conformance matrix: every compiled (dtype, ndim) x consumer x path x stream value, checking
the values the consumer reads and that it reads amso's memory (zero-copy), plus regression
cases for the peers' known failure modes. A consumer's own dtype gaps are recorded as "n/a"
with its error, not as amso failures."""

from __future__ import annotations

import ctypes
from collections import Counter

import numpy as np

import amso


class Fixed:
    """Hands a consumer a capsule amso produced with a chosen stream value."""

    def __init__(self, capsule, device):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


class WithStream:
    """Passes the consumer's own __dlpack__ keywords through, replacing only `stream`."""

    def __init__(self, array, stream):
        self.array, self.stream = array, stream

    def __dlpack__(self, **kwargs):
        kwargs["stream"] = self.stream
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def expected_values(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Small values every dtype holds exactly, in the array's own dtype."""
    values = (np.arange(int(np.prod(shape))) % 7).reshape(shape)
    return values.astype(amso.MemArray(shape, name).dtype)


def host_of(result) -> tuple[np.ndarray, int]:
    """(values on the host, data pointer) of a consumer's array."""
    module = type(result).__module__.split(".")[0]
    if module == "torch":
        return result.cpu().numpy(), result.data_ptr()
    if module == "cupy":
        return result.get(), result.data.ptr
    if module in ("jax", "jaxlib"):
        return np.asarray(result), result.unsafe_buffer_pointer()
    if module == "numba":
        return result.copy_to_host(), result.device_ctypes_pointer.value
    return np.asarray(result), result.ctypes.data


def consumers():
    found = {}
    try:
        import torch

        found["torch"] = {
            "protocol": torch.from_dlpack,
            "legacy capsule": torch.utils.dlpack.from_dlpack,
            "interface": lambda obj: torch.as_tensor(obj, device="cuda"),
        }
    except ImportError:
        pass
    try:
        import cupy

        found["cupy"] = {"protocol": cupy.from_dlpack, "interface": cupy.asarray}
    except ImportError:
        pass
    try:
        import jax

        # Without x64, JAX turns 64-bit inputs into 32-bit copies; zero-copy needs it on.
        jax.config.update("jax_enable_x64", True)
        if any(d.platform == "gpu" for d in jax.devices()):
            found["jax"] = {"protocol": jax.dlpack.from_dlpack}
    except ImportError:
        pass
    try:
        from numba import cuda as numba_cuda

        found["numba"] = {"interface": numba_cuda.as_cuda_array}
    except ImportError:
        pass
    return found


def check(a, consume, expected, pointer):
    try:
        result = consume(a)
        values, data = host_of(result)
    except Exception as error:  # noqa: BLE001 - a consumer's unsupported dtype is recorded
        return "n/a", f"{type(error).__name__}: {str(error)[:80]}"
    try:
        same = values.shape == expected.shape and np.array_equal(values.astype(expected.dtype), expected)
    except (TypeError, ValueError):
        return "n/a", f"the consumer reads dtype {values.dtype} (no such type of its own)"
    if not same:
        return "FAIL", "values differ"
    if data != pointer:
        return "FAIL", "copied (pointer differs)"
    return "pass", ""


def run() -> dict:
    rows = []
    torch_stream = None
    try:
        import torch

        torch_stream = torch.cuda.Stream().cuda_stream
    except ImportError:
        pass
    peers = consumers()
    for name, ndim in amso.supported():
        shape = (3,) + (2,) * (ndim - 1)
        expected = expected_values(name, shape)
        source = amso.MemArray(shape, name)
        source.read_numpy_array(expected)
        if name != "bfloat16":  # NumPy has no bfloat16 DLPack import
            for path, consume in (("versioned", np.from_dlpack), ("legacy", lambda o: np.from_dlpack(Fixed(o.__dlpack__(), (1, 0))))):
                status, why = check(source, consume, expected, _header_data(source))
                rows.append((name, ndim, "numpy", path, "None", status, why))
        if not amso.cuda.is_available():
            continue
        device = amso.asarray(source, copy=True)
        device.move_memory(amso.dlpack.kDLCUDA)
        pointer = device.__cuda_array_interface__["data"][0]
        for consumer, paths in peers.items():
            for path, consume in paths.items():
                if path == "interface":
                    status, why = check(device, consume, expected, pointer)
                    rows.append((name, ndim, consumer, path, "interface v3", status, why))
                    continue
                for stream in (None, -1, torch_stream):
                    if path == "protocol":  # the consumer's own __dlpack__ call (its max_version), our stream
                        feed = lambda obj, s=stream, c=consume: c(WithStream(obj, s))  # noqa: E731
                    else:  # an explicit legacy capsule
                        feed = lambda obj, s=stream, c=consume: c(obj.__dlpack__(stream=s))  # noqa: E731
                    status, why = check(device, feed, expected, pointer)
                    rows.append((name, ndim, consumer, path, "handle" if stream and stream > 2 else str(stream), status, why))
        status, why = _c_exchange(device, pointer)
        rows.append((name, ndim, "C", "exchange API", "-", status, why))
    if amso.cuda.is_available():
        rows += regressions()
    counts = Counter(r[5] for r in rows)
    return {"rows": rows, "counts": dict(counts)}


def _header_data(array) -> int:
    """The data address amso's C header reports (field `data`, at offset 8)."""
    return ctypes.c_uint64.from_address(array._amso_header + 8).value


def _c_exchange(array, pointer):
    try:
        api = ctypes.pythonapi
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        table = api.PyCapsule_GetPointer(type(array).__dlpack_c_exchange_api__, b"dlpack_exchange_api")
        # DLPackExchangeAPI: header (16 bytes), then allocator, from_py, to_py, dltensor_from_py, stream.
        function = ctypes.cast(ctypes.c_void_p.from_address(table + 16 + 3 * 8).value,
                               ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p))
        tensor = (ctypes.c_uint8 * 48)()
        if function(array, ctypes.addressof(tensor)) != 0:
            return "FAIL", "dltensor_from_py_object_no_sync failed"
        data = ctypes.c_uint64.from_buffer(tensor).value
        return ("pass", "") if data == pointer else ("FAIL", "pointer differs")
    except Exception as error:  # noqa: BLE001
        return "FAIL", f"{type(error).__name__}: {error}"


def regressions():
    """The peers' known failures, each as a case amso must get right."""
    rows = []
    a = amso.MemArray(4, np.float32)
    view = np.from_dlpack(a)
    rows.append(("float32", 1, "numpy", "versioned import is writable", "-", "pass" if view.flags.writeable else "FAIL", "NumPy marks legacy imports read-only"))
    import warnings

    d = amso.MemArray(4, np.float32, on_device=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d.__dlpack__(stream=0)
    rows.append(("float32", 1, "producer", "stream=0 warns, means legacy", "0", "pass" if caught else "FAIL", ""))
    try:
        host = np.from_dlpack(d, device="cpu")
        ok = host.shape == (4,)
    except Exception:  # noqa: BLE001
        ok = False
    rows.append(("float32", 1, "numpy", "dl_device=(kDLCPU, 0) from CUDA copies", "-", "pass" if ok else "FAIL", ""))
    try:
        import torch

        side = torch.cuda.Stream()
        big = amso.MemArray((64, 256, 256), np.float32, on_device=True)
        for _ in range(3):
            big.add_index_tuple(stream=side.cuda_stream)
        consumer = torch.cuda.Stream()
        with torch.cuda.stream(consumer):
            total = torch.from_dlpack(big).double().sum()
        consumer.synchronize()
        reference = 3 * float(np.indices((64, 256, 256), dtype=np.float64).sum(axis=0).sum())
        rows.append(("float32", 3, "torch", "consumer on a side stream sees queued work", "handle", "pass" if abs(total.item() - reference) < 1e-6 * reference else "FAIL", ""))
    except ImportError:
        pass
    return rows


def markdown(report: dict) -> str:
    counts = report["counts"]
    lines = [f"Conformance: {counts.get('pass', 0)} pass, {counts.get('FAIL', 0)} fail, {counts.get('n/a', 0)} n/a "
             "(the consumer does not support the dtype).", "",
             "| dtype | ndim | consumer | path | stream | result | note |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {' | '.join(str(c) for c in row)} |" for row in report["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(run()))
