/* RayEventsToOtel's per-event work, compiled: the duplicate filter, each event's log record, the open
 * entities (their pieces, the least recently updated first, the terminal grace, the bounds), and the
 * span of a task attempt, the most common entity. otel/from_ray_events.py is the twin this is held to
 * (the same spans, records, held pieces, counters and open bytes, in the same order); it also
 * builds the spans of actors and jobs, which are rare, for this core (`other_span`), and reads
 * whatever this core leaves to upb (odd wire bytes, a failure's exception text).
 *
 * Also here, and used by the Python twin: a lifecycle payload's state transitions and what a task's
 * span reads of its pieces, read from their wire bytes (what upb gives, or left to it). The bytes
 * are what upb serialized (or several such payloads concatenated, which parse as their merge), read
 * with protobuf's rules: a scalar given twice, the last; a Timestamp given twice, merged; fields of
 * another wire type, unknown (in a Timestamp, left to upb). Optional: without a C compiler
 * from_ray_events does all of it in Python. */

#define PY_SSIZE_T_CLEAN
#include "json_text.h"
#include "otlp_wire.h"
#include "protobuf_wire.h"

static const uint8_t nothing[1] = {0};
#define NO_READER ((Reader){nothing, nothing})
#define READER_N(r) ((r).end - (r).p)

static Reader span_of_bytes(const void *p, Py_ssize_t n) {
    return n ? (Reader){(const uint8_t *)p, (const uint8_t *)p + n} : NO_READER;
}

enum { K_NONE, K_TASK, K_ACTOR, K_JOB, K_PROFILE, K_OTHER };
#define SPAN_KINDS 4 /* K_TASK .. K_JOB index the per-kind settings below */

/* -- Ray's fields ------------------------------------------------------------------------------- */

/* The fields of Ray's messages read here, by full name (ray_fields.h: their numbers come from the
 * protobuf descriptors; the module exports the names, RAY_FIELDS, and bind() takes {name: number}). */
#define RAY_FIELD_NAMES(X)                                                                        \
    X(TASK_TRANSITIONS, "ray.rpc.events.TaskLifecycleEvent.state_transitions")                     \
    X(TASK_TRANSITION_STATE, "ray.rpc.events.TaskLifecycleEvent.StateTransition.state")            \
    X(TASK_TRANSITION_TIME, "ray.rpc.events.TaskLifecycleEvent.StateTransition.timestamp")         \
    X(ACTOR_TRANSITIONS, "ray.rpc.events.ActorLifecycleEvent.state_transitions")                   \
    X(ACTOR_TRANSITION_STATE, "ray.rpc.events.ActorLifecycleEvent.StateTransition.state")          \
    X(ACTOR_TRANSITION_TIME, "ray.rpc.events.ActorLifecycleEvent.StateTransition.timestamp")       \
    X(JOB_TRANSITIONS, "ray.rpc.events.DriverJobLifecycleEvent.state_transitions")                 \
    X(JOB_TRANSITION_STATE, "ray.rpc.events.DriverJobLifecycleEvent.StateTransition.state")        \
    X(JOB_TRANSITION_TIME, "ray.rpc.events.DriverJobLifecycleEvent.StateTransition.timestamp")     \
    X(TASK_TYPE, "ray.rpc.events.TaskDefinitionEvent.task_type")                                   \
    X(TASK_FUNC, "ray.rpc.events.TaskDefinitionEvent.task_func")                                   \
    X(TASK_NAME, "ray.rpc.events.TaskDefinitionEvent.task_name")                                   \
    X(TASK_JOB, "ray.rpc.events.TaskDefinitionEvent.job_id")                                       \
    X(TASK_PARENT, "ray.rpc.events.TaskDefinitionEvent.parent_task_id")                            \
    X(TASK_GROUP, "ray.rpc.events.TaskDefinitionEvent.placement_group_id")                         \
    X(ACTOR_TASK_FUNC, "ray.rpc.events.ActorTaskDefinitionEvent.actor_func")                       \
    X(ACTOR_TASK_NAME, "ray.rpc.events.ActorTaskDefinitionEvent.actor_task_name")                  \
    X(ACTOR_TASK_JOB, "ray.rpc.events.ActorTaskDefinitionEvent.job_id")                            \
    X(ACTOR_TASK_ACTOR, "ray.rpc.events.ActorTaskDefinitionEvent.actor_id")                        \
    X(ACTOR_TASK_PARENT, "ray.rpc.events.ActorTaskDefinitionEvent.parent_task_id")                 \
    X(ACTOR_TASK_GROUP, "ray.rpc.events.ActorTaskDefinitionEvent.placement_group_id")              \
    X(LIFECYCLE_ERROR, "ray.rpc.events.TaskLifecycleEvent.ray_error_info")                         \
    X(LIFECYCLE_NODE, "ray.rpc.events.TaskLifecycleEvent.node_id")                                 \
    X(LIFECYCLE_WORKER, "ray.rpc.events.TaskLifecycleEvent.worker_id")                             \
    X(LIFECYCLE_PID, "ray.rpc.events.TaskLifecycleEvent.worker_pid")                               \
    X(LIFECYCLE_JOB, "ray.rpc.events.TaskLifecycleEvent.job_id")                                   \
    X(ERROR_MESSAGE, "ray.rpc.RayErrorInfo.error_message")                                         \
    X(ERROR_TYPE, "ray.rpc.RayErrorInfo.error_type")                                               \
    X(PYTHON_FUNCTION, "ray.rpc.FunctionDescriptor.python_function_descriptor")                    \
    X(PYTHON_MODULE, "ray.rpc.PythonFunctionDescriptor.module_name")                               \
    X(PYTHON_CLASS, "ray.rpc.PythonFunctionDescriptor.class_name")                                 \
    X(PYTHON_NAME, "ray.rpc.PythonFunctionDescriptor.function_name")                               \
    X(JAVA_FUNCTION, "ray.rpc.FunctionDescriptor.java_function_descriptor")                        \
    X(JAVA_CLASS, "ray.rpc.JavaFunctionDescriptor.class_name")                                     \
    X(JAVA_NAME, "ray.rpc.JavaFunctionDescriptor.function_name")                                   \
    X(CPP_FUNCTION, "ray.rpc.FunctionDescriptor.cpp_function_descriptor")                          \
    X(CPP_NAME, "ray.rpc.CppFunctionDescriptor.function_name")

#include "ray_fields.h"

/* Each span kind's lifecycle: its state_transitions field and its StateTransition's state and
 * timestamp (RF_* by K_*). */
static const int transitions_field[SPAN_KINDS] = {0, RF_TASK_TRANSITIONS, RF_ACTOR_TRANSITIONS, RF_JOB_TRANSITIONS};
static const int transition_state[SPAN_KINDS] = {0, RF_TASK_TRANSITION_STATE, RF_ACTOR_TRANSITION_STATE,
                                                 RF_JOB_TRANSITION_STATE};
static const int transition_time[SPAN_KINDS] = {0, RF_TASK_TRANSITION_TIME, RF_ACTOR_TRANSITION_TIME,
                                                RF_JOB_TRANSITION_TIME};

/* -- state transitions -------------------------------------------------------------------------- */

typedef struct {
    uint64_t ns;
    int32_t state;
} Transition;

typedef struct {
    Transition *items;
    Py_ssize_t count, room;
} Transitions;

/* The StateTransition{state, timestamp} entries of span kind `kind`'s lifecycle into `out`, sorted
 * by time (stable), repeats of (time, state) left out: what from_ray_events._transitions makes of
 * them. 0, LEAVE when a Timestamp is out of range or odd or the bytes are malformed (upb reads
 * them), -1 on error. */
static int read_transitions(Reader r, int kind, Transitions *out) {
    uint32_t number = ray_field[transitions_field[kind]], state_number = ray_field[transition_state[kind]];
    uint32_t time_number = ray_field[transition_time[kind]];
    out->count = 0;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto malformed;
        if (f.number != number || f.wire_type != 2) continue;
        int32_t state = 0, nanos = 0;
        int64_t seconds = 0;
        Reader t = f.payload;
        while (t.p < t.end) {
            Field g;
            if (next_field(&t, &g) < 0) goto malformed;
            if (g.number == state_number && g.wire_type == 0) state = (int32_t)g.scalar;
            if (g.number == time_number && g.wire_type == 2 && read_timestamp(g.payload, &seconds, &nanos) != 0)
                goto malformed;
        }
        uint64_t ns;
        if (timestamp_unix_nano(seconds, nanos, &ns)) return LEAVE;
        int repeated = 0;
        for (Py_ssize_t i = 0; i < out->count && !repeated; i++)
            repeated = out->items[i].ns == ns && out->items[i].state == state;
        if (repeated) continue;
        if (out->count == out->room) {
            Py_ssize_t room = out->room ? out->room * 2 : 16;
            Transition *grown = PyMem_Realloc(out->items, sizeof(Transition) * (size_t)room);
            if (grown == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            out->items = grown;
            out->room = room;
        }
        Py_ssize_t at = out->count++; /* insertion sort: stable, and the lists are short */
        while (at > 0 && out->items[at - 1].ns > ns) {
            out->items[at] = out->items[at - 1];
            at--;
        }
        out->items[at] = (Transition){ns, state};
    }
    return 0;
malformed: /* or a Timestamp field of another wire type: left to upb's reading */
    PyErr_Clear();
    return LEAVE;
}

static int kind_of(PyObject *text);
static int is_bound(void);

/* transitions(wire, kind) -> [(time ns, state, None), ...] or None (left to upb): the state
 * transitions of a task's, an actor's or a job's lifecycle. */
static PyObject *transitions(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    int kind = nargs == 2 && PyBytes_Check(args[0]) && is_bound() ? kind_of(args[1]) : -1;
    if (kind < K_TASK || kind >= SPAN_KINDS) {
        PyErr_SetString(PyExc_TypeError, "transitions(wire: bytes, kind: 'task' | 'actor' | 'job'), after bind()");
        return NULL;
    }
    Transitions found = {NULL, 0, 0};
    PyObject *out = NULL;
    int read = read_transitions(bytes_reader(args[0]), kind, &found);
    if (read == LEAVE) out = Py_NewRef(Py_None);
    if (read != 0) goto done;
    out = PyList_New(found.count);
    for (Py_ssize_t i = 0; out != NULL && i < found.count; i++) {
        PyObject *item = Py_BuildValue("(KiO)", (unsigned long long)found.items[i].ns, (int)found.items[i].state, Py_None);
        if (item == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, item);
    }
done:
    PyMem_Free(found.items);
    return out;
}

/* -- a task's parts ----------------------------------------------------------------------------- */

/* What a task's span reads of its pieces (from_ray_events._TaskParts): readers into the kept
 * wire bytes, or into the Python objects of the upb reading when this one leaves them. */
typedef struct {
    int32_t task_type, worker_pid, error_type;
    int has_error;
    Reader name, function, job, parent, group, actor, node, worker, lifecycle_job, error_message;
    Buf function_buf;
} TaskParts;

/* The parts as from_ray_events._TaskParts names them: bind() finds each one's place among that
 * type's fields, and task_parts() and parts_from_python() put and take them there. */
#define TASK_PART_NAMES(X)                                                                        \
    X(TASK_TYPE, "task_type") X(NAME, "name") X(FUNCTION, "function") X(JOB_ID, "job_id")           \
    X(PARENT_TASK_ID, "parent_task_id") X(PLACEMENT_GROUP_ID, "placement_group_id")                \
    X(ACTOR_ID, "actor_id") X(NODE_ID, "node_id") X(WORKER_ID, "worker_id") X(WORKER_PID, "worker_pid") \
    X(LIFECYCLE_JOB_ID, "lifecycle_job_id") X(ERROR_TYPE, "error_type") X(ERROR_MESSAGE, "error_message")
#define TASK_PART_ENUM(id, name) P_##id,
#define TASK_PART_NAME(id, name) name,
enum { TASK_PART_NAMES(TASK_PART_ENUM) N_PARTS };
static const char *const task_part_names[N_PARTS] = {TASK_PART_NAMES(TASK_PART_NAME)};
static Py_ssize_t task_part_at[N_PARTS]; /* each part's index in a _TaskParts */
static PyTypeObject *task_parts_type;    /* _TaskParts */

/* Field `f` as a bytes or string value into `out` (the last given wins); 1 for another wire type. */
static int take_text(const Field *f, Reader *out) {
    if (f->wire_type != 2) return 1;
    *out = f->payload;
    return 0;
}

static int take_varint(const Field *f, uint64_t *out) {
    if (f->wire_type != 0) return 1;
    *out = f->scalar;
    return 0;
}

/* A FunctionDescriptor's name as from_ray_events._function_name makes it: the Python function's
 * module, class and function joined by dots (empty parts left out), the Java one's class and
 * function, the C++ one's function. 1 when a member is given twice or two are (upb merges those). */
