/* The field kinds and labels of ray_json_decode's wire schema (ray_json_decode.WireField), which
 * the compiled RayEvent JSON readers (_ray_json_wire.c, _log_events.c, _posted_events.c) read
 * their fields by. One definition: each of those modules exports these numbers under their names
 * (export_wire_kinds, from its PyInit), and ray_json_decode.check_wire_kinds refuses a module whose
 * numbers are not its own. */
#ifndef RAY_OTEL_EVENTS_WIRE_SCHEMA_H
#define RAY_OTEL_EVENTS_WIRE_SCHEMA_H

#include <Python.h>

/* Field kinds: ray_json_decode.K_*. */
enum { K_FALLBACK, K_STRING, K_BYTES, K_BOOL, K_INT, K_DOUBLE, K_FLOAT, K_ENUM, K_MESSAGE, K_TIMESTAMP };
/* Labels: ray_json_decode.SINGULAR, REPEATED, MAP. */
enum { SINGULAR, REPEATED, MAP };
/* A field's items: ray_json_decode.WireField (number, kind, label, low, high, extra, oneof). */
enum { F_NUMBER, F_KIND, F_LABEL, F_LOW, F_HIGH, F_EXTRA, F_ONEOF, F_SIZE };

/* The module `m` made, with the numbers above as its attributes (NULL and `m` released on error). */
static PyObject *export_wire_kinds(PyObject *m) {
#define WIRE_KIND(name) {#name, name}
    static const struct {
        const char *name;
        int value;
    } numbers[] = {
        WIRE_KIND(K_FALLBACK), WIRE_KIND(K_STRING), WIRE_KIND(K_BYTES),   WIRE_KIND(K_BOOL),
        WIRE_KIND(K_INT),      WIRE_KIND(K_DOUBLE), WIRE_KIND(K_FLOAT),   WIRE_KIND(K_ENUM),
        WIRE_KIND(K_MESSAGE),  WIRE_KIND(K_TIMESTAMP), WIRE_KIND(SINGULAR), WIRE_KIND(REPEATED),
        WIRE_KIND(MAP),        WIRE_KIND(F_SIZE),
    };
#undef WIRE_KIND
    if (m == NULL) return NULL;
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        if (PyModule_AddIntConstant(m, numbers[i].name, numbers[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}

#endif
