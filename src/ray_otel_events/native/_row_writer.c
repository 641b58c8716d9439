/* The store's row upserts, written by a thread of their own that never needs the GIL.
 *
 * Python's sqlite3 gives up the GIL around each row's step and then waits to get it back, so a
 * writer thread beside a busy Python thread crawls. Here `add` packs a chunk of rows into one
 * buffer (packed_rows.h) and queues it (the compiled fold queues the chunks it packs itself, through
 * the `queue_packed` capsule, without the GIL); a pthread steps them on its own SQLite connection
 * inside one transaction, while the caller folds the next chunk; `commit` waits for the queue and
 * commits (or rolls back, and raises, if a row failed). Optional: built where SQLite's headers are
 * present; else the store writes with `executemany` on its own connection, the same rows.
 *
 * `keep` queues a session's raw events (POST bodies) the same way: the thread deflates them
 * (raw_deflate.h) and inserts the blob and the session's last-seen time in the same transaction,
 * so `serve`'s fold thread neither compresses nor gives the GIL up for it. The bodies are held
 * (referenced) until the transaction ends. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sqlite3.h>

#include "packed_rows.h"
#include "sqlite_library.h"
#include "raw_deflate.h"
#include "row_packing.h"

#define ROW_WRITER_MAX_COLUMNS 64

typedef struct {
    char *session; /* UTF-8, `session_len` bytes */
    Py_ssize_t session_len;
    double received;
    Py_ssize_t parts_count;
    RawPart *parts; /* into bodies the writer holds */
} KeepJob;

typedef struct Chunk {
    char *data; /* `rows` rows of packed values */
    Py_ssize_t rows;
    KeepJob *keep; /* or, instead of rows, a session's raw events to keep */
    struct Chunk *next;
} Chunk;

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *upsert;
    sqlite3_stmt *keep_raw;  /* (session, received, blob) */
    sqlite3_stmt *keep_seen; /* (session, first seen, last seen) */
    PyObject *held;          /* the bodies of queued keep jobs, until the transaction ends */
    int columns;
    int packed; /* the column stored packed (row_packing.h), or -1 */
    RowPacker packer;
    unsigned char *raw_dictionary; /* the raw events' deflate dictionary (prepare_keep's copy) */
    size_t raw_dictionary_len;
    unsigned char hex_ids[ROW_WRITER_MAX_COLUMNS]; /* 1: a hex text there is stored as its bytes */
    unsigned char id_bytes[ROW_ID_MAX / 2];        /* one such value's bytes, as they are bound */
    /* The columns of a row's ids (entity id, node, worker: row_packing.h's ROW_IDS), whose values
     * as they are stored end the dictionary of its packed column (ROW_PACKED_V2); none: V1. */
    int row_ids[ROW_IDS], n_row_ids;
    unsigned char row_id_bytes[ROW_IDS][ROW_ID_MAX / 2];
    char ids_text[ROW_IDS_TEXT_MAX];
    /* The column holding a session's name, stored as the number `session_id` (name, received)
     * answers, or -1; `received`: the column whose value is its second parameter. The last
     * session's number is kept for the rest of the transaction. */
    int session_at, received_at;
    sqlite3_stmt *session_id;
    char *last_session;
    size_t last_session_len;
    int64_t last_session_id;
    int session_known;
    PyObject *error_type;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    Chunk *head, *tail;
    int busy;        /* the thread is writing a chunk */
    int in_transaction;
    int failed;      /* a row failed: the rest are skipped until commit rolls back */
    char message[512];
    int closing;
} Writer;

static void fail_with(Writer *w, const char *what) {
    if (w->failed) return;
    w->failed = 1;
    snprintf(w->message, sizeof w->message, "%s: %s", what, sqlite3_errmsg(w->db));
}

/* The number of session `name` (its row in `sessions`, made when new), as the store's _packed
 * finds it: 0, or -1 (failed). */
