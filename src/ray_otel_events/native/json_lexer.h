/* JSON text read as orjson reads it, for the compiled modules that read a POST's text: the bridge's
 * token stream (native/_posted_events.c) and serve's tree of nodes (native/_post_fold.c). Each piece
 * takes the text at `p` (up to `end`) and returns where its token ends, or NULL for text orjson
 * refuses or may read otherwise (the module then leaves it to orjson): whitespace, strings (UTF-8
 * checked, escapes and surrogate pairs; decoded), numbers (the grammar; integers in int64, floats
 * finite), literals and whole values. Need no GIL. */

#ifndef RAY_OTEL_EVENTS_JSON_LEXER_H
#define RAY_OTEL_EVENTS_JSON_LEXER_H

#include <stdint.h>
#include <string.h>

#include "json_text.h"

#define JSON_INLINE static inline __attribute__((always_inline))

JSON_INLINE int json_is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

JSON_INLINE int json_is_space(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

JSON_INLINE const uint8_t *json_space(const uint8_t *p, const uint8_t *end) {
    while (p < end && json_is_space(*p)) p++;
    return p;
}

/* Four hex digits at `s`: the code unit, or -1. */
static inline int32_t json_hex4(const uint8_t *s) {
    int32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

#define JSON_ONES 0x0101010101010101ULL

/* The place of the first quote, backslash, control character or non-ASCII byte among the 8 bytes
 * at `s` (little-endian), or 8: the "has a byte under n" tests of bit twiddling, whose lowest flag
 * is exact (a borrow only flags bytes above the first hit). A string's plain bytes are skipped 8
 * at a time. */
JSON_INLINE unsigned json_special8(const uint8_t *s) {
    uint64_t w;
    memcpy(&w, s, 8);
    uint64_t quote = w ^ (JSON_ONES * '"'), backslash = w ^ (JSON_ONES * '\\');
    uint64_t hits =
        ((quote - JSON_ONES) & ~quote) | ((backslash - JSON_ONES) & ~backslash) | ((w - JSON_ONES * 0x20) & ~w) | w;
    hits &= JSON_ONES * 0x80;
    return hits ? (unsigned)__builtin_ctzll(hits) >> 3 : 8;
}

/* Past the escape at `s` (its backslash), or NULL for one orjson refuses: an unknown escape, bad
 * hex digits, a lone surrogate (a high one not followed by an escaped low one). */
JSON_INLINE const uint8_t *json_escape(const uint8_t *s, const uint8_t *end) {
    if (end - s < 2) return NULL;
    switch (s[1]) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't': return s + 2;
    case 'u': break;
    default: return NULL;
    }
    int32_t u = end - s >= 6 ? json_hex4(s + 2) : -1;
    if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return NULL;
    if (u < 0xD800 || u > 0xDBFF) return s + 6;
    int32_t low = end - s >= 12 && s[6] == '\\' && s[7] == 'u' ? json_hex4(s + 8) : -1;
    return low >= 0xDC00 && low <= 0xDFFF ? s + 12 : NULL;
}

/* The string whose opening quote is at `p`, checked as orjson reads it: its closing quote, or NULL
 * (bad UTF-8, a control character, a bad escape, no end). `*escape`: its first backslash, or NULL
 * when it has none (its text is then its UTF-8 as it is). */
JSON_INLINE const uint8_t *json_string(const uint8_t *p, const uint8_t *end, const uint8_t **escape) {
    const uint8_t *s = p + 1;
    *escape = NULL;
    for (;;) {
        while (end - s >= 8) {
            unsigned skip = json_special8(s);
            s += skip;
            if (skip < 8) break;
        }
        if (s >= end) return NULL;
        uint8_t c = *s;
        if (c == '"') return s;
        if (c >= 0x80) {
            int k = utf8_sequence(s, end - s);
            if (!k) return NULL;
            s += k;
        } else if (c == '\\') {
            if (*escape == NULL) *escape = s;
            if ((s = json_escape(s, end)) == NULL) return NULL;
        } else if (c < 0x20) {
            return NULL;
        } else {
            s++; /* the last few bytes, one at a time */
        }
    }
}

/* The UTF-8 of a string's text checked by json_string ([s, end): its quotes left out), escapes
 * decoded, at `o`, which has room for end - s bytes (never more: an escape only gets shorter); its
 * end. */
static inline char *json_unescape(const uint8_t *s, const uint8_t *end, char *o) {
    while (s < end) {
        uint8_t c = *s;
        if (c != '\\') {
            *o++ = (char)c;
            s++;
            continue;
        }
        uint8_t e = s[1];
        if (e != 'u') {
            *o++ = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : (char)e;
            s += 2;
            continue;
        }
        uint32_t u = (uint32_t)json_hex4(s + 2);
        s += 6;
        if (u >= 0xD800 && u <= 0xDBFF) { /* checked: an escaped low surrogate follows */
            u = 0x10000 + ((u - 0xD800) << 10) + ((uint32_t)json_hex4(s + 2) - 0xDC00);
            s += 6;
        }
        if (u < 0x80) {
            *o++ = (char)u;
        } else if (u < 0x800) {
            *o++ = (char)(0xC0 | u >> 6);
            *o++ = (char)(0x80 | (u & 0x3F));
        } else if (u < 0x10000) {
            *o++ = (char)(0xE0 | u >> 12);
            *o++ = (char)(0x80 | (u >> 6 & 0x3F));
            *o++ = (char)(0x80 | (u & 0x3F));
        } else {
            *o++ = (char)(0xF0 | u >> 18);
            *o++ = (char)(0x80 | (u >> 12 & 0x3F));
            *o++ = (char)(0x80 | (u >> 6 & 0x3F));
            *o++ = (char)(0x80 | (u & 0x3F));
        }
    }
    return o;
}

/* What json_number found: an integer's sign and magnitude (`overflow`: past uint64), or a float
 * (a fraction or an exponent: orjson reads it as one). */
typedef struct {
    uint64_t magnitude;
    int negative, is_float, overflow;
} JsonNumber;

/* The number at `p` in JSON's grammar (no leading zero, no lone point, no '+'): past it, or NULL. */
JSON_INLINE const uint8_t *json_number(const uint8_t *p, const uint8_t *end, JsonNumber *n) {
    n->negative = p < end && *p == '-';
    n->is_float = n->overflow = 0;
    n->magnitude = 0;
    if (n->negative) p++;
    if (p >= end || !json_is_digit(*p)) return NULL;
    if (*p == '0') {
        if (++p < end && json_is_digit(*p)) return NULL;
    } else {
        uint64_t magnitude = 0;
        while (p < end && json_is_digit(*p)) {
            unsigned digit = *p++ - '0';
            if (magnitude > (UINT64_MAX - digit) / 10) n->overflow = 1;
            else magnitude = magnitude * 10 + digit;
        }
        n->magnitude = magnitude;
    }
    if (p < end && *p == '.') {
        if (++p >= end || !json_is_digit(*p)) return NULL;
        while (p < end && json_is_digit(*p)) p++;
        n->is_float = 1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !json_is_digit(*p)) return NULL;
        while (p < end && json_is_digit(*p)) p++;
        n->is_float = 1;
    }
    return p;
}

