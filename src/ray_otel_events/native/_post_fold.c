/* `serve`'s intake compiled: a POST's RayEvent JSON read (`scan`) and folded into the store's task
 * rows (`Folder.fold`) from its text, building no Python object per event and holding no GIL.
 *
 * Before, the event loop parsed each POST into Python objects (orjson.loads, `prepare`) and the
 * fold thread merged those into row dicts and dumped them again, both under one GIL, so the parse,
 * the fold and the client took turns on two cores. Here `scan` reads the body's text with the GIL
 * released and says which items it cannot read as `prepare` would (their place in the text:
 * store/posted_body.py reads those with orjson and `prepare`, so the answer's rejections are the
 * Python ones), and an index of the others (kind, key, where the
 * payload is); the body and that index are what the fold thread keeps. `Folder.fold` groups a
 * batch of POSTs' events by row from their indexes, reads a chunk's stored rows at once on a
 * SQLite connection of its own, reads each event's payload as it folds it into its row as
 * state_merge's task folds do, writes the row's JSON as orjson writes the Python row (same keys,
 * same order, same bytes) and its indexed values, and queues the chunk's upserts to the row writer
 * (native/_row_writer.c), all without the GIL.
 *
 * Only the shapes Ray prints are folded here. A row with any other piece (another event type, an
 * event `scan` left to Python, a value the Python fold decides: an odd id, time or number, a float
 * that orjson would print otherwise, a shape that makes the Python fold raise) or a stored row of
 * another shape is handed back, untouched, with its events' places: the store folds it with
 * state_merge and row_fold, as the Python path does. So the two paths cannot drift apart; the tests
 * fold every captured event, shuffled and mutated bodies both ways and compare the rows.
 *
 * A body `scan` cannot read as orjson would (not JSON, a duplicate key, an escaped key, an integer
 * past int64, nesting past MAX_DEPTH) is read by Python whole (None). Optional: built where SQLite's
 * headers are present, like the row writer. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>

#include "event_hash.h"
#include "fold_names.h"
#include "json_lexer.h"
#include "packed_rows.h"
#include "ray_json_values.h"
#include "row_packing.h"
#include "sqlite_library.h"

/* -- JSON text as a tree of nodes ------------------------------------------------------------ */

enum { J_NULL, J_FALSE, J_TRUE, J_INT, J_FLOAT, J_STRING, J_ARRAY, J_OBJECT };

/* Node flags: CANON, the value's text is what orjson writes for it (copied as it is); WRITABLE,
 * this module can write what orjson writes for it (not a float printed another way); ESCAPED, a
 * string with a backslash in it. */
enum { CANON = 1, WRITABLE = 2, ESCAPED = 4 };

typedef struct {
    uint32_t start, end; /* the value's text */
    uint32_t next;       /* the next item of its array, or the next key of its object; 0: none */
    uint32_t count;      /* items of an array, members of an object */
    uint8_t type, flags;
    int64_t num; /* J_INT */
} Node;

#define MAX_DEPTH 128
#define MAX_MEMBERS 256 /* keys of one object compared for duplicates; more: read in Python */

/* What reading returns besides a node. */
enum { P_OK = 0, P_PYTHON = -1 /* orjson decides it */, P_MEMORY = -2 };

typedef struct {
    const uint8_t *text;
    uint32_t len, pos;
    Node *nodes;
    uint32_t n, cap;
    int depth, status;
    int keep_depth; /* containers nested deeper are checked, not read into nodes (0: none is) */
} Parser;

static void parser_free(Parser *p) {
    PyMem_RawFree(p->nodes);
    p->nodes = NULL;
    p->n = p->cap = 0;
}

/* Read `len` bytes of `text` from the start, forgetting the nodes read before. */
static void parser_reset(Parser *p, const uint8_t *text, uint32_t len) {
    p->text = text;
    p->len = len;
    p->pos = 0;
    p->n = 0;
    p->depth = 0;
    p->status = P_OK;
    p->keep_depth = 0;
}

static inline __attribute__((always_inline)) int64_t new_node(Parser *p, int type) {
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 256;
        Node *nodes = PyMem_RawRealloc(p->nodes, sizeof(Node) * cap);
        if (nodes == NULL) {
            p->status = P_MEMORY;
            return -1;
        }
        p->nodes = nodes;
        p->cap = cap;
    }
    Node *node = p->nodes + p->n;
    *node = (Node){.start = p->pos, .type = (uint8_t)type, .flags = CANON | WRITABLE};
    return p->n++;
}

static int64_t unreadable(Parser *p) {
    if (p->status == P_OK) p->status = P_PYTHON;
    return -1;
}

/* Skips whitespace; says whether there was any. */
static inline __attribute__((always_inline)) int skip_space(Parser *p) {
    uint32_t i = p->pos;
    if (i >= p->len || !json_is_space(p->text[i])) return 0; /* mostly: no pointers made */
    p->pos = (uint32_t)(json_space(p->text + i + 1, p->text + p->len) - p->text);
    return 1;
}

/* Whether a checked string's escapes, from its first backslash `s` to its closing quote, are as
 * orjson writes them: \" \\ \b \f \n \r \t, and \u00xx (lowercase) only for the other control
 * characters (not \/, not a surrogate pair, not any other character escaped). */
static int escapes_as_orjson_writes(const uint8_t *s, const uint8_t *end) {
    while (s < end) {
        if (*s != '\\') {
            s++;
            continue;
        }
        uint8_t e = s[1];
        if (e == '/') return 0;
        if (e != 'u') {
            s += 2;
            continue;
        }
        for (int i = 2; i < 6; i++)
            if (s[i] >= 'A' && s[i] <= 'F') return 0;
        int32_t u = json_hex4(s + 2);
        if (u >= 0x20 || u == '\b' || u == '\t' || u == '\n' || u == '\f' || u == '\r') return 0;
        s += 6;
    }
    return 1;
}

/* The string at the reading position (its quote) checked as orjson reads it (json_string) and
 * passed; its flags at `*flags`. -1 for one orjson refuses or may read otherwise. */
static inline __attribute__((always_inline)) int read_string(Parser *p, uint8_t *flags) {
    const uint8_t *escape, *close = json_string(p->text + p->pos, p->text + p->len, &escape);
    if (close == NULL) return unreadable(p), -1;
    p->pos = (uint32_t)(close + 1 - p->text);
    *flags = escape == NULL                            ? CANON | WRITABLE
             : escapes_as_orjson_writes(escape, close) ? CANON | WRITABLE | ESCAPED
                                                       : WRITABLE | ESCAPED;
    return 0;
}

static int64_t parse_string(Parser *p) {
    int64_t k = new_node(p, J_STRING);
    uint8_t flags;
    if (k < 0 || read_string(p, &flags) < 0) return -1;
    Node *node = p->nodes + k;
    node->end = p->pos;
    node->flags = flags;
    return k;
}

/* A float's text is what orjson writes for it when it is in fixed notation with the shortest
 * digits: 15 significant digits or fewer (then no other decimal of as few digits has the same
 * double, so these are the shortest), no trailing zero after the point but a lone one, and a size
 * where orjson and Python both print fixed notation (1e-4 <= |x| < 1e16, or zero). */
static int float_is_canonical(const uint8_t *s, uint32_t n) {
    uint32_t i = s[0] == '-';
    uint32_t int_start = i;
    while (i < n && json_is_digit(s[i])) i++;
    uint32_t int_end = i;
    if (i >= n || s[i] != '.') return 0;
    uint32_t frac_start = ++i;
    while (i < n && json_is_digit(s[i])) i++;
    if (i != n) return 0; /* an exponent */
    uint32_t frac_n = n - frac_start;
    if (frac_n > 1 && s[n - 1] == '0') return 0;
    int int_zero = int_end - int_start == 1 && s[int_start] == '0';
    uint32_t first = int_start; /* the first significant digit */
    while (first < n && (s[first] == '0' || s[first] == '.')) first++;
    if (first == n) return frac_n == 1; /* zero: "0.0" or "-0.0" */
    if (int_zero) {
        if (first - frac_start > 3) return 0; /* under 1e-4 */
    } else if (int_end - int_start > 16) {
        return 0; /* 1e16 or more */
    }
    uint32_t last = n; /* one past the last significant digit */
    while (last > first && (s[last - 1] == '0' || s[last - 1] == '.')) last--;
    uint32_t digits = last - first - (first < int_end && last > int_end ? 1 : 0);
    return digits <= 15;
}

/* The number at the reading position checked as orjson reads it (json_number) and passed: J_INT
 * (its value at `*num`) or J_FLOAT, its flags at `*flags`; -1 for one orjson reads otherwise (an
 * integer past int64) or refuses (an infinite float). */
static int read_number(Parser *p, int *type, int64_t *num, uint8_t *flags) {
    const uint8_t *start = p->text + p->pos;
    JsonNumber number;
    const uint8_t *stop = json_number(start, p->text + p->len, &number);
    if (stop == NULL) return unreadable(p), -1;
    p->pos = (uint32_t)(stop - p->text);
    uint32_t n = (uint32_t)(stop - start);
    if (number.is_float) {
        if (!json_float_finite(start, n)) return unreadable(p), -1;
        *type = J_FLOAT;
        *flags = float_is_canonical(start, n) ? CANON | WRITABLE : 0;
        return 0;
    }
    if (json_int64(&number, num) < 0) return unreadable(p), -1;
    *type = J_INT;
    /* "-0" is written "0" */
    *flags = number.negative && number.magnitude == 0 ? WRITABLE : CANON | WRITABLE;
    return 0;
}

static int64_t parse_number(Parser *p) {
    int64_t k = new_node(p, J_INT);
    int type;
    int64_t num = 0;
    uint8_t flags;
    if (k < 0 || read_number(p, &type, &num, &flags) < 0) return -1;
    Node *node = p->nodes + k;
    node->end = p->pos;
    node->type = (uint8_t)type;
    node->num = num;
    node->flags = flags;
    return k;
}

static int64_t parse_literal(Parser *p, int type) {
    const uint8_t *stop = json_literal(p->text + p->pos, p->text + p->len);
    if (stop == NULL) return unreadable(p);
    int64_t k = new_node(p, type);
    if (k < 0) return -1;
    p->pos = (uint32_t)(stop - p->text);
    p->nodes[k].end = p->pos;
    return k;
}

static int64_t parse_value(Parser *p);

static int same_key(const Parser *p, const Node *a, const Node *b) {
    uint32_t n = a->end - a->start;
    return n == b->end - b->start && memcmp(p->text + a->start, p->text + b->start, n) == 0;
}

/* The array or object at the reading position: its items, or its keys each followed by its value,
 * linked by `next`. Escaped keys, and keys given twice (orjson keeps the last value where the first
 * was), are read in Python. */
static int64_t parse_container(Parser *p) {
    int object = p->text[p->pos] == '{';
    uint8_t close = object ? '}' : ']';
    int64_t k = new_node(p, object ? J_OBJECT : J_ARRAY);
    if (k < 0) return -1;
    if (++p->depth > MAX_DEPTH) return unreadable(p);
    p->pos++;
    int spaced = skip_space(p), flags = CANON | WRITABLE;
    uint32_t count = 0;
    int64_t previous = -1;
    if (p->pos < p->len && p->text[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            int64_t member = -1; /* what `next` links: the key, or the item */
            if (object) {
                if (p->pos >= p->len || p->text[p->pos] != '"' || count == MAX_MEMBERS) return unreadable(p);
                if ((member = parse_string(p)) < 0) return -1;
                if (p->nodes[member].flags & ESCAPED) return unreadable(p);
                for (uint32_t other = (uint32_t)k + 1, i = 0; i < count; other = p->nodes[other].next, i++)
                    if (same_key(p, p->nodes + other, p->nodes + member)) return unreadable(p);
                spaced |= skip_space(p);
                if (p->pos >= p->len || p->text[p->pos] != ':') return unreadable(p);
                p->pos++;
                spaced |= skip_space(p);
            }
            int64_t value = parse_value(p);
            if (value < 0) return -1;
            if (object && value != member + 1) return unreadable(p); /* cannot happen: a value follows its key */
            flags &= p->nodes[value].flags;
            if (!object) member = value;
            if (previous >= 0) p->nodes[previous].next = (uint32_t)member;
            previous = member;
            count++;
            spaced |= skip_space(p);
            if (p->pos >= p->len) return unreadable(p);
            uint8_t c = p->text[p->pos++];
            if (c == close) break;
            if (c != ',') return unreadable(p);
            spaced |= skip_space(p);
        }
    }
    p->depth--;
    Node *node = p->nodes + k;
    node->end = p->pos;
    node->count = count;
    node->flags = (uint8_t)(spaced ? flags & WRITABLE : flags);
    return k;
}

