/* The spool forwarder's lines, compiled: a chunk of span lines (tracing/spool.py's `span_line`) read
 * in one pass into each span's OTLP `ScopeSpans.spans` entry and the log records of the RayEvents a
 * normal task's spans imply, the bytes the Python path (tracing/forwarder.py, its twin) writes,
 * handed over framed as the requests' entries (a few spans to a bytes object, one record to one)
 * with their counts, so that Python only joins them.
 *
 * It takes what a traced task writes on the way: ended spans with no trace state, events or links,
 * an UNSET or OK status and plain attributes (strings, integers, booleans, nulls), the two spans of
 * a normal (function) task and the `["s", id]` start references. Records are written from templates
 * (`log_records.RecordShape`'s) the Python path makes on first need (the `miss` callback), kept per
 * shape of record. Anything else (an actor's span, a failed task, a float, a string with escapes
 * or non-ASCII text, white space, a number written otherwise) is handed back: `process` stops at
 * that line and returns its offset, and the Python path takes it. Spool files are written by other
 * processes: every byte is checked here. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "civil_dates.h"
#include "event_hash.h"
#include "protobuf_wire.h"

/* ---- one line, read strictly as orjson writes it ---- */

#define ATTRS_MAX 64
#define EVENTS_MAX 16

typedef struct {
    const char *p, *end;
} Cur;

typedef struct {
    const char *s;
    Py_ssize_t n;
} Str;

typedef enum { V_STR, V_INT, V_TRUE, V_FALSE, V_NULL } VKind;

typedef struct {
    Str key;
    VKind kind;
    Str text; /* V_STR */
    int64_t number;
} Attr;

typedef struct {
    char kind; /* 'E' or 's' */
    Str name;
    uint64_t trace_high, trace_low, span_id, flags, parent_id, start, end, dropped[3];
    int parent_remote;
    int64_t span_kind, code;
    Attr attrs[ATTRS_MAX];
    int n_attrs;
    struct {
        Str name;
        uint64_t time;
        int first, n; /* its attributes: ev_attrs[first .. first + n) */
    } events[EVENTS_MAX];
    int n_events;
    Attr ev_attrs[ATTRS_MAX];
    int n_ev_attrs;
    const char *scope_at; /* the three scope strings' text, as written */
    Py_ssize_t scope_len;
} Line;

static inline int lit(Cur *c, const char *text, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, text, (size_t)n) != 0) return 0;
    c->p += n;
    return 1;
}

/* Eight bytes at a time where the byte order allows (SWAR): a word's bytes tested at once. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORDS 1
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load8(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* Nonzero when a byte of `w` is 0 (exact as a yes or no). */
static inline uint64_t zero_byte(uint64_t w) { return (w - ONES) & ~w & HIGHS; }

/* Nonzero when a byte of `w` ends or may not be in a string `str` reads: '"', '\\', below 0x20 or
 * 0x7f and up. */
static inline uint64_t string_stop(uint64_t w) {
    return zero_byte(w ^ (ONES * '"')) | zero_byte(w ^ (ONES * '\\')) | zero_byte(w ^ (ONES * 0x7f)) |
           ((w - ONES * 0x20) & ~w & HIGHS) | (w & HIGHS);
}

