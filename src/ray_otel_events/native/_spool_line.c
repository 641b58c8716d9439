/* The OTLP hook's spool lines (tracing/spool.py `span_line`, `submission_line`), compiled: the bytes
 * orjson.dumps writes of the 23-field list the Python twin builds, written from the span's fields
 * with no list made. A task's execution line is written on the task's own thread and its
 * submission line on the submitting one, so this is the hook's cost that users wait for.
 *
 * Values are written as orjson writes them: strings as UTF-8 with only `"`, `\` and control
 * characters escaped, ints in int64 or uint64 range, bools, None, lists and tuples, dicts with str
 * keys, and floats through orjson itself (its shortest form, which differs from Python's repr).
 * Anything else (subclasses of these, other mappings such as a mappingproxy, a lone surrogate, an
 * int beyond 64 bits, a span that is not a DirectSpan, an unknown kind or status code) returns None,
 * and the Python twin writes the line, or raises what it raises. Only reads Python objects this
 * process made. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "json_text.h"

#define MAX_DEPTH 32 /* nesting of attribute values; deeper ones go to Python */
#define MAX_CODES 16
#define SCOPES 8

/* Set by bind(). */
static PyObject *direct_span_type, *span_context_type, *unset_status, *default_trace_state, *dumps;
static PyObject *kind_members[MAX_CODES], *status_members[MAX_CODES];
static long kind_values[MAX_CODES], status_values[MAX_CODES];
static int kinds, statuses;
static long producer_value;

/* Interned attribute names, made at import. */
static PyObject *s_spool_fields, *s_context, *s_event_name, *s_timestamp,
    *s_event_attributes, *s_link_context, *s_status_code, *s_description, *s_to_header, *s_scope_name,
    *s_version, *s_schema_url;

static const char hexdigits[] = "0123456789abcdef";

/* -- values ------------------------------------------------------------------------------------ */

static const char digit_pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";

/* A uint64 in decimal (a '-' first when `negative`), two digits a division: a line has eight or so
 * of up to 20 digits (ids, times), which one digit a division made a tenth of the line's cost. */
static int put_number(Buf *b, uint64_t v, int negative) {
    if (buf_reserve(b, 21) < 0) return -1;
    char digits[20];
    int i = 20;
    while (v >= 100) {
        unsigned pair = (unsigned)(v % 100);
        v /= 100;
        i -= 2;
        memcpy(digits + i, digit_pairs + 2 * pair, 2);
    }
    if (v >= 10) {
        i -= 2;
        memcpy(digits + i, digit_pairs + 2 * v, 2);
    } else {
        digits[--i] = (char)('0' + v);
    }
    char *o = b->data + b->len;
    if (negative) *o++ = '-';
    memcpy(o, digits + i, (size_t)(20 - i));
    b->len = o + (20 - i) - b->data;
    return 0;
}

static int put_unsigned(Buf *b, uint64_t v) { return put_number(b, v, 0); }

static int put_signed(Buf *b, int64_t v) { return put_number(b, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0); }

/* An int as orjson writes it: int64 and uint64 range only (it raises beyond). */
static int int_json(Buf *b, PyObject *value) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) return put_signed(b, (int64_t)v);
    if (overflow < 0) return LEAVE;
    unsigned long long u = PyLong_AsUnsignedLongLong(value);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return LEAVE;
    }
    return put_unsigned(b, (uint64_t)u);
}

/* True when no byte of ASCII text needs escaping (`"`, `\`, below 0x20), eight bytes a step: a
 * byte below n, and a zero byte of w ^ c (a byte equal to c), found as in "Bit Twiddling Hacks"
 * (exact as to whether any byte is: a borrow only spreads from a byte that is). */
static int plain_ascii(const uint8_t *s, Py_ssize_t n) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
        if (((w - ones * 0x20) & ~w & highs) | ((quote - ones) & ~quote & highs) |
            ((backslash - ones) & ~backslash & highs))
            return 0;
    }
    for (; i < n; i++)
        if (s[i] < 0x20 || s[i] == '"' || s[i] == '\\') return 0;
    return 1;
}

