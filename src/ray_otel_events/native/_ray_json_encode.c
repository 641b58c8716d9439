/* RayEvents' wire bytes straight to the JSON Ray's aggregator posts, compiled: the bytes
 * orjson.dumps makes of ray_json's generated dicts (json_format's keys, values and key order), with
 * no message parsed and no dict made. It follows the schema ray_json._encode_schema builds from the
 * descriptors; an event is left to Python (None in its place) wherever it holds anything this writer
 * does not reproduce exactly: a map with more than one entry (upb orders them by its hash table), a
 * float or well-known-type field other than Timestamp, a Timestamp out of RFC 3339's range, text that
 * is not UTF-8, a message field given twice (upb merges them), two members of one oneof, a wire type
 * a field cannot have, malformed bytes, nesting deeper than MAX_DEPTH. Python then encodes it, or
 * raises what it raises. Optional: without a C compiler ray_json encodes in Python. */

#define PY_SSIZE_T_CLEAN
#include "civil_dates.h"
#include "json_text.h"
#include "named_numbers.h"

/* Kinds and labels: ray_json's _E_ and _L_ constants (exported, and checked by ray_json at import). */
enum {
    E_FALLBACK, E_INT32, E_UINT32, E_SINT32, E_FIXED32, E_SFIXED32,
    E_INT64, E_UINT64, E_SINT64, E_FIXED64, E_SFIXED64,
    E_BOOL, E_STRING, E_BYTES, E_ENUM, E_DOUBLE, E_MESSAGE, E_TIMESTAMP
};
enum { L_IMPLICIT, L_PRESENCE, L_REPEATED, L_MAP };
/* A field: (number, key JSON, kind, label, oneof index or -1, default JSON or None, extra, index in
 * declaration order); extra: an enum's names (tuple by value: JSON bytes or None), a message's
 * schema, or a map's (key kind, value kind, value extra, value default JSON). A message's schema:
 * [fields by number (tuple, None where no field), fields in declaration order, number of oneofs]. */
enum { S_NUMBER, S_KEY, S_KIND, S_LABEL, S_ONEOF, S_DEFAULT, S_EXTRA, S_INDEX };

#define MAX_DEPTH 32
#define MAX_FIELDS 128
#define MAX_ONEOFS 16

static PyObject *dumps; /* orjson.dumps, for doubles; set by bind() */

typedef struct {
    int count;
    Field last;
} Seen;

static long spec_int(PyObject *spec, int item) { return PyLong_AsLong(PyTuple_GET_ITEM(spec, item)); }

/* The wire type a (non-packed) value of this kind has. */
static int wire_type_of(int kind) {
    switch (kind) {
    case E_FIXED32:
    case E_SFIXED32: return 5;
    case E_FIXED64:
    case E_SFIXED64:
    case E_DOUBLE: return 1;
    case E_STRING:
    case E_BYTES:
    case E_MESSAGE:
    case E_TIMESTAMP: return 2;
    default: return 0;
    }
}

static int is_packable(int kind) { return wire_type_of(kind) != 2; }

static int message_json(Buf *b, Reader r, PyObject *schema, int depth);

/* Timestamp.ToJsonString(): UTC, 0, 3, 6 or 9 fractional digits, 'Z'; out of range: LEAVE. */
static int timestamp_json(Buf *b, Reader r) {
    int64_t seconds = 0;
    int32_t nanos = 0;
    int read = read_timestamp(r, &seconds, &nanos);
    if (read < 0) return -1;
    if (read > 0 || !timestamp_in_range(seconds, nanos)) return LEAVE;
    int64_t days = seconds >= 0 ? seconds / 86400 : -((-seconds + 86399) / 86400);
    int64_t in_day = seconds - days * 86400;
    int64_t year;
    int month, day;
    civil_from_days(days, &year, &month, &day);
    if (buf_reserve(b, 48) < 0) return -1;
    char *o = b->data + b->len;
    o += sprintf(o, "\"%04d-%02d-%02dT%02d:%02d:%02d", (int)year, month, day, (int)(in_day / 3600),
                 (int)(in_day / 60 % 60), (int)(in_day % 60));
    if (nanos % 1000) o += sprintf(o, ".%09d", (int)nanos);
    else if (nanos % 1000000) o += sprintf(o, ".%06d", (int)(nanos / 1000));
    else if (nanos) o += sprintf(o, ".%03d", (int)(nanos / 1000000));
    o += sprintf(o, "Z\"");
    b->len = o - b->data;
    return 0;
}