/* The value of eight ASCII digits (checked by the caller), the first the most significant. */
static inline uint64_t eight_digits(uint64_t w) {
    w -= ONES * '0';
    w = w * 10 + (w >> 8);
    return (((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
            (((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >>
           32;
}

#else
#define WORDS 0
#endif

/* A string of printable ASCII without escapes (anything else: not ours to read). */
static int str(Cur *c, Str *out) {
    if (c->p >= c->end || *c->p != '"') return 0;
    const char *s = c->p + 1, *p = s;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20),
                  del = _mm_set1_epi8(0x7f);
    for (; c->end - p >= 16; p += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* (signed: below 0x20 is also 0x80 and up) */
        __m128i stops = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                     _mm_or_si128(_mm_cmplt_epi8(v, space), _mm_cmpeq_epi8(v, del)));
        int stop = _mm_movemask_epi8(stops);
        if (stop) {
            p += __builtin_ctz((unsigned)stop);
            goto stopped;
        }
    }
#endif
#if WORDS
    for (; c->end - p >= 8; p += 8) {
        uint64_t stop = string_stop(load8(p));
        if (stop) { /* its lowest flag is its first such byte */
            p += __builtin_ctzll(stop) >> 3;
            goto stopped;
        }
    }
#endif
    for (; p < c->end; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == '"' || (unsigned char)(ch - 0x20) >= 0x5f || ch == '\\') goto stopped;
    }
    return 0;
stopped:
    if (p >= c->end || *p != '"') return 0;
    out->s = s;
    out->n = p - s;
    c->p = p + 1;
    return 1;
}

/* An unsigned integer as JSON writes it (no leading zero, no sign), up to 2^64 - 1. */
static int u64(Cur *c, uint64_t *out) {
    const char *p = c->p;
    if (p >= c->end || *p < '0' || *p > '9') return 0;
    if (*p == '0') {
        c->p = p + 1;
        *out = 0;
        return c->p >= c->end || (*c->p < '0' || *c->p > '9');
    }
    uint64_t v = 0; /* (modulo 2^64: past 20 digits, or at 20 above 2^64 - 1, refused below) */
    const char *q = p;
    unsigned d;
#if WORDS
    static const uint64_t tens[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
    while (c->end - q >= 8) {
        uint64_t w = load8(q);
        /* a nonzero byte where a byte is no digit (a carry out of one only reaches those after it) */
        uint64_t no = ((w & (ONES * 0xf0)) ^ (ONES * 0x30)) | (((w + ONES * 0x06) & (ONES * 0xf0)) ^ (ONES * 0x30));
        if (no == 0) {
            v = v * 100000000ULL + eight_digits(w);
            q += 8;
            continue;
        }
        int k = __builtin_ctzll(no) >> 3; /* the digits at its start */
        if (k) {
            v = v * tens[k] + eight_digits((w << (8 * (8 - k))) | ((ONES * '0') >> (8 * k))); /* "000ddddd" */
            q += k;
        }
        goto read;
    }
#endif
    while (q < c->end && (d = (unsigned)(unsigned char)*q - '0') <= 9) {
        v = v * 10 + d;
        q++;
    }
#if WORDS
read:
#endif
    if (q - p > 20 || (q - p == 20 && memcmp(p, "18446744073709551615", 20) > 0)) return 0;
    c->p = q;
    *out = v;
    return q >= c->end || (*q != '.' && *q != 'e' && *q != 'E');
}

/* A signed integer in int64's range. */
static int i64(Cur *c, int64_t *out) {
    int negative = lit(c, "-", 1);
    uint64_t v;
    if (!u64(c, &v)) return 0;
    if (negative) {
        if (v == 0 || v > (uint64_t)INT64_MAX + 1) return 0; /* "-0": orjson reads 0, left to it */
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)v;
    }
    return 1;
}

/* A JSON object of plain values into `out` from `*n` on (at most ATTRS_MAX in all); `event`: an
event's attributes, which the SDK's Event cleans (no null value, no empty key): those are not ours. */
static int object(Cur *c, Attr *out, int *n, int event) {
    if (!lit(c, "{", 1)) return 0;
    int first = *n;
    if (lit(c, "}", 1)) return 1;
    for (;;) {
        if (*n >= ATTRS_MAX) return 0;
        Attr *a = &out[*n];
        if (!str(c, &a->key) || !lit(c, ":", 1) || (event && a->key.n == 0)) return 0;
        for (int i = first; i < *n; i++) /* a key given twice: orjson keeps the last, in the first's place */
            if (out[i].key.n == a->key.n && memcmp(out[i].key.s, a->key.s, (size_t)a->key.n) == 0) return 0;
        if (c->p >= c->end) return 0;
        if (*c->p == '"') {
            if (!str(c, &a->text)) return 0;
            a->kind = V_STR;
        } else if (lit(c, "true", 4)) {
            a->kind = V_TRUE;
        } else if (lit(c, "false", 5)) {
            a->kind = V_FALSE;
        } else if (!event && lit(c, "null", 4)) {
            a->kind = V_NULL;
        } else {
            if (!i64(c, &a->number)) return 0;
            a->kind = V_INT;
        }
        (*n)++;
        if (lit(c, "}", 1)) return 1;
        if (!lit(c, ",", 1)) return 0;
    }
}

static int attrs(Cur *c, Line *l) {
    l->n_attrs = 0;
    return object(c, l->attrs, &l->n_attrs, 0);
}

/* The events array: [] or [[name, time, {attributes}], ...]. */
static int events(Cur *c, Line *l) {
    l->n_events = 0;
    l->n_ev_attrs = 0;
    if (!lit(c, "[", 1)) return 0;
    if (lit(c, "]", 1)) return 1;
    for (;;) {
        if (l->n_events >= EVENTS_MAX) return 0;
        int e = l->n_events;
        l->events[e].first = l->n_ev_attrs;
        if (!(lit(c, "[", 1) && str(c, &l->events[e].name) && lit(c, ",", 1) && u64(c, &l->events[e].time) &&
              l->events[e].time <= (uint64_t)INT64_MAX && lit(c, ",", 1) &&
              object(c, l->ev_attrs, &l->n_ev_attrs, 1) && lit(c, "]", 1)))
            return 0;
        l->events[e].n = l->n_ev_attrs - l->events[e].first;
        l->n_events++;
        if (lit(c, "]", 1)) return 1;
        if (!lit(c, ",", 1)) return 0;
    }
}

/* 1: the line read into `l`; 0: not a line this module takes. */
static int read_line(const char *p, const char *end, Line *l) {
    Cur c = {p, end};
    if (lit(&c, "[\"s\",", 5)) {
        l->kind = 's';
        return u64(&c, &l->span_id) && lit(&c, "]", 1) && c.p == c.end;
    }
    if (lit(&c, "[\"E\",", 5)) l->kind = 'E';
    else if (lit(&c, "[\"S\",", 5)) l->kind = 'S'; /* a start line: no end yet (null) */
    else return 0;
    Str ignored;
    if (!(str(&c, &l->name) && lit(&c, ",", 1) && u64(&c, &l->trace_high) && lit(&c, ",", 1) &&
          u64(&c, &l->trace_low) && lit(&c, ",", 1) && u64(&c, &l->span_id) && lit(&c, ",", 1) &&
          u64(&c, &l->flags) && l->flags <= 255 && lit(&c, ",\"\",", 4) && u64(&c, &l->parent_id) && lit(&c, ",", 1)))
        return 0;
    if (lit(&c, "true", 4)) l->parent_remote = 1;
    else if (lit(&c, "false", 5)) l->parent_remote = 0;
    else return 0;
    if (!(lit(&c, ",", 1) && i64(&c, &l->span_kind) && l->span_kind >= 0 && l->span_kind <= 4 && lit(&c, ",", 1) &&
          u64(&c, &l->start) && l->start <= (uint64_t)INT64_MAX && lit(&c, ",", 1) &&
          ((l->kind == 'S' && lit(&c, "null", 4) && (l->end = 0, 1)) ||
           (u64(&c, &l->end) && l->end <= (uint64_t)INT64_MAX)) &&
          lit(&c, ",", 1) && i64(&c, &l->code) && (l->code == 0 || l->code == 1) &&
          lit(&c, ",", 1) && str(&c, &ignored) && lit(&c, ",", 1) && attrs(&c, l) && lit(&c, ",", 1) && events(&c, l) && lit(&c, ",[],", 4)))
        return 0;
    l->scope_at = c.p;
    if (!(str(&c, &ignored) && lit(&c, ",", 1) && str(&c, &ignored) && lit(&c, ",", 1) && str(&c, &ignored)))
        return 0;
    l->scope_len = c.p - l->scope_at;
    for (int i = 0; i < 3; i++) {
        if (!(lit(&c, ",", 1) && u64(&c, &l->dropped[i]) && l->dropped[i] <= (uint64_t)INT64_MAX)) return 0;
    }
    return lit(&c, "]", 1) && c.p == c.end;
}

static const Attr *attr(const Line *l, const char *key) {
    Py_ssize_t n = (Py_ssize_t)strlen(key);
    for (int i = 0; i < l->n_attrs; i++)
        if (l->attrs[i].key.n == n && memcmp(l->attrs[i].key.s, key, (size_t)n) == 0) return &l->attrs[i];
    return NULL;
}

static inline int ends_with(Str s, const char *suffix) {
    Py_ssize_t n = (Py_ssize_t)strlen(suffix);
    return s.n >= n && memcmp(s.s + s.n - n, suffix, (size_t)n) == 0;
}

static const signed char HEX[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16};

static inline int hex_digit(char ch) { return HEX[(unsigned char)ch] - 1; }

/* `bytes.fromhex` of text with no white space: the byte count, or -1 (not ours). */
static Py_ssize_t from_hex(Str s, uint8_t *out, Py_ssize_t cap) {
    if (s.n % 2 || s.n / 2 > cap) return -1;
    for (Py_ssize_t i = 0; i < s.n / 2; i++) {
        int hi = hex_digit(s.s[2 * i]), lo = hex_digit(s.s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return s.n / 2;
}

/* An optional id attribute (`task_spans._opt_hex`): 0 and its bytes in `out` (`*n` 0 when missing
 * or not text), -1 when text that is not plain hex (not ours). */
static int opt_hex(const Line *l, const char *key, uint8_t *out, Py_ssize_t cap, Py_ssize_t *n) {
    const Attr *a = attr(l, key);
    *n = 0;
    if (a == NULL || a->kind != V_STR) return 0; /* hex_or_empty: b"" */
    Py_ssize_t got = from_hex(a->text, out, cap);
    if (got < 0) return -1;
    *n = got;
    return 0;
}

/* ---- what the records need: a buffer of one record's values, and the text of times and ids ---- */

static void put_digits(char *o, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        o[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* `ray_json.timestamp_text`: the date and time to the second (kept for the last second seen), then
 * 0, 3, 6 or 9 fractional digits and 'Z'. */
static int put_timestamp_text(Buf *b, uint64_t ns) {
    static int64_t last_seconds = -1;
    static char prefix[20];
    int64_t seconds = (int64_t)(ns / 1000000000ULL);
    uint64_t nanos = ns % 1000000000ULL;
    if (seconds != last_seconds) {
        int64_t days = seconds / 86400, in_day = seconds % 86400;
        int64_t year;
        int month, day;
        civil_from_days(days, &year, &month, &day);
        put_digits(prefix, (uint64_t)year, 4);
        prefix[4] = '-';
        put_digits(prefix + 5, (uint64_t)month, 2);
        prefix[7] = '-';
        put_digits(prefix + 8, (uint64_t)day, 2);
        prefix[10] = 'T';
        put_digits(prefix + 11, (uint64_t)(in_day / 3600), 2);
        prefix[13] = ':';
        put_digits(prefix + 14, (uint64_t)(in_day / 60 % 60), 2);
        prefix[16] = ':';
        put_digits(prefix + 17, (uint64_t)(in_day % 60), 2);
        last_seconds = seconds;
    }
    if (buf_reserve(b, 40) < 0) return -1;
    char *o = put(b->data + b->len, prefix, 19);
    if (nanos % 1000) {
        *o++ = '.';
        put_digits(o, nanos, 9);
        o += 9;
    } else if (nanos % 1000000) {
        *o++ = '.';
        put_digits(o, nanos / 1000, 6);
        o += 6;
    } else if (nanos) {
        *o++ = '.';
        put_digits(o, nanos / 1000000, 3);
        o += 3;
    }
    *o++ = 'Z';
    b->len = o - b->data;
    return 0;
}

static int put_base64_text(Buf *b, const uint8_t *data, Py_ssize_t n) {
    if (buf_reserve(b, base64_size(n)) < 0) return -1;
    b->len = put_base64(b->data + b->len, data, n) - b->data;
    return 0;
}

static int put_hex_text(Buf *b, const uint8_t *data, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    if (buf_reserve(b, 2 * n) < 0) return -1;
    char *o = b->data + b->len;
    for (Py_ssize_t i = 0; i < n; i++) {
        *o++ = digits[data[i] >> 4];
        *o++ = digits[data[i] & 15];
    }
    b->len = o - b->data;
    return 0;
}

static int buf_put(Buf *b, const void *data, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    b->len = put(b->data + b->len, data, n) - b->data;
    return 0;
}

/* A key part: its length (two bytes) then its bytes. */
static int key_part(Buf *k, const void *data, Py_ssize_t n) {
    uint8_t head[2] = {(uint8_t)(n >> 8), (uint8_t)n};
    if (n > 0xffff) return -1;
    return buf_put(k, head, 2) < 0 || buf_put(k, data, n) < 0 ? -1 : 0;
}

/* ---- the context the Python path hands in (see `process`'s doc) ---- */

enum {
    C_BY_SCOPE,
    C_SCOPE_OF,
    C_SCOPE_FN,
    C_RECORDS,
    C_OPEN_BY_SPAN,
    C_OPEN_BY_RAY_ID,
    C_STARTED_REFS,
    C_TEMPLATES,
    C_MISS,
    C_EVENT_LOGS,
    C_OBSERVED,
    C_ENDS,
    C_SIZE
};

#define TEMPLATES_MAX 4096
#define CACHED 8
#define CACHED_KEY_MAX 192
#define PIECES_MAX 48
/* Spans handed over a few to an object: fewer objects than spans, small ones (callgrind, a task:
 * 1.5 KB 42.4k instructions, 3 KB 42.1k, 16 KB 43.5k; glibc's memcpy turns to `rep movsb` past
 * 2 KB here, which callgrind counts byte by byte, so larger objects count more in the join). */
#define SPANS_FLUSH 3072

/* A template `(pieces, order)` read once into C: its pieces (borrowed from `template`, which the
 * holder keeps), the value each piece is followed by, and the pieces' total size. */
typedef struct {
    PyObject *template;
    int n_order;
    const char *piece[PIECES_MAX];
    Py_ssize_t piece_n[PIECES_MAX];
    int order[PIECES_MAX];
    Py_ssize_t fixed;
} Template;

typedef struct {
    PyObject *by_scope, *scope_of, *scope_fn, *records, *open_by_span, *open_by_ray_id, *started_refs, *templates,
        *miss, *ends_box;
    int event_logs;
    uint64_t observed;
    /* The templates this call used last, by key: most records of a chunk hit one of a few, and a
     * hit here costs no key object, hash or dict lookup. Strong references, let go at the end. */
    struct {
        char key[CACHED_KEY_MAX];
        Py_ssize_t n;
        Template t;
    } cache[CACHED];
    int next_cached;
    /* The scope group the last span went to, by its scope's text as written (most lines of a chunk
     * share one scope): its spans list, a strong reference let go at the end. */
    const char *last_scope_at;
    Py_ssize_t last_scope_len;
    PyObject *last_spans;
    /* `ScopeSpans.spans` entries of the last scope group not yet handed over to `last_spans`: a
     * bytes object per few spans (SPANS_FLUSH bytes), not per span. */
    Buf spans_out;
    Py_ssize_t spans_made, records_made, record_bytes;
    /* The texts of the task id the last record held (a task's records come two at a time). */
    uint8_t text_id[24];
    char id_base64[32], id_hex[48];
    int has_text_id;
} Ctx;

/* A value slot: offsets into Ctx's value buffer. */
typedef struct {
    Py_ssize_t at[8], n[8];
    int count;
} Values;

static int value_begin(Values *v, Buf *b) {
    if (v->count >= 8) return -1;
    v->at[v->count] = b->len;
    return 0;
}

static void value_end(Values *v, Buf *b) {
    v->n[v->count] = b->len - v->at[v->count];
    v->count++;
}

/* A template as the Python path hands it: a tuple (pieces: tuple of bytes, order: tuple of ints),
 * or None (no template for this shape: every record of it comes from `miss`). */
static int template_ok(PyObject *t) {
    if (t == Py_None) return 1;
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 2) return 0;
    PyObject *pieces = PyTuple_GET_ITEM(t, 0), *order = PyTuple_GET_ITEM(t, 1);
    if (!PyTuple_CheckExact(pieces) || !PyTuple_CheckExact(order)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pieces); i++)
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(pieces, i))) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(order); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(order, i))) return 0;
    return 1;
}

/* `template` (checked by `template_ok`, not None) read into `out` for records of `count` values:
 * 0, 1 when it has more pieces than a Template holds (its records then come from `miss`), -1 an
 * error. */
static int template_read(PyObject *template, int count, Template *out) {
    PyObject *pieces = PyTuple_GET_ITEM(template, 0), *order = PyTuple_GET_ITEM(template, 1);
    Py_ssize_t n_pieces = PyTuple_GET_SIZE(pieces), n_order = PyTuple_GET_SIZE(order);
    if (n_pieces != n_order + 1) {
        PyErr_SetString(PyExc_ValueError, "a template's pieces and order do not agree");
        return -1;
    }
    if (n_pieces > PIECES_MAX) return 1;
    out->template = template;
    out->n_order = (int)n_order;
    out->fixed = 0;
    for (Py_ssize_t i = 0; i < n_pieces; i++) {
        PyObject *piece = PyTuple_GET_ITEM(pieces, i);
        out->piece[i] = PyBytes_AS_STRING(piece);
        out->piece_n[i] = PyBytes_GET_SIZE(piece);
        out->fixed += out->piece_n[i];
    }
    for (Py_ssize_t i = 0; i < n_order; i++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(order, i));
        if (index < 0 || index >= count + 4) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a template's value index is out of range");
            return -1;
        }
        out->order[i] = (int)index;
    }
    return 0;
}

