/* The store's raw events compressed with the GIL given up once (raw_events.compress's twin).
 *
 * Python's zlib gives the GIL back and takes it again for every output block; on serve's fold
 * thread each take waits for the event loop's switch interval, which halved the intake. Here the
 * POST bodies' items are deflated (raw deflate, the level asked) as one JSON array in one stretch
 * without the GIL, into one buffer sized by deflateBound: the same text as the twin's once
 * inflated. Built where zlib's headers are. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <zlib.h>

/* Raw deflate (no zlib header, no Adler-32: an eighth of the work at level 1), 32 KiB window. */
#define RAW_WBITS (-15)

typedef struct {
    const unsigned char *data;
    size_t len;
} Part;

/* The items of a JSON array's text: between its first '[' and its last ']'; empty when only
 * white space is there (or either bracket is missing). */
static Part inner(const unsigned char *text, size_t len) {
    Part none = {text, 0};
    const unsigned char *open = memchr(text, '[', len);
    if (open == NULL) return none;
    size_t end = len;
    while (end > 0 && text[end - 1] != ']') end--;
    if (end == 0 || text + end - 1 <= open) return none;
    const unsigned char *start = open + 1, *stop = text + end - 1;
    const unsigned char *p = start;
    while (p < stop && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p == stop) return none;
    return (Part){start, (size_t)(stop - start)};
}

static int feed(z_stream *z, const unsigned char *data, size_t len, int flush) {
    z->next_in = (unsigned char *)data;
    z->avail_in = (uInt)len;
    int rc = deflate(z, flush);
    return rc == Z_OK ? 0 : -1;
}

static PyObject *raw_compress(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *bodies;
    int level;
    if (!PyArg_ParseTuple(args, "O!i:compress", &PyList_Type, &bodies, &level)) return NULL;
    if (level < 0 || level > 9) {
        PyErr_SetString(PyExc_ValueError, "level must be 0..9");
        return NULL;
    }
    PyObject *held = PySequence_Tuple(bodies); /* the bytes stay alive (and unchanged) meanwhile */
    if (held == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    Part *parts = PyMem_RawCalloc((size_t)n + 1, sizeof(Part));
    if (parts == NULL) {
        Py_DECREF(held);
        return PyErr_NoMemory();
    }
    size_t total = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PyTuple_GET_ITEM(held, i);
        if (!PyBytes_Check(body)) {
            PyErr_SetString(PyExc_TypeError, "compress(bodies, level): a list of bytes");
            goto fail;
        }
        parts[i] = inner((const unsigned char *)PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
        total += parts[i].len + 1;
        if (parts[i].len > UINT_MAX || total > UINT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "bodies too large to compress at once");
            goto fail;
        }
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, level, Z_DEFLATED, RAW_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        PyErr_SetString(PyExc_MemoryError, "deflateInit failed");
        goto fail;
    }
    uLong bound = deflateBound(&z, (uLong)total);
    unsigned char *out = PyMem_RawMalloc(bound);
    if (out == NULL) {
        deflateEnd(&z);
        PyErr_NoMemory();
        goto fail;
    }
    z.next_out = out;
    z.avail_out = (uInt)bound;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    int first = 1;
    failed = feed(&z, (const unsigned char *)"[", 1, Z_NO_FLUSH);
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        if (parts[i].len == 0) continue;
        if (!first) failed = feed(&z, (const unsigned char *)",", 1, Z_NO_FLUSH);
        if (!failed) failed = feed(&z, parts[i].data, parts[i].len, Z_NO_FLUSH);
        first = 0;
    }
    if (!failed) {
        z.next_in = (unsigned char *)"]";
        z.avail_in = 1;
        failed = deflate(&z, Z_FINISH) != Z_STREAM_END; /* the bound leaves room: it ends here */
    }
    Py_END_ALLOW_THREADS
    size_t written = bound - z.avail_out;
    deflateEnd(&z);
    PyObject *result = failed ? NULL : PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)written);
    if (failed) PyErr_SetString(PyExc_RuntimeError, "deflate failed");
    PyMem_RawFree(out);
    PyMem_RawFree(parts);
    Py_DECREF(held);
    return result;
fail:
    PyMem_RawFree(parts);
    Py_DECREF(held);
    return NULL;
}

static PyMethodDef methods[] = {
    {"compress", raw_compress, METH_VARARGS,
     "compress(bodies, level): the JSON arrays' items as one array, zlib-compressed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_raw_deflate", NULL, -1, methods};

PyMODINIT_FUNC PyInit__raw_deflate(void) { return PyModule_Create(&module_def); }
