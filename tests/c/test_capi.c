/* C side of tests/python/test_capi.py: built against the installed amso.h (amso.get_include())
 * into a library that the tests load with ctypes.PyDLL (the GIL is held in every call). */
#include <Python.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amso.h"

typedef struct {
    void *data;
    int32_t ndim;
    int64_t size;
    int64_t shape[8];
    int64_t strides[8];
    int32_t device_type;
    int32_t device_id;
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
    int64_t itemsize;
    uint32_t flags;
    uint64_t lock_id;
} description;

static int imported = 0;

static int ensure_import(void) {
    if (!imported) {
        if (amso_import() < 0) return -1;
        imported = 1;
    }
    return 0;
}

/* Every getter of obj's handle into d; returns the first non-zero code. */
int describe(PyObject *obj, description *d) {
    if (ensure_import() < 0) return -1;
    amso_handle h;
    int rc = amso_get_handle(obj, &h);
    if (rc != AMSO_OK) return rc;
    const int64_t *shape, *strides;
    if ((rc = amso_data(h, &d->data)) || (rc = amso_ndim(h, &d->ndim)) || (rc = amso_size(h, &d->size)) ||
        (rc = amso_shape(h, &shape)) || (rc = amso_strides(h, &strides)) || (rc = amso_device_type(h, &d->device_type)) ||
        (rc = amso_device_id(h, &d->device_id)) || (rc = amso_dtype_code(h, &d->code)) || (rc = amso_dtype_bits(h, &d->bits)) ||
        (rc = amso_dtype_lanes(h, &d->lanes)) || (rc = amso_itemsize(h, &d->itemsize)) || (rc = amso_flags(h, &d->flags)) ||
        (rc = amso_lock_id(h, &d->lock_id)))
        return rc;
    for (int i = 0; i < d->ndim && i < 8; ++i) {
        d->shape[i] = shape[i];
        d->strides[i] = strides[i];
    }
    return AMSO_OK;
}

/* obj's data address and device type, read through one handle in one call, with the GIL held
 * throughout (as the C API requires): a pair that must always agree. */
int placement(PyObject *obj, void **data, int32_t *device_type) {
    if (ensure_import() < 0) return -1;
    amso_handle h;
    int rc = amso_get_handle(obj, &h);
    if (rc != AMSO_OK) return rc;
    if ((rc = amso_data(h, data)) || (rc = amso_device_type(h, device_type))) return rc;
    return AMSO_OK;
}

/* amso_get_handle's code for obj (NULL allowed). */
int handle_code(PyObject *obj) {
    if (ensure_import() < 0) return -1;
    amso_handle h;
    return amso_get_handle(obj, &h);
}

const char *last_error(void) { return amso_last_error(); }

/* Codes for NULL outputs and handles: bit i set when check i gives AMSO_ERR_NULL_ARGUMENT. */
int null_argument_codes(PyObject *obj) {
    if (ensure_import() < 0) return -1;
    amso_handle h;
    int bits = 0, i = 0;
    int32_t n;
    bits |= (amso_get_handle(obj, NULL) == AMSO_ERR_NULL_ARGUMENT) << i++;
    bits |= (amso_ndim(NULL, &n) == AMSO_ERR_NULL_ARGUMENT) << i++;
    if (amso_get_handle(obj, &h) != AMSO_OK) return -2;
    bits |= (amso_ndim(h, NULL) == AMSO_ERR_NULL_ARGUMENT) << i++;
    bits |= (amso_shape(h, NULL) == AMSO_ERR_NULL_ARGUMENT) << i++;
    bits |= (amso_data(h, NULL) == AMSO_ERR_NULL_ARGUMENT) << i++;
    return bits;
}

/* The float32 3-D typed exports, through the table amso_import() loads: bit i set when check i
 * holds (right: a float32 3-D amso array; wrong: any other object). */