/* A length-delimited field 2 (`ScopeLogs.log_records`, `ScopeSpans.spans`) of `n` bytes, into `out`. */
static int put_entry(Buf *out, const char *record, Py_ssize_t n) {
    if (buf_reserve(out, 1 + 10 + n) < 0) return -1;
    char *o = out->data + out->len;
    *o++ = 0x12;
    o = put_varint(o, (uint64_t)n);
    out->len = put(o, record, n) - out->data;
    return 0;
}

/* One record from its template, as a `ScopeLogs.log_records` entry appended to the chunk's records:
 * pieces[0], the value order[0] names, pieces[1]... The values are the slot values, then the time
 * (fixed64), trace id, span id and observed time. (An object per record, a record being 1-2 KB:
 * one object for a call's records counted more, the request's join copying it with `rep movsb`.) */
static int filled(Ctx *ctx, const Template *t, const Values *v, const char *vals, uint64_t time_ns,
                  const uint8_t *trace_id, const uint8_t *span_id) {
    char fixed[2][8];
    put_fixed_bits(fixed[0], time_ns, 8);
    put_fixed_bits(fixed[1], ctx->observed, 8);
    const char *value[12];
    Py_ssize_t value_n[12];
    for (int i = 0; i < v->count; i++) {
        value[i] = vals + v->at[i];
        value_n[i] = v->n[i];
    }
    value[v->count] = fixed[0], value_n[v->count] = 8;
    value[v->count + 1] = (const char *)trace_id, value_n[v->count + 1] = 16;
    value[v->count + 2] = (const char *)span_id, value_n[v->count + 2] = 8;
    value[v->count + 3] = fixed[1], value_n[v->count + 3] = 8;
    Py_ssize_t size = t->fixed;
    for (int i = 0; i < t->n_order; i++) {
        if (t->order[i] >= v->count + 4) {
            PyErr_SetString(PyExc_ValueError, "a template's value index is out of range");
            return -1;
        }
        size += value_n[t->order[i]];
    }
    PyObject *record = PyBytes_FromStringAndSize(NULL, 1 + varint_size((uint64_t)size) + size);
    if (record == NULL) return -1;
    char *o = PyBytes_AS_STRING(record);
    *o++ = 0x12;
    o = put_varint(o, (uint64_t)size);
    o = put(o, t->piece[0], t->piece_n[0]);
    for (int i = 0; i < t->n_order; i++) {
        o = put(o, value[t->order[i]], value_n[t->order[i]]);
        o = put(o, t->piece[i + 1], t->piece_n[i + 1]);
    }
    ctx->record_bytes += PyBytes_GET_SIZE(record);
    int rc = PyList_Append(ctx->records, record);
    Py_DECREF(record);
    return rc;
}

/* One event's record: from the template kept under `key`, or made by `miss(facts, trace id, span id,
 * flags)` (which answers (record, template)), the template then kept. */
