/* A POST of RayEvent JSON (what Ray's aggregator posts) read in one pass over its text, compiled:
 * for each item, the event's wire bytes as upb serializes them, the body of its log record (the
 * object as posted, as a KeyValueList) and its flattened `ray.event.*` attributes, and its head
 * (`_event_head.head` of those wire bytes). Without it the bridge parses the body with orjson, reads
 * each object into a RayEvent (native/_ray_json_wire.c), serializes it, reads its head and walks
 * the object again for its record (native/_record_walk.c): four passes and a dict per object.
 *
 * It takes exactly the items the Python path reads whole (ray_json_decode's rules, keys in their
 * lowerCamelCase JSON names) and writes what that path writes of them; for any other item it gives
 * the item's place in the text (otel/posted_events.py reads that item with orjson and the Python
 * path), and for any body it cannot read as orjson would (not JSON, an infinite number, an integer
 * past int64, nesting past its depth) None: the Python path reads the whole body, so its answers
 * (and orjson's error messages) stay what they were. Optional: without a C compiler the package
 * reads every body in Python. */

#define PY_SSIZE_T_CLEAN
#include <math.h>

#include "civil_dates.h"
#include "json_lexer.h"
#include "otlp_wire.h"
#include "protobuf_wire.h"
#include "wire_schema.h"

/* What a reading step returns. */
#define DONE 1
#define ITEM 0    /* this item is read in Python */
#define FAILED -1 /* an exception (memory) */
#define BODY -2   /* the whole body is read in Python */

#define MAX_KEYS 64   /* as _ray_json_wire.c: more keys in one object are read in Python */
#define MAX_DEPTH 24  /* objects nested in an item, read here */
#define SKIP_DEPTH 512
#define PATH_MAX_N 4096

typedef struct Msg Msg;

typedef struct {
    const char *name; /* enum value names, as bytes */
    Py_ssize_t n;
    int32_t number;
} EnumName;

typedef struct {
    const char *json; /* the lowerCamelCase name: the only key read here */
    Py_ssize_t json_n;
    const char *proto; /* the proto name: the attribute path's part */
    Py_ssize_t proto_n;
    uint32_t number;
    int kind, label, presence, oneof;
    int64_t low;
    uint64_t high;
    int n_enum;
    EnumName *enums;
    int sub; /* K_MESSAGE: the message's index (a map's: its value's) */
} FieldSpec;

struct Msg {
    int readable; /* 0: any key of it goes to Python (ray_json_decode's empty schema) */
    int n;
    FieldSpec *fields;
};

static Msg *msgs;
static int n_msgs, root_msg;
static uint32_t type_field; /* the root's field an item must hold (not zero) to be read here */
static PyObject *bound; /* what the schema's names point into (kept alive) */
static PyObject *head_fn;    /* _event_head.head */
static PyObject *parts_type; /* posted_events.EventParts, a tuple subclass */

/* -- the input ------------------------------------------------------------------------------ */

typedef struct {
    uint32_t number;
    Py_ssize_t start, end;
} Seg;

typedef struct {
    Buf wire; /* this message's fields, in posted order */
    Seg segs[MAX_KEYS];
    int n_segs;
    Buf body;  /* this object's KeyValueList entries */
    Buf entry; /* a map entry being written */
} Level;

typedef struct {
    const uint8_t *start, *p, *end;
    Buf scratch; /* strings with escapes, decoded (reserved to the body's size: never moves) */
    Buf attrs;   /* the item's flattened attribute entries */
    char path[PATH_MAX_N];
    Py_ssize_t path_n;
    Level levels[MAX_DEPTH + 1];
    int unordered; /* a map of two or more entries: upb's order is its own, Python serializes */
} R;

typedef enum { T_STRING, T_INT, T_FLOAT, T_TRUE, T_FALSE, T_NULL, T_OBJECT, T_ARRAY } TokType;

typedef struct {
    TokType type;
    const char *s; /* T_STRING: decoded UTF-8 */
    Py_ssize_t n;
    int64_t i;
    double d;
} Tok;

static inline void ws(R *r) { r->p = json_space(r->p, r->end); }

/* A string at r->p (its opening quote): its decoded UTF-8, in place when it has no escapes. BODY
 * for anything orjson refuses or may read otherwise (json_string). */
static int read_string(R *r, const char **s, Py_ssize_t *n) {
    const uint8_t *escape, *text = r->p + 1, *close = json_string(r->p, r->end, &escape);
    if (close == NULL) return BODY;
    r->p = close + 1;
    if (escape == NULL) {
        *s = (const char *)text;
        *n = close - text;
        return DONE;
    }
    /* decoded into the scratch buffer (reserved to the body's size: an escape only gets shorter) */
    char *first = r->scratch.data + r->scratch.len;
    memcpy(first, text, (size_t)(escape - text));
    char *o = json_unescape(escape, close, first + (escape - text));
    *s = first;
    *n = o - first;
    r->scratch.len = o - r->scratch.data;
    return DONE;
}

/* A number at r->p as orjson reads it: an int when it has no fraction or exponent (here only
 * int64's range: past it, BODY), else a double (infinite: orjson's error, BODY). */
