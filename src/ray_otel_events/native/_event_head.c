/* What the bridge reads of every RayEvent first, from the event's wire bytes, compiled: its
 * envelope, the entity its span is (kind, id, attempt, job), its payload's bytes and its entity
 * attributes written as LogRecord attribute entries. Through upb that is a dozen accessor calls and a
 * dict per event. otel/event_heads.py binds the schema (which payload each event type has and which
 * of its fields are ids) and reads the same in Python, the reference this is held to. Bytes it does
 * not read as upb would (a field of another wire type, a payload given twice, a time out of
 * range, a type it was not told of) give None: Python reads that event. */

#define PY_SSIZE_T_CLEAN
#include "otlp_wire.h"

#define MAX_TYPES 64
#define MAX_FIELD 64 /* payload fields read: numbers below this */
#define MAX_IDS 8

/* The fields of Ray's messages read here (ray_fields.h: numbered from the descriptors by
 * bind_fields): the envelope's, and in a definition's FunctionDescriptor what slim() drops. */
#define RAY_FIELD_NAMES(X)                                                                        \
    X(EVENT_ID, "ray.rpc.events.RayEvent.event_id")                                                \
    X(EVENT_TYPE, "ray.rpc.events.RayEvent.event_type")                                            \
    X(TIMESTAMP, "ray.rpc.events.RayEvent.timestamp")                                              \
    X(SEVERITY, "ray.rpc.events.RayEvent.severity")                                                \
    X(SESSION, "ray.rpc.events.RayEvent.session_name")                                             \
    X(NODE, "ray.rpc.events.RayEvent.node_id")                                                     \
    X(PYTHON_FUNCTION, "ray.rpc.FunctionDescriptor.python_function_descriptor")                    \
    X(PYTHON_HASH, "ray.rpc.PythonFunctionDescriptor.function_hash")                               \
    X(JAVA_FUNCTION, "ray.rpc.FunctionDescriptor.java_function_descriptor")                        \
    X(JAVA_SIGNATURE, "ray.rpc.JavaFunctionDescriptor.signature")
#include "ray_fields.h"

/* What head() reads of each of the envelope's field numbers (R_SKIP: nothing; payloads are
 * is_payload's), set by bind_fields. */
enum { R_SKIP, R_ID, R_TYPE, R_TIME, R_SEVERITY, R_SESSION, R_NODE, R_PAYLOAD };
static int8_t envelope_role[MAX_FIELD];
static int fields_bound;

/* A FunctionDescriptor's oneof members by number: the highest field number of each member's
 * message (0: no such member), set by bind_fields from the descriptors. */
#define MAX_MEMBERS 16
static uint32_t member_top[MAX_MEMBERS];

/* bind_fields(ray_fields, function_members): RAY_FIELDS numbered ({full name: number}), the
 * envelope's numbers below MAX_FIELD; and {member number: its message's highest field number} of
 * FunctionDescriptor's oneof (every field of each a string). On error nothing is bound, and head()
 * refuses. */
static PyObject *bind_fields(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *numbers, *members;
    if (!PyArg_ParseTuple(args, "OO!:bind_fields", &numbers, &PyDict_Type, &members)) return NULL;
    static const struct {
        int field, role;
    } envelope[] = {{RF_EVENT_ID, R_ID},       {RF_EVENT_TYPE, R_TYPE}, {RF_TIMESTAMP, R_TIME},
                    {RF_SEVERITY, R_SEVERITY}, {RF_SESSION, R_SESSION}, {RF_NODE, R_NODE}};
    fields_bound = 0;
    memset(envelope_role, 0, sizeof(envelope_role));
    if (bind_ray_fields(numbers) < 0) return NULL;
    for (size_t i = 0; i < sizeof(envelope) / sizeof(envelope[0]); i++) {
        uint32_t number = ray_field[envelope[i].field];
        if (number >= MAX_FIELD || envelope_role[number] != R_SKIP) {
            memset(envelope_role, 0, sizeof(envelope_role));
            return PyErr_Format(PyExc_ValueError, "%s: a number below 64 of its own",
                                ray_field_names[envelope[i].field]);
        }
        envelope_role[number] = (int8_t)envelope[i].role;
    }
    uint32_t tops[MAX_MEMBERS] = {0};
    PyObject *member, *top;
    Py_ssize_t position = 0;
    while (PyDict_Next(members, &position, &member, &top)) {
        long m = PyLong_Check(member) ? PyLong_AsLong(member) : -1, t = PyLong_Check(top) ? PyLong_AsLong(top) : -1;
        if (m < 1 || m >= MAX_MEMBERS || t < 1 || t >= MAX_FIELD) {
            memset(envelope_role, 0, sizeof(envelope_role));
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "function_members: member %R, highest field %R: below %d and %d",
                             member, top, MAX_MEMBERS, MAX_FIELD);
            return NULL;
        }
        tops[m] = (uint32_t)t;
    }
    if (RAY(PYTHON_FUNCTION) >= MAX_MEMBERS || tops[RAY(PYTHON_FUNCTION)] == 0 || RAY(JAVA_FUNCTION) >= MAX_MEMBERS ||
        tops[RAY(JAVA_FUNCTION)] == 0) {
        memset(envelope_role, 0, sizeof(envelope_role));
        return PyErr_Format(PyExc_ValueError, "function_members: no Python or Java member");
    }
    memcpy(member_top, tops, sizeof tops);
    fields_bound = 1;
    Py_RETURN_NONE;
}

