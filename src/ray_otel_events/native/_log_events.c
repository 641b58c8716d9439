/* An OTLP logs request whose every record carries a RayEvent, read in one pass over its protobuf
 * bytes: each record's body (a kvlist AnyValue, the event's JSON object) written straight to the
 * RayEvent's wire bytes, with no request message, no Python dict and no RayEvent message made.
 *
 * It answers only where the Python path (ExportLogsServiceRequest.FromString, then per record
 * to_ray_events.ray_event_from_log_record: value_of the body, then the ray_json_decode reader)
 * would take every record: the body is read by the rules and the schema of that reader
 * (_ray_json_wire.c reads the same fields from the dict value_of makes), and the record's event
 * name must be the one its event type means. Anything else, and anything upb might read otherwise
 * or refuse (a field it does not know here, a wire type a field cannot have, a member or a body
 * given twice, text that is not UTF-8, bytes values, ids of the wrong length, malformed bytes), and
 * the answer is None: the request then takes the Python path whole, which gives the results,
 * rejections and errors. Optional: without a C compiler that path is the only one. */

#define PY_SSIZE_T_CLEAN
#include "json_text.h"
#include "ray_json_values.h"
#include "any_value.h"
#include "wire_schema.h"

#define LEFT 0 /* the Python path reads this */
#define DONE 1
#define FAILED (-1) /* an exception that is not the input's fault (memory) */
#define MAX_DEPTH 32
#define MAX_KEYS 64

static PyObject *event_schema;   /* ray_json_decode's schema of RayEvent (JSON and proto names) */
static PyObject *event_names;    /* event type -> the event name (bytes) its records carry */
static uint32_t type_field;      /* RayEvent.event_type's number */

/* The schema's dicts looked up by a key's UTF-8 bytes: the field (or enum number) each (dict, key)
 * found last, so the keys every event repeats make no str. The dicts live as long as the bound
 * schema (bind() clears this), so the borrowed references stay good. */
#define CACHE_SIZE 1024
#define CACHED_KEY 48
typedef struct {
    PyObject *table, *value;
    Py_ssize_t n;
    uint8_t key[CACHED_KEY];
} Cached;
static Cached cache[CACHE_SIZE];

static PyObject *text_of(Reader r) { return PyUnicode_DecodeUTF8((const char *)r.p, r.end - r.p, NULL); }

/* table[key] (a borrowed reference), or NULL: absent, or an error is set. */
static PyObject *lookup(PyObject *table, Reader key) {
    Py_ssize_t n = key.end - key.p;
    uint64_t hash = 1469598103934665603ull ^ (uint64_t)(uintptr_t)table;
    for (Py_ssize_t i = 0; i < n; i++) hash = (hash ^ key.p[i]) * 1099511628211ull;
    Cached *c = &cache[(hash ^ hash >> 32) % CACHE_SIZE];
    if (c->table == table && c->n == n && memcmp(c->key, key.p, (size_t)n) == 0) return c->value;
    PyObject *text = text_of(key);
    if (text == NULL) return NULL;
    PyObject *value = PyDict_GetItemWithError(table, text);
    Py_DECREF(text);
    if (value != NULL && n <= CACHED_KEY) {
        *c = (Cached){table, value, n, {0}};
        memcpy(c->key, key.p, (size_t)n);
    }
    return value;
}

/* One AnyValue: its only member and that member's bytes or number. */
typedef struct {
    int kind;
    Reader payload;
    uint64_t scalar;
} Value;

static int member_kind(const Field *f) {
    static const int wire_types[] = {-1, 2, 0, 0, 1, 2, 2, 2};
    return f->number >= 1 && f->number <= 7 && wire_types[f->number] == f->wire_type ? (int)f->number : A_NONE;
}

/* The AnyValue in `r`, if it has exactly one member, known, and its text is UTF-8. */
static int value_of(Reader r, Value *v) {
    v->kind = A_NONE;
    while (r.p < r.end) {
        Field f = {0};
        if (next_field(&r, &f) < 0) {
            PyErr_Clear();
            return LEFT;
        }
        int kind = member_kind(&f);
        if (kind == A_NONE || v->kind != A_NONE) return LEFT;
        *v = (Value){kind, f.payload, f.scalar};
    }
    if (v->kind == A_STRING && !utf8_valid(v->payload.p, v->payload.end - v->payload.p)) return LEFT;
    return v->kind == A_NONE ? LEFT : DONE;
}