static int read_number(R *r, Tok *t) {
    const uint8_t *start = r->p;
    JsonNumber number;
    const uint8_t *p = json_number(start, r->end, &number);
    if (p == NULL) return BODY;
    r->p = p;
    if (!number.is_float) {
        if (json_int64(&number, &t->i) < 0) return BODY;
        t->type = T_INT;
        return DONE;
    }
    /* the text, NUL-terminated for PyOS_string_to_double (a long one: on the heap) */
    Py_ssize_t n = p - start;
    char room[128], *text = n < (Py_ssize_t)sizeof room ? room : PyMem_Malloc((size_t)n + 1);
    if (text == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    memcpy(text, start, (size_t)n);
    text[n] = 0;
    char *stop;
    double d = PyOS_string_to_double(text, &stop, NULL);
    int read = stop == text + n;
    if (text != room) PyMem_Free(text);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return BODY;
    }
    if (!read || isinf(d) || isnan(d)) return BODY;
    t->type = T_FLOAT;
    t->d = d;
    return DONE;
}

/* The next value's kind; scalars read whole (objects and arrays: their opening bracket, not
 * consumed). */
static int read_token(R *r, Tok *t) {
    ws(r);
    if (r->p >= r->end) return BODY;
    const uint8_t *past;
    switch (*r->p) {
    case '"':
        t->type = T_STRING;
        return read_string(r, &t->s, &t->n);
    case '{': t->type = T_OBJECT; return DONE;
    case '[': t->type = T_ARRAY; return DONE;
    case 't':
    case 'f':
    case 'n':
        t->type = *r->p == 't' ? T_TRUE : *r->p == 'f' ? T_FALSE : T_NULL;
        if ((past = json_literal(r->p, r->end)) == NULL) return BODY;
        r->p = past;
        return DONE;
    default: return read_number(r, t);
    }
}

/* Inside an object or array after a value: 1 at its end (consumed), 0 after a comma, BODY. */
static int next_member(R *r, char close) {
    ws(r);
    if (r->p >= r->end) return BODY;
    if (*r->p == ',') {
        r->p++;
        ws(r);
        if (r->p < r->end && *r->p == close) return BODY; /* a trailing comma */
        return 0;
    }
    if (*r->p == close) {
        r->p++;
        return 1;
    }
    return BODY;
}

/* -- the record's entries (log_records._walk) ------------------------------------------------ */

/* AnyValue of a scalar token, into `o` (at most 10 + 9 bytes of framing); its size. */
static Py_ssize_t any_size(const Tok *t) {
    switch (t->type) {
    case T_STRING: return field_size(t->n);
    case T_INT: return 1 + varint_size((uint64_t)t->i);
    case T_FLOAT: return 9;
    case T_TRUE:
    case T_FALSE: return 2;
    default: return 0;
    }
}

static char *put_any(char *p, const Tok *t) {
    switch (t->type) {
    case T_STRING:
        *p++ = 0x0a;
        p = put_varint(p, (uint64_t)t->n);
        return put(p, t->s, t->n);
    case T_INT:
        *p++ = 0x18;
        return put_varint(p, (uint64_t)t->i);
    case T_FLOAT: {
        uint64_t bits;
        memcpy(&bits, &t->d, 8);
        *p++ = 0x21;
        return put_fixed_bits(p, bits, 8);
    }
    case T_TRUE:
    case T_FALSE:
        *p++ = 0x10;
        *p++ = t->type == T_TRUE;
        return p;
    default: return p;
    }
}

/* A KeyValue entry (tag) of key and a scalar's AnyValue. */
static int put_entry(Buf *b, uint8_t tag, const char *key, Py_ssize_t key_n, const Tok *t) {
    Py_ssize_t any_n = any_size(t);
    if (buf_reserve(b, field_size(field_size(key_n) + field_size(any_n))) < 0) return FAILED;
    char *p = put_kv_head(b->data + b->len, tag, key, key_n, any_n);
    b->len = put_any(p, t) - b->data;
    return DONE;
}

/* A KeyValue entry (tag) whose AnyValue (`any_tag`: kvlist 0x32, array 0x2a) holds `payload`. */
static int put_nested_entry(Buf *b, uint8_t tag, const char *key, Py_ssize_t key_n, uint8_t any_tag,
                            const char *payload, Py_ssize_t n) {
    Py_ssize_t any_n = field_size(n);
    if (buf_reserve(b, field_size(field_size(key_n) + field_size(any_n))) < 0) return FAILED;
    char *p = put_kv_head(b->data + b->len, tag, key, key_n, any_n);
    *p++ = (char)any_tag;
    p = put_varint(p, (uint64_t)n);
    b->len = put(p, payload, n) - b->data;
    return DONE;
}

static int attr_leaf(R *r, const Tok *t) { return put_entry(&r->attrs, 0x32, r->path, r->path_n, t); }

/* The path one step down: ".name" (returns the length to come back to), -1 when too long. */
static Py_ssize_t path_push(R *r, const char *name, Py_ssize_t n) {
    Py_ssize_t before = r->path_n;
    if (before + 1 + n > PATH_MAX_N) return -1;
    r->path[before] = '.';
    memcpy(r->path + before + 1, name, (size_t)n);
    r->path_n = before + 1 + n;
    return before;
}

static Py_ssize_t path_push_index(R *r, Py_ssize_t index) {
    char text[24];
    return path_push(r, text, put_decimal(text, index) - text);
}

/* -- the event's wire bytes ------------------------------------------------------------------- */

static int put_tag(Buf *b, uint32_t number, int wire_type) {
    return buf_varint(b, ((uint64_t)number << 3) | (uint64_t)wire_type) < 0 ? FAILED : DONE;
}

/* A scalar of `f`'s kind as protobuf holds it: its wire type and bits (ITEM where the Python path
 * would not read the token so). `text`: a K_BYTES token's decoded bytes go to `b` directly. */
typedef struct {
    int wire_type; /* 0 varint, 1 fixed64, 5 fixed32, 2 bytes (s, n) */
    uint64_t bits;
    const char *s;
    Py_ssize_t n;
    int bytes_b64; /* s is base64 text to decode */
} Scalar;

