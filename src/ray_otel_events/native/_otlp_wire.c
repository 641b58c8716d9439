/* OTLP log records, attribute lists and export requests written from their parts, compiled:
 * otlp_wire's log_record_from_parts, attributes of plain values and the common case of
 * merge_envelopes (every item a one-item envelope, as the bridge's converter writes them), the same
 * bytes without a Python call per field or per item.
 * Optional: without a C compiler otlp_wire.py writes them. */

#define PY_SSIZE_T_CLEAN
#include "otlp_wire.h"

/* A str's UTF-8 or a bytes object's bytes; NULL with an error for anything else. */
static const char *text_of(PyObject *obj, Py_ssize_t *n) {
    if (PyUnicode_Check(obj)) return PyUnicode_AsUTF8AndSize(obj, n);
    if (PyBytes_Check(obj)) {
        *n = PyBytes_GET_SIZE(obj);
        return PyBytes_AS_STRING(obj);
    }
    PyErr_Format(PyExc_TypeError, "expected str or bytes, got %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
}

static int u64_of(PyObject *obj, uint64_t *out) {
    *out = PyLong_AsUnsignedLongLong(obj);
    return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/* log_record(time_unix_nano, observed_time_unix_nano, severity_number, severity_text,
 *            body_entries, attributes, trace_id, span_id, flags, event_name)
 * A serialized LogRecord whose body is the KeyValueList of `body_entries` (None: no body) and
 * whose attributes are the concatenated entries of the list `attributes`: what
 * otlp_wire.log_record_from_parts writes of kvlist_value(body_entries) and b"".join(attributes). */
static PyObject *log_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "log_record takes 10 arguments");
        return NULL;
    }
    LogRecordParts r;
    if (u64_of(args[0], &r.time_ns) < 0 || u64_of(args[1], &r.observed_ns) < 0 || u64_of(args[2], &r.severity) < 0 ||
        u64_of(args[8], &r.flags) < 0)
        return NULL;
    r.severity_text = text_of(args[3], &r.severity_n);
    r.event_name = r.severity_text ? text_of(args[9], &r.event_n) : NULL;
    r.trace_id = r.event_name ? text_of(args[6], &r.trace_n) : NULL;
    r.span_id = r.trace_id ? text_of(args[7], &r.span_n) : NULL;
    if (r.span_id == NULL) return NULL;
    PyObject *body = args[4], *attributes = args[5];
    if (body != Py_None && !PyBytes_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "body_entries must be bytes or None");
        return NULL;
    }
    r.body = body != Py_None ? PyBytes_AS_STRING(body) : NULL;
    r.body_n = body != Py_None ? PyBytes_GET_SIZE(body) : 0;
    if (!PyList_Check(attributes)) {
        PyErr_SetString(PyExc_TypeError, "attributes must be a list of bytes");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(attributes);
    r.attributes_n = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = PyList_GET_ITEM(attributes, i);
        if (!PyBytes_Check(entry)) {
            PyErr_SetString(PyExc_TypeError, "attributes must be a list of bytes");
            return NULL;
        }
        r.attributes_n += PyBytes_GET_SIZE(entry);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, log_record_size(&r));
    if (out == NULL) return NULL;
    char *p = put_log_record_head(PyBytes_AS_STRING(out), &r);
    for (Py_ssize_t i = 0; i < count; i++) { /* 6 */
        PyObject *entry = PyList_GET_ITEM(attributes, i);
        p = put(p, PyBytes_AS_STRING(entry), PyBytes_GET_SIZE(entry));
    }
    put_log_record_tail(p, &r);
    return out;
}

/* -- attributes ----------------------------------------------------------------------------- */

/* A plain value to be written as an AnyValue. */
typedef struct {
    int kind; /* 0 none, 1 string, 2 bool, 3 int, 4 double */
    const char *text;
    Py_ssize_t text_n, n; /* n: the AnyValue's size */
    uint64_t bits;
} Scalar;

/* 1 when the value is not a str, bool, int in int64's range, float or None (otlp_wire.attributes
 * writes those), -1 on error. */