static int emit_record(Ctx *ctx, Buf *key, PyObject *(*facts_of)(void *), void *facts_arg, const Values *v,
                       const char *vals, uint64_t time_ns, const uint8_t *trace_id, const uint8_t *span_id,
                       uint64_t flags) {
    for (int i = 0; i < CACHED; i++) {
        if (ctx->cache[i].t.template != NULL && ctx->cache[i].n == key->len &&
            memcmp(ctx->cache[i].key, key->data, (size_t)key->len) == 0) {
            if (filled(ctx, &ctx->cache[i].t, v, vals, time_ns, trace_id, span_id) < 0)
                return -1;
            ctx->records_made++;
            return 0;
        }
    }
    PyObject *k = PyBytes_FromStringAndSize(key->data, key->len);
    if (k == NULL) return -1;
    PyObject *template = PyDict_GetItemWithError(ctx->templates, k); /* borrowed */
    if (template == NULL && PyErr_Occurred()) {
        Py_DECREF(k);
        return -1;
    }
    int rc = -1;
    if (template != NULL && template != Py_None) {
        Template read;
        int got = template_read(template, v->count, &read);
        if (got == 0) {
            rc = filled(ctx, &read, v, vals, time_ns, trace_id, span_id);
            if (rc == 0 && key->len <= CACHED_KEY_MAX) {
                int at = ctx->next_cached;
                ctx->next_cached = (at + 1) % CACHED;
                Py_XDECREF(ctx->cache[at].t.template);
                ctx->cache[at].t = read;
                Py_INCREF(template);
                memcpy(ctx->cache[at].key, key->data, (size_t)key->len);
                ctx->cache[at].n = key->len;
            }
            Py_DECREF(k);
            if (rc == 0) ctx->records_made++;
            return rc;
        }
        if (got < 0) {
            Py_DECREF(k);
            return -1;
        }
    }
    /* no template (yet), or one too long to read: the record from `miss` */
    PyObject *facts = facts_of(facts_arg);
    PyObject *answer = NULL;
    if (facts != NULL)
        answer = PyObject_CallFunction(ctx->miss, "Oy#y#K", facts, (const char *)trace_id, (Py_ssize_t)16,
                                       (const char *)span_id, (Py_ssize_t)8, (unsigned long long)flags);
    Py_XDECREF(facts);
    if (answer != NULL) {
        if (!PyTuple_CheckExact(answer) || PyTuple_GET_SIZE(answer) != 2 ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(answer, 0)) || !template_ok(PyTuple_GET_ITEM(answer, 1))) {
            PyErr_SetString(PyExc_TypeError, "miss must answer (record bytes, template or None)");
        } else {
            PyObject *record = PyTuple_GET_ITEM(answer, 0), *entry = NULL;
            Py_ssize_t n = PyBytes_GET_SIZE(record);
            entry = PyBytes_FromStringAndSize(NULL, 1 + varint_size((uint64_t)n) + n);
            if (entry != NULL) {
                char *o = PyBytes_AS_STRING(entry);
                *o++ = 0x12;
                put(put_varint(o, (uint64_t)n), PyBytes_AS_STRING(record), n);
                ctx->record_bytes += PyBytes_GET_SIZE(entry);
                rc = PyList_Append(ctx->records, entry);
                Py_DECREF(entry);
            }
            if (rc == 0 && template == NULL) {
                if (PyDict_GET_SIZE(ctx->templates) >= TEMPLATES_MAX) PyDict_Clear(ctx->templates);
                rc = PyDict_SetItem(ctx->templates, k, PyTuple_GET_ITEM(answer, 1));
            }
        }
        Py_DECREF(answer);
    }
    Py_DECREF(k);
    if (rc == 0) ctx->records_made++;
    return rc;
}

/* The spans written since the last call, handed over to their scope group's list. */
static int flush_spans(Ctx *ctx) {
    if (!ctx->spans_out.len) return 0;
    PyObject *b = PyBytes_FromStringAndSize(ctx->spans_out.data, ctx->spans_out.len);
    ctx->spans_out.len = 0;
    int rc = b == NULL ? -1 : PyList_Append(ctx->last_spans, b);
    Py_XDECREF(b);
    return rc;
}

/* ---- a task's facts, as task_spans' named tuples (made only on a template's miss) ---- */

static PyObject *definition_type, *transitions_type; /* TaskDefinition, TaskTransitions */
static long def_event_type, normal_task, pending_args_avail, submitted_to_worker, finished, running;

typedef struct {
    const uint8_t *task_id, *job, *parent;
    Py_ssize_t parent_n;
    Str module, function;
    uint64_t start;
} DefinitionFacts;

static PyObject *definition_facts(void *arg) {
    DefinitionFacts *f = arg;
    return PyObject_CallFunction(definition_type, "ly#y#y#s#s#s#sly#K", def_event_type, (const char *)f->task_id,
                                 (Py_ssize_t)24, (const char *)f->job, (Py_ssize_t)4, "", (Py_ssize_t)0,
                                 f->function.s, f->function.n, f->module.s, f->module.n, f->function.s,
                                 f->function.n, "", normal_task, (const char *)f->parent, f->parent_n,
                                 (unsigned long long)f->start);
}

typedef struct {
    const uint8_t *task_id, *job, *node, *worker;
    Py_ssize_t node_n, worker_n;
    long states[2];
    uint64_t times[2];
    int count;
    long long pid;
} TransitionFacts;

static PyObject *transition_facts(void *arg) {
    TransitionFacts *f = arg;
    PyObject *transitions = PyTuple_New(f->count);
    if (transitions == NULL) return NULL;
    for (int i = 0; i < f->count; i++) {
        PyObject *pair = Py_BuildValue("(lK)", f->states[i], (unsigned long long)f->times[i]);
        if (pair == NULL) {
            Py_DECREF(transitions);
            return NULL;
        }
        PyTuple_SET_ITEM(transitions, i, pair);
    }
    PyObject *out = PyObject_CallFunction(transitions_type, "y#y#Oy#y#LO", (const char *)f->task_id, (Py_ssize_t)24,
                                          (const char *)f->job, (Py_ssize_t)4, transitions, (const char *)f->node,
                                          f->node_n, (const char *)f->worker, f->worker_n, f->pid, Py_None);
    Py_DECREF(transitions);
    return out;
}

/* ---- a line's span and events ---- */

#define SUBMIT_SUFFIX " ray.remote"
#define EXECUTE_SUFFIX " ray.remote_worker"
#define PRODUCER_KEY "ray_otel_events.producer"
#define PRODUCER_VALUE "task_event_span_processor"
#define K_PRODUCER 3
#define K_CONSUMER 4

enum { ROLE_NONE, ROLE_SUBMIT, ROLE_EXECUTE };

/* A normal task's facts read from its span's attributes. */
typedef struct {
    int role;
    uint8_t job[4];
    uint8_t ray_task[64], node[64], worker[64];
    Py_ssize_t ray_task_n, node_n, worker_n;
    long long pid;
    Str module, function;
} Task;

/* 1: a task span read into `t` (role NONE: a span with no events), 0: not ours (hand it back). */
static int read_task(const Line *l, int event_logs, Task *t) {
    t->role = ROLE_NONE;
    if (!event_logs) return 1;
    if (ends_with(l->name, EXECUTE_SUFFIX)) {
        if (l->span_kind != K_CONSUMER) return 1;
        t->role = ROLE_EXECUTE;
    } else if (ends_with(l->name, SUBMIT_SUFFIX)) {
        if (l->span_kind != K_PRODUCER) return 1;
        t->role = ROLE_SUBMIT;
    } else {
        return 1;
    }
    const Attr *remote = attr(l, "ray.remote");
    if (remote == NULL || remote->kind != V_STR) {
        t->role = ROLE_NONE;
        return 1;
    }
    if (remote->text.n == 5 && memcmp(remote->text.s, "actor", 5) == 0) return 0; /* actors: Python's */
    if (!(remote->text.n == 8 && memcmp(remote->text.s, "function", 8) == 0)) {
        t->role = ROLE_NONE;
        return 1;
    }
    const Attr *job = attr(l, "ray.job_id");
    if (job == NULL || job->kind != V_STR || from_hex(job->text, t->job, 4) != 4) return 0; /* unmappable */
    if (opt_hex(l, "ray.task_id", t->ray_task, 64, &t->ray_task_n) < 0) return 0;
    if (t->role == ROLE_SUBMIT) {
        const Attr *function = attr(l, "ray.function");
        Str qualified = {"", 0};
        if (function != NULL) {
            if (function->kind != V_STR) return 0;
            qualified = function->text;
        }
        Py_ssize_t dot = qualified.n - 1;
        while (dot >= 0 && qualified.s[dot] != '.') dot--;
        t->module = (Str){qualified.s, dot < 0 ? 0 : dot};
        t->function = (Str){qualified.s + dot + 1, qualified.n - dot - 1};
        return 1;
    }
    if (opt_hex(l, "ray.node_id", t->node, 64, &t->node_n) < 0) return 0;
    if (opt_hex(l, "ray.worker_id", t->worker, 64, &t->worker_n) < 0) return 0;
    const Attr *pid = attr(l, "ray.pid");
    t->pid = 0;
    if (pid != NULL) {
        if (pid->kind == V_INT) {
            t->pid = pid->number;
        } else if (pid->kind == V_STR) { /* int(text): plain digits only */
            Cur c = {pid->text.s, pid->text.s + pid->text.n};
            int64_t v;
            if (pid->text.n == 0 || pid->text.n > 10 || !i64(&c, &v) || c.p != c.end) return 0;
            t->pid = v;
        } else {
            return 0;
        }
    }
    return t->pid >= 0 && t->pid <= 0xffffffffLL; /* a pid the event can hold (uint32) */
}

/* Repeated KeyValue entries under `tag` (`otlp_wire.attributes`); `mark`: the producer attribute
 * set (in its place if present, else last), as the forwarder marks a task's spans. */