/* A str as orjson writes it: UTF-8, `"` `\` and control characters escaped (as put_string_json);
 * a lone surrogate (orjson raises) is left to Python. */
static int str_json(Buf *b, PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (PyUnicode_IS_ASCII(text)) {
        const uint8_t *s = PyUnicode_1BYTE_DATA(text);
        if (plain_ascii(s, n)) { /* most strings: copied as they are */
            if (buf_reserve(b, n + 2) < 0) return -1;
            char *o = b->data + b->len;
            *o++ = '"';
            memcpy(o, s, (size_t)n);
            o[n] = '"';
            b->len += n + 2;
            return 0;
        }
        if (buf_reserve(b, 2 + 6 * n) < 0) return -1;
        b->len = put_string_json(b->data + b->len, s, n) - b->data;
        return 0;
    }
    if (buf_reserve(b, 2 + 6 * n) < 0) return -1;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x80) {
            if (c < 0x800) {
                *o++ = (char)(0xC0 | (c >> 6));
            } else if (c < 0x10000) {
                if (c >= 0xD800 && c <= 0xDFFF) return LEAVE; /* nothing written: b->len unchanged */
                *o++ = (char)(0xE0 | (c >> 12));
                *o++ = (char)(0x80 | ((c >> 6) & 0x3F));
            } else {
                *o++ = (char)(0xF0 | (c >> 18));
                *o++ = (char)(0x80 | ((c >> 12) & 0x3F));
                *o++ = (char)(0x80 | ((c >> 6) & 0x3F));
            }
            *o++ = (char)(0x80 | (c & 0x3F));
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        o = put_escape(o, c);
    }
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

/* A float through orjson.dumps itself: its text (shortest round trip, `1e-7`, NaN as null) is not
 * Python's repr. */
static int float_json(Buf *b, PyObject *value) {
    PyObject *text = PyObject_CallOneArg(dumps, value);
    if (text == NULL) return -1;
    int rc = PyBytes_CheckExact(text) ? buf_bytes(b, text) : LEAVE;
    Py_DECREF(text);
    return rc;
}

static int value_json(Buf *b, PyObject *value, int depth);

/* A dict with str keys as orjson writes it (key order kept). */
static int dict_json(Buf *b, PyObject *dict, int depth) {
    if (OUT(b, "{") < 0) return -1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int first = 1, rc = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return LEAVE;
        if (!first && OUT(b, ",") < 0) return -1;
        first = 0;
        Py_INCREF(key);
        Py_INCREF(value); /* held while orjson writes a float */
        rc = str_json(b, key);
        if (!rc) rc = OUT(b, ":");
        if (!rc) rc = value_json(b, value, depth + 1);
        Py_DECREF(key);
        Py_DECREF(value);
        if (rc) return rc;
    }
    return OUT(b, "}");
}

static int value_json(Buf *b, PyObject *value, int depth) {
    if (PyUnicode_CheckExact(value)) return str_json(b, value);
    if (PyLong_CheckExact(value)) return int_json(b, value);
    if (value == Py_True) return OUT(b, "true");
    if (value == Py_False) return OUT(b, "false");
    if (value == Py_None) return OUT(b, "null");
    if (depth >= MAX_DEPTH) return LEAVE;
    if (PyDict_CheckExact(value)) return dict_json(b, value, depth);
    if (PyList_CheckExact(value) || PyTuple_CheckExact(value)) {
        PyObject *held = Py_NewRef(value);
        int rc = OUT(b, "[");
        for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(held); i++) {
            PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(held, i));
            if (i) rc = OUT(b, ",");
            if (!rc) rc = value_json(b, item, depth + 1);
            Py_DECREF(item);
        }
        if (!rc) rc = OUT(b, "]");
        Py_DECREF(held);
        return rc;
    }
    if (PyFloat_CheckExact(value)) return float_json(b, value);
    return LEAVE;
}

