/* The store's raw events compressed with the GIL given up once (raw_events.compress_python's
 * twin, the same bytes; raw_deflate.h). `serve` compresses on the row writer's thread instead
 * (no GIL at all); this is for the store's other writes and the tests. Built where zlib's
 * headers are. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "raw_deflate.h"

static PyObject *raw_compress(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *arg;
    Py_buffer dictionary;
    if (!PyArg_ParseTuple(args, "Oy*:compress", &arg, &dictionary)) return NULL;
    PyObject *held = PySequence_Tuple(arg); /* the bytes stay alive (and unchanged) meanwhile */
    if (held == NULL) {
        PyBuffer_Release(&dictionary);
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    RawPart *parts = PyMem_RawCalloc((size_t)n + 1, sizeof(RawPart));
    if (parts == NULL) {
        Py_DECREF(held);
        PyBuffer_Release(&dictionary);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PyTuple_GET_ITEM(held, i);
        if (!PyBytes_Check(body)) {
            PyErr_SetString(PyExc_TypeError, "compress(bodies): a list of bytes");
            goto done;
        }
        parts[i] = raw_inner((const unsigned char *)PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
    }
    unsigned char *out = NULL;
    size_t len = 0;
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = raw_deflate(parts, n, dictionary.buf, (size_t)dictionary.len, &out, &len);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_SetString(PyExc_MemoryError, "cannot compress these bodies (or the dictionary is over 32 KiB)");
        goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)len);
    PyMem_RawFree(out);
done:
    PyMem_RawFree(parts);
    Py_DECREF(held);
    PyBuffer_Release(&dictionary);
    return result;
}

static PyMethodDef methods[] = {
    {"compress", raw_compress, METH_VARARGS,
     "compress(bodies, dictionary): the JSON arrays' items as one array, a format byte then raw deflate"
     " primed with the dictionary."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_raw_deflate", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__raw_deflate(void) { return PyModule_Create(&module_def); }