/* The value at the reading position (no space before it). */
static int64_t parse_value(Parser *p) {
    if (p->pos >= p->len) return unreadable(p);
    uint8_t c = p->text[p->pos];
    if (p->keep_depth && p->depth >= p->keep_depth && (c == '{' || c == '[')) {
        /* a node with no members read (and no flags: never written from): its text is checked */
        int64_t k = new_node(p, c == '{' ? J_OBJECT : J_ARRAY);
        if (k < 0) return -1;
        const uint8_t *stop = json_skip_value(p->text + p->pos, p->text + p->len, MAX_DEPTH - p->depth);
        if (stop == NULL) return unreadable(p);
        p->pos = (uint32_t)(stop - p->text);
        p->nodes[k].end = p->pos;
        p->nodes[k].flags = 0;
        return k;
    }
    switch (c) {
    case '"': return parse_string(p);
    case '{':
    case '[': return parse_container(p);
    case 't': return parse_literal(p, J_TRUE);
    case 'f': return parse_literal(p, J_FALSE);
    case 'n': return parse_literal(p, J_NULL);
    default: return parse_number(p);
    }
}

/* A JSON array read an item at a time: `array_open`, then `array_item` until it gives 0. */
static int array_open(Parser *p) {
    skip_space(p);
    if (p->pos >= p->len || p->text[p->pos] != '[') return unreadable(p), -1;
    p->pos++;
    skip_space(p);
    return 0;
}

/* The next item (1, its node at `*item`; the nodes read for earlier items are forgotten), 0 at the
 * array's end (only space may follow it), or -1. */
static int array_item(Parser *p, uint32_t index, int64_t *item) {
    p->n = 0;
    if (p->pos < p->len && p->text[p->pos] == ']') {
        p->pos++;
        skip_space(p);
        return p->pos == p->len ? 0 : (unreadable(p), -1);
    }
    if (index > 0) {
        if (p->pos >= p->len || p->text[p->pos] != ',') return unreadable(p), -1;
        p->pos++;
        skip_space(p);
    }
    *item = parse_value(p);
    if (*item < 0) return -1;
    skip_space(p);
    if (p->pos >= p->len || (p->text[p->pos] != ',' && p->text[p->pos] != ']')) return unreadable(p), -1;
    return 1;
}

/* -- reading nodes ---------------------------------------------------------------------------- */

/* The value of `key` in object `object`, or -1. Keys are never escaped (see parse_container). */
static int64_t member(const Parser *p, int64_t object, const char *key, uint32_t n) {
    if (object < 0 || p->nodes[object].type != J_OBJECT || p->nodes[object].count == 0) return -1;
    for (uint32_t k = (uint32_t)object + 1;; k = p->nodes[k].next) {
        const Node *node = p->nodes + k;
        if (node->end - node->start == n + 2 && memcmp(p->text + node->start + 1, key, n) == 0) return k + 1;
        if (node->next == 0) return -1;
    }
}

/* The names bound by bind_names (fold_names.h), as the fold reads and writes them. Set once a
 * binding and never freed: a fold running without the GIL may be reading them while the module is
 * bound again. */
typedef struct {
    const char *p; /* NULL: Python's None (left out of a row's JSON) */
    uint32_t n;
} Text;
static Text key_name[N_FOLD_KEYS];     /* Ray's keys as they are in the text, unquoted */
static Text field_json[N_FOLD_FIELDS]; /* each field as a JSON string: "\"name\"" */
static Text value_json[N_FOLD_VALUES]; /* each value as a JSON string */
static Text state_json[N_FOLD_STATES][MAX_FOLD_STATES]; /* each group's task states, JSON strings */
static int n_states[N_FOLD_STATES];
#define VALUE_JSON(id) value_json[VALUE_##id]

/* The value of Ray's key `id` (fold_names.h) in object `object`, or -1. */
#define MEMBER(p, object, id) member(p, object, key_name[KEY_##id].p, key_name[KEY_##id].n)

static int float_is_zero(const uint8_t *s, uint32_t n) {
    for (uint32_t i = 0; i < n && s[i] != 'e' && s[i] != 'E'; i++)
        if (s[i] >= '1' && s[i] <= '9') return 0;
    return 1;
}

/* Python's truth of the value (a missing one is falsy). */
static int truthy(const Parser *p, int64_t v) {
    if (v < 0) return 0;
    const Node *node = p->nodes + v;
    switch (node->type) {
    case J_TRUE: return 1;
    case J_INT: return node->num != 0;
    case J_FLOAT: return !float_is_zero(p->text + node->start, node->end - node->start);
    case J_STRING: return node->end - node->start > 2;
    case J_ARRAY:
    case J_OBJECT: return node->count > 0;
    default: return 0;
    }
}

static int is_string(const Parser *p, int64_t v) { return v >= 0 && p->nodes[v].type == J_STRING; }

/* -- text kept while a chunk of rows is folded ------------------------------------------------ */


#define NONE ((Text){NULL, 0})
#define LIT(s) ((Text){s, sizeof(s) - 1})

/* Blocks that never move, so a Text into them stays valid until `arena_reset`. */
typedef struct Block {
    struct Block *next;
    size_t used, cap;
    char data[];
} Block;

typedef struct {
    Block *head;
    int failed;
} Arena;

static char *arena_alloc(Arena *a, size_t n) {
    Block *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        Block *fresh = PyMem_RawMalloc(sizeof(Block) + cap);
        if (fresh == NULL) {
            a->failed = 1;
            return NULL;
        }
        fresh->next = b;
        fresh->used = 0;
        fresh->cap = cap;
        a->head = b = fresh;
    }
    char *out = b->data + b->used;
    b->used += n;
    return out;
}

/* Forget everything allocated; keep one block for what comes next. */
static void arena_reset(Arena *a) {
    Block *keep = a->head;
    if (keep == NULL) return;
    Block *b = keep->next;
    while (b != NULL) {
        Block *next = b->next;
        PyMem_RawFree(b);
        b = next;
    }
    keep->next = NULL;
    keep->used = 0;
    a->failed = 0;
}

static void arena_free(Arena *a) {
    arena_reset(a);
    PyMem_RawFree(a->head);
    a->head = NULL;
}

static Text arena_copy(Arena *a, const char *s, size_t n) {
    char *out = arena_alloc(a, n);
    if (out == NULL) return NONE;
    memcpy(out, s, n);
    return (Text){out, (uint32_t)n};
}

