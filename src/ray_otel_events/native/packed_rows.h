/* Rows of SQL values packed in one buffer, as the store hands its upserts to its row writer
 * (native/_row_writer.c writes them; native/_post_fold.c packs them without the GIL): per value a tag
 * byte, then an int64 or a double (8 bytes, this machine's order) or a text or blob (a uint32
 * length, then its UTF-8 or bytes). The buffer is plain memory (PyMem_Raw*), so it is made and read on any thread. */

#ifndef RAY_OTEL_EVENTS_PACKED_ROWS_H
#define RAY_OTEL_EVENTS_PACKED_ROWS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { PACKED_NULL, PACKED_INT, PACKED_FLOAT, PACKED_TEXT, PACKED_BLOB };

/* A growing buffer of plain memory; `failed` once an allocation failed (everything after is
 * dropped, the owner checks it once at the end). */
typedef struct {
    char *data;
    size_t len, cap;
    int failed;
} RawBuf;

static inline int raw_reserve(RawBuf *b, size_t extra) {
    if (b->failed) return -1;
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *data = PyMem_RawRealloc(b->data, cap);
    if (data == NULL) {
        b->failed = 1;
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline void raw_put(RawBuf *b, const void *s, size_t n) {
    if (raw_reserve(b, n) < 0 || n == 0) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
}

static inline void raw_free(RawBuf *b) {
    PyMem_RawFree(b->data);
    *b = (RawBuf){0};
}

static inline void packed_null(RawBuf *b) {
    char tag = PACKED_NULL;
    raw_put(b, &tag, 1);
}

static inline void packed_int(RawBuf *b, int64_t v) {
    char tag = PACKED_INT;
    raw_put(b, &tag, 1);
    raw_put(b, &v, 8);
}

static inline void packed_float(RawBuf *b, double v) {
    char tag = PACKED_FLOAT;
    raw_put(b, &tag, 1);
    raw_put(b, &v, 8);
}

static inline void packed_text(RawBuf *b, const char *s, uint32_t n) {
    char tag = PACKED_TEXT;
    raw_put(b, &tag, 1);
    raw_put(b, &n, 4);
    raw_put(b, s, n);
}

static inline void packed_blob(RawBuf *b, const void *s, uint32_t n) {
    char tag = PACKED_BLOB;
    raw_put(b, &tag, 1);
    raw_put(b, &n, 4);
    raw_put(b, s, n);
}

/* One value read back at `p`: its tag and value (`text`, `len` point into the buffer); returns
 * where the next value starts. */
typedef struct {
    int tag;
    int64_t i;
    double d;
    const char *text;
    uint32_t len;
} PackedValue;

static inline const char *packed_read(const char *p, PackedValue *v) {
    *v = (PackedValue){.tag = *p++}; /* what its tag does not set is empty, never left unset */
    switch (v->tag) {
    case PACKED_INT: memcpy(&v->i, p, 8); return p + 8;
    case PACKED_FLOAT: memcpy(&v->d, p, 8); return p + 8;
    case PACKED_TEXT:
    case PACKED_BLOB:
        memcpy(&v->len, p, 4);
        v->text = p + 4;
        return p + 4 + v->len;
    default: return p;
    }
}

/* The row writer's entry for compiled callers, in a capsule (`RowWriter` module attribute
 * ROW_WRITER_QUEUE): queue `rows` packed rows for the open transaction of `writer` (a RowWriter),
 * taking `data` (PyMem_RawMalloc'd; the writer frees it). Callable without the GIL while the caller
 * holds a reference to `writer`. 0, or -1 (nothing taken) when the writer is closed. */
typedef int (*QueuePacked)(PyObject *writer, char *data, size_t size, Py_ssize_t rows);
#define ROW_WRITER_QUEUE "queue_packed"
#define ROW_WRITER_CAPSULE "ray_otel_events.native._row_writer." ROW_WRITER_QUEUE

#endif