/* The field of a FunctionDescriptor's oneof member `member` that slim() leaves out (0: none): the
 * Python function's hash, the Java one's signature. */
static uint32_t dropped_field(uint32_t member) {
    return member == RAY(PYTHON_FUNCTION) ? RAY(PYTHON_HASH)
           : member == RAY(JAVA_FUNCTION) ? RAY(JAVA_SIGNATURE)
                                          : 0;
}

typedef struct {
    int known;
    uint32_t payload;               /* RayEvent's field number of the type's payload */
    PyObject *kind;                 /* "task", "actor", "job", "profile" or "" */
    int job_of_id;                  /* the job is the id's last 4 bytes when the id is this long, 0: never */
    int id_is_job;                  /* a driver job: the id is the job */
    uint32_t id_field, attempt_field, job_field; /* 0: none */
    uint32_t attr_attempt_field, submission_field;
    int n_ids;
    uint32_t id_fields[MAX_IDS];
    PyObject *id_keys[MAX_IDS]; /* encoded KeyValue.key fields */
    int id_is_node[MAX_IDS];    /* the id is the node's: the event's own node id is then not written */
    PyObject *type_entry;       /* the whole ray.event_type attribute entry */
} TypeSpec;

static TypeSpec specs[MAX_TYPES];
static int8_t is_payload[MAX_FIELD]; /* RayEvent's field numbers that are some type's payload */
static PyObject *head_type;                                         /* EventHead, a tuple subclass */
static PyObject *session_key, *node_key, *attempt_key, *submission_key; /* encoded KeyValue.key fields */
/* Per message (RayEvent first), per field number, two bytes (little-endian): the field's kind
 * (CHECK_*), 8 where it is repeated, and 16 times its message's index in `checks`. */
static PyObject *checks;

/* -- binding ------------------------------------------------------------------------------------ */