/* One scalar of `kind` from its raw value (varint or fixed bits). */
static int scalar_json(Buf *b, int kind, uint64_t v, PyObject *extra) {
    switch (kind) {
    case E_INT32:
    case E_SFIXED32: return number_json(b, "%d", (int)(int32_t)v);
    case E_UINT32:
    case E_FIXED32: return number_json(b, "%u", (unsigned)(uint32_t)v);
    case E_SINT32: return number_json(b, "%d", (int)(int32_t)(((uint32_t)v >> 1) ^ -((uint32_t)v & 1)));
    case E_INT64:
    case E_SFIXED64: return number_json(b, "\"%lld\"", (long long)v);
    case E_UINT64:
    case E_FIXED64: return number_json(b, "\"%llu\"", (unsigned long long)v);
    case E_SINT64: return number_json(b, "\"%lld\"", (long long)((v >> 1) ^ -(v & 1)));
    case E_BOOL: return v ? OUT(b, "true") : OUT(b, "false");
    case E_ENUM: {
        int value = (int)(int32_t)v;
        if (value >= 0 && value < PyTuple_GET_SIZE(extra)) {
            PyObject *name = PyTuple_GET_ITEM(extra, value);
            if (name != Py_None) return buf_bytes(b, name);
        }
        return number_json(b, "%d", value);
    }
    case E_DOUBLE: {
        double d;
        memcpy(&d, &v, 8);
        if (d != d) return OUT(b, "\"NaN\"");
        if (d - d != 0.0) return d > 0 ? OUT(b, "\"Infinity\"") : OUT(b, "\"-Infinity\"");
        return double_json(b, v, dumps);
    }
    default: return LEAVE;
    }
}

/* One value of `kind` from a field occurrence of the right wire type. */
static int value_json(Buf *b, int kind, Field *f, PyObject *extra, int depth) {
    switch (kind) {
    case E_STRING: return string_json(b, f->payload);
    case E_BYTES: {
        Py_ssize_t n = f->payload.end - f->payload.p;
        if (buf_reserve(b, 2 + base64_size(n)) < 0) return -1;
        char *o = b->data + b->len;
        *o++ = '"';
        o = put_base64(o, f->payload.p, n);
        *o++ = '"';
        b->len = o - b->data;
        return 0;
    }
    case E_MESSAGE: return message_json(b, f->payload, extra, depth + 1);
    case E_TIMESTAMP: return timestamp_json(b, f->payload);
    default: return scalar_json(b, kind, f->scalar, extra);
    }
}

/* A packed run of scalars: each as a value, comma separated (`*count` counts them). */
static int packed_json(Buf *b, int kind, Reader r, PyObject *extra, int *count) {
    int wire = wire_type_of(kind), rc;
    while (r.p < r.end) {
        Field f = {0};
        if (wire == 0) {
            if (read_varint(&r, &f.scalar) < 0) return -1;
        } else {
            int size = wire == 1 ? 8 : 4;
            if (r.end - r.p < size) return malformed();
            for (int i = 0; i < size; i++) f.scalar |= (uint64_t)r.p[i] << (8 * i);
            r.p += size;
        }
        if ((*count)++ && OUT(b, ",") < 0) return -1;
        if ((rc = scalar_json(b, kind, f.scalar, extra)) != 0) return rc;
    }
    return 0;
}

/* A repeated field: every occurrence of `number` in the message, in order. */
static int repeated_json(Buf *b, Reader r, uint32_t number, int kind, PyObject *extra, int depth) {
    int count = 0, rc;
    if (OUT(b, "[") < 0) return -1;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number != number) continue;
        if (f.wire_type == 2 && is_packable(kind)) {
            if ((rc = packed_json(b, kind, f.payload, extra, &count)) != 0) return rc;
            continue;
        }
        if (count++ && OUT(b, ",") < 0) return -1;
        if ((rc = value_json(b, kind, &f, extra, depth)) != 0) return rc;
    }
    return OUT(b, "]");
}

