/* The store's hot steps of state_merge.py, compiled: `prepare` (where an event goes), the task
 * folds (`_task_definition`, `_task_lifecycle` with `_transitions`) and `row_columns` (a row's
 * JSON and indexed values). Each reads only the shapes Ray prints (canonical padded base64 ids,
 * `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` times, JSON ints, strings, objects) and checks every input
 * before it changes anything; anything else (an odd value, a bad id, a time in another form) goes,
 * untouched, to the Python function bound by `bind`, which decides it or raises what it raises.
 * So the two paths cannot drift apart. Optional: without a C compiler the store folds in Python. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "event_hash.h"
#include "fold_names.h"
#include "ray_json_values.h"

/* Bound by `bind`: the Python twins, and what they read. */
static PyObject *py_prepare, *py_task_definition, *py_task_lifecycle, *py_row_columns;
static PyObject *routes;       /* event type -> (payload key, resource, id key, attempt key, fold) */
static PyTypeObject *piece_type, *prepared_type;
static PyObject *index_plan;   /* resource -> ((row field or None, default), ...) */
static PyObject *dumps;        /* orjson.dumps */

static PyObject *s_empty, *s_zero;

/* -- values ----------------------------------------------------------------------------------- */

/* Hex text of a canonical padded base64 string; NULL with no error set for any other string (the
 * Python `hex_id` decides it). An empty value is "" as in Python. */
static PyObject *hex_of_base64(PyObject *value) {
    if (value == NULL || value == Py_None) return Py_NewRef(s_empty);
    if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value)) return NULL;
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    if (n == 0) return Py_NewRef(s_empty);
    const char *s = (const char *)PyUnicode_1BYTE_DATA(value);
    Py_ssize_t bytes = base64_decoded_size(s, n);
    if (bytes < 0) return NULL;
    PyObject *out = PyUnicode_New(bytes * 2, 127);
    if (out == NULL) return NULL;
    put_hex_of_base64((char *)PyUnicode_1BYTE_DATA(out), s, n);
    return out;
}

/* `_nil_to_none`: an empty or all-`f` id is None. Steals `hexed`. */
static PyObject *nil_to_none(PyObject *hexed) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(hexed);
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(hexed);
    Py_ssize_t i = 0;
    while (i < n && s[i] == 'f') i++;
    if (i == n) {
        Py_DECREF(hexed);
        Py_RETURN_NONE;
    }
    return hexed;
}

/* `rfc3339_ns` for what Ray prints (`2026-11-22T01:37:30.525422162Z`) or an empty value: 0 and
 * `*ns` set; -1 for any other form (Python decides it). */
static int ray_time_ns(PyObject *value, int64_t *ns) {
    if (value == NULL || value == Py_None) {
        *ns = 0;
        return 0;
    }
    if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value)) return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(value);
    if (n == 0) {
        *ns = 0;
        return 0;
    }
    return ray_time_ns_of(PyUnicode_1BYTE_DATA(value), n, ns);
}

/* A borrowed `d[key]`, or NULL (error set only if the lookup failed). */
static inline PyObject *get(PyObject *d, PyObject *key) { return PyDict_GetItemWithError(d, key); }

/* The value of `d.get(key) or fallback`-style reads: -1 on an error. */
#define LOOKUP(target, d, key)                  \
    do {                                        \
        target = get(d, key);                   \
        if (target == NULL && PyErr_Occurred()) \
            goto fail;                          \
    } while (0)

/* `d.get(key)` if truthy, as Python's `if d.get(key):` reads it: `*value` (borrowed) is the value,
 * or NULL when missing or falsy; -1 on an error, else 0. */
static int truthy(PyObject *d, PyObject *key, PyObject **value) {
    *value = get(d, key);
    if (*value == NULL) return PyErr_Occurred() ? -1 : 0;
    int truth = PyObject_IsTrue(*value);
    if (truth <= 0) *value = NULL;
    return truth < 0 ? -1 : 0;
}

static PyObject *call2(PyObject *func, PyObject *a, PyObject *b) {
    PyObject *args[2] = {a, b};
    return PyObject_Vectorcall(func, args, 2, NULL);
}

/* The module's functions before `bind`: an error, not a crash. */
static PyObject *unbound(void) {
    PyErr_SetString(PyExc_RuntimeError, "_state_fold: bind_names and bind first");
    return NULL;
}

/* -- prepare ---------------------------------------------------------------------------------- */

