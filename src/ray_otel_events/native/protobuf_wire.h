/* Protobuf wire-format helpers shared by the compiled modules: varints, a growing byte buffer, and a
 * reader that walks a message's fields. */

#ifndef RAY_OTEL_EVENTS_PROTOBUF_WIRE_H
#define RAY_OTEL_EVENTS_PROTOBUF_WIRE_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline Py_ssize_t varint_size(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The size of a length-delimited field with a one-byte key and an `n`-byte payload. */
static inline Py_ssize_t field_size(Py_ssize_t n) { return 1 + varint_size((uint64_t)n) + n; }

static inline char *put_varint(char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* Every copy of a possibly empty buffer checks its length first: an empty Buf's data is NULL, and
 * memcpy from NULL is undefined even for 0 bytes. */
static inline char *put(char *p, const char *data, Py_ssize_t n) {
    if (n > 0) memcpy(p, data, (size_t)n);
    return p + n;
}

/* A fixed32 or fixed64 value (`size` 4 or 8), little-endian. */
static inline char *put_fixed_bits(char *p, uint64_t bits, int size) {
    for (int i = 0; i < size; i++) *p++ = (char)(bits >> (8 * i) & 0xff);
    return p;
}

/* A growing byte string (PyMem): one message's fields, one object's entries. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 512;
    while (cap < b->len + extra) cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_bytes(Buf *b, PyObject *bytes) {
    Py_ssize_t n = PyBytes_GET_SIZE(bytes);
    if (buf_reserve(b, n) < 0) return -1;
    if (n > 0) memcpy(b->data + b->len, PyBytes_AS_STRING(bytes), (size_t)n);
    b->len += n;
    return 0;
}

/* A varint key or value. */
static inline int buf_varint(Buf *b, uint64_t v) {
    if (buf_reserve(b, 10) < 0) return -1;
    b->len = put_varint(b->data + b->len, v) - b->data;
    return 0;
}

/* A length-delimited field of any number: key varint, length, payload. */
static inline int buf_field(Buf *b, uint32_t number, const char *payload, Py_ssize_t n) {
    if (buf_reserve(b, 15 + n) < 0) return -1;
    char *p = b->data + b->len;
    p = put_varint(p, ((uint64_t)number << 3) | 2);
    p = put_varint(p, (uint64_t)n);
    p = put(p, payload, n);
    b->len = p - b->data;
    return 0;
}

/* A varint field of any number. */
static inline int buf_varint_field(Buf *b, uint32_t number, uint64_t value) {
    return buf_varint(b, (uint64_t)number << 3) < 0 ? -1 : buf_varint(b, value);
}

/* A fixed64 (`size` 8) or fixed32 (`size` 4) field of any number. */
static inline int buf_fixed_field(Buf *b, uint32_t number, uint64_t bits, int size) {
    if (buf_varint(b, ((uint64_t)number << 3) | (size == 8 ? 1 : 5)) < 0 || buf_reserve(b, size) < 0) return -1;
    b->len = put_fixed_bits(b->data + b->len, bits, size) - b->data;
    return 0;
}

/* Base64 (standard alphabet, padded), as protobuf's JSON and OTLP's write bytes. */
static inline Py_ssize_t base64_size(Py_ssize_t n) { return 4 * ((n + 2) / 3); }

static inline char *put_base64(char *o, const uint8_t *data, Py_ssize_t n) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16 | (uint32_t)data[i + 1] << 8 | data[i + 2];
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = alphabet[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)data[i] << 16 | (i + 1 < n ? (uint32_t)data[i + 1] << 8 : 0);
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    return o;
}

static const unsigned char base64_digits_plus_one[256] = {
    ['A'] = 1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
    ['a'] = 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,
    ['0'] = 53, 54, 55, 56, 57, 58, 59, 60, 61, 62,
    ['+'] = 63,
    ['/'] = 64,
};

/* A base64 digit's value, -1 for any other byte (the table holds value + 1 so that every byte it
 * does not name is 0 without initialising an entry twice). */
static inline int base64_digit(unsigned char c) { return (int)base64_digits_plus_one[c] - 1; }

/* The size of what `text` decodes to, if it is standard padded base64 (groups of four, '=' only in
 * the last: what `base64.b64decode(..., validate=True)` takes and ray_json_decode's pattern allows;
 * the unused bits of a last partial group may be anything, as there), else -1. */
