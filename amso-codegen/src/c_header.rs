//! `generated/amso.h`: what C, C++ and Cython read amso arrays with. The handle and its header
//! layout, the error codes, the getter table and `amso_import()`, the typed exports (through the
//! second table in a CPython extension, as symbols elsewhere), the spec's element types and
//! records as C types, and the DLPack C exchange API's declarations.

use std::fmt::Write as _;

use crate::{Spec, HEADER_NOTE};

/// The C header: the handle, error codes, the getter table and the typed exports.
pub fn c_header(spec: &Spec) -> String {
    let mut typed = String::new();
    let records = spec.record_instances().map(|(r, ndim)| (r.name.clone(), r.class_name(ndim), r.c_type(), ndim));
    let pairs = spec.instances().map(|(d, ndim)| (d.name.clone(), d.class_name(ndim), d.c.clone(), ndim));
    let mut inline = String::new();
    for (index, (name, class, c, ndim)) in pairs.chain(records).enumerate() {
        let stem = crate::spec::typed_stem(&name, ndim);
        let _ = write!(
            inline,
            "\n/* {name}, {ndim}-D ({class}). */\n\
             static inline int {stem}_handle(PyObject *object, amso_handle *out) {{ return amso_typed_api_table->exports[{index}].handle(object, out); }}\n\
             static inline int {stem}_data(PyObject *object, {c} **out) {{ return amso_typed_api_table->exports[{index}].data(object, (void **)out); }}\n\
             static inline int {stem}_shape(PyObject *object, const int64_t **out) {{ return amso_typed_api_table->exports[{index}].shape(object, out); }}\n",
        );
        let _ = write!(
            typed,
            "\n/* {name}, {ndim}-D ({class}). */\n\
             AMSO_EXPORT int {stem}_handle(PyObject *object, amso_handle *out);\n\
             AMSO_EXPORT int {stem}_data(PyObject *object, {c} **out);\n\
             AMSO_EXPORT int {stem}_shape(PyObject *object, const int64_t **out);\n",
        );
    }
    // The low-precision floats (float8, float6, float4) as one-byte storage types: C has no
    // arithmetic for them, so a distinct struct each keeps them from mixing with integers.
    let mut storage = String::new();
    for dtype in spec.dtypes.iter().filter(|d| d.code.dlpack_code() >= 7) {
        let layout = if dtype.lanes > 1 {
            format!("{} packed {}-bit values, the first in the low bits", dtype.lanes, dtype.bits)
        } else if dtype.padded() {
            format!("a {}-bit value in the low bits", dtype.bits)
        } else {
            "its bits".to_string()
        };
        let _ = writeln!(storage, "typedef struct {{ uint8_t bits; }} {}; /* {}: {layout} */", dtype.c, dtype.name);
    }
    // CUDA's vectors (float4, int2, ...): lanes x, y(, z, w), aligned to their size as CUDA's.
    for dtype in spec.dtypes.iter().filter(|d| d.is_vector()) {
        let lane = dtype.code.c_type(dtype.bits).unwrap_or("uint32_t");
        let members = ["x", "y", "z", "w"][..usize::from(dtype.lanes).min(4)].join(", ");
        let (first, rest) = members.split_once(", ").unwrap_or((&members, ""));
        let _ = writeln!(
            storage,
            "typedef struct {{ AMSO_ALIGNAS({align}) {lane} {first}; {lane} {rest}; }} {c}; /* {name}: {lanes} lanes */\n\
             AMSO_STATIC_ASSERT(sizeof({c}) == {size} && AMSO_ALIGNOF({c}) == {align}, \"{c} layout\");",
            align = crate::record::alignment(dtype),
            c = dtype.c,
            name = dtype.name,
            lanes = dtype.lanes,
            size = dtype.itemsize(),
        );
    }
    let records = spec.records.iter().map(|record| c_record(spec, record)).collect::<Vec<_>>().join("\n");
    // DLPack's type codes, from the generator's one table (kDLOpaqueHandle, no element type,
    // is the template's).
    let codes: String =
        crate::dtype::TypeCode::table().map(|(number, name, _)| format!("    {name} = {number},\n")).collect();
    C_HEADER_TEMPLATE
        .replace("@NOTE@", HEADER_NOTE)
        .replace(
            "@TYPED_KEY@",
            &format!(
                "#define AMSO_TYPED_COUNT {}u\n#define AMSO_TYPED_KEY 0x{:016x}ull /* the spec's pairs, in order */",
                spec.typed_stems().len(),
                spec.typed_key()
            ),
        )
        .replace("@TYPED_INLINE@", &inline)
        .replace("@TYPED@", &typed)
        .replace("@STORAGE@", &storage)
        .replace("@RECORDS@", &records)
        .replace("@CODES@", &codes)
}

