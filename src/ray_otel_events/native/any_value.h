/* OTLP AnyValue's members (opentelemetry/proto/common/v1/common.proto), by field number, for the
 * two modules that read AnyValues from wire bytes (_any_value_wire.c, _log_events.c). Each exports
 * them (export_any_value_members, from its PyInit), and plain_records.ANY_VALUE_MEMBERS, made from
 * AnyValue's descriptor, is checked against them at import. */
#ifndef RAY_OTEL_EVENTS_ANY_VALUE_H
#define RAY_OTEL_EVENTS_ANY_VALUE_H

#include "named_numbers.h"

/* A_NONE: no member (or one these modules do not read). */
enum { A_NONE, A_STRING, A_BOOL, A_INT, A_DOUBLE, A_ARRAY, A_KVLIST, A_BYTES };

static PyObject *export_any_value_members(PyObject *m) {
    static const NamedNumber numbers[] = {
        NAMED_NUMBER(A_STRING), NAMED_NUMBER(A_BOOL),   NAMED_NUMBER(A_INT),   NAMED_NUMBER(A_DOUBLE),
        NAMED_NUMBER(A_ARRAY),  NAMED_NUMBER(A_KVLIST), NAMED_NUMBER(A_BYTES),
    };
    return export_numbers(m, numbers, sizeof(numbers) / sizeof(numbers[0]));
}

#endif