static int function_name(Reader r, Buf *out) {
    /* the members (python, java, cpp) and the parts of each, in the order they are joined */
    const uint32_t member_fields[3] = {RAY(PYTHON_FUNCTION), RAY(JAVA_FUNCTION), RAY(CPP_FUNCTION)};
    const uint32_t part_fields[3][3] = {
        {RAY(PYTHON_MODULE), RAY(PYTHON_CLASS), RAY(PYTHON_NAME)}, {RAY(JAVA_CLASS), RAY(JAVA_NAME)}, {RAY(CPP_NAME)}};
    const int part_count[3] = {3, 2, 1};
    int members = 0;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        int member = 0;
        while (member < 3 && f.number != member_fields[member]) member++;
        if (member == 3) continue;
        if (f.wire_type != 2 || ++members > 1) return 1;
        Reader parts[3] = {NO_READER, NO_READER, NO_READER};
        int count = part_count[member];
        for (Reader m = f.payload; m.p < m.end;) {
            Field g;
            if (next_field(&m, &g) < 0) return -1;
            for (int i = 0; i < count; i++)
                if (g.number == part_fields[member][i] && take_text(&g, &parts[i])) return 1;
        }
        out->len = 0;
        for (int i = 0; i < count; i++) {
            Py_ssize_t n = READER_N(parts[i]);
            if (n == 0) continue;
            if (buf_reserve(out, n + 1) < 0) return -1;
            if (out->len) out->data[out->len++] = '.';
            memcpy(out->data + out->len, parts[i].p, (size_t)n);
            out->len += n;
        }
    }
    return 0;
}

/* A task's parts from its kept definition (a TaskDefinitionEvent's, or an ActorTaskDefinitionEvent's
 * when actor_task; has_definition 0: none arrived) and its lifecycle pieces, read as upb reads their
 * merge. 0; LEAVE where upb's reading is left to it (a function descriptor given twice, a field of
 * another wire type, malformed bytes, text that is not UTF-8); -1 on error. */
static int read_task_parts(Reader definition, int has_definition, int actor_task, Reader lifecycle, TaskParts *t) {
    t->name = t->function = t->job = t->parent = t->group = t->actor = NO_READER;
    t->node = t->worker = t->lifecycle_job = t->error_message = NO_READER;
    t->task_type = t->worker_pid = t->error_type = 0;
    t->has_error = 0;
    t->function_buf.len = 0;
    uint64_t task_type = 0, worker_pid = 0, error_type = 0;
    int funcs = 0;
    if (has_definition) {
        /* a TaskDefinitionEvent's or an ActorTaskDefinitionEvent's fields */
        uint32_t func_field = actor_task ? RAY(ACTOR_TASK_FUNC) : RAY(TASK_FUNC);
        uint32_t name_field = actor_task ? RAY(ACTOR_TASK_NAME) : RAY(TASK_NAME);
        uint32_t job_field = actor_task ? RAY(ACTOR_TASK_JOB) : RAY(TASK_JOB);
        uint32_t parent_field = actor_task ? RAY(ACTOR_TASK_PARENT) : RAY(TASK_PARENT);
        uint32_t group_field = actor_task ? RAY(ACTOR_TASK_GROUP) : RAY(TASK_GROUP);
        Reader r = definition;
        while (r.p < r.end) {
            Field f;
            if (next_field(&r, &f) < 0) goto left;
            int odd = 0;
            if (f.number == func_field) {
                odd = f.wire_type != 2 || ++funcs > 1;
                if (!odd) {
                    int read = function_name(f.payload, &t->function_buf);
                    if (read < 0 && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
                    odd = read != 0;
                }
            } else if (f.number == name_field) odd = take_text(&f, &t->name);
            else if (f.number == job_field) odd = take_text(&f, &t->job);
            else if (f.number == parent_field) odd = take_text(&f, &t->parent);
            else if (f.number == group_field) odd = take_text(&f, &t->group);
            else if (!actor_task && f.number == RAY(TASK_TYPE)) odd = take_varint(&f, &task_type);
            else if (actor_task && f.number == RAY(ACTOR_TASK_ACTOR)) odd = take_text(&f, &t->actor);
            if (odd) goto left;
        }
    }
    /* TaskLifecycleEvent: its error info {message, type}, node, worker, pid and job */
    Reader r = lifecycle;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto left;
        int odd = 0;
        if (f.number == RAY(LIFECYCLE_ERROR)) {
            if (f.wire_type != 2) goto left;
            t->has_error = 1; /* pieces merge: each field the last given */
            for (Reader e = f.payload; e.p < e.end;) {
                Field g;
                if (next_field(&e, &g) < 0) goto left;
                if (g.number == RAY(ERROR_MESSAGE)) odd |= take_text(&g, &t->error_message);
                else if (g.number == RAY(ERROR_TYPE)) odd |= take_varint(&g, &error_type);
            }
        } else if (f.number == RAY(LIFECYCLE_NODE)) odd = take_text(&f, &t->node);
        else if (f.number == RAY(LIFECYCLE_WORKER)) odd = take_text(&f, &t->worker);
        else if (f.number == RAY(LIFECYCLE_PID)) odd = take_varint(&f, &worker_pid);
        else if (f.number == RAY(LIFECYCLE_JOB)) odd = take_text(&f, &t->lifecycle_job);
        if (odd) goto left;
    }
    t->function = span_of_bytes(t->function_buf.data, t->function_buf.len);
    if (!utf8_valid(t->function.p, READER_N(t->function)) || !utf8_valid(t->name.p, READER_N(t->name)) ||
        !utf8_valid(t->error_message.p, READER_N(t->error_message)))
        goto left; /* not UTF-8: upb's reading raises, and says so */
    t->task_type = (int32_t)(uint32_t)task_type;
    t->worker_pid = (int32_t)(uint32_t)worker_pid;
    t->error_type = (int32_t)(uint32_t)error_type;
    return 0;
left:
    PyErr_Clear();
    return LEAVE;
}

static PyObject *new_tuple(PyTypeObject *type, int n, PyObject **items);

/* task_parts(definition, actor_task, lifecycle) -> a _TaskParts (error_type None when no error
 * info came), or None where upb's reading is left to it. */
static PyObject *task_parts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || (args[0] != Py_None && !PyBytes_Check(args[0])) || !PyBytes_Check(args[2]) || !is_bound()) {
        PyErr_SetString(PyExc_TypeError,
                        "task_parts(definition: bytes | None, actor_task: bool, lifecycle: bytes), after bind()");
        return NULL;
    }
    int actor_task = PyObject_IsTrue(args[1]);
    if (actor_task < 0) return NULL;
    TaskParts t = {.function_buf = {NULL, 0, 0}};
    int has_definition = args[0] != Py_None;
    int read = read_task_parts(has_definition ? bytes_reader(args[0]) : NO_READER, has_definition, actor_task,
                               bytes_reader(args[2]), &t);
    PyObject *out = read == LEAVE ? Py_NewRef(Py_None) : NULL;
    if (read == 0) {
        /* One call at a time, in order: none may call the C API after another failed (the reader_*
         * return NULL at once then, and new_tuple drops what was made). */
        PyObject *parts[N_PARTS], *items[N_PARTS];
        parts[P_TASK_TYPE] = PyLong_FromLong((long)t.task_type);
        parts[P_WORKER_PID] = PyErr_Occurred() ? NULL : PyLong_FromLong((long)t.worker_pid);
        parts[P_ERROR_TYPE] = PyErr_Occurred() ? NULL
                              : t.has_error    ? PyLong_FromLong((long)t.error_type)
                                               : Py_NewRef(Py_None);
        parts[P_NAME] = reader_text(t.name);
        parts[P_FUNCTION] = reader_text(t.function);
        parts[P_JOB_ID] = reader_bytes(t.job);
        parts[P_PARENT_TASK_ID] = reader_bytes(t.parent);
        parts[P_PLACEMENT_GROUP_ID] = reader_bytes(t.group);
        parts[P_ACTOR_ID] = reader_bytes(t.actor);
        parts[P_NODE_ID] = reader_bytes(t.node);
        parts[P_WORKER_ID] = reader_bytes(t.worker);
        parts[P_LIFECYCLE_JOB_ID] = reader_bytes(t.lifecycle_job);
        parts[P_ERROR_MESSAGE] = reader_text(t.error_message);
        for (int i = 0; i < N_PARTS; i++) items[task_part_at[i]] = parts[i];
        out = new_tuple(task_parts_type, N_PARTS, items);
    }
    PyMem_Free(t.function_buf.data);
    return out;
}

/* -- SHA-256 (FIPS 180-4): the spans' ids are digests (from_ray_events._digest) ------------------ */

typedef struct {
    uint32_t h[8];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} Sha256;

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define SHA_S0(x) (ROTR(x, 2) ^ ROTR(x, 13) ^ ROTR(x, 22))
#define SHA_S1(x) (ROTR(x, 6) ^ ROTR(x, 11) ^ ROTR(x, 25))
#define SHA_G0(x) (ROTR(x, 7) ^ ROTR(x, 18) ^ ((x) >> 3))
#define SHA_G1(x) (ROTR(x, 17) ^ ROTR(x, 19) ^ ((x) >> 10))
/* One round, the eight working variables named in their rotated order (no moves between rounds). */
#define SHA_ROUND(a, b, c, d, e, f, g, h, i)                                                      \
    do {                                                                                          \
        uint32_t t1 = h + SHA_S1(e) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];                      \
        d += t1;                                                                                  \
        h = t1 + SHA_S0(a) + ((a & b) ^ (a & c) ^ (b & c));                                       \
    } while (0)

static void sha256_block(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) w[i] = w[i - 16] + SHA_G0(w[i - 15]) + w[i - 7] + SHA_G1(w[i - 2]);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i += 8) {
        SHA_ROUND(a, b, c, d, e, f, g, k, i);
        SHA_ROUND(k, a, b, c, d, e, f, g, i + 1);
        SHA_ROUND(g, k, a, b, c, d, e, f, i + 2);
        SHA_ROUND(f, g, k, a, b, c, d, e, i + 3);
        SHA_ROUND(e, f, g, k, a, b, c, d, i + 4);
        SHA_ROUND(d, e, f, g, k, a, b, c, i + 5);
        SHA_ROUND(c, d, e, f, g, k, a, b, i + 6);
        SHA_ROUND(b, c, d, e, f, g, k, a, i + 7);
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256_init(Sha256 *s) {
    static const uint32_t start[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, start, sizeof start);
    s->length = 0;
    s->used = 0;
}

static void sha256_update(Sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    s->length += n;
    while (n) {
        size_t take = 64 - s->used < n ? 64 - s->used : n;
        memcpy(s->block + s->used, p, take);
        s->used += take, p += take, n -= take;
        if (s->used == 64) {
            sha256_block(s->h, s->block);
            s->used = 0;
        }
    }
}

static void sha256_final(Sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->length * 8;
    uint8_t pad[72] = {0x80};
    size_t pad_n = (s->used < 56 ? 56 : 120) - s->used;
    for (size_t i = 0; i < 8; i++) pad[pad_n + i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(s, pad, pad_n + 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(s->h[i] >> (24 - 8 * j));
}

/* -- span ids ----------------------------------------------------------------------------------- */

enum { ID_TRACE = 1, ID_JOB, ID_TASK, ID_ACTOR };
static const char *const id_labels[] = {"", "ray-otel-events/trace", "ray-otel-events/job", "ray-otel-events/task",
                                        "ray-otel-events/actor"};

/* The ids of one entity's span (a digest each), kept for the most recent: a task's pieces, its
 * span and its children ask for the same ones close together. */
#define ID_CACHE 2048
#define ID_CACHED_MAX 32
typedef struct {
    PyObject *session;
    int64_t attempt;
    uint8_t what, n;
    uint8_t ident[ID_CACHED_MAX];
    uint8_t digest[16];
} IdEntry;

static IdEntry id_cache[ID_CACHE];

static uint64_t hash_bytes(const uint8_t *p, Py_ssize_t n) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ull;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int same_text(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (a == NULL || b == NULL) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    if (n != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b)) return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0;
}

/* from_ray_events' trace_id_for_job (16 bytes: ID_TRACE) or job_span_id, task_span_id (with
 * `attempt`), actor_span_id (8 bytes) of `ident`: SHA-256 of label NUL session NUL ident [NUL
 * attempt]. */
static int id_of(int what, PyObject *session, Reader ident, int64_t attempt, uint8_t out[16]) {
    Py_ssize_t n = READER_N(ident), size = what == ID_TRACE ? 16 : 8;
    if (what != ID_TASK) attempt = 0;
    Py_hash_t session_hash = PyObject_Hash(session);
    if (session_hash == -1) return -1;
    uint64_t h = hash_bytes(ident.p, n) ^ (uint64_t)session_hash * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)attempt * 31 ^
                 (uint64_t)what;
    IdEntry *entry = n <= ID_CACHED_MAX ? &id_cache[(h ^ h >> 29) & (ID_CACHE - 1)] : NULL;
    if (entry && entry->what == what && entry->n == n && entry->attempt == attempt &&
        memcmp(entry->ident, ident.p, (size_t)n) == 0 && same_text(entry->session, session)) {
        memcpy(out, entry->digest, (size_t)size);
        return 0;
    }
    Py_ssize_t session_n;
    const char *text = PyUnicode_AsUTF8AndSize(session, &session_n);
    if (text == NULL) return -1;
    Sha256 s;
    uint8_t digest[32];
    sha256_init(&s);
    sha256_update(&s, id_labels[what], strlen(id_labels[what]));
    sha256_update(&s, "", 1);
    sha256_update(&s, text, (size_t)session_n);
    sha256_update(&s, "", 1);
    sha256_update(&s, ident.p, (size_t)n);
    if (what == ID_TASK) {
        char number[24];
        int k = (int)(put_decimal(number, attempt) - number);
        sha256_update(&s, "", 1);
        sha256_update(&s, number, (size_t)k);
    }
    sha256_final(&s, digest);
    memcpy(out, digest, (size_t)size);
    if (entry) {
        Py_XSETREF(entry->session, Py_NewRef(session));
        entry->what = (uint8_t)what;
        entry->n = (uint8_t)n;
        entry->attempt = attempt;
        memcpy(entry->ident, ident.p, (size_t)n);
        memcpy(entry->digest, digest, 16);
    }
    return 0;
}

/* digest(what, session, ident, attempt) -> the id, as from_ray_events computes it (for the tests). */
static PyObject *digest(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyLong_Check(args[0]) || !PyUnicode_Check(args[1]) || !PyBytes_Check(args[2]) ||
        !PyLong_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "digest(what: int, session: str, ident: bytes, attempt: int)");
        return NULL;
    }
    long what = PyLong_AsLong(args[0]);
    long long attempt = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    if (what < ID_TRACE || what > ID_ACTOR) {
        PyErr_SetString(PyExc_ValueError, "what: 1 trace, 2 job span, 3 task span, 4 actor span");
        return NULL;
    }
    uint8_t out[16];
    if (id_of((int)what, args[1], bytes_reader(args[2]), attempt, out) < 0) return NULL;
    return PyBytes_FromStringAndSize((const char *)out, what == ID_TRACE ? 16 : 8);
}