/* A KeyValue: its key (UTF-8) and value, each given once and nothing else. */
static int key_value(Reader r, Reader *key, Reader *value) {
    int seen = 0;
    while (r.p < r.end) {
        Field f = {0};
        if (next_field(&r, &f) < 0) {
            PyErr_Clear();
            return LEFT;
        }
        if (f.wire_type != 2 || (f.number != 1 && f.number != 2) || seen & (int)f.number) return LEFT;
        seen |= (int)f.number;
        *(f.number == 1 ? key : value) = f.payload;
    }
    return seen == 3 && utf8_valid(key->p, key->end - key->p) ? DONE : LEFT;
}

/* The next entry (field 1, length-delimited) of a KeyValueList or ArrayValue; 0 at the end. */
static int next_entry(Reader *r, Reader *entry) {
    if (r->p >= r->end) return 0;
    Field f = {0};
    if (next_field(r, &f) < 0) {
        PyErr_Clear();
        return LEFT - 1;
    }
    if (f.number != 1 || f.wire_type != 2) return LEFT - 1;
    *entry = f.payload;
    return DONE;
}

/* -- values nobody reads, checked as upb would take them (attributes, resources, scopes) ------- */

static int valid_key_value(Reader r, int depth);

static int valid_value(Reader r, int depth) {
    Value v;
    if (depth > MAX_DEPTH || value_of(r, &v) != DONE) return LEFT;
    if (v.kind != A_ARRAY && v.kind != A_KVLIST) return DONE;
    Reader entry;
    int more;
    while ((more = next_entry(&v.payload, &entry)) == DONE) {
        int done = v.kind == A_ARRAY ? valid_value(entry, depth + 1) : valid_key_value(entry, depth + 1);
        if (done != DONE) return done;
    }
    return more == 0 ? DONE : LEFT;
}

static int valid_key_value(Reader r, int depth) {
    Reader key, value;
    return key_value(r, &key, &value) == DONE ? valid_value(value, depth) : LEFT;
}

/* A message of string fields (`strings`, a bit per number), KeyValue lists (`lists`) and varints
 * (`varints`): a Resource or an InstrumentationScope. */
static int valid_message(Reader r, unsigned strings, unsigned lists, unsigned varints) {
    while (r.p < r.end) {
        Field f = {0};
        if (next_field(&r, &f) < 0) {
            PyErr_Clear();
            return LEFT;
        }
        unsigned bit = f.number < 32 ? 1u << f.number : 0;
        if (f.wire_type == 0 && bit & varints) continue;
        if (f.wire_type != 2) return LEFT;
        if (bit & strings) {
            if (!utf8_valid(f.payload.p, f.payload.end - f.payload.p)) return LEFT;
        } else if (!(bit & lists) || valid_key_value(f.payload, 0) != DONE) {
            return LEFT;
        }
    }
    return DONE;
}

/* -- a body to RayEvent wire bytes, by ray_json_decode's schema ------------------------------- */

static int varint_field(Buf *b, uint32_t number, uint64_t value) {
    return buf_varint_field(b, number, value) < 0 ? FAILED : DONE;
}

/* An integer within the field's [low, high]: an int value, or integer text (json_int_text). */
static int int_of(const Value *v, PyObject *field, uint64_t *bits) {
    int negative = 0;
    uint64_t magnitude = 0;
    if (v->kind == A_INT) {
        int64_t number = (int64_t)v->scalar;
        negative = number < 0;
        magnitude = negative ? (uint64_t)0 - (uint64_t)number : (uint64_t)number;
    } else if (v->kind != A_STRING || json_int_text(v->payload.p, v->payload.end - v->payload.p, &negative, &magnitude) < 0) {
        return LEFT;
    }
    long long low = PyLong_AsLongLong(PyTuple_GET_ITEM(field, F_LOW));
    unsigned long long high = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(field, F_HIGH));
    if (PyErr_Occurred()) return FAILED;
    return int_bits_within(negative, magnitude, low, high, bits) < 0 ? LEFT : DONE;
}

/* An enum: its name (a string) or a number it has. */
static int enum_of(const Value *v, PyObject *extra, uint64_t *bits) {
    PyObject *number;
    if (v->kind == A_STRING) {
        number = lookup(PyTuple_GET_ITEM(extra, 0), v->payload);
        if (number == NULL) return PyErr_Occurred() ? FAILED : LEFT;
        Py_INCREF(number);
    } else if (v->kind == A_INT) {
        number = PyLong_FromLongLong((long long)v->scalar);
        if (number == NULL) return FAILED;
        int known = PySet_Contains(PyTuple_GET_ITEM(extra, 1), number);
        if (known <= 0) {
            Py_DECREF(number);
            return known < 0 ? FAILED : LEFT;
        }
    } else {
        return LEFT;
    }
    long long value = PyLong_AsLongLong(number);
    Py_DECREF(number);
    if (value == -1 && PyErr_Occurred()) return FAILED;
    *bits = (uint64_t)value;
    return DONE;
}