/* `attributes or {}` of None or a dict. Other mappings (a sampler's mappingproxy, BoundedAttributes)
 * go to Python, whose orjson fallback copies them through their own keys(). */
static int attributes_or_empty_json(Buf *b, PyObject *attributes) {
    if (attributes == Py_None) return OUT(b, "{}");
    return PyDict_CheckExact(attributes) ? dict_json(b, attributes, 1) : LEAVE;
}

/* A new reference to an attribute, or NULL with no error set when it cannot be read (the Python
 * twin then reads it and says why). */
static PyObject *field(PyObject *object, PyObject *name) {
    PyObject *value = PyObject_GetAttr(object, name);
    if (value == NULL) PyErr_Clear();
    return value;
}

/* -- span parts -------------------------------------------------------------------------------- */

static int is_span_context(PyObject *context) {
    return (PyObject *)Py_TYPE(context) == span_context_type && PyTuple_GET_SIZE(context) >= 5;
}

/* `trace_state.to_header() if trace_state else ""` */
static int trace_state_json(Buf *b, PyObject *trace_state) {
    if (trace_state == default_trace_state || trace_state == Py_None) return OUT(b, "\"\"");
    int truth = PyObject_IsTrue(trace_state);
    if (truth < 0) {
        PyErr_Clear();
        return LEAVE;
    }
    if (!truth) return OUT(b, "\"\"");
    PyObject *header = PyObject_CallMethodNoArgs(trace_state, s_to_header);
    if (header == NULL) {
        PyErr_Clear();
        return LEAVE;
    }
    int rc = value_json(b, header, 1);
    Py_DECREF(header);
    return rc;
}

/* `trace id >> 64, trace id & (2**64 - 1)` of a trace id in 0 .. 2**128 - 1 (`hex` false), or its
 * 32 hex digits as a JSON string (`hex` true). */
static int trace_id_json(Buf *b, PyObject *id, int hex) {
    unsigned char bytes[16];
    if (!PyLong_CheckExact(id)) return LEAVE;
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t need = PyLong_AsNativeBytes(
        id, bytes, 16, Py_ASNATIVEBYTES_BIG_ENDIAN | Py_ASNATIVEBYTES_UNSIGNED_BUFFER | Py_ASNATIVEBYTES_REJECT_NEGATIVE);
    if (need < 0) {
        PyErr_Clear();
        return LEAVE;
    }
    if (need > 16) return LEAVE;
#else
    if (_PyLong_AsByteArray((PyLongObject *)id, bytes, 16, 0, 0) < 0) {
        PyErr_Clear(); /* negative or too big */
        return LEAVE;
    }
#endif
    if (hex) {
        if (buf_reserve(b, 34) < 0) return -1;
        char *o = b->data + b->len;
        *o++ = '"';
        for (int i = 0; i < 16; i++) {
            *o++ = hexdigits[bytes[i] >> 4];
            *o++ = hexdigits[bytes[i] & 15];
        }
        *o++ = '"';
        b->len = o - b->data;
        return 0;
    }
    uint64_t high = 0, low = 0;
    for (int i = 0; i < 8; i++) {
        high = high << 8 | bytes[i];
        low = low << 8 | bytes[8 + i];
    }
    if (put_unsigned(b, high) < 0 || OUT(b, ",") < 0) return -1;
    return put_unsigned(b, low);
}

/* `int(trace_flags)`: an int, or an int subclass (TraceFlags, bool) that keeps int's conversion. */
static int flags_json(Buf *b, PyObject *flags) {
    PyNumberMethods *number = Py_TYPE(flags)->tp_as_number;
    if (!PyLong_Check(flags) || number == NULL || number->nb_int != PyLong_Type.tp_as_number->nb_int) return LEAVE;
    return int_json(b, flags);
}

/* trace id (two numbers), span id, flags, trace state: a span's context, from its tuple. */
static int context_json(Buf *b, PyObject *context) {
    int rc = trace_id_json(b, PyTuple_GET_ITEM(context, 0), 0);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = value_json(b, PyTuple_GET_ITEM(context, 1), 1);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = flags_json(b, PyTuple_GET_ITEM(context, 3));
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = trace_state_json(b, PyTuple_GET_ITEM(context, 4));
    return rc;
}