static PyObject *new_tuple_of(PyTypeObject *type, Py_ssize_t n, PyObject **items) {
    PyObject *out = type->tp_alloc(type, n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(out, i, Py_NewRef(items[i]));
    return out;
}

static PyObject *prepare(PyObject *self, PyObject *event) {
    (void)self;
    PyObject *event_id, *event_type, *route, *body, *id, *attempt, *session;
    if (routes == NULL) return unbound();
    if (!PyDict_CheckExact(event)) goto python;
    LOOKUP(event_id, event, KEY(event_id));
    LOOKUP(event_type, event, KEY(event_type));
    if (event_id == NULL || !PyUnicode_CheckExact(event_id) || PyUnicode_GET_LENGTH(event_id) == 0 ||
        event_type == NULL || !PyUnicode_CheckExact(event_type))
        goto python;
    LOOKUP(route, routes, event_type);
    if (route == NULL) goto python;
    LOOKUP(body, event, PyTuple_GET_ITEM(route, 0));
    if (body == NULL || !PyDict_CheckExact(body)) goto python;
    LOOKUP(id, body, PyTuple_GET_ITEM(route, 2));
    attempt = s_zero;
    if (PyTuple_GET_ITEM(route, 3) != Py_None) {
        LOOKUP(attempt, body, PyTuple_GET_ITEM(route, 3));
        if (attempt == NULL) attempt = s_zero;
        else if (!PyLong_CheckExact(attempt)) goto python;
        int overflow;
        (void)PyLong_AsLongLongAndOverflow(attempt, &overflow);
        if (overflow) goto python; /* Python names it */
    }
    LOOKUP(session, event, KEY(session_name));
    if (session == NULL) session = s_empty;
    else if (!PyUnicode_CheckExact(session)) goto python;
    if (id == NULL || !PyUnicode_CheckExact(id) || PyUnicode_GET_LENGTH(id) == 0) goto python;
    PyObject *entity = hex_of_base64(id);
    if (entity == NULL) {
        if (PyErr_Occurred()) return NULL;
        goto python;
    }
    PyObject *resource = PyTuple_GET_ITEM(route, 1);
    PyObject *key = PyTuple_Pack(4, resource, entity, attempt, session);
    PyObject *piece_items[6] = {event_type, resource, entity, attempt, PyTuple_GET_ITEM(route, 4), body};
    PyObject *piece = key == NULL ? NULL : new_tuple_of(piece_type, 6, piece_items);
    Py_DECREF(entity);
    if (piece == NULL) {
        Py_XDECREF(key);
        return NULL;
    }
    PyObject *prepared_items[3] = {event_id, key, piece};
    PyObject *out = new_tuple_of(prepared_type, 3, prepared_items);
    Py_DECREF(key);
    Py_DECREF(piece);
    return out;
python:
    return PyObject_CallOneArg(py_prepare, event);
fail:
    return NULL;
}

/* -- transitions ------------------------------------------------------------------------------ */

typedef struct {
    PyObject *state; /* borrowed */
    int64_t ns;
} Transition;

#define MAX_TRANSITIONS 64

/* The piece's transitions read into `out` (at most MAX_TRANSITIONS); the count, -1 on an error,
 * -2 for a shape Python must decide. */
static Py_ssize_t read_transitions(PyObject *transitions, Transition *out) {
    if (!PyList_CheckExact(transitions) || PyList_GET_SIZE(transitions) > MAX_TRANSITIONS) return -2;
    Py_ssize_t n = PyList_GET_SIZE(transitions);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(transitions, i);
        if (!PyDict_CheckExact(t)) return -2;
        PyObject *state = get(t, KEY(state));
        if (state == NULL && PyErr_Occurred()) return -1;
        if (state == NULL) state = s_empty;
        else if (!PyUnicode_CheckExact(state)) return -2;
        PyObject *stamp = get(t, KEY(timestamp));
        if (stamp == NULL && PyErr_Occurred()) return -1;
        if (ray_time_ns(stamp, &out[i].ns) < 0) return -2;
        out[i].state = state;
    }
    return n;
}

/* The row's `events` list checked: each a dict with a str state, a created_ms and an int created_ns
 * that fits in 64 bits (as the fold writes them). 0 if so, -1 on an error, -2 otherwise. */
static int check_events(PyObject *events) {
    if (!PyList_CheckExact(events)) return -2;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *e = PyList_GET_ITEM(events, i);
        if (!PyDict_CheckExact(e)) return -2;
        PyObject *state = get(e, FIELD(state));
        if (state == NULL && PyErr_Occurred()) return -1;
        PyObject *ns = get(e, FIELD(created_ns));
        if (ns == NULL && PyErr_Occurred()) return -1;
        PyObject *ms = get(e, FIELD(created_ms));
        if (ms == NULL && PyErr_Occurred()) return -1;
        if (state == NULL || !PyUnicode_CheckExact(state) || ns == NULL || !PyLong_CheckExact(ns) || ms == NULL)
            return -2;
        int overflow;
        (void)PyLong_AsLongLongAndOverflow(ns, &overflow);
        if (overflow) return -2;
    }
    return 0;
}

static int64_t event_ns(PyObject *e) { return PyLong_AsLongLong(get(e, FIELD(created_ns))); }

/* `_transitions` once its inputs are checked: new transitions appended, the list sorted by
 * created_ns (stable), `state` set to the latest. */
static int merge_transitions(PyObject *row, PyObject *events, Transition *t, Py_ssize_t n) {
    if (n == 0) return 0;
    Py_ssize_t known = PyList_GET_SIZE(events);
    for (Py_ssize_t i = 0; i < n; i++) {
        int seen = 0;
        for (Py_ssize_t j = 0; j < known && !seen; j++) {
            PyObject *e = PyList_GET_ITEM(events, j);
            if (event_ns(e) != t[i].ns) continue;
            int same = PyUnicode_Compare(get(e, FIELD(state)), t[i].state);
            if (same == -1 && PyErr_Occurred()) return -1;
            seen = same == 0;
        }
        if (seen) continue;
        PyObject *ms = PyLong_FromLongLong(floor_div(t[i].ns, 1000000));
        PyObject *ns = PyLong_FromLongLong(t[i].ns);
        PyObject *entry = PyDict_New();
        int bad = ms == NULL || ns == NULL || entry == NULL || PyDict_SetItem(entry, FIELD(state), t[i].state) ||
                  PyDict_SetItem(entry, FIELD(created_ms), ms) || PyDict_SetItem(entry, FIELD(created_ns), ns) ||
                  PyList_Append(events, entry);
        Py_XDECREF(ms);
        Py_XDECREF(ns);
        Py_XDECREF(entry);
        if (bad) return -1;
    }
    /* A stable insertion sort by created_ns: the lists are a handful long. */
    Py_ssize_t size = PyList_GET_SIZE(events);
    PyObject **items = ((PyListObject *)events)->ob_item;
    for (Py_ssize_t i = 1; i < size; i++) {
        PyObject *moving = items[i];
        int64_t key = event_ns(moving);
        Py_ssize_t j = i;
        while (j > 0 && event_ns(items[j - 1]) > key) {
            items[j] = items[j - 1];
            j--;
        }
        items[j] = moving;
    }
    return PyDict_SetItem(row, FIELD(state), get(items[size - 1], FIELD(state)));
}

