/* A lifecycle payload's state transitions, and what a task's span reads of its pieces, read from
 * their wire bytes, compiled. The transitions: what
 * from_ray_events reads through upb, one wrapper and three accessor calls per transition, to know
 * whether a task ran or ended and to lay out its span's events. The bytes are what upb serialized
 * (or several such payloads concatenated, which parse as their merge), read with protobuf's rules:
 * a scalar given twice, the last; a Timestamp given twice, merged; fields of another wire type,
 * unknown (in a Timestamp, left to upb). Optional: without a C compiler from_ray_events reads them through upb. */

#define PY_SSIZE_T_CLEAN
#include "protobuf_wire.h"

typedef struct {
    uint64_t ns;
    int32_t state;
} Transition;

/* transitions(wire, field_number) -> [(time ns, state), ...] of the StateTransition{state = 1,
 * timestamp = 2} entries of repeated field `field_number`, sorted by time (stable), repeats of
 * (time, state) left out: what from_ray_events._transitions makes of them (without the transition
 * message, the third item). None when a Timestamp is out of range or odd, or the bytes are
 * malformed. */
static PyObject *transitions(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "transitions(wire: bytes, field_number: int)");
        return NULL;
    }
    long number = PyLong_AsLong(args[1]);
    if (number == -1 && PyErr_Occurred()) return NULL;
    Reader r = bytes_reader(args[0]);
    Transition *found = NULL;
    Py_ssize_t count = 0, room = 0;
    PyObject *out = NULL;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto malformed;
        if ((long)f.number != number || f.wire_type != 2) continue;
        int32_t state = 0, nanos = 0;
        int64_t seconds = 0;
        Reader t = f.payload;
        while (t.p < t.end) {
            Field g;
            if (next_field(&t, &g) < 0) goto malformed;
            if (g.number == 1 && g.wire_type == 0) state = (int32_t)g.scalar;
            if (g.number == 2 && g.wire_type == 2 && read_timestamp(g.payload, &seconds, &nanos) != 0)
                goto malformed;
        }
        uint64_t ns;
        if (timestamp_unix_nano(seconds, nanos, &ns)) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        int repeated = 0;
        for (Py_ssize_t i = 0; i < count && !repeated; i++) repeated = found[i].ns == ns && found[i].state == state;
        if (repeated) continue;
        if (count == room) {
            room = room ? room * 2 : 8;
            Transition *grown = PyMem_Realloc(found, sizeof(Transition) * (size_t)room);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            found = grown;
        }
        Py_ssize_t at = count++; /* insertion sort: stable, and the lists are short */
        while (at > 0 && found[at - 1].ns > ns) {
            found[at] = found[at - 1];
            at--;
        }
        found[at] = (Transition){ns, state};
    }
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = Py_BuildValue("(KiO)", (unsigned long long)found[i].ns, (int)found[i].state, Py_None);
        if (item == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, item);
    }
    goto done;
malformed: /* or a Timestamp field of another wire type: left to upb's reading */
    PyErr_Clear();
    out = Py_NewRef(Py_None);
done:
    PyMem_Free(found);
    return out;
}


/* -- a task's parts ----------------------------------------------------------------------------- */

static const uint8_t nothing[1] = {0};

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
    int members = 0;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number < 1 || f.number > 3) continue;
        if (f.wire_type != 2 || ++members > 1) return 1;
        Reader parts[3] = {{nothing, nothing}, {nothing, nothing}, {nothing, nothing}};
        /* python: module 1, class 2, function 3; java: class 1, function 2; cpp: function 1 */
        int count = f.number == 2 ? 3 : f.number == 1 ? 2 : 1;
        for (Reader m = f.payload; m.p < m.end;) {
            Field g;
            if (next_field(&m, &g) < 0) return -1;
            if (g.number >= 1 && (int)g.number <= count && take_text(&g, &parts[g.number - 1])) return 1;
        }
        out->len = 0;
        for (int i = 0; i < count; i++) {
            Py_ssize_t n = parts[i].end - parts[i].p;
            if (n == 0) continue;
            if (buf_reserve(out, n + 1) < 0) return -1;
            if (out->len) out->data[out->len++] = '.';
            memcpy(out->data + out->len, parts[i].p, (size_t)n);
            out->len += n;
        }
    }
    return 0;
}

/* task_parts(definition, actor_task, lifecycle) -> (task_type, name, function, job_id,
 * parent_task_id, placement_group_id, actor_id, node_id, worker_id, worker_pid, lifecycle_job_id,
 * error_type or None, error_message): what a task's span reads of its kept definition (a
 * TaskDefinitionEvent's, or an ActorTaskDefinitionEvent's when actor_task; None: none arrived)
 * and of its lifecycle pieces, read as upb reads their merge. None where upb's reading is left to
 * it (a function descriptor given twice, a field of another wire type, malformed bytes). */
