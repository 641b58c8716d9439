/* The fields of Ray's messages a module reads, by full name, numbered from the protobuf descriptors
 * when its twin binds it: nothing of Ray's schema typed in C. A module defines RAY_FIELD_NAMES(X),
 * one X(ID, "full.name") a field, then includes this header; its PyInit exports the names
 * (export_ray_fields: RAY_FIELDS), its binding function (`_entity_spans.bind`,
 * `_event_head.bind_fields`) passes {full name: number} (the twin makes it with
 * protobuf._pool.field_numbers) to bind_ray_fields, and RAY(ID) is then that field's number. */
#ifndef RAY_OTEL_EVENTS_RAY_FIELDS_H
#define RAY_OTEL_EVENTS_RAY_FIELDS_H

#ifndef RAY_FIELD_NAMES
#error "define RAY_FIELD_NAMES(X) before including ray_fields.h"
#endif

#include <Python.h>
#include <stdint.h>

#define RAY_FIELD_ENUM(id, name) RF_##id,
#define RAY_FIELD_NAME(id, name) name,
enum { RAY_FIELD_NAMES(RAY_FIELD_ENUM) N_RAY_FIELDS };
static const char *const ray_field_names[N_RAY_FIELDS] = {RAY_FIELD_NAMES(RAY_FIELD_NAME)};
static uint32_t ray_field[N_RAY_FIELDS]; /* numbers, by RF_*; set by bind() */
#define RAY(id) ray_field[RF_##id]

/* Each name of RAY_FIELD_NAMES numbered by `numbers` ({full name: number}), each number one upb
 * reads. */
static int bind_ray_fields(PyObject *numbers) {
    if (!PyDict_Check(numbers)) {
        PyErr_SetString(PyExc_TypeError, "ray_fields is a dict {full name: number}");
        return -1;
    }
    for (int i = 0; i < N_RAY_FIELDS; i++) {
        PyObject *number = PyDict_GetItemString(numbers, ray_field_names[i]);
        long n = number != NULL && PyLong_Check(number) ? PyLong_AsLong(number) : -1;
        if (n < 1 || n > 536870911) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "ray_fields: no field number for %s", ray_field_names[i]);
            return -1;
        }
        ray_field[i] = (uint32_t)n;
    }
    return 0;
}

/* RAY_FIELDS: the full names of the fields of Ray's messages read here (bind() takes their numbers). */
static int export_ray_fields(PyObject *module) {
    PyObject *names = PyTuple_New(N_RAY_FIELDS);
    if (names == NULL) return -1;
    for (int i = 0; i < N_RAY_FIELDS; i++) {
        PyObject *name = PyUnicode_FromString(ray_field_names[i]);
        if (name == NULL) {
            Py_DECREF(names);
            return -1;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    int added = PyModule_AddObjectRef(module, "RAY_FIELDS", names);
    Py_DECREF(names);
    return added;
}

#endif