/* The row's `events` list (a new reference, checked by `check_events`), set to a new empty one
 * if the row has none. */
static PyObject *row_events(PyObject *row) {
    PyObject *events = get(row, FIELD(events));
    if (events != NULL && events != Py_None) return Py_NewRef(events);
    if (PyErr_Occurred() || (events = PyList_New(0)) == NULL) return NULL;
    if (PyDict_SetItem(row, FIELD(events), events)) {
        Py_DECREF(events);
        return NULL;
    }
    return events;
}

/* Whether `state` (a str) is one of `states` (TASK_VALUES' pending, running or ended names). */
static int in_states(PyObject *state, PyObject *states) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(states); i++) {
        PyObject *name = PyTuple_GET_ITEM(states, i);
        if (state == name || (PyUnicode_GET_LENGTH(state) == PyUnicode_GET_LENGTH(name) &&
                              PyUnicode_Compare(state, name) == 0))
            return 1;
    }
    return 0;
}

/* -- the task folds --------------------------------------------------------------------------- */

/* `_descriptor_name(func or {})`: a new reference, or NULL with no error set for Python to decide. */
static PyObject *descriptor_name(PyObject *func) {
    if (func == NULL || func == Py_None) return Py_NewRef(s_empty);
    if (!PyDict_CheckExact(func)) return NULL;
    if (PyDict_GET_SIZE(func) == 0) return Py_NewRef(s_empty);
    PyObject *python = get(func, KEY(python_function_descriptor));
    if (python == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(s_empty);
    if (!PyDict_CheckExact(python)) return NULL;
    PyObject *cls = get(python, KEY(class_name));
    if (cls == NULL && PyErr_Occurred()) return NULL;
    PyObject *name = get(python, KEY(function_name));
    if (name == NULL && PyErr_Occurred()) return NULL;
    if (cls == NULL) cls = s_empty;
    if (name == NULL) name = s_empty;
    if (!PyUnicode_CheckExact(cls) || !PyUnicode_CheckExact(name)) return NULL;
    if (PyUnicode_GET_LENGTH(cls) == 0) return Py_NewRef(name);
    return PyUnicode_FromFormat("%U.%U", cls, name);
}

/* `body.get(key) or fallback` as a new reference (`fallback` NULL: a new empty dict). */
static PyObject *or_default(PyObject *body, PyObject *key, PyObject *fallback) {
    PyObject *value;
    if (truthy(body, key, &value)) return NULL;
    if (value != NULL) return Py_NewRef(value);
    return fallback == NULL ? PyDict_New() : Py_NewRef(fallback);
}

/* `body.get(key, default)` as a new reference (`fallback` NULL: a new empty dict). */
static PyObject *get_default(PyObject *body, PyObject *key, PyObject *fallback) {
    PyObject *value = get(body, key);
    if (value == NULL && PyErr_Occurred()) return NULL;
    if (value != NULL) return Py_NewRef(value);
    return fallback == NULL ? PyDict_New() : Py_NewRef(fallback);
}

#define DEFINITION_FIELDS 12

static PyObject *task_definition(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "task_definition(row, body)");
        return NULL;
    }
    if (routes == NULL) return unbound();
    PyObject *row = args[0], *body = args[1];
    if (!PyDict_CheckExact(row) || !PyDict_CheckExact(body)) return call2(py_task_definition, row, body);
    PyObject *names[DEFINITION_FIELDS] = {
        FIELD(name), FIELD(type), FIELD(func_or_class_name), FIELD(language), FIELD(required_resources), FIELD(runtime_env_info),
        FIELD(placement_group_id), FIELD(parent_task_id), FIELD(job_id), FIELD(actor_id), FIELD(call_site), FIELD(label_selector),
    };
    PyObject *values[DEFINITION_FIELDS] = {NULL};
    PyObject *out = NULL;
    int actor_task = PyDict_Contains(body, KEY(actor_task_name));
    if (actor_task == 0) actor_task = PyDict_Contains(body, KEY(actor_func));
    if (actor_task < 0) goto done;
    PyObject *func;
    if (truthy(body, actor_task ? KEY(actor_func) : KEY(task_func), &func)) goto done;
    if ((values[2] = descriptor_name(func)) == NULL) goto hand_back;
    PyObject *id_keys[4] = {KEY(placement_group_id), KEY(parent_task_id), KEY(job_id), KEY(actor_id)};
    for (int i = 0; i < 4; i++) {
        PyObject *id = get(body, id_keys[i]); /* an empty {} or [] is Python's to refuse */
        if (id == NULL && PyErr_Occurred()) goto done;
        if ((values[6 + i] = hex_of_base64(id)) == NULL) goto hand_back;
    }
    values[6] = nil_to_none(values[6]);
    values[9] = nil_to_none(values[9]);
    if (actor_task) {
        values[0] = get_default(body, KEY(actor_task_name), Py_None);
        values[1] = Py_NewRef(VALUE(actor_task));
    } else {
        values[0] = get_default(body, KEY(task_name), s_empty);
        values[1] = get_default(body, KEY(task_type), VALUE(normal_task));
    }
    if (values[0] == NULL || values[1] == NULL) goto done;
    if ((values[3] = get_default(body, KEY(language), VALUE(python))) == NULL) goto done;
    if ((values[4] = get_default(body, KEY(required_resources), NULL)) == NULL) goto done;
    PyObject *env = get_default(body, KEY(serialized_runtime_env), VALUE(empty_runtime_env));
    if (env == NULL) goto done;
    values[5] = PyDict_New();
    if (values[5] == NULL || PyDict_SetItem(values[5], FIELD(serialized_runtime_env), env)) {
        Py_DECREF(env);
        goto done;
    }
    Py_DECREF(env);
    if ((values[10] = or_default(body, KEY(call_site), Py_None)) == NULL) goto done;
    if ((values[11] = or_default(body, KEY(label_selector), NULL)) == NULL) goto done;
    for (int i = 0; i < DEFINITION_FIELDS; i++) {
        if (PyDict_SetItem(row, names[i], values[i])) goto done;
    }
    out = Py_NewRef(Py_None);
    goto done;
