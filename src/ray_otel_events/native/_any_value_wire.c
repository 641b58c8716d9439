/* OTLP AnyValues, attribute lists and spans read from their wire bytes, compiled: what
 * plain_records.any_value_to_python, attributes_to_dict and span_parts make of the same data after
 * upb parses it, without one accessor call per value. The bytes come from upb's SerializeToString of a
 * parsed message, so they are well formed; protobuf's merge rules are kept all the same (a
 * scalar seen twice: the last; a message seen twice: merged; another member of the oneof: the
 * first forgotten). Optional: without a C compiler plain_records reads through upb. */

#define PY_SSIZE_T_CLEAN
#include "any_value.h"
#include "otlp_span_wire.h"

/* One AnyValue being read: the oneof member seen last and its Python value (a new reference). */
typedef struct {
    int kind;
    PyObject *value;
} Any;

static PyObject *base64_text(const uint8_t *data, Py_ssize_t n) {
    PyObject *out = PyUnicode_New(base64_size(n), 127);
    if (out == NULL) return NULL;
    put_base64((char *)PyUnicode_1BYTE_DATA(out), data, n);
    return out;
}

static void set_any(Any *any, int kind, PyObject *value) {
    Py_XSETREF(any->value, value);
    any->kind = kind;
}

static int read_any(Any *any, Reader r);
static int read_key_values(PyObject *out, Reader r, uint32_t field_number);

/* ArrayValue: each `values` entry (field 1) an item. */
static int read_array(PyObject *list, Reader r) {
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != 1 || f.wire_type != 2) continue;
        Any item = {A_NONE, NULL};
        int failed = read_any(&item, f.payload);
        if (!failed) failed = PyList_Append(list, item.value != NULL ? item.value : Py_None);
        Py_XDECREF(item.value);
        if (failed < 0) return -1;
    }
    return 0;
}

static int read_any(Any *any, Reader r) {
    if (Py_EnterRecursiveCall(" reading an OTLP AnyValue")) return -1;
    int failed = 0;
    while (!failed && r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) {
            failed = -1;
            break;
        }
        PyObject *value = NULL;
        int kind = A_NONE;
        if (f.number == A_STRING && f.wire_type == 2) {
            value = PyUnicode_DecodeUTF8((const char *)f.payload.p, f.payload.end - f.payload.p, "strict");
            kind = A_STRING;
        } else if (f.number == A_BOOL && f.wire_type == 0) {
            value = Py_NewRef(f.scalar ? Py_True : Py_False);
            kind = A_BOOL;
        } else if (f.number == A_INT && f.wire_type == 0) {
            value = PyLong_FromLongLong((long long)f.scalar);
            kind = A_INT;
        } else if (f.number == A_DOUBLE && f.wire_type == 1) {
            double d;
            memcpy(&d, &f.scalar, 8);
            value = PyFloat_FromDouble(d);
            kind = A_DOUBLE;
        } else if (f.number == A_ARRAY && f.wire_type == 2) {
            if (any->kind != A_ARRAY && (value = PyList_New(0)) != NULL) set_any(any, A_ARRAY, value);
            if (any->kind != A_ARRAY || read_array(any->value, f.payload) < 0) failed = -1;
            continue;
        } else if (f.number == A_KVLIST && f.wire_type == 2) {
            if (any->kind != A_KVLIST && (value = PyDict_New()) != NULL) set_any(any, A_KVLIST, value);
            if (any->kind != A_KVLIST || read_key_values(any->value, f.payload, 1) < 0) failed = -1;
            continue;
        } else if (f.number == A_BYTES && f.wire_type == 2) {
            value = base64_text(f.payload.p, f.payload.end - f.payload.p);
            kind = A_BYTES;
        } else {
            continue; /* an unknown field */
        }
        if (value == NULL) {
            failed = -1;
        } else {
            set_any(any, kind, value);
        }
    }
    Py_LeaveRecursiveCall();
    return failed;
}

/* One KeyValue into `out`: its key (the last seen) -> its value (merged), None when unset. */
static int read_key_value(PyObject *out, Reader r) {
    Reader key = {(const uint8_t *)"", (const uint8_t *)""};
    Any value = {A_NONE, NULL};
    int failed = 0;
    while (!failed && r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) {
            failed = -1;
        } else if (f.number == A_STRING && f.wire_type == 2) {
            key = f.payload;
        } else if (f.number == A_BOOL && f.wire_type == 2) {
            failed = read_any(&value, f.payload);
        }
    }
    if (!failed) {
        PyObject *name = PyUnicode_DecodeUTF8((const char *)key.p, key.end - key.p, "strict");
        failed = name == NULL ? -1 : PyDict_SetItem(out, name, value.value != NULL ? value.value : Py_None);
        Py_XDECREF(name);
    }
    Py_XDECREF(value.value);
    return failed;
}