static int field_number_of(PyObject *obj, uint32_t *out) {
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v >= MAX_FIELD) {
        PyErr_SetString(PyExc_ValueError, "field numbers must be below 64");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static void clear_specs(void) {
    for (int t = 0; t < MAX_TYPES; t++) {
        TypeSpec *s = &specs[t];
        Py_CLEAR(s->kind);
        Py_CLEAR(s->type_entry);
        for (int i = 0; i < s->n_ids; i++) Py_CLEAR(s->id_keys[i]);
        memset(s, 0, sizeof(*s));
    }
    memset(is_payload, 0, sizeof(is_payload));
}

/* bind(specs, keys, head_type, checks): specs maps an event type to (payload field, kind, job_of_id,
 * id_is_job, id field, attempt field, job field, attribute attempt field, submission field,
 * ((id field, key field), ...), event type entry); keys is the key fields of the session, node,
 * attempt and submission attributes. checks is
 * what checked_head reads (see `checks` above). */
static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 4 ||
        !PyType_Check(args[2]) || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type) ||
        !PyTuple_Check(args[3]) || PyTuple_GET_SIZE(args[3]) == 0) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(specs: dict, keys: tuple of 4 bytes, head_type: a tuple subclass, checks: tuple of bytes)");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[3]); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(args[3], i)) || PyBytes_GET_SIZE(PyTuple_GET_ITEM(args[3], i)) % 2) {
            PyErr_SetString(PyExc_TypeError, "checks: a tuple of bytes, two a field number");
            return NULL;
        }
    for (int i = 0; i < 4; i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(args[1], i))) {
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
    clear_specs();
    PyObject *type, *spec;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args[0], &pos, &type, &spec)) {
        long t = PyLong_AsLong(type);
        if (t == -1 && PyErr_Occurred()) goto fail;
        if (t < 0 || t >= MAX_TYPES || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 11) {
            PyErr_SetString(PyExc_ValueError, "a spec is (type below 64) -> a tuple of 11");
            goto fail;
        }
        TypeSpec *s = &specs[t];
        PyObject *kind = PyTuple_GET_ITEM(spec, 1), *ids = PyTuple_GET_ITEM(spec, 9),
                 *entry = PyTuple_GET_ITEM(spec, 10);
        if (!PyUnicode_Check(kind) || !PyTuple_Check(ids) || PyTuple_GET_SIZE(ids) > MAX_IDS ||
            !PyBytes_Check(entry)) {
            PyErr_SetString(PyExc_TypeError, "a spec's kind is a str, its ids a tuple (at most 8), its entry bytes");
            goto fail;
        }
        long job_of_id = PyLong_AsLong(PyTuple_GET_ITEM(spec, 2));
        int id_is_job = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 3));
        if ((job_of_id == -1 && PyErr_Occurred()) || id_is_job < 0) goto fail;
        if (field_number_of(PyTuple_GET_ITEM(spec, 0), &s->payload) < 0 ||
            field_number_of(PyTuple_GET_ITEM(spec, 4), &s->id_field) < 0 ||
            field_number_of(PyTuple_GET_ITEM(spec, 5), &s->attempt_field) < 0 ||
            field_number_of(PyTuple_GET_ITEM(spec, 6), &s->job_field) < 0 ||
            field_number_of(PyTuple_GET_ITEM(spec, 7), &s->attr_attempt_field) < 0 ||
            field_number_of(PyTuple_GET_ITEM(spec, 8), &s->submission_field) < 0)
            goto fail;
        s->job_of_id = (int)job_of_id;
        s->id_is_job = id_is_job;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ids); i++) {
            PyObject *pair = PyTuple_GET_ITEM(ids, i);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_Check(PyTuple_GET_ITEM(pair, 1))) {
                PyErr_SetString(PyExc_TypeError, "an id is (field number, key field bytes)");
                goto fail;
            }
            if (field_number_of(PyTuple_GET_ITEM(pair, 0), &s->id_fields[i]) < 0) goto fail;
            s->id_keys[i] = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
            s->n_ids = (int)i + 1;
            s->id_is_node[i] = PyObject_RichCompareBool(s->id_keys[i], PyTuple_GET_ITEM(args[1], 1), Py_EQ);
            if (s->id_is_node[i] < 0) goto fail;
        }
        s->kind = Py_NewRef(kind);
        s->type_entry = Py_NewRef(entry);
        s->known = 1;
        is_payload[s->payload] = 1;
    }
    Py_XSETREF(session_key, Py_NewRef(PyTuple_GET_ITEM(args[1], 0)));
    Py_XSETREF(node_key, Py_NewRef(PyTuple_GET_ITEM(args[1], 1)));
    Py_XSETREF(attempt_key, Py_NewRef(PyTuple_GET_ITEM(args[1], 2)));
    Py_XSETREF(submission_key, Py_NewRef(PyTuple_GET_ITEM(args[1], 3)));
    Py_XSETREF(head_type, Py_NewRef(args[2]));
    Py_XSETREF(checks, Py_NewRef(args[3]));
    Py_RETURN_NONE;
fail:
    clear_specs();
    return NULL;
}

/* The session's name as a str, the one made for the previous event when it is the same (a stream's
 * events share a few sessions): open entities' keys hold one copy, not one each. */
static PyObject *last_session;