/* A map of one entry (more are left to Python: upb's order is its hash table's). */
static int map_json(Buf *b, Field *entry, PyObject *extra, int depth) {
    int key_kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(extra, 0));
    int value_kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(extra, 1));
    PyObject *value_extra = PyTuple_GET_ITEM(extra, 2), *value_default = PyTuple_GET_ITEM(extra, 3);
    Field key = {0}, value = {0};
    int has_key = 0, has_value = 0, rc;
    for (Reader r = entry->payload; r.p < r.end;) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number == 1) {
            if (f.wire_type != wire_type_of(key_kind)) return LEAVE;
            key = f, has_key = 1;
        } else if (f.number == 2) {
            if (f.wire_type != wire_type_of(value_kind) || (has_value && value_kind == E_MESSAGE)) return LEAVE;
            value = f, has_value = 1;
        }
    }
    if (OUT(b, "{") < 0) return -1;
    if (key_kind == E_STRING) {
        Reader none = {(const uint8_t *)"", (const uint8_t *)""};
        if ((rc = string_json(b, has_key ? key.payload : none)) != 0) return rc;
    } else if (key_kind == E_BOOL) {
        if ((key.scalar ? OUT(b, "\"true\"") : OUT(b, "\"false\"")) < 0) return -1;
    } else {
        /* integer keys: their decimal text, quoted (64-bit kinds are quoted already) */
        int quoted = key_kind >= E_INT64;
        if (!quoted && OUT(b, "\"") < 0) return -1;
        if ((rc = scalar_json(b, key_kind, key.scalar, NULL)) != 0) return rc;
        if (!quoted && OUT(b, "\"") < 0) return -1;
    }
    if (OUT(b, ":") < 0) return -1;
    if (has_value) {
        if ((rc = value_json(b, value_kind, &value, value_extra, depth)) != 0) return rc;
    } else if (value_default == Py_None) {
        return LEAVE;
    } else if (buf_bytes(b, value_default) < 0) {
        return -1;
    }
    return OUT(b, "}");
}

static int key_json(Buf *b, PyObject *spec, int *first) {
    if (!*first && OUT(b, ",") < 0) return -1;
    *first = 0;
    if (buf_bytes(b, PyTuple_GET_ITEM(spec, S_KEY)) < 0) return -1;
    return OUT(b, ":");
}

/* A message: the set fields by number, then the unset ones without presence in declaration order
 * with their defaults (json_format's order); unset ones with presence are left out. */
static int message_json(Buf *b, Reader r, PyObject *schema, int depth) {
    if (depth > MAX_DEPTH) return LEAVE;
    PyObject *by_number = PyList_GET_ITEM(schema, 0), *declared = PyList_GET_ITEM(schema, 1);
    Py_ssize_t numbers = PyTuple_GET_SIZE(by_number), fields = PyTuple_GET_SIZE(declared);
    long oneofs = PyLong_AsLong(PyList_GET_ITEM(schema, 2));
    if (fields > MAX_FIELDS || oneofs > MAX_ONEOFS) return LEAVE;
    Seen seen[MAX_FIELDS];
    Py_ssize_t members[MAX_ONEOFS];
    memset(seen, 0, sizeof(Seen) * (size_t)fields);
    for (long i = 0; i < oneofs; i++) members[i] = -1;
    for (Reader s = r; s.p < s.end;) {
        Field f;
        if (next_field(&s, &f) < 0) return -1;
        if (f.number >= numbers) continue;
        PyObject *spec = PyTuple_GET_ITEM(by_number, f.number);
        if (spec == Py_None) continue; /* unknown: json_format leaves it out */
        int kind = (int)spec_int(spec, S_KIND), label = (int)spec_int(spec, S_LABEL);
        Py_ssize_t index = spec_int(spec, S_INDEX);
        long oneof = spec_int(spec, S_ONEOF);
        if (kind == E_FALLBACK) return LEAVE;
        int wire = label == L_MAP ? 2 : wire_type_of(kind);
        if (f.wire_type != wire && !(label == L_REPEATED && f.wire_type == 2 && is_packable(kind))) return LEAVE;
        if (seen[index].count && label == L_PRESENCE && wire == 2 && kind != E_STRING && kind != E_BYTES)
            return LEAVE; /* a message given twice: upb merges them */
        if (oneof >= 0) {
            if (members[oneof] >= 0 && members[oneof] != index) return LEAVE;
            members[oneof] = index;
        }
        seen[index].count++;
        seen[index].last = f;
    }
    int first = 1, rc;
    uint8_t set[MAX_FIELDS];
    if (OUT(b, "{") < 0) return -1;
    for (Py_ssize_t number = 0; number < numbers; number++) {
        PyObject *spec = PyTuple_GET_ITEM(by_number, number);
        if (spec == Py_None) continue;
        Py_ssize_t index = spec_int(spec, S_INDEX);
        set[index] = 0;
        Seen *found = &seen[index];
        if (!found->count) continue;
        int kind = (int)spec_int(spec, S_KIND), label = (int)spec_int(spec, S_LABEL);
        PyObject *extra = PyTuple_GET_ITEM(spec, S_EXTRA);
        if (label == L_MAP) {
            if (found->count > 1) return LEAVE;
            if (key_json(b, spec, &first) < 0) return -1;
            if ((rc = map_json(b, &found->last, extra, depth)) != 0) return rc;
        } else if (label == L_REPEATED) {
            Py_ssize_t mark = b->len;
            int was_first = first;
            if (key_json(b, spec, &first) < 0) return -1;
            if ((rc = repeated_json(b, r, (uint32_t)number, kind, extra, depth)) != 0) return rc;
            if (b->data[b->len - 2] == '[') { /* only empty packed runs: unset after all */
                b->len = mark;
                first = was_first;
                continue;
            }
        } else {
            if (label == L_IMPLICIT) {
                Field *f = &found->last;
                int is_set = f->wire_type == 2 ? f->payload.end > f->payload.p
                             : kind == E_INT32 || kind == E_UINT32 || kind == E_SINT32 || kind == E_FIXED32 ||
                                     kind == E_SFIXED32 || kind == E_ENUM
                                 ? (uint32_t)f->scalar != 0
                                 : f->scalar != 0; /* a double's bits: -0.0 is set */
                if (!is_set) continue;
            }
            if (key_json(b, spec, &first) < 0) return -1;
            if ((rc = value_json(b, kind, &found->last, extra, depth)) != 0) return rc;
        }
        set[index] = 1;
    }
    for (Py_ssize_t i = 0; i < fields; i++) {
        PyObject *spec = PyTuple_GET_ITEM(declared, i), *fallback = PyTuple_GET_ITEM(spec, S_DEFAULT);
        if (fallback == Py_None || set[i]) continue;
        if (key_json(b, spec, &first) < 0 || buf_bytes(b, fallback) < 0) return -1;
    }
    return OUT(b, "}");
}