/* parent span id (0: none), parent is remote */
static int parent_json(Buf *b, PyObject *parent) {
    if (parent == Py_None) return OUT(b, "0,false");
    if (!is_span_context(parent)) return LEAVE;
    int rc = value_json(b, PyTuple_GET_ITEM(parent, 1), 1);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = value_json(b, PyTuple_GET_ITEM(parent, 2), 1);
    return rc;
}

static int member_json(Buf *b, PyObject *member, PyObject *const *members, const long *values, int n) {
    for (int i = 0; i < n; i++)
        if (members[i] == member) return put_signed(b, values[i]);
    return LEAVE;
}

/* status code, status description: (0, "") when unset or not yet known. */
static int status_json(Buf *b, PyObject *status, int started) {
    if (started || status == unset_status) return OUT(b, "0,\"\"");
    PyObject *code = field(status, s_status_code);
    if (code == NULL) return LEAVE;
    int rc = member_json(b, code, status_members, status_values, statuses);
    Py_DECREF(code);
    if (rc) return rc;
    PyObject *description = field(status, s_description);
    if (description == NULL) return LEAVE;
    if (description == Py_None || (PyUnicode_CheckExact(description) && PyUnicode_GET_LENGTH(description) == 0))
        rc = OUT(b, ",\"\"");
    else if (PyUnicode_CheckExact(description))
        rc = OUT(b, ",") ? -1 : str_json(b, description);
    else
        rc = LEAVE;
    Py_DECREF(description);
    return rc;
}

/* [[name, ns, attributes or {}], ...] */
static int events_json(Buf *b, PyObject *events) {
    if (!PyList_CheckExact(events) && !PyTuple_CheckExact(events)) return LEAVE;
    int rc = OUT(b, "[");
    for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(events); i++) {
        PyObject *event = Py_NewRef(PySequence_Fast_GET_ITEM(events, i));
        PyObject *name = field(event, s_event_name);
        PyObject *time = name == NULL ? NULL : field(event, s_timestamp);
        PyObject *attributes = time == NULL ? NULL : field(event, s_event_attributes);
        rc = attributes == NULL ? LEAVE : 0;
        if (!rc && i) rc = OUT(b, ",");
        if (!rc) rc = OUT(b, "[");
        if (!rc) rc = value_json(b, name, 1);
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = value_json(b, time, 1);
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = attributes_or_empty_json(b, attributes);
        if (!rc) rc = OUT(b, "]");
        Py_XDECREF(name);
        Py_XDECREF(time);
        Py_XDECREF(attributes);
        Py_DECREF(event);
    }
    return rc ? rc : OUT(b, "]");
}

/* [[trace id (hex), span id, flags, trace state, attributes or {}, is remote], ...] */
static int links_json(Buf *b, PyObject *links) {
    if (!PyList_CheckExact(links) && !PyTuple_CheckExact(links)) return LEAVE;
    int rc = OUT(b, "[");
    for (Py_ssize_t i = 0; !rc && i < PySequence_Fast_GET_SIZE(links); i++) {
        PyObject *link = Py_NewRef(PySequence_Fast_GET_ITEM(links, i));
        PyObject *context = field(link, s_link_context);
        PyObject *attributes = context == NULL ? NULL : field(link, s_event_attributes);
        rc = attributes == NULL || !is_span_context(context) ? LEAVE : 0;
        if (!rc && i) rc = OUT(b, ",");
        if (!rc) rc = OUT(b, "[");
        if (!rc) rc = trace_id_json(b, PyTuple_GET_ITEM(context, 0), 1);
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = value_json(b, PyTuple_GET_ITEM(context, 1), 1);
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = flags_json(b, PyTuple_GET_ITEM(context, 3));
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = trace_state_json(b, PyTuple_GET_ITEM(context, 4));
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = attributes_or_empty_json(b, attributes);
        if (!rc) rc = OUT(b, ",");
        if (!rc) rc = value_json(b, PyTuple_GET_ITEM(context, 2), 1);
        if (!rc) rc = OUT(b, "]");
        Py_XDECREF(context);
        Py_XDECREF(attributes);
        Py_DECREF(link);
    }
    return rc ? rc : OUT(b, "]");
}