hand_back:
    if (!PyErr_Occurred()) out = call2(py_task_definition, row, body);
done:
    for (int i = 0; i < DEFINITION_FIELDS; i++) Py_XDECREF(values[i]);
    return out;
}

/* `int(value)` for a JSON int or an int64 printed as a string (as proto JSON does), 0 if missing: a
 * new reference, or NULL with no error set for any other value (Python decides it). */
static PyObject *json_int(PyObject *value) {
    if (value == NULL) return Py_NewRef(s_zero);
    if (PyLong_CheckExact(value)) return Py_NewRef(value);
    if (!PyUnicode_CheckExact(value) || !PyUnicode_IS_ASCII(value)) return NULL;
    int64_t v;
    if (digits_int(PyUnicode_1BYTE_DATA(value), PyUnicode_GET_LENGTH(value), &v) < 0) return NULL;
    return PyLong_FromLongLong(v);
}

/* `task_log_info` of a truthy `taskLogInfo` (a new reference), or NULL: with an error set on a
 * failure, without for Python to decide. */
static PyObject *task_log_info(PyObject *log_info) {
    if (!PyDict_CheckExact(log_info)) return NULL;
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    /* the two files, then the four offsets */
    PyObject *keys[6] = {KEY(stdout_file), KEY(stderr_file), KEY(stdout_start),
                         KEY(stdout_end),  KEY(stderr_start), KEY(stderr_end)};
    PyObject *fields[6] = {FIELD(stdout_file), FIELD(stderr_file), FIELD(stdout_start),
                           FIELD(stdout_end),  FIELD(stderr_start), FIELD(stderr_end)};
    for (int i = 0; i < 6; i++) {
        PyObject *value = get(log_info, keys[i]);
        if (value == NULL && PyErr_Occurred()) goto fail;
        value = i < 2 ? Py_NewRef(value ? value : Py_None) : json_int(value);
        if (value == NULL) goto fail;
        int bad = PyDict_SetItem(out, fields[i], value);
        Py_DECREF(value);
        if (bad) goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* An id field of a lifecycle piece: `*hexed` set (a new reference) when the body has a truthy
 * value; 0, -1 on an error, -2 for Python to decide. */
static int lifecycle_id(PyObject *body, PyObject *key, PyObject **hexed) {
    PyObject *value;
    if (truthy(body, key, &value)) return -1;
    if (value == NULL) return 0;
    *hexed = hex_of_base64(value);
    if (*hexed == NULL) return PyErr_Occurred() ? -1 : -2;
    return 0;
}

static PyObject *task_lifecycle(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "task_lifecycle(row, body)");
        return NULL;
    }
    if (routes == NULL) return unbound();
    PyObject *row = args[0], *body = args[1];
    if (!PyDict_CheckExact(row) || !PyDict_CheckExact(body)) return call2(py_task_lifecycle, row, body);
    PyObject *events = NULL, *job = NULL, *node = NULL, *worker = NULL, *log_fields = NULL, *out = NULL;
    Transition transitions[MAX_TRANSITIONS];
    Py_ssize_t count = 0;
    /* Check every input first: a piece Python must decide goes to it before anything changes. */
    PyObject *listed;
    if (truthy(body, KEY(state_transitions), &listed)) return NULL;
    if (listed != NULL && (count = read_transitions(listed, transitions)) < 0) {
        if (count == -1) return NULL;
        goto hand_back;
    }
    PyObject *existing = get(row, FIELD(events));
    if (existing == NULL && PyErr_Occurred()) return NULL;
    if (existing != NULL && existing != Py_None) {
        int checked = check_events(existing);
        if (checked == -1) return NULL;
        if (checked == -2) goto hand_back;
    }
    int status;
    if ((status = lifecycle_id(body, KEY(job_id), &job)) || (status = lifecycle_id(body, KEY(node_id), &node)) ||
        (status = lifecycle_id(body, KEY(worker_id), &worker))) {
        if (status == -1) goto done;
        goto hand_back;
    }
    PyObject *pid = get(body, KEY(worker_pid)), *error, *log_info;
    if (pid == NULL && PyErr_Occurred()) goto done;
    if (pid != NULL && !PyLong_CheckExact(pid)) goto hand_back;
    if (truthy(body, KEY(ray_error_info), &error) || truthy(body, KEY(task_log_info), &log_info)) goto done;
    if (error != NULL && !PyDict_CheckExact(error)) goto hand_back;
    if (log_info != NULL && (log_fields = task_log_info(log_info)) == NULL) {
        if (PyErr_Occurred()) goto done;
        goto hand_back;
    }

    /* Change the row, in the order Python does. */
    if ((events = row_events(row)) == NULL) goto done;
    if (merge_transitions(row, events, transitions, count)) goto done;
    if ((job && PyDict_SetItem(row, FIELD(job_id), job)) || (node && PyDict_SetItem(row, FIELD(node_id), node)) ||
        (worker && PyDict_SetItem(row, FIELD(worker_id), worker)))
        goto done;
    if (pid != NULL && PyObject_IsTrue(pid) && PyDict_SetItem(row, FIELD(worker_pid), pid)) goto done;
    if (error != NULL) {
        PyObject *type = get(error, KEY(error_type)), *message;
        if (type == NULL && PyErr_Occurred()) goto done;
        if (PyDict_SetItem(row, FIELD(error_type), type ? type : Py_None)) goto done;
        if ((message = get(error, KEY(error_message))) == NULL && PyErr_Occurred()) goto done;
        if (PyDict_SetItem(row, FIELD(error_message), message ? message : Py_None)) goto done;
    }
    if (log_fields != NULL && PyDict_SetItem(row, FIELD(task_log_info), log_fields)) goto done;
    PyObject *created = Py_None, *started = Py_None, *ended = Py_None;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *e = PyList_GET_ITEM(events, i);
        PyObject *state = get(e, FIELD(state)), *ms = get(e, FIELD(created_ms)); /* both checked */
        if (in_states(state, STATES(pending))) {
            if (created == Py_None) created = ms;
        } else if (in_states(state, STATES(running))) {
            if (started == Py_None) started = ms;
        } else if (in_states(state, STATES(ended))) {
            ended = ms;
        }
    }
    if (PyDict_SetItem(row, FIELD(creation_time_ms), created) || PyDict_SetItem(row, FIELD(start_time_ms), started) ||
        PyDict_SetItem(row, FIELD(end_time_ms), ended))
        goto done;
    out = Py_NewRef(Py_None);
    goto done;