static int put_attributes(Buf *b, const Attr *attrs_, int n, char tag, int mark) {
    int marked = 0;
    for (int i = 0; i <= n; i++) {
        const char *key, *text = NULL;
        Py_ssize_t key_n, text_n = 0;
        char value[16];
        Py_ssize_t value_n;
        const Attr *a = i < n ? &attrs_[i] : NULL;
        int producer = a != NULL && mark && a->key.n == (Py_ssize_t)strlen(PRODUCER_KEY) &&
                       memcmp(a->key.s, PRODUCER_KEY, strlen(PRODUCER_KEY)) == 0;
        if (a == NULL) {
            if (!mark || marked) break;
            producer = 1;
            key = PRODUCER_KEY;
            key_n = (Py_ssize_t)strlen(PRODUCER_KEY);
        } else {
            key = a->key.s;
            key_n = a->key.n;
        }
        if (producer) {
            marked = 1;
            text = PRODUCER_VALUE;
            text_n = (Py_ssize_t)strlen(PRODUCER_VALUE);
            value_n = 1 + varint_size((uint64_t)text_n) + text_n;
        } else if (a->kind == V_STR) {
            text = a->text.s;
            text_n = a->text.n;
            value_n = 1 + varint_size((uint64_t)text_n) + text_n;
        } else if (a->kind == V_TRUE || a->kind == V_FALSE) {
            value[0] = 0x10;
            value[1] = a->kind == V_TRUE ? 1 : 0;
            value_n = 2;
        } else if (a->kind == V_INT) {
            value[0] = 0x18;
            value_n = put_varint(value + 1, (uint64_t)a->number) - value;
        } else {
            value_n = 0; /* None: an empty AnyValue */
        }
        Py_ssize_t kv = 1 + varint_size((uint64_t)key_n) + key_n + 1 + varint_size((uint64_t)value_n) + value_n;
        if (buf_reserve(b, 1 + varint_size((uint64_t)kv) + kv) < 0) return -1;
        char *o = b->data + b->len;
        *o++ = tag;
        o = put_varint(o, (uint64_t)kv);
        *o++ = 0x0a;
        o = put_varint(o, (uint64_t)key_n);
        o = put(o, key, key_n);
        *o++ = 0x12;
        o = put_varint(o, (uint64_t)value_n);
        if (text != NULL) {
            *o++ = 0x0a;
            o = put_varint(o, (uint64_t)text_n);
            o = put(o, text, text_n);
        } else {
            o = put(o, value, value_n);
        }
        b->len = o - b->data;
    }
    return 0;
}

/* The scope group of the line's span made the current one (`last_spans`), what was written for the
 * one before handed over: the writer's scope object for the line's three strings, its group in
 * `by_scope` (by the object's id). */
static int span_group(Ctx *ctx, const Line *l) {
    if (flush_spans(ctx) < 0) return -1;
    PyObject *raw = PyBytes_FromStringAndSize(l->scope_at, l->scope_len);
    PyObject *scope = raw == NULL ? NULL : PyDict_GetItemWithError(ctx->scope_of, raw); /* borrowed */
    if (scope == NULL && raw != NULL && !PyErr_Occurred()) {
        Cur c = {l->scope_at, l->scope_at + l->scope_len};
        Str s[3] = {{"", 0}, {"", 0}, {"", 0}};
        str(&c, &s[0]);
        lit(&c, ",", 1);
        str(&c, &s[1]);
        lit(&c, ",", 1);
        str(&c, &s[2]);
        PyObject *made = PyObject_CallFunction(ctx->scope_fn, "s#s#s#", s[0].s, s[0].n, s[1].s, s[1].n, s[2].s, s[2].n);
        if (made != NULL) {
            if (PyDict_SetItem(ctx->scope_of, raw, made) == 0) scope = made;
            Py_DECREF(made); /* the writer keeps it */
        }
    }
    Py_XDECREF(raw);
    if (scope == NULL) return -1;
    PyObject *id = PyLong_FromVoidPtr(scope);
    PyObject *group = id == NULL ? NULL : PyDict_GetItemWithError(ctx->by_scope, id);
    if (group == NULL && id != NULL && !PyErr_Occurred()) {
        PyObject *spans = PyList_New(0);
        PyObject *made = spans == NULL ? NULL : PyTuple_Pack(2, scope, spans);
        Py_XDECREF(spans);
        if (made != NULL && PyDict_SetItem(ctx->by_scope, id, made) == 0) group = made;
        Py_XDECREF(made);
    }
    Py_XDECREF(id);
    if (group == NULL) return -1;
    PyObject *spans = PyTuple_GET_ITEM(group, 1);
    if (!PyList_CheckExact(spans)) {
        PyErr_SetString(PyExc_TypeError, "a scope group's spans are not a list");
        return -1;
    }
    ctx->last_scope_at = l->scope_at;
    ctx->last_scope_len = l->scope_len;
    Py_XSETREF(ctx->last_spans, Py_NewRef(spans));
    return 0;
}

/* The span's `ScopeSpans.spans` entry (`plain_span_wire` framed by `span_field`), into its scope's
 * group. */
static int emit_span(Ctx *ctx, const Line *l, int mark, Buf *b) {
    b->len = 0;
    if (buf_reserve(b, 128) < 0) return -1;
    char *o = b->data;
    *o++ = 0x0a;
    *o++ = 0x10;
    for (int i = 7; i >= 0; i--) *o++ = (char)(l->trace_high >> (8 * i));
    for (int i = 7; i >= 0; i--) *o++ = (char)(l->trace_low >> (8 * i));
    *o++ = 0x12;
    *o++ = 0x08;
    for (int i = 7; i >= 0; i--) *o++ = (char)(l->span_id >> (8 * i));
    if (l->parent_id) {
        *o++ = 0x22;
        *o++ = 0x08;
        for (int i = 7; i >= 0; i--) *o++ = (char)(l->parent_id >> (8 * i));
    }
    b->len = o - b->data;
    if (l->name.n) {
        if (buf_reserve(b, 1 + 10 + l->name.n) < 0) return -1;
        o = b->data + b->len;
        *o++ = 0x2a;
        o = put_varint(o, (uint64_t)l->name.n);
        o = put(o, l->name.s, l->name.n);
        b->len = o - b->data;
    }
    if (buf_reserve(b, 2 + 9 + 9) < 0) return -1;
    o = b->data + b->len;
    *o++ = 0x30;
    *o++ = (char)(l->span_kind + 1);
    if (l->start) {
        *o++ = 0x39;
        o = put_fixed_bits(o, l->start, 8);
    }
    if (l->end) {
        *o++ = 0x41;
        o = put_fixed_bits(o, l->end, 8);
    }
    b->len = o - b->data;
    if (l->n_attrs + mark > 0 && put_attributes(b, l->attrs, l->n_attrs, 0x4a, mark) < 0) return -1;
    static const char tags[3] = {0x50, 0x60, 0x70};
    for (int i = 0; i < 3; i++) {
        if (i == 1 && l->n_events) { /* Span.events = 11: Event{1 time, 2 name, 3 attributes} */
            Buf ev = {0};
            int rc = 0;
            for (int e = 0; e < l->n_events && rc == 0; e++) {
                ev.len = 0;
                rc = buf_reserve(&ev, 9 + 11 + l->events[e].name.n);
                if (rc < 0) break;
                char *q = ev.data;
                if (l->events[e].time) {
                    *q++ = 0x09;
                    q = put_fixed_bits(q, l->events[e].time, 8);
                }
                if (l->events[e].name.n) {
                    *q++ = 0x12;
                    q = put_varint(q, (uint64_t)l->events[e].name.n);
                    q = put(q, l->events[e].name.s, l->events[e].name.n);
                }
                ev.len = q - ev.data;
                rc = put_attributes(&ev, l->ev_attrs + l->events[e].first, l->events[e].n, 0x1a, 0);
                if (rc == 0) rc = buf_reserve(b, 11 + ev.len);
                if (rc == 0) {
                    q = b->data + b->len;
                    *q++ = 0x5a;
                    q = put_varint(q, (uint64_t)ev.len);
                    q = put(q, ev.data, ev.len);
                    b->len = q - b->data;
                }
            }
            PyMem_Free(ev.data);
            if (rc < 0) return -1;
        }
        if (l->dropped[i]) {
            if (buf_reserve(b, 11) < 0) return -1;
            o = b->data + b->len;
            *o++ = tags[i];
            o = put_varint(o, l->dropped[i]);
            b->len = o - b->data;
        }
    }
    if (buf_reserve(b, 4 + 6) < 0) return -1;
    o = b->data + b->len;
    if (l->code == 1) o = put(o, "\x7a\x02\x18\x01", 4);
    else o = put(o, "\x7a\x00", 2);
    *o++ = (char)0x85;
    *o++ = 0x01;
    o = put_fixed_bits(o, l->parent_id && l->parent_remote ? 0x300 : 0x100, 4);
    b->len = o - b->data;

    if (ctx->last_spans == NULL || ctx->last_scope_len != l->scope_len ||
        memcmp(ctx->last_scope_at, l->scope_at, (size_t)l->scope_len) != 0) {
        if (span_group(ctx, l) < 0) return -1;
    }
    if (put_entry(&ctx->spans_out, b->data, b->len) < 0) return -1;
    ctx->spans_made++;
    return ctx->spans_out.len >= SPANS_FLUSH ? flush_spans(ctx) : 0;
}