static int text_eq(Text a, Text b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

static Text int_text(Arena *a, int64_t v) {
    char *o = arena_alloc(a, 20);
    if (o == NULL) return NONE;
    return (Text){o, (uint32_t)(put_decimal(o, v) - o)};
}

/* -- writing values as orjson writes them ----------------------------------------------------- */

/* What orjson writes for node `v` of `p`, at `o` (room for the node's text: never longer); its end.
 * The node is WRITABLE. */
static char *put_json(const Parser *p, uint32_t v, char *o, Arena *scratch) {
    const Node *node = p->nodes + v;
    const uint8_t *raw = p->text + node->start;
    uint32_t n = node->end - node->start;
    if (node->flags & CANON) {
        memcpy(o, raw, n);
        return o + n;
    }
    switch (node->type) {
    case J_INT: return put_decimal(o, node->num);
    case J_STRING: {
        char *utf8 = arena_alloc(scratch, n);
        if (utf8 == NULL) return NULL;
        char *end = json_unescape(raw + 1, raw + n - 1, utf8);
        /* decoded and escaped again: never longer than the text it came from (see put_value) */
        char *tmp = arena_alloc(scratch, 2 + 6 * (size_t)(end - utf8));
        if (tmp == NULL) return NULL;
        char *tmp_end = put_string_json(tmp, (const uint8_t *)utf8, end - utf8);
        memcpy(o, tmp, (size_t)(tmp_end - tmp));
        return o + (tmp_end - tmp);
    }
    case J_ARRAY:
    case J_OBJECT: {
        int object = node->type == J_OBJECT;
        *o++ = object ? '{' : '[';
        uint32_t k = node->count ? v + 1 : 0;
        for (uint32_t i = 0; i < node->count; i++) {
            if (i) *o++ = ',';
            if (object) {
                const Node *key = p->nodes + k;
                memcpy(o, p->text + key->start, key->end - key->start);
                o += key->end - key->start;
                *o++ = ':';
                o = put_json(p, k + 1, o, scratch);
            } else {
                o = put_json(p, k, o, scratch);
            }
            if (o == NULL) return NULL;
            k = p->nodes[k].next;
        }
        *o++ = object ? '}' : ']';
        return o;
    }
    default: /* literals are always CANON; an odd float is not WRITABLE */
        return NULL;
    }
}

/* Node `v` as its JSON text for a row (its own text when orjson writes it so, else written into
 * `a`): 0, or -1 when it is not WRITABLE (the row is folded in Python) or memory ran out. Its
 * canonical text is never longer than its text: escapes only get shorter (or stay), space goes. */
static int json_of(const Parser *p, int64_t v, Arena *a, Text *out) {
    const Node *node = p->nodes + v;
    if (!(node->flags & WRITABLE)) return -1;
    if (node->flags & CANON) {
        *out = (Text){(const char *)p->text + node->start, node->end - node->start};
        return 0;
    }
    /* a string decoded and escaped again may need up to 6 bytes a byte for a moment: room for it */
    char *o = arena_alloc(a, (size_t)(node->end - node->start) + 8);
    if (o == NULL) return -1;
    char *end = put_json(p, (uint32_t)v, o, a);
    if (end == NULL) return -1;
    *out = (Text){o, (uint32_t)(end - o)};
    return 0;
}

/* A row field's value from node `v`: None for a JSON null, else its JSON text. */
static int value_of(const Parser *p, int64_t v, Arena *a, Text *out) {
    if (p->nodes[v].type == J_NULL) {
        *out = NONE;
        return 0;
    }
    return json_of(p, v, a, out);
}

/* `body.get(key, default)` as a row field's value. */
static int get_or(const Parser *p, int64_t v, Text fallback, Arena *a, Text *out) {
    if (v < 0) {
        *out = fallback;
        return 0;
    }
    return value_of(p, v, a, out);
}

/* state_merge.hex_id of node `v` (missing or falsy: ""), as a JSON string: 0, or -1 where Python
 * decides (it raises for anything but a str, and Python reads what is not canonical base64). */
static int hex_id_of(const Parser *p, int64_t v, Arena *a, Text *out) {
    if (!truthy(p, v)) {
        if (v >= 0 && (p->nodes[v].type == J_ARRAY || p->nodes[v].type == J_OBJECT)) return -1; /* unhashable */
        *out = LIT("\"\"");
        return 0;
    }
    const Node *node = p->nodes + v;
    if (node->type != J_STRING || (node->flags & ESCAPED)) return -1;
    uint32_t n = node->end - node->start - 2;
    char *o = arena_alloc(a, 2 + 3 * (size_t)n / 2 + 2);
    if (o == NULL) return -1;
    o[0] = '"';
    char *end = put_hex_of_base64(o + 1, (const char *)p->text + node->start + 1, n);
    if (end == NULL) return -1;
    *end++ = '"';
    *out = (Text){o, (uint32_t)(end - o)};
    return 0;
}

/* state_merge._nil_to_none of a hex JSON string. */
static Text nil_to_none(Text hexed) {
    for (uint32_t i = 1; i + 1 < hexed.n; i++)
        if (hexed.p[i] != 'f') return hexed;
    return NONE;
}

/* -- routes: where an event goes -------------------------------------------------------------- */

enum { FOLD_PYTHON, FOLD_DEFINITION, FOLD_LIFECYCLE };

typedef struct {
    char *type, *payload, *resource, *id_key, *attempt_key; /* attempt_key NULL: always 0 */
    uint32_t type_n, payload_n, resource_n, id_key_n, attempt_key_n;
    int fold;
    PyObject *type_object; /* by_type's key */
} Route;

static Route *routes;
static int n_routes;

/* The tasks' indexed columns: the field each holds (-1: none) and its default (NONE: NULL). */
#define MAX_COLUMNS 16
static int plan_fields[MAX_COLUMNS];
static Text plan_defaults[MAX_COLUMNS];
static int n_plan;

static int find_route(const uint8_t *type, uint32_t n) {
    for (int r = 0; r < n_routes; r++)
        if (routes[r].type_n == n && memcmp(routes[r].type, type, n) == 0) return r;
    return -1;
}

enum { ITEM_PYTHON, ITEM_IGNORED, ITEM_ROW };

/* An item read as `prepare` reads it, when it can be read here. */
typedef struct {
    int kind, route;
    Text event_id, session, entity_b64;
    int64_t attempt, payload;
} Item;

/* A plain string value (not escaped) that `prepare` takes as it is: its text without quotes. */
static int plain_string(const Parser *p, int64_t v, Text *out) {
    if (!is_string(p, v) || (p->nodes[v].flags & ESCAPED)) return -1;
    const Node *node = p->nodes + v;
    *out = (Text){(const char *)p->text + node->start + 1, node->end - node->start - 2};
    return 0;
}

/* `prepare` of item `v`, where its outcome is plain: an event id of visible ASCII, a type, a
 * session, a payload object with a canonical base64 id and an integer attempt. ITEM_PYTHON for
 * anything else (`prepare` in Python decides it, or names what is wrong). */
static void read_item(const Parser *p, int64_t v, Item *item) {
    item->kind = ITEM_PYTHON;
    if (p->nodes[v].type != J_OBJECT) return;
    Text type;
    if (plain_string(p, MEMBER(p, v, event_id), &item->event_id) < 0 || item->event_id.n == 0 ||
        plain_string(p, MEMBER(p, v, event_type), &type) < 0 || type.n == 0)
        return;
    for (uint32_t i = 0; i < item->event_id.n; i++) /* visible ASCII (Ray's are base64): others, Python */
        if ((uint8_t)item->event_id.p[i] <= ' ' || (uint8_t)item->event_id.p[i] > '~') return;
    item->route = find_route((const uint8_t *)type.p, type.n);
    if (item->route < 0) {
        item->kind = ITEM_IGNORED;
        return;
    }
    const Route *route = routes + item->route;
    item->payload = member(p, v, route->payload, route->payload_n);
    if (item->payload < 0 || p->nodes[item->payload].type != J_OBJECT) return;
    if (plain_string(p, member(p, item->payload, route->id_key, route->id_key_n), &item->entity_b64) < 0 ||
        item->entity_b64.n == 0 || base64_decoded_size(item->entity_b64.p, item->entity_b64.n) < 0)
        return;
    item->attempt = 0;
    if (route->attempt_key != NULL) {
        int64_t attempt = member(p, item->payload, route->attempt_key, route->attempt_key_n);
        if (attempt >= 0 && p->nodes[attempt].type == J_INT) item->attempt = p->nodes[attempt].num;
        else if (attempt >= 0 && p->nodes[attempt].type != J_NULL) return;
    }
    int64_t session = MEMBER(p, v, session_name);
    item->session = LIT("");
    if (session >= 0 && plain_string(p, session, &item->session) < 0) return;
    item->kind = ITEM_ROW;
}

/* -- scan ------------------------------------------------------------------------------------- */

/* What `scan` found of one item, kept (as `index`, one bytes object a POST) for the fold, which then
 * reads the item's payload only: its kind and route, and the places in the body of its text, its
 * payload object, its event id, its base64 entity id and its session name, and its attempt. */
typedef struct {
    uint32_t start, end, payload_start, payload_end;
    uint32_t id_start, id_n, entity_start, entity_n, session_start, session_n;
    int64_t attempt;
    int32_t kind, route;
} ItemRecord;

static uint32_t offset_in(const Parser *p, Text t) {
    return t.p == NULL || t.n == 0 ? 0 : (uint32_t)((const uint8_t *)t.p - p->text);
}

/* scan(body) -> (items, [(index, start, end), ...], index) | None */
static PyObject *scan(PyObject *self, PyObject *body) {
    (void)self;
    if (!PyBytes_Check(body)) {
        PyErr_SetString(PyExc_TypeError, "scan(body): bytes");
        return NULL;
    }
    if (routes == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "scan: bind first");
        return NULL;
    }
    if (PyBytes_GET_SIZE(body) >= UINT32_MAX) Py_RETURN_NONE;
    Parser p = {0};
    RawBuf odd = {0};     /* (index, start, end) as uint32s */
    RawBuf records = {0}; /* ItemRecord */
    uint32_t items = 0;
    int status;
    Py_BEGIN_ALLOW_THREADS
    parser_reset(&p, (const uint8_t *)PyBytes_AS_STRING(body), (uint32_t)PyBytes_GET_SIZE(body));
    p.keep_depth = 2; /* an item's members and its payload's are read: what `read_item` reads */
    status = array_open(&p);
    while (status == 0) {
        int64_t v;
        int more = array_item(&p, items, &v);
        if (more <= 0) {
            status = more;
            break;
        }
        Item item;
        read_item(&p, v, &item);
        ItemRecord record = {.start = p.nodes[v].start, .end = p.nodes[v].end, .kind = item.kind};
        if (item.kind == ITEM_PYTHON) {
            uint32_t place[3] = {items, record.start, record.end};
            raw_put(&odd, place, sizeof place);
        } else {
            record.route = item.route;
            record.id_start = offset_in(&p, item.event_id);
            record.id_n = item.event_id.n;
        }
        if (item.kind == ITEM_ROW) {
            record.payload_start = p.nodes[item.payload].start;
            record.payload_end = p.nodes[item.payload].end;
            record.entity_start = offset_in(&p, item.entity_b64);
            record.entity_n = item.entity_b64.n;
            record.session_start = offset_in(&p, item.session);
            record.session_n = item.session.n;
            record.attempt = item.attempt;
        }
        raw_put(&records, &record, sizeof record);
        items++;
    }
    parser_free(&p);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (p.status == P_MEMORY || odd.failed || records.failed) {
        PyErr_NoMemory();
    } else if (status < 0) {
        out = Py_NewRef(Py_None);
    } else {
        Py_ssize_t n = (Py_ssize_t)(odd.len / (3 * sizeof(uint32_t)));
        PyObject *list = PyList_New(n);
        for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
            uint32_t place[3];
            memcpy(place, odd.data + (size_t)i * sizeof place, sizeof place);
            PyObject *entry = Py_BuildValue("(III)", place[0], place[1], place[2]);
            if (entry == NULL) Py_CLEAR(list);
            else PyList_SET_ITEM(list, i, entry);
        }
        const char *index = records.data ? records.data : "";
        if (list != NULL) out = Py_BuildValue("(INy#)", items, list, index, (Py_ssize_t)records.len);
    }
    raw_free(&odd);
    raw_free(&records);
    return out;
}

/* -- a task row being folded ------------------------------------------------------------------ */

/* The fields the task folds set (state_merge's names), and any other a stored row has. */
enum {
    F_OTHER = -1,
    F_TASK_ID,
    F_ATTEMPT,
    F_NAME,
    F_TYPE,
    F_FUNC,
    F_LANGUAGE,
    F_REQUIRED,
    F_RUNTIME_ENV,
    F_PLACEMENT_GROUP,
    F_PARENT,
    F_JOB,
    F_ACTOR,
    F_CALL_SITE,
    F_LABELS,
    F_EVENTS,
    F_STATE,
    F_NODE,
    F_WORKER,
    F_PID,
    F_ERROR_TYPE,
    F_ERROR_MESSAGE,
    F_LOG_INFO,
    F_CREATED,
    F_STARTED,
    F_ENDED,
    N_FIELDS
};

/* Each of them among the bound fields (fold_names.h). */
static const int field_bound[N_FIELDS] = {
    FIELD_task_id,          FIELD_attempt_number,   FIELD_name,           FIELD_type,
    FIELD_func_or_class_name, FIELD_language,       FIELD_required_resources, FIELD_runtime_env_info,
    FIELD_placement_group_id, FIELD_parent_task_id, FIELD_job_id,         FIELD_actor_id,
    FIELD_call_site,        FIELD_label_selector,   FIELD_events,         FIELD_state,
    FIELD_node_id,          FIELD_worker_id,        FIELD_worker_pid,     FIELD_error_type,
    FIELD_error_message,    FIELD_task_log_info,    FIELD_creation_time_ms, FIELD_start_time_ms,
    FIELD_end_time_ms,
};
static Text field_keys[N_FIELDS]; /* each as a JSON string: "\"name\"", set by bind_names */

static int field_of(const char *key, uint32_t n) { /* `key` without its quotes */
    for (int f = 0; f < N_FIELDS; f++)
        if (field_keys[f].n == n + 2 && memcmp(field_keys[f].p + 1, key, n) == 0) return f;
    return F_OTHER;
}

typedef struct {
    Text key; /* with its quotes */
    int id;
    Text value;
} RowField;

typedef struct {
    Text state; /* a JSON string */
    int64_t ms, ns;
} Transition;

#define MAX_ROW_FIELDS 64
#define MAX_TRANSITIONS 256
#define MAX_IDS 1024

typedef struct {
    RowField fields[MAX_ROW_FIELDS];
    int n_fields;
    int slot[N_FIELDS]; /* index in `fields` of each known field, -1 when absent */
    Transition events[MAX_TRANSITIONS];
    int n_events;
    uint64_t ids[MAX_IDS]; /* the hashes of the ids of the events folded into it (event_hash.h) */
    int n_ids;
} RowState;

static void row_clear(RowState *r) {
    r->n_fields = 0;
    r->n_events = 0;
    r->n_ids = 0;
    for (int f = 0; f < N_FIELDS; f++) r->slot[f] = -1;
}

/* `row[name] = value`, as a dict does: a field already there keeps its place. */
static int set_field(RowState *r, int id, Text value) {
    if (r->slot[id] >= 0) {
        r->fields[r->slot[id]].value = value;
        return 0;
    }
    if (r->n_fields == MAX_ROW_FIELDS) return -1;
    r->slot[id] = r->n_fields;
    r->fields[r->n_fields++] = (RowField){field_keys[id], id, value};
    return 0;
}

static Text get_field(const RowState *r, int id) { return r->slot[id] >= 0 ? r->fields[r->slot[id]].value : NONE; }

/* The events list a stored row holds, as the fold writes it: [{"state": str, "created_ms": int,
 * "created_ns": int}, ...]; -1 for any other shape (the row is folded in Python). */
static int load_events(RowState *r, const Parser *p, int64_t v) {
    const Node *list = p->nodes + v;
    if (list->type != J_ARRAY || list->count > MAX_TRANSITIONS) return -1;
    uint32_t k = list->count ? (uint32_t)v + 1 : 0;
    for (uint32_t i = 0; i < list->count; i++, k = p->nodes[k].next) {
        const Node *entry = p->nodes + k;
        if (entry->type != J_OBJECT || entry->count != 3) return -1;
        uint32_t key = k + 1;
        const Text names[3] = {field_json[FIELD_state], field_json[FIELD_created_ms], field_json[FIELD_created_ns]};
        int64_t values[3];
        for (int j = 0; j < 3; j++, key = p->nodes[key].next) {
            const Node *name = p->nodes + key;
            if (name->end - name->start != names[j].n || memcmp(p->text + name->start, names[j].p, names[j].n) != 0)
                return -1;
            values[j] = key + 1;
        }
        const Node *state = p->nodes + values[0], *ms = p->nodes + values[1], *ns = p->nodes + values[2];
        if (state->type != J_STRING || ms->type != J_INT || ns->type != J_INT) return -1;
        Text text = {(const char *)p->text + state->start, state->end - state->start};
        r->events[i] = (Transition){text, ms->num, ns->num};
    }
    r->n_events = (int)list->count;
    return 0;
}

/* A stored row (its JSON, and its kept event ids: the bytes of their hashes if `hashed`, else, as
 * rows written before kept them, the ids joined by spaces) read into `r`: -1 for one this module
 * does not fold (the row is folded in Python). `data` outlives `r`. */