hand_back:
    out = call2(py_task_lifecycle, row, body);
done:
    Py_XDECREF(events);
    Py_XDECREF(job);
    Py_XDECREF(node);
    Py_XDECREF(worker);
    Py_XDECREF(log_fields);
    return out;
}

/* -- row_columns ------------------------------------------------------------------------------ */

static PyObject *row_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "row_columns(resource, row)");
        return NULL;
    }
    if (routes == NULL) return unbound();
    PyObject *resource = args[0], *row = args[1];
    PyObject *plan = get(index_plan, resource);
    if (plan == NULL && PyErr_Occurred()) return NULL;
    if (plan == NULL || !PyDict_CheckExact(row)) return call2(py_row_columns, resource, row);
    Py_ssize_t columns = PyTuple_GET_SIZE(plan);
    PyObject *indexed = PyTuple_New(columns);
    if (indexed == NULL) return NULL;
    for (Py_ssize_t i = 0; i < columns; i++) {
        PyObject *entry = PyTuple_GET_ITEM(plan, i);
        PyObject *name = PyTuple_GET_ITEM(entry, 0), *value = Py_None;
        if (name != Py_None) {
            value = get(row, name);
            if (value == NULL && PyErr_Occurred()) goto fail;
            if (value == NULL || value == Py_None) value = PyTuple_GET_ITEM(entry, 1);
        }
        if (PyLong_CheckExact(value)) {
            int overflow;
            (void)PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow) goto hand_back;
        } else if (value != Py_None && !PyUnicode_CheckExact(value) && !PyFloat_CheckExact(value) &&
                   !PyBool_Check(value)) {
            goto hand_back;
        }
        PyTuple_SET_ITEM(indexed, i, Py_NewRef(value));
    }
    PyObject *kept = PyDict_New(), *key, *value;
    if (kept == NULL) goto fail;
    Py_ssize_t position = 0;
    while (PyDict_Next(row, &position, &key, &value)) {
        if (value != Py_None && PyDict_SetItem(kept, key, value)) {
            Py_DECREF(kept);
            goto fail;
        }
    }
    PyObject *encoded = PyObject_CallOneArg(dumps, kept);
    Py_DECREF(kept);
    if (encoded == NULL) {
        PyErr_Clear(); /* what cannot be encoded (an int past 64 bits): Python names it */
        goto hand_back;
    }
    PyObject *data = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded), NULL);
    Py_DECREF(encoded);
    if (data == NULL) goto fail;
    PyObject *out = PyTuple_Pack(2, data, indexed);
    Py_DECREF(data);
    Py_DECREF(indexed);
    return out;
hand_back:
    Py_DECREF(indexed);
    return call2(py_row_columns, resource, row);
fail:
    Py_DECREF(indexed);
    return NULL;
}

/* -- fold_rows -------------------------------------------------------------------------------- */

/* Bound by `bind_rows`: state_merge.ID_COLUMN, TASKS and FOLD_ERRORS. */
static PyObject *id_columns, *tasks_resource, *fold_errors;
static PyObject *a_row, *a_ids, *s_one;