static void trace_bytes(const Line *l, uint8_t trace_id[16], uint8_t span_id[8]) {
    for (int i = 0; i < 8; i++) {
        trace_id[i] = (uint8_t)(l->trace_high >> (56 - 8 * i));
        trace_id[8 + i] = (uint8_t)(l->trace_low >> (56 - 8 * i));
        span_id[i] = (uint8_t)(l->span_id >> (56 - 8 * i));
    }
}

/* Derived task ids kept by their input (the trace id and the submission's span id): a task's are
 * derived at its submission's end and at its execution's start and end, in the driver's file and
 * a worker's, mostly within a sweep or two. Direct-mapped by the span id's low bits (random). */
#define DERIVED_SLOTS 2048
static struct {
    uint8_t in[24];
    uint8_t digest[8];
    int used;
} derived[DERIVED_SLOTS];

/* The derived task id of a normal task (`task_spans.derive_task_id` with the job's nil actor part). */
static void derive_task_id(const uint8_t trace_id[16], uint64_t submit_span_id, const uint8_t job[4],
                           uint8_t out[24]) {
    uint8_t in[24];
    memcpy(in, trace_id, 16);
    for (int i = 0; i < 8; i++) in[16 + i] = (uint8_t)(submit_span_id >> (56 - 8 * i));
    size_t slot = (size_t)(submit_span_id % DERIVED_SLOTS);
    if (derived[slot].used && memcmp(derived[slot].in, in, 24) == 0) {
        memcpy(out, derived[slot].digest, 8);
    } else {
        event_hash_store(event_hash((const char *)in, 24), out); /* BLAKE2b, an 8-byte digest */
        int nil = 1;
        for (int i = 0; i < 8; i++) nil &= out[i] == 0xff;
        if (nil) out[0] = 0xfe;
        memcpy(derived[slot].in, in, 24);
        memcpy(derived[slot].digest, out, 8);
        derived[slot].used = 1;
    }
    memset(out + 8, 0xff, 12);
    memcpy(out + 20, job, 4);
}

/* A task id's base64 and hex texts as two values (kept for the next record, mostly the same task's). */
static int put_id_texts(Ctx *ctx, Values *v, Buf *vals, const uint8_t id[24]) {
    if (!ctx->has_text_id || memcmp(ctx->text_id, id, 24) != 0) {
        static const char digits[] = "0123456789abcdef";
        put_base64(ctx->id_base64, id, 24);
        for (int i = 0; i < 24; i++) {
            ctx->id_hex[2 * i] = digits[id[i] >> 4];
            ctx->id_hex[2 * i + 1] = digits[id[i] & 15];
        }
        memcpy(ctx->text_id, id, 24);
        ctx->has_text_id = 1;
    }
    if (value_begin(v, vals) < 0 || buf_put(vals, ctx->id_base64, 32) < 0) return -1;
    value_end(v, vals);
    if (value_begin(v, vals) < 0 || buf_put(vals, ctx->id_hex, 48) < 0) return -1;
    value_end(v, vals);
    return 0;
}

/* The transitions record of a task (`TaskEventRecords._transitions`). */
static int transitions_record(Ctx *ctx, Buf *vals, Buf *key, TransitionFacts *f, const uint8_t trace_id[16],
                              const uint8_t span_id[8], uint64_t flags) {
    Values v = {.count = 0};
    vals->len = 0;
    key->len = 0;
    if (value_begin(&v, vals) < 0 || put_timestamp_text(vals, f->times[0]) < 0) return -1;
    value_end(&v, vals);
    if (put_id_texts(ctx, &v, vals, f->task_id) < 0) return -1;
    for (int i = 0; i < f->count; i++) {
        if (value_begin(&v, vals) < 0 || put_timestamp_text(vals, f->times[i]) < 0) return -1;
        value_end(&v, vals);
    }
    char head[8] = {'T', (char)f->count, (char)f->states[0], (char)(f->count > 1 ? f->states[1] : 0),
                    (char)flags, (char)(f->times[0] != 0), (char)(ctx->observed != 0), 0};
    char pid[8];
    put_fixed_bits(pid, (uint64_t)f->pid, 8);
    if (key_part(key, head, 8) < 0 || key_part(key, f->job, 4) < 0 || key_part(key, f->node, f->node_n) < 0 ||
        key_part(key, f->worker, f->worker_n) < 0 || key_part(key, pid, 8) < 0)
        return -1;
    for (int i = 0; i < v.count; i++) {
        uint8_t n = (uint8_t)v.n[i];
        if (buf_put(key, &n, 1) < 0) return -1;
    }
    return emit_record(ctx, key, transition_facts, f, &v, vals->data, f->times[0], trace_id, span_id, flags);
}

/* The definition record of a normal task (`TaskEventRecords._definition`, a parent always known). */
static int definition_record(Ctx *ctx, Buf *vals, Buf *key, DefinitionFacts *f, const uint8_t trace_id[16],
                             const uint8_t span_id[8], uint64_t flags) {
    Values v = {.count = 0};
    vals->len = 0;
    key->len = 0;
    if (value_begin(&v, vals) < 0 || put_timestamp_text(vals, f->start) < 0) return -1;
    value_end(&v, vals);
    if (put_id_texts(ctx, &v, vals, f->task_id) < 0) return -1;
    if (value_begin(&v, vals) < 0 || put_base64_text(vals, f->parent, f->parent_n) < 0) return -1;
    value_end(&v, vals);
    if (value_begin(&v, vals) < 0 || put_hex_text(vals, f->parent, f->parent_n) < 0) return -1;
    value_end(&v, vals);
    char head[4] = {'D', (char)flags, (char)(f->start != 0), (char)(ctx->observed != 0)};
    if (key_part(key, head, 4) < 0 || key_part(key, f->job, 4) < 0 || key_part(key, f->module.s, f->module.n) < 0 ||
        key_part(key, f->function.s, f->function.n) < 0)
        return -1;
    for (int i = 0; i < v.count; i++) {
        uint8_t n = (uint8_t)(v.n[i] & 0xff), hi = (uint8_t)(v.n[i] >> 8);
        if (buf_put(key, &n, 1) < 0 || buf_put(key, &hi, 1) < 0) return -1;
    }
    return emit_record(ctx, key, definition_facts, f, &v, vals->data, f->start, trace_id, span_id, flags);
}

/* dict.pop(key, None): a new reference or NULL (none there, or an error: PyErr_Occurred). */
static PyObject *dict_pop(PyObject *dict, PyObject *key) {
    PyObject *found = PyDict_GetItemWithError(dict, key);
    if (found == NULL) return NULL;
    Py_INCREF(found);
    if (PyDict_DelItem(dict, key) < 0) Py_CLEAR(found);
    return found;
}

/* Bytes objects for dict keys. */
static PyObject *bytes_of(const uint8_t *data, Py_ssize_t n) { return PyBytes_FromStringAndSize((const char *)data, n); }

/* An execute span's RUNNING record at its start (`TaskSpanEvents.started`), its task kept open, or,
 * with `ends_now` (its end line read already, to be taken next), its task id there instead: its
 * end closes it at once, and nothing is looked up in between. */
static int execute_started(Ctx *ctx, const Line *l, const Task *t, Buf *vals, Buf *key, uint8_t *ends_now) {
    uint8_t trace_id[16], span_id[8], own[24];
    uint8_t *task_id = ends_now != NULL ? ends_now : own;
    trace_bytes(l, trace_id, span_id);
    derive_task_id(trace_id, l->parent_id ? l->parent_id : l->span_id, t->job, task_id);
    if (ends_now != NULL) {
        TransitionFacts f = {task_id, t->job, t->node, t->worker, t->node_n, t->worker_n, {running, 0},
                             {l->start, 0}, 1, t->pid};
        return transitions_record(ctx, vals, key, &f, trace_id, span_id, l->flags);
    }
    PyObject *span_key = PyLong_FromUnsignedLongLong(l->span_id);
    PyObject *task = bytes_of(task_id, 24);
    int rc = span_key == NULL || task == NULL ? -1 : PyDict_SetItem(ctx->open_by_span, span_key, task);
    Py_XDECREF(span_key);
    if (rc == 0 && t->ray_task_n) {
        PyObject *ray_task = bytes_of(t->ray_task, t->ray_task_n);
        rc = ray_task == NULL ? -1 : PyDict_SetItem(ctx->open_by_ray_id, ray_task, task);
        Py_XDECREF(ray_task);
    }
    Py_XDECREF(task);
    if (rc < 0) return -1;
    TransitionFacts f = {task_id, t->job, t->node, t->worker, t->node_n, t->worker_n, {running, 0}, {l->start, 0},
                         1, t->pid};
    return transitions_record(ctx, vals, key, &f, trace_id, span_id, l->flags);
}