static int message_fields(Buf *b, Reader kvlist, PyObject *schema, int depth);

/* A Timestamp (RFC 3339 text in UTC) or a nested message (a kvlist) as field `number`. */
static int nested(Buf *b, uint32_t number, int kind, PyObject *extra, const Value *v, int depth) {
    Buf inner = {NULL, 0, 0};
    int done = LEFT;
    if (kind == K_TIMESTAMP && v->kind == A_STRING) {
        const uint8_t *p = v->payload.p;
        Py_ssize_t n = v->payload.end - p;
        int ascii = 1;
        for (Py_ssize_t i = 0; i < n; i++) ascii &= p[i] < 0x80;
        int64_t seconds;
        int nanos;
        if (ascii && rfc3339_utc((const char *)p, n, &seconds, &nanos) == 0) {
            done = varint_field(&inner, 1, (uint64_t)seconds);
            if (done == DONE && nanos) done = varint_field(&inner, 2, (uint64_t)nanos);
        }
    } else if (kind == K_MESSAGE && v->kind == A_KVLIST) {
        done = message_fields(&inner, v->payload, extra, depth + 1);
    }
    if (done == DONE && buf_field(b, number, inner.data ? inner.data : "", inner.len) < 0) done = FAILED;
    PyMem_Free(inner.data);
    return done;
}

/* One value of `field`'s kind as field `number` (a map entry's value is field 2). */
static int value_field(Buf *b, uint32_t number, PyObject *field, const Value *v, int depth) {
    int kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(field, F_KIND));
    PyObject *extra = PyTuple_GET_ITEM(field, F_EXTRA);
    const char *text = (const char *)v->payload.p;
    Py_ssize_t n = v->payload.end - v->payload.p;
    uint64_t bits;
    int done;
    switch (kind) {
    case K_STRING:
        if (v->kind != A_STRING) return LEFT;
        return buf_field(b, number, text, n) < 0 ? FAILED : DONE;
    case K_BYTES: /* base64 text */
        if (v->kind != A_STRING) return LEFT;
        return (done = buf_base64_field(b, number, text, n)) < 0 ? FAILED : done ? LEFT : DONE;
    case K_BOOL:
        return v->kind == A_BOOL ? varint_field(b, number, v->scalar != 0) : LEFT;
    case K_INT:
        return (done = int_of(v, field, &bits)) == DONE ? varint_field(b, number, bits) : done;
    case K_ENUM:
        return (done = enum_of(v, extra, &bits)) == DONE ? varint_field(b, number, bits) : done;
    case K_DOUBLE:
    case K_FLOAT: {
        double d;
        if (v->kind == A_DOUBLE) {
            memcpy(&d, &v->scalar, 8);
        } else if (v->kind == A_INT) {
            d = (double)(int64_t)v->scalar;
        } else {
            return LEFT;
        }
        int written = buf_real_field(b, number, d, kind == K_FLOAT);
        return written < 0 ? FAILED : written ? LEFT : DONE;
    }
    case K_MESSAGE:
    case K_TIMESTAMP:
        return nested(b, number, kind, extra, v, depth);
    default:
        return LEFT;
    }
}

/* A map: a kvlist of distinct keys, one entry message {1: key, 2: value} each. */
static int map_field(Buf *b, uint32_t number, PyObject *field, const Value *v, int depth) {
    if (v->kind != A_KVLIST) return LEFT;
    Reader entries = v->payload, entry, keys[MAX_KEYS];
    int n_keys = 0, more, done = DONE;
    Buf out = {NULL, 0, 0};
    while (done == DONE && (more = next_entry(&entries, &entry)) == DONE) {
        Reader key, raw;
        Value item;
        if (n_keys == MAX_KEYS || key_value(entry, &key, &raw) != DONE || value_of(raw, &item) != DONE) {
            done = LEFT;
            break;
        }
        Py_ssize_t key_n = key.end - key.p;
        for (int i = 0; i < n_keys; i++) {
            if (keys[i].end - keys[i].p == key_n && memcmp(keys[i].p, key.p, (size_t)key_n) == 0) done = LEFT;
        }
        keys[n_keys++] = key;
        out.len = 0;
        if (done == DONE && buf_field(&out, 1, (const char *)key.p, key_n) < 0) done = FAILED;
        if (done == DONE) done = value_field(&out, 2, field, &item, depth);
        if (done == DONE && buf_field(b, number, out.data, out.len) < 0) done = FAILED;
    }
    PyMem_Free(out.data);
    return done == DONE && more != 0 ? LEFT : done;
}