static int session_number(Writer *w, const char *name, size_t len, double received, int64_t *number) {
    if (w->session_known && w->last_session_len == len && memcmp(w->last_session, name, len) == 0) {
        *number = w->last_session_id;
        return 0;
    }
    if (len > INT_MAX) return -1;
    int rc = sqlite3_bind_text(w->session_id, 1, name, (int)len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(w->session_id, 2, received);
    if (rc == SQLITE_OK) rc = sqlite3_step(w->session_id) == SQLITE_ROW ? SQLITE_OK : SQLITE_ERROR;
    if (rc == SQLITE_OK) *number = sqlite3_column_int64(w->session_id, 0);
    if (rc == SQLITE_OK) rc = sqlite3_step(w->session_id) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(w->session_id);
    if (rc != SQLITE_OK) return -1;
    char *kept = PyMem_RawRealloc(w->last_session, len ? len : 1);
    if (kept == NULL) {
        w->session_known = 0;
        return 0; /* not kept: asked again next time */
    }
    memcpy(kept, name, len);
    w->last_session = kept;
    w->last_session_len = len;
    w->last_session_id = *number;
    w->session_known = 1;
    return 0;
}

static void write_chunk(Writer *w, Chunk *chunk) {
    if (w->failed) return;
    if (!w->in_transaction) {
        if (sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
            fail_with(w, "BEGIN");
            return;
        }
        w->in_transaction = 1;
    }
    const char *p = chunk->data;
    for (Py_ssize_t r = 0; r < chunk->rows; r++) {
        const char *session = NULL;
        size_t session_len = 0;
        double received = 0;
        const char *ids_text = NULL; /* the packed column's ids (ROW_PACKED_V2), as they are stored */
        size_t ids_len = 0;
        if (w->n_row_ids) {
            const unsigned char *ids[ROW_IDS] = {NULL};
            size_t id_lens[ROW_IDS] = {0};
            const char *q = p;
            for (int c = 0; c < w->columns; c++) {
                PackedValue v;
                q = packed_read(q, &v);
                for (int k = 0; k < w->n_row_ids; k++) {
                    /* an id's bytes, or a hex text read as them (stored so where hex_ids says) */
                    if (w->row_ids[k] == c && (v.tag == PACKED_TEXT || v.tag == PACKED_BLOB))
                        row_id_value(v.tag == PACKED_TEXT, v.text, v.len, w->row_id_bytes[k], &ids[k], &id_lens[k]);
                }
            }
            ids_len = row_ids_text(ids, id_lens, w->ids_text);
            ids_text = w->ids_text;
        }
        for (int c = 0; c < w->columns; c++) {
            PackedValue v;
            p = packed_read(p, &v);
            if (c == w->session_at && v.tag == PACKED_TEXT) { /* bound once `received` is read */
                session = v.text;
                session_len = v.len;
                continue;
            }
            if (c == w->received_at) received = v.tag == PACKED_FLOAT ? v.d : v.tag == PACKED_INT ? (double)v.i : 0;
            if (c == w->packed && v.tag == PACKED_TEXT) {
                const unsigned char *blob;
                size_t blob_len;
                int rc = row_pack(&w->packer, v.text, v.len, ids_text, ids_len, &blob, &blob_len) < 0 ||
                                 blob_len > INT_MAX
                             ? SQLITE_NOMEM
                             : sqlite3_bind_blob(w->upsert, c + 1, blob, (int)blob_len, SQLITE_STATIC);
                if (rc != SQLITE_OK) {
                    fail_with(w, "pack a row");
                    sqlite3_reset(w->upsert);
                    return;
                }
                continue;
            }
            int id_len = c < ROW_WRITER_MAX_COLUMNS && w->hex_ids[c] && v.tag == PACKED_TEXT
                             ? row_id_bytes(v.text, v.len, w->id_bytes)
                             : -1;
            if (id_len > 0) {
                if (sqlite3_bind_blob(w->upsert, c + 1, w->id_bytes, id_len, SQLITE_TRANSIENT) != SQLITE_OK) {
                    fail_with(w, "bind");
                    sqlite3_reset(w->upsert);
                    return;
                }
                continue;
            }
            int rc = v.tag == PACKED_INT     ? sqlite3_bind_int64(w->upsert, c + 1, v.i)
                     : v.tag == PACKED_FLOAT ? sqlite3_bind_double(w->upsert, c + 1, v.d)
                     : v.tag == PACKED_TEXT  ? sqlite3_bind_text(w->upsert, c + 1, v.text, (int)v.len, SQLITE_STATIC)
                     : v.tag == PACKED_BLOB  ? sqlite3_bind_blob(w->upsert, c + 1, v.text, (int)v.len, SQLITE_STATIC)
                                             : sqlite3_bind_null(w->upsert, c + 1);
            if (rc != SQLITE_OK) {
                fail_with(w, "bind");
                sqlite3_reset(w->upsert);
                return;
            }
        }
        if (session != NULL) {
            int64_t number;
            if (session_number(w, session, session_len, received, &number) < 0 ||
                sqlite3_bind_int64(w->upsert, w->session_at + 1, number) != SQLITE_OK) {
                fail_with(w, "the session's number");
                sqlite3_reset(w->upsert);
                return;
            }
        }
        int rc = sqlite3_step(w->upsert);
        sqlite3_reset(w->upsert);
        if (rc != SQLITE_DONE) {
            fail_with(w, "upsert");
            return;
        }
    }
}

static int begin(Writer *w) {
    if (w->in_transaction) return 0;
    if (sqlite3_exec(w->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        fail_with(w, "BEGIN");
        return -1;
    }
    w->in_transaction = 1;
    return 0;
}

static void write_keep(Writer *w, KeepJob *job) {
    if (w->failed || begin(w) < 0) return;
    unsigned char *blob = NULL;
    size_t len = 0;
    if (raw_deflate(job->parts, job->parts_count, w->raw_dictionary, w->raw_dictionary_len, &blob, &len) < 0 ||
        len > INT_MAX) {
        PyMem_RawFree(blob);
        w->failed = 1;
        snprintf(w->message, sizeof w->message, "cannot compress the raw events of %.200s", job->session);
        return;
    }
    int rc = sqlite3_bind_text(w->keep_raw, 1, job->session, (int)job->session_len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(w->keep_raw, 2, job->received);
    if (rc == SQLITE_OK) rc = sqlite3_bind_blob(w->keep_raw, 3, blob, (int)len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(w->keep_raw) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(w->keep_raw);
    sqlite3_clear_bindings(w->keep_raw);
    PyMem_RawFree(blob);
    if (rc != SQLITE_OK) {
        fail_with(w, "keep raw events");
        return;
    }
    rc = sqlite3_bind_text(w->keep_seen, 1, job->session, (int)job->session_len, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(w->keep_seen, 2, job->received);
    if (rc == SQLITE_OK) rc = sqlite3_bind_double(w->keep_seen, 3, job->received);
    if (rc == SQLITE_OK) rc = sqlite3_step(w->keep_seen) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(w->keep_seen);
    if (rc != SQLITE_OK) fail_with(w, "keep the session");
}

static void free_chunk(Chunk *chunk) {
    if (chunk->keep) {
        PyMem_RawFree(chunk->keep->session);
        PyMem_RawFree(chunk->keep->parts);
        PyMem_RawFree(chunk->keep);
    }
    PyMem_RawFree(chunk->data);
    PyMem_RawFree(chunk);
}

static void *run(void *arg) {
    Writer *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->head == NULL && !w->closing) pthread_cond_wait(&w->wake, &w->lock);
        if (w->head == NULL) break;
        Chunk *chunk = w->head;
        w->head = chunk->next;
        if (w->head == NULL) w->tail = NULL;
        w->busy = 1;
        pthread_mutex_unlock(&w->lock);
        if (chunk->keep) write_keep(w, chunk->keep);
        else write_chunk(w, chunk);
        free_chunk(chunk);
        pthread_mutex_lock(&w->lock);
        w->busy = 0;
        if (w->head == NULL) pthread_cond_broadcast(&w->idle);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Wait, without the GIL, until the thread has written everything queued. */
static void wait_idle(Writer *w) {
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&w->lock);
    while (w->head != NULL || w->busy) pthread_cond_wait(&w->idle, &w->lock);
    pthread_mutex_unlock(&w->lock);
    Py_END_ALLOW_THREADS
}

static int pack_value(PyObject *obj, RawBuf *b) {
    if (obj == Py_None) {
        packed_null(b);
    } else if (PyLong_Check(obj)) { /* bools too, as 0 and 1 (what sqlite3 binds) */
        long long i = PyLong_AsLongLong(obj);
        if (i == -1 && PyErr_Occurred()) return -1;
        packed_int(b, i);
    } else if (PyFloat_Check(obj)) {
        packed_float(b, PyFloat_AS_DOUBLE(obj));
    } else if (PyUnicode_Check(obj)) {
        Py_ssize_t len;
        const char *text = PyUnicode_AsUTF8AndSize(obj, &len);
        if (text == NULL) return -1;
        if (len > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a text too long for SQLite");
            return -1;
        }
        packed_text(b, text, (uint32_t)len);
    } else if (PyBytes_Check(obj)) { /* a row's kept event ids (kept_ids.packed) */
        Py_ssize_t len = PyBytes_GET_SIZE(obj);
        if (len > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a blob too long for SQLite");
            return -1;
        }
        packed_blob(b, PyBytes_AS_STRING(obj), (uint32_t)len);
    } else {
        PyErr_Format(PyExc_TypeError, "a %s cannot be stored", Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

/* Hand `chunk` to the writer's thread, after every chunk queued before it. */
static void enqueue(Writer *w, Chunk *chunk) {
    pthread_mutex_lock(&w->lock);
    if (w->tail) w->tail->next = chunk;
    else w->head = chunk;
    w->tail = chunk;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
}

/* Queue a chunk of `rows` packed rows (taking `data`): 0, or -1 when the writer is closed. */
static int queue_packed(PyObject *writer, char *data, size_t size, Py_ssize_t rows) {
    (void)size;
    Writer *w = (Writer *)writer;
    if (w->db == NULL) return -1;
    Chunk *chunk = PyMem_RawMalloc(sizeof(Chunk));
    if (chunk == NULL) return -1;
    *chunk = (Chunk){data, rows, NULL, NULL};
    enqueue(w, chunk);
    return 0;
}

static PyObject *writer_add(Writer *w, PyObject *rows) {
    if (w->db == NULL) {
        PyErr_SetString(PyExc_ValueError, "the writer is closed");
        return NULL;
    }
    if (!PyList_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "add(rows): a list of tuples");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(rows);
    if (n == 0) Py_RETURN_NONE;
    RawBuf packed = {0};
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != w->columns) {
            PyErr_Format(PyExc_TypeError, "a row is a tuple of %d values", w->columns);
            goto fail;
        }
        for (int c = 0; c < w->columns; c++) {
            if (pack_value(PyTuple_GET_ITEM(row, c), &packed)) goto fail;
        }
    }
    if (packed.failed) {
        PyErr_NoMemory();
        goto fail;
    }
    if (queue_packed((PyObject *)w, packed.data, packed.len, n) < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_RETURN_NONE;
fail:
    raw_free(&packed);
    return NULL;
}

/* keep(session, received, bodies): queue a session's POST bodies (JSON arrays) as one raw events
 * blob, written in this transaction; `prepare_keep` first. */
static PyObject *writer_keep(Writer *w, PyObject *args) {
    const char *session;
    Py_ssize_t session_len;
    double received;
    PyObject *bodies;
    if (!PyArg_ParseTuple(args, "s#dO!:keep", &session, &session_len, &received, &PyList_Type, &bodies))
        return NULL;
    if (w->db == NULL || w->keep_raw == NULL) {
        PyErr_SetString(PyExc_ValueError, "the writer is closed, or keep is not prepared");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyBytes_Check(PyList_GET_ITEM(bodies, i))) {
            PyErr_SetString(PyExc_TypeError, "keep(session, received, bodies): a list of bytes");
            return NULL;
        }
    }
    if (w->held == NULL && (w->held = PyList_New(0)) == NULL) return NULL;
    KeepJob *job = PyMem_RawCalloc(1, sizeof(KeepJob));
    Chunk *chunk = PyMem_RawCalloc(1, sizeof(Chunk));
    if (job == NULL || chunk == NULL) goto nomem;
    chunk->keep = job;
    job->session = PyMem_RawMalloc((size_t)session_len + 1);
    job->parts = PyMem_RawCalloc((size_t)n + 1, sizeof(RawPart));
    if (job->session == NULL || job->parts == NULL) goto nomem;
    memcpy(job->session, session, (size_t)session_len + 1);
    job->session_len = session_len;
    job->received = received;
    job->parts_count = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PyList_GET_ITEM(bodies, i);
        if (PyList_Append(w->held, body) < 0) {
            free_chunk(chunk);
            return NULL;
        }
        job->parts[i] = raw_inner((const unsigned char *)PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
    }
    enqueue(w, chunk);
    Py_RETURN_NONE;
nomem:
    if (chunk) free_chunk(chunk);
    else PyMem_RawFree(job);
    return PyErr_NoMemory();
}

/* prepare_keep(raw_sql, seen_sql, dictionary): the statements `keep` runs (3 parameters each),
 * and the dictionary its blobs are deflated with (raw_deflate.h; at most 32 KiB). */
static PyObject *writer_prepare_keep(Writer *w, PyObject *args) {
    const char *raw_sql, *seen_sql, *dictionary;
    Py_ssize_t dictionary_len;
    if (!PyArg_ParseTuple(args, "ssy#:prepare_keep", &raw_sql, &seen_sql, &dictionary, &dictionary_len)) return NULL;
    if (w->db == NULL || w->keep_raw != NULL) {
        PyErr_SetString(PyExc_ValueError, "the writer is closed, or keep is prepared already");
        return NULL;
    }
    if (dictionary_len > 32768) {
        PyErr_SetString(PyExc_ValueError, "prepare_keep: a dictionary of at most 32 KiB");
        return NULL;
    }
    wait_idle(w);
    PyMem_RawFree(w->raw_dictionary);
    w->raw_dictionary = PyMem_RawMalloc((size_t)dictionary_len + 1);
    if (w->raw_dictionary == NULL) {
        w->raw_dictionary_len = 0;
        return PyErr_NoMemory();
    }
    memcpy(w->raw_dictionary, dictionary, (size_t)dictionary_len);
    w->raw_dictionary_len = (size_t)dictionary_len;
    int rc = sqlite3_prepare_v3(w->db, raw_sql, -1, SQLITE_PREPARE_PERSISTENT, &w->keep_raw, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v3(w->db, seen_sql, -1, SQLITE_PREPARE_PERSISTENT, &w->keep_seen, NULL);
    if (rc == SQLITE_OK && (sqlite3_bind_parameter_count(w->keep_raw) != 3 || sqlite3_bind_parameter_count(w->keep_seen) != 3)) {
        PyErr_SetString(PyExc_ValueError, "keep's statements take 3 values each");
        rc = SQLITE_MISUSE;
    } else if (rc != SQLITE_OK) {
        PyErr_Format(w->error_type, "prepare_keep: %s", sqlite3_errmsg(w->db));
    }
    if (rc != SQLITE_OK) {
        sqlite3_finalize(w->keep_raw);
        sqlite3_finalize(w->keep_seen);
        w->keep_raw = w->keep_seen = NULL;
        return NULL;
    }
    Py_RETURN_NONE;
}

/* End the transaction: COMMIT (`commit` true and no row failed) or ROLLBACK. */
static PyObject *finish(Writer *w, int commit) {
    if (w->db == NULL) {
        PyErr_SetString(PyExc_ValueError, "the writer is closed");
        return NULL;
    }
    wait_idle(w);
    int failed = w->failed, rc = SQLITE_OK;
    if (w->in_transaction) {
        const char *sql = commit && !failed ? "COMMIT" : "ROLLBACK";
        Py_BEGIN_ALLOW_THREADS
        rc = sqlite3_exec(w->db, sql, NULL, NULL, NULL);
        Py_END_ALLOW_THREADS
        if (rc != SQLITE_OK && !failed) {
            snprintf(w->message, sizeof w->message, "%s: %s", sql, sqlite3_errmsg(w->db));
            failed = 1;
            if (commit) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
        }
        w->in_transaction = 0;
    }
    w->session_known = 0; /* a session's number is known for one transaction: upkeep may drop it */
    w->failed = 0;
    Py_CLEAR(w->held); /* written (or dropped): the bodies are no longer read */
    if (failed && commit) {
        PyErr_SetString(w->error_type, w->message);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *writer_commit(Writer *w, PyObject *unused) {
    (void)unused;
    return finish(w, 1);
}

static PyObject *writer_rollback(Writer *w, PyObject *unused) {
    (void)unused;
    return finish(w, 0);
}

static void stop(Writer *w) {
    if (w->started) {
        pthread_mutex_lock(&w->lock);
        w->closing = 1;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->lock);
        Py_BEGIN_ALLOW_THREADS
        pthread_join(w->thread, NULL);
        Py_END_ALLOW_THREADS
        w->started = 0;
    }
    if (w->in_transaction) sqlite3_exec(w->db, "ROLLBACK", NULL, NULL, NULL);
    w->in_transaction = 0;
    if (w->upsert) sqlite3_finalize(w->upsert);
    w->upsert = NULL;
    sqlite3_finalize(w->keep_raw);
    sqlite3_finalize(w->keep_seen);
    sqlite3_finalize(w->session_id);
    w->keep_raw = w->keep_seen = w->session_id = NULL;
    PyMem_RawFree(w->last_session);
    w->last_session = NULL;
    w->session_known = 0;
    if (w->db) sqlite3_close(w->db);
    w->db = NULL;
    row_packer_free(&w->packer, 0);
    PyMem_RawFree(w->raw_dictionary);
    w->raw_dictionary = NULL;
    w->raw_dictionary_len = 0;
}

static PyObject *writer_close(Writer *w, PyObject *unused) {
    (void)unused;
    stop(w);
    Py_RETURN_NONE;
}

static int writer_init(Writer *w, PyObject *args, PyObject *kwargs) {
    const char *path, *sql, *setup, *dictionary = "", *hex_ids = "", *session_sql = NULL, *row_ids = "";
    Py_ssize_t dictionary_len = 0, hex_ids_len = 0, row_ids_len = 0;
    PyObject *error_type;
    static char *keywords[] = {"path",       "sql",     "setup",       "columns",  "error", "packed", "dictionary",
                               "hex_ids",    "session", "session_sql", "received", "row_ids", NULL};
    w->packed = w->session_at = w->received_at = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sssiO|iy#y#iziy#:RowWriter", keywords, &path, &sql, &setup,
                                     &w->columns, &error_type, &w->packed, &dictionary, &dictionary_len,
                                     &hex_ids, &hex_ids_len, &w->session_at, &session_sql, &w->received_at,
                                     &row_ids, &row_ids_len))
        return -1;
    if (row_ids_len > ROW_IDS) {
        PyErr_SetString(PyExc_ValueError, "RowWriter: row_ids are at most 3 indexes of its columns");
        return -1;
    }
    for (Py_ssize_t i = 0; i < row_ids_len; i++) {
        unsigned char c = (unsigned char)row_ids[i];
        if (c >= w->columns) {
            PyErr_SetString(PyExc_ValueError, "RowWriter: row_ids are indexes of its columns");
            return -1;
        }
        w->row_ids[i] = c;
    }
    w->n_row_ids = (int)row_ids_len;
    if (w->session_at >= w->columns || w->received_at >= w->columns || (w->session_at >= 0) != (session_sql != NULL) ||
        (w->session_at >= 0 && w->received_at < 0)) {
        PyErr_SetString(PyExc_ValueError, "RowWriter: session and received are indexes of its columns, with session_sql");
        return -1;
    }
    if (w->db != NULL || w->columns <= 0) {
        PyErr_SetString(PyExc_ValueError, "RowWriter(path, sql, setup, columns > 0, error), once");
        return -1;
    }
    for (Py_ssize_t i = 0; i < hex_ids_len; i++) {
        unsigned char c = (unsigned char)hex_ids[i];
        if (c >= w->columns || c >= ROW_WRITER_MAX_COLUMNS) {
            PyErr_SetString(PyExc_ValueError, "RowWriter: hex_ids are indexes of its columns");
            return -1;
        }
        w->hex_ids[c] = 1;
    }
    if (w->packed >= w->columns) {
        PyErr_SetString(PyExc_ValueError, "RowWriter: packed is the index of one of its columns");
        return -1;
    }
    if (row_packer_dictionary(&w->packer, dictionary, (size_t)dictionary_len) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    Py_XSETREF(w->error_type, Py_NewRef(error_type));
    int rc = sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(w->db, setup, NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->upsert, NULL);
    if (rc == SQLITE_OK && session_sql != NULL)
        rc = sqlite3_prepare_v3(w->db, session_sql, -1, SQLITE_PREPARE_PERSISTENT, &w->session_id, NULL);
    if (rc != SQLITE_OK) {
        PyErr_Format(error_type, "%s: %s", path, w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc));
        stop(w);
        return -1;
    }
    if (w->session_id != NULL && (sqlite3_bind_parameter_count(w->session_id) != 2 || sqlite3_column_count(w->session_id) != 1)) {
        PyErr_SetString(PyExc_ValueError, "session_sql takes (name, received) and answers one number");
        stop(w);
        return -1;
    }
    if (sqlite3_bind_parameter_count(w->upsert) != w->columns) {
        PyErr_Format(PyExc_ValueError, "the statement takes %d values, not %d",
                     sqlite3_bind_parameter_count(w->upsert), w->columns);
        stop(w);
        return -1;
    }
    if (pthread_create(&w->thread, NULL, run, w) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot start the writer thread");
        stop(w);
        return -1;
    }
    w->started = 1;
    return 0;
}

static PyObject *writer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs;
    Writer *w = (Writer *)type->tp_alloc(type, 0);
    if (w == NULL) return NULL;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->idle, NULL);
    return (PyObject *)w;
}

static void writer_dealloc(Writer *w) {
    stop(w);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->idle);
    Py_XDECREF(w->error_type);
    Py_XDECREF(w->held);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef writer_methods[] = {
    {"add", (PyCFunction)writer_add, METH_O, "add(rows): queue a chunk of rows for the open transaction."},
    {"commit", (PyCFunction)writer_commit, METH_NOARGS,
     "commit(): wait for the queued rows and commit them; raises (after rolling back) if one failed."},
    {"rollback", (PyCFunction)writer_rollback, METH_NOARGS, "rollback(): wait, then drop what was queued."},
    {"keep", (PyCFunction)writer_keep, METH_VARARGS,
     "keep(session, received, bodies): queue a session's POST bodies as one compressed raw events blob."},
    {"prepare_keep", (PyCFunction)writer_prepare_keep, METH_VARARGS,
     "prepare_keep(raw_sql, seen_sql): the statements keep runs."},
    {"close", (PyCFunction)writer_close, METH_NOARGS, "close(): stop the thread (rolling back) and the connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ray_otel_events.native._row_writer.RowWriter",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowWriter(path, sql, setup, columns, error, packed=-1, dictionary=b'', hex_ids=b'', session=-1,"
               " session_sql=None, received=-1, row_ids=b''): upserts on a thread and connection of its own;"
               " column `packed` (0-based) is stored packed with `dictionary` (followed by the stored values of"
               " the columns whose indexes are the bytes of `row_ids` where it has some: entity id, node, worker),"
               " a hex text in a column whose index is a byte of `hex_ids` as its bytes, and the text in column"
               " `session` as the number `session_sql` answers for it and column `received`'s value.",
    .tp_new = writer_new,
    .tp_init = (initproc)writer_init,
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_methods = writer_methods,
};

static PyMethodDef methods[] = {SQLITE_LIBRARY_METHOD, {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_row_writer", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__row_writer(void) {
    if (PyType_Ready(&WriterType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    PyObject *queue = PyCapsule_New((void *)queue_packed, ROW_WRITER_CAPSULE, NULL);
    int failed = queue == NULL || PyModule_AddObjectRef(module, "RowWriter", (PyObject *)&WriterType) < 0 ||
                 PyModule_AddObjectRef(module, ROW_WRITER_QUEUE, queue) < 0;
    Py_XDECREF(queue);
    if (failed) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