/* Its FINISHED record, its task closed; `started`: the task id its start just derived (the
 * `ends_now` of `execute_started`), which the task kept open would have been. */
static int execute_ended(Ctx *ctx, const Line *l, const Task *t, Buf *vals, Buf *key, const uint8_t *started) {
    uint8_t trace_id[16], span_id[8], task_id[24];
    trace_bytes(l, trace_id, span_id);
    PyObject *span_key = PyLong_FromUnsignedLongLong(l->span_id);
    if (span_key == NULL) return -1;
    PyObject *open = dict_pop(ctx->open_by_span, span_key);
    Py_DECREF(span_key);
    if (open == NULL && PyErr_Occurred()) return -1;
    if (started != NULL) {
        memcpy(task_id, started, 24);
    } else if (open != NULL && PyBytes_CheckExact(open) && PyBytes_GET_SIZE(open) == 24) {
        memcpy(task_id, PyBytes_AS_STRING(open), 24);
    } else {
        derive_task_id(trace_id, l->parent_id ? l->parent_id : l->span_id, t->job, task_id);
    }
    Py_XDECREF(open);
    if (t->ray_task_n) {
        PyObject *ray_task = bytes_of(t->ray_task, t->ray_task_n);
        if (ray_task == NULL) return -1;
        PyObject *gone = dict_pop(ctx->open_by_ray_id, ray_task);
        Py_DECREF(ray_task);
        if (gone == NULL && PyErr_Occurred()) return -1;
        Py_XDECREF(gone);
    }
    TransitionFacts f = {task_id, t->job, t->node, t->worker, t->node_n, t->worker_n, {finished, 0}, {l->end, 0},
                         1, t->pid};
    return transitions_record(ctx, vals, key, &f, trace_id, span_id, l->flags);
}

static int submit_ended(Ctx *ctx, const Line *l, const Task *t, Buf *vals, Buf *key) {
    uint8_t trace_id[16], span_id[8], task_id[24], parent[64];
    Py_ssize_t parent_n = 24;
    trace_bytes(l, trace_id, span_id);
    derive_task_id(trace_id, l->span_id, t->job, task_id);
    /* its parent task (`TaskSpanEvents._parent_task`) */
    PyObject *found = NULL;
    if (l->parent_id) {
        PyObject *parent_key = PyLong_FromUnsignedLongLong(l->parent_id);
        if (parent_key == NULL) return -1;
        found = PyDict_GetItemWithError(ctx->open_by_span, parent_key);
        Py_DECREF(parent_key);
        if (found == NULL && PyErr_Occurred()) return -1;
    }
    if (found == NULL && t->ray_task_n) {
        PyObject *running_key = bytes_of(t->ray_task, t->ray_task_n);
        if (running_key == NULL) return -1;
        found = PyDict_GetItemWithError(ctx->open_by_ray_id, running_key);
        Py_DECREF(running_key);
        if (found == NULL && PyErr_Occurred()) return -1;
        if (found == NULL) {
            memcpy(parent, t->ray_task, (size_t)t->ray_task_n);
            parent_n = t->ray_task_n;
        }
    }
    if (found != NULL) {
        if (!PyBytes_CheckExact(found) || PyBytes_GET_SIZE(found) == 0 || PyBytes_GET_SIZE(found) > 64) {
            PyErr_SetString(PyExc_ValueError, "an open task's id is not 1 to 64 bytes");
            return -1;
        }
        parent_n = PyBytes_GET_SIZE(found);
        memcpy(parent, PyBytes_AS_STRING(found), (size_t)parent_n);
    } else if (!t->ray_task_n) {
        memset(parent, 0xff, 20);
        memcpy(parent + 20, t->job, 4);
    }
    DefinitionFacts d = {task_id, t->job, parent, parent_n, t->module, t->function, l->start};
    if (definition_record(ctx, vals, key, &d, trace_id, span_id, l->flags) < 0) return -1;
    TransitionFacts f = {task_id, t->job, (const uint8_t *)"", (const uint8_t *)"", 0, 0,
                         {pending_args_avail, submitted_to_worker}, {l->start, l->end}, 2, 0};
    return transitions_record(ctx, vals, key, &f, trace_id, span_id, l->flags);
}

/* The span id -> line of each ended span of the chunk (the last such line), made at the first start
 * reference: an open-addressing table in a bytes object (kept in `ends_box` for the chunk's later
 * calls), no object per line; None where a line might be an ended span this module cannot read
 * (any line but an ended span's it reads, a start reference or a start line): its start
 * references are then handed back, the Python path finding their ends. */
typedef struct {
    uint64_t span_id;
    Py_ssize_t from, to; /* the line: data[from:to]; to 0, an empty slot */
} EndAt;

typedef struct {
    Py_ssize_t mask; /* slots - 1 (slots a power of two) */
    EndAt slot[];
} Ends;

static inline size_t ends_slot(const Ends *e, uint64_t span_id) {
    return (size_t)((span_id * 0x9E3779B97F4A7C15ULL) >> 17) & (size_t)e->mask;
}

/* The line of `span_id`'s ended span, NULL when the chunk has none. */
static const EndAt *ends_find(const Ends *e, uint64_t span_id) {
    for (size_t i = ends_slot(e, span_id);; i = (i + 1) & (size_t)e->mask) {
        if (e->slot[i].to == 0) return NULL;
        if (e->slot[i].span_id == span_id) return &e->slot[i];
    }
}

static PyObject *ends_index(Ctx *ctx, const char *data, Py_ssize_t n) {
    if (PyList_GET_SIZE(ctx->ends_box)) return PyList_GET_ITEM(ctx->ends_box, 0);
    Py_ssize_t lines = 1;
    for (const char *q = data; (q = memchr(q, '\n', (size_t)(data + n - q))) != NULL; q++) lines++;
    Py_ssize_t slots = 16;
    while (slots < 2 * lines) slots *= 2;
    PyObject *ends = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(sizeof(Ends) + (size_t)slots * sizeof(EndAt)));
    if (ends == NULL) return NULL;
    Ends *e = (Ends *)PyBytes_AS_STRING(ends);
    memset(e->slot, 0, (size_t)slots * sizeof(EndAt));
    e->mask = slots - 1;
    const char *p = data, *end = data + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        Cur c = {p, line_end};
        Str name;
        uint64_t skip, span_id;
        if (lit(&c, "[\"E\",", 5) && str(&c, &name) && lit(&c, ",", 1) && u64(&c, &skip) && lit(&c, ",", 1) &&
            u64(&c, &skip) && lit(&c, ",", 1) && u64(&c, &span_id)) {
            size_t i = ends_slot(e, span_id);
            while (e->slot[i].to != 0 && e->slot[i].span_id != span_id) i = (i + 1) & (size_t)e->mask;
            e->slot[i].span_id = span_id;
            e->slot[i].from = p - data;
            e->slot[i].to = line_end - data;
        } else {
            Cur s = {p, line_end};
            uint64_t ref;
            if (!(lit(&s, "[\"s\",", 5) && u64(&s, &ref) && lit(&s, "]", 1) && s.p == s.end)) {
                s.p = p;
                if (!lit(&s, "[\"S\",", 5)) {
                    Py_DECREF(ends);
                    ends = Py_NewRef(Py_None);
                    break;
                }
            }
        }
        p = line_end + 1;
    }
    int rc = PyList_Append(ctx->ends_box, ends);
    Py_DECREF(ends);
    return rc < 0 ? NULL : ends;
}

/* An ended span's line read into `l` and `t`: its span, and its task's records (a RUNNING record
 * first when an earlier chunk's start reference waits for it). 1: taken, -1: an error. */
static int ended_line(Ctx *ctx, const Line *l, const Task *t, Buf *span_buf, Buf *vals, Buf *key,
                      const uint8_t *started) {
    int mark = ctx->event_logs && (ends_with(l->name, SUBMIT_SUFFIX) || ends_with(l->name, EXECUTE_SUFFIX));
    if (emit_span(ctx, l, mark, span_buf) < 0) return -1;
    int start_first = 0;
    if (PySet_GET_SIZE(ctx->started_refs)) { /* mostly none waits */
        PyObject *k = PyLong_FromUnsignedLongLong(l->span_id);
        if (k == NULL) return -1;
        start_first = PySet_Contains(ctx->started_refs, k);
        if (start_first > 0 && PySet_Discard(ctx->started_refs, k) < 0) start_first = -1;
        Py_DECREF(k);
        if (start_first < 0) return -1;
    }
    if (t->role == ROLE_SUBMIT) return submit_ended(ctx, l, t, vals, key) < 0 ? -1 : 1;
    if (t->role == ROLE_EXECUTE) {
        if (start_first && execute_started(ctx, l, t, vals, key, NULL) < 0) return -1;
        return execute_ended(ctx, l, t, vals, key, start_first ? NULL : started) < 0 ? -1 : 1;
    }
    return 1;
}