/* kept_ids.event_hash(event_id), as a new int; NULL with the error set. */
static PyObject *event_id_hash(PyObject *event_id) {
    if (!PyUnicode_Check(event_id)) {
        PyErr_SetString(PyExc_TypeError, "an event id is a str");
        return NULL;
    }
    if (PyUnicode_IS_ASCII(event_id))
        return PyLong_FromUnsignedLongLong(event_hash((const char *)PyUnicode_1BYTE_DATA(event_id),
                                                      (size_t)PyUnicode_GET_LENGTH(event_id)));
    PyObject *utf8 = PyUnicode_AsEncodedString(event_id, "utf-8", "surrogatepass");
    if (utf8 == NULL) return NULL;
    uint64_t hashed = event_hash(PyBytes_AS_STRING(utf8), (size_t)PyBytes_GET_SIZE(utf8));
    Py_DECREF(utf8);
    return PyLong_FromUnsignedLongLong(hashed);
}

/* One row's pieces folded as row_fold.fold_row folds them (not `refused`): 0 and `*columns` (a new
 * reference, or NULL when nothing was folded) on success, -1 with the error set otherwise. The
 * types of the events folded are appended to `folded` and the duplicates counted in `*duplicates`. */
static int fold_one_row(PyObject *resource, PyObject *entry, PyObject *folds, PyObject *folded,
                        Py_ssize_t *duplicates, PyObject **columns) {
    *columns = NULL;
    PyObject *row = PyObject_GetAttr(entry, a_row);
    PyObject *ids = row == NULL ? NULL : PyObject_GetAttr(entry, a_ids);
    PyObject *hashed = NULL; /* the event id's (kept_ids.event_hash) */
    int status = -1;
    if (ids == NULL) goto done;
    if (!PyDict_CheckExact(row) || !PyList_CheckExact(ids) || !PyList_CheckExact(folds)) {
        PyErr_SetString(PyExc_TypeError, "fold_rows: a row is a dict, its ids and folds lists");
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(folds); i++) {
        PyObject *fold = PyList_GET_ITEM(folds, i);
        if (!PyTuple_Check(fold) || PyTuple_GET_SIZE(fold) != 3) {
            PyErr_SetString(PyExc_TypeError, "fold_rows: a fold is (position, event id, piece)");
            goto done;
        }
        PyObject *piece = PyTuple_GET_ITEM(fold, 2);
        Py_XSETREF(hashed, event_id_hash(PyTuple_GET_ITEM(fold, 1)));
        if (hashed == NULL) goto done;
        int seen = PySequence_Contains(ids, hashed);
        if (seen < 0) goto done;
        if (seen) {
            (*duplicates)++;
            continue;
        }
        if (!PyTuple_Check(piece) || PyTuple_GET_SIZE(piece) != 6) {
            PyErr_SetString(PyExc_TypeError, "fold_rows: a piece is a Piece");
            goto done;
        }
        /* state_merge.apply */
        PyObject *piece_resource = PyTuple_GET_ITEM(piece, 1);
        PyObject *id_column = PyDict_GetItemWithError(id_columns, piece_resource);
        if (id_column == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, piece_resource);
            goto done;
        }
        if (PyDict_SetItem(row, id_column, PyTuple_GET_ITEM(piece, 2))) goto done;
        int is_tasks = PyObject_RichCompareBool(piece_resource, tasks_resource, Py_EQ);
        if (is_tasks < 0 || (is_tasks && PyDict_SetItem(row, FIELD(attempt_number), PyTuple_GET_ITEM(piece, 3))))
            goto done;
        PyObject *none = call2(PyTuple_GET_ITEM(piece, 4), row, PyTuple_GET_ITEM(piece, 5));
        if (none == NULL) goto done;
        Py_DECREF(none);
        if (PyList_Append(ids, hashed) || PyList_Append(folded, PyTuple_GET_ITEM(piece, 0))) goto done;
    }
    if (PyList_GET_SIZE(folded) > 0) {
        PyObject *args[2] = {resource, row};
        *columns = row_columns(NULL, args, 2);
        if (*columns == NULL) goto done;
        if (!PyTuple_CheckExact(*columns) || PyTuple_GET_SIZE(*columns) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(*columns, 1))) {
            Py_CLEAR(*columns);
            PyErr_SetString(PyExc_TypeError, "fold_rows: row_columns gives (data, indexed)");
            goto done;
        }
    }
    status = 0;
done:
    Py_XDECREF(hashed);
    Py_XDECREF(row);
    Py_XDECREF(ids);
    return status;
}

/* kept_ids.packed(ids): the hashes (ints) as 8 little-endian bytes each; NULL with the error set. */
static PyObject *packed_hashes(PyObject *ids) {
    if (!PyList_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "a row's kept ids are a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(ids);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * EVENT_HASH_BYTES);
    if (out == NULL) return NULL;
    uint8_t *bytes = (uint8_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(ids, i);
        uint64_t value = PyLong_Check(item) ? PyLong_AsUnsignedLongLong(item) : (uint64_t)-1;
        if (value == (uint64_t)-1 && (!PyLong_Check(item) || PyErr_Occurred())) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a kept id is an int");
            Py_DECREF(out);
            return NULL;
        }
        event_hash_store(value, bytes + i * EVENT_HASH_BYTES);
    }
    return out;
}

/* row_fold.upsert_values: (*key, received, data, kept_ids.packed(ids), *indexed). */
static PyObject *upsert_values(PyObject *key, PyObject *received, PyObject *entry, PyObject *columns) {
    PyObject *ids = PyObject_GetAttr(entry, a_ids);
    if (ids == NULL) return NULL;
    PyObject *joined = packed_hashes(ids);
    Py_DECREF(ids);
    if (joined == NULL) return NULL;
    PyObject *indexed = PyTuple_GET_ITEM(columns, 1);
    Py_ssize_t k = PyTuple_GET_SIZE(key), n = PyTuple_GET_SIZE(indexed);
    PyObject *out = PyTuple_New(k + 3 + n);
    if (out == NULL) {
        Py_DECREF(joined);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < k; i++) PyTuple_SET_ITEM(out, i, Py_NewRef(PyTuple_GET_ITEM(key, i)));
    PyTuple_SET_ITEM(out, k, Py_NewRef(received));
    PyTuple_SET_ITEM(out, k + 1, Py_NewRef(PyTuple_GET_ITEM(columns, 0)));
    PyTuple_SET_ITEM(out, k + 2, joined);
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(out, k + 3 + i, Py_NewRef(PyTuple_GET_ITEM(indexed, i)));
    return out;
}