/* -- keyed tables, oldest first ------------------------------------------------------------------ */

/* An entry of a table: a key (kind, session, id, attempt; the session NULL for event ids) and its
 * place in the table's order. Open entities, emitted entities, tasks' latest attempts and the
 * duplicate filter's event ids are each a table of these (or of a struct that starts with one). */
typedef struct Node Node;
struct Node {
    Node *prev, *next;
    uint64_t hash;
    PyObject *session; /* str (held), or NULL */
    PyObject *id;      /* bytes (held) */
    int64_t attempt;
    int kind;
};

typedef struct {
    int kind;
    PyObject *session;
    Reader id;
    int64_t attempt;
    uint64_t hash;
} Key;

typedef struct {
    Node **slots;
    int bits; /* 1 << bits slots, linear probing, at most half used */
    Py_ssize_t count;
    Node *first, *last;
} Table;

static int make_key(Key *k, int kind, PyObject *session, Reader id, int64_t attempt) {
    uint64_t h = hash_bytes(id.p, READER_N(id)) ^ (uint64_t)attempt * 0x100000001b3ull ^ (uint64_t)kind << 56;
    if (session != NULL) {
        Py_hash_t s = PyObject_Hash(session);
        if (s == -1) return -1;
        h ^= (uint64_t)s * 0x9E3779B97F4A7C15ull;
    }
    *k = (Key){kind, session, id, attempt, h};
    return 0;
}

static size_t slot_of(const Table *t, uint64_t h) { return (size_t)((h * 0x9E3779B97F4A7C15ull) >> (64 - t->bits)); }

static int node_is(const Node *n, const Key *k) {
    return n->hash == k->hash && n->kind == k->kind && n->attempt == k->attempt &&
           PyBytes_GET_SIZE(n->id) == READER_N(k->id) &&
           memcmp(PyBytes_AS_STRING(n->id), k->id.p, (size_t)READER_N(k->id)) == 0 && same_text(n->session, k->session);
}

static Node *table_find(const Table *t, const Key *k) {
    if (t->slots == NULL) return NULL;
    size_t mask = ((size_t)1 << t->bits) - 1;
    for (size_t i = slot_of(t, k->hash);; i = (i + 1) & mask) {
        Node *n = t->slots[i];
        if (n == NULL || node_is(n, k)) return n;
    }
}

static void place(Table *t, Node *n) {
    size_t mask = ((size_t)1 << t->bits) - 1, i = slot_of(t, n->hash);
    while (t->slots[i] != NULL) i = (i + 1) & mask;
    t->slots[i] = n;
}

/* Adds `n` (its key not in the table) as the newest. */
static int table_add(Table *t, Node *n) {
    if (t->slots == NULL || (t->count + 1) * 2 > ((Py_ssize_t)1 << t->bits)) {
        int bits = t->slots == NULL ? 4 : t->bits + 1;
        Node **slots = PyMem_Calloc((size_t)1 << bits, sizeof(Node *));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        PyMem_Free(t->slots);
        t->slots = slots;
        t->bits = bits;
        for (Node *m = t->first; m != NULL; m = m->next) place(t, m);
    }
    place(t, n);
    n->prev = t->last;
    n->next = NULL;
    if (t->last) t->last->next = n;
    else t->first = n;
    t->last = n;
    t->count++;
    return 0;
}

static void unlink_node(Table *t, Node *n) {
    if (n->prev) n->prev->next = n->next;
    else t->first = n->next;
    if (n->next) n->next->prev = n->prev;
    else t->last = n->prev;
}

static void move_to_end(Table *t, Node *n) {
    if (t->last == n) return;
    unlink_node(t, n);
    n->prev = t->last;
    n->next = NULL;
    t->last->next = n;
    t->last = n;
}

/* Takes `n` out of the table (its memory stays the caller's). */
static void table_remove(Table *t, Node *n) {
    size_t mask = ((size_t)1 << t->bits) - 1, i = slot_of(t, n->hash);
    while (t->slots[i] != n) i = (i + 1) & mask;
    for (size_t j = i;;) { /* backward shift: the probe sequences stay unbroken */
        j = (j + 1) & mask;
        Node *m = t->slots[j];
        if (m == NULL) break;
        size_t home = slot_of(t, m->hash);
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
        t->slots[i] = m;
        i = j;
    }
    t->slots[i] = NULL;
    unlink_node(t, n);
    t->count--;
}

