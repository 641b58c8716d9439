/* Plain JSON records of OTLP spans written straight from a ScopeSpans' wire bytes, compiled: for
 * each span the bytes of orjson.dumps(plain_records.span_record(span_parts(span), context)), with
 * no dict made on the way. A span is left to Python (None in its place) where it carries a `ray.*`
 * attribute (it may stand for a RayEvent: the bridge decides) or anything this writer would not
 * reproduce exactly: a key repeated in one attribute list (a dict keeps the first place and the last
 * value), an AnyValue or KeyValue with a member given twice, text that is not UTF-8, nesting deeper
 * than MAX_DEPTH. The bytes come from upb's SerializeToString of a parsed request, so those are rare.
 * Optional: without it plain_records makes every record in Python. */

#define PY_SSIZE_T_CLEAN
#include "json_text.h"
#include "otlp_span_wire.h"

#define MAX_DEPTH 32
#define MAX_KEYS 64

/* Set by bind(): orjson.dumps (a double is written as orjson writes it) and the JSON names of span
 * kinds and status codes (plain_records.SPAN_KINDS, STATUS_CODES). */
static PyObject *dumps, *kind_names, *code_names;

static int hex_json(Buf *b, Reader data) {
    Py_ssize_t n = data.end - data.p;
    if (buf_reserve(b, 2 + 2 * n) < 0) return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        *o++ = "0123456789abcdef"[data.p[i] >> 4];
        *o++ = "0123456789abcdef"[data.p[i] & 15];
    }
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

/* `names[value]` where 0 <= value < len(names), else the number as a JSON string (str(value)). */
static int enum_json(Buf *b, uint64_t varint, PyObject *names) {
    int value = (int)(int32_t)varint;
    if (value >= 0 && value < PyTuple_GET_SIZE(names)) return buf_bytes(b, PyTuple_GET_ITEM(names, value));
    return number_json(b, "\"%d\"", value);
}

static int any_json(Buf *b, Reader r, int depth);

/* The KeyValues of `r`'s repeated field `number` as one JSON object. `ray_leaves`: a `ray.*` key
 * leaves the span to Python. */
static int object_json(Buf *b, Reader r, uint32_t number, int depth, int ray_leaves) {
    Reader keys[MAX_KEYS];
    int count = 0, rc;
    if (depth > MAX_DEPTH) return LEAVE;
    if (OUT(b, "{") < 0) return -1;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != number || f.wire_type != 2) continue;
        Reader none = {(const uint8_t *)"", (const uint8_t *)""};
        Reader key = none, value = none;
        int seen_key = 0, seen_value = 0;
        Reader kv = f.payload;
        while (kv.p < kv.end) {
            Field g;
            if (next_field(&kv, &g) < 0) return -1;
            if (g.wire_type != 2) continue;
            if (g.number == 1) {
                if (seen_key++) return LEAVE;
                key = g.payload;
            } else if (g.number == 2) {
                if (seen_value++) return LEAVE;
                value = g.payload;
            }
        }
        Py_ssize_t len = key.end - key.p;
        if (ray_leaves && len >= 4 && memcmp(key.p, "ray.", 4) == 0) return LEAVE;
        if (count == MAX_KEYS) return LEAVE;
        for (int i = 0; i < count; i++)
            if (keys[i].end - keys[i].p == len && memcmp(keys[i].p, key.p, (size_t)len) == 0) return LEAVE;
        keys[count] = key;
        if (count++ && OUT(b, ",") < 0) return -1;
        if ((rc = string_json(b, key)) != 0) return rc;
        if (OUT(b, ":") < 0) return -1;
        if (!seen_value) {
            if (OUT(b, "null") < 0) return -1;
        } else if ((rc = any_json(b, value, depth + 1)) != 0) {
            return rc;
        }
    }
    return OUT(b, "}");
}

static int array_json(Buf *b, Reader r, int depth) {
    int count = 0, rc;
    if (OUT(b, "[") < 0) return -1;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != 1 || f.wire_type != 2) continue;
        if (count++ && OUT(b, ",") < 0) return -1;
        if ((rc = any_json(b, f.payload, depth + 1)) != 0) return rc;
    }
    return OUT(b, "]");
}

/* An AnyValue: its one member (unknown fields skipped), null when it has none. */
static int any_json(Buf *b, Reader r, int depth) {
    if (depth > MAX_DEPTH) return LEAVE;
    Field member;
    int members = 0;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        int known = f.wire_type == 2   ? f.number == 1 || (f.number >= 5 && f.number <= 7)
                    : f.wire_type == 0 ? f.number == 2 || f.number == 3
                                       : f.wire_type == 1 && f.number == 4;
        if (!known) continue;
        if (members++) return LEAVE;
        member = f;
    }
    if (!members) return OUT(b, "null");
    switch (member.number) {
    case 1: return string_json(b, member.payload);
    case 2: return member.scalar ? OUT(b, "true") : OUT(b, "false");
    case 3: return number_json(b, "%lld", (long long)member.scalar);
    case 4: return double_json(b, member.scalar, dumps);
    case 5: return array_json(b, member.payload, depth);
    case 6: return object_json(b, member.payload, 1, depth, 0);
    default: return base64_json(b, member.payload);
    }
}

static int event_json(Buf *b, Reader r) {
    Reader none = {(const uint8_t *)"", (const uint8_t *)""}, name = none;
    uint64_t time = 0;
    int rc;
    for (Reader s = r; s.p < s.end;) {
        Field f;
        if (next_field(&s, &f) < 0) return -1;
        if (f.number == 1 && f.wire_type == 1) time = f.scalar;
        if (f.number == 2 && f.wire_type == 2) name = f.payload;
    }
    if (OUT(b, "{\"name\":") < 0) return -1;
    if ((rc = string_json(b, name)) != 0) return rc;
    if (number_json(b, ",\"timeUnixNano\":%llu,\"attributes\":", (unsigned long long)time) < 0) return -1;
    if ((rc = object_json(b, r, 3, 0, 0)) != 0) return rc;
    return OUT(b, "}");
}