/* fold_rows(keys, start, pieces, rows, received, by_type, changed) -> (index, duplicates):
 * row_fold._fold_rows_python, compiled. */
static PyObject *fold_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "fold_rows(keys, start, pieces, rows, received, by_type, changed)");
        return NULL;
    }
    PyObject *keys = args[0], *pieces = args[2], *rows = args[3], *received = args[4];
    PyObject *by_type = args[5], *changed = args[6];
    if (id_columns == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fold_rows: bind_rows first");
        return NULL;
    }
    if (!PyList_CheckExact(keys) || !PyDict_CheckExact(pieces) || !PyDict_CheckExact(rows) ||
        !PyDict_CheckExact(by_type) || !PyList_CheckExact(changed)) {
        PyErr_SetString(PyExc_TypeError, "fold_rows: keys and changed are lists; pieces, rows, by_type dicts");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t duplicates = 0, index;
    PyObject *folded = PyList_New(0);
    if (folded == NULL) return NULL;
    for (index = start < 0 ? 0 : start; index < PyList_GET_SIZE(keys); index++) {
        PyObject *key = PyList_GET_ITEM(keys, index);
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) < 1) {
            PyErr_SetString(PyExc_TypeError, "fold_rows: a key is (resource, ...)");
            goto fail;
        }
        PyObject *folds = PyDict_GetItemWithError(pieces, key);
        PyObject *entry = folds == NULL ? NULL : PyDict_GetItemWithError(rows, key);
        if (entry == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
            goto fail;
        }
        Py_ssize_t row_duplicates = 0;
        PyObject *columns;
        if (PyList_SetSlice(folded, 0, PyList_GET_SIZE(folded), NULL)) goto fail;
        if (fold_one_row(PyTuple_GET_ITEM(key, 0), entry, folds, folded, &row_duplicates, &columns)) {
            if (PyErr_ExceptionMatches(fold_errors)) {
                PyErr_Clear(); /* the caller folds this row again, piece by piece */
                break;
            }
            goto fail;
        }
        duplicates += row_duplicates;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(folded); i++) {
            PyObject *event_type = PyList_GET_ITEM(folded, i);
            PyObject *count = PyDict_GetItemWithError(by_type, event_type);
            if (count == NULL && PyErr_Occurred()) goto fail_columns;
            PyObject *more = count == NULL ? Py_NewRef(s_one) : PyNumber_Add(count, s_one);
            if (more == NULL || PyDict_SetItem(by_type, event_type, more)) {
                Py_XDECREF(more);
                goto fail_columns;
            }
            Py_DECREF(more);
        }
        if (columns != NULL) {
            PyObject *values = upsert_values(key, received, entry, columns);
            Py_DECREF(columns);
            if (values == NULL || PyList_Append(changed, values)) {
                Py_XDECREF(values);
                goto fail;
            }
            Py_DECREF(values);
        }
        continue;
    fail_columns:
        Py_XDECREF(columns);
        goto fail;
    }
    Py_DECREF(folded);
    return Py_BuildValue("nn", index, duplicates);
fail:
    Py_DECREF(folded);
    return NULL;
}

/* group_pieces(events) -> (pieces, ignored): row_fold._group_pieces_python, compiled. */
static PyObject *group_pieces(PyObject *self, PyObject *events) {
    (void)self;
    if (!PyList_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "group_pieces(events): a list of Prepared");
        return NULL;
    }
    PyObject *pieces = PyDict_New();
    if (pieces == NULL) return NULL;
    Py_ssize_t ignored = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 3) {
            PyErr_SetString(PyExc_TypeError, "group_pieces: an event is (event id, key, piece)");
            goto fail;
        }
        PyObject *key = PyTuple_GET_ITEM(event, 1), *piece = PyTuple_GET_ITEM(event, 2);
        if (key == Py_None || piece == Py_None) {
            ignored++;
            continue;
        }
        PyObject *folds = PyDict_GetItemWithError(pieces, key);
        if (folds == NULL) {
            if (PyErr_Occurred()) goto fail;
            folds = PyList_New(0);
            int bad = folds == NULL || PyDict_SetItem(pieces, key, folds);
            Py_XDECREF(folds); /* the dict holds it */
            if (bad) goto fail;
        }
        PyObject *position = PyLong_FromSsize_t(i);
        PyObject *fold = position == NULL ? NULL : PyTuple_Pack(3, position, PyTuple_GET_ITEM(event, 0), piece);
        Py_XDECREF(position);
        if (fold == NULL || PyList_Append(folds, fold)) {
            Py_XDECREF(fold);
            goto fail;
        }
        Py_DECREF(fold);
    }
    PyObject *out = Py_BuildValue("Nn", pieces, ignored);
    return out;
fail:
    Py_DECREF(pieces);
    return NULL;
}