static PyObject *task_parts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3 || (args[0] != Py_None && !PyBytes_Check(args[0])) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "task_parts(definition: bytes | None, actor_task: bool, lifecycle: bytes)");
        return NULL;
    }
    int actor_task = PyObject_IsTrue(args[1]);
    if (actor_task < 0) return NULL;
    Reader none = {nothing, nothing};
    Reader name = none, job = none, parent = none, group = none, actor = none;
    Reader node = none, worker = none, lifecycle_job = none, error_message = none;
    uint64_t task_type = 0, worker_pid = 0, error_type = 0;
    int has_error = 0, funcs = 0;
    Buf function = {NULL, 0, 0};
    PyObject *out = NULL;
    if (args[0] != Py_None) {
        /* TaskDefinitionEvent: type 3, func 5, name 6, job 9, parent 10, group 11;
         * ActorTaskDefinitionEvent: func 4, name 5, job 8, actor 9, parent 10, group 11 */
        uint32_t func_field = actor_task ? 4 : 5, name_field = actor_task ? 5 : 6, job_field = actor_task ? 8 : 9;
        Reader r = bytes_reader(args[0]);
        while (r.p < r.end) {
            Field f;
            if (next_field(&r, &f) < 0) goto left;
            int odd = 0;
            if (f.number == func_field) {
                odd = f.wire_type != 2 || ++funcs > 1;
                if (!odd) {
                    int read = function_name(f.payload, &function);
                    if (read < 0 && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_ValueError)) goto done;
                    odd = read != 0;
                }
            } else if (f.number == name_field) odd = take_text(&f, &name);
            else if (f.number == job_field) odd = take_text(&f, &job);
            else if (f.number == 10) odd = take_text(&f, &parent);
            else if (f.number == 11) odd = take_text(&f, &group);
            else if (!actor_task && f.number == 3) odd = take_varint(&f, &task_type);
            else if (actor_task && f.number == 9) odd = take_text(&f, &actor);
            if (odd) goto left;
        }
    }
    /* TaskLifecycleEvent: error info 4 {message 5, type 11}, node 5, worker 6, pid 7, job 8 */
    Reader r = bytes_reader(args[2]);
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) goto left;
        int odd = 0;
        switch (f.number) {
        case 4:
            if (f.wire_type != 2) goto left;
            has_error = 1; /* pieces merge: each field the last given */
            for (Reader e = f.payload; e.p < e.end;) {
                Field g;
                if (next_field(&e, &g) < 0) goto left;
                if (g.number == 5) odd |= take_text(&g, &error_message);
                else if (g.number == 11) odd |= take_varint(&g, &error_type);
            }
            break;
        case 5: odd = take_text(&f, &node); break;
        case 6: odd = take_text(&f, &worker); break;
        case 7: odd = take_varint(&f, &worker_pid); break;
        case 8: odd = take_text(&f, &lifecycle_job); break;
        default: break;
        }
        if (odd) goto left;
    }
    PyObject *function_text = PyUnicode_DecodeUTF8(function.data ? function.data : "", function.len, NULL);
    PyObject *name_text = function_text ? reader_text(name) : NULL;
    PyObject *message_text = name_text ? reader_text(error_message) : NULL;
    if (message_text == NULL) {
        Py_XDECREF(function_text);
        Py_XDECREF(name_text);
        goto left; /* not UTF-8: upb's reading raises, and says so */
    }
    out = Py_BuildValue("(iNNNNNNNNiNNN)", (int)(int32_t)(uint32_t)task_type, name_text, function_text, reader_bytes(job),
                        reader_bytes(parent), reader_bytes(group), reader_bytes(actor), reader_bytes(node), reader_bytes(worker),
                        (int)(int32_t)(uint32_t)worker_pid, reader_bytes(lifecycle_job),
                        has_error ? PyLong_FromLong((long)(int32_t)(uint32_t)error_type) : Py_NewRef(Py_None),
                        message_text);
    goto done;
left:
    PyErr_Clear();
    out = Py_NewRef(Py_None);
done:
    PyMem_Free(function.data);
    return out;
}

static PyMethodDef methods[] = {
    {"transitions", (PyCFunction)(void (*)(void))transitions, METH_FASTCALL,
     "transitions(wire, field_number) -> [(time ns, state, None), ...] sorted, or None."},
    {"task_parts", (PyCFunction)(void (*)(void))task_parts, METH_FASTCALL,
     "task_parts(definition, actor_task, lifecycle) -> the fields a task's span reads, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_lifecycle_wire", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lifecycle_wire(void) { return PyModule_Create(&module_def); }