static PyObject *encode_each(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode_each(payloads: list[bytes], schema)");
        return NULL;
    }
    if (dumps == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_ray_json_encode.bind() was not called");
        return NULL;
    }
    PyObject *payloads = args[0], *schema = args[1];
    Py_ssize_t n = PyList_GET_SIZE(payloads);
    PyObject *out = PyList_New(n);
    Buf b = {NULL, 0, 0};
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i), *item = NULL;
        int rc = LEAVE;
        if (PyBytes_CheckExact(payload)) {
            Reader r = {(const uint8_t *)PyBytes_AS_STRING(payload), NULL};
            r.end = r.p + PyBytes_GET_SIZE(payload);
            b.len = 0;
            rc = message_json(&b, r, schema, 0);
            if (rc < 0 && PyErr_ExceptionMatches(PyExc_ValueError)) { /* malformed: Python says why */
                PyErr_Clear();
                rc = LEAVE;
            }
        }
        if (rc < 0) goto fail;
        item = rc == LEAVE ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize(b.data, b.len);
        if (item == NULL) goto fail;
        PyList_SET_ITEM(out, i, item);
    }
    PyMem_Free(b.data);
    return out;
fail:
    PyMem_Free(b.data);
    Py_DECREF(out);
    return NULL;
}

static PyObject *bind(PyObject *module, PyObject *callable) {
    (void)module;
    if (!PyCallable_Check(callable)) {
        PyErr_SetString(PyExc_TypeError, "bind(dumps): orjson.dumps");
        return NULL;
    }
    Py_XSETREF(dumps, Py_NewRef(callable));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode_each", (PyCFunction)(void (*)(void))encode_each, METH_FASTCALL,
     "encode_each(payloads, schema) -> each RayEvent's JSON object, or None where Python encodes it."},
    {"bind", bind, METH_O, "bind(dumps): orjson.dumps, which writes doubles."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_ray_json_encode", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ray_json_encode(void) {
    static const NamedNumber numbers[] = {
        NAMED_NUMBER(E_FALLBACK), NAMED_NUMBER(E_INT32),   NAMED_NUMBER(E_UINT32),   NAMED_NUMBER(E_SINT32),
        NAMED_NUMBER(E_FIXED32),  NAMED_NUMBER(E_SFIXED32), NAMED_NUMBER(E_INT64),   NAMED_NUMBER(E_UINT64),
        NAMED_NUMBER(E_SINT64),   NAMED_NUMBER(E_FIXED64), NAMED_NUMBER(E_SFIXED64), NAMED_NUMBER(E_BOOL),
        NAMED_NUMBER(E_STRING),   NAMED_NUMBER(E_BYTES),   NAMED_NUMBER(E_ENUM),     NAMED_NUMBER(E_DOUBLE),
        NAMED_NUMBER(E_MESSAGE),  NAMED_NUMBER(E_TIMESTAMP), NAMED_NUMBER(L_IMPLICIT), NAMED_NUMBER(L_PRESENCE),
        NAMED_NUMBER(L_REPEATED), NAMED_NUMBER(L_MAP),
    };
    return export_numbers(PyModule_Create(&module_def), numbers, sizeof(numbers) / sizeof(numbers[0]));
}
