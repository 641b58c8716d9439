/* Values as RayEvent JSON holds them, read from their text, for the store's compiled folds
 * (native/_state_fold.c reads them from Python strings, native/_post_fold.c from a POST's text): ids
 * in base64 as Ray's hex, Ray's timestamps, integers printed as text. Each reads only the form Ray
 * prints and says so for any other (the Python twin decides those). Need no GIL. */

#ifndef RAY_OTEL_EVENTS_RAY_JSON_VALUES_H
#define RAY_OTEL_EVENTS_RAY_JSON_VALUES_H

#include <stdint.h>

#include "civil_dates.h"
#include "protobuf_wire.h"

/* The hex text of standard padded base64 (`n` bytes at `s`: groups of four, '=' only in the last,
 * what `binascii.a2b_base64(..., strict_mode=True)` takes and `base64_decoded_size` accepts),
 * written at `o` (two digits a byte: 3 * n / 2 bytes at most): its end, or NULL for any other text. */
static inline char *put_hex_of_base64(char *o, const char *s, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    if (n % 4) return NULL;
    const unsigned char *u = (const unsigned char *)s;
    Py_ssize_t padding = n && u[n - 1] == '=' ? (u[n - 2] == '=' ? 2 : 1) : 0;
    Py_ssize_t whole = padding ? n - 4 : n; /* groups of three bytes */
    for (Py_ssize_t i = 0; i < whole; i += 4) {
        int a = base64_digit(u[i]), b = base64_digit(u[i + 1]), c = base64_digit(u[i + 2]), d = base64_digit(u[i + 3]);
        if ((a | b | c | d) < 0) return NULL;
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
        for (int shift = 20; shift >= 0; shift -= 4) *o++ = digits[(v >> shift) & 15];
    }
    if (padding) { /* one byte (two '='), or two */
        int a = base64_digit(u[whole]), b = base64_digit(u[whole + 1]);
        int c = padding == 1 ? base64_digit(u[whole + 2]) : 0;
        if ((a | b | c) < 0) return NULL;
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6;
        for (int shift = 20; shift >= (padding == 1 ? 8 : 16); shift -= 4) *o++ = digits[(v >> shift) & 15];
    }
    return o;
}

/* `count` ASCII digits as a number: 0, or -1 if one is not a digit. */
static inline int ascii_digits(const unsigned char *s, int count, int *out) {
    int v = 0;
    for (int i = 0; i < count; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Ray's timestamp (`2026-11-22T01:37:30.525422162Z`: 30 characters, a real date) as ns since the
 * epoch: 0 and `*ns` set, or -1 for any other text. Years 1970..2261 (an int64 of ns). */
static inline int ray_time_ns_of(const unsigned char *s, Py_ssize_t n, int64_t *ns) {
    if (n != 30 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != '.' ||
        s[29] != 'Z')
        return -1;
    int year, month, day, hour, minute, second, fraction;
    if (ascii_digits(s, 4, &year) || ascii_digits(s + 5, 2, &month) || ascii_digits(s + 8, 2, &day) ||
        ascii_digits(s + 11, 2, &hour) || ascii_digits(s + 14, 2, &minute) || ascii_digits(s + 17, 2, &second) ||
        ascii_digits(s + 20, 9, &fraction))
        return -1;
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1970 || year > 2261 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 ||
        second > 59)
        return -1;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day > month_days[month - 1] + (month == 2 && leap)) return -1;
    int64_t seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
    *ns = seconds * 1000000000 + fraction;
    return 0;
}

/* An integer printed as text (1 to 18 ASCII digits, as proto JSON prints an int64 Ray sends as a
 * string): 0 and `*out` set, or -1 for any other text (Python's `int()` decides it). */
static inline int digits_int(const unsigned char *s, Py_ssize_t n, int64_t *out) {
    if (n == 0 || n > 18) return -1;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Integer text as the RayEvent JSON reader takes it (ray_json_decode._INT_TEXT: ASCII digits after
 * an optional '-') as sign and magnitude, -0 as 0: 0, or -1 for any other text or a magnitude past
 * uint64's. */
static inline int json_int_text(const uint8_t *s, Py_ssize_t n, int *negative, uint64_t *magnitude) {
    int minus = n > 0 && s[0] == '-';
    if (minus == n) return -1;
    uint64_t m = 0;
    for (Py_ssize_t i = minus; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        uint64_t digit = (uint64_t)(s[i] - '0');
        if (m > (UINT64_MAX - digit) / 10) return -1;
        m = m * 10 + digit;
    }
    *negative = minus && m != 0;
    *magnitude = m;
    return 0;
}

/* An integer (sign and magnitude) within a field's [low, high]: 0 and its varint bits, else -1. */
static inline int int_bits_within(int negative, uint64_t magnitude, long long low, unsigned long long high,
                                  uint64_t *bits) {
    if (negative) {
        if (magnitude > (low < 0 ? (uint64_t)0 - (uint64_t)low : 0)) return -1;
        *bits = (uint64_t)0 - magnitude;
    } else {
        if (magnitude > high) return -1;
        *bits = magnitude;
    }
    return 0;
}

/* A double field or (`float32`) a float field of the value `d`: 0, 1 when `d` is past a float's
 * range (the Python reader decides), -1 on memory. */
static inline int buf_real_field(Buf *b, uint32_t number, double d, int float32) {
    if (!float32) {
        uint64_t bits;
        memcpy(&bits, &d, 8);
        return buf_fixed_field(b, number, bits, 8);
    }
    if (d > 3.4028234663852886e38 || d < -3.4028234663852886e38) return 1;
    float f = (float)d;
    uint32_t bits32;
    memcpy(&bits32, &f, 4);
    return buf_fixed_field(b, number, bits32, 4);
}

/* Python's `//` of int64s. */
static inline int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

#endif