/* Every key of a kvlist by `schema` (JSON and proto names -> field), as _ray_json_wire.message_fields
 * reads the dict of the same entries: each field once, one member per oneof. */
static int message_fields(Buf *b, Reader kvlist, PyObject *schema, int depth) {
    if (depth > MAX_DEPTH) return LEFT;
    uint32_t seen[MAX_KEYS];
    PyObject *oneofs[MAX_KEYS];
    int n_seen = 0, n_oneofs = 0, more, done = DONE;
    Reader entry;
    while (done == DONE && (more = next_entry(&kvlist, &entry)) == DONE) {
        Reader key_text, raw;
        Value v;
        if (n_seen == MAX_KEYS || key_value(entry, &key_text, &raw) != DONE || value_of(raw, &v) != DONE) return LEFT;
        PyObject *field = lookup(schema, key_text);
        if (field == NULL) return PyErr_Occurred() ? FAILED : LEFT; /* an unknown field */
        uint32_t number = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(field, F_NUMBER));
        for (int i = 0; i < n_seen; i++) {
            if (seen[i] == number) return LEFT; /* the same field twice, or under both names */
        }
        seen[n_seen++] = number;
        PyObject *oneof = PyTuple_GET_ITEM(field, F_ONEOF);
        if (oneof != Py_None) {
            for (int i = 0; i < n_oneofs; i++) {
                if (oneofs[i] == oneof) return LEFT; /* two members of one oneof */
            }
            oneofs[n_oneofs++] = oneof;
        }
        long label = PyLong_AsLong(PyTuple_GET_ITEM(field, F_LABEL));
        if (label == MAP) {
            done = map_field(b, number, field, &v, depth);
        } else if (label == REPEATED) {
            if (v.kind != A_ARRAY) return LEFT;
            Reader items = v.payload, item;
            int more_items;
            while (done == DONE && (more_items = next_entry(&items, &item)) == DONE) {
                Value element;
                done = value_of(item, &element);
                if (done == DONE) done = value_field(b, number, field, &element, depth);
            }
            if (done == DONE && more_items != 0) done = LEFT;
        } else {
            done = value_field(b, number, field, &v, depth);
        }
    }
    return done == DONE && more != 0 ? LEFT : done;
}

/* The event type an event's wire bytes (top level) give: the last event_type field, or 0. */
static uint64_t event_type_of(Reader r) {
    uint64_t type = 0;
    Field f = {0};
    while (r.p < r.end && next_field(&r, &f) == 0) {
        if (f.number == type_field && f.wire_type == 0) type = f.scalar;
    }
    PyErr_Clear();
    return type;
}

/* -- the request ------------------------------------------------------------------------------ */

typedef struct {
    PyObject *wires, *types;
} Events;