static PyObject *session_of(Reader r) {
    Py_ssize_t n = r.end - r.p, last_n;
    if (last_session != NULL) {
        const char *last = PyUnicode_AsUTF8AndSize(last_session, &last_n);
        if (last != NULL && last_n == n && memcmp(last, r.p, (size_t)n) == 0) return Py_NewRef(last_session);
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)r.p, n, NULL);
    if (text != NULL) Py_XSETREF(last_session, Py_NewRef(text));
    return text;
}

/* -- attribute entries -------------------------------------------------------------------------- */

/* One LogRecord.attributes entry (6) holding the string `n` bytes of `text`, or their hex (`hex`). */
static int put_string_entry(Buf *b, PyObject *key, const uint8_t *text, Py_ssize_t n, int hex) {
    return buf_text_entry(b, 0x32, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), text, n, hex);
}

/* The same holding AnyValue{int_value} (an int32 field, sign-extended as int64). */
static int put_int_entry(Buf *b, PyObject *key, int64_t value) {
    return buf_number_entry(b, 0x32, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key), value, 0);
}

/* -- reading ------------------------------------------------------------------------------------ */

typedef struct {
    Reader bytes[MAX_FIELD]; /* length-delimited fields, the last of each */
    uint64_t scalar[MAX_FIELD];
    int8_t wire_type[MAX_FIELD]; /* -1: absent */
} Fields;

/* The payload's fields below MAX_FIELD; 1 when one is given with two wire types. */
static int read_fields(Reader r, Fields *out) {
    memset(out->wire_type, -1, sizeof(out->wire_type));
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number >= MAX_FIELD) continue;
        if (out->wire_type[f.number] >= 0 && out->wire_type[f.number] != f.wire_type) return 1;
        out->wire_type[f.number] = (int8_t)f.wire_type;
        if (f.wire_type == 2) out->bytes[f.number] = f.payload;
        else out->scalar[f.number] = f.scalar;
    }
    return 0;
}

/* A bytes or string field: 0 and its bytes (empty when absent); 1 when it has another wire type. */
static int text_field(const Fields *fields, uint32_t number, Reader *out) {
    static const uint8_t none[1] = {0};
    out->p = out->end = none;
    if (number == 0 || fields->wire_type[number] < 0) return 0;
    if (fields->wire_type[number] != 2) return 1;
    *out = fields->bytes[number];
    return 0;
}

static int varint_field(const Fields *fields, uint32_t number, uint64_t *out) {
    *out = 0;
    if (number == 0 || fields->wire_type[number] < 0) return 0;
    if (fields->wire_type[number] != 0) return 1;
    *out = fields->scalar[number];
    return 0;
}

/* -- bytes that did not come through upb -------------------------------------------------------- */

enum { CHECK_UNKNOWN, CHECK_VARINT, CHECK_FIXED64, CHECK_FIXED32, CHECK_STRING, CHECK_BYTES, CHECK_MESSAGE };
#define CHECK_DEPTH 32 /* deeper messages are left to upb (its limit is 100, groups counted) */

/* Whether `r` holds UTF-8 as upb takes it (no overlong forms, surrogates or code points past
 * U+10FFFF). */
