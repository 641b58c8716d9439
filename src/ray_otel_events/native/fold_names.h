/* The names the store's task folds read and write (Ray's JSON keys, a task row's fields, the values
 * and task states they write or compare), bound from store/fold_schema.py when state_merge binds the
 * module (`bind_names(RAY_KEYS, TASK_ROW, TASK_VALUES)`): none is typed in C. The lists below name
 * the attributes of those tables a module reads, by the tables' own attribute names; a table without
 * one fails the binding (and the import) with its name. KEY(x), FIELD(x), VALUE(x): an interned str;
 * STATES(x): a tuple of them. */
#ifndef RAY_OTEL_EVENTS_FOLD_NAMES_H
#define RAY_OTEL_EVENTS_FOLD_NAMES_H

#include <Python.h>

#define FOLD_KEYS(X)                                                                                       \
    X(event_id) X(event_type) X(session_name) X(task_name) X(task_type) X(task_func) X(actor_task_name)    \
    X(actor_func) X(language) X(required_resources) X(serialized_runtime_env) X(placement_group_id)        \
    X(parent_task_id) X(job_id) X(actor_id) X(call_site) X(label_selector) X(python_function_descriptor)   \
    X(class_name) X(function_name) X(state_transitions) X(state) X(timestamp) X(node_id) X(worker_id)      \
    X(worker_pid) X(ray_error_info) X(error_type) X(error_message) X(task_log_info) X(stdout_file)         \
    X(stderr_file) X(stdout_start) X(stdout_end) X(stderr_start) X(stderr_end)

#define FOLD_FIELDS(X)                                                                                     \
    X(task_id) X(attempt_number) X(name) X(type) X(func_or_class_name) X(language) X(required_resources)   \
    X(runtime_env_info) X(placement_group_id) X(parent_task_id) X(job_id) X(actor_id) X(call_site)         \
    X(label_selector) X(events) X(state) X(node_id) X(worker_id) X(worker_pid) X(error_type)                \
    X(error_message) X(task_log_info) X(creation_time_ms) X(start_time_ms) X(end_time_ms)                 \
    X(serialized_runtime_env) X(created_ms) X(created_ns) X(stdout_file) X(stderr_file) X(stdout_start)    \
    X(stdout_end) X(stderr_start) X(stderr_end)

#define FOLD_VALUES(X) X(actor_task) X(normal_task) X(python) X(empty_runtime_env)
#define FOLD_STATES(X) X(pending) X(running) X(ended)

#define FOLD_ENUM_KEY(id) KEY_##id,
#define FOLD_ENUM_FIELD(id) FIELD_##id,
#define FOLD_ENUM_VALUE(id) VALUE_##id,
#define FOLD_ENUM_STATES(id) STATES_##id,
#define FOLD_NAME(id) #id,
enum { FOLD_KEYS(FOLD_ENUM_KEY) N_FOLD_KEYS };
enum { FOLD_FIELDS(FOLD_ENUM_FIELD) N_FOLD_FIELDS };
enum { FOLD_VALUES(FOLD_ENUM_VALUE) N_FOLD_VALUES };
enum { FOLD_STATES(FOLD_ENUM_STATES) N_FOLD_STATES };

static PyObject *fold_keys[N_FOLD_KEYS], *fold_fields[N_FOLD_FIELDS], *fold_values[N_FOLD_VALUES];
static PyObject *fold_states[N_FOLD_STATES];
static int fold_names_bound;

#define KEY(id) fold_keys[KEY_##id]
#define FIELD(id) fold_fields[FIELD_##id]
#define VALUE(id) fold_values[VALUE_##id]
#define STATES(id) fold_states[STATES_##id]

#define MAX_FOLD_STATES 16

/* `table.name` for each of `names`, into `slots` (new references): a non-empty str each (interned)
 * or, with `tuples`, a tuple of 1 to MAX_FOLD_STATES of them. */
static int fold_names_read(PyObject *table, const char *what, const char *const *names, int n, int tuples,
                           PyObject **slots) {
    for (int i = 0; i < n; i++) {
        PyObject *value = PyObject_GetAttrString(table, names[i]);
        if (value == NULL) {
            PyErr_Format(PyExc_ValueError, "bind_names: %s has no %s (store/fold_schema.py)", what, names[i]);
            goto fail;
        }
        Py_ssize_t count = tuples && PyTuple_CheckExact(value) ? PyTuple_GET_SIZE(value) : 1;
        int good = tuples ? PyTuple_CheckExact(value) && count >= 1 && count <= MAX_FOLD_STATES : 1;
        for (Py_ssize_t j = 0; good && j < count; j++) {
            PyObject *item = tuples ? PyTuple_GET_ITEM(value, j) : value;
            good = PyUnicode_CheckExact(item) && PyUnicode_GET_LENGTH(item) > 0;
        }
        if (!good) {
            Py_DECREF(value);
            PyErr_Format(PyExc_TypeError, "bind_names: %s.%s is not %s", what, names[i],
                         tuples ? "a tuple of names" : "a name");
            goto fail;
        }
        if (!tuples) PyUnicode_InternInPlace(&value);
        slots[i] = value;
    }
    return 0;
fail:
    for (int i = 0; i < n; i++) Py_CLEAR(slots[i]);
    return -1;
}

/* bind_names(keys, row, values): each name the module reads of the three tables (FOLD_KEYS of
 * RAY_KEYS, FOLD_FIELDS of TASK_ROW, FOLD_VALUES and FOLD_STATES of TASK_VALUES). All or nothing. */
static int bind_fold_names(PyObject *keys, PyObject *row, PyObject *values) {
    static const char *const key_names[] = {FOLD_KEYS(FOLD_NAME)};
    static const char *const field_names_[] = {FOLD_FIELDS(FOLD_NAME)};
    static const char *const value_names[] = {FOLD_VALUES(FOLD_NAME)};
    static const char *const state_names[] = {FOLD_STATES(FOLD_NAME)};
    PyObject *k[N_FOLD_KEYS] = {NULL}, *f[N_FOLD_FIELDS] = {NULL}, *v[N_FOLD_VALUES] = {NULL};
    PyObject *s[N_FOLD_STATES] = {NULL};
    if (fold_names_read(keys, "RAY_KEYS", key_names, N_FOLD_KEYS, 0, k) < 0) return -1;
    if (fold_names_read(row, "TASK_ROW", field_names_, N_FOLD_FIELDS, 0, f) < 0) goto fail_k;
    if (fold_names_read(values, "TASK_VALUES", value_names, N_FOLD_VALUES, 0, v) < 0) goto fail_f;
    if (fold_names_read(values, "TASK_VALUES", state_names, N_FOLD_STATES, 1, s) < 0) goto fail_v;
    for (int i = 0; i < N_FOLD_KEYS; i++) Py_XSETREF(fold_keys[i], k[i]);
    for (int i = 0; i < N_FOLD_FIELDS; i++) Py_XSETREF(fold_fields[i], f[i]);
    for (int i = 0; i < N_FOLD_VALUES; i++) Py_XSETREF(fold_values[i], v[i]);
    for (int i = 0; i < N_FOLD_STATES; i++) Py_XSETREF(fold_states[i], s[i]);
    fold_names_bound = 1;
    return 0;
fail_v:
    for (int i = 0; i < N_FOLD_VALUES; i++) Py_XDECREF(v[i]);
fail_f:
    for (int i = 0; i < N_FOLD_FIELDS; i++) Py_XDECREF(f[i]);
fail_k:
    for (int i = 0; i < N_FOLD_KEYS; i++) Py_XDECREF(k[i]);
    return -1;
}

#endif