static int scalar_of(PyObject *value, Scalar *out) {
    if (value == Py_None) {
        out->kind = 0;
        out->n = 0;
        return 0;
    }
    if (PyUnicode_CheckExact(value)) {
        out->text = PyUnicode_AsUTF8AndSize(value, &out->text_n);
        if (out->text == NULL) return -1;
        out->kind = 1;
        out->n = field_size(out->text_n);
        return 0;
    }
    if (PyBool_Check(value)) {
        out->kind = 2;
        out->bits = value == Py_True;
        out->n = 2;
        return 0;
    }
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow) return 1;
        if (v == -1 && PyErr_Occurred()) return -1;
        out->kind = 3;
        out->bits = (uint64_t)v;
        out->n = 1 + varint_size(out->bits);
        return 0;
    }
    if (PyFloat_CheckExact(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        out->kind = 4;
        memcpy(&out->bits, &d, 8);
        out->n = 9;
        return 0;
    }
    return 1;
}

static char *put_scalar(char *p, const Scalar *s) {
    switch (s->kind) {
    case 1:
        return put_field(p, 0x0a, s->text, s->text_n);
    case 2:
        *p++ = 0x10;
        *p++ = (char)s->bits;
        return p;
    case 3:
        *p++ = 0x18;
        return put_varint(p, s->bits);
    case 4:
        *p++ = 0x21;
        return put_fixed_bits(p, s->bits, 8);
    default:
        return p;
    }
}

/* attributes(values, tag) -> otlp_wire.attributes(values, tag) for a dict of str keys whose values
 * are str, bool, int (int64), float or None; None for anything else (Python writes it). */
static PyObject *attributes(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyDict_Check(args[0]) || !PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != 1) {
        PyErr_SetString(PyExc_TypeError, "attributes(values: dict, tag: bytes of one byte)");
        return NULL;
    }
    PyObject *values = args[0];
    uint8_t tag = (uint8_t)PyBytes_AS_STRING(args[1])[0];
    Buf b = {NULL, 0, 0};
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(values, &pos, &key, &value)) {
        Scalar s;
        Py_ssize_t key_n;
        const char *key_text = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &key_n) : NULL;
        int found = key_text == NULL ? (PyErr_Occurred() ? -1 : 1) : scalar_of(value, &s);
        if (found != 0) {
            PyMem_Free(b.data);
            if (found < 0) return NULL;
            Py_RETURN_NONE;
        }
        Py_ssize_t kv = field_size(key_n) + field_size(s.n);
        if (buf_reserve(&b, field_size(kv)) < 0) {
            PyMem_Free(b.data);
            return NULL;
        }
        char *p = b.data + b.len;
        *p++ = (char)tag;
        p = put_varint(p, (uint64_t)kv);
        p = put_field(p, 0x0a, key_text, key_n);
        *p++ = 0x12;
        p = put_varint(p, (uint64_t)s.n);
        p = put_scalar(p, &s);
        b.len = p - b.data;
    }
    PyObject *out = PyBytes_FromStringAndSize(b.data, b.len);
    PyMem_Free(b.data);
    return out;
}

/* -- one request from many one-item envelopes -------------------------------------------------- */

typedef struct {
    const char *p;
    Py_ssize_t n;
} Span_;

typedef struct {
    Span_ resource, scope, framed;
    Py_ssize_t next; /* the next item of the same scope entry, -1 at the end */
} Item;

typedef struct {
    Span_ bytes;
    Py_ssize_t first_scope, payload; /* payload: the resource field and the scope entries */
} ResourceGroup;

typedef struct {
    Span_ bytes;
    Py_ssize_t resource, first_item, last_item, payload, next_scope;
} ScopeGroup;

#define MAX_GROUPS 64

static int read_size(const uint8_t **p, const uint8_t *end, Py_ssize_t *out) {
    Reader r = {*p, end};
    uint64_t v;
    if (read_varint(&r, &v) < 0) {
        PyErr_Clear();
        return -1;
    }
    if (v > (uint64_t)(end - r.p)) return -1;
    *p = r.p;
    *out = (Py_ssize_t)v;
    return 0;
}

/* otlp_wire._one_item: (resource, scope, the item's framed entry); -1 for any other shape. */
static int one_item(PyObject *obj, Item *item) {
    if (!PyBytes_Check(obj)) return -1;
    const uint8_t *start = (const uint8_t *)PyBytes_AS_STRING(obj), *end = start + PyBytes_GET_SIZE(obj);
    const uint8_t *p = start;
    Py_ssize_t n;
    if (p >= end || *p++ != 0x0a || read_size(&p, end, &n) < 0) return -1;
    item->resource = (Span_){(const char *)p, n};
    p += n;
    if (p >= end || *p++ != 0x12 || read_size(&p, end, &n) < 0 || p + n != end) return -1;
    if (p >= end || *p++ != 0x0a || read_size(&p, end, &n) < 0) return -1;
    item->scope = (Span_){(const char *)p, n};
    p += n;
    const uint8_t *framed = p;
    if (p >= end || *p++ != 0x12 || read_size(&p, end, &n) < 0 || p + n != end) return -1;
    item->framed = (Span_){(const char *)framed, (Py_ssize_t)(end - framed)};
    return 0;
}