static int link_json(Buf *b, Reader r) {
    Reader none = {(const uint8_t *)"", (const uint8_t *)""}, trace_id = none, span_id = none, state = none;
    int rc;
    for (Reader s = r; s.p < s.end;) {
        Field f;
        if (next_field(&s, &f) < 0) return -1;
        if (f.wire_type != 2) continue;
        if (f.number == 1) trace_id = f.payload;
        if (f.number == 2) span_id = f.payload;
        if (f.number == 3) state = f.payload;
    }
    if (OUT(b, "{\"traceId\":") < 0 || hex_json(b, trace_id) < 0) return -1;
    if (OUT(b, ",\"spanId\":") < 0 || hex_json(b, span_id) < 0) return -1;
    if (OUT(b, ",\"traceState\":") < 0) return -1;
    if ((rc = string_json(b, state)) != 0) return rc;
    if (OUT(b, ",\"attributes\":") < 0) return -1;
    if ((rc = object_json(b, r, 4, 0, 0)) != 0) return rc;
    return OUT(b, "}");
}

/* The repeated message field `number` of `r` as a JSON array, each item written by `item`. */
static int list_json(Buf *b, Reader r, uint32_t number, int (*item)(Buf *, Reader)) {
    int count = 0, rc;
    if (OUT(b, "[") < 0) return -1;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != number || f.wire_type != 2) continue;
        if (count++ && OUT(b, ",") < 0) return -1;
        if ((rc = item(b, f.payload)) != 0) return rc;
    }
    return OUT(b, "]");
}

/* One span's record (span_parts' reading), ending with `tail`. */
static int span_json(Buf *b, Reader span, PyObject *tail) {
    SpanFields s;
    int rc;
    if (read_span_fields(span, &s) < 0) return -1;
    if (OUT(b, "{\"signal\":\"span\",\"traceId\":") < 0 || hex_json(b, s.trace_id) < 0) return -1;
    if (OUT(b, ",\"spanId\":") < 0 || hex_json(b, s.span_id) < 0) return -1;
    if (OUT(b, ",\"parentSpanId\":") < 0 || hex_json(b, s.parent) < 0) return -1;
    if (OUT(b, ",\"traceState\":") < 0) return -1;
    if ((rc = string_json(b, s.trace_state)) != 0) return rc;
    if (OUT(b, ",\"name\":") < 0) return -1;
    if ((rc = string_json(b, s.name)) != 0) return rc;
    if (OUT(b, ",\"kind\":") < 0 || enum_json(b, s.kind, kind_names) < 0) return -1;
    if (number_json(b, ",\"startTimeUnixNano\":%llu", (unsigned long long)s.start) < 0) return -1;
    if (number_json(b, ",\"endTimeUnixNano\":%llu", (unsigned long long)s.end) < 0) return -1;
    if (OUT(b, ",\"status\":{\"code\":") < 0 || enum_json(b, s.status_code, code_names) < 0) return -1;
    if (OUT(b, ",\"message\":") < 0) return -1;
    if ((rc = string_json(b, s.status_message)) != 0) return rc;
    if (OUT(b, "},\"attributes\":") < 0) return -1;
    if ((rc = object_json(b, span, 9, 0, 1)) != 0) return rc;
    if (OUT(b, ",\"events\":") < 0) return -1;
    if ((rc = list_json(b, span, 11, event_json)) != 0) return rc;
    if (OUT(b, ",\"links\":") < 0) return -1;
    if ((rc = list_json(b, span, 13, link_json)) != 0) return rc;
    return buf_bytes(b, tail);
}

static PyObject *records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "records(scope_spans: bytes, tail: bytes)");
        return NULL;
    }
    if (dumps == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_span_records.bind() was not called");
        return NULL;
    }
    Reader r = {(const uint8_t *)PyBytes_AS_STRING(args[0]), NULL};
    r.end = r.p + PyBytes_GET_SIZE(args[0]);
    PyObject *list = PyList_New(0);
    Buf b = {NULL, 0, 0};
    if (list == NULL) return NULL;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto fail;
        if (f.number != 2 || f.wire_type != 2) continue; /* ScopeSpans.spans */
        b.len = 0;
        int rc = span_json(&b, f.payload, args[1]);
        if (rc < 0) goto fail;
        PyObject *record = rc == LEAVE ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize(b.data, b.len);
        if (record == NULL || PyList_Append(list, record) < 0) {
            Py_XDECREF(record);
            goto fail;
        }
        Py_DECREF(record);
    }
    PyMem_Free(b.data);
    return list;
fail:
    PyMem_Free(b.data);
    Py_DECREF(list);
    return NULL;
}

static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind(dumps, kind_names: tuple[bytes, ...], code_names: tuple[bytes, ...])");
        return NULL;
    }
    for (int t = 1; t <= 2; t++)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[t]); i++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(args[t], i))) {
                PyErr_SetString(PyExc_TypeError, "names must be JSON strings as bytes");
                return NULL;
            }
    Py_XSETREF(dumps, Py_NewRef(args[0]));
    Py_XSETREF(kind_names, Py_NewRef(args[1]));
    Py_XSETREF(code_names, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL,
     "records(scope_spans, tail) -> each span's JSON record ending with tail, or None where Python decides."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(dumps, kind_names, code_names): orjson.dumps and the JSON names of kinds and status codes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_span_records", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__span_records(void) { return PyModule_Create(&module_def); }