static int scalar_of(const FieldSpec *f, const Tok *t, Scalar *out) {
    out->bytes_b64 = 0;
    switch (f->kind) {
    case K_STRING:
        if (t->type != T_STRING) return ITEM;
        out->wire_type = 2;
        out->s = t->s;
        out->n = t->n;
        return DONE;
    case K_BYTES: {
        if (t->type != T_STRING) return ITEM;
        for (Py_ssize_t i = 0; i < t->n; i++)
            if ((unsigned char)t->s[i] >= 0x80) return ITEM;
        Py_ssize_t size = base64_decoded_size(t->s, t->n);
        if (size < 0) return ITEM;
        out->wire_type = 2;
        out->s = t->s;
        out->n = t->n;
        out->bits = (uint64_t)size;
        out->bytes_b64 = 1;
        return DONE;
    }
    case K_BOOL:
        if (t->type != T_TRUE && t->type != T_FALSE) return ITEM;
        out->wire_type = 0;
        out->bits = t->type == T_TRUE;
        return DONE;
    case K_INT: {
        int negative = 0;
        uint64_t magnitude = 0;
        if (t->type == T_INT) {
            negative = t->i < 0;
            magnitude = negative ? (uint64_t)0 - (uint64_t)t->i : (uint64_t)t->i;
        } else if (t->type == T_STRING) {
            Py_ssize_t i = 0;
            if (t->n > 0 && t->s[0] == '-') {
                negative = 1;
                i = 1;
            }
            if (i == t->n) return ITEM;
            for (; i < t->n; i++) {
                char c = t->s[i];
                if (c < '0' || c > '9') return ITEM;
                uint64_t digit = (uint64_t)(c - '0');
                if (magnitude > (UINT64_MAX - digit) / 10) return ITEM;
                magnitude = magnitude * 10 + digit;
            }
            if (magnitude == 0) negative = 0;
        } else {
            return ITEM;
        }
        if (negative) {
            uint64_t lowest = f->low < 0 ? (uint64_t)0 - (uint64_t)f->low : 0;
            if (magnitude > lowest) return ITEM;
            out->bits = (uint64_t)0 - magnitude;
        } else {
            if (magnitude > f->high) return ITEM;
            out->bits = magnitude;
        }
        out->wire_type = 0;
        return DONE;
    }
    case K_DOUBLE:
    case K_FLOAT: {
        double d;
        if (t->type == T_FLOAT) d = t->d;
        else if (t->type == T_INT) d = (double)t->i;
        else return ITEM;
        if (f->kind == K_DOUBLE) {
            memcpy(&out->bits, &d, 8);
            out->wire_type = 1;
            return DONE;
        }
        if (d > 3.4028234663852886e38 || d < -3.4028234663852886e38) return ITEM;
        float x = (float)d;
        uint32_t bits32;
        memcpy(&bits32, &x, 4);
        out->bits = bits32;
        out->wire_type = 5;
        return DONE;
    }
    case K_ENUM:
        if (t->type == T_STRING) {
            for (int i = 0; i < f->n_enum; i++) {
                if (f->enums[i].n == t->n && memcmp(f->enums[i].name, t->s, (size_t)t->n) == 0) {
                    out->bits = (uint64_t)(int64_t)f->enums[i].number;
                    out->wire_type = 0;
                    return DONE;
                }
            }
            return ITEM;
        }
        if (t->type == T_INT) {
            for (int i = 0; i < f->n_enum; i++) {
                if (f->enums[i].number == t->i) {
                    out->bits = (uint64_t)t->i;
                    out->wire_type = 0;
                    return DONE;
                }
            }
        }
        return ITEM;
    default:
        return ITEM;
    }
}

/* Whether a scalar is its type's default (upb leaves those out of a field without presence). */
static int scalar_is_default(const Scalar *s) {
    if (s->wire_type == 2) return s->bytes_b64 ? s->bits == 0 : s->n == 0;
    return s->bits == 0;
}

static Py_ssize_t scalar_size(const Scalar *s) {
    switch (s->wire_type) {
    case 0: return varint_size(s->bits);
    case 1: return 8;
    case 5: return 4;
    default: return s->bytes_b64 ? (Py_ssize_t)s->bits : s->n;
    }
}

static int put_scalar_value(Buf *b, const Scalar *s) {
    Py_ssize_t n = scalar_size(s);
    if (buf_reserve(b, 10 + n) < 0) return FAILED;
    char *p = b->data + b->len;
    switch (s->wire_type) {
    case 0: p = put_varint(p, s->bits); break;
    case 1: p = put_fixed_bits(p, s->bits, 8); break;
    case 5: p = put_fixed_bits(p, s->bits, 4); break;
    default:
        p = put_varint(p, (uint64_t)n);
        p = s->bytes_b64 ? put_base64_decoded(p, s->s, s->n) : put(p, s->s, s->n);
    }
    b->len = p - b->data;
    return DONE;
}

/* One scalar field (tag and value). */
static int put_scalar_field(Buf *b, uint32_t number, const Scalar *s) {
    if (put_tag(b, number, s->wire_type) != DONE) return FAILED;
    return put_scalar_value(b, s);
}

/* A Timestamp's fields {seconds = 1, nanos = 2}, zeros left out, from its text. */
static int timestamp_wire(Buf *b, const Tok *t) {
    if (t->type != T_STRING) return ITEM;
    for (Py_ssize_t i = 0; i < t->n; i++)
        if ((unsigned char)t->s[i] >= 0x80) return ITEM;
    int64_t seconds;
    int nanos;
    if (rfc3339_utc(t->s, t->n, &seconds, &nanos) < 0) return ITEM;
    if (seconds && (put_tag(b, 1, 0) != DONE || buf_varint(b, (uint64_t)seconds) < 0)) return FAILED;
    if (nanos && (put_tag(b, 2, 0) != DONE || buf_varint(b, (uint64_t)nanos) < 0)) return FAILED;
    return DONE;
}