static int load_row(RowState *r, Parser *p, Text data, Text ids, int hashed) {
    parser_reset(p, (const uint8_t *)data.p, data.n);
    int64_t v = parse_value(p);
    if (v < 0 || p->pos != data.n || p->nodes[v].type != J_OBJECT || p->nodes[v].count > MAX_ROW_FIELDS) return -1;
    uint32_t k = p->nodes[v].count ? (uint32_t)v + 1 : 0;
    for (uint32_t i = 0; i < p->nodes[v].count; i++, k = p->nodes[k].next) {
        const Node *key = p->nodes + k, *value = p->nodes + k + 1;
        if (!(value->flags & CANON)) return -1; /* the store writes orjson's text: this is not */
        int id = field_of((const char *)p->text + key->start + 1, key->end - key->start - 2);
        Text text = {(const char *)p->text + value->start, value->end - value->start};
        if (value->type == J_NULL) text = NONE;
        if (id == F_EVENTS && load_events(r, p, k + 1) < 0) return -1;
        r->fields[r->n_fields] = (RowField){{(const char *)p->text + key->start, key->end - key->start}, id, text};
        if (id != F_OTHER) r->slot[id] = r->n_fields;
        r->n_fields++;
    }
    if (hashed) { /* kept_ids.unpacked: whole hashes only */
        if (ids.n / EVENT_HASH_BYTES > MAX_IDS) return -1;
        for (uint32_t i = 0; i + EVENT_HASH_BYTES <= ids.n; i += EVENT_HASH_BYTES)
            r->ids[r->n_ids++] = event_hash_load((const uint8_t *)ids.p + i);
        return 0;
    }
    /* kept_ids.hashed_text: words of visible ASCII between spaces (anything else: Python splits it) */
    for (uint32_t i = 0; i < ids.n;) {
        uint8_t c = (uint8_t)ids.p[i];
        if (c == ' ') {
            i++;
            continue;
        }
        uint32_t start = i;
        while (i < ids.n && (uint8_t)ids.p[i] > ' ' && (uint8_t)ids.p[i] <= '~') i++;
        if (i < ids.n && ids.p[i] != ' ') return -1;
        if (r->n_ids == MAX_IDS) return -1;
        r->ids[r->n_ids++] = event_hash(ids.p + start, i - start);
    }
    return 0;
}

/* -- the task folds (state_merge._task_definition, _task_lifecycle) ---------------------------- */

/* state_merge._descriptor_name(func or {}) as a row value. */
static int descriptor_name(const Parser *p, int64_t func, Arena *a, Text *out) {
    if (!truthy(p, func)) {
        *out = LIT("\"\"");
        return 0;
    }
    if (p->nodes[func].type != J_OBJECT) return -1;
    int64_t python = MEMBER(p, func, python_function_descriptor);
    if (!truthy(p, python)) {
        *out = LIT("\"\"");
        return 0;
    }
    if (p->nodes[python].type != J_OBJECT) return -1;
    int64_t cls = MEMBER(p, python, class_name), name = MEMBER(p, python, function_name);
    if (!truthy(p, cls)) return get_or(p, name, LIT("\"\""), a, out);
    Text cls_json, name_json = LIT("\"\"");
    if (!is_string(p, cls) || (name >= 0 && !is_string(p, name))) return -1; /* Python formats those */
    if (json_of(p, cls, a, &cls_json) < 0 || (name >= 0 && json_of(p, name, a, &name_json) < 0)) return -1;
    char *o = arena_alloc(a, cls_json.n + name_json.n);
    if (o == NULL) return -1;
    memcpy(o, cls_json.p, cls_json.n - 1); /* "cls */
    o[cls_json.n - 1] = '.';
    memcpy(o + cls_json.n, name_json.p + 1, name_json.n - 1); /* name" */
    *out = (Text){o, cls_json.n + name_json.n - 1};
    return 0;
}

/* Pieces of the JSON the folds write, made of the bound names by bind_names: runtime_env_info's
 * head (`{"serialized_runtime_env":`), task_log_info's members' (`"stdout_file":`...: the two files,
 * then the four offsets) and a transition's in `events` (`{"state":`, `,"created_ms":`,
 * `,"created_ns":`). */
static Text env_head, log_heads[6], event_heads[3];
#define MAX_HEAD 120 /* each of event_heads at most (checked at bind): they are written on the stack */

/* `{"serialized_runtime_env": value}` */
static Text runtime_env_info(Arena *a, Text value) {
    char *o = arena_alloc(a, env_head.n + value.n + 1);
    if (o == NULL) return NONE;
    memcpy(o, env_head.p, env_head.n);
    memcpy(o + env_head.n, value.p, value.n);
    o[env_head.n + value.n] = '}';
    return (Text){o, env_head.n + value.n + 1};
}

static int fold_definition(RowState *r, const Parser *p, int64_t body, Arena *a) {
    int64_t actor_task_name = MEMBER(p, body, actor_task_name), actor_func = MEMBER(p, body, actor_func);
    int actor_task = actor_task_name >= 0 || actor_func >= 0;
    int64_t func = actor_task ? actor_func : MEMBER(p, body, task_func);
    Text v[12], env;
    int64_t env_node = MEMBER(p, body, serialized_runtime_env);
    int64_t call_site = MEMBER(p, body, call_site), labels = MEMBER(p, body, label_selector);
    int64_t name = actor_task ? actor_task_name : MEMBER(p, body, task_name);
    if (get_or(p, name, actor_task ? NONE : LIT("\"\""), a, &v[0]) < 0) return -1;
    if (actor_task) v[1] = VALUE_JSON(actor_task);
    else if (get_or(p, MEMBER(p, body, task_type), VALUE_JSON(normal_task), a, &v[1]) < 0) return -1;
    if (descriptor_name(p, func, a, &v[2]) < 0 ||
        get_or(p, MEMBER(p, body, language), VALUE_JSON(python), a, &v[3]) < 0 ||
        get_or(p, MEMBER(p, body, required_resources), LIT("{}"), a, &v[4]) < 0)
        return -1;
    if (env_node < 0) env = VALUE_JSON(empty_runtime_env);
    else if (json_of(p, env_node, a, &env) < 0) return -1; /* a nested null stays null */
    if ((v[5] = runtime_env_info(a, env)).p == NULL) return -1;
    if (hex_id_of(p, MEMBER(p, body, placement_group_id), a, &v[6]) < 0 ||
        hex_id_of(p, MEMBER(p, body, parent_task_id), a, &v[7]) < 0 ||
        hex_id_of(p, MEMBER(p, body, job_id), a, &v[8]) < 0 || hex_id_of(p, MEMBER(p, body, actor_id), a, &v[9]) < 0)
        return -1;
    v[6] = nil_to_none(v[6]);
    v[9] = nil_to_none(v[9]);
    if (truthy(p, call_site)) {
        if (json_of(p, call_site, a, &v[10]) < 0) return -1;
    } else {
        v[10] = NONE;
    }
    if (truthy(p, labels)) {
        if (json_of(p, labels, a, &v[11]) < 0) return -1;
    } else {
        v[11] = LIT("{}");
    }
    static const int ids[12] = {F_NAME, F_TYPE, F_FUNC, F_LANGUAGE, F_REQUIRED, F_RUNTIME_ENV,
                                F_PLACEMENT_GROUP, F_PARENT, F_JOB, F_ACTOR, F_CALL_SITE, F_LABELS};
    for (int i = 0; i < 12; i++)
        if (set_field(r, ids[i], v[i]) < 0) return -1;
    return 0;
}

/* state_merge.rfc3339_ns of node `v`, for a missing or falsy value and Ray's form. */
static int time_ns(const Parser *p, int64_t v, int64_t *ns) {
    if (!truthy(p, v)) {
        *ns = 0;
        return 0;
    }
    const Node *node = p->nodes + v;
    if (node->type != J_STRING || (node->flags & ESCAPED)) return -1;
    return ray_time_ns_of(p->text + node->start + 1, node->end - node->start - 2, ns);
}

/* state_merge._transitions once the row has its events list. */
static int merge_transitions(RowState *r, const Parser *p, int64_t transitions, Arena *a) {
    if (!truthy(p, transitions)) return 0;
    if (p->nodes[transitions].type != J_ARRAY) return -1;
    int known = r->n_events;
    uint32_t k = (uint32_t)transitions + 1;
    for (uint32_t i = 0; i < p->nodes[transitions].count; i++, k = p->nodes[k].next) {
        if (p->nodes[k].type != J_OBJECT) return -1;
        int64_t state_node = MEMBER(p, k, state);
        Text state = LIT("\"\"");
        int64_t ns;
        if (state_node >= 0 && (!is_string(p, state_node) || json_of(p, state_node, a, &state) < 0)) return -1;
        if (time_ns(p, MEMBER(p, k, timestamp), &ns) < 0) return -1;
        int seen = 0;
        for (int j = 0; j < known && !seen; j++) seen = r->events[j].ns == ns && text_eq(r->events[j].state, state);
        if (seen) continue;
        if (r->n_events == MAX_TRANSITIONS) return -1;
        r->events[r->n_events++] = (Transition){state, floor_div(ns, 1000000), ns};
    }
    for (int i = 1; i < r->n_events; i++) { /* stable, as list.sort */
        Transition moving = r->events[i];
        int j = i;
        while (j > 0 && r->events[j - 1].ns > moving.ns) {
            r->events[j] = r->events[j - 1];
            j--;
        }
        r->events[j] = moving;
    }
    return set_field(r, F_STATE, r->events[r->n_events - 1].state);
}

/* `int(value)` of a task log offset: a JSON integer or digits, 0 when missing. */
static int log_offset(const Parser *p, int64_t v, int64_t *out) {
    if (v < 0) {
        *out = 0;
        return 0;
    }
    const Node *node = p->nodes + v;
    if (node->type == J_INT) {
        *out = node->num;
        return 0;
    }
    if (node->type != J_STRING || (node->flags & ESCAPED)) return -1;
    return digits_int(p->text + node->start + 1, node->end - node->start - 2, out);
}

static Text task_log_info(const Parser *p, int64_t info, Arena *a) {
    static const int keys[6] = {KEY_stdout_file,  KEY_stderr_file,  KEY_stdout_start,
                                KEY_stdout_end,   KEY_stderr_start, KEY_stderr_end};
    Text file[2];
    int64_t offset[4];
    size_t size = 2 + 6 * 24;
    for (int i = 0; i < 2; i++) {
        int64_t v = member(p, info, key_name[keys[i]].p, key_name[keys[i]].n);
        if (v < 0) file[i] = LIT("null");
        else if (json_of(p, v, a, &file[i]) < 0) return NONE;
        size += log_heads[i].n + file[i].n + 1;
    }
    for (int i = 0; i < 4; i++) {
        if (log_offset(p, member(p, info, key_name[keys[2 + i]].p, key_name[keys[2 + i]].n), &offset[i]) < 0)
            return NONE;
        size += log_heads[2 + i].n;
    }
    char *o = arena_alloc(a, size), *start = o;
    if (o == NULL) return NONE;
    *o++ = '{';
    for (int i = 0; i < 2; i++) {
        memcpy(o, log_heads[i].p, log_heads[i].n);
        o += log_heads[i].n;
        memcpy(o, file[i].p, file[i].n);
        o += file[i].n;
        *o++ = ',';
    }
    for (int i = 0; i < 4; i++) {
        memcpy(o, log_heads[2 + i].p, log_heads[2 + i].n);
        o = put_decimal(o + log_heads[2 + i].n, offset[i]);
        *o++ = i < 3 ? ',' : '}';
    }
    return (Text){start, (uint32_t)(o - start)};
}

/* Whether a transition's state (a JSON string) is one of group `group`'s (fold_names.h STATES_*). */
static int in_states(Text state, int group) {
    for (int i = 0; i < n_states[group]; i++)
        if (text_eq(state, state_json[group][i])) return 1;
    return 0;
}