/// One record of the spec as a C struct, with the generator's layout asserted: each `offsetof`,
/// the `sizeof` and the alignment.
fn c_record(spec: &Spec, record: &crate::Record) -> String {
    let c = record.c_type();
    let mut out = format!(
        "/* record {}: {} bytes, aligned to {} (specs/types.yaml) */\ntypedef struct amso_{} {{\n",
        record.name, record.size, record.align, record.name
    );
    out += &record.members(spec, |dtype| &dtype.c);
    let _ = writeln!(out, "}} {c};");
    for field in &record.fields {
        let _ = writeln!(
            out,
            "AMSO_STATIC_ASSERT(offsetof({c}, {name}) == {offset}, \"{c}.{name} is at {offset}\");",
            name = field.name,
            offset = field.offset
        );
    }
    let _ = writeln!(
        out,
        "AMSO_STATIC_ASSERT(sizeof({c}) == {size} && AMSO_ALIGNOF({c}) == {align}, \"{c} layout\");",
        size = record.size,
        align = record.align
    );
    out
}

const C_HEADER_TEMPLATE: &str = r#"/* @NOTE@ */
/*
 * amso's C ABI: inspect amso arrays from C, C++, Cython or Rust extensions without Python calls.
 *
 * Use:
 *   #include <Python.h>
 *   #include "amso.h"
 *   if (amso_import() < 0) return NULL;          // once, with the GIL: loads the function table
 *   amso_handle h;
 *   if (amso_get_handle(obj, &h) != AMSO_OK) ... amso_last_error() says why
 *   const int64_t *shape; amso_shape(h, &shape);
 *
 * Rules:
 * - Every function returns an int: AMSO_OK (0) or an AMSO_ERR_* code; amso_last_error() gives
 *   the message of this thread's last error (valid until the next amso call on this thread).
 *   NULL arguments are AMSO_ERR_NULL_ARGUMENT, never a crash. No function allocates a Python
 *   object, and none lets a Rust panic cross into C (AMSO_ERR_PANIC).
 * - Call with the GIL held (an attached thread state), as for any Python C API.
 * - Lifetime: a handle borrows the Python object. It is valid while you hold a reference to
 *   the object; there is nothing to free. The shape and strides pointers are valid for as
 *   long as the handle. A handle is a snapshot of the array's description that amso keeps
 *   current: after move_memory the same handle reports the new data pointer and device
 *   (amso_data, amso_device_type, amso_device_id, AMSO_FLAG_ON_DEVICE), and a get_dlpack()
 *   context shows in amso_lock_id. ndim, shape, strides, dtype and itemsize never change.
 * - Strides are in elements, not bytes (multiply by amso_itemsize for bytes); arrays are
 *   C-contiguous.
 * - amso_data is a device pointer while AMSO_FLAG_ON_DEVICE is set, a host pointer otherwise.
 *   Reading it does not synchronise: order your work after the array's with its DLPack
 *   stream handshake, or synchronise.
 */
#ifndef AMSO_H
#define AMSO_H

#include <stddef.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

/* Layout checks and alignment, in C11 and C++11 spellings. */
#ifdef __cplusplus
#define AMSO_STATIC_ASSERT(condition, message) static_assert(condition, message)
#define AMSO_ALIGNOF(type) alignof(type)
#define AMSO_ALIGNAS(bytes) alignas(bytes)
#else
#define AMSO_STATIC_ASSERT(condition, message) _Static_assert(condition, message)
#define AMSO_ALIGNOF(type) _Alignof(type)
#define AMSO_ALIGNAS(bytes) _Alignas(bytes)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Complex elements: C99 complex in C, a layout-equal struct in C++. */
#if defined(__cplusplus) || defined(__STDC_NO_COMPLEX__)
typedef struct { float re, im; } amso_complex64_t;
typedef struct { double re, im; } amso_complex128_t;
#else
typedef float _Complex amso_complex64_t;
typedef double _Complex amso_complex128_t;
#endif

/* Low-precision floats: one byte of storage per element (sub-byte values padded). */
@STORAGE@
/* Records: C structs of the spec's scalars, laid out as the generator computed (asserted). */
@RECORDS@
#ifndef Py_PYTHON_H
typedef struct _object PyObject;
#endif

#if defined(_WIN32)
#define AMSO_EXPORT __declspec(dllimport)
#else
#define AMSO_EXPORT
#endif

