/* A state row's JSON packed as the store keeps it (store/row_packing.py is the Python twin, and
 * says why): a format byte, the text's length (uint32, little-endian), then its raw deflate (32 KiB
 * window) primed with the row dictionary the store passes in, which a ROW_PACKED_V2 row follows with
 * its own ids (row_ids_text: its key columns' ids, as its JSON holds them). The row
 * writer packs (on its own thread), the compiled fold unpacks the rows it reads; each keeps one
 * z_stream, reset per row. */

#ifndef RAY_OTEL_EVENTS_ROW_PACKING_H
#define RAY_OTEL_EVENTS_ROW_PACKING_H

#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define ROW_PACKED_V1 1
#define ROW_PACKED_V2 2
#define ROW_PACKED_HEAD 5
#define ROW_PACKED_LEVEL 6
#define ROW_PACKED_MAX_TEXT (256u * 1024u * 1024u) /* a longer unpacked length is a damaged blob */

typedef struct {
    z_stream z;
    int ready; /* deflateInit2 / inflateInit2 succeeded */
    unsigned char *dictionary; /* the store's, then room for a row's ids (ROW_IDS_TEXT_MAX) */
    uInt dictionary_len;
    unsigned char *out; /* the packer's buffer, grown as rows need */
    size_t out_cap;
} RowPacker;

#define ROW_ID_MAX 1024 /* longer hex texts are stored as text */

/* A ROW_PACKED_V2 row's ids (row_packing.ROW_ID_PREFIXES): its entity id, node and worker, each
 * as its JSON holds it: this prefix, its lower-case hex, a quote. */
#define ROW_IDS 3
static const char *const ROW_ID_PREFIXES[ROW_IDS] = {"\"", "\"node_id\":\"", "\"worker_id\":\""};
#define ROW_IDS_TEXT_MAX (ROW_IDS * (sizeof "\"worker_id\":\"" + ROW_ID_MAX + 1))

/* A row's ids as its dictionary takes them (row_packing.row_ids_text's twin): `ids[i]` (`lens[i]`
 * bytes, 1 to ROW_ID_MAX / 2; else: the column holds no id; a hex text is passed as its bytes,
 * row_id_bytes) as text into `out` (room for ROW_IDS_TEXT_MAX); its length. */
static inline size_t row_ids_text(const unsigned char *const ids[ROW_IDS], const size_t lens[ROW_IDS], char *out) {
    static const char digits[] = "0123456789abcdef";
    size_t n = 0;
    for (int i = 0; i < ROW_IDS; i++) {
        if (ids[i] == NULL || lens[i] == 0 || lens[i] > ROW_ID_MAX / 2) continue;
        size_t prefix = strlen(ROW_ID_PREFIXES[i]);
        memcpy(out + n, ROW_ID_PREFIXES[i], prefix);
        n += prefix;
        for (size_t k = 0; k < lens[i]; k++) {
            out[n++] = digits[ids[i][k] >> 4];
            out[n++] = digits[ids[i][k] & 15];
        }
        out[n++] = '"';
    }
    return n;
}

/* A hex text's bytes into `out` (row_packing.id_value's twin): its length, or -1 when the text is
 * not one (empty, odd, longer than ROW_ID_MAX, or a character not a hex digit). The row writer
 * stores ids so; the compiled fold looks rows up by them. */
static inline int row_id_bytes(const char *text, size_t len, unsigned char *out) {
    if (len == 0 || len % 2 || len > ROW_ID_MAX) return -1;
    for (size_t i = 0; i < len; i += 2) {
        int high = -1, low = -1;
        for (size_t k = 0; k < 2; k++) {
            unsigned char c = (unsigned char)text[i + k];
            int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (v < 0) return -1;
            if (k == 0) high = v;
            else low = v;
        }
        out[i / 2] = (unsigned char)(high << 4 | low);
    }
    return (int)(len / 2);
}

/* A stored id column's value as a row's dictionary takes it (row_packing.row_ids_text): a blob's
 * bytes, a hex text's bytes (row_id_bytes, into `scratch`: ROW_ID_MAX / 2 bytes), else no id
 * (*id NULL, *id_len 0). The row writer reads its bound values so, the compiled fold its columns. */
static inline void row_id_value(int is_text, const void *data, size_t len, unsigned char *scratch,
                                const unsigned char **id, size_t *id_len) {
    *id = NULL;
    *id_len = 0;
    if (data == NULL || len == 0) return;
    if (!is_text) {
        *id = data;
        *id_len = len;
        return;
    }
    int n = row_id_bytes(data, len, scratch);
    if (n > 0) {
        *id = scratch;
        *id_len = (size_t)n;
    }
}

/* Keep a copy of `dictionary` (any thread may use it later), with room for a row's ids after it.
 * 0, or -1 (no memory). */
static inline int row_packer_dictionary(RowPacker *p, const char *dictionary, size_t len) {
    if (len > UINT32_MAX - ROW_IDS_TEXT_MAX) return 0;
    p->dictionary = PyMem_RawMalloc(len + ROW_IDS_TEXT_MAX);
    if (p->dictionary == NULL) return -1;
    if (len) memcpy(p->dictionary, dictionary, len);
    p->dictionary_len = (uInt)len;
    return 0;
}