static int fold_lifecycle(RowState *r, const Parser *p, int64_t body, Arena *a) {
    if (r->slot[F_EVENTS] < 0 && set_field(r, F_EVENTS, LIT("[]")) < 0) return -1; /* written from `events` */
    if (merge_transitions(r, p, MEMBER(p, body, state_transitions), a) < 0) return -1;
    static const struct {
        int key, field;
    } ids[3] = {{KEY_job_id, F_JOB}, {KEY_node_id, F_NODE}, {KEY_worker_id, F_WORKER}};
    for (int i = 0; i < 3; i++) {
        int64_t v = member(p, body, key_name[ids[i].key].p, key_name[ids[i].key].n);
        Text hexed;
        if (truthy(p, v) && (hex_id_of(p, v, a, &hexed) < 0 || set_field(r, ids[i].field, hexed) < 0)) return -1;
    }
    int64_t pid = MEMBER(p, body, worker_pid);
    if (truthy(p, pid)) {
        if (p->nodes[pid].type != J_INT) return -1;
        Text text = int_text(a, p->nodes[pid].num);
        if (text.p == NULL || set_field(r, F_PID, text) < 0) return -1;
    }
    int64_t error = MEMBER(p, body, ray_error_info);
    if (truthy(p, error)) {
        if (p->nodes[error].type != J_OBJECT) return -1;
        Text type, message;
        if (get_or(p, MEMBER(p, error, error_type), NONE, a, &type) < 0 ||
            get_or(p, MEMBER(p, error, error_message), NONE, a, &message) < 0 ||
            set_field(r, F_ERROR_TYPE, type) < 0 || set_field(r, F_ERROR_MESSAGE, message) < 0)
            return -1;
    }
    int64_t log_info = MEMBER(p, body, task_log_info);
    if (truthy(p, log_info)) {
        if (p->nodes[log_info].type != J_OBJECT) return -1;
        Text info = task_log_info(p, log_info, a);
        if (info.p == NULL || set_field(r, F_LOG_INFO, info) < 0) return -1;
    }
    int created = -1, started = -1, ended = -1;
    for (int i = 0; i < r->n_events; i++) {
        Text state = r->events[i].state;
        if (in_states(state, STATES_pending)) {
            if (created < 0) created = i;
        } else if (in_states(state, STATES_running)) {
            if (started < 0) started = i;
        } else if (in_states(state, STATES_ended)) {
            ended = i;
        }
    }
    int at[3] = {created, started, ended}, fields[3] = {F_CREATED, F_STARTED, F_ENDED};
    for (int i = 0; i < 3; i++) {
        Text ms = at[i] < 0 ? NONE : int_text(a, r->events[at[i]].ms);
        if ((at[i] >= 0 && ms.p == NULL) || set_field(r, fields[i], ms) < 0) return -1;
    }
    return 0;
}

/* -- a row's JSON and upsert ------------------------------------------------------------------ */

/* The row's JSON as orjson writes `{k: v for k, v in row.items() if v is not None}`. */
static void put_row_json(RawBuf *b, const RowState *r) {
    raw_put(b, "{", 1);
    int first = 1;
    for (int i = 0; i < r->n_fields; i++) {
        const RowField *f = r->fields + i;
        if (f->value.p == NULL) continue;
        if (!first) raw_put(b, ",", 1);
        first = 0;
        raw_put(b, f->key.p, f->key.n);
        raw_put(b, ":", 1);
        if (f->id != F_EVENTS) {
            raw_put(b, f->value.p, f->value.n);
            continue;
        }
        raw_put(b, "[", 1);
        for (int e = 0; e < r->n_events; e++) {
            const Text state = event_heads[0], ms = event_heads[1], ns = event_heads[2];
            char numbers[2 * MAX_HEAD + 48], *o = numbers;
            const Transition *t = r->events + e;
            if (e) raw_put(b, ",", 1);
            raw_put(b, state.p, state.n);
            raw_put(b, t->state.p, t->state.n);
            memcpy(o, ms.p, ms.n);
            o = put_decimal(o + ms.n, t->ms);
            memcpy(o, ns.p, ns.n);
            o = put_decimal(o + ns.n, t->ns);
            *o++ = '}';
            raw_put(b, numbers, (size_t)(o - numbers));
        }
        raw_put(b, "]", 1);
    }
    raw_put(b, "}", 1);
}

/* An indexed column's value from a row field (state_merge.row_columns): NULL, text, an integer (a
 * bool as 0 or 1), or -1 for what this module leaves to Python (a float, which orjson would have
 * read for it; an object or a list, which Python refuses). */
static int put_indexed(RawBuf *b, Text value, Text fallback, Arena *a) {
    if (value.p == NULL) value = fallback;
    if (value.p == NULL) {
        packed_null(b);
        return 0;
    }
    char c = value.p[0];
    if (c == '"') {
        const char *inner = value.p + 1;
        uint32_t n = value.n - 2;
        if (memchr(inner, '\\', n) != NULL) {
            char *o = arena_alloc(a, n);
            if (o == NULL) return -1;
            n = (uint32_t)(json_unescape((const uint8_t *)inner, (const uint8_t *)inner + n, o) - o);
            inner = o;
        }
        packed_text(b, inner, n);
        return 0;
    }
    if (c == 't' || c == 'f') {
        packed_int(b, c == 't');
        return 0;
    }
    if (c != '-' && !json_is_digit((uint8_t)c)) return -1;
    uint64_t v = 0; /* canonical int64 text: it fits */
    int negative = c == '-';
    for (uint32_t i = (uint32_t)negative; i < value.n; i++) {
        if (!json_is_digit((uint8_t)value.p[i])) return -1; /* a float */
        v = v * 10 + (uint64_t)(value.p[i] - '0');
    }
    packed_int(b, negative ? (int64_t)(0 - v) : (int64_t)v);
    return 0;
}

/* -- a batch of POSTs folded ------------------------------------------------------------------ */

#define NO_EVENT UINT32_MAX

typedef struct {
    uint32_t position; /* in the batch: what the store's refusals and leftovers are counted by */
    uint32_t post, start, end; /* the item's text in its post (events read here) */
    uint32_t payload_start, payload_end;
    int route;
    PyObject *prepared; /* borrowed: the Prepared of an event read by Python, else NULL */
    Text event_id;
    uint32_t row, next; /* its row, and the next event of that row */
} Event;

typedef struct {
    Text key;
    uint64_t hash;
    uint32_t first, last; /* events */
    int python;           /* folded in Python */
    uint32_t chunk;       /* the chunk it is folded in (1, 2, ...) */
    int found;            /* stored: `data` and `ids` are its values (in the chunk arena) */
    int ids_hashed;       /* `ids` is a blob of hashes, not a text of ids (a row written before) */
    Text data, ids;
} RowRef;

typedef struct {
    uint32_t index;     /* of the item in its post */
    PyObject *prepared; /* borrowed; NULL: the item was rejected */
    Text key;           /* p == NULL: no row (an event type without state) */
} PythonItem;

typedef struct {
    PyObject *body;  /* held; NULL for a list of Prepared */
    PyObject *index; /* held: `scan`'s ItemRecords of the body */
    PythonItem *items;
    uint32_t n_items;
} Post;

typedef struct {
    PyObject_HEAD sqlite3 *db;
    sqlite3_stmt *select;
    int chunk_rows; /* the entity ids `select` takes */
    PyObject *writer;
    QueuePacked queue;
    PyObject *error_type;
    int busy;
    Parser items, stored;
    Arena batch, chunk;
    RowState *row;
    RawBuf json;
    RowPacker unpacker; /* the stored rows' packed data (row_packing.h) */
    char ids_text[ROW_IDS_TEXT_MAX]; /* a stored row's ids, as its dictionary takes them */
    unsigned char id_bytes[ROW_IDS][ROW_ID_MAX / 2]; /* a stored row's hex text ids as their bytes */
} Folder;

/* What a fold of one batch gathers (no Python object is touched while the GIL is released). */
typedef struct {
    Post *posts;
    uint32_t n_posts;
    RawBuf events, rows; /* Event, RowRef */
    uint32_t *table, table_mask;
    uint32_t position;
    int64_t ignored, duplicates;
    int64_t type_counts[64];
    int type_order[64], n_types;
    double received;
    enum { OK, NO_MEMORY, SQL_FAILED, WRITER_CLOSED, MISREAD } error;
    char message[512];
} Batch;

#define EVENTS(b) ((Event *)(b)->events.data)
#define ROWS(b) ((RowRef *)(b)->rows.data)