static Node *new_node(size_t size, const Key *k, PyObject *id) {
    Node *n = PyMem_Calloc(1, size);
    if (n == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    n->hash = k->hash;
    n->kind = k->kind;
    n->attempt = k->attempt;
    n->session = Py_XNewRef(k->session);
    n->id = Py_NewRef(id);
    return n;
}

static void free_node(Node *n) {
    Py_XDECREF(n->session);
    Py_DECREF(n->id);
    PyMem_Free(n);
}

static void clear_table(Table *t, void (*free_fn)(Node *)) {
    for (Node *n = t->first; n != NULL;) {
        Node *next = n->next;
        free_fn(n);
        n = next;
    }
    PyMem_Free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* -- what bind() tells -------------------------------------------------------------------------- */

#define MAX_TYPES 64
#define MAX_STATES 8

/* The task span's attribute keys, in the order bind() gives them. */
enum {
    A_TASK_ID,
    A_TASK_ATTEMPT,
    A_JOB_ID,
    A_FUNCTION,
    A_TASK_TYPE,
    A_REMOTE,
    A_ACTOR_ID,
    A_ACTOR_CLASS,
    A_ACTOR_METHOD,
    A_TASK_NAME,
    A_PARENT_TASK_ID,
    A_PLACEMENT_GROUP_ID,
    A_NODE_ID,
    A_WORKER_ID,
    A_PID,
    A_ERROR_TYPE,
    A_INCOMPLETE,
    A_STATE,
    A_PRODUCER,
    N_KEYS
};

typedef struct {
    PyObject *kind_text[5];    /* "task", "actor", "job", "profile" by K_*, as heads hold them */
    PyObject *lifecycle_type[SPAN_KINDS]; /* an entity's span's event type, by kind */
    int32_t terminal[SPAN_KINDS][MAX_STATES];
    int n_terminal[SPAN_KINDS];
    int32_t running[MAX_STATES];
    int n_running;
    PyObject *definitions[MAX_TYPES]; /* a definition type's keeper (None: kept whole); NULL: not one */
    long task_definition_type;
    int32_t driver_task, actor_creation_task, failed;
    PyObject *keys[N_KEYS]; /* encoded KeyValue.key fields */
    PyObject *producer, *task_failed; /* "bridge", and a failure's type when no error info came */
    PyObject *task_type_names, *state_names, *error_type_names; /* dicts {number: name} */
    /* Python: state_event(state) -> (before, after); transitions_of(kind, wire); states_of(kind,
     * wire); task_parts_of(definition, actor_task, lifecycle); task_failure(at, message, type) ->
     * (event, status); other_span(kind, session, id, first_ns, definition, type, lifecycle) ->
     * (wire, complete); record_fields(type, severity) -> (number, text, name); parts_log_record */
    PyObject *state_event, *transitions_of, *states_of, *task_parts_of, *task_failure, *other_span;
    PyObject *record_fields, *parts_log_record;
    PyTypeObject *span_type, *log_type; /* EmittedSpan, EmittedLog */
    PyObject *state_events[64];         /* state_event's answers, by state */
    PyObject *fields[MAX_TYPES][8];     /* record_fields' answers, by type and severity */
    int bound;
} Bound;

static Bound B;

static int is_bound(void) { return B.bound; }

static int kind_of(PyObject *text) {
    if (!PyUnicode_Check(text)) return -1;
    if (PyUnicode_GET_LENGTH(text) == 0) return K_NONE;
    for (int k = K_TASK; k <= K_PROFILE; k++)
        if (same_text(text, B.kind_text[k])) return k;
    return K_OTHER;
}

static int state_in(int32_t state, const int32_t *states, int n) {
    for (int i = 0; i < n; i++)
        if (states[i] == state) return 1;
    return 0;
}

/* -- the converter's state ---------------------------------------------------------------------- */

#define ENTITY_OVERHEAD_BYTES 360 /* from_ray_events.ENTITY_OVERHEAD_BYTES: bind() checks */
static long entity_overhead = ENTITY_OVERHEAD_BYTES;

typedef struct Entity Entity;
struct Entity {
    Node node; /* the key; its place: least recently updated first */
    Entity *waiting_prev, *waiting_next; /* its place among the terminal ones waiting out the grace */
    uint64_t first_ns, touched;
    double updated_at, terminal_at;
    PyObject *definition; /* bytes (kept slim), or NULL */
    PyObject *key_bytes;  /* entity_key_bytes, made once in a call to add() and dropped at its end */
    char *lifecycle;      /* the lifecycle pieces, without their ids, concatenated */
    Py_ssize_t lifecycle_n;
    long definition_type;
    uint8_t running, terminal, waiting;
};

typedef struct {
    Node node;
    int64_t latest;
} AttemptNode;

typedef struct {
    Py_ssize_t duplicates, late[SPAN_KINDS], spans[SPAN_KINDS][2], evicted[2];
    Py_ssize_t types[MAX_TYPES];
    PyObject *other_types; /* dict: event types past MAX_TYPES (or negative) -> count */
} Counts;

typedef struct {
    PyObject_HEAD
    Py_ssize_t max_open_entities, dedup_window;
    long long max_open_bytes, open_bytes;
    double entity_ttl_s, terminal_grace_s;
    PyObject *clock, *observed;
    PyObject *envelope;                   /* session -> (resource, scope) of its items, or NULL */
    PyObject *envelope_session, *envelope_parts; /* its last answer */
    Table open, seen, emitted, attempts;
    Entity *waiting_first, *waiting_last;
    uint64_t calls;
    Transitions scratch;
    Counts counts;
} Core;

static long long entity_size(const Entity *e) {
    return entity_overhead + (e->definition ? PyBytes_GET_SIZE(e->definition) : 0) + e->lifecycle_n;
}

static void free_entity(Node *n) {
    Entity *e = (Entity *)n;
    Py_XDECREF(e->definition);
    Py_XDECREF(e->key_bytes);
    PyMem_Free(e->lifecycle);
    free_node(n);
}

static Reader lifecycle_of(const Entity *e) { return span_of_bytes(e->lifecycle, e->lifecycle_n); }

/* from_ray_events.entity_key_bytes: kind NUL session NUL attempt NUL id. */
static PyObject *entity_key_bytes(const Entity *e) {
    Py_ssize_t session_n;
    const char *session = PyUnicode_AsUTF8AndSize(e->node.session, &session_n);
    if (session == NULL) return NULL;
    Py_ssize_t kind_n;
    const char *kind = PyUnicode_AsUTF8AndSize(B.kind_text[e->node.kind], &kind_n);
    if (kind == NULL) return NULL;
    char attempt[24];
    int attempt_n = (int)(put_decimal(attempt, e->node.attempt) - attempt);
    Py_ssize_t id_n = PyBytes_GET_SIZE(e->node.id);
    PyObject *out = PyBytes_FromStringAndSize(NULL, kind_n + session_n + attempt_n + id_n + 3);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    p = put(p, kind, kind_n);
    *p++ = 0;
    p = put(p, session, session_n);
    *p++ = 0;
    p = put(p, attempt, attempt_n);
    *p++ = 0;
    put(p, PyBytes_AS_STRING(e->node.id), id_n);
    return out;
}

static PyObject *new_tuple(PyTypeObject *type, int n, PyObject **items) { /* steals the items */
    PyObject *out = type->tp_alloc(type, n);
    for (int i = 0; i < n; i++) {
        if (items[i] == NULL || out == NULL) {
            for (int j = 0; j < n; j++) Py_XDECREF(items[j]);
            Py_XDECREF(out);
            return NULL;
        }
    }
    for (int i = 0; i < n; i++) PyTuple_SET_ITEM(out, i, items[i]);
    return out;
}

/* _BoundedSet.add of the emitted entities: the newest, the oldest forgotten past the window. */
static int remember(Core *c, const Key *k, PyObject *id) {
    Node *n = table_find(&c->emitted, k);
    if (n != NULL) {
        move_to_end(&c->emitted, n);
    } else {
        n = new_node(sizeof(Node), k, id);
        if (n == NULL || table_add(&c->emitted, n) < 0) {
            if (n) free_node(n);
            return -1;
        }
    }
    while (c->emitted.count > c->dedup_window) {
        Node *old = c->emitted.first;
        table_remove(&c->emitted, old);
        free_node(old);
    }
    return 0;
}

/* RayEventsToOtel._note_attempt: a task's latest attempt, the most recently noted last. */
static int note_attempt(Core *c, PyObject *session, PyObject *task_id, int64_t attempt) {
    Key k;
    if (make_key(&k, 0, session, bytes_reader(task_id), 0) < 0) return -1;
    AttemptNode *n = (AttemptNode *)table_find(&c->attempts, &k);
    if (n == NULL) {
        n = (AttemptNode *)new_node(sizeof(AttemptNode), &k, task_id);
        if (n == NULL || table_add(&c->attempts, &n->node) < 0) {
            if (n) free_node(&n->node);
            return -1;
        }
        n->latest = attempt;
    } else {
        if (n->latest < attempt) n->latest = attempt;
        move_to_end(&c->attempts, &n->node);
    }
    while (c->attempts.count > c->dedup_window) {
        Node *old = c->attempts.first;
        table_remove(&c->attempts, old);
        free_node(old);
    }
    return 0;
}

static int latest_attempt(Core *c, PyObject *session, Reader task_id, int64_t *out) {
    Key k;
    if (make_key(&k, 0, session, task_id, 0) < 0) return -1;
    AttemptNode *n = (AttemptNode *)table_find(&c->attempts, &k);
    *out = n != NULL ? n->latest : 0;
    return 0;
}

/* 0 when a Python callback's answer is a tuple of two bytes; else -1 with a TypeError naming it
 * (the answer is released). */
static int bytes_pair(PyObject *answer, const char *what) {
    if (PyTuple_Check(answer) && PyTuple_GET_SIZE(answer) == 2 && PyBytes_Check(PyTuple_GET_ITEM(answer, 0)) &&
        PyBytes_Check(PyTuple_GET_ITEM(answer, 1)))
        return 0;
    Py_DECREF(answer);
    PyErr_Format(PyExc_TypeError, "%s must give (bytes, bytes)", what);
    return -1;
}

/* -- items: a span or record in its one-item envelope ------------------------------------------ */

/* The (resource, scope) bytes of a session's items (borrowed, kept until the session changes); NULL
 * with no error when items go bare. */
static PyObject *envelope_of(Core *c, PyObject *session) {
    if (c->envelope == NULL) return NULL;
    if (c->envelope_parts != NULL && same_text(c->envelope_session, session)) return c->envelope_parts;
    PyObject *parts = PyObject_CallOneArg(c->envelope, session);
    if (parts == NULL || bytes_pair(parts, "envelope") < 0) return NULL;
    Py_XSETREF(c->envelope_parts, parts);
    Py_XSETREF(c->envelope_session, Py_NewRef(session));
    return parts;
}

/* A new item of `n` bytes of content in the envelope `parts` (NULL: bare), with `*content` where the
 * content goes and `*at` its offset: otlp_wire.resource_logs(resource, scope, [content]) (a
 * ResourceSpans has the same shape). */
static PyObject *new_item(PyObject *parts, Py_ssize_t n, char **content, Py_ssize_t *at) {
    if (parts == NULL) {
        PyObject *item = PyBytes_FromStringAndSize(NULL, n);
        if (item != NULL) *content = PyBytes_AS_STRING(item), *at = 0;
        return item;
    }
    PyObject *resource = PyTuple_GET_ITEM(parts, 0), *scope = PyTuple_GET_ITEM(parts, 1);
    Py_ssize_t resource_n = PyBytes_GET_SIZE(resource), scope_n = PyBytes_GET_SIZE(scope);
    Py_ssize_t scoped = field_size(scope_n) + field_size(n);
    PyObject *item = PyBytes_FromStringAndSize(NULL, field_size(resource_n) + field_size(scoped));
    if (item == NULL) return NULL;
    char *p = put_field(PyBytes_AS_STRING(item), 0x0a, PyBytes_AS_STRING(resource), resource_n);
    *p++ = 0x12;
    p = put_varint(p, (uint64_t)scoped);
    p = put_field(p, 0x0a, PyBytes_AS_STRING(scope), scope_n);
    *p++ = 0x12;
    p = put_varint(p, (uint64_t)n);
    *content = p;
    *at = p - PyBytes_AS_STRING(item);
    return item;
}

/* `n` bytes of `data` as an item of `session`. */
static PyObject *item_of(Core *c, PyObject *session, const char *data, Py_ssize_t n, Py_ssize_t *at) {
    PyObject *parts = envelope_of(c, session);
    if (parts == NULL && PyErr_Occurred()) return NULL;
    char *content;
    PyObject *item = new_item(parts, n, &content, at);
    if (item != NULL) memcpy(content, data, (size_t)n);
    return item;
}

/* -- spans -------------------------------------------------------------------------------------- */

static int put_key_text(Buf *b, int key, const void *text, Py_ssize_t n, int hex) {
    return buf_text_entry(b, 0x4a, PyBytes_AS_STRING(B.keys[key]), PyBytes_GET_SIZE(B.keys[key]),
                          (const uint8_t *)text, n, hex);
}

#define ATTR_TEXT(b, key, literal) put_key_text(b, key, literal, sizeof(literal) - 1, 0)
#define ATTR_READER(b, key, r) put_key_text(b, key, (r).p, READER_N(r), 0)
#define ATTR_HEX(b, key, r) put_key_text(b, key, (r).p, READER_N(r), 1)

static int attr_str(Buf *b, int key, PyObject *text) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    return s == NULL ? -1 : put_key_text(b, key, s, n, 0);
}

static int attr_number(Buf *b, int key, int64_t value, int boolean) {
    return buf_number_entry(b, 0x4a, PyBytes_AS_STRING(B.keys[key]), PyBytes_GET_SIZE(B.keys[key]), value, boolean);
}

/* from_ray_events._enum_name: the first name of a number, else the number. A new reference. */
static PyObject *enum_name(PyObject *names, int64_t value) {
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL) return NULL;
    PyObject *name = PyDict_GetItemWithError(names, number);
    if (name != NULL) Py_INCREF(name);
    else if (!PyErr_Occurred()) name = PyObject_Str(number);
    Py_DECREF(number);
    return name;
}

static int is_nil(Reader r) {
    for (const uint8_t *p = r.p; p < r.end; p++)
        if (*p != 0xff) return 0;
    return 1; /* empty, or all 0xff */
}

/* The (before, after) bytes of a state's Span.events entry around its time. Borrowed. */
static PyObject *state_event(int32_t state, PyObject **made) {
    if (state >= 0 && state < 64 && B.state_events[state] != NULL) return B.state_events[state];
    PyObject *parts = PyObject_CallFunction(B.state_event, "i", (int)state);
    if (parts == NULL || bytes_pair(parts, "state_event") < 0) return NULL;
    if (state >= 0 && state < 64) B.state_events[state] = parts;
    else *made = parts;
    return parts;
}

/* Transitions as from_ray_events._transitions reads them through upb, into `tr`. */
static int transitions_from_python(int kind, Reader lifecycle, Transitions *tr) {
    PyObject *read = PyObject_CallFunction(B.transitions_of, "Oy#", B.kind_text[kind], lifecycle.p, READER_N(lifecycle));
    if (read == NULL) return -1;
    int ok = PyList_Check(read);
    Py_ssize_t n = ok ? PyList_GET_SIZE(read) : 0;
    if (ok && n > tr->room) {
        Transition *grown = PyMem_Realloc(tr->items, sizeof(Transition) * (size_t)n);
        if (grown == NULL) {
            Py_DECREF(read);
            PyErr_NoMemory();
            return -1;
        }
        tr->items = grown;
        tr->room = n;
    }
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *item = PyList_GET_ITEM(read, i);
        ok = PyTuple_Check(item) && PyTuple_GET_SIZE(item) >= 2;
        if (!ok) break;
        tr->items[i].ns = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 0));
        tr->items[i].state = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        ok = !PyErr_Occurred();
    }
    Py_DECREF(read);
    if (!ok) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "transitions_of must give [(ns, state, ...)]");
        return -1;
    }
    tr->count = n;
    return 0;
}

/* A task's parts from from_ray_events._task_parts_python's _TaskParts (`held` keeps it alive). */
static int parts_from_python(PyObject *held, TaskParts *t) {
    if (!PyTuple_Check(held) || PyTuple_GET_SIZE(held) != N_PARTS) goto bad;
    Reader *texts[] = {&t->name, &t->function, &t->error_message};
    int text_at[] = {P_NAME, P_FUNCTION, P_ERROR_MESSAGE};
    for (int i = 0; i < 3; i++) {
        Py_ssize_t n;
        PyObject *item = PyTuple_GET_ITEM(held, task_part_at[text_at[i]]);
        if (!PyUnicode_Check(item)) goto bad;
        const char *s = PyUnicode_AsUTF8AndSize(item, &n);
        if (s == NULL) return -1;
        *texts[i] = span_of_bytes(s, n);
    }
    Reader *ids[] = {&t->job, &t->parent, &t->group, &t->actor, &t->node, &t->worker, &t->lifecycle_job};
    int id_at[] = {P_JOB_ID, P_PARENT_TASK_ID, P_PLACEMENT_GROUP_ID, P_ACTOR_ID, P_NODE_ID, P_WORKER_ID, P_LIFECYCLE_JOB_ID};
    for (int i = 0; i < 7; i++) {
        PyObject *item = PyTuple_GET_ITEM(held, task_part_at[id_at[i]]);
        if (!PyBytes_Check(item)) goto bad;
        *ids[i] = span_of_bytes(PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item));
    }
    PyObject *error_type = PyTuple_GET_ITEM(held, task_part_at[P_ERROR_TYPE]);
    t->task_type = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(held, task_part_at[P_TASK_TYPE]));
    t->worker_pid = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(held, task_part_at[P_WORKER_PID]));
    t->has_error = error_type != Py_None;
    t->error_type = t->has_error ? (int32_t)PyLong_AsLong(error_type) : 0;
    return PyErr_Occurred() ? -1 : 0;
bad:
    PyErr_SetString(PyExc_TypeError, "task_parts_of must give a task's parts (a _TaskParts)");
    return -1;
}

static char *put_id_field(char *p, uint8_t tag, const uint8_t *id, int n) {
    *p++ = (char)tag;
    *p++ = (char)n;
    return put(p, (const char *)id, n);
}

/* Span.links entry (13): Link{trace_id = 1, span_id = 2}. */
static int put_link(Buf *b, const uint8_t trace[16], const uint8_t span[8]) {
    if (buf_reserve(b, 30) < 0) return -1;
    char *p = b->data + b->len;
    *p++ = 0x6a;
    *p++ = 28;
    p = put_id_field(p, 0x0a, trace, 16);
    b->len = put_id_field(p, 0x12, span, 8) - b->data;
    return 0;
}

/* RayEventsToOtel._task_span and _base_span of a task attempt: its Span as an item (`at`: where
 * the Span starts); `complete`: it reached a terminal state. */
