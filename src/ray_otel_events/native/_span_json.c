/* The ISO time of a span line (otel/span_json.py `ns_to_iso_str`), compiled: a traced task's two
 * span lines carry six, about a microsecond each in Python (float division, a rounding, a cached
 * second's prefix and a format). The same arithmetic as CPython's `datetime.fromtimestamp(ns / 1e9)`
 * (modf, the fraction times 1e6 rounded half to even, a carry into the second), and the civil date
 * of the whole second. Times before 1970 or after 9999 go to the Python twin given to bind(). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#include "civil_dates.h"
#include "json_text.h"

static PyObject *fallback; /* the Python ns_to_iso_str */

/* CPython's _PyTime_RoundHalfEven (Python/pytime.c). */
static double round_half_even(double x) {
    double rounded = round(x);
    if (fabs(x - rounded) == 0.5) rounded = 2.0 * round(x / 2.0);
    return rounded;
}

static void put2(char *p, unsigned v) {
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

/* The 27 characters of ns's ISO time (YYYY-MM-DDTHH:MM:SS.ffffffZ); LEAVE for times the Python
 * twin writes (before 1970, from year 10000 on). */
static int iso_text(long long ns, char *out) {
    if (ns < 0) return LEAVE;
    double seconds = (double)ns / 1e9; /* as Python's int / float: correctly rounded */
    double whole;
    double fraction = modf(seconds, &whole);
    double micros = round_half_even(fraction * 1e6);
    if (micros >= 1e6) {
        micros -= 1e6;
        whole += 1.0;
    }
    if (whole >= 253402300800.0) return LEAVE; /* year 10000 on */
    int64_t secs = (int64_t)whole;
    int64_t y;
    int mo, d;
    civil_from_days(secs / 86400, &y, &mo, &d);
    unsigned in_day = (unsigned)(secs % 86400);
    unsigned us = (unsigned)micros;
    put2(out, (unsigned)(y / 100));
    put2(out + 2, (unsigned)(y % 100));
    out[4] = '-';
    put2(out + 5, (unsigned)mo);
    out[7] = '-';
    put2(out + 8, (unsigned)d);
    out[10] = 'T';
    put2(out + 11, in_day / 3600);
    out[13] = ':';
    put2(out + 14, in_day / 60 % 60);
    out[16] = ':';
    put2(out + 17, in_day % 60);
    out[19] = '.';
    put2(out + 20, us / 10000);
    put2(out + 22, us / 100 % 100);
    put2(out + 24, us % 100);
    out[26] = 'Z';
    return 0;
}

static PyObject *iso(PyObject *module, PyObject *arg) {
    (void)module;
    if (fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_span_json.bind() was not called");
        return NULL;
    }
    if (!PyLong_CheckExact(arg)) return PyObject_CallOneArg(fallback, arg);
    int overflow = 0;
    long long ns = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    char out[27];
    if (overflow || iso_text(ns, out) == LEAVE) return PyObject_CallOneArg(fallback, arg);
    return PyUnicode_FromStringAndSize(out, 27);
}

/* -- a whole span line ---------------------------------------------------------------------------
 * `span_json.span_to_json_line`'s text, each value as `json.dumps` writes it (ASCII only: other
 * characters as \uXXXX escapes, surrogate pairs beyond the BMP). Anything it does not write (an
 * attribute value that is not a string, bool, int, float, None or a list of them, a key that is
 * not a string, event attributes that are not a dict, a time out of range) leaves the whole line
 * to the Python twin. */

static const char hexdigits[] = "0123456789abcdef";

/* json.encoder.encode_basestring_ascii */
static int ascii_string_json(Buf *b, PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (PyUnicode_IS_ASCII(text)) {
        const char *s = (const char *)PyUnicode_1BYTE_DATA(text);
        Py_ssize_t i = 0;
        while (i < n && s[i] >= ' ' && s[i] <= '~' && s[i] != '"' && s[i] != '\\') i++;
        if (i == n) { /* nothing to escape: most strings */
            if (buf_reserve(b, n + 2) < 0) return -1;
            char *o = b->data + b->len;
            *o++ = '"';
            memcpy(o, s, (size_t)n);
            o[n] = '"';
            b->len += n + 2;
            return 0;
        }
    }
    if (buf_reserve(b, 2 + 12 * n) < 0) return -1;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            *o++ = (char)c;
            continue;
        }
        if (c < ' ' || c == '\\' || c == '"') {
            o = put_escape(o, c); /* as orjson escapes them, which is what json.dumps writes too */
            continue;
        }
        *o++ = '\\'; /* DEL and beyond: \uXXXX, a surrogate pair past the BMP */
        if (c >= 0x10000) {
            Py_UCS4 v = c - 0x10000;
            Py_UCS4 high = 0xd800 | ((v >> 10) & 0x3ff);
            *o++ = 'u';
            *o++ = hexdigits[(high >> 12) & 0xf];
            *o++ = hexdigits[(high >> 8) & 0xf];
            *o++ = hexdigits[(high >> 4) & 0xf];
            *o++ = hexdigits[high & 0xf];
            c = 0xdc00 | (v & 0x3ff);
            *o++ = '\\';
        }
        *o++ = 'u';
        *o++ = hexdigits[(c >> 12) & 0xf];
        *o++ = hexdigits[(c >> 8) & 0xf];
        *o++ = hexdigits[(c >> 4) & 0xf];
        *o++ = hexdigits[c & 0xf];
    }
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