int typed_codes(PyObject *right, PyObject *wrong) {
    if (ensure_import() < 0) return -1;
    amso_handle h, other;
    float *data;
    const int64_t *shape;
    int bits = 0, i = 0;
    if (amso_float32_3d_handle(right, &h) != AMSO_OK) return -2;
    bits |= (amso_float32_3d_data(right, &data) == AMSO_OK && (uintptr_t)data == h->data) << i++;
    bits |= (amso_float32_3d_shape(right, &shape) == AMSO_OK && shape == h->shape) << i++;
    bits |= (amso_float32_3d_handle(wrong, &other) == AMSO_ERR_NOT_AN_AMSO_ARRAY) << i++;
    bits |= (amso_float32_3d_data(wrong, &data) == AMSO_ERR_NOT_AN_AMSO_ARRAY) << i++;
    bits |= (amso_float32_3d_data(NULL, &data) == AMSO_ERR_NULL_ARGUMENT) << i++;
    bits |= (amso_float32_3d_shape(right, NULL) == AMSO_ERR_NULL_ARGUMENT) << i++;
    return bits;
}

static const DLPackExchangeAPI *exchange_api(PyObject *obj) {
    PyObject *capsule = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__dlpack_c_exchange_api__");
    if (capsule == NULL) return NULL;
    const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);
    return api;
}

/* The exchange table's version, or -1. */
int exchange_version(PyObject *obj, uint32_t *major, uint32_t *minor) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    *major = api->header.version.major;
    *minor = api->header.version.minor;
    return api->managed_tensor_allocator && api->managed_tensor_from_py_object_no_sync &&
                   api->managed_tensor_to_py_object_no_sync && api->dltensor_from_py_object_no_sync &&
                   api->current_work_stream
               ? 0
               : -2;
}

int exchange_dltensor(PyObject *obj, DLTensor *out) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    return api->dltensor_from_py_object_no_sync(obj, out);
}

/* A managed tensor of obj: checks its fields against the DLTensor path, then deletes it. */
int exchange_managed_matches(PyObject *obj) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    DLManagedTensorVersioned *managed = NULL;
    DLTensor borrowed;
    if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return -1;
    if (api->dltensor_from_py_object_no_sync(obj, &borrowed) != 0) return -1;
    int same = managed->version.major == 1 && managed->dl_tensor.data == borrowed.data &&
               managed->dl_tensor.ndim == borrowed.ndim && managed->dl_tensor.dtype.code == borrowed.dtype.code &&
               managed->dl_tensor.dtype.bits == borrowed.dtype.bits;
    for (int i = 0; same && i < borrowed.ndim; ++i)
        same = managed->dl_tensor.shape[i] == borrowed.shape[i] && managed->dl_tensor.strides[i] == borrowed.strides[i];
    managed->deleter(managed);
    return same ? 0 : 1;
}

static char allocator_error[256];
static void set_error(void *ctx, const char *kind, const char *message) {
    (void)ctx;
    snprintf(allocator_error, sizeof allocator_error, "%s: %s", kind, message);
}
const char *last_allocator_error(void) { return allocator_error; }

/* Allocate a float32 tensor like (shape, device) through obj's table, fill it with 0..n-1 from
 * C, and append the amso array made from it to `into`. */
int exchange_allocate_and_wrap(PyObject *obj, int32_t ndim, const int64_t *shape, int32_t device_type, PyObject *into) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    DLTensor prototype = {0};
    prototype.ndim = ndim;
    prototype.shape = (int64_t *)shape;
    prototype.dtype.code = kDLFloat;
    prototype.dtype.bits = 32;
    prototype.dtype.lanes = 1;
    prototype.device.device_type = (DLDeviceType)device_type;
    DLManagedTensorVersioned *tensor = NULL;
    allocator_error[0] = 0;
    if (api->managed_tensor_allocator(&prototype, &tensor, NULL, set_error) != 0) return -3;
    if (device_type == kDLCPU) {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= shape[i];
        float *data = (float *)tensor->dl_tensor.data;
        for (int64_t i = 0; i < n; ++i) data[i] = (float)i;
    }
    void *result = NULL;
    if (api->managed_tensor_to_py_object_no_sync(tensor, &result) != 0) return -1;
    int rc = PyList_Append(into, (PyObject *)result);
    Py_DECREF((PyObject *)result);
    return rc;
}

