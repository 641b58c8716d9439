/* The fast path of ray_json_decode.py, compiled: a RayEvent's JSON object (as orjson reads it)
 * straight to protobuf wire bytes, which `RayEvent.FromString` turns into the message in one call
 * instead of one upb setter call per field. It reads exactly what the Python fast path reads, by
 * the same rules (ray_json_decode._wire_schema describes each type's fields); for anything else
 * it returns None and the Python path decides, so it can only be stricter, never looser. Optional:
 * without a C compiler the package decodes in Python. */

#define PY_SSIZE_T_CLEAN
#include "ray_json_values.h"
#include "wire_schema.h"

/* A field (F_*): (number, kind, label, low, high, extra, oneof) where low/high bound K_INT values,
 * extra is (names -> numbers, numbers) for K_ENUM and the message's schema for K_MESSAGE, and
 * oneof is an int naming the field's oneof, or None. For a map, kind and extra are its value's. */

#define FALLBACK 0
#define DONE 1
#define FAILED (-1) /* an exception that is not the input's fault (memory) */

/* -- scalars ----------------------------------------------------------------------------------- */

/* A JSON integer: an int, or a string of ASCII digits with an optional '-' (ray_json_decode._INT_TEXT),
 * within [low, high]: its varint bits. As sign and magnitude, so all of int64 and uint64 fit. */
static int read_int(PyObject *value, PyObject *field, uint64_t *out_bits) {
    int negative = 0;
    uint64_t magnitude = 0;
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) return FAILED;
        if (overflow < 0) return FALLBACK;
        if (overflow > 0) {
            unsigned long long big = PyLong_AsUnsignedLongLong(value);
            if (big == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return FALLBACK;
            }
            magnitude = big;
        } else if (number < 0) {
            negative = 1;
            magnitude = (uint64_t)0 - (uint64_t)number;
        } else {
            magnitude = (uint64_t)number;
        }
    } else if (PyUnicode_CheckExact(value)) {
        if (!PyUnicode_IS_ASCII(value) ||
            json_int_text(PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value), &negative, &magnitude) < 0)
            return FALLBACK;
    } else {
        return FALLBACK;
    }
    long long low = PyLong_AsLongLong(PyTuple_GET_ITEM(field, F_LOW));
    unsigned long long high = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(field, F_HIGH));
    if (PyErr_Occurred()) return FAILED;
    return int_bits_within(negative, magnitude, low, high, out_bits) < 0 ? FALLBACK : DONE;
}

/* A varint field (bool, integer, enum, a timestamp's seconds or nanos). */
static int varint_field(Buf *b, uint32_t number, uint64_t value) {
    return buf_varint_field(b, number, value) < 0 ? FAILED : DONE;
}

/* ray_json_decode._TIMESTAMP (YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z) and what datetime accepts of it. */
static int timestamp_fields(Buf *b, PyObject *value) {
    if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value)) return FALLBACK;
    int64_t seconds;
    int nanos;
    if (rfc3339_utc((const char *)PyUnicode_DATA(value), PyUnicode_GET_LENGTH(value), &seconds, &nanos) < 0)
        return FALLBACK;
    if (varint_field(b, 1, (uint64_t)seconds) != DONE) return FAILED;
    return nanos ? varint_field(b, 2, (uint64_t)nanos) : DONE;
}

/* -- values and messages ----------------------------------------------------------------------- */

static int message_fields(Buf *b, PyObject *obj, PyObject *schema);

/* A nested message (a sub-schema's object, or a timestamp) as field `number`. */
static int nested(Buf *b, uint32_t number, int kind, PyObject *extra, PyObject *value) {
    Buf inner = {NULL, 0, 0};
    int done;
    if (kind == K_TIMESTAMP) {
        done = timestamp_fields(&inner, value);
    } else if (!PyDict_CheckExact(value)) {
        done = FALLBACK;
    } else {
        done = message_fields(&inner, value, extra);
    }
    if (done == DONE && buf_field(b, number, inner.data ? inner.data : "", inner.len) < 0) done = FAILED;
    PyMem_Free(inner.data);
    return done;
}