/* An integer json_number read, as an int64: 0, or -1 past int64's range (orjson reads that as a
 * uint64 or a float: left to it). */
JSON_INLINE int json_int64(const JsonNumber *n, int64_t *out) {
    if (n->overflow || n->magnitude > (uint64_t)INT64_MAX + (n->negative ? 1 : 0)) return -1;
    *out = n->negative ? (int64_t)(0 - n->magnitude) : (int64_t)n->magnitude;
    return 0;
}

/* Whether a float's text (`n` bytes, json_number's grammar) reads as a finite double (orjson refuses
 * infinite ones, and reads as Python's float() does): under `limit`, 2^1024 - 2^970, half way from
 * DBL_MAX to 2^1024, the least number that reads as infinity (a tie rounds to the even 2^1024). */
static inline int json_float_finite(const uint8_t *s, size_t n) {
    static const char limit[] =
        "179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017"
        "977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273"
        "854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704"
        "342711559699508093042880177904174497792";
    const int64_t limit_n = sizeof limit - 1;
    size_t i = s[0] == '-', first = 0;
    int64_t place = 0; /* 10^(place - 1) <= |x| < 10^place */
    int seen = 0;
    for (; i < n && json_is_digit(s[i]); i++) {
        if (!seen && s[i] != '0') seen = 1, first = i;
        place += seen;
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && json_is_digit(s[i]); i++) {
            if (seen) continue;
            if (s[i] == '0') place--;
            else seen = 1, first = i;
        }
    }
    if (!seen) return 1; /* zero */
    size_t digits_end = i;
    if (i < n) { /* an exponent */
        i++;
        int negative = s[i] == '-';
        if (s[i] == '+' || s[i] == '-') i++;
        int64_t exponent = 0;
        for (; i < n; i++) exponent = exponent < 100000 ? exponent * 10 + (s[i] - '0') : exponent;
        place += negative ? -exponent : exponent;
    }
    if (place != limit_n) return place < limit_n;
    /* as many digits before the point as the limit: its digits compared, then zeros */
    int64_t k = 0;
    for (i = first; i < digits_end; i++) {
        if (s[i] == '.') continue;
        if (k == limit_n) {
            if (s[i] != '0') return 0;
        } else if ((char)s[i] != limit[k]) {
            return (char)s[i] < limit[k];
        } else {
            k++;
        }
    }
    return k < limit_n;
}

/* `true`, `false` or `null` at `p` (at its first letter): past it, or NULL. */
JSON_INLINE const uint8_t *json_literal(const uint8_t *p, const uint8_t *end) {
    size_t left = (size_t)(end - p); /* each word compared at its constant size: no call */
    switch (*p) {
    case 't': return left >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f': return left >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    default: return left >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
    }
}

/* Past the value at `p` (no space before it), checked as orjson reads it and as both readers take
 * it (integers in int64, floats finite; anything else left to orjson), arrays and objects
 * nested at most `depth` deep: or NULL. No node, token or decoded string is made. */
static inline const uint8_t *json_skip_value(const uint8_t *p, const uint8_t *end, int depth) {
    if (p >= end) return NULL;
    const uint8_t *escape;
    uint8_t c = *p;
    if (c == '"') {
        const uint8_t *close = json_string(p, end, &escape);
        return close ? close + 1 : NULL;
    }
    if (c == 't' || c == 'f' || c == 'n') return json_literal(p, end);
    if (c != '[' && c != '{') {
        JsonNumber n;
        int64_t v;
        const uint8_t *stop = json_number(p, end, &n);
        if (stop == NULL) return NULL;
        if (n.is_float ? !json_float_finite(p, (size_t)(stop - p)) : json_int64(&n, &v) < 0) return NULL;
        return stop;
    }
    if (depth <= 0) return NULL;
    uint8_t close = c == '[' ? ']' : '}';
    p = json_space(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (close == '}') {
            if (p >= end || *p != '"' || (p = json_string(p, end, &escape)) == NULL) return NULL;
            p = json_space(p + 1, end);
            if (p >= end || *p != ':') return NULL;
            p = json_space(p + 1, end);
        }
        if ((p = json_skip_value(p, end, depth - 1)) == NULL) return NULL;
        p = json_space(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = json_space(p + 1, end);
    }
}

#endif