/* 1: the line taken, 0: handed back, -1: an error; `*next`: where the first line not taken begins
 * (past the line, or past its end line too where a start reference's end line follows it at once:
 * that line is then read once for both). */
static int one_line(Ctx *ctx, const char *data, Py_ssize_t n, const char *p, const char *line_end, Line *l,
                    Buf *span_buf, Buf *vals, Buf *key, const char **next) {
    *next = line_end < data + n ? line_end + 1 : line_end;
    if (!read_line(p, line_end, l)) return 0;
    Task t;
    if (l->kind == 's') {
        uint64_t ref = l->span_id;
        PyObject *ends = ends_index(ctx, data, n);
        if (ends == NULL) return -1;
        if (ends == Py_None) return 0;
        if (!PyBytes_CheckExact(ends) || PyBytes_GET_SIZE(ends) < (Py_ssize_t)sizeof(Ends) ||
            PyBytes_GET_SIZE(ends) != (Py_ssize_t)(sizeof(Ends) + (size_t)(((const Ends *)PyBytes_AS_STRING(ends))->mask + 1) *
                                                                     sizeof(EndAt))) {
            PyErr_SetString(PyExc_TypeError, "process: the chunk's ends index is not this module's");
            return -1;
        }
        const EndAt *at = ends_find((const Ends *)PyBytes_AS_STRING(ends), ref);
        if (at == NULL) {
            PyObject *k = PyLong_FromUnsignedLongLong(ref);
            int rc = k == NULL ? -1 : PySet_Add(ctx->started_refs, k);
            Py_XDECREF(k);
            return rc < 0 ? -1 : 1;
        }
        Py_ssize_t from = at->from, to = at->to;
        if (from < 0 || to < from || to > n) {
            PyErr_SetString(PyExc_ValueError, "process: an end line out of range");
            return -1;
        }
        if (!read_line(data + from, data + to, l) || l->kind != 'E' || !read_task(l, ctx->event_logs, &t)) return 0;
        if (data + from != *next)
            return t.role == ROLE_EXECUTE ? (execute_started(ctx, l, &t, vals, key, NULL) < 0 ? -1 : 1) : 1;
        /* the end line is the next line: its span and records now, from what was just read */
        uint8_t task_id[24];
        if (t.role == ROLE_EXECUTE && execute_started(ctx, l, &t, vals, key, task_id) < 0) return -1;
        *next = to < n ? data + to + 1 : data + to;
        return ended_line(ctx, l, &t, span_buf, vals, key, t.role == ROLE_EXECUTE ? task_id : NULL);
    }
    if (!read_task(l, ctx->event_logs, &t)) return 0;
    if (l->kind == 'S') /* its RUNNING record (`TaskSpanEvents.started`); its span comes with its end */
        return t.role == ROLE_EXECUTE ? (execute_started(ctx, l, &t, vals, key, NULL) < 0 ? -1 : 1) : 1;
    return ended_line(ctx, l, &t, span_buf, vals, key, NULL);
}

static PyObject *process(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    Py_ssize_t pos;
    PyObject *tuple;
    if (!PyArg_ParseTuple(args, "y*nO!:process", &data, &pos, &PyTuple_Type, &tuple)) return NULL;
    PyObject *result = NULL;
    Ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    Line *l = PyMem_Malloc(sizeof(Line));
    Buf span_buf = {0}, vals = {0}, key = {0};
    if (l == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyTuple_GET_SIZE(tuple) != C_SIZE) {
        PyErr_SetString(PyExc_TypeError, "process: the context is a tuple of 12");
        goto done;
    }
    ctx.by_scope = PyTuple_GET_ITEM(tuple, C_BY_SCOPE);
    ctx.scope_of = PyTuple_GET_ITEM(tuple, C_SCOPE_OF);
    ctx.scope_fn = PyTuple_GET_ITEM(tuple, C_SCOPE_FN);
    ctx.records = PyTuple_GET_ITEM(tuple, C_RECORDS);
    ctx.open_by_span = PyTuple_GET_ITEM(tuple, C_OPEN_BY_SPAN);
    ctx.open_by_ray_id = PyTuple_GET_ITEM(tuple, C_OPEN_BY_RAY_ID);
    ctx.started_refs = PyTuple_GET_ITEM(tuple, C_STARTED_REFS);
    ctx.templates = PyTuple_GET_ITEM(tuple, C_TEMPLATES);
    ctx.miss = PyTuple_GET_ITEM(tuple, C_MISS);
    ctx.event_logs = PyObject_IsTrue(PyTuple_GET_ITEM(tuple, C_EVENT_LOGS));
    ctx.ends_box = PyTuple_GET_ITEM(tuple, C_ENDS);
    ctx.observed = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(tuple, C_OBSERVED));
    if (PyErr_Occurred()) goto done;
    if (!PyDict_CheckExact(ctx.by_scope) || !PyDict_CheckExact(ctx.scope_of) || !PyList_CheckExact(ctx.records) ||
        !PyDict_CheckExact(ctx.open_by_span) || !PyDict_CheckExact(ctx.open_by_ray_id) ||
        !PySet_Check(ctx.started_refs) || !PyDict_CheckExact(ctx.templates) || !PyList_CheckExact(ctx.ends_box) ||
        !PyCallable_Check(ctx.miss) || !PyCallable_Check(ctx.scope_fn) || ctx.event_logs < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "process: a context member of the wrong type");
        goto done;
    }
    const char *text = data.buf;
    Py_ssize_t n = data.len;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "process: pos out of range");
        goto done;
    }
    while (pos < n) {
        const char *p = text + pos;
        const char *nl = memchr(p, '\n', (size_t)(n - pos));
        const char *line_end = nl ? nl : text + n;
        const char *next;
        int taken = one_line(&ctx, text, n, p, line_end, l, &span_buf, &vals, &key, &next);
        if (taken < 0) goto done;
        if (taken == 0) break;
        pos = next - text;
    }
    if (flush_spans(&ctx) < 0) goto done;
    result = Py_BuildValue("(nnnn)", pos, ctx.spans_made, ctx.records_made, ctx.record_bytes);
done:
    for (int i = 0; i < CACHED; i++) Py_XDECREF(ctx.cache[i].t.template);
    PyMem_Free(ctx.spans_out.data);
    Py_XDECREF(ctx.last_spans);
    PyMem_Free(l);
    PyMem_Free(span_buf.data);
    PyMem_Free(vals.data);
    PyMem_Free(key.data);
    PyBuffer_Release(&data);
    return result;
}

/* bind(TaskDefinition, TaskTransitions, numbers): the facts' types and the enum values they hold. */
static PyObject *bind(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *definition, *transitions;
    long numbers[6];
    if (!PyArg_ParseTuple(args, "OO(llllll):bind", &definition, &transitions, &numbers[0], &numbers[1], &numbers[2],
                          &numbers[3], &numbers[4], &numbers[5]))
        return NULL;
    Py_XSETREF(definition_type, Py_NewRef(definition));
    Py_XSETREF(transitions_type, Py_NewRef(transitions));
    def_event_type = numbers[0];
    normal_task = numbers[1];
    pending_args_avail = numbers[2];
    submitted_to_worker = numbers[3];
    running = numbers[4];
    finished = numbers[5];
    Py_RETURN_NONE;
}

static PyObject *task_id(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer trace;
    unsigned long long span_id;
    Py_buffer job;
    if (!PyArg_ParseTuple(args, "y*Ky*:task_id", &trace, &span_id, &job)) return NULL;
    PyObject *out = NULL;
    if (trace.len == 16 && job.len == 4) {
        uint8_t id[24];
        derive_task_id(trace.buf, span_id, job.buf, id);
        out = bytes_of(id, 24);
    } else {
        PyErr_SetString(PyExc_ValueError, "task_id: a 16-byte trace id and a 4-byte job id");
    }
    PyBuffer_Release(&trace);
    PyBuffer_Release(&job);
    return out;
}

static PyMethodDef methods[] = {
    {"process", process, METH_VARARGS,
     "Take a chunk's lines from pos: (the offset of the first line handed back, spans, records, their bytes)."},
    {"bind", bind, METH_VARARGS, "The facts' types and enum values."},
    {"task_id", task_id, METH_VARARGS, "A normal task's derived id (for the tests)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_spool_lines", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__spool_lines(void) { return PyModule_Create(&module); }
