/* Protobuf wire-format helpers shared by the compiled modules (otel/_record_walk.c,
 * encoding/_ray_json_wire.c): varints and a growing byte buffer. */

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

static inline char *put_varint(char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

static inline char *put(char *p, const char *data, Py_ssize_t n) {
    memcpy(p, data, (size_t)n);
    return p + n;
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
    memcpy(b->data + b->len, PyBytes_AS_STRING(bytes), (size_t)n);
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

#endif