/* A LogRecord: its body's RayEvent appended to `events`, if its event name is that event's. */
static int log_record(Reader r, Events *events) {
    Reader name = {NULL, NULL}, body = {NULL, NULL};
    Py_ssize_t trace_n = 0, span_n = 0;
    while (r.p < r.end) {
        Field f = {0};
        if (next_field(&r, &f) < 0) {
            PyErr_Clear();
            return LEFT;
        }
        Py_ssize_t n = f.payload.end - f.payload.p;
        switch (f.number << 3 | (uint32_t)f.wire_type) {
        case 1 << 3 | 1:  /* time_unix_nano */
        case 11 << 3 | 1: /* observed_time_unix_nano */
        case 2 << 3 | 0:  /* severity_number */
        case 7 << 3 | 0:  /* dropped_attributes_count */
        case 8 << 3 | 5:  /* flags */
            break;
        case 3 << 3 | 2: /* severity_text */
            if (!utf8_valid(f.payload.p, n)) return LEFT;
            break;
        case 5 << 3 | 2: /* body */
            if (body.p != NULL) return LEFT;
            body = f.payload;
            break;
        case 6 << 3 | 2: /* attributes */
            if (valid_key_value(f.payload, 0) != DONE) return LEFT;
            break;
        case 9 << 3 | 2:
            trace_n = n;
            break;
        case 10 << 3 | 2:
            span_n = n;
            break;
        case 12 << 3 | 2: /* event_name */
            if (!utf8_valid(f.payload.p, n)) return LEFT;
            name = f.payload;
            break;
        default:
            return LEFT;
        }
    }
    Value v;
    if ((trace_n != 0 && trace_n != 16) || (span_n != 0 && span_n != 8) || name.p == NULL || name.p == name.end ||
        body.p == NULL || value_of(body, &v) != DONE || v.kind != A_KVLIST)
        return LEFT;
    Buf out = {NULL, 0, 0};
    int done = message_fields(&out, v.payload, event_schema, 0);
    PyObject *wire = NULL, *type = NULL;
    if (done == DONE) {
        const uint8_t *written = (const uint8_t *)(out.data ? out.data : "");
        type = PyLong_FromUnsignedLongLong(event_type_of((Reader){written, written + out.len}));
        PyObject *expected = type ? PyDict_GetItemWithError(event_names, type) : NULL;
        if (expected == NULL) {
            done = PyErr_Occurred() ? FAILED : LEFT;
        } else if (PyBytes_GET_SIZE(expected) != name.end - name.p ||
                   memcmp(PyBytes_AS_STRING(expected), name.p, (size_t)(name.end - name.p)) != 0) {
            done = LEFT;
        } else if ((wire = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len)) == NULL ||
                   PyList_Append(events->wires, wire) < 0 || PyList_Append(events->types, type) < 0) {
            done = FAILED;
        }
    }
    Py_XDECREF(wire);
    Py_XDECREF(type);
    PyMem_Free(out.data);
    return done;
}

/* ScopeLogs {scope = 1, log_records = 2, schema_url = 3} or ResourceLogs {resource = 1,
 * scope_logs = 2, schema_url = 3}. */
static int logs_of(Reader r, int scope_level, Events *events) {
    while (r.p < r.end) {
        Field f = {0};
        if (next_field(&r, &f) < 0) {
            PyErr_Clear();
            return LEFT;
        }
        if (f.wire_type != 2) return LEFT;
        int done;
        if (f.number == 1) { /* InstrumentationScope {name, version, attributes, dropped} or Resource */
            done = scope_level ? valid_message(f.payload, 1u << 1 | 1u << 2, 1u << 3, 1u << 4)
                               : valid_message(f.payload, 0, 1u << 1, 1u << 2);
        } else if (f.number == 2) {
            done = scope_level ? log_record(f.payload, events) : logs_of(f.payload, 1, events);
        } else if (f.number == 3) {
            done = utf8_valid(f.payload.p, f.payload.end - f.payload.p) ? DONE : LEFT;
        } else {
            done = LEFT;
        }
        if (done != DONE) return done;
    }
    return DONE;
}

static PyObject *read_request(PyObject *module, PyObject *body) {
    (void)module;
    if (!PyBytes_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "read(body): body must be bytes");
        return NULL;
    }
    if (event_schema == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_log_events.bind() was not called");
        return NULL;
    }
    Events events = {PyList_New(0), PyList_New(0)};
    PyObject *result = NULL;
    if (events.wires == NULL || events.types == NULL) goto done;
    Reader r = bytes_reader(body);
    int taken = DONE;
    while (taken == DONE && r.p < r.end) {
        Field f = {0};
        if (next_field(&r, &f) < 0) {
            PyErr_Clear();
            taken = LEFT;
        } else {
            taken = f.number == 1 && f.wire_type == 2 ? logs_of(f.payload, 0, &events) : LEFT;
        }
    }
    if (taken == DONE) {
        result = PyTuple_Pack(2, events.wires, events.types);
    } else if (taken == LEFT) {
        result = Py_NewRef(Py_None);
    }
done:
    Py_XDECREF(events.wires);
    Py_XDECREF(events.types);
    return result;
}

static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind(schema, type_field, names)");
        return NULL;
    }
    unsigned long number = PyLong_AsUnsignedLong(args[1]);
    if (number == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    memset(cache, 0, sizeof cache);
    Py_XSETREF(event_schema, Py_NewRef(args[0]));
    Py_XSETREF(event_names, Py_NewRef(args[2]));
    type_field = (uint32_t)number;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(schema, type_field, names): RayEvent's reader schema, event_type's number, type -> event name."},
    {"read", read_request, METH_O,
     "read(body) -> (wires, types) of a logs request's RayEvents, or None to read it in Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_log_events", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__log_events(void) {
    return export_any_value_members(export_wire_kinds(PyModule_Create(&module_def)));
}