static inline Py_ssize_t base64_decoded_size(const char *text, Py_ssize_t n) {
    if (n % 4) return -1;
    Py_ssize_t padding = n && text[n - 1] == '=' ? (text[n - 2] == '=' ? 2 : 1) : 0;
    for (Py_ssize_t i = 0; i < n - padding; i++)
        if (base64_digit((unsigned char)text[i]) < 0) return -1;
    return n / 4 * 3 - padding;
}

/* Decodes text that base64_decoded_size accepted. */
static inline char *put_base64_decoded(char *o, const char *text, Py_ssize_t n) {
    const unsigned char *s = (const unsigned char *)text;
    for (Py_ssize_t i = 0; i < n; i += 4) {
        uint32_t v = (uint32_t)base64_digit(s[i]) << 18 | (uint32_t)base64_digit(s[i + 1]) << 12;
        *o++ = (char)(v >> 16);
        if (s[i + 2] == '=') break;
        v |= (uint32_t)base64_digit(s[i + 2]) << 6;
        *o++ = (char)(v >> 8 & 0xff);
        if (s[i + 3] == '=') break;
        v |= (uint32_t)base64_digit(s[i + 3]);
        *o++ = (char)(v & 0xff);
    }
    return o;
}

/* A bytes field of any number from its standard padded base64 text: 0, 1 when the text is not
 * that (base64_decoded_size), -1 on memory. */
static inline int buf_base64_field(Buf *b, uint32_t number, const char *text, Py_ssize_t n) {
    Py_ssize_t size = base64_decoded_size(text, n);
    if (size < 0) return 1;
    if (buf_reserve(b, 20 + size) < 0) return -1;
    char *p = put_varint(b->data + b->len, ((uint64_t)number << 3) | 2);
    p = put_varint(p, (uint64_t)size);
    b->len = put_base64_decoded(p, text, n) - b->data;
    return 0;
}

/* -- reading ---------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
} Reader;

/* The bytes of a bytes object, to read. */
static inline Reader bytes_reader(PyObject *bytes) {
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(bytes);
    return (Reader){p, p + PyBytes_GET_SIZE(bytes)};
}

/* A bytes object, or a str (UTF-8, strictly: NULL with the error otherwise), of what `r` holds.
 * NULL without a call when an error is already pending: several are made as the arguments of one
 * Py_BuildValue("N...") (which returns NULL for a NULL one), and none may call the C API after
 * another failed. */
static inline PyObject *reader_bytes(Reader r) {
    return PyErr_Occurred() ? NULL : PyBytes_FromStringAndSize((const char *)r.p, r.end - r.p);
}

static inline PyObject *reader_text(Reader r) {
    return PyErr_Occurred() ? NULL : PyUnicode_DecodeUTF8((const char *)r.p, r.end - r.p, NULL);
}

static inline int malformed(void) {
    PyErr_SetString(PyExc_ValueError, "malformed protobuf wire bytes");
    return -1;
}

static inline int read_varint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return malformed();
        uint8_t byte = *r->p++;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (byte < 0x80) {
            *out = v;
            return 0;
        }
    }
    return malformed();
}

/* One field: its number, wire type, and (length-delimited) payload, (group) body between its start
 * and end tags, or (varint, fixed) value. */
typedef struct {
    uint32_t number;
    int wire_type;
    Reader payload;
    uint64_t scalar;
} Field;

/* How deep groups may nest, counted from the bytes a reader is handed: upb's default depth limit. */
#define WIRE_GROUP_DEPTH_MAX 100

/* A key as upb reads one: a varint of at most 5 bytes and 32 bits, so field numbers up to 2^29-1. */
static inline int read_key(Reader *r, uint32_t *number, int *wire_type) {
    uint64_t key = 0;
    for (int i = 0; i < 5; i++) {
        if (r->p >= r->end) return malformed();
        uint8_t byte = *r->p++;
        key |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (byte < 0x80) {
            if (key > UINT32_MAX) return malformed();
            *number = (uint32_t)(key >> 3);
            *wire_type = (int)(key & 7);
            return 0;
        }
    }
    return malformed();
}

/* The fields of a group up to its end tag, which must carry the group's number (`end_tag`: where
 * that tag starts); `depth`: the groups open, this one included. upb skips them without looking
 * at their numbers, so field number 0 passes. Out of line: groups are rare, and the fields that
 * are not stay a loop without calls. */