static int deleter_calls = 0;
static void counting_deleter(DLManagedTensorVersioned *self) {
    deleter_calls += 1;
    free(self->dl_tensor.data);
    free(self->dl_tensor.shape);
    free(self);
}
int deleter_count(void) { return deleter_calls; }

/* A C-owned float tensor of n elements (values 0.5 * i) with a counting deleter, handed to
 * obj's table; the resulting amso array is appended to `into`. code/bits choose the dtype. */
int exchange_wrap_counting(PyObject *obj, int64_t n, uint8_t code, uint8_t bits, uint64_t flags, PyObject *into) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    DLManagedTensorVersioned *tensor = (DLManagedTensorVersioned *)calloc(1, sizeof *tensor);
    float *data = (float *)malloc((size_t)n * sizeof(float));
    int64_t *shape = (int64_t *)malloc(sizeof(int64_t));
    for (int64_t i = 0; i < n; ++i) data[i] = 0.5f * (float)i;
    shape[0] = n;
    tensor->version.major = 1;
    tensor->version.minor = 3;
    tensor->deleter = counting_deleter;
    tensor->flags = flags;
    tensor->dl_tensor.data = data;
    tensor->dl_tensor.device.device_type = kDLCPU;
    tensor->dl_tensor.ndim = 1;
    tensor->dl_tensor.dtype.code = code;
    tensor->dl_tensor.dtype.bits = bits;
    tensor->dl_tensor.dtype.lanes = 1;
    tensor->dl_tensor.shape = shape;
    void *result = NULL;
    if (api->managed_tensor_to_py_object_no_sync(tensor, &result) != 0) return -1;
    int rc = PyList_Append(into, (PyObject *)result);
    Py_DECREF((PyObject *)result);
    return rc;
}

int current_stream(PyObject *obj, int32_t device_type, void **out) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    return api->current_work_stream((DLDeviceType)device_type, 0, out);
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Benchmarks (ns per call), run by benchmarks/bench_capi.py. */
double bench_handle_and_getters(PyObject *obj, int64_t iters) {
    if (ensure_import() < 0) return -1;
    volatile int64_t sink = 0;
    double start = now_ns();
    for (int64_t i = 0; i < iters; ++i) {
        amso_handle h;
        void *data;
        int32_t ndim, device_type, device_id;
        const int64_t *shape, *strides;
        uint8_t code;
        if (amso_get_handle(obj, &h)) return -1;
        amso_data(h, &data);
        amso_ndim(h, &ndim);
        amso_shape(h, &shape);
        amso_strides(h, &strides);
        amso_device_type(h, &device_type);
        amso_device_id(h, &device_id);
        amso_dtype_code(h, &code);
        sink += (int64_t)(intptr_t)data + ndim + shape[0] + strides[0] + device_type + device_id + code;
    }
    (void)sink;
    return (now_ns() - start) / (double)iters;
}

double bench_exchange_dltensor(PyObject *obj, int64_t iters) {
    const DLPackExchangeAPI *api = exchange_api(obj);
    if (api == NULL) return -1;
    volatile int64_t sink = 0;
    double start = now_ns();
    for (int64_t i = 0; i < iters; ++i) {
        DLTensor t;
        if (api->dltensor_from_py_object_no_sync(obj, &t) != 0) return -1;
        sink += t.ndim;
    }
    (void)sink;
    return (now_ns() - start) / (double)iters;
}

double bench_dlpack_call(PyObject *obj, int64_t iters) {
    double start = now_ns();
    for (int64_t i = 0; i < iters; ++i) {
        PyObject *capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
        if (capsule == NULL) return -1;
        Py_DECREF(capsule);
    }
    return (now_ns() - start) / (double)iters;
}

double bench_interface_dict(PyObject *obj, int64_t iters) {
    double start = now_ns();
    for (int64_t i = 0; i < iters; ++i) {
        PyObject *dict = PyObject_GetAttrString(obj, "__cuda_array_interface__");
        if (dict == NULL) return -1;
        Py_DECREF(dict);
    }
    return (now_ns() - start) / (double)iters;
}
