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

/* bind_fields(ray_fields): RAY_FIELDS numbered ({full name: number}); the envelope's numbers
 * must be below MAX_FIELD. On error nothing is bound, and head() refuses. */
static PyObject *bind_fields(PyObject *module, PyObject *numbers) {
    (void)module;
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

/* bind(specs, keys, head_type): specs maps an event type to (payload field, kind, job_of_id,
 * id_is_job, id field, attempt field, job field, attribute attempt field, submission field,
 * ((id field, key field), ...), event type entry); keys is the key fields of the session, node,
 * attempt and submission attributes. */
static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != 4 ||
        !PyType_Check(args[2]) || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "bind(specs: dict, keys: tuple of 4 bytes, head_type: a tuple subclass)");
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

/* Copies the fields of `r` except field `drop` (0: none). */
static int copy_without(Buf *b, Reader r, uint32_t drop) {
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number == drop) continue;
        if (buf_reserve(b, r.p - start) < 0) return -1;
        memcpy(b->data + b->len, start, (size_t)(r.p - start));
        b->len += r.p - start;
    }
    return 0;
}

/* slim(keep, func_field, wire) -> the fields of a definition payload whose number n has keep[n]
 * nonzero, its FunctionDescriptor (func_field) without the Python function's hash or the Java
 * one's signature: what event_heads.kept_fields keeps, as upb writes it. The wire bytes last, so
 * functools.partial binds the rest (event_heads.field_keeper). */
static PyObject *slim(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "slim(keep: bytes, func_field: int, wire: bytes)");
        return NULL;
    }
    long func_field = PyLong_AsLong(args[1]);
    const uint8_t *keep = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t keep_n = PyBytes_GET_SIZE(args[0]);
    Reader r = bytes_reader(args[2]);
    Buf b = {NULL, 0, 0}, func = {NULL, 0, 0};
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        Field f;
        if (next_field(&r, &f) < 0) goto fail;
        if (f.number >= (uint32_t)keep_n || !keep[f.number]) continue;
        if ((long)f.number == func_field && f.wire_type == 2) {
            func.len = 0;
            for (Reader d = f.payload; d.p < d.end;) { /* FunctionDescriptor's oneof */
                const uint8_t *at = d.p;
                Field g;
                if (next_field(&d, &g) < 0) goto fail;
                uint32_t drop = g.wire_type != 2 ? 0 : dropped_field(g.number);
                if (drop == 0) {
                    if (buf_reserve(&func, d.p - at) < 0) goto fail;
                    memcpy(func.data + func.len, at, (size_t)(d.p - at));
                    func.len += d.p - at;
                    continue;
                }
                Buf inner = {NULL, 0, 0};
                int bad = copy_without(&inner, g.payload, drop) < 0 || buf_field(&func, g.number, inner.data ? inner.data : "", inner.len) < 0;
                PyMem_Free(inner.data);
                if (bad) goto fail;
            }
            if (buf_field(&b, f.number, func.data ? func.data : "", func.len) < 0) goto fail;
            continue;
        }
        if (buf_reserve(&b, r.p - start) < 0) goto fail;
        memcpy(b.data + b.len, start, (size_t)(r.p - start));
        b.len += r.p - start;
    }
    PyObject *out = PyBytes_FromStringAndSize(b.data ? b.data : "", b.len);
    PyMem_Free(b.data);
    PyMem_Free(func.data);
    return out;
fail:
    PyMem_Free(b.data);
    PyMem_Free(func.data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind(specs, keys, head_type): the schema read."},
    {"head", (PyCFunction)head, METH_O, "head(wire) -> EventHead or None."},
    {"bind_fields", bind_fields, METH_O, "bind_fields(ray_fields): RAY_FIELDS numbered."},
    {"slim", (PyCFunction)(void (*)(void))slim, METH_FASTCALL, "slim(keep, func_field, wire) -> bytes."},
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