/* A level's fields, ordered by number as upb writes them (a field's segment keeps its items in
 * order), framed as field `number` of `out`, or (number 0) appended as they are. */
static int emit_message(Buf *out, uint32_t number, Level *lv) {
    Seg *segs = lv->segs;
    for (int i = 1; i < lv->n_segs; i++) { /* insertion sort: stable, and a dozen fields */
        Seg s = segs[i];
        int j = i - 1;
        while (j >= 0 && segs[j].number > s.number) {
            segs[j + 1] = segs[j];
            j--;
        }
        segs[j + 1] = s;
    }
    Py_ssize_t total = 0;
    for (int i = 0; i < lv->n_segs; i++) total += segs[i].end - segs[i].start;
    if (buf_reserve(out, 20 + total) < 0) return FAILED;
    char *p = out->data + out->len;
    if (number) {
        p = put_varint(p, ((uint64_t)number << 3) | 2);
        p = put_varint(p, (uint64_t)total);
    }
    for (int i = 0; i < lv->n_segs; i++)
        if (segs[i].end > segs[i].start) p = put(p, lv->wire.data + segs[i].start, segs[i].end - segs[i].start);
    out->len = p - out->data;
    return DONE;
}

/* -- reading values by the schema ------------------------------------------------------------ */

static int read_message(R *r, const Msg *m, int depth);

/* A message object at depth + 1: its body entries and wire bytes left in levels[depth + 1]. */
static int message_at(R *r, int sub, int depth) {
    if (depth + 1 > MAX_DEPTH) return ITEM;
    return read_message(r, &msgs[sub], depth + 1);
}

/* One scalar JSON value `t` of field f, a singular field's or a list's item: its wire bytes into
 * `wire` (`keep_default`: written even when default, as in a map entry or a list). */
static int scalar_wire(Buf *wire, const FieldSpec *f, uint32_t number, const Tok *t, int keep_default) {
    if (f->kind == K_TIMESTAMP) {
        Buf inner = {NULL, 0, 0};
        int done = timestamp_wire(&inner, t);
        if (done == DONE && buf_field(wire, number, inner.data ? inner.data : "", inner.len) < 0) done = FAILED;
        PyMem_Free(inner.data);
        return done;
    }
    if (t->type == T_NULL || t->type == T_OBJECT || t->type == T_ARRAY) return ITEM;
    Scalar s;
    int done = scalar_of(f, t, &s);
    if (done != DONE) return done;
    if (!keep_default && !f->presence && scalar_is_default(&s)) return DONE;
    return put_scalar_field(wire, number, &s);
}

/* A list value (r->p at '['): a repeated field. */
static int read_list(R *r, const FieldSpec *f, const char *key, Py_ssize_t key_n, Level *lv, int depth) {
    r->p++;
    Buf *wire = &lv->wire;
    int packed = f->kind == K_BOOL || f->kind == K_INT || f->kind == K_ENUM || f->kind == K_DOUBLE ||
                 f->kind == K_FLOAT;
    Buf packed_values = {NULL, 0, 0};
    Buf items = {NULL, 0, 0}; /* the body's ArrayValue entries */
    Py_ssize_t attrs_mark = r->attrs.len, index = 0;
    int all_strings = 1, nested = 0, done = DONE;
    ws(r);
    if (r->p < r->end && *r->p == ']') r->p++;
    else {
        for (;;) {
            Tok t;
            if ((done = read_token(r, &t)) != DONE) break;
            Py_ssize_t back = path_push_index(r, index);
            if (back < 0) {
                done = ITEM;
                break;
            }
            if (t.type == T_OBJECT) {
                if (f->kind != K_MESSAGE) {
                    done = ITEM;
                    break;
                }
                nested = 1;
                all_strings = 0;
                if ((done = message_at(r, f->sub, depth)) != DONE) break;
                Level *child = &r->levels[depth + 1];
                Py_ssize_t any_n = field_size(child->body.len);
                if (buf_reserve(&items, field_size(any_n)) < 0) {
                    done = FAILED;
                    break;
                }
                char *p = items.data + items.len;
                *p++ = 0x0a;
                p = put_varint(p, (uint64_t)any_n);
                *p++ = 0x32;
                p = put_varint(p, (uint64_t)child->body.len);
                p = put(p, child->body.data, child->body.len);
                items.len = p - items.data;
                if ((done = emit_message(wire, f->number, child)) != DONE) break;
            } else {
                if (f->kind == K_MESSAGE || t.type == T_ARRAY || t.type == T_NULL) {
                    done = ITEM;
                    break;
                }
                if (t.type != T_STRING) all_strings = 0;
                /* the body's array item, and (if not all strings) its own attribute */
                Py_ssize_t any_n = any_size(&t);
                if (buf_reserve(&items, field_size(any_n)) < 0) {
                    done = FAILED;
                    break;
                }
                char *p = items.data + items.len;
                *p++ = 0x0a;
                p = put_varint(p, (uint64_t)any_n);
                p = put_any(p, &t);
                items.len = p - items.data;
                if ((done = attr_leaf(r, &t)) != DONE) break;
                if (packed) {
                    Scalar s;
                    if ((done = scalar_of(f, &t, &s)) != DONE) break;
                    if ((done = put_scalar_value(&packed_values, &s)) != DONE) break;
                } else if ((done = scalar_wire(wire, f, f->number, &t, 1)) != DONE) {
                    break;
                }
            }
            r->path_n = back;
            index++;
            int end = next_member(r, ']');
            if (end == BODY) {
                done = BODY;
                break;
            }
            if (end) break;
        }
    }
    if (done == DONE && packed && packed_values.len && buf_field(wire, f->number, packed_values.data, packed_values.len) < 0)
        done = FAILED;
    if (done == DONE) done = put_nested_entry(&lv->body, 0x0a, key, key_n, 0x2a, items.data ? items.data : "", items.len);
    if (done == DONE && !nested && all_strings) {
        /* a list of strings (or an empty one) is one attribute; other plain values one an item */
        r->attrs.len = attrs_mark;
        done = put_nested_entry(&r->attrs, 0x32, r->path, r->path_n, 0x2a, items.data ? items.data : "", items.len);
    }
    PyMem_Free(packed_values.data);
    PyMem_Free(items.data);
    return done;
}