static int same(Span_ a, Span_ b) { return a.n == b.n && memcmp(a.p, b.p, (size_t)a.n) == 0; }

/* merge(items) -> the serialized export request otlp_wire.merge_envelopes makes of them, or None
 * when an item is not a one-item envelope or there are more than MAX_GROUPS scope entries (the
 * Python reader takes those). */
static PyObject *merge(PyObject *module, PyObject *items) {
    (void)module;
    if (!PyList_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "merge(items: list[bytes])");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(items);
    Item *parsed = PyMem_Malloc(sizeof(Item) * (size_t)(count ? count : 1));
    if (parsed == NULL) return PyErr_NoMemory();
    ResourceGroup resources[MAX_GROUPS];
    ScopeGroup scopes[MAX_GROUPS];
    Py_ssize_t n_resources = 0, n_scopes = 0;
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        Item *item = &parsed[i];
        if (one_item(PyList_GET_ITEM(items, i), item) < 0) goto fallback;
        item->next = -1;
        Py_ssize_t r = 0;
        while (r < n_resources && !same(resources[r].bytes, item->resource)) r++;
        if (r == n_resources) {
            if (n_resources == MAX_GROUPS) goto fallback;
            resources[r] = (ResourceGroup){item->resource, -1, 0};
            n_resources++;
        }
        Py_ssize_t s = resources[r].first_scope, last = -1;
        while (s >= 0 && !same(scopes[s].bytes, item->scope)) {
            last = s;
            s = scopes[s].next_scope;
        }
        if (s < 0) {
            if (n_scopes == MAX_GROUPS) goto fallback;
            s = n_scopes++;
            scopes[s] = (ScopeGroup){item->scope, r, i, i, field_size(item->scope.n), -1};
            if (last < 0)
                resources[r].first_scope = s;
            else
                scopes[last].next_scope = s;
        } else {
            parsed[scopes[s].last_item].next = i;
            scopes[s].last_item = i;
        }
        scopes[s].payload += item->framed.n;
    }
    Py_ssize_t size = 0;
    for (Py_ssize_t r = 0; r < n_resources; r++) {
        Py_ssize_t payload = field_size(resources[r].bytes.n);
        for (Py_ssize_t s = resources[r].first_scope; s >= 0; s = scopes[s].next_scope)
            payload += field_size(scopes[s].payload);
        resources[r].payload = payload;
        size += field_size(payload);
    }
    out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) goto done;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t r = 0; r < n_resources; r++) {
        *p++ = 0x0a;
        p = put_varint(p, (uint64_t)resources[r].payload);
        p = put_field(p, 0x0a, resources[r].bytes.p, resources[r].bytes.n);
        for (Py_ssize_t s = resources[r].first_scope; s >= 0; s = scopes[s].next_scope) {
            *p++ = 0x12;
            p = put_varint(p, (uint64_t)scopes[s].payload);
            p = put_field(p, 0x0a, scopes[s].bytes.p, scopes[s].bytes.n);
            for (Py_ssize_t i = scopes[s].first_item; i >= 0; i = parsed[i].next)
                p = put(p, parsed[i].framed.p, parsed[i].framed.n);
        }
    }
    goto done;
fallback:
    out = Py_NewRef(Py_None);
done:
    PyMem_Free(parsed);
    return out;
}

static PyMethodDef methods[] = {
    {"log_record", (PyCFunction)(void (*)(void))log_record, METH_FASTCALL,
     "log_record(time, observed, severity_number, severity_text, body_entries, attributes, trace_id, span_id, "
     "flags, event_name) -> a serialized LogRecord."},
    {"attributes", (PyCFunction)(void (*)(void))attributes, METH_FASTCALL,
     "attributes(values, tag) -> a message's repeated KeyValue field of plain values, or None."},
    {"merge", merge, METH_O, "merge(items) -> one export request from one-item envelopes, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_otlp_wire", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__otlp_wire(void) { return PyModule_Create(&module_def); }