static uint64_t hash_bytes(const char *s, uint32_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (uint32_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ULL;
    return h;
}

/* The row key (resource, entity id, attempt, session) as bytes: equal keys, equal bytes. */
static Text encode_key(Arena *a, Text resource, Text entity, int64_t attempt, Text session) {
    size_t n = 12 + resource.n + entity.n + 8 + session.n;
    char *o = arena_alloc(a, n), *start = o;
    if (o == NULL) return NONE;
    memcpy(o, &resource.n, 4);
    memcpy(o + 4, resource.p, resource.n);
    o += 4 + resource.n;
    memcpy(o, &entity.n, 4);
    memcpy(o + 4, entity.p, entity.n);
    o += 4 + entity.n;
    memcpy(o, &attempt, 8);
    memcpy(o + 8, &session.n, 4);
    memcpy(o + 12, session.p, session.n);
    return (Text){start, (uint32_t)n};
}

static int grow_table(Batch *b) {
    uint32_t rows = (uint32_t)(b->rows.len / sizeof(RowRef));
    if (b->table != NULL && rows * 2 < b->table_mask) return 0;
    uint32_t size = b->table ? (b->table_mask + 1) * 2 : 4096;
    uint32_t *table = PyMem_RawMalloc(sizeof(uint32_t) * size);
    if (table == NULL) return -1;
    memset(table, 0xff, sizeof(uint32_t) * size);
    for (uint32_t r = 0; r < rows; r++) {
        uint32_t slot = (uint32_t)ROWS(b)[r].hash & (size - 1);
        while (table[slot] != NO_EVENT) slot = (slot + 1) & (size - 1);
        table[slot] = r;
    }
    PyMem_RawFree(b->table);
    b->table = table;
    b->table_mask = size - 1;
    return 0;
}

/* An accepted event, with its row's key (p == NULL: no row; counted as ignored). */
static int add_event(Batch *b, Event event, Text key, int python) {
    uint32_t position = b->position++;
    if (key.p == NULL) {
        b->ignored++;
        return 0;
    }
    if (grow_table(b) < 0) return -1;
    uint64_t hash = hash_bytes(key.p, key.n);
    uint32_t slot = (uint32_t)hash & b->table_mask, row;
    while ((row = b->table[slot]) != NO_EVENT && !(ROWS(b)[row].hash == hash && text_eq(ROWS(b)[row].key, key)))
        slot = (slot + 1) & b->table_mask;
    uint32_t index = (uint32_t)(b->events.len / sizeof(Event));
    if (row == NO_EVENT) {
        row = (uint32_t)(b->rows.len / sizeof(RowRef));
        RowRef fresh = {.key = key, .hash = hash, .first = index, .last = index};
        raw_put(&b->rows, &fresh, sizeof fresh);
        b->table[slot] = row;
    } else {
        EVENTS(b)[ROWS(b)[row].last].next = index;
        ROWS(b)[row].last = index;
    }
    if (b->rows.failed) return -1;
    event.position = position;
    event.row = row;
    event.next = NO_EVENT;
    raw_put(&b->events, &event, sizeof event);
    if (b->events.failed) return -1;
    if (python || event.route < 0 || routes[event.route].fold == FOLD_PYTHON) ROWS(b)[row].python = 1;
    return 0;
}

static int misread(Batch *b, const char *what) {
    b->error = MISREAD;
    snprintf(b->message, sizeof b->message, "%s", what);
    return -1;
}

/* Every event of the batch read, in order, and grouped by row. */
static int gather(Folder *f, Batch *b) {
    for (uint32_t i = 0; i < b->n_posts; i++) {
        Post *post = b->posts + i;
        uint32_t next_python = 0;
        if (post->body == NULL) { /* a list of Prepared */
            for (; next_python < post->n_items; next_python++) {
                PythonItem *item = post->items + next_python;
                Event event = {.post = i, .route = -1, .prepared = item->prepared};
                if (add_event(b, event, item->key, 1) < 0) return -1;
            }
            continue;
        }
        const char *text = PyBytes_AS_STRING(post->body);
        uint32_t len = (uint32_t)PyBytes_GET_SIZE(post->body);
        uint32_t count = (uint32_t)((size_t)PyBytes_GET_SIZE(post->index) / sizeof(ItemRecord));
        for (uint32_t index = 0; index < count; index++) {
            ItemRecord read;
            memcpy(&read, PyBytes_AS_STRING(post->index) + (size_t)index * sizeof read, sizeof read);
            if (read.start > read.end || read.end > len || read.kind < ITEM_PYTHON || read.kind > ITEM_ROW ||
                (read.kind != ITEM_PYTHON &&
                 (read.route < -1 || read.route >= n_routes || read.id_n > len || read.id_start > len - read.id_n)) ||
                (read.kind == ITEM_ROW &&
                 (read.route < 0 || read.payload_start > read.payload_end || read.payload_end > len ||
                  read.entity_n > len || read.entity_start > len - read.entity_n || read.session_n > len ||
                  read.session_start > len - read.session_n)))
                return misread(b, "a POST's index does not fit its body");
            if (next_python < post->n_items && post->items[next_python].index == index) {
                PythonItem *item = post->items + next_python++;
                if (item->prepared == NULL) continue; /* rejected in its answer */
                Event event = {.post = i, .route = -1, .prepared = item->prepared};
                if (add_event(b, event, item->key, 1) < 0) return -1;
                continue;
            }
            if (read.kind == ITEM_PYTHON) return misread(b, "a POST's item read in Python has no Prepared");
            Event event = {.post = i, .start = read.start, .end = read.end, .payload_start = read.payload_start,
                           .payload_end = read.payload_end, .route = read.kind == ITEM_ROW ? read.route : -1};
            Text key = NONE;
            if (read.kind == ITEM_ROW) {
                const Route *route = routes + read.route;
                char *hexed = arena_alloc(&f->batch, 3 * (size_t)read.entity_n / 2 + 1);
                if (hexed == NULL) return -1;
                char *end = put_hex_of_base64(hexed, text + read.entity_start, read.entity_n);
                if (end == NULL) return misread(b, "a POST's index names an id that is not base64");
                event.event_id = (Text){text + read.id_start, read.id_n};
                key = encode_key(&f->batch, (Text){route->resource, route->resource_n},
                                 (Text){hexed, (uint32_t)(end - hexed)}, read.attempt,
                                 (Text){text + read.session_start, read.session_n});
                if (key.p == NULL) return -1;
            }
            if (add_event(b, event, key, 0) < 0) return -1;
        }
        if (next_python != post->n_items) return misread(b, "a POST has fewer items than its answer named");
    }
    return 0;
}

/* The parts of a key written by encode_key. */
static void decode_key(Text key, Text *resource, Text *entity, int64_t *attempt, Text *session) {
    const char *p = key.p;
    memcpy(&resource->n, p, 4);
    resource->p = p + 4;
    p += 4 + resource->n;
    memcpy(&entity->n, p, 4);
    entity->p = p + 4;
    p += 4 + entity->n;
    memcpy(attempt, p, 8);
    memcpy(&session->n, p + 8, 4);
    session->p = p + 12;
}

enum { ROW_WRITTEN, ROW_UNCHANGED, ROW_TO_PYTHON, ROW_FAILED };

/* The batch's row of `key`, or NO_EVENT. */
static uint32_t find_row(const Batch *b, Text key) {
    uint64_t hash = hash_bytes(key.p, key.n);
    for (uint32_t slot = (uint32_t)hash & b->table_mask;; slot = (slot + 1) & b->table_mask) {
        uint32_t row = b->table[slot];
        if (row == NO_EVENT || (ROWS(b)[row].hash == hash && text_eq(ROWS(b)[row].key, key))) return row;
    }
}

/* The stored rows of a chunk's rows (`rows`: n indexes of the batch's rows, one resource), read
 * by entity id in one statement as the store's `_rows_for` reads them (the column's NOCASE may
 * find more: a row is its own only when the whole key matches); each found row's texts copied
 * into the chunk arena. */
static int read_chunk(Folder *f, Batch *b, const uint32_t *rows, int n, uint32_t chunk) {
    sqlite3_stmt *s = f->select;
    Text resource = {"", 0}, entity, session; /* resource: the first row's (n is at least 1) */
    int64_t attempt;
    for (int i = 0; i < n; i++) {
        RowRef *ref = ROWS(b) + rows[i];
        ref->chunk = chunk;
        ref->found = 0;
        decode_key(ref->key, &resource, &entity, &attempt, &session);
        if (i == 0) sqlite3_bind_text(s, 1, resource.p, (int)resource.n, SQLITE_STATIC);
        unsigned char id[ROW_ID_MAX / 2]; /* a hex id as the store keeps it (row_packing.id_value) */
        int id_len = row_id_bytes(entity.p, entity.n, id);
        if (id_len > 0) sqlite3_bind_blob(s, 2 + i, id, id_len, SQLITE_TRANSIENT);
        else sqlite3_bind_text(s, 2 + i, entity.p, (int)entity.n, SQLITE_STATIC);
    }
    for (int i = n; i < f->chunk_rows; i++) sqlite3_bind_null(s, 2 + i);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int packed = sqlite3_column_type(s, 3) == SQLITE_BLOB; /* before a _text call converts it */
        const char *stored = (const char *)sqlite3_column_text(s, 0), *session_text;
        int stored_n = sqlite3_column_bytes(s, 0);
        session_text = (const char *)sqlite3_column_text(s, 2);
        int session_n = sqlite3_column_bytes(s, 2);
        const void *data = packed ? sqlite3_column_blob(s, 3) : sqlite3_column_text(s, 3);
        int hashed = sqlite3_column_type(s, 4) == SQLITE_BLOB; /* kept_ids.sqlite_hashes */
        /* a zero-length blob reads as NULL: no ids */
        const char *ids = hashed ? (sqlite3_column_bytes(s, 4) ? sqlite3_column_blob(s, 4) : "")
                                 : (const char *)sqlite3_column_text(s, 4);
        if (stored == NULL || session_text == NULL || data == NULL || ids == NULL ||
            sqlite3_column_type(s, 1) != SQLITE_INTEGER)
            continue; /* not a row the fold writes: none of the chunk's keys */
        Text key = encode_key(&f->chunk, resource, (Text){stored, (uint32_t)stored_n}, sqlite3_column_int64(s, 1),
                              (Text){session_text, (uint32_t)session_n});
        if (key.p == NULL) break;
        uint32_t row = find_row(b, key);
        if (row == NO_EVENT || ROWS(b)[row].chunk != chunk || ROWS(b)[row].python) continue;
        RowRef *ref = ROWS(b) + row;
        if (packed) {
            const unsigned char *blob = data;
            size_t blob_len = (size_t)sqlite3_column_bytes(s, 3);
            /* A ROW_PACKED_V2 row's dictionary: its key columns as stored beside it, each an id's
             * bytes or a hex text read as them (row_packing.row_ids_text) */
            const unsigned char *ids[ROW_IDS];
            size_t id_lens[ROW_IDS];
            for (int i = 0; i < ROW_IDS; i++) {
                int at = 5 + i, type = sqlite3_column_type(s, at);
                const void *value = type == SQLITE_BLOB ? sqlite3_column_blob(s, at)
                                    : type == SQLITE_TEXT ? (const void *)sqlite3_column_text(s, at)
                                                          : NULL;
                row_id_value(type == SQLITE_TEXT, value, value ? (size_t)sqlite3_column_bytes(s, at) : 0,
                             f->id_bytes[i], &ids[i], &id_lens[i]);
            }
            size_t ids_len = row_ids_text(ids, id_lens, f->ids_text);
            int64_t n = row_packed_length(blob, blob_len);
            char *text = n < 0 ? NULL : arena_alloc(&f->chunk, (size_t)n);
            if (n < 0 || (text != NULL && row_unpack(&f->unpacker, blob, blob_len, f->ids_text, ids_len, text,
                                                     (size_t)n) < 0)) {
                b->error = SQL_FAILED;
                snprintf(b->message, sizeof b->message, "reading rows: the stored row of %.*s is damaged",
                         stored_n > 100 ? 100 : stored_n, stored);
                sqlite3_reset(s);
                return -1;
            }
            if (text == NULL) break;
            ref->data = (Text){text, (uint32_t)n};
        } else {
            ref->data = arena_copy(&f->chunk, data, (size_t)sqlite3_column_bytes(s, 3));
        }
        ref->ids = arena_copy(&f->chunk, ids, (size_t)sqlite3_column_bytes(s, 4));
        ref->ids_hashed = hashed;
        ref->found = 1;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        b->error = SQL_FAILED;
        snprintf(b->message, sizeof b->message, "reading rows: %s", sqlite3_errmsg(f->db));
    }
    sqlite3_reset(s);
    return rc == SQLITE_DONE && !f->chunk.failed ? 0 : -1;
}

/* One row's events folded into its stored row, and its upsert packed into `out`. */
static int fold_row(Folder *f, Batch *b, RowRef *ref, RawBuf *out) {
    RowState *r = f->row;
    row_clear(r);
    if (ref->found && load_row(r, &f->stored, ref->data, ref->ids, ref->ids_hashed) < 0) return ROW_TO_PYTHON;
    Text resource, entity, session;
    int64_t attempt;
    decode_key(ref->key, &resource, &entity, &attempt, &session);
    Text task_id = {NULL, entity.n + 2}, attempt_number = int_text(&f->chunk, attempt);
    char *quoted = arena_alloc(&f->chunk, entity.n + 2);
    if (quoted == NULL || attempt_number.p == NULL) return ROW_FAILED;
    quoted[0] = '"';
    memcpy(quoted + 1, entity.p, entity.n);
    quoted[entity.n + 1] = '"';
    task_id.p = quoted;
    int64_t duplicates = 0;
    int folded[MAX_IDS], n_folded = 0;
    for (uint32_t e = ref->first; e != NO_EVENT; e = EVENTS(b)[e].next) {
        const Event *event = EVENTS(b) + e;
        uint64_t hashed = event_hash(event->event_id.p, event->event_id.n);
        int seen = 0;
        for (int i = 0; i < r->n_ids && !seen; i++) seen = r->ids[i] == hashed;
        if (seen) {
            duplicates++;
            continue;
        }
        const Route *route = routes + event->route;
        PyObject *body = b->posts[event->post].body;
        Parser *p = &f->items;
        parser_reset(p, (const uint8_t *)PyBytes_AS_STRING(body) + event->payload_start,
                     event->payload_end - event->payload_start);
        int64_t payload = parse_value(p);
        if (payload < 0 || p->nodes[payload].type != J_OBJECT)
            return p->status == P_MEMORY ? ROW_FAILED : ROW_TO_PYTHON;
        if (set_field(r, F_TASK_ID, task_id) < 0 || set_field(r, F_ATTEMPT, attempt_number) < 0) return ROW_TO_PYTHON;
        int failed = route->fold == FOLD_DEFINITION ? fold_definition(r, p, payload, &f->chunk)
                                                    : fold_lifecycle(r, p, payload, &f->chunk);
        if (failed || r->n_ids == MAX_IDS) return f->chunk.failed ? ROW_FAILED : ROW_TO_PYTHON;
        r->ids[r->n_ids++] = hashed;
        folded[n_folded++] = event->route;
    }
    if (n_folded == 0) {
        b->duplicates += duplicates;
        return ROW_UNCHANGED;
    }
    size_t mark = out->len;
    packed_text(out, resource.p, resource.n);
    packed_text(out, entity.p, entity.n);
    packed_int(out, attempt);
    packed_text(out, session.p, session.n);
    packed_float(out, b->received);
    f->json.len = 0;
    put_row_json(&f->json, r);
    packed_text(out, f->json.data, (uint32_t)f->json.len);
    f->json.len = 0; /* kept_ids.packed */
    for (int i = 0; i < r->n_ids; i++) {
        uint8_t bytes[EVENT_HASH_BYTES];
        event_hash_store(r->ids[i], bytes);
        raw_put(&f->json, bytes, EVENT_HASH_BYTES);
    }
    packed_blob(out, f->json.data ? f->json.data : "", (uint32_t)f->json.len);
    for (int c = 0; c < n_plan; c++) {
        Text value = plan_fields[c] < 0 ? NONE : get_field(r, plan_fields[c]);
        if (put_indexed(out, value, plan_defaults[c], &f->chunk) < 0) {
            out->len = mark;
            return ROW_TO_PYTHON;
        }
    }
    if (f->json.failed || f->chunk.failed) return ROW_FAILED;
    b->duplicates += duplicates;
    for (int i = 0; i < n_folded; i++) {
        int t = 0;
        while (t < b->n_types && b->type_order[t] != folded[i]) t++;
        if (t == b->n_types) b->type_order[b->n_types++] = folded[i];
        b->type_counts[folded[i]]++;
    }
    return ROW_WRITTEN;
}

