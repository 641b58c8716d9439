/* Which SQLite library a compiled module calls, for the store to compare with Python's `sqlite3`.
 *
 * Two SQLite libraries in one process, each with its own locks and file bookkeeping, can corrupt a
 * database they share (POSIX advisory locks are per process: one library's close drops the other's
 * locks). The store runs the compiled writer only when `sqlite_library()` of each module that
 * opens the file names the same library, by version, source id and the file it was loaded from, as
 * Python's `_sqlite3` (store/sqlite_library.py). */

#ifndef RAY_OTEL_EVENTS_SQLITE_LIBRARY_H
#define RAY_OTEL_EVENTS_SQLITE_LIBRARY_H

#include <Python.h>
#include <dlfcn.h>
#include <sqlite3.h>

/* sqlite_library() -> (sqlite3_libversion(), sqlite3_sourceid(), the file holding
 * sqlite3_libversion, or None where dladdr cannot tell). */
static PyObject *sqlite_library(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    Dl_info info;
    const char *file = NULL;
    const char *(*libversion)(void) = sqlite3_libversion;
    void *address;
    memcpy(&address, &libversion, sizeof address); /* a function's address, as dladdr takes it */
    if (dladdr(address, &info) != 0 && info.dli_fname != NULL && info.dli_fname[0] != '\0') file = info.dli_fname;
    return Py_BuildValue("(ssz)", sqlite3_libversion(), sqlite3_sourceid(), file);
}

#define SQLITE_LIBRARY_METHOD                                                                               \
    {"sqlite_library", sqlite_library, METH_NOARGS,                                                         \
     "sqlite_library() -> (version, source id, file or None): the SQLite library this module calls."}

#endif
