/* JSON arrays' items deflated as one array (raw deflate), with no Python object and no GIL: the
 * store's raw events (raw_events.compress_python is the Python twin, byte for byte). Shared by
 * _raw_deflate.c and the row writer, which compresses a fold batch's bodies on its own thread. */

#ifndef RAY_OTEL_EVENTS_RAW_DEFLATE_H
#define RAY_OTEL_EVENTS_RAW_DEFLATE_H

#include <Python.h>
#include <limits.h>
#include <string.h>
#include <zlib.h>

/* Raw deflate (no zlib header, no Adler-32), 32 KiB window. Level 5: on a real stream 16% fewer
 * bytes than level 1 for ~8 us more an event (bench/RESULTS.md, soak); raw_events.LEVEL too.
 * A blob is RAW_FORMAT_V1 then the deflate stream primed with the dictionary the caller passes
 * (raw_events.RAW_DICTIONARY): no raw deflate stream starts with that byte (BTYPE 11), so a blob
 * written before it (no dictionary) is still told apart (raw_events.decompress). */
#define RAW_WBITS (-15)
#define RAW_LEVEL 5
#define RAW_FORMAT_V1 0x06

typedef struct {
    const unsigned char *data;
    size_t len;
} RawPart;

/* The items of a JSON array's text: between its first '[' and its last ']'; empty when only
 * white space is there (or either bracket is missing). */
static inline RawPart raw_inner(const unsigned char *text, size_t len) {
    RawPart none = {text, 0};
    const unsigned char *open = memchr(text, '[', len);
    if (open == NULL) return none;
    size_t end = len;
    while (end > 0 && text[end - 1] != ']') end--;
    if (end == 0 || text + end - 1 <= open) return none;
    const unsigned char *start = open + 1, *stop = text + end - 1;
    const unsigned char *p = start;
    while (p < stop && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p == stop) return none;
    return (RawPart){start, (size_t)(stop - start)};
}

static inline int raw_feed(z_stream *z, const unsigned char *data, size_t len) {
    z->next_in = (unsigned char *)data;
    z->avail_in = (uInt)len;
    return deflate(z, Z_NO_FLUSH) == Z_OK ? 0 : -1;
}

/* RAW_FORMAT_V1, then `[` + the parts' items joined by `,` + `]` deflated with `dictionary` (at
 * most 32 KiB: deflate reaches no further back), into a buffer of PyMem_RawMalloc (the caller
 * frees it): 0, or -1 (too large, or out of memory). Needs no GIL. */
static inline int raw_deflate(const RawPart *parts, Py_ssize_t n, const unsigned char *dictionary, size_t dictionary_len,
                              unsigned char **out, size_t *out_len) {
    size_t total = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        total += parts[i].len + 1;
        if (parts[i].len > UINT_MAX || total > UINT_MAX / 2) return -1;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (dictionary_len > 32768) return -1;
    if (deflateInit2(&z, RAW_LEVEL, Z_DEFLATED, RAW_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
    if (dictionary_len && deflateSetDictionary(&z, dictionary, (uInt)dictionary_len) != Z_OK) {
        deflateEnd(&z);
        return -1;
    }
    uLong bound = deflateBound(&z, (uLong)total) + 1;
    unsigned char *buffer = PyMem_RawMalloc(bound);
    if (buffer == NULL) {
        deflateEnd(&z);
        return -1;
    }
    buffer[0] = RAW_FORMAT_V1;
    z.next_out = buffer + 1;
    z.avail_out = (uInt)(bound - 1);
    int first = 1, failed = raw_feed(&z, (const unsigned char *)"[", 1);
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        if (parts[i].len == 0) continue;
        if (!first) failed = raw_feed(&z, (const unsigned char *)",", 1);
        if (!failed) failed = raw_feed(&z, parts[i].data, parts[i].len);
        first = 0;
    }
    if (!failed) {
        z.next_in = (unsigned char *)"]";
        z.avail_in = 1;
        failed = deflate(&z, Z_FINISH) != Z_STREAM_END; /* the bound leaves room: it ends here */
    }
    *out_len = bound - z.avail_out;
    deflateEnd(&z);
    if (failed) {
        PyMem_RawFree(buffer);
        return -1;
    }
    *out = buffer;
    return 0;
}

#endif
