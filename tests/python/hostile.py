"""Hand-built DLPack tensors and interface dicts for the bad-input corpus: every field under
the test's control, the deleter counted, the memory owned by Python so nothing leaks."""

from __future__ import annotations

import ctypes

from test_dlpack import DLManagedTensorVersioned, DLTensor

pythonapi = ctypes.pythonapi
pythonapi.PyCapsule_New.restype = ctypes.py_object
pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Tensor:
    """One managed tensor (versioned unless `legacy`) over a ctypes buffer of `nbytes`."""

    def __init__(self, *, shape=(4,), strides=None, dtype=(2, 64, 1), device=(1, 0), ndim=None,
                 version=(1, 0), flags=0, legacy=False, nbytes=None, data="buffer", byte_offset=0,
                 shape_null=False, deleter=True):
        count = 1
        for d in shape:
            count *= max(d, 0)
        size = nbytes if nbytes is not None else max(count, 1) * max(dtype[1] // 8, 1)
        self.buffer = (ctypes.c_uint8 * max(size, 1))()
        self.shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
        self.deleted = 0
        self.legacy = legacy
        address = ctypes.addressof(self.buffer) if data == "buffer" else data
        t = DLTensor(
            data=address, device_type=device[0], device_id=device[1],
            ndim=len(shape) if ndim is None else ndim, code=dtype[0], bits=dtype[1], lanes=dtype[2],
            shape=None if shape_null else ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)),
            strides=None if self.strides is None else ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)),
            byte_offset=byte_offset,
        )
        self.callback = DELETER(self._delete)
        deleter_address = ctypes.cast(self.callback, ctypes.c_void_p).value if deleter else None
        if legacy:
            self.managed = DLManagedTensor(dl_tensor=t, deleter=deleter_address)
        else:
            self.managed = DLManagedTensorVersioned(major=version[0], minor=version[1], flags=flags,
                                                    dl_tensor=t, deleter=deleter_address)

    def _delete(self, _pointer):
        self.deleted += 1

    def capsule(self, name: bytes | None = None):
        if name is None:
            name = b"dltensor" if self.legacy else b"dltensor_versioned"
        # No capsule destructor: a refused tensor's deleter is amso's to call (the importer
        # owns a capsule it has renamed), an unconsumed one's is counted through `deleted`.
        return pythonapi.PyCapsule_New(ctypes.addressof(self.managed), name, None)

    def producer(self, name: bytes | None = None, device=None):
        tensor, capsule = self, self.capsule(name)

        class Producer:
            def __dlpack__(self, **_):
                return capsule

            def __dlpack_device__(self):
                return device if device is not None else (tensor.managed.dl_tensor.device_type,
                                                          tensor.managed.dl_tensor.device_id)

        return Producer()


class Interface:
    """An object whose `__cuda_array_interface__` is `value` (any object at all)."""

    def __init__(self, value):
        self.value = value

    @property
    def __cuda_array_interface__(self):
        return self.value


def interface(**fields):
    """A well-formed v3 interface dict for 4 float32 on a fake address, with `fields` changed
    (a field set to `...` is removed)."""
    d = {"shape": (4,), "typestr": "<f4", "data": (0x7F0000000000, False), "version": 3, "strides": None,
         "stream": None}
    for key, value in fields.items():
        if value is ...:
            del d[key]
        else:
            d[key] = value
    return d


# --- Objects that pretend to be amso arrays (the C ABI and the exchange API must say no) ---
class _FakeHeaderAttribute:
    _amso_header = 0x10  # once read and dereferenced as a header address


class _RaisingHeaderAttribute:
    @property
    def _amso_header(self):
        raise RuntimeError("boom")


class _HugeHeaderAttribute:
    _amso_header = 1 << 200
    __amso_type__ = 1 << 200


class _RaisingTypeAttribute(type):
    def __getattr__(cls, name):
        raise RuntimeError(f"no {name} here")


class _RaisingTypeMeta(metaclass=_RaisingTypeAttribute):
    pass


class DLPackExchangeAPI(ctypes.Structure):
    """DLPack 1.3's exchange table: a version header, then five function pointers."""

    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p),
                ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p), ("current_work_stream", ctypes.c_void_p)]


def amso_c_functions():
    """`amso_get_handle` and the exchange table's `dltensor_from_py_object_no_sync` and
    `managed_tensor_from_py_object_no_sync`, called from Python through ctypes (the GIL held, a
    raised exception propagated)."""
    import amso

    module = ctypes.PyDLL(amso._amso.__file__)
    get_handle = module.amso_get_handle
    get_handle.argtypes, get_handle.restype = [ctypes.py_object, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int
    table = DLPackExchangeAPI.from_address(type(amso.MemArray(1, "float32")).__c_dlpack_exchange_api__)
    dltensor = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))(
        table.dltensor_from_py_object_no_sync)
    managed = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        table.managed_tensor_from_py_object_no_sync)
    return get_handle, dltensor, managed


def impostors() -> list[tuple[str, object]]:
    """(id, object) pairs of non-arrays dressed up as amso arrays."""
    import amso

    real = type(amso.MemArray(2, "float32"))
    other_capsule = type("OtherCapsule", (), {"__amso_type__": real.__dlpack_c_exchange_api__})
    copied_capsule = type("CopiedCapsule", (), {"__amso_type__": real.__amso_type__})
    # A type that copied amso's exchange table, as a consumer finds it (type(x).__dlpack_c_exchange_api__).
    copied_table = type("CopiedTable", (), {"__dlpack_c_exchange_api__": real.__dlpack_c_exchange_api__})
    return [
        ("fake-header-attribute", _FakeHeaderAttribute()),
        ("raising-header-attribute", _RaisingHeaderAttribute()),
        ("huge-integer-attributes", _HugeHeaderAttribute()),
        ("raising-type-attribute", _RaisingTypeMeta()),
        ("capsule-of-another-name", other_capsule()),
        ("copied-amso-capsule", copied_capsule()),
        ("copied-exchange-table", copied_table()),
        ("the-class-itself", real),
        ("a-dlpack-capsule", amso.MemArray(2, "float32").__dlpack__()),
    ]
