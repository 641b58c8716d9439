/* The field kinds and labels of ray_json_decode's wire schema (ray_json_decode.WireField), which
 * the compiled RayEvent JSON readers (_ray_json_wire.c, _log_events.c, _posted_events.c) read
 * their fields by. One definition: each of those modules exports these numbers under their names
 * (export_wire_kinds, from its PyInit), and ray_json_decode.check_wire_kinds (native.check_numbers) refuses a module whose
 * numbers are not its own. */
#ifndef RAY_OTEL_EVENTS_WIRE_SCHEMA_H
#define RAY_OTEL_EVENTS_WIRE_SCHEMA_H

#include "named_numbers.h"

/* Field kinds: ray_json_decode.K_*. */
enum { K_FALLBACK, K_STRING, K_BYTES, K_BOOL, K_INT, K_DOUBLE, K_FLOAT, K_ENUM, K_MESSAGE, K_TIMESTAMP };
/* Labels: ray_json_decode.SINGULAR, REPEATED, MAP. */
enum { SINGULAR, REPEATED, MAP };
/* A field's items: ray_json_decode.WireField (number, kind, label, low, high, extra, oneof). */
enum { F_NUMBER, F_KIND, F_LABEL, F_LOW, F_HIGH, F_EXTRA, F_ONEOF, F_SIZE };

/* The module `m` made, with the numbers above as its attributes (NULL and `m` released on error). */
static PyObject *export_wire_kinds(PyObject *m) {
    static const NamedNumber numbers[] = {
        NAMED_NUMBER(K_FALLBACK), NAMED_NUMBER(K_STRING), NAMED_NUMBER(K_BYTES),     NAMED_NUMBER(K_BOOL),
        NAMED_NUMBER(K_INT),      NAMED_NUMBER(K_DOUBLE), NAMED_NUMBER(K_FLOAT),     NAMED_NUMBER(K_ENUM),
        NAMED_NUMBER(K_MESSAGE),  NAMED_NUMBER(K_TIMESTAMP), NAMED_NUMBER(SINGULAR), NAMED_NUMBER(REPEATED),
        NAMED_NUMBER(MAP),        NAMED_NUMBER(F_SIZE),
    };
    return export_numbers(m, numbers, sizeof(numbers) / sizeof(numbers[0]));
}

#endif