static PyObject *task_span(Core *c, Entity *e, int *complete, Py_ssize_t *at) {
    PyObject *session = e->node.session, *task_object = e->node.id, *held = NULL, *out = NULL;
    PyObject *type_name = NULL, *error_type_name = NULL, *state_name = NULL, *failure = NULL, *made_event = NULL;
    Reader task = bytes_reader(task_object), lifecycle = lifecycle_of(e);
    int64_t attempt = e->node.attempt;
    Transitions *tr = &c->scratch;
    TaskParts p = {.function_buf = {NULL, 0, 0}};
    Buf attrs = {NULL, 0, 0}, span = {NULL, 0, 0};
    tr->count = 0;
    if (e->lifecycle_n) {
        int read = read_transitions(lifecycle, K_TASK, tr);
        if (read < 0 || (read == LEAVE && transitions_from_python(K_TASK, lifecycle, tr) < 0)) goto done;
    }
    Py_ssize_t terminal = -1;
    for (Py_ssize_t i = 0; i < tr->count && terminal < 0; i++)
        if (state_in(tr->items[i].state, B.terminal[K_TASK], B.n_terminal[K_TASK])) terminal = i;
    *complete = terminal >= 0;

    int defined = e->definition != NULL, actor_task = defined && e->definition_type != B.task_definition_type;
    int read = read_task_parts(defined ? bytes_reader(e->definition) : NO_READER, defined, actor_task, lifecycle, &p);
    if (read < 0) goto done;
    if (read == LEAVE) {
        held = PyObject_CallFunction(B.task_parts_of, "OOy#", defined ? e->definition : Py_None,
                                     actor_task ? Py_True : Py_False, lifecycle.p, READER_N(lifecycle));
        if (held == NULL || parts_from_python(held, &p) < 0) goto done;
    }
    Reader job = READER_N(task) == 24 ? (Reader){task.end - 4, task.end} : READER_N(p.job) ? p.job : p.lifecycle_job;
    Reader actor = p.actor, name = p.name;
    if (ATTR_HEX(&attrs, A_TASK_ID, task) < 0 || attr_number(&attrs, A_TASK_ATTEMPT, attempt, 0) < 0 ||
        ATTR_HEX(&attrs, A_JOB_ID, job) < 0)
        goto done;
    if (defined && !actor_task) {
        if (!READER_N(name) && p.task_type == B.driver_task) name = span_of_bytes("driver", 6);
        type_name = enum_name(B.task_type_names, p.task_type);
        if (type_name == NULL || ATTR_READER(&attrs, A_FUNCTION, p.function) < 0 || attr_str(&attrs, A_TASK_TYPE, type_name) < 0)
            goto done;
        if (p.task_type == B.actor_creation_task) actor = READER_N(task) > 16 ? (Reader){task.end - 16, task.end} : task;
    } else if (defined) {
        if (ATTR_READER(&attrs, A_FUNCTION, p.function) < 0 || ATTR_TEXT(&attrs, A_TASK_TYPE, "ACTOR_TASK") < 0) goto done;
    }
    if (READER_N(actor)) {
        if (ATTR_TEXT(&attrs, A_REMOTE, "actor") < 0 || ATTR_HEX(&attrs, A_ACTOR_ID, actor) < 0) goto done;
        const uint8_t *s = name.p, *dot = NULL; /* name.rpartition(":")[2].rpartition(".") */
        for (const uint8_t *q = name.end; q > name.p; q--)
            if (q[-1] == ':') {
                s = q;
                break;
            }
        for (const uint8_t *q = name.end; q > s; q--)
            if (q[-1] == '.') {
                dot = q - 1;
                break;
            }
        if (dot != NULL && dot > s &&
            (put_key_text(&attrs, A_ACTOR_CLASS, s, dot - s, 0) < 0 ||
             put_key_text(&attrs, A_ACTOR_METHOD, dot + 1, name.end - dot - 1, 0) < 0))
            goto done;
    } else if (defined && ATTR_TEXT(&attrs, A_REMOTE, "function") < 0) {
        goto done;
    }
    if (READER_N(name) && ATTR_READER(&attrs, A_TASK_NAME, name) < 0) goto done;
    uint8_t parent[16], trace[16], span_id[16];
    if (is_nil(p.parent)) {
        if (id_of(ID_JOB, session, job, 0, parent) < 0) goto done;
    } else {
        int64_t parent_attempt;
        if (latest_attempt(c, session, p.parent, &parent_attempt) < 0 ||
            id_of(ID_TASK, session, p.parent, parent_attempt, parent) < 0 || ATTR_HEX(&attrs, A_PARENT_TASK_ID, p.parent) < 0)
            goto done;
    }
    if (defined && !is_nil(p.group) && ATTR_HEX(&attrs, A_PLACEMENT_GROUP_ID, p.group) < 0) goto done;
    if (READER_N(p.node) && ATTR_HEX(&attrs, A_NODE_ID, p.node) < 0) goto done;
    if (READER_N(p.worker) && ATTR_HEX(&attrs, A_WORKER_ID, p.worker) < 0) goto done;
    if (p.worker_pid) {
        char pid[24];
        int n = (int)(put_decimal(pid, (int)p.worker_pid) - pid);
        if (put_key_text(&attrs, A_PID, pid, n, 0) < 0) goto done;
    }
    int failed = terminal >= 0 && tr->items[terminal].state == B.failed;
    if (failed && p.has_error) {
        error_type_name = enum_name(B.error_type_names, p.error_type);
        if (error_type_name == NULL || attr_str(&attrs, A_ERROR_TYPE, error_type_name) < 0) goto done;
    }
    /* _base_span */
    uint64_t start = tr->count ? tr->items[0].ns : e->first_ns, end;
    if (terminal >= 0) {
        end = tr->items[terminal].ns;
    } else {
        end = tr->count && tr->items[tr->count - 1].ns > start ? tr->items[tr->count - 1].ns : start;
        if (attr_number(&attrs, A_INCOMPLETE, 1, 1) < 0) goto done;
    }
    if (tr->count) {
        state_name = enum_name(B.state_names, tr->items[terminal >= 0 ? terminal : tr->count - 1].state);
        if (state_name == NULL || attr_str(&attrs, A_STATE, state_name) < 0) goto done;
    }
    if (attr_str(&attrs, A_PRODUCER, B.producer) < 0) goto done;
    if (id_of(ID_TRACE, session, job, 0, trace) < 0 || id_of(ID_TASK, session, task, attempt, span_id) < 0) goto done;
    if (failed) {
        failure = PyObject_CallFunction(B.task_failure, "KNO", (unsigned long long)tr->items[terminal].ns,
                                        reader_text(p.error_message),
                                        error_type_name != NULL ? error_type_name : B.task_failed);
        if (failure == NULL || bytes_pair(failure, "task_failure") < 0) {
            failure = NULL;
            goto done;
        }
    }
    /* _span_head: ids, parent, name, kind INTERNAL, start and end */
    Py_ssize_t name_n = READER_N(name) ? READER_N(name) : 5 + 2 * READER_N(task);
    if (buf_reserve(&span, 64 + field_size(name_n)) < 0) goto done;
    char *w = span.data;
    w = put_id_field(w, 0x0a, trace, 16);
    w = put_id_field(w, 0x12, span_id, 8);
    w = put_id_field(w, 0x22, parent, 8);
    *w++ = 0x2a;
    w = put_varint(w, (uint64_t)name_n);
    if (READER_N(name)) {
        w = put(w, (const char *)name.p, READER_N(name));
    } else {
        static const char digits[] = "0123456789abcdef";
        w = put(w, "task ", 5);
        for (const uint8_t *q = task.p; q < task.end; q++) {
            *w++ = digits[*q >> 4];
            *w++ = digits[*q & 15];
        }
    }
    *w++ = 0x30;
    *w++ = 0x01;
    if (start) {
        *w++ = 0x39;
        w = put_fixed_bits(w, start, 8);
    }
    if (end) {
        *w++ = 0x41;
        w = put_fixed_bits(w, end, 8);
    }
    span.len = w - span.data;
    if (buf_reserve(&span, attrs.len) < 0) goto done;
    memcpy(span.data + span.len, attrs.data, (size_t)attrs.len);
    span.len += attrs.len;
    for (Py_ssize_t i = 0; i < tr->count; i++) { /* a span event per state; a terminal state reported again later left out */
        Transition t = tr->items[i];
        if (terminal >= 0 && t.state == tr->items[terminal].state && t.ns > tr->items[terminal].ns) continue;
        Py_CLEAR(made_event);
        PyObject *parts = state_event(t.state, &made_event);
        if (parts == NULL) goto done;
        PyObject *before = PyTuple_GET_ITEM(parts, 0), *after = PyTuple_GET_ITEM(parts, 1);
        if (buf_reserve(&span, PyBytes_GET_SIZE(before) + 8 + PyBytes_GET_SIZE(after)) < 0) goto done;
        w = put(span.data + span.len, PyBytes_AS_STRING(before), PyBytes_GET_SIZE(before));
        w = put_fixed_bits(w, t.ns, 8);
        span.len = put(w, PyBytes_AS_STRING(after), PyBytes_GET_SIZE(after)) - span.data;
    }
    if (failure != NULL && buf_bytes(&span, PyTuple_GET_ITEM(failure, 0)) < 0) goto done;
    if (READER_N(actor)) {
        uint8_t actor_trace[16], actor_span[16];
        Reader actor_job = READER_N(actor) == 16 ? (Reader){actor.end - 4, actor.end} : job;
        if (id_of(ID_TRACE, session, actor_job, 0, actor_trace) < 0 || id_of(ID_ACTOR, session, actor, 0, actor_span) < 0 ||
            put_link(&span, actor_trace, actor_span) < 0)
            goto done;
    }
    if (attempt > 0) {
        uint8_t previous[16];
        if (id_of(ID_TASK, session, task, attempt - 1, previous) < 0 || put_link(&span, trace, previous) < 0) goto done;
    }
    if (failure != NULL && buf_bytes(&span, PyTuple_GET_ITEM(failure, 1)) < 0) goto done;
    out = item_of(c, session, span.data, span.len, at);
done:
    Py_XDECREF(held);
    Py_XDECREF(type_name);
    Py_XDECREF(error_type_name);
    Py_XDECREF(state_name);
    Py_XDECREF(failure);
    Py_XDECREF(made_event);
    PyMem_Free(p.function_buf.data);
    PyMem_Free(attrs.data);
    PyMem_Free(span.data);
    return out;
}

/* RayEventsToOtel._emit: the entity leaves (its span into `spans`, counted). */
static int emit(Core *c, Entity *e, PyObject *spans) {
    Node *n = &e->node;
    table_remove(&c->open, n);
    c->open_bytes -= entity_size(e);
    if (e->waiting) {
        if (e->waiting_prev) e->waiting_prev->waiting_next = e->waiting_next;
        else c->waiting_first = e->waiting_next;
        if (e->waiting_next) e->waiting_next->waiting_prev = e->waiting_prev;
        else c->waiting_last = e->waiting_prev;
    }
    Key k = {n->kind, n->session, bytes_reader(n->id), n->attempt, n->hash};
    PyObject *wire = NULL, *key_bytes = NULL;
    Py_ssize_t at = 0;
    int complete = 0, ok = remember(c, &k, n->id) == 0;
    if (ok && n->kind == K_TASK) {
        wire = task_span(c, e, &complete, &at);
    } else if (ok) {
        PyObject *answer = PyObject_CallFunction(
            B.other_span, "OOOKONy#", B.kind_text[n->kind], n->session, n->id, (unsigned long long)e->first_ns,
            e->definition ? e->definition : Py_None, e->definition ? PyLong_FromLong(e->definition_type) : Py_NewRef(Py_None),
            e->lifecycle ? e->lifecycle : "", e->lifecycle_n);
        if (answer != NULL) {
            if (PyTuple_Check(answer) && PyTuple_GET_SIZE(answer) == 2 && PyBytes_Check(PyTuple_GET_ITEM(answer, 0))) {
                PyObject *span = PyTuple_GET_ITEM(answer, 0);
                wire = item_of(c, n->session, PyBytes_AS_STRING(span), PyBytes_GET_SIZE(span), &at);
                complete = PyObject_IsTrue(PyTuple_GET_ITEM(answer, 1)) == 1;
            } else {
                PyErr_SetString(PyExc_TypeError, "other_span must give (bytes, bool)");
            }
            Py_DECREF(answer);
        }
    }
    if (wire != NULL) {
        c->counts.spans[n->kind][complete]++;
        key_bytes = e->key_bytes != NULL ? Py_NewRef(e->key_bytes) : entity_key_bytes(e);
        PyObject *items[5] = {Py_NewRef(n->session), Py_NewRef(B.lifecycle_type[n->kind]), wire, key_bytes,
                              PyLong_FromSsize_t(at)};
        PyObject *item = new_tuple(B.span_type, 5, items);
        ok = item != NULL && PyList_Append(spans, item) == 0;
        Py_XDECREF(item);
    } else {
        ok = 0;
    }
    free_entity(n);
    return ok ? 0 : -1;
}

static int ready(const Entity *e) { return e->definition != NULL && (e->node.kind != K_TASK || e->running); }

/* _check_terminal: a terminal entity that is complete leaves; otherwise it starts its grace. */
static int check_terminal(Core *c, Entity *e, double now, PyObject *spans) {
    if (!e->terminal) return 0;
    if (ready(e)) return emit(c, e, spans);
    if (!e->waiting) {
        e->waiting = 1;
        e->terminal_at = now;
        e->waiting_prev = c->waiting_last;
        e->waiting_next = NULL;
        if (c->waiting_last) c->waiting_last->waiting_next = e;
        else c->waiting_first = e;
        c->waiting_last = e;
    }
    return 0;
}

