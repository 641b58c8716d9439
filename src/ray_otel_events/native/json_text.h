/* JSON text as orjson writes it, for the compiled modules that write JSON (native/_span_records.c,
 * native/_ray_json_encode.c): their output must equal orjson.dumps of what the Python twin builds. */

#ifndef RAY_OTEL_EVENTS_JSON_TEXT_H
#define RAY_OTEL_EVENTS_JSON_TEXT_H

#include <stdarg.h>

#include "protobuf_wire.h"

#define LEAVE 1 /* what a writer returns for input it leaves to its Python twin; -1 is an error */

static inline int out(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    if (n > 0) memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

#define OUT(b, literal) out(b, literal, sizeof(literal) - 1)

/* An int64 in decimal, as orjson and "%lld" write it, at `o` (room for 20 bytes); its end. Not
 * snprintf, which costs many times more a call (bench/HISTORY.md). */
static inline char *put_decimal(char *o, int64_t v) {
    uint64_t magnitude = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude);
    if (v < 0) *o++ = '-';
    while (n) *o++ = digits[--n];
    return o;
}

/* The length of the UTF-8 sequence of a non-ASCII byte at s (n bytes left), strictly (no overlong
 * forms, no surrogates), or 0 when it is not one. */
static inline int utf8_sequence(const uint8_t *s, Py_ssize_t n) {
    uint8_t c = s[0];
    int more;
    uint8_t low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        more = 2;
        if (c == 0xE0) low = 0xA0;
        if (c == 0xED) high = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        more = 3;
        if (c == 0xF0) low = 0x90;
        if (c == 0xF4) high = 0x8F;
    } else {
        return 0;
    }
    if (n <= more || s[1] < low || s[1] > high) return 0;
    for (int k = 2; k <= more; k++)
        if (s[k] < 0x80 || s[k] > 0xBF) return 0;
    return more + 1;
}

static inline int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) { /* most text is ASCII: a word at a time while it is */
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (!(word & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_sequence(s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

/* `c` (a control character, `"` or `\`) escaped as orjson escapes it, at `o`, which has room for
 * 6 bytes; returns its end. */
static inline char *put_escape(char *o, unsigned c) {
    *o++ = '\\';
    switch (c) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '\b': *o++ = 'b'; break;
    case '\t': *o++ = 't'; break;
    case '\n': *o++ = 'n'; break;
    case '\f': *o++ = 'f'; break;
    case '\r': *o++ = 'r'; break;
    default:
        *o++ = 'u';
        *o++ = '0';
        *o++ = '0';
        *o++ = "0123456789abcdef"[c >> 4];
        *o++ = "0123456789abcdef"[c & 15];
    }
    return o;
}

/* A JSON string as orjson writes one (`n` bytes of valid UTF-8 at `s`), quotes included, at `o`,
 * which has room for 2 + 6 * n bytes; returns its end. `"` and `\` escaped, control characters as
 * \b \t \n \f \r or \u00xx, everything else (non-ASCII too) as it is. Needs no GIL. */
static inline char *put_string_json(char *o, const uint8_t *s, Py_ssize_t n) {
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        o = put_escape(o, c);
    }
    *o++ = '"';
    return o;
}

/* `put_string_json` of `text` into `b`; LEAVE when it is not valid UTF-8. */
static inline int string_json(Buf *b, Reader text) {
    const uint8_t *s = text.p;
    Py_ssize_t n = text.end - text.p;
    if (!utf8_valid(s, n)) return LEAVE;
    if (buf_reserve(b, 2 + 6 * n) < 0) return -1;
    b->len = put_string_json(b->data + b->len, s, n) - b->data;
    return 0;
}

static inline int base64_json(Buf *b, Reader data) {
    Py_ssize_t n = data.end - data.p;
    if (buf_reserve(b, 2 + base64_size(n)) < 0) return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    o = put_base64(o, data.p, n);
    *o++ = '"';
    b->len = o - b->data;
    return 0;
}

/* A number with a little text around it (under NUMBER_ROOM bytes in all). */
#define NUMBER_ROOM 64
static inline int number_json(Buf *b, const char *format, ...) {
    if (buf_reserve(b, NUMBER_ROOM) < 0) return -1;
    va_list args;
    va_start(args, format);
    int n = vsnprintf(b->data + b->len, NUMBER_ROOM, format, args);
    va_end(args);
    if (n < 0 || n >= NUMBER_ROOM) {
        PyErr_SetString(PyExc_SystemError, "_span_records: number text too long");
        return -1;
    }
    b->len += n;
    return 0;
}


/* A double as orjson writes it (`dumps` is orjson.dumps; NaN and infinities become null). */
static inline int double_json(Buf *b, uint64_t bits, PyObject *dumps) {
    double d;
    memcpy(&d, &bits, 8);
    PyObject *value = PyFloat_FromDouble(d);
    PyObject *text = value == NULL ? NULL : PyObject_CallOneArg(dumps, value);
    Py_XDECREF(value);
    if (text == NULL) return -1;
    int failed = PyBytes_Check(text) ? buf_bytes(b, text) : -1;
    Py_DECREF(text);
    return failed;
}

#endif