static PyObject *bind_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns, *tasks, *errors;
    if (!PyArg_ParseTuple(args, "O!UO!:bind_rows", &PyDict_Type, &columns, &tasks, &PyTuple_Type, &errors))
        return NULL;
    Py_XSETREF(id_columns, Py_NewRef(columns));
    Py_XSETREF(tasks_resource, Py_NewRef(tasks));
    Py_XSETREF(fold_errors, Py_NewRef(errors));
    Py_RETURN_NONE;
}

/* -- module ----------------------------------------------------------------------------------- */

static PyObject *bind(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *prepare_, *definition, *lifecycle, *columns, *routes_, *piece, *prepared, *plan, *dumps_;
    if (!fold_names_bound) {
        PyErr_SetString(PyExc_RuntimeError, "bind: bind_names first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOOO!O!O!O!O:bind", &prepare_, &definition, &lifecycle, &columns,
                          &PyDict_Type, &routes_, &PyType_Type, &piece, &PyType_Type, &prepared,
                          &PyDict_Type, &plan, &dumps_))
        return NULL;
    PyObject *route_key, *route;
    Py_ssize_t position = 0;
    while (PyDict_Next(routes_, &position, &route_key, &route)) {
        if (!PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 5) {
            PyErr_SetString(PyExc_TypeError, "a route is (payload key, resource, id key, attempt key, fold)");
            return NULL;
        }
    }
    position = 0;
    while (PyDict_Next(plan, &position, &route_key, &route)) {
        if (!PyTuple_CheckExact(route)) {
            PyErr_SetString(PyExc_TypeError, "an index plan is a tuple of (field, default)");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(route); i++) {
            PyObject *entry = PyTuple_GET_ITEM(route, i);
            if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
                PyErr_SetString(PyExc_TypeError, "an index plan is a tuple of (field, default)");
                return NULL;
            }
        }
    }
    if (!PyType_IsSubtype((PyTypeObject *)piece, &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)prepared, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Piece and Prepared are NamedTuples");
        return NULL;
    }
    Py_XSETREF(py_prepare, Py_NewRef(prepare_));
    Py_XSETREF(py_task_definition, Py_NewRef(definition));
    Py_XSETREF(py_task_lifecycle, Py_NewRef(lifecycle));
    Py_XSETREF(py_row_columns, Py_NewRef(columns));
    Py_XSETREF(routes, Py_NewRef(routes_));
    Py_XSETREF(piece_type, (PyTypeObject *)Py_NewRef(piece));
    Py_XSETREF(prepared_type, (PyTypeObject *)Py_NewRef(prepared));
    Py_XSETREF(index_plan, Py_NewRef(plan));
    Py_XSETREF(dumps, Py_NewRef(dumps_));
    Py_RETURN_NONE;
}

static PyObject *bind_names(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys, *row, *values;
    if (!PyArg_ParseTuple(args, "OOO:bind_names", &keys, &row, &values) || bind_fold_names(keys, row, values) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *hex_id(PyObject *self, PyObject *value) {
    (void)self;
    PyObject *out = hex_of_base64(value);
    if (out == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return out;
}

static PyObject *time_ns(PyObject *self, PyObject *value) {
    (void)self;
    int64_t ns;
    if (ray_time_ns(value, &ns) < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(ns);
}

static PyObject *event_hash_of(PyObject *self, PyObject *event_id) {
    (void)self;
    return event_id_hash(event_id);
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_O, "prepare(event) -> Prepared: state_merge.prepare, compiled."},
    {"task_definition", (PyCFunction)(void (*)(void))task_definition, METH_FASTCALL,
     "task_definition(row, body): state_merge._task_definition, compiled."},
    {"task_lifecycle", (PyCFunction)(void (*)(void))task_lifecycle, METH_FASTCALL,
     "task_lifecycle(row, body): state_merge._task_lifecycle, compiled."},
    {"row_columns", (PyCFunction)(void (*)(void))row_columns, METH_FASTCALL,
     "row_columns(resource, row) -> (data, indexed): state_merge.row_columns, compiled."},
    {"hex_id", hex_id, METH_O, "hex_id(value) -> str | None: None where Python must decide (for tests)."},
    {"time_ns", time_ns, METH_O, "time_ns(value) -> int | None: None where Python must decide (for tests)."},
    {"event_hash", event_hash_of, METH_O, "event_hash(event_id) -> int: kept_ids.event_hash, compiled (for tests)."},
    {"fold_rows", (PyCFunction)(void (*)(void))fold_rows, METH_FASTCALL,
     "fold_rows(keys, start, pieces, rows, received, by_type, changed) -> (index, duplicates):"
     " row_fold._fold_rows_python, compiled."},
    {"group_pieces", group_pieces, METH_O,
     "group_pieces(events) -> (pieces, ignored): row_fold._group_pieces_python, compiled."},
    {"bind_rows", bind_rows, METH_VARARGS,
     "bind_rows(ID_COLUMN, TASKS, FOLD_ERRORS): what fold_rows reads of state_merge."},
    {"bind_names", bind_names, METH_VARARGS,
     "bind_names(RAY_KEYS, TASK_ROW, TASK_VALUES): the names the folds read and write (store/fold_schema.py)."},
    {"bind", bind, METH_VARARGS,
     "bind(prepare, task_definition, task_lifecycle, row_columns, routes, Piece, Prepared, index_plan,"
     " dumps): the Python side."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_state_fold", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__state_fold(void) {
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {{&s_empty, ""}, {&a_row, "row"}, {&a_ids, "ids"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
    }
    if ((s_zero = PyLong_FromLong(0)) == NULL || (s_one = PyLong_FromLong(1)) == NULL) return NULL;
    return PyModule_Create(&module_def);
}