static int evict_over_bounds(Core *c, PyObject *spans) {
    while (c->open.count > c->max_open_entities || (c->open_bytes > c->max_open_bytes && c->open.count > 1)) {
        c->counts.evicted[c->open.count > c->max_open_entities ? 0 : 1]++;
        if (emit(c, (Entity *)c->open.first, spans) < 0) return -1;
    }
    return 0;
}

/* _merge_lifecycle: a lifecycle piece appended (without its id); the entity's terminal and running
 * flags from its states. */
static int merge_lifecycle(Core *c, Entity *e, PyObject *payload) {
    Reader wire = bytes_reader(payload), piece = wire;
    Py_ssize_t id_n = PyBytes_GET_SIZE(e->node.id);
    if (0 < id_n && id_n < 128 && READER_N(wire) >= 2 + id_n && wire.p[0] == 0x0a && wire.p[1] == id_n &&
        memcmp(wire.p + 2, PyBytes_AS_STRING(e->node.id), (size_t)id_n) == 0)
        piece.p += 2 + id_n;
    Py_ssize_t n = READER_N(piece);
    if (n) {
        char *grown = PyMem_Realloc(e->lifecycle, (size_t)(e->lifecycle_n + n));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(grown + e->lifecycle_n, piece.p, (size_t)n);
        e->lifecycle = grown;
        e->lifecycle_n += n;
    }
    int kind = e->node.kind, read = read_transitions(wire, kind, &c->scratch);
    if (read < 0) return -1;
    PyObject *states = NULL;
    Py_ssize_t count = c->scratch.count;
    if (read == LEAVE) {
        states = PyObject_CallFunction(B.states_of, "OO", B.kind_text[kind], payload);
        if (states == NULL) return -1;
        if (!PyList_Check(states)) {
            Py_DECREF(states);
            PyErr_SetString(PyExc_TypeError, "states_of must give a list");
            return -1;
        }
        count = PyList_GET_SIZE(states);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t state = states != NULL ? (int32_t)PyLong_AsLong(PyList_GET_ITEM(states, i)) : c->scratch.items[i].state;
        if (states != NULL && PyErr_Occurred()) {
            Py_DECREF(states);
            return -1;
        }
        if (state_in(state, B.terminal[kind], B.n_terminal[kind])) e->terminal = 1;
        else if (kind == K_TASK && state_in(state, B.running, B.n_running)) e->running = 1;
    }
    Py_XDECREF(states);
    c->open_bytes += n;
    return 0;
}

/* _update: a piece into its entity (opened here if new). */
static Entity *update(Core *c, const Key *k, PyObject *head, double now) {
    PyObject *entity_id = PyTuple_GET_ITEM(head, 6), *event_type = PyTuple_GET_ITEM(head, 1);
    uint64_t time_ns = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(head, 3));
    long type = PyLong_AsLong(event_type);
    if (PyErr_Occurred()) return NULL;
    Entity *e = (Entity *)table_find(&c->open, k);
    if (e == NULL) {
        e = (Entity *)new_node(sizeof(Entity), k, entity_id);
        if (e == NULL) return NULL;
        if (table_add(&c->open, &e->node) < 0) {
            free_entity(&e->node);
            return NULL;
        }
        e->first_ns = time_ns;
        e->updated_at = now;
        c->open_bytes += entity_overhead;
    } else {
        if (time_ns < e->first_ns) e->first_ns = time_ns;
        e->updated_at = now;
        move_to_end(&c->open, &e->node);
    }
    PyObject *keeper = type >= 0 && type < MAX_TYPES ? B.definitions[type] : NULL;
    PyObject *payload = PyTuple_GET_ITEM(head, 9);
    if (keeper == NULL) {
        if (merge_lifecycle(c, e, payload) < 0) return NULL;
    } else if (e->definition == NULL) { /* the first one wins */
        PyObject *kept = keeper == Py_None ? Py_NewRef(payload) : PyObject_CallOneArg(keeper, payload);
        if (kept == NULL) return NULL;
        if (!PyBytes_Check(kept)) {
            Py_DECREF(kept);
            PyErr_SetString(PyExc_TypeError, "a definition's keeper must give bytes");
            return NULL;
        }
        e->definition = kept;
        e->definition_type = type;
        c->open_bytes += PyBytes_GET_SIZE(kept);
    }
    if (k->attempt > 0 && note_attempt(c, k->session, entity_id, k->attempt) < 0) return NULL;
    return e;
}

/* -- log records -------------------------------------------------------------------------------- */

/* log_records.record_fields(type, severity): (severity number, severity text, event name). */
static PyObject *record_fields(PyObject *event_type, PyObject *severity, PyObject **made) {
    long type = PyLong_AsLong(event_type), level = PyLong_AsLong(severity);
    if (PyErr_Occurred()) return NULL;
    int cached = type >= 0 && type < MAX_TYPES && level >= 0 && level < 8;
    if (cached && B.fields[type][level] != NULL) return B.fields[type][level];
    PyObject *fields = PyObject_CallFunctionObjArgs(B.record_fields, event_type, severity, NULL);
    if (fields == NULL) return NULL;
    if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != 3 || !PyUnicode_Check(PyTuple_GET_ITEM(fields, 1)) ||
        !PyUnicode_Check(PyTuple_GET_ITEM(fields, 2))) {
        Py_DECREF(fields);
        PyErr_SetString(PyExc_TypeError, "record_fields must give (int, str, str)");
        return NULL;
    }
    if (cached) B.fields[type][level] = fields;
    else *made = fields;
    return fields;
}

/* The event's log record (log_records.parts_log_record) with its span's context, as an item (`at`:
 * where the record starts). A new reference. */
static PyObject *event_record(Core *c, PyObject *parts, PyObject *head, int kind, Py_ssize_t *at) {
    PyObject *session = PyTuple_GET_ITEM(head, 2), *body = PyTuple_GET_ITEM(parts, 2);
    uint8_t trace[16], span[16];
    Py_ssize_t trace_n = 0, span_n = 0;
    if (kind != K_NONE) {
        PyObject *job = PyTuple_GET_ITEM(head, 8), *entity_id = PyTuple_GET_ITEM(head, 6);
        int64_t attempt = PyLong_AsLongLong(PyTuple_GET_ITEM(head, 7));
        int what = kind == K_TASK || kind == K_PROFILE ? ID_TASK : kind == K_ACTOR ? ID_ACTOR : ID_JOB;
        if (PyErr_Occurred() || !PyBytes_Check(job) || id_of(ID_TRACE, session, bytes_reader(job), 0, trace) < 0 ||
            id_of(what, session, bytes_reader(entity_id), attempt, span) < 0)
            return NULL;
        trace_n = 16, span_n = 8;
    }
    PyObject *observed = PyObject_CallNoArgs(c->observed);
    if (observed == NULL) return NULL;
    if (body == Py_None) { /* its body to walk (an item the compiled pass left to Python) */
        PyObject *source = PyTuple_GET_ITEM(parts, 4);
        PyObject *record = PyObject_CallFunction(B.parts_log_record, "OOOOy#y#N", head, body, PyTuple_GET_ITEM(parts, 3),
                                                 source != Py_None ? source : PyTuple_GET_ITEM(parts, 1), trace, trace_n,
                                                 span, span_n, observed);
        if (record != NULL && !PyBytes_Check(record)) {
            Py_CLEAR(record);
            PyErr_SetString(PyExc_TypeError, "parts_log_record must give bytes");
        }
        PyObject *item = record != NULL ? item_of(c, session, PyBytes_AS_STRING(record), PyBytes_GET_SIZE(record), at) : NULL;
        Py_XDECREF(record);
        return item;
    }
    PyObject *made = NULL, *attributes = PyTuple_GET_ITEM(parts, 3), *head_attributes = PyTuple_GET_ITEM(head, 10);
    PyObject *fields = record_fields(PyTuple_GET_ITEM(head, 1), PyTuple_GET_ITEM(head, 4), &made);
    LogRecordParts r;
    r.time_ns = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(head, 3));
    r.observed_ns = PyLong_AsUnsignedLongLong(observed);
    Py_DECREF(observed);
    if (fields == NULL || PyErr_Occurred()) goto fail;
    if (!PyBytes_Check(body) || !PyBytes_Check(attributes) || !PyBytes_Check(head_attributes)) {
        PyErr_SetString(PyExc_TypeError, "a record's body and attributes are bytes");
        goto fail;
    }
    r.severity = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(fields, 0));
    r.severity_text = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(fields, 1), &r.severity_n);
    r.event_name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(fields, 2), &r.event_n);
    if (PyErr_Occurred() || r.severity_text == NULL || r.event_name == NULL) goto fail;
    r.flags = 0;
    r.trace_id = (const char *)trace, r.trace_n = trace_n;
    r.span_id = (const char *)span, r.span_n = span_n;
    r.body = PyBytes_AS_STRING(body), r.body_n = PyBytes_GET_SIZE(body);
    r.attributes_n = PyBytes_GET_SIZE(attributes) + PyBytes_GET_SIZE(head_attributes);
    PyObject *envelope = envelope_of(c, session);
    char *w;
    PyObject *record = envelope != NULL || !PyErr_Occurred() ? new_item(envelope, log_record_size(&r), &w, at) : NULL;
    if (record == NULL) goto fail;
    w = put_log_record_head(w, &r);
    w = put(w, PyBytes_AS_STRING(attributes), PyBytes_GET_SIZE(attributes));
    w = put(w, PyBytes_AS_STRING(head_attributes), PyBytes_GET_SIZE(head_attributes));
    put_log_record_tail(w, &r);
    Py_XDECREF(made);
    return record;
fail:
    Py_XDECREF(made);
    return NULL;
}

/* -- the core ----------------------------------------------------------------------------------- */

static int now_of(Core *c, double *now) {
    PyObject *value = PyObject_CallNoArgs(c->clock);
    if (value == NULL) return -1;
    *now = PyFloat_AsDouble(value);
    Py_DECREF(value);
    return *now == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static void count_type(Core *c, PyObject *event_type) {
    long type = PyLong_AsLong(event_type);
    if (!PyErr_Occurred() && type >= 0 && type < MAX_TYPES) {
        c->counts.types[type]++;
        return;
    }
    PyErr_Clear();
    if (c->counts.other_types == NULL && (c->counts.other_types = PyDict_New()) == NULL) return;
    PyObject *count = PyDict_GetItemWithError(c->counts.other_types, event_type);
    PyObject *more = PyLong_FromSsize_t((count != NULL ? PyLong_AsSsize_t(count) : 0) + 1);
    if (more != NULL) PyDict_SetItem(c->counts.other_types, event_type, more);
    Py_XDECREF(more);
}

static int put_count(PyObject *dict, PyObject *key, Py_ssize_t n) {
    if (key == NULL) return -1;
    PyObject *value = PyLong_FromSsize_t(n);
    int failed = value == NULL || PyDict_SetItem(dict, key, value) < 0;
    Py_XDECREF(value);
    Py_DECREF(key);
    return failed ? -1 : 0;
}

/* The call's counts as (duplicates, {kind: late}, {event type: events}, {(kind, complete): spans},
 * {reason: evicted}), and zeroed. */
static PyObject *take_counts(Core *c) {
    Counts *k = &c->counts;
    PyObject *late = PyDict_New(), *types = k->other_types ? k->other_types : PyDict_New(), *spans = PyDict_New(),
             *evicted = PyDict_New();
    k->other_types = NULL;
    int failed = late == NULL || types == NULL || spans == NULL || evicted == NULL;
    for (int kind = K_TASK; kind < SPAN_KINDS && !failed; kind++) {
        if (k->late[kind]) failed |= put_count(late, Py_NewRef(B.kind_text[kind]), k->late[kind]) < 0;
        for (int complete = 0; complete < 2 && !failed; complete++)
            if (k->spans[kind][complete])
                failed |= put_count(spans, Py_BuildValue("(OO)", B.kind_text[kind], complete ? Py_True : Py_False),
                                    k->spans[kind][complete]) < 0;
    }
    for (int t = 0; t < MAX_TYPES && !failed; t++)
        if (k->types[t]) failed |= put_count(types, PyLong_FromLong(t), k->types[t]) < 0;
    static const char *const reasons[2] = {"entities", "bytes"};
    for (int r = 0; r < 2 && !failed; r++)
        if (k->evicted[r]) failed |= put_count(evicted, PyUnicode_FromString(reasons[r]), k->evicted[r]) < 0;
    PyObject *out = failed ? NULL : Py_BuildValue("(nOOOO)", k->duplicates, late, types, spans, evicted);
    Py_XDECREF(late);
    Py_XDECREF(types);
    Py_XDECREF(spans);
    Py_XDECREF(evicted);
    memset(k, 0, sizeof(*k));
    return out;
}

static int check_head(PyObject *parts, PyObject **head) {
    if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) < 5) goto bad;
    *head = PyTuple_GET_ITEM(parts, 0);
    PyObject *h = *head;
    if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 11 || !PyBytes_Check(PyTuple_GET_ITEM(h, 0)) ||
        !PyUnicode_Check(PyTuple_GET_ITEM(h, 2)) || !PyBytes_Check(PyTuple_GET_ITEM(h, 6)) ||
        !PyBytes_Check(PyTuple_GET_ITEM(h, 9)) || !PyLong_Check(PyTuple_GET_ITEM(h, 1)) ||
        !PyLong_Check(PyTuple_GET_ITEM(h, 7)))
        goto bad;
    return 0;
