/* The ISO time of a span line (otel/span_json.py `ns_to_iso_str`), compiled: a traced task's two
 * span lines carry six, about a microsecond each in Python (float division, a rounding, a cached
 * second's prefix and a format). The same arithmetic as CPython's `datetime.fromtimestamp(ns / 1e9)`
 * (modf, the fraction times 1e6 rounded half to even, a carry into the second), and the civil date
 * of the whole second. Times before 1970 or after 9999 go to the Python twin given to bind(). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#include "civil_dates.h"

static PyObject *fallback; /* the Python ns_to_iso_str */

/* CPython's _PyTime_RoundHalfEven (Python/pytime.c). */
static double round_half_even(double x) {
    double rounded = round(x);
    if (fabs(x - rounded) == 0.5) rounded = 2.0 * round(x / 2.0);
    return rounded;
}

static void put2(char *p, unsigned v) {
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
}

static PyObject *iso(PyObject *module, PyObject *arg) {
    (void)module;
    if (fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_span_json.bind() was not called");
        return NULL;
    }
    if (!PyLong_CheckExact(arg)) return PyObject_CallOneArg(fallback, arg);
    int overflow = 0;
    long long ns = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (ns == -1 && PyErr_Occurred()) return NULL;
    if (overflow || ns < 0) return PyObject_CallOneArg(fallback, arg);
    double seconds = (double)ns / 1e9; /* as Python's int / float: correctly rounded */
    double whole;
    double fraction = modf(seconds, &whole);
    double micros = round_half_even(fraction * 1e6);
    if (micros >= 1e6) {
        micros -= 1e6;
        whole += 1.0;
    }
    if (whole >= 253402300800.0) return PyObject_CallOneArg(fallback, arg); /* year 10000 on */
    int64_t secs = (int64_t)whole;
    int64_t y;
    int mo, d;
    civil_from_days(secs / 86400, &y, &mo, &d);
    unsigned in_day = (unsigned)(secs % 86400);
    unsigned us = (unsigned)micros;
    char out[27]; /* YYYY-MM-DDTHH:MM:SS.ffffffZ */
    put2(out, (unsigned)(y / 100));
    put2(out + 2, (unsigned)(y % 100));
    out[4] = '-';
    put2(out + 5, (unsigned)mo);
    out[7] = '-';
    put2(out + 8, (unsigned)d);
    out[10] = 'T';
    put2(out + 11, in_day / 3600);
    out[13] = ':';
    put2(out + 14, in_day / 60 % 60);
    out[16] = ':';
    put2(out + 17, in_day % 60);
    out[19] = '.';
    put2(out + 20, us / 10000);
    put2(out + 22, us / 100 % 100);
    put2(out + 24, us % 100);
    out[26] = 'Z';
    return PyUnicode_FromStringAndSize(out, 27);
}

static PyObject *bind(PyObject *module, PyObject *arg) {
    (void)module;
    if (!PyCallable_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bind(fallback): a callable");
        return NULL;
    }
    Py_INCREF(arg);
    Py_XSETREF(fallback, arg);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"iso", (PyCFunction)iso, METH_O, "iso(ns): the span line's ISO time of ns since the epoch."},
    {"bind", (PyCFunction)bind, METH_O, "bind(fallback): the Python twin, for times it does not write."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_span_json", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__span_json(void) { return PyModule_Create(&module_def); }