/* Every KeyValue of a message's repeated field `field_number` into `out`, in order. */
static int read_key_values(PyObject *out, Reader r, uint32_t field_number) {
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number == field_number && f.wire_type == 2 && read_key_value(out, f.payload) < 0) return -1;
    }
    return 0;
}

static int reader_of(PyObject *data, Reader *r) {
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "expected bytes");
        return -1;
    }
    *r = bytes_reader(data);
    return 0;
}

/* -- spans (opentelemetry.proto.trace.v1.Span) -------------------------------------------------- */


/* (name, time_unix_nano, attributes) of an Event; (trace_id, span_id, trace_state, attributes) of a
 * Link. */
static PyObject *event_or_link(Reader r, int link) {
    Reader none = {(const uint8_t *)"", (const uint8_t *)""};
    Reader a = none, b = none, c = none;
    uint64_t time = 0;
    PyObject *attributes = PyDict_New();
    if (attributes == NULL) return NULL;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto fail;
        if (link && f.wire_type == 2) {
            if (f.number == 1) a = f.payload;
            if (f.number == 2) b = f.payload;
            if (f.number == 3) c = f.payload;
            if (f.number == 4 && read_key_value(attributes, f.payload) < 0) goto fail;
        } else if (!link) {
            if (f.number == A_STRING && f.wire_type == 1) time = f.scalar;
            if (f.number == A_BOOL && f.wire_type == 2) b = f.payload;
            if (f.number == A_INT && f.wire_type == 2 && read_key_value(attributes, f.payload) < 0) goto fail;
        }
    }
    PyObject *out = link ? Py_BuildValue("(NNNO)", reader_bytes(a), reader_bytes(b), reader_text(c), attributes)
                         : Py_BuildValue("(NKO)", reader_text(b), (unsigned long long)time, attributes);
    Py_DECREF(attributes);
    return out;
fail:
    Py_DECREF(attributes);
    return NULL;
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* (trace_id, span_id, trace_state, parent_span_id, name, kind, start, end, attributes, events,
 * links, status code, status message) of a serialized Span. */
static PyObject *span_parts(PyObject *module, PyObject *data) {
    (void)module;
    Reader r;
    SpanFields s;
    if (reader_of(data, &r) < 0 || read_span_fields(r, &s) < 0) return NULL;
    PyObject *attributes = PyDict_New(), *events = PyList_New(0), *links = PyList_New(0);
    if (attributes == NULL || events == NULL || links == NULL || read_key_values(attributes, r, 9) < 0) goto fail;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto fail;
        if (f.wire_type == 2 && (f.number == 11 || f.number == 13) &&
            append_new(f.number == 11 ? events : links, event_or_link(f.payload, f.number == 13)) < 0)
            goto fail;
    }
    PyObject *out = Py_BuildValue("(NNNNNiKKOOOiN)", reader_bytes(s.trace_id), reader_bytes(s.span_id),
                                  reader_text(s.trace_state), reader_bytes(s.parent), reader_text(s.name), (int)(int32_t)s.kind,
                                  (unsigned long long)s.start, (unsigned long long)s.end, attributes, events, links,
                                  (int)(int32_t)s.status_code, reader_text(s.status_message));
    Py_DECREF(attributes);
    Py_DECREF(events);
    Py_DECREF(links);
    return out;
fail:
    Py_XDECREF(attributes);
    Py_XDECREF(events);
    Py_XDECREF(links);
    return NULL;
}

static PyObject *any_value(PyObject *module, PyObject *data) {
    (void)module;
    Reader r;
    if (reader_of(data, &r) < 0) return NULL;
    Any any = {A_NONE, NULL};
    if (read_any(&any, r) < 0) {
        Py_XDECREF(any.value);
        return NULL;
    }
    return any.value != NULL ? any.value : Py_NewRef(Py_None);
}

static PyObject *key_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Reader r;
    if (nargs != 2 || reader_of(args[0], &r) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "key_values(data, field_number)");
        return NULL;
    }
    unsigned long field_number = PyLong_AsUnsignedLong(args[1]);
    if (field_number == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    PyObject *out = PyDict_New();
    if (out != NULL && read_key_values(out, r, (uint32_t)field_number) < 0) Py_CLEAR(out);
    return out;
}

static PyMethodDef methods[] = {
    {"any_value", any_value, METH_O, "any_value(data) -> the value a serialized AnyValue stands for."},
    {"key_values", (PyCFunction)(void (*)(void))key_values, METH_FASTCALL,
     "key_values(data, field_number) -> dict of a serialized message's repeated KeyValue field."},
    {"span_parts", span_parts, METH_O, "span_parts(data) -> the parts of a serialized Span (plain_records.SpanParts)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_any_value_wire", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__any_value_wire(void) { return export_any_value_members(PyModule_Create(&module_def)); }