/* A borrowed description of one amso array. Read it through the getters below; its layout is
 * published so they can be inline field reads (as NumPy's PyArray_NDIM), and amso_import()
 * refuses a module whose layout version differs. */
struct amso_array_header {
    uint32_t magic;       /* 0x414d534f */
    uint32_t version;     /* AMSO_HEADER_VERSION */
    uintptr_t data;
    int32_t ndim;
    int32_t device_type;
    int32_t device_id;
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
    int64_t itemsize;
    uint32_t flags;
    uint32_t reserved;
    uint64_t lock_id;
    int64_t shape[8];
    int64_t strides[8];
};
#define AMSO_HEADER_VERSION 2u
AMSO_STATIC_ASSERT(sizeof(struct amso_array_header) == 184, "amso_array_header layout");
typedef const struct amso_array_header *amso_handle;

enum amso_error {
    AMSO_OK = 0,
    AMSO_ERR_NULL_ARGUMENT = 1,    /* a NULL argument or handle */
    AMSO_ERR_NOT_AN_AMSO_ARRAY = 2,/* the object is not an amso array (of the requested class) */
    AMSO_ERR_INDEX = 3,            /* IndexError */
    AMSO_ERR_VALUE = 4,            /* ValueError */
    AMSO_ERR_TYPE = 5,             /* TypeError */
    AMSO_ERR_OVERFLOW = 6,         /* OverflowError */
    AMSO_ERR_MEMORY = 7,           /* MemoryError */
    AMSO_ERR_BUFFER = 8,           /* BufferError: locked array, refused export */
    AMSO_ERR_RUNTIME = 9,          /* RuntimeError: no CUDA driver, CUDA failure */
    AMSO_ERR_PANIC = 10            /* an internal error in amso, caught at the boundary */
};

/* amso_flags bits. */
#define AMSO_FLAG_READONLY 1u
#define AMSO_FLAG_ON_DEVICE 2u
#define AMSO_FLAG_PINNED 4u
/* Since version 2: a change of the array (a move, a copy in) is under way in some thread, with
 * the GIL released; the placement describes the array from before it, and the data may be
 * changing. Read the data once the flag is clear. */
#define AMSO_FLAG_CHANGING 8u

/* DLPack device types and type codes (DLPack 1.3). */
#define AMSO_DEVICE_CPU 1
#define AMSO_DEVICE_CUDA 2
#define AMSO_DEVICE_CUDA_HOST 3

/* The function table (capsule amso._amso._C_API). Fields are only ever appended. */
typedef struct amso_c_api {
    uint32_t version;
    uint32_t struct_size;    /* sizeof the table as built */
    uint32_t header_version; /* AMSO_HEADER_VERSION of the module */
    uint32_t header_size;    /* sizeof(struct amso_array_header) of the module */
    int (*get_handle)(PyObject *object, amso_handle *out);
    int (*data)(amso_handle h, void **out);           /* first element, host or device */
    int (*ndim)(amso_handle h, int32_t *out);
    int (*size)(amso_handle h, int64_t *out);         /* number of elements */
    int (*shape)(amso_handle h, const int64_t **out); /* borrowed, ndim entries */
    int (*strides)(amso_handle h, const int64_t **out); /* borrowed, in elements */
    int (*device_type)(amso_handle h, int32_t *out);  /* AMSO_DEVICE_* of the current data */
    int (*device_id)(amso_handle h, int32_t *out);
    int (*dtype_code)(amso_handle h, uint8_t *out);   /* DLPack type code */
    int (*dtype_bits)(amso_handle h, uint8_t *out);
    int (*dtype_lanes)(amso_handle h, uint16_t *out);
    int (*itemsize)(amso_handle h, int64_t *out);     /* bytes per element */
    int (*flags)(amso_handle h, uint32_t *out);       /* AMSO_FLAG_* */
    int (*lock_id)(amso_handle h, uint64_t *out);     /* holder of the lock, 0 if unlocked */
    const char *(*last_error)(void);
} amso_c_api;

#define AMSO_C_API_VERSION 1u

/* The second table (capsule amso._amso._C_TYPED_API): the bundled module's typed exports, one row
 * per compiled (dtype, ndim) in the spec's order, fingerprinted by AMSO_TYPED_KEY. */
typedef struct amso_typed_export {
    int (*handle)(PyObject *object, amso_handle *out);
    int (*data)(PyObject *object, void **out);
    int (*shape)(PyObject *object, const int64_t **out);
} amso_typed_export;
typedef struct amso_typed_api {
    uint32_t version;
    uint32_t count;
    uint64_t key;
    const amso_typed_export *exports;
} amso_typed_api;