static __attribute__((noinline)) int skip_group(Reader *r, uint32_t number, int depth, const uint8_t **end_tag) {
    if (depth > WIRE_GROUP_DEPTH_MAX) return malformed();
    for (;;) {
        const uint8_t *at = r->p, *inner_end;
        uint32_t inner;
        int wire_type;
        uint64_t n;
        if (read_key(r, &inner, &wire_type) < 0) return -1;
        switch (wire_type) {
        case 0:
            if (read_varint(r, &n) < 0) return -1;
            break;
        case 1:
        case 5:
            if (r->end - r->p < (wire_type == 1 ? 8 : 4)) return malformed();
            r->p += wire_type == 1 ? 8 : 4;
            break;
        case 2:
            if (read_varint(r, &n) < 0) return -1;
            if ((uint64_t)(r->end - r->p) < n) return malformed();
            r->p += n;
            break;
        case 3:
            if (skip_group(r, inner, depth + 1, &inner_end) < 0) return -1;
            break;
        case 4:
            *end_tag = at;
            return inner == number ? 0 : malformed();
        default:
            return malformed();
        }
    }
}

/* The value of a field whose key `f` holds: a group is skipped whole (its body in `payload`), as
 * upb keeps it among the unknown fields; an end tag with no group open, wire types 6 and 7 are
 * malformed. */
static inline int read_value(Reader *r, Field *f) {
    f->scalar = 0; /* the part its wire type does not set is empty, never left unset */
    f->payload = (Reader){r->p, r->p};
    switch (f->wire_type) {
    case 0:
        return read_varint(r, &f->scalar);
    case 1:
    case 5: {
        int size = f->wire_type == 1 ? 8 : 4;
        if (r->end - r->p < size) return malformed();
        uint64_t v = 0;
        for (int i = 0; i < size; i++) v |= (uint64_t)r->p[i] << (8 * i);
        r->p += size;
        f->scalar = v;
        return 0;
    }
    case 2: {
        uint64_t n;
        if (read_varint(r, &n) < 0) return -1;
        if ((uint64_t)(r->end - r->p) < n) return malformed();
        f->payload.p = r->p;
        f->payload.end = r->p + n;
        r->p += n;
        return 0;
    }
    case 3: {
        const uint8_t *body = r->p, *end_tag;
        if (skip_group(r, f->number, 1, &end_tag) < 0) return -1;
        f->payload.p = body;
        f->payload.end = end_tag;
        return 0;
    }
    default:
        return malformed();
    }
}

/* The next field as upb reads it: field number 0 is malformed too. */
static inline int next_field(Reader *r, Field *f) {
    if (read_key(r, &f->number, &f->wire_type) < 0) return -1;
    return f->number == 0 ? malformed() : read_value(r, f);
}

/* A google.protobuf.Timestamp{seconds = 1, nanos = 2} merged into (seconds, nanos), as protobuf
 * merges a message given twice: 0; 1 when field 1 or 2 has another wire type (the caller leaves
 * the message to Python); -1 on malformed bytes. */
static inline int read_timestamp(Reader r, int64_t *seconds, int32_t *nanos) {
    while (r.p < r.end) {
        Field f;
        if (next_field(&r, &f) < 0) return -1;
        if (f.number == 1 || f.number == 2) {
            if (f.wire_type != 0) return 1;
            if (f.number == 1) *seconds = (int64_t)f.scalar;
            else *nanos = (int32_t)f.scalar;
        }
    }
    return 0;
}

/* What a Timestamp may hold (years 1 to 9999; what json_format and ToNanoseconds accept). */
static inline int timestamp_in_range(int64_t seconds, int32_t nanos) {
    return seconds >= -62135596800LL && seconds <= 253402300799LL && nanos >= 0 && nanos <= 999999999;
}

/* otlp_wire.unix_nano: the time OTLP can carry (before 1970 or past 2^64 ns: 0, its "unknown");
 * 1 for a Timestamp out of range. */
static inline int timestamp_unix_nano(int64_t seconds, int32_t nanos, uint64_t *out) {
    if (!timestamp_in_range(seconds, nanos)) return 1;
    if (seconds < 0) {
        *out = 0;
        return 0;
    }
    unsigned __int128 ns = (unsigned __int128)seconds * 1000000000u + (unsigned __int128)nanos;
    *out = ns > UINT64_MAX ? 0 : (uint64_t)ns;
    return 0;
}

#endif