static int utf8(Reader r) {
    const uint8_t *p = r.p, *end = r.end;
    while (p < end) {
        uint64_t eight;
        if (end - p >= 8 && (memcpy(&eight, p, 8), (eight & 0x8080808080808080u) == 0)) {
            p += 8; /* ASCII, eight bytes at a time */
            continue;
        }
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        Py_ssize_t left = end - p;
        if (c >= 0xC2 && c <= 0xDF) {
            if (left < 2 || (p[1] & 0xC0) != 0x80) return 0;
            p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
            if (left < 3 || p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80) return 0;
            p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
            if (left < 4 || p[1] < lo || p[1] > hi || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
            p += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* 1 where upb reads `r` as message `msg` of `checks` in full: every field's key and value, strings
 * UTF-8, packed values whole, messages nested inside read the same way. 0 where it refuses them,
 * or might (a group, whose depth upb counts with the messages', or a nesting past CHECK_DEPTH):
 * upb then decides. */
static int reads_whole(Reader r, Py_ssize_t msg, int depth) {
    if (depth > CHECK_DEPTH || msg >= PyTuple_GET_SIZE(checks)) return 0;
    PyObject *table = PyTuple_GET_ITEM(checks, msg);
    const uint8_t *entries = (const uint8_t *)PyBytes_AS_STRING(table);
    uint32_t count = (uint32_t)(PyBytes_GET_SIZE(table) / 2);
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0 || f.wire_type == 3) {
            PyErr_Clear();
            return 0;
        }
        if (f.number >= count || f.wire_type != 2) continue; /* an unknown field, or a scalar value */
        unsigned entry = (unsigned)entries[2 * f.number] | (unsigned)entries[2 * f.number + 1] << 8;
        unsigned kind = entry & 7, repeated = entry & 8;
        Py_ssize_t n = f.payload.end - f.payload.p;
        switch (kind) {
        case CHECK_VARINT:
            for (Reader packed = f.payload; repeated && packed.p < packed.end;) {
                uint64_t v;
                if (read_varint(&packed, &v) < 0) {
                    PyErr_Clear();
                    return 0;
                }
            }
            break;
        case CHECK_FIXED64:
            if (repeated && n % 8) return 0;
            break;
        case CHECK_FIXED32:
            if (repeated && n % 4) return 0;
            break;
        case CHECK_STRING:
            if (!utf8(f.payload)) return 0;
            break;
        case CHECK_MESSAGE:
            if (!reads_whole(f.payload, (Py_ssize_t)(entry >> 4), depth + 1)) return 0;
            break;
        default:
            break;
        }
    }
    return 1;
}

static PyObject *head(PyObject *module, PyObject *arg);

/* checked_head(wire): head(wire) for wire bytes that did not come through upb (forwarded between
 * bridge workers, a durable queue's rows), None (Python reads them, through upb) where upb might
 * refuse them: head reads only what it needs. */
static PyObject *checked_head(PyObject *module, PyObject *arg) {
    if (!PyBytes_Check(arg) || checks == NULL) {
        PyErr_SetString(PyExc_TypeError, "checked_head(wire: bytes), after bind()");
        return NULL;
    }
    if (!reads_whole(bytes_reader(arg), 0, 0)) Py_RETURN_NONE;
    return head(module, arg);
}

/* head(wire) -> EventHead(event_id, event_type, session, time_ns, severity, kind, entity_id,
 * attempt, job, payload, attributes), or None (Python reads it). */
static PyObject *head(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_Check(arg) || head_type == NULL || !fields_bound) {
        PyErr_SetString(PyExc_TypeError, "head(wire: bytes), after bind_fields() and bind()");
        return NULL;
    }
    Reader r = bytes_reader(arg);
    static const uint8_t none[1] = {0};
    Reader event_id = {none, none}, session = {none, none}, node = {none, none}, payloads[MAX_FIELD];
    int payload_count[MAX_FIELD] = {0};
    uint64_t event_type = 0, severity = 0;
    int64_t seconds = 0;
    int32_t nanos = 0;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto other;
        if (f.number >= MAX_FIELD) continue;
        int role = envelope_role[f.number] ? envelope_role[f.number] : is_payload[f.number] ? R_PAYLOAD : R_SKIP;
        if (role == R_SKIP) continue; /* source type, message, unknown fields */
        if (f.wire_type != (role == R_TYPE || role == R_SEVERITY ? 0 : 2)) goto other; /* varints */
        switch (role) {
        case R_ID: event_id = f.payload; break;
        case R_TYPE: event_type = f.scalar; break;
        case R_TIME:
            if (read_timestamp(f.payload, &seconds, &nanos) != 0) goto other;
            break;
        case R_SEVERITY: severity = f.scalar; break;
        case R_SESSION: session = f.payload; break;
        case R_NODE: node = f.payload; break;
        default:
            payloads[f.number] = f.payload;
            payload_count[f.number]++;
        }
    }
    uint64_t ns;
    if (event_type >= MAX_TYPES || !specs[event_type].known || timestamp_unix_nano(seconds, nanos, &ns)) goto other;
    const TypeSpec *s = &specs[event_type];
    if (payload_count[s->payload] > 1) goto other; /* merged by upb: left to it */
    Reader payload = payload_count[s->payload] ? payloads[s->payload] : (Reader){none, none};
    Fields fields;
    Reader id, job, submission;
    uint64_t attempt = 0, attr_attempt = 0;
    if (read_fields(payload, &fields) != 0 || text_field(&fields, s->id_field, &id) ||
        text_field(&fields, s->job_field, &job) || text_field(&fields, s->submission_field, &submission) ||
        varint_field(&fields, s->attempt_field, &attempt) || varint_field(&fields, s->attr_attempt_field, &attr_attempt))
        goto other;
    if (s->id_is_job) job = id;
    else if (s->job_of_id && id.end - id.p == s->job_of_id) job.p = id.end - 4, job.end = id.end;
    PyObject *session_text = session_of(session);
    if (session_text == NULL) goto other;

    Buf b = {NULL, 0, 0};
    int node_written = 0, failed = buf_bytes(&b, s->type_entry) < 0 ||
                                  put_string_entry(&b, session_key, session.p, session.end - session.p, 0) < 0;
    for (int i = 0; i < s->n_ids && !failed; i++) {
        Reader value;
        if (text_field(&fields, s->id_fields[i], &value)) {
            PyMem_Free(b.data);
            Py_DECREF(session_text);
            goto other;
        }
        if (value.p == value.end) continue;
        failed = put_string_entry(&b, s->id_keys[i], value.p, value.end - value.p, 1) < 0;
        node_written |= s->id_is_node[i];
    }
    if (!failed && s->attr_attempt_field) failed = put_int_entry(&b, attempt_key, (int32_t)(uint32_t)attr_attempt) < 0;
    if (!failed && s->submission_field && submission.p != submission.end)
        failed = put_string_entry(&b, submission_key, submission.p, submission.end - submission.p, 0) < 0;
    if (!failed && !node_written && node.p != node.end)
        failed = put_string_entry(&b, node_key, node.p, node.end - node.p, 1) < 0;
    PyObject *attributes = failed ? NULL : PyBytes_FromStringAndSize(b.data, b.len);
    PyMem_Free(b.data);
    if (attributes == NULL) {
        Py_DECREF(session_text);
        return NULL;
    }
    PyObject *items[11] = {
        reader_bytes(event_id),
        PyLong_FromUnsignedLongLong(event_type),
        session_text,
        PyLong_FromUnsignedLongLong(ns),
        PyLong_FromLong((long)(int32_t)(uint32_t)severity),
        Py_NewRef(s->kind),
        reader_bytes(id),
        PyLong_FromLong(s->attempt_field ? (long)(int32_t)(uint32_t)attempt : 0),
        reader_bytes(job),
        reader_bytes(payload),
        attributes,
    };
    PyObject *out = PyErr_Occurred() ? NULL : ((PyTypeObject *)head_type)->tp_alloc((PyTypeObject *)head_type, 11);
    for (int i = 0; i < 11; i++) {
        if (items[i] == NULL || out == NULL) {
            for (int j = 0; j < 11; j++) Py_XDECREF(items[j]);
            Py_XDECREF(out);
            return NULL;
        }
    }
    for (int i = 0; i < 11; i++) PyTuple_SET_ITEM(out, i, items[i]);
    return out;
other:
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* -- a definition kept slim --------------------------------------------------------------------- */

/* Whether field `f`, read from `start` to `end`, is written as upb writes it: key, length and value
 * each in their fewest bytes. */
static int minimal(const Field *f, const uint8_t *start, const uint8_t *end) {
    Py_ssize_t size = varint_size((uint64_t)f->number << 3 | (uint64_t)f->wire_type);
    if (f->wire_type == 0) size += varint_size(f->scalar);
    else size += varint_size((uint64_t)(f->payload.end - f->payload.p)) + (f->payload.end - f->payload.p);
    return end - start == size;
}

/* A FunctionDescriptor's oneof member `r` (number `member`, a bound one) without field `drop`, into
 * `b`, as upb writes it; 1 where it is not written so (fields out of order, given twice, empty, of
 * another wire type, unknown, longer than they need): Python copies it. Every field of each member
 * is a string (bind_fields is told so), numbered 1 to member_top[member]. */
static int copy_member(Buf *b, Reader r, uint32_t member, uint32_t drop) {
    uint32_t last = 0, top = member_top[member];
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number <= last || f.number > top || f.wire_type != 2 || f.payload.p == f.payload.end ||
            !minimal(&f, start, r.p))
            return 1;
        last = f.number;
        if (f.number == drop) continue;
        if (buf_reserve(b, r.p - start) < 0) return -1;
        memcpy(b->data + b->len, start, (size_t)(r.p - start));
        b->len += r.p - start;
    }
    return 0;
}