/* -- instrumentation scopes: (name, version or "", schema url or "") kept per scope object ---- */

typedef struct {
    PyObject *scope, *name, *version, *schema_url;
} Scope;

static Scope scope_cache[SCOPES];
static int next_scope;

static PyObject *or_empty(PyObject *value) {
    int truth = PyObject_IsTrue(value);
    if (truth < 0) {
        Py_DECREF(value);
        return NULL;
    }
    if (truth) return value;
    Py_DECREF(value);
    return PyUnicode_New(0, 0);
}

static int scope_json(Buf *b, PyObject *scope) {
    if (scope == Py_None) return OUT(b, "\"\",\"\",\"\"");
    Scope found = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < SCOPES; i++) {
        if (scope_cache[i].scope == scope) {
            found = scope_cache[i];
            Py_INCREF(found.name); /* held: writing a value may run Python, which may replace the entry */
            Py_INCREF(found.version);
            Py_INCREF(found.schema_url);
            break;
        }
    }
    if (found.name == NULL) {
        found.name = field(scope, s_scope_name);
        PyObject *version = found.name == NULL ? NULL : field(scope, s_version);
        found.version = version == NULL ? NULL : or_empty(version);
        PyObject *schema = found.version == NULL ? NULL : field(scope, s_schema_url);
        found.schema_url = schema == NULL ? NULL : or_empty(schema);
        if (found.schema_url == NULL) {
            PyErr_Clear();
            Py_XDECREF(found.name);
            Py_XDECREF(found.version);
            return LEAVE;
        }
        Scope old = scope_cache[next_scope];
        scope_cache[next_scope] = (Scope){Py_NewRef(scope), Py_NewRef(found.name), Py_NewRef(found.version),
                                          Py_NewRef(found.schema_url)};
        next_scope = (next_scope + 1) % SCOPES;
        Py_XDECREF(old.scope);
        Py_XDECREF(old.name);
        Py_XDECREF(old.version);
        Py_XDECREF(old.schema_url);
    }
    int rc = value_json(b, found.name, 1);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = value_json(b, found.version, 1);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = value_json(b, found.schema_url, 1);
    Py_DECREF(found.name);
    Py_DECREF(found.version);
    Py_DECREF(found.schema_url);
    return rc;
}

/* -- whole lines ------------------------------------------------------------------------------- */

enum { KIND_STARTED = 'S', KIND_ENDED = 'E', KIND_STARTED_REF = 's' };

/* One buffer reused by every call (under the GIL); a call that finds it taken (another thread's,
 * entered while this one ran Python code) uses its own. */
static Buf shared;
static int shared_taken;

static PyObject *finish(Buf *b, int rc) {
    PyObject *result = NULL;
    if (rc == 0) {
        if (OUT(b, "\n") == 0) result = PyBytes_FromStringAndSize(b->data, b->len);
    } else if (rc == LEAVE) {
        result = Py_NewRef(Py_None);
    }
    if (b == &shared) {
        shared_taken = 0;
        if (shared.cap > 65536) { /* a huge line once: not kept */
            PyMem_Free(shared.data);
            shared = (Buf){NULL, 0, 0};
        }
    } else {
        PyMem_Free(b->data);
    }
    return result;
}

static Buf *take_buffer(Buf *own) {
    if (shared_taken) return own;
    shared_taken = 1;
    shared.len = 0;
    return &shared;
}

static int check_bound(void) {
    if (dumps != NULL) return 0;
    PyErr_SetString(PyExc_RuntimeError, "_spool_line.bind() was not called");
    return -1;
}

typedef struct {
    PyObject *name, *context, *kind, *parent, *start, *end, *status, *attributes, *events, *links, *scope,
        *dropped_attributes, *dropped_events;
} SpanFields;

