/* A Python extension whose objects export buffers that lie, for the bad-input corpus of typed
 * arguments: Exporter(kind, count) owns `count` float64 values (0.0, 1.0, ...) and, for each
 * kind but "honest" and "readonly", answers PyObject_GetBuffer with one inconsistency. It counts
 * the buffers taken and released, so a test can check that a refused argument released what
 * it took. Built by tests/python/test_corpus.py with cc; not part of amso. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    char kind[32];
    Py_ssize_t count;
    double *values;
    Py_ssize_t shape[2];
    Py_ssize_t strides[2];
    Py_ssize_t suboffsets[2];
    Py_ssize_t gets;
    Py_ssize_t releases;
} Exporter;

static int exporter_init(Exporter *self, PyObject *args, PyObject *kwargs) {
    const char *kind;
    Py_ssize_t count;
    static char *names[] = {"kind", "count", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sn", names, &kind, &count)) return -1;
    if (count < 2 || strlen(kind) >= sizeof self->kind) {
        PyErr_SetString(PyExc_ValueError, "count >= 2 and a short kind, please");
        return -1;
    }
    strcpy(self->kind, kind);
    PyMem_Free(self->values);
    self->values = PyMem_Calloc((size_t)count, sizeof(double));
    if (self->values == NULL) return -1;
    for (Py_ssize_t i = 0; i < count; i++) self->values[i] = (double)i;
    self->count = count;
    return 0;
}

static void exporter_dealloc(Exporter *self) {
    PyMem_Free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int is(const Exporter *self, const char *kind) { return strcmp(self->kind, kind) == 0; }

static int exporter_getbuffer(Exporter *self, Py_buffer *view, int flags) {
    (void)flags;
    if (is(self, "raises")) {
        PyErr_SetString(PyExc_RuntimeError, "the exporter refused to export");
        return -1;
    }
    self->shape[0] = self->count;
    self->strides[0] = sizeof(double);
    self->suboffsets[0] = 0;
    view->buf = self->values;
    view->obj = Py_NewRef((PyObject *)self);
    view->len = self->count * (Py_ssize_t)sizeof(double);
    view->itemsize = sizeof(double);
    view->readonly = is(self, "readonly");
    view->ndim = 1;
    view->format = "d";
    view->shape = self->shape;
    view->strides = self->strides;
    view->suboffsets = NULL;
    view->internal = NULL;
    if (is(self, "itemsize")) view->itemsize = 4;                /* "d" is 8 bytes */
    if (is(self, "length")) view->len += (Py_ssize_t)sizeof(double); /* one item more than the shape */
    if (is(self, "format-struct")) view->format = "T{d:x:}";
    if (is(self, "format-big")) view->format = ">d";
    if (is(self, "no-shape")) view->shape = NULL;
    if (is(self, "negative-dim")) self->shape[0] = -self->count;
    if (is(self, "suboffsets")) view->suboffsets = self->suboffsets;
    if (is(self, "stride-misfit")) {                             /* 4-byte steps through 8-byte items */
        self->shape[0] = self->count / 2;
        self->strides[0] = 4;
        view->len = self->shape[0] * (Py_ssize_t)sizeof(double);
    }
    self->gets++;
    return 0;
}

static void exporter_releasebuffer(Exporter *self, Py_buffer *view) {
    (void)view;
    self->releases++;
}

static PyObject *exporter_values(Exporter *self, PyObject *unused) {
    (void)unused;
    PyObject *list = PyList_New(self->count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) PyList_SET_ITEM(list, i, PyFloat_FromDouble(self->values[i]));
    return list;
}

static PyObject *exporter_counts(Exporter *self, PyObject *unused) {
    (void)unused;
    return Py_BuildValue("(nn)", self->gets, self->releases);
}

static PyMethodDef exporter_methods[] = {
    {"values", (PyCFunction)exporter_values, METH_NOARGS, "the values, as a list"},
    {"counts", (PyCFunction)exporter_counts, METH_NOARGS, "(buffers taken, buffers released)"},
    {NULL, NULL, 0, NULL},
};

static PyBufferProcs exporter_buffer = {
    (getbufferproc)exporter_getbuffer,
    (releasebufferproc)exporter_releasebuffer,
};

static PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hostile_buffers.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)exporter_init,
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_methods = exporter_methods,
    .tp_as_buffer = &exporter_buffer,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hostile_buffers", NULL, -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_hostile_buffers(void) {
    if (PyType_Ready(&ExporterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Exporter", (PyObject *)&ExporterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