/* The FunctionDescriptor `r` without the Python function's hash or the Java one's signature, into
 * `func`; 1 where upb would write it otherwise (see copy_member; its oneof given twice). */
static int copy_function(Buf *func, Reader r) {
    func->len = 0;
    int members = 0;
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        Field g;
        if (next_field(&r, &g) < 0) return -1;
        if (++members > 1 || g.number >= MAX_MEMBERS || member_top[g.number] == 0 || g.wire_type != 2 ||
            !minimal(&g, start, r.p))
            return 1;
        Buf inner = {NULL, 0, 0};
        int done = copy_member(&inner, g.payload, g.number, dropped_field(g.number));
        if (done == 0) done = buf_field(func, g.number, inner.data ? inner.data : "", inner.len);
        PyMem_Free(inner.data);
        if (done != 0) return done;
    }
    return 0;
}

/* slim(keep, func_field, fallback, wire) -> the fields of a definition payload whose number n has
 * keep[n] nonzero (keep[n] is the field's wire type + 1), its FunctionDescriptor (func_field)
 * without the Python function's hash or the Java one's signature: what event_heads.kept_fields
 * keeps, as upb writes it. Fields upb would not copy are left out as it leaves them: a field
 * written with its default value (implicit presence), a kept number of another wire type (an
 * unknown field to upb). What upb would write otherwise (kept fields out of order or given twice,
 * values written longer than they need, an enum past int32) goes to fallback(wire), the Python
 * twin. The wire bytes last, so functools.partial binds the rest (event_heads.field_keeper). */