/* [kind, name, trace id high, low, span id, flags, trace state, parent span id, parent is remote, span
 * kind, start, end, status code, description, attributes, events, links, scope name, version, schema
 * url, dropped attributes, dropped events, dropped links]: spool.span_line's list. */
static int line_json(Buf *b, int which, const SpanFields *f, int attributes_or_empty) {
    int started = which == KIND_STARTED;
    if (!PyUnicode_CheckExact(f->name) || !is_span_context(f->context)) return LEAVE;
    char head[] = "[\"E\",";
    head[2] = (char)which;
    int rc = OUT(b, head);
    if (!rc) rc = str_json(b, f->name);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = context_json(b, f->context);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = parent_json(b, f->parent);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = f->kind == NULL ? put_signed(b, producer_value) : member_json(b, f->kind, kind_members, kind_values, kinds);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = value_json(b, f->start, 1);
    if (!rc) rc = started ? OUT(b, ",null,") : OUT(b, ",");
    if (!rc && !started) rc = value_json(b, f->end, 1);
    if (!rc && !started) rc = OUT(b, ",");
    if (!rc) rc = status_json(b, f->status, started);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = attributes_or_empty ? attributes_or_empty_json(b, f->attributes) : value_json(b, f->attributes, 1);
    if (!rc) rc = OUT(b, ",");
    if (!rc) {
        if (started || f->events == NULL || f->events == Py_None)
            rc = OUT(b, "[]");
        else
            rc = events_json(b, f->events);
    }
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = f->links == NULL ? OUT(b, "[]") : links_json(b, f->links);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = scope_json(b, f->scope);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = f->dropped_attributes == NULL ? OUT(b, "0") : value_json(b, f->dropped_attributes, 1);
    if (!rc) rc = OUT(b, ",");
    if (!rc) rc = started || f->dropped_events == NULL ? OUT(b, "0") : value_json(b, f->dropped_events, 1);
    if (!rc) rc = OUT(b, ",0]");
    return rc;
}

/* span_line(span, kind): a DirectSpan's line for kind "S" (its start), "E" (its end) or "s" (a
 * start reference, `["s",span id]`). */
static PyObject *span_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "span_line(span, kind)");
        return NULL;
    }
    if (check_bound() < 0) return NULL;
    PyObject *span = args[0], *kind = args[1];
    if ((PyObject *)Py_TYPE(span) != direct_span_type || !PyUnicode_CheckExact(kind) || PyUnicode_GET_LENGTH(kind) != 1)
        Py_RETURN_NONE;
    Py_UCS4 which = PyUnicode_READ_CHAR(kind, 0);
    if (which != KIND_STARTED && which != KIND_ENDED && which != KIND_STARTED_REF) Py_RETURN_NONE;
    Buf own = {NULL, 0, 0};
    Buf *b = take_buffer(&own);
    int rc;
    if (which == KIND_STARTED_REF) {
        PyObject *context = field(span, s_context);
        rc = context == NULL || !is_span_context(context) || !PyLong_CheckExact(PyTuple_GET_ITEM(context, 1)) ? LEAVE : 0;
        if (!rc) rc = OUT(b, "[\"s\",");
        if (!rc) rc = int_json(b, PyTuple_GET_ITEM(context, 1));
        if (!rc) rc = OUT(b, "]");
        Py_XDECREF(context);
        return finish(b, rc);
    }
    /* The span's own fields in one call (DirectSpan.spool_fields): an attribute lookup from C costs
     * more than that call's lookups each. */
    PyObject *fields = PyObject_CallMethodNoArgs(span, s_spool_fields);
    if (fields == NULL) PyErr_Clear();
    rc = fields == NULL || !PyTuple_CheckExact(fields) || PyTuple_GET_SIZE(fields) != 13 ? LEAVE : 0;
    if (!rc) {
        PyObject **v = &PyTuple_GET_ITEM(fields, 0);
        SpanFields f = {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]};
        rc = line_json(b, (int)which, &f, 0);
    }
    Py_XDECREF(fields);
    return finish(b, rc);
}