/* The rows read here folded a chunk at a time (as many rows as `select` takes entity ids), each
 * chunk's upserts queued to the writer while the next is folded. A row this module does not fold
 * is marked for Python. */
static int fold_rows(Folder *f, Batch *b) {
    uint32_t rows = (uint32_t)(b->rows.len / sizeof(RowRef)), chunk = 0;
    uint32_t *members = PyMem_RawMalloc(sizeof(uint32_t) * (size_t)f->chunk_rows);
    if (members == NULL) return b->error = NO_MEMORY, -1;
    int status = 0;
    for (uint32_t next = 0; next < rows && status == 0;) {
        int n = 0;
        for (; next < rows && n < f->chunk_rows; next++)
            if (!ROWS(b)[next].python) members[n++] = next;
        if (n == 0) break;
        if (read_chunk(f, b, members, n, ++chunk) < 0) {
            if (b->error == OK) b->error = NO_MEMORY;
            status = -1;
            break;
        }
        RawBuf out = {0};
        Py_ssize_t packed = 0;
        for (int i = 0; i < n; i++) {
            RowRef *ref = ROWS(b) + members[i];
            int outcome = fold_row(f, b, ref, &out);
            if (outcome == ROW_FAILED || out.failed) {
                if (b->error == OK) b->error = NO_MEMORY;
                status = -1;
                break;
            }
            if (outcome == ROW_TO_PYTHON) ref->python = 1;
            if (outcome == ROW_WRITTEN) packed++;
        }
        if (status == 0 && packed) {
            if (f->queue(f->writer, out.data, out.len, packed) < 0) {
                b->error = WRITER_CLOSED;
                status = -1;
            } else {
                out = (RawBuf){0};
            }
        }
        raw_free(&out);
        arena_reset(&f->chunk);
    }
    PyMem_RawFree(members);
    return status;
}

/* -- Folder: the Python side ------------------------------------------------------------------ */

static uint64_t unique_keys; /* for Prepared keys of another form: rows of their own, for Python */

/* A Prepared's row key as `encode_key` writes it (NONE: no row). Keys come from `prepare`: (str,
 * str, int, str); any other form gets a key no event read here has, so its row goes to Python. */
static int prepared_key(PyObject *prepared, Arena *a, Text *out) {
    if (!PyTuple_Check(prepared) || PyTuple_GET_SIZE(prepared) != 3) {
        PyErr_SetString(PyExc_TypeError, "fold: an event is a Prepared (event id, key, piece)");
        return -1;
    }
    PyObject *key = PyTuple_GET_ITEM(prepared, 1), *piece = PyTuple_GET_ITEM(prepared, 2);
    *out = NONE;
    if (key == Py_None || piece == Py_None) return 0;
    if (PyTuple_Check(key) && PyTuple_GET_SIZE(key) == 4 && PyUnicode_Check(PyTuple_GET_ITEM(key, 0)) &&
        PyUnicode_Check(PyTuple_GET_ITEM(key, 1)) && PyLong_CheckExact(PyTuple_GET_ITEM(key, 2)) &&
        PyUnicode_Check(PyTuple_GET_ITEM(key, 3))) {
        Py_ssize_t n[3];
        const char *parts[3];
        int overflow;
        long long attempt = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(key, 2), &overflow);
        int i = 0;
        for (; i < 3 && !overflow; i++)
            if ((parts[i] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(key, i == 2 ? 3 : i), &n[i])) == NULL) break;
        if (i == 3 && !overflow) {
            *out = encode_key(a, (Text){parts[0], (uint32_t)n[0]}, (Text){parts[1], (uint32_t)n[1]}, attempt,
                              (Text){parts[2], (uint32_t)n[2]});
            return out->p == NULL ? (PyErr_NoMemory(), -1) : 0;
        }
        PyErr_Clear(); /* a string that is not UTF-8: not a key of any row read here */
    }
    uint64_t unique = ++unique_keys;
    char *o = arena_alloc(a, 9);
    if (o == NULL) return PyErr_NoMemory(), -1;
    o[0] = (char)0xff; /* encode_key starts with a short length: never 0xff */
    memcpy(o + 1, &unique, 8);
    *out = (Text){o, 9};
    return 0;
}

static int by_index(const void *a, const void *b) {
    uint32_t x = ((const PythonItem *)a)->index, y = ((const PythonItem *)b)->index;
    return x < y ? -1 : x > y;
}

/* The posts as plain C: a list of Prepared, or a body and its items read by Python. */
static int take_posts(Folder *f, PyObject *posts, Batch *b) {
    Py_ssize_t n = PyList_GET_SIZE(posts);
    b->posts = PyMem_RawCalloc((size_t)n + 1, sizeof(Post));
    if (b->posts == NULL) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *post = PyList_GET_ITEM(posts, i), *items;
        Post *out = b->posts + i;
        b->n_posts = (uint32_t)i + 1;
        if (PyList_Check(post)) {
            items = Py_NewRef(post);
        } else {
            PyObject *body = PyObject_GetAttrString(post, "body");
            if (body == NULL) return -1;
            if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) >= UINT32_MAX) {
                Py_DECREF(body);
                PyErr_SetString(PyExc_TypeError, "fold: a post's body is bytes");
                return -1;
            }
            out->body = body;
            out->index = PyObject_GetAttrString(post, "index");
            if (out->index == NULL) return -1;
            if (!PyBytes_Check(out->index)) {
                PyErr_SetString(PyExc_TypeError, "fold: a post's index is bytes");
                return -1;
            }
            items = PyObject_GetAttrString(post, "odd");
            if (items == NULL) return -1;
            if (!PyDict_Check(items)) {
                Py_DECREF(items);
                PyErr_SetString(PyExc_TypeError, "fold: a post's odd items are a dict");
                return -1;
            }
        }
        Py_ssize_t count = PyList_Check(items) ? PyList_GET_SIZE(items) : PyDict_GET_SIZE(items);
        out->items = PyMem_RawCalloc((size_t)count + 1, sizeof(PythonItem));
        if (out->items == NULL) {
            Py_DECREF(items);
            return PyErr_NoMemory(), -1;
        }
        Py_ssize_t position = 0, k = 0;
        PyObject *index, *prepared;
        int failed = 0;
        while (!failed && k < count) {
            PythonItem *item = out->items + k;
            if (PyList_Check(items)) {
                index = NULL;
                prepared = PyList_GET_ITEM(items, k);
                item->index = (uint32_t)k;
            } else {
                PyDict_Next(items, &position, &index, &prepared);
                size_t at = PyLong_AsSize_t(index);
                if (at == (size_t)-1 && PyErr_Occurred()) {
                    failed = 1;
                    break;
                }
                item->index = (uint32_t)at;
            }
            item->prepared = prepared == Py_None ? NULL : prepared;
            if (item->prepared != NULL && prepared_key(prepared, &f->batch, &item->key) < 0) failed = 1;
            k++;
        }
        out->n_items = (uint32_t)count;
        Py_DECREF(items); /* the Prepared stay alive: the posts (held by the caller) hold them */
        if (failed) return -1;
        if (!PyList_Check(post)) qsort(out->items, (size_t)count, sizeof(PythonItem), by_index);
    }
    return 0;
}

static void free_batch(Folder *f, Batch *b) {
    for (uint32_t i = 0; b->posts != NULL && i < b->n_posts; i++) {
        Py_XDECREF(b->posts[i].body);
        Py_XDECREF(b->posts[i].index);
        PyMem_RawFree(b->posts[i].items);
    }
    PyMem_RawFree(b->posts);
    raw_free(&b->events);
    raw_free(&b->rows);
    PyMem_RawFree(b->table);
    arena_reset(&f->batch);
}

static PyObject *results(Batch *b) {
    PyObject *by_type = PyDict_New(), *leftovers = PyList_New(0);
    if (by_type == NULL || leftovers == NULL) goto fail;
    for (int t = 0; t < b->n_types; t++) {
        int route = b->type_order[t];
        PyObject *count = PyLong_FromLongLong(b->type_counts[route]);
        int bad = count == NULL || PyDict_SetItem(by_type, routes[route].type_object, count);
        Py_XDECREF(count);
        if (bad) goto fail;
    }
    uint32_t n = (uint32_t)(b->events.len / sizeof(Event));
    for (uint32_t e = 0; e < n; e++) {
        const Event *event = EVENTS(b) + e;
        if (!ROWS(b)[event->row].python) continue;
        PyObject *entry = Py_BuildValue("(IOIII)", event->position, event->prepared ? event->prepared : Py_None,
                                        event->post, event->start, event->end);
        if (entry == NULL || PyList_Append(leftovers, entry)) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
    }
    return Py_BuildValue("(NLLN)", by_type, (long long)b->duplicates, (long long)b->ignored, leftovers);
fail:
    Py_XDECREF(by_type);
    Py_XDECREF(leftovers);
    return NULL;
}

/* fold(posts, received) -> (by_type, duplicates, ignored, leftovers); see the module doc. */
static PyObject *folder_fold(Folder *f, PyObject *args) {
    PyObject *posts;
    double received;
    if (!PyArg_ParseTuple(args, "O!d:fold", &PyList_Type, &posts, &received)) return NULL;
    if (f->db == NULL || f->busy) {
        PyErr_SetString(PyExc_ValueError, f->db == NULL ? "the folder is closed" : "the folder is folding");
        return NULL;
    }
    Batch b = {0};
    b.received = received;
    f->busy = 1;
    PyObject *out = NULL;
    if (take_posts(f, posts, &b) == 0) {
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = gather(f, &b);
        if (status == 0) status = fold_rows(f, &b);
        Py_END_ALLOW_THREADS
        if (status == 0 && !f->batch.failed) out = results(&b);
        else if (b.error == SQL_FAILED) PyErr_SetString(f->error_type, b.message);
        else if (b.error == WRITER_CLOSED) PyErr_SetString(PyExc_ValueError, "the row writer is closed");
        else if (b.error == MISREAD) PyErr_SetString(PyExc_ValueError, b.message);
        else PyErr_NoMemory();
    }
    free_batch(f, &b);
    f->busy = 0;
    return out;
}

static void folder_stop(Folder *f) {
    if (f->select) sqlite3_finalize(f->select);
    f->select = NULL;
    if (f->db) sqlite3_close(f->db);
    f->db = NULL;
}

static PyObject *folder_close(Folder *f, PyObject *unused) {
    (void)unused;
    if (f->busy) {
        PyErr_SetString(PyExc_ValueError, "the folder is folding");
        return NULL;
    }
    folder_stop(f);
    Py_RETURN_NONE;
}

