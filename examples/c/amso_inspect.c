/* Example: print an amso array's description from C. Build it in this folder as a library for
 * ctypes, with the headers installed with amso (amso.get_include() and Python's):
 *   cc -shared -fPIC $(python3 -m amso --includes) amso_inspect.c -o amso_inspect.so
 * and call it from Python: ctypes.PyDLL("./amso_inspect.so").inspect(ctypes.py_object(array)).
 * (Not inspect.so: Python started in this folder would import it in place of the inspect module.) */
#include <Python.h>
#include <stdio.h>

#include "amso.h"

int inspect(PyObject *array) {
    if (amso_api == NULL && amso_import() < 0) return -1;
    amso_handle h;
    if (amso_get_handle(array, &h) != AMSO_OK) {
        fprintf(stderr, "not an amso array: %s\n", amso_last_error());
        return 1;
    }
    int32_t ndim, device_type;
    const int64_t *shape;
    uint8_t code, bits;
    void *data;
    amso_ndim(h, &ndim);
    amso_shape(h, &shape);
    amso_dtype_code(h, &code);
    amso_dtype_bits(h, &bits);
    amso_device_type(h, &device_type);
    amso_data(h, &data);
    printf("amso array: ndim %d, shape (", ndim);
    for (int i = 0; i < ndim; ++i) printf("%s%lld", i ? ", " : "", (long long)shape[i]);
    printf("), dtype code %u bits %u, device type %d, data %p\n", code, bits, device_type, data);
    return 0;
}