/* A map value (r->p at '{'): entries {1: key, 2: value}, each always written (as upb does). */
static int read_map(R *r, const FieldSpec *f, const char *key, Py_ssize_t key_n, Level *lv, int depth) {
    if (depth + 1 > MAX_DEPTH) return ITEM;
    Level *child = &r->levels[depth + 1];
    child->body.len = 0;
    r->p++;
    const char *keys[MAX_KEYS];
    Py_ssize_t key_ns[MAX_KEYS];
    int n = 0, done = DONE;
    ws(r);
    if (r->p < r->end && *r->p == '}') r->p++;
    else {
        for (;;) {
            ws(r);
            const char *k;
            Py_ssize_t kn;
            if (r->p >= r->end || *r->p != '"') return BODY;
            if ((done = read_string(r, &k, &kn)) != DONE) return done;
            ws(r);
            if (r->p >= r->end || *r->p != ':') return BODY;
            r->p++;
            if (n == MAX_KEYS) return ITEM;
            for (int i = 0; i < n; i++)
                if (key_ns[i] == kn && memcmp(keys[i], k, (size_t)kn) == 0) return ITEM; /* orjson keeps one */
            keys[n] = k;
            key_ns[n++] = kn;
            Tok t;
            if ((done = read_token(r, &t)) != DONE) return done;
            Py_ssize_t back = path_push(r, k, kn);
            if (back < 0) return ITEM;
            Buf *entry = &lv->entry;
            entry->len = 0;
            if (buf_field(entry, 1, k, kn) < 0) return FAILED;
            if (f->kind == K_MESSAGE) {
                if (t.type != T_OBJECT) return ITEM;
                if (depth + 2 > MAX_DEPTH) return ITEM;
                /* the value message one level further down; the map's body stays at depth + 1 */
                if ((done = read_message(r, &msgs[f->sub], depth + 2)) != DONE) return done;
                Level *value = &r->levels[depth + 2];
                if (put_nested_entry(&child->body, 0x0a, k, kn, 0x32, value->body.data ? value->body.data : "", value->body.len) != DONE)
                    return FAILED;
                if (emit_message(entry, 2, value) != DONE) return FAILED;
            } else {
                if (t.type == T_OBJECT || t.type == T_ARRAY || t.type == T_NULL) return ITEM;
                if ((done = scalar_wire(entry, f, 2, &t, 1)) != DONE) return done;
                if ((done = put_entry(&child->body, 0x0a, k, kn, &t)) != DONE) return done;
                if ((done = attr_leaf(r, &t)) != DONE) return done;
            }
            r->path_n = back;
            if (buf_field(&lv->wire, f->number, entry->data, entry->len) < 0) return FAILED;
            int end = next_member(r, '}');
            if (end == BODY) return BODY;
            if (end) break;
        }
    }
    if (n > 1) r->unordered = 1;
    return put_nested_entry(&lv->body, 0x0a, key, key_n, 0x32, child->body.data ? child->body.data : "", child->body.len);
}

static const FieldSpec *field_named(const Msg *m, const char *key, Py_ssize_t n) {
    for (int i = 0; i < m->n; i++) {
        const FieldSpec *f = &m->fields[i];
        if (f->json_n == n && memcmp(f->json, key, (size_t)n) == 0) return f;
    }
    return NULL;
}