static PyObject *slim(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) || !PyCallable_Check(args[2]) ||
        !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "slim(keep: bytes, func_field: int, fallback: callable, wire: bytes)");
        return NULL;
    }
    long func_field = PyLong_AsLong(args[1]);
    const uint8_t *keep = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t keep_n = PyBytes_GET_SIZE(args[0]);
    Reader r = bytes_reader(args[3]);
    Buf b = {NULL, 0, 0}, func = {NULL, 0, 0};
    uint32_t last = 0;
    int odd = 0;
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        Field f;
        if (next_field(&r, &f) < 0) goto fail;
        if (f.number >= (uint32_t)keep_n || f.wire_type != keep[f.number] - 1) continue;
        if (f.number <= last || !minimal(&f, start, r.p)) goto odd;
        last = f.number;
        if ((long)f.number == func_field) {
            odd = copy_function(&func, f.payload);
            if (odd < 0) goto fail;
            if (odd) goto odd;
            if (buf_field(&b, f.number, func.data ? func.data : "", func.len) < 0) goto fail;
            continue;
        }
        if (f.wire_type == 0 ? f.scalar >= (1u << 31) : 0) goto odd; /* upb reads an int32 enum */
        if (f.wire_type == 0 ? f.scalar == 0 : f.payload.p == f.payload.end) continue; /* the default */
        if (buf_reserve(&b, r.p - start) < 0) goto fail;
        memcpy(b.data + b.len, start, (size_t)(r.p - start));
        b.len += r.p - start;
    }
    PyObject *out = PyBytes_FromStringAndSize(b.data ? b.data : "", b.len);
    PyMem_Free(b.data);
    PyMem_Free(func.data);
    return out;
odd:
    PyMem_Free(b.data);
    PyMem_Free(func.data);
    return PyObject_CallOneArg(args[2], args[3]);
fail:
    PyMem_Free(b.data);
    PyMem_Free(func.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind(specs, keys, head_type, checks): the schema read."},
    {"head", (PyCFunction)head, METH_O, "head(wire) -> EventHead or None."},
    {"bind_fields", bind_fields, METH_VARARGS,
     "bind_fields(ray_fields, function_members): RAY_FIELDS numbered, FunctionDescriptor's members."},
    {"checked_head", (PyCFunction)checked_head, METH_O, "checked_head(wire) -> EventHead or None."},
    {"slim", (PyCFunction)(void (*)(void))slim, METH_FASTCALL, "slim(keep, func_field, fallback, wire) -> bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_event_head", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__event_head(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && export_ray_fields(module) < 0) Py_CLEAR(module);
    return module;
}
