/* Numbers a header shares with Python, exported by a module under their C names so that its twin
 * checks them at import (native.check_numbers) and refuses a module built from other sources. */
#ifndef RAY_OTEL_EVENTS_NAMED_NUMBERS_H
#define RAY_OTEL_EVENTS_NAMED_NUMBERS_H

#include <Python.h>

typedef struct {
    const char *name;
    int value;
} NamedNumber;
#define NAMED_NUMBER(name) {#name, name}

/* The module `m` made, with `numbers` as its attributes (NULL and `m` released on error). */
static PyObject *export_numbers(PyObject *m, const NamedNumber *numbers, size_t count) {
    if (m == NULL) return NULL;
    for (size_t i = 0; i < count; i++) {
        if (PyModule_AddIntConstant(m, numbers[i].name, numbers[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}

#endif
