/* A lifecycle payload's state transitions read from its wire bytes, compiled: what
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

/* otlp_wire.unix_nano: the time OTLP can carry, else 0; 1 for a Timestamp out of range. */
static int unix_nano(int64_t seconds, int32_t nanos, uint64_t *out) {
    if (!timestamp_in_range(seconds, nanos)) return 1;
    if (seconds < 0) {
        *out = 0; /* before 1970: OTLP's "unknown" */
        return 0;
    }
    unsigned __int128 ns = (unsigned __int128)seconds * 1000000000u + (unsigned __int128)nanos;
    *out = ns > UINT64_MAX ? 0 : (uint64_t)ns;
    return 0;
}

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
    Reader r = {(const uint8_t *)PyBytes_AS_STRING(args[0]),
                (const uint8_t *)PyBytes_AS_STRING(args[0]) + PyBytes_GET_SIZE(args[0])};
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
        if (unix_nano(seconds, nanos, &ns)) {
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

static PyMethodDef methods[] = {
    {"transitions", (PyCFunction)(void (*)(void))transitions, METH_FASTCALL,
     "transitions(wire, field_number) -> [(time ns, state, None), ...] sorted, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_lifecycle_wire", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lifecycle_wire(void) { return PyModule_Create(&module_def); }