/* Appends str(object) (ASCII: an int's or a float's repr). */
static int repr_json(Buf *b, PyObject *object) {
    PyObject *text = PyObject_Repr(object);
    if (text == NULL) return -1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int rc = s == NULL ? -1 : out(b, s, n);
    Py_DECREF(text);
    return rc;
}

/* One attribute value as json.dumps writes it (cleaned values: nested sequences are not expected,
 * but a few levels are written as it writes them). */
static int value_json(Buf *b, PyObject *value, int depth) {
    if (PyUnicode_CheckExact(value)) return ascii_string_json(b, value);
    if (value == Py_True) return OUT(b, "true");
    if (value == Py_False) return OUT(b, "false");
    if (value == Py_None) return OUT(b, "null");
    if (PyLong_CheckExact(value)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (overflow) return repr_json(b, value);
        return number_json(b, "%lld", v);
    }
    if (PyFloat_CheckExact(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        if (isnan(d)) return OUT(b, "NaN");
        if (isinf(d)) return d > 0 ? OUT(b, "Infinity") : OUT(b, "-Infinity");
        return repr_json(b, value);
    }
    if ((PyTuple_CheckExact(value) || PyList_CheckExact(value)) && depth < 4) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
        PyObject **items = PySequence_Fast_ITEMS(value);
        if (OUT(b, "[") < 0) return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i && OUT(b, ", ") < 0) return -1;
            int rc = value_json(b, items[i], depth + 1);
            if (rc) return rc;
        }
        return OUT(b, "]");
    }
    return LEAVE;
}

/* A dict of attributes (str keys) as json.dumps writes it; None as null. */
static int attributes_json(Buf *b, PyObject *attributes) {
    if (attributes == Py_None) return OUT(b, "null");
    if (!PyDict_CheckExact(attributes)) return LEAVE;
    if (OUT(b, "{") < 0) return -1;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(attributes, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return LEAVE;
        if (i++ && OUT(b, ", ") < 0) return -1;
        if (ascii_string_json(b, key) < 0 || OUT(b, ": ") < 0) return -1;
        int rc = value_json(b, value, 0);
        if (rc) return rc;
    }
    return OUT(b, "}");
}