/* submission_line(name, context, parent, start_ns, end_ns, attributes, scope): an ended PRODUCER
 * span's line with UNSET status and no events or links. */
static PyObject *submission_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "submission_line() takes 7 arguments");
        return NULL;
    }
    if (check_bound() < 0) return NULL;
    SpanFields f = {args[0], args[1], NULL, args[2], args[3], args[4], unset_status, args[5], NULL, NULL, args[6],
                    NULL, NULL};
    Buf own = {NULL, 0, 0};
    Buf *b = take_buffer(&own);
    return finish(b, line_json(b, KIND_ENDED, &f, 1));
}

/* -- binding ------------------------------------------------------------------------------------ */

static int members(PyObject *pairs, PyObject **out_members, long *out_values, int *count) {
    if (!PyTuple_Check(pairs) || PyTuple_GET_SIZE(pairs) > MAX_CODES) {
        PyErr_SetString(PyExc_TypeError, "bind(): (member, value) pairs expected");
        return -1;
    }
    for (int i = 0; i < *count; i++) Py_CLEAR(out_members[i]);
    *count = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pairs); i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "bind(): (member, value) pairs expected");
            return -1;
        }
        long value = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
        if (value == -1 && PyErr_Occurred()) return -1;
        out_members[i] = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        out_values[i] = value;
        *count = (int)i + 1;
    }
    return 0;
}

static PyObject *bind(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *span_type, *context_type, *kind_pairs, *status_pairs, *unset, *default_state, *dumps_callable;
    long producer;
    if (!PyArg_ParseTuple(args, "O!O!OlOOOO:bind", &PyType_Type, &span_type, &PyType_Type, &context_type,
                          &kind_pairs, &producer, &status_pairs, &unset, &default_state, &dumps_callable))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)context_type, &PyTuple_Type) || !PyCallable_Check(dumps_callable)) {
        PyErr_SetString(PyExc_TypeError, "bind(): SpanContext must be a tuple type and dumps callable");
        return NULL;
    }
    if (members(kind_pairs, kind_members, kind_values, &kinds) < 0) return NULL;
    if (members(status_pairs, status_members, status_values, &statuses) < 0) return NULL;
    producer_value = producer;
    Py_XSETREF(direct_span_type, Py_NewRef(span_type));
    Py_XSETREF(span_context_type, Py_NewRef(context_type));
    Py_XSETREF(unset_status, Py_NewRef(unset));
    Py_XSETREF(default_trace_state, Py_NewRef(default_state));
    Py_XSETREF(dumps, Py_NewRef(dumps_callable));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"span_line", (PyCFunction)(void (*)(void))span_line, METH_FASTCALL,
     "span_line(span, kind): a DirectSpan's spool line (kind S, E or s), or None for one the Python twin writes."},
    {"submission_line", (PyCFunction)(void (*)(void))submission_line, METH_FASTCALL,
     "submission_line(name, context, parent, start_ns, end_ns, attributes, scope): a deferred submission span's"
     " spool line, or None for one the Python twin writes."},
    {"bind", bind, METH_VARARGS,
     "bind(DirectSpan, SpanContext, kinds, producer, status codes, UNSET_STATUS, DEFAULT_TRACE_STATE, orjson.dumps)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_spool_line", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

static int intern(PyObject **slot, const char *text) {
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__spool_line(void) {
    if (intern(&s_spool_fields, "spool_fields") || intern(&s_context, "_context") || intern(&s_event_name, "name") ||
        intern(&s_timestamp, "timestamp") || intern(&s_event_attributes, "attributes") || intern(&s_link_context, "context") ||
        intern(&s_status_code, "status_code") || intern(&s_description, "description") ||
        intern(&s_to_header, "to_header") || intern(&s_scope_name, "name") || intern(&s_version, "version") ||
        intern(&s_schema_url, "schema_url"))
        return NULL;
    return PyModule_Create(&module_def);
}