/* A message object (r->p at '{') into levels[depth]. */
static int read_message(R *r, const Msg *m, int depth) {
    Level *lv = &r->levels[depth];
    lv->wire.len = lv->body.len = 0;
    lv->n_segs = 0;
    r->p++;
    ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return DONE;
    }
    uint32_t seen[MAX_KEYS];
    int oneofs[MAX_KEYS], n_oneofs = 0, done;
    for (;;) {
        ws(r);
        const char *key;
        Py_ssize_t key_n;
        if (r->p >= r->end || *r->p != '"') return BODY;
        if ((done = read_string(r, &key, &key_n)) != DONE) return done;
        ws(r);
        if (r->p >= r->end || *r->p != ':') return BODY;
        r->p++;
        if (!m->readable || lv->n_segs == MAX_KEYS) return ITEM;
        const FieldSpec *f = field_named(m, key, key_n);
        if (f == NULL) return ITEM; /* unknown, or a proto name: json_format's or the walk's rules */
        for (int i = 0; i < lv->n_segs; i++)
            if (seen[i] == f->number) return ITEM;
        if (f->oneof) {
            for (int i = 0; i < n_oneofs; i++)
                if (oneofs[i] == f->oneof) return ITEM;
            oneofs[n_oneofs++] = f->oneof;
        }
        seen[lv->n_segs] = f->number;
        Seg *seg = &lv->segs[lv->n_segs++];
        seg->number = f->number;
        seg->start = lv->wire.len;
        Py_ssize_t back = path_push(r, f->proto, f->proto_n);
        if (back < 0) return ITEM;
        Tok t;
        if ((done = read_token(r, &t)) != DONE) return done;
        if (t.type == T_NULL) return ITEM;
        if (f->label == MAP) {
            if (t.type != T_OBJECT) return ITEM;
            done = read_map(r, f, key, key_n, lv, depth);
        } else if (f->label == REPEATED) {
            if (t.type != T_ARRAY) return ITEM;
            done = read_list(r, f, key, key_n, lv, depth);
        } else if (t.type == T_OBJECT) {
            if (f->kind != K_MESSAGE) return ITEM;
            if ((done = message_at(r, f->sub, depth)) != DONE) return done;
            Level *child = &r->levels[depth + 1];
            done = put_nested_entry(&lv->body, 0x0a, key, key_n, 0x32, child->body.data ? child->body.data : "", child->body.len);
            if (done == DONE) done = emit_message(&lv->wire, f->number, child);
        } else {
            if (f->kind == K_MESSAGE || t.type == T_ARRAY) return ITEM;
            done = scalar_wire(&lv->wire, f, f->number, &t, 0);
            if (done == DONE) done = put_entry(&lv->body, 0x0a, key, key_n, &t);
            if (done == DONE) done = attr_leaf(r, &t);
        }
        if (done != DONE) return done;
        seg->end = lv->wire.len;
        r->path_n = back;
        int end = next_member(r, '}');
        if (end == BODY) return BODY;
        if (end) return DONE;
    }
}

/* -- a POST ----------------------------------------------------------------------------------- */

#define ROOT_PATH "ray.event"

/* One item at r->p: its parts, or ITEM / BODY / FAILED. */
static int read_item(R *r, PyObject **out) {
    r->attrs.len = 0;
    r->scratch.len = 0;
    r->unordered = 0;
    memcpy(r->path, ROOT_PATH, sizeof ROOT_PATH - 1);
    r->path_n = sizeof ROOT_PATH - 1;
    ws(r);
    if (r->p >= r->end || *r->p != '{') return ITEM;
    int done = read_message(r, &msgs[root_msg], 0);
    if (done != DONE) return done;
    Level *top = &r->levels[0];
    int typed = 0;
    for (int i = 0; i < top->n_segs; i++)
        typed |= top->segs[i].number == type_field && top->segs[i].end > top->segs[i].start;
    if (!typed) return ITEM; /* no type, or type 0: the Python path names the problem */
    Buf wire = {NULL, 0, 0};
    if (emit_message(&wire, 0, top) != DONE) {
        PyMem_Free(wire.data);
        return FAILED;
    }
    PyObject *wire_bytes = PyBytes_FromStringAndSize(wire.data ? wire.data : "", wire.len);
    PyMem_Free(wire.data);
    if (wire_bytes == NULL) return FAILED;
    PyObject *head = r->unordered ? Py_NewRef(Py_None) : PyObject_CallOneArg(head_fn, wire_bytes);
    PyObject *body = head ? PyBytes_FromStringAndSize(top->body.data ? top->body.data : "", top->body.len) : NULL;
    PyObject *attrs = body ? PyBytes_FromStringAndSize(r->attrs.data ? r->attrs.data : "", r->attrs.len) : NULL;
    if (attrs == NULL) {
        Py_DECREF(wire_bytes);
        Py_XDECREF(head);
        Py_XDECREF(body);
        return FAILED;
    }
    PyObject *parts = ((PyTypeObject *)parts_type)->tp_alloc((PyTypeObject *)parts_type, 5);
    if (parts == NULL) {
        Py_DECREF(head);
        Py_DECREF(wire_bytes);
        Py_DECREF(body);
        Py_DECREF(attrs);
        return FAILED;
    }
    PyTuple_SET_ITEM(parts, 0, head);
    PyTuple_SET_ITEM(parts, 1, wire_bytes);
    PyTuple_SET_ITEM(parts, 2, body);
    PyTuple_SET_ITEM(parts, 3, attrs);
    PyTuple_SET_ITEM(parts, 4, Py_NewRef(Py_None));
    *out = parts;
    return DONE;
}

static void free_levels(R *r) {
    for (int i = 0; i <= MAX_DEPTH; i++) {
        PyMem_Free(r->levels[i].wire.data);
        PyMem_Free(r->levels[i].body.data);
        PyMem_Free(r->levels[i].entry.data);
    }
    PyMem_Free(r->attrs.data);
    PyMem_Free(r->scratch.data);
}

/* read(body) -> (items, whole) or None: items is per item an EventParts(head, wire, body entries,
 * attribute entries, None), its head None where Python reads it, or the item's slice of the text;
 * `whole` is True when every item is an EventParts with its head. */