static int id_json(Buf *b, PyObject *id, int size) {
    unsigned char bytes[16];
    if (!PyLong_CheckExact(id)) return LEAVE;
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t need = PyLong_AsNativeBytes(id, bytes, size, Py_ASNATIVEBYTES_BIG_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (need < 0) {
        PyErr_Clear();
        return LEAVE;
    }
    if (need > size) return LEAVE;
#else
    if (_PyLong_AsByteArray((PyLongObject *)id, bytes, (size_t)size, 0, 0) < 0) {
        PyErr_Clear(); /* negative or too big: the Python twin writes what format() makes of it */
        return LEAVE;
    }
#endif
    if (buf_reserve(b, 2 * size + 4) < 0) return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    *o++ = '0';
    *o++ = 'x';
    for (int i = 0; i < size; i++) {
        *o++ = hexdigits[bytes[i] >> 4];
        *o++ = hexdigits[bytes[i] & 15];
    }
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

/* A time as a JSON string; `none_if_zero`: 0 and None as null (a span's start and end). */
static int time_json(Buf *b, PyObject *ns_object, int none_if_zero) {
    if (ns_object == Py_None) return none_if_zero ? OUT(b, "null") : LEAVE;
    if (!PyLong_CheckExact(ns_object)) return LEAVE;
    int overflow = 0;
    long long ns = PyLong_AsLongLongAndOverflow(ns_object, &overflow);
    if (ns == -1 && PyErr_Occurred()) return -1;
    if (overflow) return LEAVE;
    if (ns == 0 && none_if_zero) return OUT(b, "null");
    if (buf_reserve(b, 29) < 0) return -1;
    char *o = b->data + b->len;
    o[0] = '"';
    if (iso_text(ns, o + 1) == LEAVE) return LEAVE;
    o[28] = '"';
    b->len += 29;
    return 0;
}

static PyObject *name_str, *timestamp_str, *attributes_str;

/* [{"name": ..., "timestamp": ..., "attributes": ...}, ...] */
static int events_json(Buf *b, PyObject *events) {
    if (!PyTuple_CheckExact(events) && !PyList_CheckExact(events)) return LEAVE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(events);
    if (OUT(b, "[") < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *event = PySequence_Fast_GET_ITEM(events, i);
        PyObject *name = PyObject_GetAttr(event, name_str);
        PyObject *time = name == NULL ? NULL : PyObject_GetAttr(event, timestamp_str);
        PyObject *attributes = time == NULL ? NULL : PyObject_GetAttr(event, attributes_str);
        int rc = -1;
        if (attributes != NULL) {
            rc = PyUnicode_CheckExact(name) ? 0 : LEAVE;
            if (!rc && i) rc = OUT(b, ", ");
            if (!rc) rc = OUT(b, "{\"name\": ");
            if (!rc) rc = ascii_string_json(b, name);
            if (!rc) rc = OUT(b, ", \"timestamp\": ");
            if (!rc) rc = time_json(b, time, 0);
            if (!rc) rc = OUT(b, ", \"attributes\": ");
            if (!rc) rc = attributes_json(b, attributes);
            if (!rc) rc = OUT(b, "}");
        }
        Py_XDECREF(name);
        Py_XDECREF(time);
        Py_XDECREF(attributes);
        if (rc) return rc;
    }
    return OUT(b, "]");
}

/* JSON text made by the Python side (ASCII, as json.dumps writes it). */
static int text(Buf *b, PyObject *s) {
    if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) return LEAVE;
    Py_ssize_t n;
    const char *data = PyUnicode_AsUTF8AndSize(s, &n);
    return data == NULL ? -1 : out(b, data, n);
}

static int write_line(Buf *b, PyObject *const *a) {
    /* name, context, trace_state_json, kind_json, parent, start, end, status_json, attributes,
     * events, links_json, resource_json */
    PyObject *name = a[0], *context = a[1], *parent = a[4];
    if (!PyUnicode_CheckExact(name) || !PyTuple_Check(context) || PyTuple_GET_SIZE(context) < 2) return LEAVE;
    int rc;
    if ((rc = OUT(b, "{\"name\": ")) || (rc = ascii_string_json(b, name))) return rc;
    if ((rc = OUT(b, ", \"context\": {\"trace_id\": ")) || (rc = id_json(b, PyTuple_GET_ITEM(context, 0), 16))) return rc;
    if ((rc = OUT(b, ", \"span_id\": ")) || (rc = id_json(b, PyTuple_GET_ITEM(context, 1), 8))) return rc;
    if ((rc = OUT(b, ", \"trace_state\": ")) || (rc = text(b, a[2]))) return rc;
    if ((rc = OUT(b, "}, \"kind\": ")) || (rc = text(b, a[3])) || (rc = OUT(b, ", \"parent_id\": "))) return rc;
    if (parent == Py_None) {
        if ((rc = OUT(b, "null"))) return rc;
    } else {
        if (!PyTuple_Check(parent) || PyTuple_GET_SIZE(parent) < 2) return LEAVE;
        if ((rc = id_json(b, PyTuple_GET_ITEM(parent, 1), 8))) return rc;
    }
    if ((rc = OUT(b, ", \"start_time\": ")) || (rc = time_json(b, a[5], 1))) return rc;
    if ((rc = OUT(b, ", \"end_time\": ")) || (rc = time_json(b, a[6], 1))) return rc;
    if ((rc = OUT(b, ", \"status\": ")) || (rc = text(b, a[7]))) return rc;
    if ((rc = OUT(b, "}, \"attributes\": ")) || (rc = attributes_json(b, a[8]))) return rc;
    if ((rc = OUT(b, ", \"events\": ")) || (rc = events_json(b, a[9]))) return rc;
    if ((rc = OUT(b, ", \"links\": [")) || (rc = text(b, a[10]))) return rc;
    if ((rc = OUT(b, "], \"resource\": ")) || (rc = text(b, a[11])) || (rc = OUT(b, "}"))) return rc;
    return 0;
}

static PyObject *line(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "line() takes 12 arguments");
        return NULL;
    }
    if (name_str == NULL) {
        name_str = PyUnicode_InternFromString("name");
        timestamp_str = PyUnicode_InternFromString("timestamp");
        attributes_str = PyUnicode_InternFromString("attributes");
        if (name_str == NULL || timestamp_str == NULL || attributes_str == NULL) return NULL;
    }
    Buf b = {NULL, 0, 0};
    int rc = write_line(&b, args);
    PyObject *result = NULL;
    if (rc == 0) {
        result = PyUnicode_New(b.len, 127);
        if (result != NULL) memcpy(PyUnicode_1BYTE_DATA(result), b.data, (size_t)b.len);
    } else if (rc == LEAVE) {
        result = Py_NewRef(Py_None);
    }
    PyMem_Free(b.data);
    return result;
}

static PyObject *bind(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bind(fallback): a callable");
        return NULL;
    }
    Py_INCREF(arg);
    Py_XSETREF(fallback, arg);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"iso", (PyCFunction)iso, METH_O, "iso(ns): the span line's ISO time of ns since the epoch."},
    {"line", (PyCFunction)(void (*)(void))line, METH_FASTCALL,
     "line(name, context, trace_state_json, kind_json, parent, start, end, status_json, attributes, events,"
     " links_json, resource_json): a span's line, or None for one the Python twin writes."},
    {"bind", (PyCFunction)bind, METH_O, "bind(fallback): the Python twin, for times it does not write."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_span_json", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__span_json(void) { return PyModule_Create(&module_def); }