/* One value of `field`'s kind, as field `number` (a map entry's value is field 2). */
static int value_field(Buf *b, uint32_t number, PyObject *field, PyObject *value) {
    int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(field, F_KIND));
    PyObject *extra = PyTuple_GET_ITEM(field, F_EXTRA);
    switch (kind) {
    case K_STRING: {
        if (!PyUnicode_CheckExact(value)) return FALLBACK;
        Py_ssize_t n;
        const char *utf8 = PyUnicode_AsUTF8AndSize(value, &n);
        if (utf8 == NULL) { /* a lone surrogate */
            PyErr_Clear();
            return FALLBACK;
        }
        return buf_field(b, number, utf8, n) < 0 ? FAILED : DONE;
    }
    case K_BYTES: { /* base64 text; anything else (a str not in that form) the Python path decides */
        if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value)) return FALLBACK;
        int written = buf_base64_field(b, number, (const char *)PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value));
        return written < 0 ? FAILED : written ? FALLBACK : DONE;
    }
    case K_BOOL:
        if (!PyBool_Check(value)) return FALLBACK;
        return varint_field(b, number, value == Py_True);
    case K_INT: {
        uint64_t bits;
        int done = read_int(value, field, &bits);
        return done == DONE ? varint_field(b, number, bits) : done;
    }
    case K_DOUBLE:
    case K_FLOAT: {
        double d;
        if (PyFloat_CheckExact(value)) {
            d = PyFloat_AS_DOUBLE(value);
        } else if (PyLong_CheckExact(value)) {
            d = PyLong_AsDouble(value);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                return FALLBACK;
            }
        } else {
            return FALLBACK;
        }
        int written = buf_real_field(b, number, d, kind == K_FLOAT);
        return written < 0 ? FAILED : written ? FALLBACK : DONE;
    }
    case K_ENUM: {
        PyObject *number_of = NULL;
        if (PyUnicode_CheckExact(value)) {
            number_of = PyDict_GetItemWithError(PyTuple_GET_ITEM(extra, 0), value);
            if (number_of == NULL) return PyErr_Occurred() ? FAILED : FALLBACK;
        } else if (PyLong_CheckExact(value)) {
            int known = PySet_Contains(PyTuple_GET_ITEM(extra, 1), value);
            if (known <= 0) return known < 0 ? FAILED : FALLBACK;
            number_of = value;
        } else {
            return FALLBACK;
        }
        long long enum_number = PyLong_AsLongLong(number_of);
        if (enum_number == -1 && PyErr_Occurred()) return FAILED;
        return varint_field(b, number, (uint64_t)enum_number);
    }
    case K_MESSAGE:
    case K_TIMESTAMP:
        return nested(b, number, kind, extra, value);
    default:
        return FALLBACK;
    }
}

/* A map field: an object of string keys, one entry message {1: key, 2: value} each. */
static int map_field(Buf *b, uint32_t number, PyObject *field, PyObject *value) {
    if (!PyDict_CheckExact(value)) return FALLBACK;
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    Buf entry = {NULL, 0, 0};
    int done = DONE;
    while (done == DONE && PyDict_Next(value, &pos, &key, &item)) {
        entry.len = 0;
        Py_ssize_t n;
        const char *utf8 = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &n) : NULL;
        if (utf8 == NULL) {
            PyErr_Clear();
            done = FALLBACK;
        } else if (buf_field(&entry, 1, utf8, n) < 0) {
            done = FAILED;
        } else {
            done = value_field(&entry, 2, field, item);
        }
        if (done == DONE && buf_field(b, number, entry.data, entry.len) < 0) done = FAILED;
    }
    PyMem_Free(entry.data);
    return done;
}

/* Every key of `obj` by `schema` (JSON and proto names -> field): as ray_json_decode._fill. */
static int message_fields(Buf *b, PyObject *obj, PyObject *schema) {
    if (Py_EnterRecursiveCall(" in the RayEvent JSON reader")) return FAILED;
    uint32_t seen[64];
    PyObject *oneofs[64];
    int n_seen = 0, n_oneofs = 0, done = DONE;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (done == DONE && PyDict_Next(obj, &pos, &key, &value)) {
        if (value == Py_None || n_seen == 64) {
            done = FALLBACK;
            break;
        }
        PyObject *field = PyDict_GetItemWithError(schema, key);
        if (field == NULL) {
            done = PyErr_Occurred() ? FAILED : FALLBACK; /* unknown field: json_format's rules */
            break;
        }
        uint32_t number = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(field, F_NUMBER));
        for (int i = 0; i < n_seen; i++) {
            if (seen[i] == number) done = FALLBACK; /* the same field under both names */
        }
        seen[n_seen++] = number;
        PyObject *oneof = PyTuple_GET_ITEM(field, F_ONEOF);
        if (oneof != Py_None) {
            for (int i = 0; i < n_oneofs; i++) {
                if (oneofs[i] == oneof) done = FALLBACK; /* two members of one oneof */
            }
            oneofs[n_oneofs++] = oneof;
        }
        if (done != DONE) break;
        long label = PyLong_AsLong(PyTuple_GET_ITEM(field, F_LABEL));
        if (label == MAP) {
            done = map_field(b, number, field, value);
        } else if (label == REPEATED) {
            if (!PyList_CheckExact(value)) {
                done = FALLBACK;
                break;
            }
            for (Py_ssize_t i = 0; done == DONE && i < PyList_GET_SIZE(value); i++) {
                done = value_field(b, number, field, PyList_GET_ITEM(value, i));
            }
        } else {
            done = value_field(b, number, field, value);
        }
    }
    Py_LeaveRecursiveCall();
    return done;
}

static PyObject *event_wire(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "event_wire(obj, schema) takes two arguments");
        return NULL;
    }
    if (!PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) Py_RETURN_NONE;
    Buf out = {NULL, 0, 0};
    int done = message_fields(&out, args[0], args[1]);
    PyObject *result = NULL;
    if (done == DONE) {
        result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    } else if (done == FALLBACK) {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(out.data);
    return result;
}

static PyMethodDef methods[] = {
    {"event_wire", (PyCFunction)(void (*)(void))event_wire, METH_FASTCALL,
     "event_wire(obj, schema) -> bytes | None: the RayEvent's wire bytes, or None to read it in Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_ray_json_wire", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ray_json_wire(void) { return export_wire_kinds(PyModule_Create(&module_def)); }
