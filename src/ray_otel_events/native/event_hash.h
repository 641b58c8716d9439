/* The 64-bit hash a stored row keeps of each event id folded into it (store/kept_ids.py is its
 * Python twin): BLAKE2b (RFC 7693) with an 8-byte digest, no key, over the id's UTF-8, read as a
 * little-endian integer; a row keeps its hashes as 8 little-endian bytes each.
 *
 * Why BLAKE2b-64: the ids are chosen by whoever POSTs the events, and a collision inside one row's
 * few ids would make the fold skip an event as a duplicate. With the code public, a fixed key hides
 * nothing, so what matters is that finding an id with a given id's hash costs ~2^64 work whatever the
 * key: a cryptographic hash gives that (SipHash promises it only while its key is secret). Python's
 * hashlib has BLAKE2b built in (hashlib.blake2b(data, digest_size=8)), so the pure-Python store needs
 * no hash of its own and the tests check this code against an independent implementation. One
 * compression for an id up to 128 bytes (Ray's are 40 characters): a fraction of a microsecond.
 *
 * The spool reader (_spool_lines.c) takes the same digest of 24 bytes for the task ids it derives
 * (task_spans.derive_task_id: hashlib.blake2b(digest_size=8) there too). */

#ifndef RAY_OTEL_EVENTS_EVENT_HASH_H
#define RAY_OTEL_EVENTS_EVENT_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EVENT_HASH_BYTES 8

static const uint64_t event_hash_iv[8] = {
    0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL, 0x3c6ef372fe94f82bULL, 0xa54ff53a5f1d36f1ULL,
    0x510e527fade682d1ULL, 0x9b05688c2b3e6c1fULL, 0x1f83d9abfb41bd6bULL, 0x5be0cd19137e2179ULL,
};

static const uint8_t event_hash_sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
};

static inline uint64_t event_hash_rotr(uint64_t w, unsigned c) { return (w >> c) | (w << (64 - c)); }

/* 8 bytes at `p` as a little-endian integer (any machine's order, any alignment). */
static inline uint64_t event_hash_load(const uint8_t *p) {
    uint64_t w = 0;
    for (unsigned i = 0; i < 8; i++) w |= (uint64_t)p[i] << (8 * i);
    return w;
}

/* `h` as the 8 little-endian bytes a row keeps. */
static inline void event_hash_store(uint64_t h, uint8_t *out) {
    for (unsigned i = 0; i < 8; i++) out[i] = (uint8_t)(h >> (8 * i));
}

#define EVENT_HASH_G(a, b, c, d, x, y)                                                                                 \
    do {                                                                                                               \
        v[a] = v[a] + v[b] + (x);                                                                                      \
        v[d] = event_hash_rotr(v[d] ^ v[a], 32);                                                                       \
        v[c] = v[c] + v[d];                                                                                            \
        v[b] = event_hash_rotr(v[b] ^ v[c], 24);                                                                       \
        v[a] = v[a] + v[b] + (y);                                                                                      \
        v[d] = event_hash_rotr(v[d] ^ v[a], 16);                                                                       \
        v[c] = v[c] + v[d];                                                                                            \
        v[b] = event_hash_rotr(v[b] ^ v[c], 63);                                                                       \
    } while (0)

/* BLAKE2b's compression F of one 128-byte block; `t`: the bytes hashed so far, this block's included
 * (the ids hashed are far shorter than 2^64 bytes: the counter's high word stays 0). */
static inline void event_hash_compress(uint64_t h[8], const uint8_t block[128], uint64_t t, int last) {
    uint64_t v[16], m[16];
    for (unsigned i = 0; i < 16; i++) m[i] = event_hash_load(block + 8 * i);
    for (unsigned i = 0; i < 8; i++) {
        v[i] = h[i];
        v[i + 8] = event_hash_iv[i];
    }
    v[12] ^= t;
    if (last) v[14] = ~v[14];
    for (unsigned r = 0; r < 12; r++) {
        const uint8_t *s = event_hash_sigma[r];
        EVENT_HASH_G(0, 4, 8, 12, m[s[0]], m[s[1]]);
        EVENT_HASH_G(1, 5, 9, 13, m[s[2]], m[s[3]]);
        EVENT_HASH_G(2, 6, 10, 14, m[s[4]], m[s[5]]);
        EVENT_HASH_G(3, 7, 11, 15, m[s[6]], m[s[7]]);
        EVENT_HASH_G(0, 5, 10, 15, m[s[8]], m[s[9]]);
        EVENT_HASH_G(1, 6, 11, 12, m[s[10]], m[s[11]]);
        EVENT_HASH_G(2, 7, 8, 13, m[s[12]], m[s[13]]);
        EVENT_HASH_G(3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for (unsigned i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
}

#undef EVENT_HASH_G

/* The hash of an event id's `n` bytes of UTF-8 (kept_ids.event_hash). */
static inline uint64_t event_hash(const char *id, size_t n) {
    const uint8_t *p = (const uint8_t *)id;
    uint64_t h[8];
    memcpy(h, event_hash_iv, sizeof h);
    h[0] ^= 0x01010000ULL ^ EVENT_HASH_BYTES; /* depth 1, fanout 1, no key, an 8-byte digest */
    uint64_t t = 0;
    while (n > 128) {
        t += 128;
        event_hash_compress(h, p, t, 0);
        p += 128;
        n -= 128;
    }
    uint8_t last[128] = {0};
    if (n) memcpy(last, p, n);
    t += n;
    event_hash_compress(h, last, t, 1);
    return h[0]; /* the digest's 8 bytes, little-endian */
}

#endif