bad:
    PyErr_SetString(PyExc_TypeError, "add() takes a list of EventParts");
    return -1;
}

/* add(events, logs, assemble) -> (spans, logs, taken, counts): RayEventsToOtel.add_parts. */
static PyObject *core_add(Core *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "add(events: list[EventParts], logs: bool, assemble: bool)");
        return NULL;
    }
    int logs = PyObject_IsTrue(args[1]), assemble = PyObject_IsTrue(args[2]);
    double now;
    if (logs < 0 || assemble < 0 || !B.bound || now_of(c, &now) < 0) {
        if (!B.bound) PyErr_SetString(PyExc_RuntimeError, "bind() first");
        return NULL;
    }
    PyObject *events = args[0], *spans = PyList_New(0), *records = PyList_New(0), *taken = PyList_New(0), *out = NULL;
    Entity **touched = NULL;
    Py_ssize_t n_touched = 0, room = 0;
    uint64_t call = ++c->calls;
    if (spans == NULL || records == NULL || taken == NULL) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *parts = PyList_GET_ITEM(events, i), *head;
        if (check_head(parts, &head) < 0) goto done;
        PyObject *event_id = PyTuple_GET_ITEM(head, 0);
        if (PyBytes_GET_SIZE(event_id)) {
            Key k;
            if (make_key(&k, 0, NULL, bytes_reader(event_id), 0) < 0) goto done;
            if (table_find(&c->seen, &k) != NULL) {
                c->counts.duplicates++;
                continue;
            }
            Node *n = new_node(sizeof(Node), &k, event_id);
            if (n == NULL || table_add(&c->seen, n) < 0) {
                if (n) free_node(n);
                goto done;
            }
            if (c->seen.count > c->dedup_window) {
                Node *old = c->seen.first;
                table_remove(&c->seen, old);
                free_node(old);
            }
        }
        count_type(c, PyTuple_GET_ITEM(head, 1));
        int kind = kind_of(PyTuple_GET_ITEM(head, 5));
        if (kind < 0) {
            PyErr_SetString(PyExc_TypeError, "an EventHead's kind is a str");
            goto done;
        }
        if (logs) {
            Py_ssize_t at = 0;
            PyObject *record = event_record(c, parts, head, kind, &at);
            if (record == NULL) goto done;
            PyObject *items[4] = {Py_NewRef(PyTuple_GET_ITEM(head, 2)), Py_NewRef(PyTuple_GET_ITEM(head, 1)), record,
                                  PyLong_FromSsize_t(at)};
            PyObject *item = new_tuple(B.log_type, 4, items);
            if (item == NULL || PyList_Append(records, item) < 0) {
                Py_XDECREF(item);
                goto done;
            }
            Py_DECREF(item);
        }
        if (kind < K_TASK || kind > K_JOB || !assemble) continue; /* no span: nodes, workers, profiles... */
        Key k;
        int64_t attempt = PyLong_AsLongLong(PyTuple_GET_ITEM(head, 7));
        if (PyErr_Occurred() || make_key(&k, kind, PyTuple_GET_ITEM(head, 2), bytes_reader(PyTuple_GET_ITEM(head, 6)), attempt) < 0)
            goto done;
        if (table_find(&c->emitted, &k) != NULL) {
            c->counts.late[kind]++;
            continue;
        }
        Entity *e = update(c, &k, head, now);
        if (e == NULL) goto done;
        if (e->touched != call) {
            e->touched = call;
            if (n_touched == room) {
                room = room ? 2 * room : 64;
                Entity **grown = PyMem_Realloc(touched, sizeof(Entity *) * (size_t)room);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                touched = grown;
            }
            touched[n_touched++] = e;
            Py_XSETREF(e->key_bytes, entity_key_bytes(e));
            if (e->key_bytes == NULL) goto done;
        }
        PyObject *pair = PyTuple_Pack(2, e->key_bytes, parts);
        if (pair == NULL || PyList_Append(taken, pair) < 0) {
            Py_XDECREF(pair);
            goto done;
        }
        Py_DECREF(pair);
    }
    /* Readiness is judged once the whole batch is in: the pieces of one POST arrive together. */
    for (Py_ssize_t i = 0; i < n_touched; i++) Py_CLEAR(touched[i]->key_bytes);
    for (Py_ssize_t i = 0; i < n_touched; i++)
        if (check_terminal(c, touched[i], now, spans) < 0) {
            n_touched = 0;
            goto done;
        }
    n_touched = 0;
    if (evict_over_bounds(c, spans) < 0) goto done;
    PyObject *counts = take_counts(c);
    if (counts != NULL) out = PyTuple_Pack(4, spans, records, taken, counts);
    Py_XDECREF(counts);
done:
    for (Py_ssize_t i = 0; i < n_touched; i++) Py_CLEAR(touched[i]->key_bytes);
    PyMem_Free(touched);
    Py_XDECREF(spans);
    Py_XDECREF(records);
    Py_XDECREF(taken);
    if (out == NULL) memset(&c->counts, 0, sizeof(c->counts)); /* what was counted is lost with the call */
    return out;
}

static PyObject *spans_and_counts(Core *c, PyObject *spans) {
    PyObject *counts = take_counts(c), *out = counts != NULL ? PyTuple_Pack(2, spans, counts) : NULL;
    Py_XDECREF(counts);
    Py_DECREF(spans);
    return out;
}

/* expire() -> (spans, counts): spans whose grace passed, and open entities past their TTL. */
static PyObject *core_expire(Core *c, PyObject *unused) {
    (void)unused;
    double now;
    if (now_of(c, &now) < 0) return NULL;
    PyObject *spans = PyList_New(0);
    if (spans == NULL) return NULL;
    while (c->waiting_first != NULL && !(now - c->waiting_first->terminal_at < c->terminal_grace_s))
        if (emit(c, c->waiting_first, spans) < 0) goto fail;
    while (c->open.first != NULL && !(now - ((Entity *)c->open.first)->updated_at < c->entity_ttl_s))
        if (emit(c, (Entity *)c->open.first, spans) < 0) goto fail;
    return spans_and_counts(c, spans);
fail:
    Py_DECREF(spans);
    memset(&c->counts, 0, sizeof(c->counts));
    return NULL;
}

/* flush() -> (spans, counts): everything still open, as it stands. */
static PyObject *core_flush(Core *c, PyObject *unused) {
    (void)unused;
    PyObject *spans = PyList_New(0);
    if (spans == NULL) return NULL;
    while (c->open.first != NULL)
        if (emit(c, (Entity *)c->open.first, spans) < 0) {
            Py_DECREF(spans);
            memset(&c->counts, 0, sizeof(c->counts));
            return NULL;
        }
    return spans_and_counts(c, spans);
}

/* remember_emitted(keys): entities whose span a previous run emitted, (kind, session, id, attempt). */
static PyObject *core_remember_emitted(Core *c, PyObject *keys) {
    PyObject *iterator = PyObject_GetIter(keys), *key;
    if (iterator == NULL) return NULL;
    while ((key = PyIter_Next(iterator)) != NULL) {
        int failed = !PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 4 || !PyUnicode_Check(PyTuple_GET_ITEM(key, 1)) ||
                     !PyBytes_Check(PyTuple_GET_ITEM(key, 2));
        int kind = failed ? -1 : kind_of(PyTuple_GET_ITEM(key, 0));
        int64_t attempt = failed ? 0 : PyLong_AsLongLong(PyTuple_GET_ITEM(key, 3));
        Key k;
        if (failed || kind < 0) PyErr_SetString(PyExc_TypeError, "a key is (kind, session, id, attempt)");
        failed = failed || kind < 0 || PyErr_Occurred() ||
                 make_key(&k, kind, PyTuple_GET_ITEM(key, 1), bytes_reader(PyTuple_GET_ITEM(key, 2)), attempt) < 0 ||
                 remember(c, &k, PyTuple_GET_ITEM(key, 2)) < 0;
        Py_DECREF(key);
        if (failed) {
            Py_DECREF(iterator);
            return NULL;
        }
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"max_open_entities", "max_open_bytes",    "entity_ttl_s", "terminal_grace_s",
                            "dedup_window",      "clock",             "observed_clock_ns", "envelope", NULL};
    Py_ssize_t max_open_entities, dedup_window;
    long long max_open_bytes;
    double ttl, grace;
    PyObject *clock, *observed, *envelope = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nLddnOO|O", names, &max_open_entities, &max_open_bytes, &ttl,
                                     &grace, &dedup_window, &clock, &observed, &envelope))
        return NULL;
    Core *c = (Core *)type->tp_alloc(type, 0);
    if (c == NULL) return NULL;
    c->max_open_entities = max_open_entities;
    c->max_open_bytes = max_open_bytes;
    c->entity_ttl_s = ttl;
    c->terminal_grace_s = grace;
    c->dedup_window = dedup_window;
    c->clock = Py_NewRef(clock);
    c->observed = Py_NewRef(observed);
    c->envelope = envelope != Py_None ? Py_NewRef(envelope) : NULL;
    return (PyObject *)c;
}

static int core_traverse(Core *c, visitproc visit, void *arg) {
    Py_VISIT(c->clock);
    Py_VISIT(c->observed);
    Py_VISIT(c->envelope);
    return 0;
}

static int core_clear(Core *c) {
    Py_CLEAR(c->clock);
    Py_CLEAR(c->observed);
    Py_CLEAR(c->envelope);
    Py_CLEAR(c->envelope_session);
    Py_CLEAR(c->envelope_parts);
    return 0;
}

static void core_dealloc(Core *c) {
    PyObject_GC_UnTrack(c);
    core_clear(c);
    clear_table(&c->open, free_entity);
    clear_table(&c->seen, free_node);
    clear_table(&c->emitted, free_node);
    clear_table(&c->attempts, free_node);
    PyMem_Free(c->scratch.items);
    Py_XDECREF(c->counts.other_types);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *core_open_entities(Core *c, void *unused) {
    (void)unused;
    return PyLong_FromSsize_t(c->open.count);
}

static PyObject *core_open_bytes(Core *c, void *unused) {
    (void)unused;
    return PyLong_FromLongLong(c->open_bytes);
}

static PyMethodDef core_methods[] = {
    {"add", (PyCFunction)(void (*)(void))core_add, METH_FASTCALL,
     "add(events, logs, assemble) -> (spans, logs, taken, counts)."},
    {"expire", (PyCFunction)core_expire, METH_NOARGS, "expire() -> (spans, counts)."},
    {"flush", (PyCFunction)core_flush, METH_NOARGS, "flush() -> (spans, counts)."},
    {"remember_emitted", (PyCFunction)core_remember_emitted, METH_O, "remember_emitted(keys)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef core_getset[] = {
    {"open_entities", (getter)core_open_entities, NULL, "open entities", NULL},
    {"open_bytes", (getter)core_open_bytes, NULL, "what the open entities hold", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ray_otel_events.native._entity_spans.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "RayEventsToOtel's state and per-event work, compiled.",
    .tp_new = core_new,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
};

/* -- routing ------------------------------------------------------------------------------------ */

/* route(events, workers) -> [[the EventParts worker 0 owns], ...]: each event with the worker that
 * owns its trace, the first 8 bytes of from_ray_events.head_routing_key (its trace id, or its
 * event id when it has none), big-endian, modulo `workers`; in the order given. */
static PyObject *route(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyLong_Check(args[1]) || !B.bound) {
        PyErr_SetString(PyExc_TypeError, "route(events: list[EventParts], workers: int), after bind()");
        return NULL;
    }
    Py_ssize_t workers = PyLong_AsSsize_t(args[1]);
    if (workers <= 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "workers must be > 0");
        return NULL;
    }
    PyObject *groups = PyList_New(workers);
    for (Py_ssize_t w = 0; groups != NULL && w < workers; w++) {
        PyObject *group = PyList_New(0);
        if (group == NULL) Py_CLEAR(groups);
        else PyList_SET_ITEM(groups, w, group);
    }
    for (Py_ssize_t i = 0; groups != NULL && i < PyList_GET_SIZE(args[0]); i++) {
        PyObject *parts = PyList_GET_ITEM(args[0], i), *head;
        uint8_t trace[16];
        Reader key;
        int kind = check_head(parts, &head) < 0 ? -1 : kind_of(PyTuple_GET_ITEM(head, 5));
        if (kind > K_NONE) {
            PyObject *job = PyTuple_GET_ITEM(head, 8);
            if (!PyBytes_Check(job) || id_of(ID_TRACE, PyTuple_GET_ITEM(head, 2), bytes_reader(job), 0, trace) < 0) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "an EventHead's job is bytes");
                kind = -1;
            }
            key = span_of_bytes(trace, 16);
        } else {
            key = kind == K_NONE ? bytes_reader(PyTuple_GET_ITEM(head, 0)) : NO_READER;
        }
        if (kind < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "an EventHead's kind is a str");
            Py_CLEAR(groups);
            break;
        }
        uint64_t value = 0;
        for (const uint8_t *p = key.p; p < key.end && p < key.p + 8; p++) value = value << 8 | *p;
        if (PyList_Append(PyList_GET_ITEM(groups, (Py_ssize_t)(value % (uint64_t)workers)), parts) < 0) Py_CLEAR(groups);
    }
    return groups;
}

