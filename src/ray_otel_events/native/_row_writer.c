/* The store's row upserts, written by a thread of their own that never needs the GIL.
 *
 * Python's sqlite3 gives up the GIL around each row's step and then waits to get it back, so a
 * writer thread beside a busy Python thread crawls. Here `add` packs a chunk of rows into one
 * buffer (packed_rows.h) and queues it (the compiled fold queues the chunks it packs itself, through
 * the `queue_packed` capsule, without the GIL); a pthread steps them on its own SQLite connection
 * inside one transaction, while the caller folds the next chunk; `commit` waits for the queue and
 * commits (or rolls back, and raises, if a row failed). Optional: built where SQLite's headers are
 * present; else the store writes with `executemany` on its own connection, the same rows. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sqlite3.h>

#include "packed_rows.h"
#include "sqlite_library.h"

typedef struct Chunk {
    char *data; /* `rows` rows of packed values */
    Py_ssize_t rows;
    struct Chunk *next;
} Chunk;

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *upsert;
    int columns;
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
        for (int c = 0; c < w->columns; c++) {
            PackedValue v;
            p = packed_read(p, &v);
            int rc = v.tag == PACKED_INT     ? sqlite3_bind_int64(w->upsert, c + 1, v.i)
                     : v.tag == PACKED_FLOAT ? sqlite3_bind_double(w->upsert, c + 1, v.d)
                     : v.tag == PACKED_TEXT  ? sqlite3_bind_text(w->upsert, c + 1, v.text, (int)v.len, SQLITE_STATIC)
                                             : sqlite3_bind_null(w->upsert, c + 1);
            if (rc != SQLITE_OK) {
                fail_with(w, "bind");
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
        write_chunk(w, chunk);
        PyMem_RawFree(chunk->data);
        PyMem_RawFree(chunk);
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
    } else {
        PyErr_Format(PyExc_TypeError, "a %s cannot be stored", Py_TYPE(obj)->tp_name);
        return -1;
    }
    return 0;
}

/* Queue a chunk of `rows` packed rows (taking `data`): 0, or -1 when the writer is closed. */
static int queue_packed(PyObject *writer, char *data, size_t size, Py_ssize_t rows) {
    (void)size;
    Writer *w = (Writer *)writer;
    if (w->db == NULL) return -1;
    Chunk *chunk = PyMem_RawMalloc(sizeof(Chunk));
    if (chunk == NULL) return -1;
    *chunk = (Chunk){data, rows, NULL};
    pthread_mutex_lock(&w->lock);
    if (w->tail) w->tail->next = chunk;
    else w->head = chunk;
    w->tail = chunk;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
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
    w->failed = 0;
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
    if (w->db) sqlite3_close(w->db);
    w->db = NULL;
}

static PyObject *writer_close(Writer *w, PyObject *unused) {
    (void)unused;
    stop(w);
    Py_RETURN_NONE;
}

static int writer_init(Writer *w, PyObject *args, PyObject *kwargs) {
    const char *path, *sql, *setup;
    PyObject *error_type;
    static char *keywords[] = {"path", "sql", "setup", "columns", "error", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sssiO:RowWriter", keywords, &path, &sql, &setup,
                                     &w->columns, &error_type))
        return -1;
    if (w->db != NULL || w->columns <= 0) {
        PyErr_SetString(PyExc_ValueError, "RowWriter(path, sql, setup, columns > 0, error), once");
        return -1;
    }
    Py_XSETREF(w->error_type, Py_NewRef(error_type));
    int rc = sqlite3_open_v2(path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(w->db, setup, NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_prepare_v3(w->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &w->upsert, NULL);
    if (rc != SQLITE_OK) {
        PyErr_Format(error_type, "%s: %s", path, w->db ? sqlite3_errmsg(w->db) : sqlite3_errstr(rc));
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
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef writer_methods[] = {
    {"add", (PyCFunction)writer_add, METH_O, "add(rows): queue a chunk of rows for the open transaction."},
    {"commit", (PyCFunction)writer_commit, METH_NOARGS,
     "commit(): wait for the queued rows and commit them; raises (after rolling back) if one failed."},
    {"rollback", (PyCFunction)writer_rollback, METH_NOARGS, "rollback(): wait, then drop what was queued."},
    {"close", (PyCFunction)writer_close, METH_NOARGS, "close(): stop the thread (rolling back) and the connection."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ray_otel_events.native._row_writer.RowWriter",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowWriter(path, sql, setup, columns, error): upserts on a thread and connection of its own.",
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
