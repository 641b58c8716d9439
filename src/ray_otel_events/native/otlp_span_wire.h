/* An OTLP Span's (trace.v1.Span) own fields read from its wire bytes, shared by the compiled modules
 * that read spans (native/_any_value_wire.c, native/_span_records.c): as upb keeps them, a field seen
 * twice is the last. Its attributes (9), events (11) and links (13) are the caller's to walk. */

#ifndef RAY_OTEL_EVENTS_OTLP_SPAN_WIRE_H
#define RAY_OTEL_EVENTS_OTLP_SPAN_WIRE_H

#include "protobuf_wire.h"

typedef struct {
    Reader trace_id, span_id, trace_state, parent, name, status_message;
    uint64_t kind, start, end, status_code;
} SpanFields;

static inline int read_span_fields(Reader r, SpanFields *s) {
    Reader none = {(const uint8_t *)"", (const uint8_t *)""};
    s->trace_id = s->span_id = s->trace_state = s->parent = s->name = s->status_message = none;
    s->kind = s->start = s->end = s->status_code = 0;
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.wire_type == 2) {
            switch (f.number) {
            case 1: s->trace_id = f.payload; break;
            case 2: s->span_id = f.payload; break;
            case 3: s->trace_state = f.payload; break;
            case 4: s->parent = f.payload; break;
            case 5: s->name = f.payload; break;
            case 15: /* Status: message = 2, code = 3 */
                for (Reader status = f.payload; status.p < status.end;) {
                    Field g;
                    if (next_field(&status, &g) < 0) return -1;
                    if (g.number == 2 && g.wire_type == 2) s->status_message = g.payload;
                    if (g.number == 3 && g.wire_type == 0) s->status_code = g.scalar;
                }
                break;
            default: break;
            }
        } else if (f.number == 6 && f.wire_type == 0) {
            s->kind = f.scalar;
        } else if (f.number == 7 && f.wire_type == 1) {
            s->start = f.scalar;
        } else if (f.number == 8 && f.wire_type == 1) {
            s->end = f.scalar;
        }
    }
    return 0;
}

#endif