static PyObject *read_body(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyBytes_Check(arg) || head_fn == NULL) {
        PyErr_SetString(PyExc_TypeError, "read(body: bytes), after bind()");
        return NULL;
    }
    R *r = PyMem_Calloc(1, sizeof(R));
    if (r == NULL) return PyErr_NoMemory();
    r->start = r->p = (const uint8_t *)PyBytes_AS_STRING(arg);
    r->end = r->start + PyBytes_GET_SIZE(arg);
    PyObject *items = NULL;
    int whole = 1;
    if (buf_reserve(&r->scratch, PyBytes_GET_SIZE(arg) + 16) < 0) goto done;
    items = PyList_New(0);
    if (items == NULL) goto done;
    ws(r);
    if (r->p >= r->end || *r->p != '[') goto whole;
    r->p++;
    ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        goto end;
    }
    for (;;) {
        ws(r);
        const uint8_t *start = r->p;
        PyObject *item = NULL;
        int done = read_item(r, &item);
        if (done == FAILED) goto fail;
        if (done == BODY) goto whole;
        if (done == DONE && PyTuple_GET_ITEM(item, 0) == Py_None) whole = 0;
        if (done == ITEM) {
            whole = 0;
            r->p = start;
            r->p = json_skip_value(start, r->end, SKIP_DEPTH);
            if (r->p == NULL) goto whole;
            PyObject *from = PyLong_FromSsize_t(start - r->start), *to = PyLong_FromSsize_t(r->p - r->start);
            item = from && to ? PySlice_New(from, to, NULL) : NULL;
            Py_XDECREF(from);
            Py_XDECREF(to);
            if (item == NULL) goto fail;
        }
        int failed = PyList_Append(items, item);
        Py_DECREF(item);
        if (failed < 0) goto fail;
        int close = next_member(r, ']');
        if (close == BODY) goto whole;
        if (close) break;
    }
end:
    ws(r);
    if (r->p != r->end) goto whole;
    items = Py_BuildValue("(NO)", items, whole ? Py_True : Py_False); /* N: the list's reference moves */
    goto done;
whole:
    Py_XSETREF(items, Py_NewRef(Py_None));
    goto done;
fail:
    Py_CLEAR(items);
done:
    free_levels(r);
    PyMem_Free(r);
    return items;
}

/* -- pieces: events forwarded to the worker that owns them ---------------------------------------- */

#define PIECE_FIELDS 3 /* per event: its wire bytes, its record's body entries, its attribute entries */
#define NO_BODY 0xffffffffu /* the length of a body not sent (and then no attributes either) */

/* pieces(events, records) -> bytes, or None when an event's record is not read yet (its body None)
 * and `records`: per event the three fields, each after its 4-byte big-endian length; without
 * `records`, the body as NO_BODY and no attributes (posted_events.encode_pieces). */
static PyObject *pieces(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "pieces(events: list[EventParts], records: bool)");
        return NULL;
    }
    PyObject *events = args[0];
    int records = PyObject_IsTrue(args[1]);
    if (records < 0) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(events), size = 0;
    static const int at[PIECE_FIELDS] = {1, 2, 3};
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *parts = PyList_GET_ITEM(events, i);
        if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) < 5) {
            PyErr_SetString(PyExc_TypeError, "pieces(events: list[EventParts])");
            return NULL;
        }
        for (int f = 0; f < (records ? PIECE_FIELDS : 1); f++) {
            PyObject *field = PyTuple_GET_ITEM(parts, at[f]);
            if (field == Py_None) Py_RETURN_NONE;
            if (!PyBytes_Check(field) || PyBytes_GET_SIZE(field) >= NO_BODY) {
                PyErr_SetString(PyExc_TypeError, "an event's wire, body and attributes are bytes (under 4 GiB)");
                return NULL;
            }
            size += 4 + PyBytes_GET_SIZE(field);
        }
        if (!records) size += 8;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++)
        for (int f = 0; f < PIECE_FIELDS; f++) {
            PyObject *field = records || f == 0 ? PyTuple_GET_ITEM(PyList_GET_ITEM(events, i), at[f]) : NULL;
            uint32_t n = field ? (uint32_t)PyBytes_GET_SIZE(field) : f == 1 ? NO_BODY : 0;
            for (int k = 0; k < 4; k++) *p++ = (char)(n >> (24 - 8 * k));
            if (field && n) memcpy(p, PyBytes_AS_STRING(field), n);
            p += field ? n : 0;
        }
    return out;
}

/* read_pieces(data) -> (items, whole): the EventParts `pieces` wrote, each head read (None where
 * Python reads it; `whole` False then). ValueError when the data is cut short. */
static PyObject *read_pieces(PyObject *module, PyObject *data) {
    (void)module;
    if (!PyBytes_Check(data) || head_fn == NULL || parts_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "read_pieces(data: bytes), after bind()");
        return NULL;
    }
    const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(data), *end = p + PyBytes_GET_SIZE(data);
    PyObject *items = PyList_New(0);
    int whole = 1;
    while (items != NULL && p < end) {
        PyObject *fields[PIECE_FIELDS + 1] = {NULL, NULL, NULL, NULL};
        int failed = 0;
        for (int f = 0; f < PIECE_FIELDS && !failed; f++) {
            if (end - p < 4) {
                failed = 1;
                break;
            }
            uint32_t n = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
            p += 4;
            if (f == 1 && n == NO_BODY) {
                fields[2] = Py_NewRef(Py_None);
                continue;
            }
            if ((uint64_t)(end - p) < n) {
                failed = 1;
                break;
            }
            fields[f + 1] = PyBytes_FromStringAndSize((const char *)p, n);
            p += n;
            failed = fields[f + 1] == NULL ? 2 : 0;
        }
        if (!failed) {
            fields[0] = PyObject_CallOneArg(head_fn, fields[1]);
            failed = fields[0] == NULL ? 2 : 0;
        }
        PyObject *parts = failed ? NULL : ((PyTypeObject *)parts_type)->tp_alloc((PyTypeObject *)parts_type, 5);
        if (parts == NULL) {
            for (int f = 0; f <= PIECE_FIELDS; f++) Py_XDECREF(fields[f]);
            if (failed == 1) PyErr_SetString(PyExc_ValueError, "a truncated piece");
            Py_CLEAR(items);
            break;
        }
        whole &= fields[0] != Py_None;
        for (int f = 0; f <= PIECE_FIELDS; f++) PyTuple_SET_ITEM(parts, f, fields[f]);
        PyTuple_SET_ITEM(parts, 4, Py_NewRef(Py_None));
        failed = PyList_Append(items, parts);
        Py_DECREF(parts);
        if (failed < 0) Py_CLEAR(items);
    }
    return items == NULL ? NULL : Py_BuildValue("(NO)", items, whole ? Py_True : Py_False);
}