static int folder_init(Folder *f, PyObject *args, PyObject *kwargs) {
    const char *path, *setup, *select, *dictionary = "";
    Py_ssize_t dictionary_len = 0;
    PyObject *writer, *error_type;
    static char *keywords[] = {"path", "setup", "select", "writer", "error", "dictionary", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sssOO|y#:Folder", keywords, &path, &setup, &select, &writer,
                                     &error_type, &dictionary, &dictionary_len))
        return -1;
    if (f->db != NULL) {
        PyErr_SetString(PyExc_ValueError, "Folder(...) once");
        return -1;
    }
    row_packer_free(&f->unpacker, 1);
    if (row_packer_dictionary(&f->unpacker, dictionary, (size_t)dictionary_len) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *writers = PyImport_ImportModule("ray_otel_events.native._row_writer");
    PyObject *writer_type = writers == NULL ? NULL : PyObject_GetAttrString(writers, "RowWriter");
    Py_XDECREF(writers);
    int is_writer = writer_type == NULL ? -1 : PyObject_IsInstance(writer, writer_type);
    Py_XDECREF(writer_type);
    if (is_writer <= 0) {
        if (is_writer == 0) PyErr_SetString(PyExc_TypeError, "Folder: writer is a RowWriter");
        return -1;
    }
    f->queue = (QueuePacked)PyCapsule_Import(ROW_WRITER_CAPSULE, 0);
    if (f->queue == NULL) return -1;
    Py_XSETREF(f->writer, Py_NewRef(writer));
    Py_XSETREF(f->error_type, Py_NewRef(error_type));
    if (f->row == NULL && (f->row = PyMem_RawMalloc(sizeof(RowState))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = sqlite3_open_v2(path, &f->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(f->db, setup, NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v3(f->db, select, -1, SQLITE_PREPARE_PERSISTENT, &f->select, NULL);
    if (rc == SQLITE_OK) f->chunk_rows = sqlite3_bind_parameter_count(f->select) - 1;
    if (rc == SQLITE_OK && (f->chunk_rows < 1 || sqlite3_column_count(f->select) != 5 + ROW_IDS)) {
        PyErr_SetString(PyExc_ValueError, "Folder: select takes (resource, entity id, ...) and gives"
                                          " (entity id, attempt, session, data, event ids, and the"
                                          " stored entity id, node and worker)");
        folder_stop(f);
        return -1;
    }
    if (rc != SQLITE_OK) {
        PyErr_Format(error_type, "%s: %s", path, f->db ? sqlite3_errmsg(f->db) : sqlite3_errstr(rc));
        folder_stop(f);
        return -1;
    }
    return 0;
}

static void folder_dealloc(Folder *f) {
    folder_stop(f);
    parser_free(&f->items);
    parser_free(&f->stored);
    arena_free(&f->batch);
    arena_free(&f->chunk);
    raw_free(&f->json);
    row_packer_free(&f->unpacker, 1);
    PyMem_RawFree(f->row);
    Py_XDECREF(f->writer);
    Py_XDECREF(f->error_type);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyMethodDef folder_methods[] = {
    {"fold", (PyCFunction)folder_fold, METH_VARARGS,
     "fold(posts, received) -> (by_type, duplicates, ignored, leftovers): a batch's task rows folded and"
     " queued to the writer; `leftovers` are (position, Prepared or None, post, start, end) of the events"
     " whose rows the caller folds in Python."},
    {"close", (PyCFunction)folder_close, METH_NOARGS, "close(): the connection closed."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FolderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ray_otel_events.native._post_fold.Folder",
    .tp_basicsize = sizeof(Folder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Folder(path, setup, select, writer, error, dictionary=b''): POSTs folded into task rows (stored"
               " rows' packed data unpacked with `dictionary`); see the module doc.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)folder_init,
    .tp_dealloc = (destructor)folder_dealloc,
    .tp_methods = folder_methods,
};

/* -- module ----------------------------------------------------------------------------------- */

static char *raw_string(PyObject *text, uint32_t *n) {
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &size);
    if (utf8 == NULL) return NULL;
    char *out = PyMem_RawMalloc((size_t)size + 1);
    if (out == NULL) return PyErr_NoMemory(), NULL;
    memcpy(out, utf8, (size_t)size + 1);
    *n = (uint32_t)size;
    return out;
}

static void free_routes(Route *list, int n) {
    for (int r = 0; list != NULL && r < n; r++) {
        PyMem_RawFree(list[r].type);
        PyMem_RawFree(list[r].payload);
        PyMem_RawFree(list[r].resource);
        PyMem_RawFree(list[r].id_key);
        PyMem_RawFree(list[r].attempt_key);
        Py_XDECREF(list[r].type_object);
    }
    PyMem_RawFree(list);
}

/* `before`, the str `name` (as a JSON string when `quoted`, else its UTF-8), then `after`, in memory
 * kept for good (see key_name); .p NULL with an error set on failure. */
static Text bound_text(const char *before, PyObject *name, int quoted, const char *after) {
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &size);
    if (utf8 == NULL) return NONE;
    size_t b = strlen(before), a = strlen(after);
    char *out = PyMem_RawMalloc(b + 2 + 6 * (size_t)size + a);
    if (out == NULL) return PyErr_NoMemory(), NONE;
    memcpy(out, before, b);
    char *o = out + b;
    if (quoted) {
        o = put_string_json(o, (const uint8_t *)utf8, size);
    } else {
        memcpy(o, utf8, (size_t)size);
        o += size;
    }
    memcpy(o, after, a);
    return (Text){out, (uint32_t)(o + a - out)};
}

/* bind_names(RAY_KEYS, TASK_ROW, TASK_VALUES): the names the folds read and write
 * (store/fold_schema.py; fold_names.h lists which), kept as the text the fold reads and writes. */
static PyObject *bind_names(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys, *row, *values;
    if (!PyArg_ParseTuple(args, "OOO:bind_names", &keys, &row, &values) || bind_fold_names(keys, row, values) < 0)
        return NULL;
    /* Made apart from the bound ones and copied in only when all are made: all or nothing. */
    Text k[N_FOLD_KEYS], f[N_FOLD_FIELDS], v[N_FOLD_VALUES], st[N_FOLD_STATES][MAX_FOLD_STATES];
    int counts[N_FOLD_STATES];
    for (int i = 0; i < N_FOLD_KEYS; i++)
        if ((k[i] = bound_text("", fold_keys[i], 0, "")).p == NULL) return NULL;
    for (int i = 0; i < N_FOLD_FIELDS; i++)
        if ((f[i] = bound_text("", fold_fields[i], 1, "")).p == NULL) return NULL;
    for (int i = 0; i < N_FOLD_VALUES; i++)
        if ((v[i] = bound_text("", fold_values[i], 1, "")).p == NULL) return NULL;
    for (int g = 0; g < N_FOLD_STATES; g++) {
        counts[g] = (int)PyTuple_GET_SIZE(fold_states[g]);
        for (int i = 0; i < counts[g]; i++)
            if ((st[g][i] = bound_text("", PyTuple_GET_ITEM(fold_states[g], i), 1, "")).p == NULL) return NULL;
    }
    for (int a = 0; a < N_FIELDS; a++) {
        for (int b = 0; b < a; b++) {
            if (text_eq(f[field_bound[a]], f[field_bound[b]])) {
                return PyErr_Format(PyExc_ValueError, "bind_names: TASK_ROW names two fields %R",
                                    fold_fields[field_bound[a]]);
            }
        }
    }
    Text env = bound_text("{", fold_fields[FIELD_serialized_runtime_env], 1, ":"), logs[6], events[3];
    static const int log_fields[6] = {FIELD_stdout_file,  FIELD_stderr_file,  FIELD_stdout_start,
                                      FIELD_stdout_end,   FIELD_stderr_start, FIELD_stderr_end};
    for (int i = 0; i < 6; i++)
        if ((logs[i] = bound_text("", fold_fields[log_fields[i]], 1, ":")).p == NULL) return NULL;
    if (env.p == NULL || (events[0] = bound_text("{", fold_fields[FIELD_state], 1, ":")).p == NULL ||
        (events[1] = bound_text(",", fold_fields[FIELD_created_ms], 1, ":")).p == NULL ||
        (events[2] = bound_text(",", fold_fields[FIELD_created_ns], 1, ":")).p == NULL)
        return NULL;
    if (events[1].n > MAX_HEAD || events[2].n > MAX_HEAD) {
        PyErr_SetString(PyExc_ValueError, "bind_names: TASK_ROW's created_ms and created_ns are names of under 100 bytes");
        return NULL;
    }
    memcpy(key_name, k, sizeof k);
    memcpy(field_json, f, sizeof f);
    memcpy(value_json, v, sizeof v);
    memcpy(state_json, st, sizeof st);
    memcpy(n_states, counts, sizeof counts);
    for (int i = 0; i < N_FIELDS; i++) field_keys[i] = field_json[field_bound[i]];
    env_head = env;
    memcpy(log_heads, logs, sizeof logs);
    memcpy(event_heads, events, sizeof events);
    Py_RETURN_NONE;
}

/* bind(routes, plan): what `prepare` reads (event type -> (payload key, resource, id key, attempt
 * key or None, fold: 0 Python, 1 task definition, 2 task lifecycle)) and the tasks' indexed
 * columns ((row field or None, default or None), ...). */
static PyObject *bind(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *table, *plan;
    if (field_keys[0].p == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind: bind_names first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!:bind", &PyDict_Type, &table, &PyTuple_Type, &plan)) return NULL;
    Py_ssize_t n = PyDict_GET_SIZE(table), columns = PyTuple_GET_SIZE(plan);
    if (n > 64 || columns > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "bind: at most 64 routes and 16 columns");
        return NULL;
    }
    Route *fresh = PyMem_RawCalloc((size_t)n + 1, sizeof(Route));
    if (fresh == NULL) return PyErr_NoMemory();
    Py_ssize_t position = 0;
    PyObject *type, *route;
    int r = 0;
    while (PyDict_Next(table, &position, &type, &route)) {
        Route *out = fresh + r++;
        PyObject *payload, *resource, *id_key, *attempt_key;
        if (!PyUnicode_Check(type) ||
            !PyArg_ParseTuple(route, "UUUOi", &payload, &resource, &id_key, &attempt_key, &out->fold) ||
            (attempt_key != Py_None && !PyUnicode_Check(attempt_key))) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "bind: a route is (str, str, str, str or None, int)");
            goto fail;
        }
        out->type_object = Py_NewRef(type);
        if ((out->type = raw_string(type, &out->type_n)) == NULL ||
            (out->payload = raw_string(payload, &out->payload_n)) == NULL ||
            (out->resource = raw_string(resource, &out->resource_n)) == NULL ||
            (out->id_key = raw_string(id_key, &out->id_key_n)) == NULL ||
            (attempt_key != Py_None && (out->attempt_key = raw_string(attempt_key, &out->attempt_key_n)) == NULL))
            goto fail;
        if (out->payload_n == 0 || out->id_key_n == 0 || (out->attempt_key != NULL && out->attempt_key_n == 0)) {
            PyErr_SetString(PyExc_ValueError, "bind: a route's keys are not empty");
            goto fail;
        }
    }
    const Route *folding = NULL; /* a chunk's stored rows are read for one resource */
    for (int i = 0; i < r; i++) {
        if (fresh[i].fold == FOLD_PYTHON) continue;
        if (folding == NULL) {
            folding = fresh + i;
        } else if (strcmp(fresh[i].resource, folding->resource) != 0) {
            PyErr_SetString(PyExc_ValueError, "bind: the routes folded here are of one resource");
            goto fail;
        }
    }
    int fields[MAX_COLUMNS];
    Text defaults[MAX_COLUMNS];
    for (Py_ssize_t c = 0; c < columns; c++) {
        PyObject *name, *fallback;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(plan, c), "OO", &name, &fallback)) goto fail;
        fields[c] = -1;
        defaults[c] = NONE;
        if (name == Py_None) continue;
        uint32_t size;
        const char *utf8 = PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, (Py_ssize_t *)NULL) : NULL;
        if (utf8 == NULL || (fields[c] = field_of(utf8, (uint32_t)strlen(utf8))) == F_OTHER) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "bind: the indexed field %R is not one the task folds know", name);
            goto fail;
        }
        if (fallback != Py_None) { /* kept as a JSON string, as the row holds it */
            char *text = PyUnicode_Check(fallback) ? raw_string(fallback, &size) : NULL;
            if (text == NULL) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bind: a default is a str or None");
                goto fail;
            }
            char *quoted = PyMem_RawMalloc(2 + 6 * (size_t)size);
            if (quoted == NULL) {
                PyMem_RawFree(text);
                PyErr_NoMemory();
                goto fail;
            }
            char *end = put_string_json(quoted, (const uint8_t *)text, size);
            PyMem_RawFree(text);
            defaults[c] = (Text){quoted, (uint32_t)(end - quoted)};
        }
    }
    free_routes(routes, n_routes);
    for (int c = 0; c < n_plan; c++) PyMem_RawFree((void *)plan_defaults[c].p);
    routes = fresh;
    n_routes = (int)n;
    n_plan = (int)columns;
    memcpy(plan_fields, fields, sizeof fields);
    memcpy(plan_defaults, defaults, sizeof defaults);
    Py_RETURN_NONE;
fail:
    free_routes(fresh, (int)n);
    return NULL;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O,
     "scan(body) -> (items, [(index, start, end), ...], index) | None: a POST's items, the place of each one"
     " `prepare` must read in Python, and what the fold reads of each item; None for a body Python reads"
     " whole."},
    {"bind_names", bind_names, METH_VARARGS,
     "bind_names(RAY_KEYS, TASK_ROW, TASK_VALUES): the names the folds read and write (store/fold_schema.py)."},
    {"bind", bind, METH_VARARGS, "bind(routes, plan): see the C source."},
    SQLITE_LIBRARY_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_post_fold", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__post_fold(void) {
    if (PyType_Ready(&FolderType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "Folder", (PyObject *)&FolderType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