#define AMSO_TYPED_API_VERSION 1u
@TYPED_KEY@
#ifdef Py_PYTHON_H
static const amso_c_api *amso_api = NULL;
static const amso_typed_api *amso_typed_api_table = NULL;

/* Load the table (with the GIL held); 0 on success, -1 with a Python exception set. */
static inline int amso_import(void) {
    amso_typed_api_table = NULL;
    amso_api = (const amso_c_api *)PyCapsule_Import("amso._amso._C_API", 0);
    if (amso_api == NULL) return -1;
    if (amso_api->version < AMSO_C_API_VERSION || amso_api->header_version != AMSO_HEADER_VERSION ||
        amso_api->header_size != sizeof(struct amso_array_header)) {
        PyErr_SetString(PyExc_ImportError, "amso's C API does not match this amso.h; rebuild against the installed amso");
        amso_api = NULL;
        return -1;
    }
    amso_typed_api_table = (const amso_typed_api *)PyCapsule_Import("amso._amso._C_TYPED_API", 0);
    if (amso_typed_api_table == NULL || amso_typed_api_table->version != AMSO_TYPED_API_VERSION ||
        amso_typed_api_table->count != AMSO_TYPED_COUNT || amso_typed_api_table->key != AMSO_TYPED_KEY) {
        if (amso_typed_api_table != NULL || !PyErr_Occurred()) {
            PyErr_SetString(PyExc_ImportError, "amso's typed C exports do not match this amso.h (built from another "
                            "spec); rebuild against the installed amso");
        }
        amso_api = NULL;
        amso_typed_api_table = NULL;
        return -1;
    }
    return 0;
}

/* Getters: inline field reads; NULL arguments go through the module for the error message. */
#define AMSO_GETTER(name, type, expression)                                     \
    static inline int amso_##name(amso_handle h, type *out) {                   \
        if (h == NULL || out == NULL) return amso_api->name(h, out);            \
        *out = (expression);                                                    \
        return AMSO_OK;                                                         \
    }

static inline int amso_get_handle(PyObject *o, amso_handle *out) { return amso_api->get_handle(o, out); }
AMSO_GETTER(data, void *, (void *)h->data)
AMSO_GETTER(ndim, int32_t, h->ndim)
AMSO_GETTER(shape, const int64_t *, h->shape)
AMSO_GETTER(strides, const int64_t *, h->strides)
AMSO_GETTER(device_type, int32_t, h->device_type)
AMSO_GETTER(device_id, int32_t, h->device_id)
AMSO_GETTER(dtype_code, uint8_t, h->code)
AMSO_GETTER(dtype_bits, uint8_t, h->bits)
AMSO_GETTER(dtype_lanes, uint16_t, h->lanes)
AMSO_GETTER(itemsize, int64_t, h->itemsize)
AMSO_GETTER(flags, uint32_t, h->flags)
AMSO_GETTER(lock_id, uint64_t, h->lock_id)
static inline int amso_size(amso_handle h, int64_t *out) { return amso_api->size(h, out); }
static inline const char *amso_last_error(void) { return amso_api->last_error(); }
#endif /* Py_PYTHON_H */

/*
 * Typed exports of the bundled module, one set per compiled (dtype, ndim). Each fails with
 * AMSO_ERR_NOT_AN_AMSO_ARRAY for an object not of exactly its class. In a CPython extension
 * (Python.h included before this header) they are inline calls through the table amso_import()
 * loads, so the extension needs only amso.get_include(); elsewhere they are symbols of
 * amso/_amso*.so (link against it or dlsym them). The same lifetime rules apply.
 */
#ifdef Py_PYTHON_H
@TYPED_INLINE@#else
@TYPED@#endif /* Py_PYTHON_H */
/*
 * The DLPack C exchange API (DLPack >= 1.2). Every amso array type carries
 * __dlpack_c_exchange_api__, a "dlpack_exchange_api" capsule pointing at a static
 * DLPackExchangeAPI, and __c_dlpack_exchange_api__, the same address as an int. The ABI
 * structs follow (DLPack 1.3); include the official dlpack.h first to use its definitions.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 } DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef enum {
@CODES@    kDLOpaqueHandle = 3
} DLDataTypeCode;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind, const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object, DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor, void **out_py_object);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id, void **out_current_stream);
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct DLPackExchangeAPI {
    DLPackExchangeAPIHeader header;
    DLPackManagedTensorAllocator managed_tensor_allocator;
    DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
    DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
    DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
    DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;
#endif /* DLPACK_DLPACK_H_ */

#ifdef __cplusplus
}
#endif

#endif /* AMSO_H */
"#;