/* The dictionary of a row of format `version`: the store's, and for ROW_PACKED_V2 the row's ids
 * (`ids_text`, `ids_len` bytes of row_ids_text) after it, in the packer's room for them. */
static inline uInt row_dictionary(RowPacker *p, int version, const char *ids_text, size_t ids_len) {
    if (version != ROW_PACKED_V2 || p->dictionary == NULL || ids_len > ROW_IDS_TEXT_MAX) return p->dictionary_len;
    if (ids_len) memcpy(p->dictionary + p->dictionary_len, ids_text, ids_len);
    return p->dictionary_len + (uInt)ids_len;
}

/* `text` packed into the packer's buffer (*out, *out_len: valid until the next call): 0, or -1.
 * `ids_text` (`ids_len` bytes of row_ids_text): ROW_PACKED_V2; NULL: ROW_PACKED_V1. */
static inline int row_pack(RowPacker *p, const char *text, size_t len, const char *ids_text, size_t ids_len,
                           const unsigned char **out, size_t *out_len) {
    if (len > ROW_PACKED_MAX_TEXT || ids_len > ROW_IDS_TEXT_MAX) return -1;
    int version = ids_text == NULL ? ROW_PACKED_V1 : ROW_PACKED_V2;
    uInt dictionary_len = row_dictionary(p, version, ids_text, ids_len);
    if (!p->ready) {
        memset(&p->z, 0, sizeof p->z);
        if (deflateInit2(&p->z, ROW_PACKED_LEVEL, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) return -1;
        p->ready = 1;
    } else if (deflateReset(&p->z) != Z_OK) {
        return -1;
    }
    if (dictionary_len && deflateSetDictionary(&p->z, p->dictionary, dictionary_len) != Z_OK) return -1;
    size_t need = ROW_PACKED_HEAD + deflateBound(&p->z, (uLong)len);
    if (need > p->out_cap) {
        unsigned char *grown = PyMem_RawRealloc(p->out, need);
        if (grown == NULL) return -1;
        p->out = grown;
        p->out_cap = need;
    }
    p->out[0] = (unsigned char)version;
    for (int i = 0; i < 4; i++) p->out[1 + i] = (unsigned char)((uint32_t)len >> (8 * i));
    p->z.next_in = (Bytef *)text;
    p->z.avail_in = (uInt)len;
    p->z.next_out = p->out + ROW_PACKED_HEAD;
    p->z.avail_out = (uInt)(p->out_cap - ROW_PACKED_HEAD);
    if (deflate(&p->z, Z_FINISH) != Z_STREAM_END) return -1;
    *out = p->out;
    *out_len = ROW_PACKED_HEAD + p->z.total_out;
    return 0;
}

/* The unpacked length of a packed blob, or -1 when it is not one this build reads. */
static inline int64_t row_packed_length(const unsigned char *blob, size_t len) {
    if (len < ROW_PACKED_HEAD || (blob[0] != ROW_PACKED_V1 && blob[0] != ROW_PACKED_V2)) return -1;
    uint32_t n = 0;
    for (int i = 0; i < 4; i++) n |= (uint32_t)blob[1 + i] << (8 * i);
    return n > ROW_PACKED_MAX_TEXT ? -1 : (int64_t)n;
}

/* A packed blob's text into `out` (its `row_packed_length` bytes): 0, or -1 when damaged.
 * `ids_text` (`ids_len` bytes of row_ids_text): the row's ids as read beside it, which a
 * ROW_PACKED_V2 blob's dictionary ends with. */
static inline int row_unpack(RowPacker *p, const unsigned char *blob, size_t len, const char *ids_text, size_t ids_len,
                             char *out, size_t out_len) {
    if (len > UINT32_MAX || len < ROW_PACKED_HEAD || ids_len > ROW_IDS_TEXT_MAX) return -1;
    uInt dictionary_len = row_dictionary(p, blob[0], ids_text, ids_len);
    if (!p->ready) {
        memset(&p->z, 0, sizeof p->z);
        if (inflateInit2(&p->z, -15) != Z_OK) return -1;
        p->ready = 1;
    } else if (inflateReset(&p->z) != Z_OK) {
        return -1;
    }
    /* Raw inflate takes its dictionary before the data (no Z_NEED_DICT without a zlib header). */
    if (dictionary_len && inflateSetDictionary(&p->z, p->dictionary, dictionary_len) != Z_OK) return -1;
    p->z.next_in = (Bytef *)(blob + ROW_PACKED_HEAD);
    p->z.avail_in = (uInt)(len - ROW_PACKED_HEAD);
    p->z.next_out = (Bytef *)out;
    p->z.avail_out = (uInt)out_len;
    int rc = inflate(&p->z, Z_FINISH);
    return rc == Z_STREAM_END && p->z.total_out == out_len ? 0 : -1;
}

/* Free what the packer holds; `inflating` says which kind its stream is. */
static inline void row_packer_free(RowPacker *p, int inflating) {
    if (p->ready) {
        if (inflating) inflateEnd(&p->z);
        else deflateEnd(&p->z);
    }
    PyMem_RawFree(p->dictionary);
    PyMem_RawFree(p->out);
    memset(p, 0, sizeof *p);
}

#endif