/* -- binding ---------------------------------------------------------------------------------- */

static void clear_schema(void) {
    for (int i = 0; i < n_msgs; i++) {
        for (int j = 0; j < msgs[i].n; j++) PyMem_Free(msgs[i].fields[j].enums);
        PyMem_Free(msgs[i].fields);
    }
    PyMem_Free(msgs);
    msgs = NULL;
    n_msgs = 0;
    Py_CLEAR(bound);
}

static int bytes_of(PyObject *obj, const char **s, Py_ssize_t *n) {
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "names must be bytes");
        return -1;
    }
    *s = PyBytes_AS_STRING(obj);
    *n = PyBytes_GET_SIZE(obj);
    return 0;
}

/* bind(messages, root, type field, head, parts type): messages is a list of (readable, fields), fields a tuple of
 * (json name, proto name, number, kind, label, low, high, enum ((name, number), ...) or None,
 * message index or -1, oneof (0: none), has presence), all names bytes. */
static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 5 || !PyList_Check(args[0]) || !PyLong_Check(args[1]) || !PyLong_Check(args[2]) ||
        !PyCallable_Check(args[3]) || !PyType_Check(args[4]) ||
        !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(messages: list, root: int, type_field: int, head: callable, parts: a tuple subclass)");
        return NULL;
    }
    clear_schema();
    PyObject *messages = args[0];
    n_msgs = (int)PyList_GET_SIZE(messages);
    msgs = PyMem_Calloc((size_t)(n_msgs ? n_msgs : 1), sizeof(Msg));
    if (msgs == NULL) return PyErr_NoMemory();
    for (int i = 0; i < n_msgs; i++) {
        PyObject *spec = PyList_GET_ITEM(messages, i);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(spec, 1))) {
            PyErr_SetString(PyExc_TypeError, "a message is (readable, fields tuple)");
            goto fail;
        }
        PyObject *fields = PyTuple_GET_ITEM(spec, 1);
        Msg *m = &msgs[i];
        m->readable = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 0));
        m->n = (int)PyTuple_GET_SIZE(fields);
        m->fields = PyMem_Calloc((size_t)(m->n ? m->n : 1), sizeof(FieldSpec));
        if (m->fields == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (int j = 0; j < m->n; j++) {
            PyObject *t = PyTuple_GET_ITEM(fields, j);
            FieldSpec *f = &m->fields[j];
            if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 11) {
                PyErr_SetString(PyExc_TypeError, "a field is a tuple of 11");
                goto fail;
            }
            if (bytes_of(PyTuple_GET_ITEM(t, 0), &f->json, &f->json_n) < 0 ||
                bytes_of(PyTuple_GET_ITEM(t, 1), &f->proto, &f->proto_n) < 0)
                goto fail;
            f->number = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, 2));
            f->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 3));
            f->label = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 4));
            f->low = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 5));
            f->high = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 6));
            f->sub = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 8));
            f->oneof = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 9));
            f->presence = PyObject_IsTrue(PyTuple_GET_ITEM(t, 10));
            if (PyErr_Occurred()) goto fail;
            if (f->kind == K_MESSAGE && (f->sub < 0 || f->sub >= n_msgs)) {
                PyErr_SetString(PyExc_ValueError, "a message field's index is out of range");
                goto fail;
            }
            PyObject *enums = PyTuple_GET_ITEM(t, 7);
            if (enums != Py_None) {
                if (!PyTuple_Check(enums)) {
                    PyErr_SetString(PyExc_TypeError, "an enum is a tuple of (name, number)");
                    goto fail;
                }
                f->n_enum = (int)PyTuple_GET_SIZE(enums);
                f->enums = PyMem_Calloc((size_t)(f->n_enum ? f->n_enum : 1), sizeof(EnumName));
                if (f->enums == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
                for (int k = 0; k < f->n_enum; k++) {
                    PyObject *pair = PyTuple_GET_ITEM(enums, k);
                    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
                        bytes_of(PyTuple_GET_ITEM(pair, 0), &f->enums[k].name, &f->enums[k].n) < 0)
                        goto fail;
                    f->enums[k].number = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
                    if (PyErr_Occurred()) goto fail;
                }
            }
        }
    }
    root_msg = (int)PyLong_AsLong(args[1]);
    if (root_msg < 0 || root_msg >= n_msgs) {
        PyErr_SetString(PyExc_ValueError, "root out of range");
        goto fail;
    }
    type_field = (uint32_t)PyLong_AsUnsignedLong(args[2]);
    if (PyErr_Occurred()) goto fail;
    bound = Py_NewRef(messages);
    Py_XSETREF(head_fn, Py_NewRef(args[3]));
    Py_XSETREF(parts_type, Py_NewRef(args[4]));
    Py_RETURN_NONE;
fail:
    clear_schema();
    return NULL;
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, "bind(messages, root, type_field, head, parts): the schema read."},
    {"pieces", (PyCFunction)(void (*)(void))pieces, METH_FASTCALL,
     "pieces(events, records) -> the events for their owner, or None."},
    {"read_pieces", (PyCFunction)read_pieces, METH_O, "read_pieces(data) -> (items, whole)."},
    {"read", (PyCFunction)read_body, METH_O,
     "read(body) -> (per item its EventParts or its slice of the text, all read here), or None: read "
     "the body in Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_posted_events", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__posted_events(void) { return export_wire_kinds(PyModule_Create(&module_def)); }
