/* OTLP messages written on the wire, shared by the compiled modules that write them: attribute
 * entries (KeyValue) and log records (logs.v1.LogRecord), fields in number order and defaults left
 * out, as upb writes them. */

#ifndef RAY_OTEL_EVENTS_OTLP_WIRE_H
#define RAY_OTEL_EVENTS_OTLP_WIRE_H

#include "protobuf_wire.h"

/* A length-delimited field with a one-byte key. */
static inline char *put_field(char *p, uint8_t tag, const char *data, Py_ssize_t n) {
    *p++ = (char)tag;
    p = put_varint(p, (uint64_t)n);
    return put(p, data, n);
}

/* A repeated KeyValue entry (`tag`, length, KeyValue{key = 1, value = 2}) up to its AnyValue's
 * bytes: the key `key_n` bytes of `key`, the AnyValue `any_n` bytes (the caller writes them next). */
static inline char *put_kv_head(char *p, uint8_t tag, const char *key, Py_ssize_t key_n, Py_ssize_t any_n) {
    *p++ = (char)tag;
    p = put_varint(p, (uint64_t)(field_size(key_n) + field_size(any_n)));
    *p++ = 0x0a;
    p = put_varint(p, (uint64_t)key_n);
    p = put(p, key, key_n);
    *p++ = 0x12;
    return put_varint(p, (uint64_t)any_n);
}

/* The size of that entry, whole. */
static inline Py_ssize_t kv_entry_size(Py_ssize_t key_n, Py_ssize_t any_n) {
    return field_size(field_size(key_n) + field_size(any_n));
}

/* Entries whose key is given as its encoded KeyValue.key field (0x0a, length, key: made once), each
 * a repeated KeyValue (`tag`) holding one AnyValue. */
static inline char *put_keyed_head(char *p, uint8_t tag, const char *key_field, Py_ssize_t key_field_n,
                                   Py_ssize_t any_n) {
    *p++ = (char)tag;
    p = put_varint(p, (uint64_t)(key_field_n + field_size(any_n)));
    p = put(p, key_field, key_field_n);
    *p++ = 0x12;
    return put_varint(p, (uint64_t)any_n);
}

/* AnyValue{string_value}: the `n` bytes of `text`, or their lowercase hex when `hex`. */
static inline int buf_text_entry(Buf *b, uint8_t tag, const char *key_field, Py_ssize_t key_field_n,
                                 const uint8_t *text, Py_ssize_t n, int hex) {
    Py_ssize_t text_n = hex ? 2 * n : n, any_n = field_size(text_n);
    if (buf_reserve(b, field_size(key_field_n + field_size(any_n))) < 0) return -1;
    char *p = put_keyed_head(b->data + b->len, tag, key_field, key_field_n, any_n);
    *p++ = 0x0a;
    p = put_varint(p, (uint64_t)text_n);
    if (hex) {
        static const char digits[] = "0123456789abcdef";
        for (Py_ssize_t i = 0; i < n; i++) {
            *p++ = digits[text[i] >> 4];
            *p++ = digits[text[i] & 15];
        }
    } else {
        p = put(p, (const char *)text, n);
    }
    b->len = p - b->data;
    return 0;
}

/* AnyValue{int_value} (int64, two's complement) or, `boolean`, AnyValue{bool_value}. */
static inline int buf_number_entry(Buf *b, uint8_t tag, const char *key_field, Py_ssize_t key_field_n,
                                   int64_t value, int boolean) {
    uint64_t bits = (uint64_t)value;
    Py_ssize_t any_n = 1 + varint_size(bits);
    if (buf_reserve(b, field_size(key_field_n + field_size(any_n))) < 0) return -1;
    char *p = put_keyed_head(b->data + b->len, tag, key_field, key_field_n, any_n);
    *p++ = boolean ? 0x10 : 0x18;
    b->len = put_varint(p, bits) - b->data;
    return 0;
}

/* -- log records: the attributes (field 6) are the caller's, written between head and tail ---- */

typedef struct {
    uint64_t time_ns, observed_ns, severity, flags;
    const char *severity_text, *event_name, *trace_id, *span_id;
    Py_ssize_t severity_n, event_n, trace_n, span_n;
    const char *body; /* the body's KeyValueList entries (an AnyValue kvlist); NULL: no body */
    Py_ssize_t body_n;
    Py_ssize_t attributes_n; /* the size of the encoded attribute entries */
} LogRecordParts;

static inline Py_ssize_t log_record_any_size(const LogRecordParts *r) { return field_size(r->body_n); }

static inline Py_ssize_t log_record_size(const LogRecordParts *r) {
    return (r->time_ns ? 9 : 0) + (r->severity ? 1 + varint_size(r->severity) : 0) +
           (r->severity_n ? field_size(r->severity_n) : 0) + (r->body ? field_size(log_record_any_size(r)) : 0) +
           r->attributes_n + (r->flags ? 5 : 0) + (r->trace_n ? field_size(r->trace_n) : 0) +
           (r->span_n ? field_size(r->span_n) : 0) + (r->observed_ns ? 9 : 0) + (r->event_n ? field_size(r->event_n) : 0);
}

/* Fields 1 (time), 2 (severity number), 3 (severity text) and 5 (body). */
static inline char *put_log_record_head(char *p, const LogRecordParts *r) {
    if (r->time_ns) {
        *p++ = 0x09; /* 1, fixed64 */
        p = put_fixed_bits(p, r->time_ns, 8);
    }
    if (r->severity) {
        *p++ = 0x10; /* 2 */
        p = put_varint(p, r->severity);
    }
    if (r->severity_n) p = put_field(p, 0x1a, r->severity_text, r->severity_n); /* 3 */
    if (r->body) {
        *p++ = 0x2a; /* 5: AnyValue{kvlist_value = 6} */
        p = put_varint(p, (uint64_t)log_record_any_size(r));
        p = put_field(p, 0x32, r->body, r->body_n);
    }
    return p;
}

/* Fields 8 (flags), 9 (trace id), 10 (span id), 11 (observed time) and 12 (event name). */
static inline char *put_log_record_tail(char *p, const LogRecordParts *r) {
    if (r->flags) {
        *p++ = 0x45; /* 8, fixed32 */
        p = put_fixed_bits(p, r->flags, 4);
    }
    if (r->trace_n) p = put_field(p, 0x4a, r->trace_id, r->trace_n); /* 9 */
    if (r->span_n) p = put_field(p, 0x52, r->span_id, r->span_n);    /* 10 */
    if (r->observed_ns) {
        *p++ = 0x59; /* 11, fixed64 */
        p = put_fixed_bits(p, r->observed_ns, 8);
    }
    if (r->event_n) p = put_field(p, 0x62, r->event_name, r->event_n); /* 12 */
    return p;
}

#endif