/* -- bind --------------------------------------------------------------------------------------- */

static int int32_list(PyObject *seq, int32_t *out, int room, int *n) {
    PyObject *fast = PySequence_Fast(seq, "a sequence of states");
    if (fast == NULL) return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    if (count > room) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "too many states");
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) out[i] = (int32_t)PyLong_AsLong(PySequence_Fast_ITEMS(fast)[i]);
    Py_DECREF(fast);
    *n = (int)count;
    return PyErr_Occurred() ? -1 : 0;
}

static void unbind(void) {
    PyObject **refs[] = {&B.producer,   &B.task_failed, &B.task_type_names, &B.state_names,    &B.error_type_names, &B.state_event,
                         &B.transitions_of, &B.states_of,   &B.task_parts_of,  &B.task_failure,     &B.other_span,
                         &B.record_fields,  &B.parts_log_record};
    for (size_t i = 0; i < sizeof refs / sizeof *refs; i++) Py_CLEAR(*refs[i]);
    for (int i = 0; i < 5; i++) Py_CLEAR(B.kind_text[i]);
    for (int i = 0; i < SPAN_KINDS; i++) Py_CLEAR(B.lifecycle_type[i]);
    for (int i = 0; i < MAX_TYPES; i++) Py_CLEAR(B.definitions[i]);
    for (int i = 0; i < N_KEYS; i++) Py_CLEAR(B.keys[i]);
    for (int i = 0; i < 64; i++) Py_CLEAR(B.state_events[i]);
    for (int t = 0; t < MAX_TYPES; t++)
        for (int s = 0; s < 8; s++) Py_CLEAR(B.fields[t][s]);
    Py_CLEAR(B.span_type);
    Py_CLEAR(B.log_type);
    Py_CLEAR(task_parts_type);
    memset(&B, 0, sizeof B);
    memset(ray_field, 0, sizeof ray_field);
}

/* What bind() reads of its binding (from_ray_events._CoreBinding), by attribute name. kinds: ("task",
 * "actor", "job", "profile"); lifecycle_types, terminal_states: per span kind (task, actor, job);
 * definition_keepers: {definition event type: keeper or None}; driver_task, actor_creation_task:
 * TaskType numbers; failed_state: TaskStatus FAILED; span_keys: the task span's attribute names,
 * in this module's A_ order; *_names: {number: name}; the callables as Bound describes them;
 * span_type, log_type, task_parts_type: EmittedSpan, EmittedLog, _TaskParts; ray_fields: {full
 * name: number} of every name in RAY_FIELDS, from the descriptors. */
#define BINDING_NAMES(X)                                                                                      \
    X(KINDS, "kinds") X(ENTITY_OVERHEAD, "entity_overhead") X(LIFECYCLE_TYPES, "lifecycle_types")            \
    X(TERMINAL_STATES, "terminal_states") X(RUNNING_STATES, "running_states")                                \
    X(DEFINITION_KEEPERS, "definition_keepers") X(TASK_DEFINITION_TYPE, "task_definition_type")              \
    X(DRIVER_TASK, "driver_task") X(ACTOR_CREATION_TASK, "actor_creation_task") X(FAILED_STATE, "failed_state") \
    X(SPAN_KEYS, "span_keys") X(PRODUCER, "producer") X(TASK_TYPE_NAMES, "task_type_names")                  \
    X(STATE_NAMES, "state_names") X(ERROR_TYPE_NAMES, "error_type_names") X(STATE_EVENT, "state_event")      \
    X(TRANSITIONS_OF, "transitions_of") X(STATES_OF, "states_of") X(TASK_PARTS_OF, "task_parts_of")          \
    X(TASK_FAILURE, "task_failure") X(OTHER_SPAN, "other_span") X(RECORD_FIELDS, "record_fields")            \
    X(PARTS_LOG_RECORD, "parts_log_record") X(SPAN_TYPE, "span_type") X(LOG_TYPE, "log_type")                \
    X(TASK_PARTS_TYPE, "task_parts_type") X(RAY_FIELDS, "ray_fields")
#define BINDING_ENUM(id, name) BIND_##id,
#define BINDING_NAME(id, name) name,
enum { BINDING_NAMES(BINDING_ENUM) N_BINDING };
static const char *const binding_names[N_BINDING] = {BINDING_NAMES(BINDING_NAME)};

/* Each of _TaskParts' fields (`type._fields`) matched to a part here, by name. */
static int bind_task_parts(PyObject *type) {
    PyObject *names = NULL;
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) ||
        (names = PyObject_GetAttrString(type, "_fields")) == NULL || !PyTuple_Check(names) ||
        PyTuple_GET_SIZE(names) != N_PARTS) {
        Py_XDECREF(names);
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "task_parts_type is a named tuple of a task's parts");
        return -1;
    }
    for (int i = 0; i < N_PARTS; i++) {
        task_part_at[i] = -1;
        for (Py_ssize_t j = 0; j < N_PARTS && task_part_at[i] < 0; j++) {
            PyObject *name = PyTuple_GET_ITEM(names, j);
            if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, task_part_names[i]) == 0)
                task_part_at[i] = j;
        }
        if (task_part_at[i] < 0) {
            PyErr_Format(PyExc_ValueError, "task_parts_type has no field %s", task_part_names[i]);
            Py_DECREF(names);
            return -1;
        }
    }
    Py_DECREF(names);
    task_parts_type = (PyTypeObject *)Py_NewRef(type);
    return 0;
}

/* bind(binding): what the core reads and calls, each attribute of `binding` by name (BINDING_NAMES). */
static PyObject *bind(PyObject *module, PyObject *binding) {
    (void)module;
    unbind();
    PyObject *a[N_BINDING] = {NULL};
    for (int i = 0; i < N_BINDING; i++)
        if ((a[i] = PyObject_GetAttrString(binding, binding_names[i])) == NULL) goto fail;
    PyObject *kinds = a[BIND_KINDS], *lifecycle_types = a[BIND_LIFECYCLE_TYPES], *terminal = a[BIND_TERMINAL_STATES];
    PyObject *definitions = a[BIND_DEFINITION_KEEPERS], *keys = a[BIND_SPAN_KEYS];
    if (!PyTuple_Check(kinds) || PyTuple_GET_SIZE(kinds) != 4 || !PyTuple_Check(lifecycle_types) ||
        PyTuple_GET_SIZE(lifecycle_types) != 3 || !PyTuple_Check(terminal) || PyTuple_GET_SIZE(terminal) != 3 ||
        !PyDict_Check(definitions) || !PyTuple_Check(keys) || PyTuple_GET_SIZE(keys) != N_KEYS ||
        !PyUnicode_Check(a[BIND_PRODUCER])) {
        PyErr_SetString(PyExc_TypeError, "bind: attributes of the wrong shape");
        goto fail;
    }
    if (bind_ray_fields(a[BIND_RAY_FIELDS]) < 0 || bind_task_parts(a[BIND_TASK_PARTS_TYPE]) < 0) goto fail;
    B.kind_text[K_NONE] = PyUnicode_FromString("");
    if (B.kind_text[K_NONE] == NULL) goto fail;
    for (int k = 0; k < 4; k++) {
        PyObject *text = PyTuple_GET_ITEM(kinds, k);
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "kinds are str");
            goto fail;
        }
        B.kind_text[K_TASK + k] = Py_NewRef(text);
    }
    entity_overhead = PyLong_AsLong(a[BIND_ENTITY_OVERHEAD]);
    for (int k = 0; k < 3; k++) {
        B.lifecycle_type[K_TASK + k] = Py_NewRef(PyTuple_GET_ITEM(lifecycle_types, k));
        if (int32_list(PyTuple_GET_ITEM(terminal, k), B.terminal[K_TASK + k], MAX_STATES, &B.n_terminal[K_TASK + k]) < 0)
            goto fail;
    }
    if (int32_list(a[BIND_RUNNING_STATES], B.running, MAX_STATES, &B.n_running) < 0) goto fail;
    PyObject *type, *keeper;
    Py_ssize_t pos = 0;
    while (PyDict_Next(definitions, &pos, &type, &keeper)) {
        long t = PyLong_AsLong(type);
        if (t < 0 || t >= MAX_TYPES) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "definition types are below 64");
            goto fail;
        }
        Py_XSETREF(B.definitions[t], Py_NewRef(keeper));
    }
    B.task_definition_type = PyLong_AsLong(a[BIND_TASK_DEFINITION_TYPE]);
    B.driver_task = (int32_t)PyLong_AsLong(a[BIND_DRIVER_TASK]);
    B.actor_creation_task = (int32_t)PyLong_AsLong(a[BIND_ACTOR_CREATION_TASK]);
    B.failed = (int32_t)PyLong_AsLong(a[BIND_FAILED_STATE]);
    if (PyErr_Occurred()) goto fail;
    for (int i = 0; i < N_KEYS; i++) {
        Py_ssize_t n;
        const char *name = PyUnicode_Check(PyTuple_GET_ITEM(keys, i)) ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(keys, i), &n) : NULL;
        if (name == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "keys are str");
            goto fail;
        }
        B.keys[i] = PyBytes_FromStringAndSize(NULL, field_size(n));
        if (B.keys[i] == NULL) goto fail;
        put_field(PyBytes_AS_STRING(B.keys[i]), 0x0a, name, n);
    }
    B.producer = Py_NewRef(a[BIND_PRODUCER]);
    B.task_failed = PyUnicode_FromString("TASK_FAILED");
    if (B.task_failed == NULL) goto fail;
    PyObject **name_tables[3] = {&B.task_type_names, &B.state_names, &B.error_type_names};
    int name_at[3] = {BIND_TASK_TYPE_NAMES, BIND_STATE_NAMES, BIND_ERROR_TYPE_NAMES};
    for (int i = 0; i < 3; i++) {
        if (!PyDict_Check(a[name_at[i]])) {
            PyErr_SetString(PyExc_TypeError, "names are dicts");
            goto fail;
        }
        *name_tables[i] = Py_NewRef(a[name_at[i]]);
    }
    PyObject **fns[8] = {&B.state_event,  &B.transitions_of, &B.states_of,     &B.task_parts_of,
                         &B.task_failure, &B.other_span,     &B.record_fields, &B.parts_log_record};
    for (int i = 0; i < 8; i++) {
        if (!PyCallable_Check(a[BIND_STATE_EVENT + i])) {
            PyErr_Format(PyExc_TypeError, "%s is callable", binding_names[BIND_STATE_EVENT + i]);
            goto fail;
        }
        *fns[i] = Py_NewRef(a[BIND_STATE_EVENT + i]);
    }
    for (int i = BIND_SPAN_TYPE; i <= BIND_LOG_TYPE; i++) {
        if (!PyType_Check(a[i]) || !PyType_IsSubtype((PyTypeObject *)a[i], &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "types are tuple subclasses");
            goto fail;
        }
    }
    B.span_type = (PyTypeObject *)Py_NewRef(a[BIND_SPAN_TYPE]);
    B.log_type = (PyTypeObject *)Py_NewRef(a[BIND_LOG_TYPE]);
    B.bound = 1;
    for (int i = 0; i < N_BINDING; i++) Py_DECREF(a[i]);
    Py_RETURN_NONE;
fail:
    for (int i = 0; i < N_BINDING; i++) Py_XDECREF(a[i]);
    unbind();
    return NULL;
}

static PyMethodDef methods[] = {
    {"transitions", (PyCFunction)(void (*)(void))transitions, METH_FASTCALL,
     "transitions(wire, kind) -> [(time ns, state, None), ...] sorted, or None."},
    {"task_parts", (PyCFunction)(void (*)(void))task_parts, METH_FASTCALL,
     "task_parts(definition, actor_task, lifecycle) -> the fields a task's span reads, or None."},
    {"digest", (PyCFunction)(void (*)(void))digest, METH_FASTCALL, "digest(what, session, ident, attempt) -> an id."},
    {"route", (PyCFunction)(void (*)(void))route, METH_FASTCALL, "route(events, workers) -> the events by owner."},
    {"bind", bind, METH_O, "bind(binding): what the core reads and calls, by attribute name."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_entity_spans", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__entity_spans(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Core", (PyObject *)&CoreType) < 0 || export_ray_fields(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
