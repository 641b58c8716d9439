/* The log-record walk of log_records.py (`_walk`), compiled: the same bytes, for the keys and
 * values a posted RayEvent holds (strings, ints, bools, objects, lists of objects). It reads and
 * fills the same `_Plan` and `_Leaf` caches; everything else (a plan or leaf met for the first
 * time, floats, lists of plain values, None, other Mappings) is handed to the Python helpers bound
 * by `bind`, so the two paths cannot drift apart. Optional: without a C compiler the package
 * builds without it and log_records.py walks in Python. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "protobuf_wire.h"

/* Tags: KeyValueList.values = 1 (a body entry), LogRecord.attributes = 6 (an attribute entry),
 * KeyValue.value = 2, AnyValue string = 1, bool = 2, int = 3, array = 5, kvlist = 6. */
#define TAG_BODY_ENTRY 0x0a
#define TAG_ATTRIBUTE 0x32
#define TAG_KV_VALUE 0x12
#define TAG_ANY_STRING 0x0a
#define TAG_ANY_BOOL 0x10
#define TAG_ANY_INT 0x18
#define TAG_ANY_ARRAY 0x2a
#define TAG_ANY_KVLIST 0x32

static PyObject *other_entry;   /* _other_entry(key, value, plan, attrs) -> bytes */
static PyObject *list_item;     /* _list_item(item, plan, key, index, attrs) -> bytes */
static PyObject *python_walk;   /* _walk_python(obj, plan, attrs) -> bytes */
static PyObject *mapping_type;  /* collections.abc.Mapping */
static Py_ssize_t leaf_values_max;

static PyObject *s_leaves, *s_children, *s_items, *s_keys, *s_values, *s_body_key, *s_attr_key;
static PyObject *s_leaf, *s_child, *s_key_field, *s_number_entries;

/* tag, varint(len(a) + len(b)), a, b */
static PyObject *framed2(int tag, const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb) {
    Py_ssize_t inner = na + nb;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 1 + varint_size((uint64_t)inner) + inner);
    if (out == NULL) return NULL;
    char *p = PyBytes_AS_STRING(out);
    *p++ = (char)tag;
    p = put_varint(p, (uint64_t)inner);
    p = put(p, a, na);
    put(p, b, nb);
    return out;
}

/* A body entry holding a kvlist or array AnyValue (`any_tag`): KeyValueList entry{key, value}. */
static int buf_nested_entry(Buf *b, PyObject *key_field, int any_tag, const char *payload, Py_ssize_t n) {
    Py_ssize_t any_len = 1 + varint_size((uint64_t)n) + n;
    Py_ssize_t value_len = 1 + varint_size((uint64_t)any_len) + any_len;
    Py_ssize_t kv_len = PyBytes_GET_SIZE(key_field) + value_len;
    if (buf_reserve(b, 1 + varint_size((uint64_t)kv_len) + kv_len) < 0) return -1;
    char *p = b->data + b->len;
    *p++ = (char)TAG_BODY_ENTRY;
    p = put_varint(p, (uint64_t)kv_len);
    p = put(p, PyBytes_AS_STRING(key_field), PyBytes_GET_SIZE(key_field));
    *p++ = (char)TAG_KV_VALUE;
    p = put_varint(p, (uint64_t)any_len);
    *p++ = (char)any_tag;
    p = put_varint(p, (uint64_t)n);
    p = put(p, payload, n);
    b->len = p - b->data;
    return 0;
}

/* -- plans and leaves (log_records._Plan, _Leaf) ---------------------------------------------- */

/* A new reference to `plan.<cache>[key]`, else to what `plan.<make>(key)` returns. */
static PyObject *cached_or_made(PyObject *cache, PyObject *plan, PyObject *make, PyObject *key) {
    PyObject *found = PyDict_GetItemWithError(cache, key);
    if (found != NULL) {
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) return NULL;
    return PyObject_CallMethodOneArg(plan, make, key);
}

static PyObject *plan_cache(PyObject *plan, PyObject *name) {
    PyObject *cache = PyObject_GetAttr(plan, name);
    if (cache != NULL && !PyDict_CheckExact(cache)) {
        PyErr_Format(PyExc_TypeError, "a plan's %U is not a dict", name);
        Py_CLEAR(cache);
    }
    return cache;
}

/* `_Leaf._made` and `_remember`: both entries around the encoded value field, kept while the
 * leaf's values repeat. */
static PyObject *leaf_made(PyObject *leaf, PyObject *cache_key, const char *vf, Py_ssize_t nvf) {
    PyObject *body_key = PyObject_GetAttr(leaf, s_body_key);
    if (body_key == NULL) return NULL;
    PyObject *attr_key = PyObject_GetAttr(leaf, s_attr_key);
    if (attr_key == NULL) {
        Py_DECREF(body_key);
        return NULL;
    }
    PyObject *body_entry = NULL, *attr_entry = NULL, *pair = NULL;
    if (!PyBytes_Check(attr_key) || !PyBytes_Check(body_key)) {
        PyErr_SetString(PyExc_TypeError, "a leaf's keys are not bytes");
        goto done;
    }
    body_entry = framed2(TAG_BODY_ENTRY, PyBytes_AS_STRING(body_key), PyBytes_GET_SIZE(body_key), vf, nvf);
    if (body_entry == NULL) goto done;
    attr_entry = framed2(TAG_ATTRIBUTE, PyBytes_AS_STRING(attr_key), PyBytes_GET_SIZE(attr_key), vf, nvf);
    if (attr_entry == NULL) goto done;
    pair = PyTuple_Pack(2, body_entry, attr_entry);
    if (pair == NULL) goto done;
    PyObject *values = PyObject_GetAttr(leaf, s_values);
    if (values == NULL) {
        Py_CLEAR(pair);
        goto done;
    }
    if (values != Py_None) {
        int failed;
        if (PyDict_Check(values) && PyDict_GET_SIZE(values) < leaf_values_max) {
            failed = PyDict_SetItem(values, cache_key, pair);
        } else {
            failed = PyObject_SetAttr(leaf, s_values, Py_None);
        }
        if (failed < 0) Py_CLEAR(pair);
    }
    Py_DECREF(values);
done:
    Py_XDECREF(body_entry);
    Py_XDECREF(attr_entry);
    Py_DECREF(body_key);
    Py_DECREF(attr_key);
    return pair;
}

/* A new reference to the leaf's kept pair for `cache_key`, NULL without an error when not kept. */
static PyObject *leaf_kept(PyObject *leaf, PyObject *cache_key) {
    PyObject *values = PyObject_GetAttr(leaf, s_values);
    if (values == NULL) return NULL;
    PyObject *pair = NULL;
    if (PyDict_CheckExact(values)) {
        pair = PyDict_GetItemWithError(values, cache_key);
        Py_XINCREF(pair);
    }
    Py_DECREF(values);
    return pair;
}

/* `_Leaf.entries`: (body entry, attribute entry) of a string. */
static PyObject *string_pair(PyObject *leaf, PyObject *value) {
    PyObject *pair = leaf_kept(leaf, value);
    if (pair != NULL || PyErr_Occurred()) return pair;
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(value, &n);
    if (utf8 == NULL) return NULL;
    Py_ssize_t any_len = 1 + varint_size((uint64_t)n) + n;
    Py_ssize_t nvf = 1 + varint_size((uint64_t)any_len) + any_len;
    char small[256];
    char *vf = nvf <= (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)nvf);
    if (vf == NULL) return PyErr_NoMemory();
    char *p = vf;
    *p++ = (char)TAG_KV_VALUE;
    p = put_varint(p, (uint64_t)any_len);
    *p++ = (char)TAG_ANY_STRING;
    p = put_varint(p, (uint64_t)n);
    put(p, utf8, n);
    pair = leaf_made(leaf, value, vf, nvf);
    if (vf != small) PyMem_Free(vf);
    return pair;
}

/* `_Leaf.number_entries`: the same for an int or bool (kept by (type, value): True == 1). */
static PyObject *number_pair(PyObject *leaf, PyObject *value) {
    PyObject *cache_key = PyTuple_Pack(2, (PyObject *)Py_TYPE(value), value);
    if (cache_key == NULL) return NULL;
    PyObject *pair = leaf_kept(leaf, cache_key);
    if (pair != NULL || PyErr_Occurred()) goto done;
    char vf[16];
    char *p = vf;
    *p++ = (char)TAG_KV_VALUE;
    if (PyBool_Check(value)) {
        *p++ = 2;
        *p++ = (char)TAG_ANY_BOOL;
        *p++ = value == Py_True ? 1 : 0;
    } else {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (number == -1 && PyErr_Occurred()) goto done;
        if (overflow) {  /* past int64: as Python writes it (or refuses it) */
            pair = PyObject_CallMethodOneArg(leaf, s_number_entries, value);
            goto done;
        }
        uint64_t bits = (uint64_t)number;  /* negative: two's complement, ten bytes */
        Py_ssize_t any_len = 1 + varint_size(bits);
        *p++ = (char)any_len;
        *p++ = (char)TAG_ANY_INT;
        p = put_varint(p, bits);
    }
    pair = leaf_made(leaf, cache_key, vf, p - vf);
done:
    Py_DECREF(cache_key);
    return pair;
}

/* -- the walk --------------------------------------------------------------------------------- */

static PyObject *walk_dict(PyObject *obj, PyObject *plan, PyObject *attrs);

/* Whether `value`, a list, holds an object or a list (log_records._NESTED). */
static int has_nested(PyObject *value) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
        PyObject *item = PyList_GET_ITEM(value, i);
        if (PyDict_Check(item) || PyList_Check(item)) return 1;
        int is_mapping = PyObject_IsInstance(item, mapping_type);
        if (is_mapping != 0) return is_mapping;
    }
    return 0;
}

/* The serialized AnyValues of a list's items, framed as ArrayValue.values, appended to `out`. */
static int list_items(Buf *out, PyObject *value, PyObject *plan, PyObject *key, PyObject *attrs) {
    PyObject *items = plan_cache(plan, s_items);
    if (items == NULL) return -1;
    PyObject *plans = PyDict_GetItemWithError(items, key);  /* borrowed */
    if (plans == NULL && PyErr_Occurred()) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++) {
        PyObject *item = PyList_GET_ITEM(value, i);
        PyObject *encoded;
        if (PyDict_CheckExact(item)) {
            PyObject *item_plan;
            if (plans != NULL && PyList_CheckExact(plans) && i < PyList_GET_SIZE(plans)) {
                item_plan = PyList_GET_ITEM(plans, i);
                Py_INCREF(item_plan);
            } else {
                item_plan = PyObject_CallMethod(plan, "item", "On", key, i);
                if (item_plan == NULL) goto fail;
                plans = PyDict_GetItemWithError(items, key);  /* may have been made */
                if (plans == NULL && PyErr_Occurred()) {
                    Py_DECREF(item_plan);
                    goto fail;
                }
            }
            PyObject *entries = walk_dict(item, item_plan, attrs);
            Py_DECREF(item_plan);
            if (entries == NULL) goto fail;
            encoded = framed2(TAG_ANY_KVLIST, PyBytes_AS_STRING(entries), PyBytes_GET_SIZE(entries), "", 0);
            Py_DECREF(entries);
        } else {
            encoded = PyObject_CallFunction(list_item, "OOOnO", item, plan, key, i, attrs);
            if (encoded != NULL && !PyBytes_Check(encoded)) {
                PyErr_SetString(PyExc_TypeError, "_list_item did not return bytes");
                Py_CLEAR(encoded);
            }
        }
        if (encoded == NULL) goto fail;
        /* ArrayValue.values = 1 */
        int failed = buf_field(out, 1, PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded));
        Py_DECREF(encoded);
        if (failed < 0) goto fail;
    }
    Py_DECREF(items);
    return 0;
fail:
    Py_DECREF(items);
    return -1;
}

/* A new reference to `plan.keys[key]`, else `plan.key_field(key)`. */
static PyObject *key_field_of(PyObject *plan, PyObject *key) {
    PyObject *keys = plan_cache(plan, s_keys);
    if (keys == NULL) return NULL;
    PyObject *found = cached_or_made(keys, plan, s_key_field, key);
    Py_DECREF(keys);
    if (found != NULL && !PyBytes_Check(found)) {
        PyErr_SetString(PyExc_TypeError, "a plan's key field is not bytes");
        Py_CLEAR(found);
    }
    return found;
}

/* One key of an object whose value is neither a leaf nor handled in C: as Python does it. */
static int other(Buf *out, PyObject *key, PyObject *value, PyObject *plan, PyObject *attrs) {
    PyObject *entry = PyObject_CallFunctionObjArgs(other_entry, key, value, plan, attrs, NULL);
    if (entry == NULL) return -1;
    int failed = PyBytes_Check(entry) ? buf_bytes(out, entry) : -1;
    if (failed < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_other_entry did not return bytes");
    Py_DECREF(entry);
    return failed;
}

static int walk_into(Buf *out, PyObject *obj, PyObject *plan, PyObject *attrs) {
    PyObject *leaves = plan_cache(plan, s_leaves);
    if (leaves == NULL) return -1;
    PyObject *children = NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(obj, &pos, &key, &value)) {
        PyTypeObject *kind = Py_TYPE(value);
        if (!PyUnicode_CheckExact(key)) {
            PyErr_Format(PyExc_TypeError, "an object key is %.100s, not a string", Py_TYPE(key)->tp_name);
            goto fail;
        }
        if (kind == &PyUnicode_Type || kind == &PyLong_Type || kind == &PyBool_Type) {
            PyObject *leaf = cached_or_made(leaves, plan, s_leaf, key);
            if (leaf == NULL) goto fail;
            PyObject *pair = kind == &PyUnicode_Type ? string_pair(leaf, value) : number_pair(leaf, value);
            Py_DECREF(leaf);
            if (pair == NULL) goto fail;
            int failed = 0;
            if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
                !PyBytes_Check(PyTuple_GET_ITEM(pair, 0))) {
                PyErr_SetString(PyExc_TypeError, "a leaf's entries are not a pair of bytes");
                failed = -1;
            }
            if (!failed) failed = buf_bytes(out, PyTuple_GET_ITEM(pair, 0));
            if (!failed) failed = PyList_Append(attrs, PyTuple_GET_ITEM(pair, 1));
            Py_DECREF(pair);
            if (failed < 0) goto fail;
        } else if (kind == &PyDict_Type) {
            if (children == NULL && (children = plan_cache(plan, s_children)) == NULL) goto fail;
            PyObject *child = cached_or_made(children, plan, s_child, key);
            if (child == NULL) goto fail;
            PyObject *entries = walk_dict(value, child, attrs);
            Py_DECREF(child);
            if (entries == NULL) goto fail;
            PyObject *key_field = key_field_of(plan, key);
            int failed = key_field == NULL ? -1
                : buf_nested_entry(out, key_field, TAG_ANY_KVLIST, PyBytes_AS_STRING(entries),
                                   PyBytes_GET_SIZE(entries));
            Py_XDECREF(key_field);
            Py_DECREF(entries);
            if (failed < 0) goto fail;
        } else if (kind == &PyList_Type) {
            int nested = has_nested(value);
            if (nested < 0) goto fail;
            if (!nested) {
                if (other(out, key, value, plan, attrs) < 0) goto fail;
                continue;
            }
            Buf items = {NULL, 0, 0};
            PyObject *key_field = NULL;
            int failed = list_items(&items, value, plan, key, attrs);
            if (!failed) failed = (key_field = key_field_of(plan, key)) == NULL ? -1 : 0;
            if (!failed) failed = buf_nested_entry(out, key_field, TAG_ANY_ARRAY, items.data ? items.data : "", items.len);
            Py_XDECREF(key_field);
            PyMem_Free(items.data);
            if (failed < 0) goto fail;
        } else if (other(out, key, value, plan, attrs) < 0) {
            goto fail;
        }
    }
    Py_DECREF(leaves);
    Py_XDECREF(children);
    return 0;
fail:
    Py_DECREF(leaves);
    Py_XDECREF(children);
    return -1;
}

/* The KeyValueList entries of an exact dict, as bytes. */
static PyObject *walk_dict(PyObject *obj, PyObject *plan, PyObject *attrs) {
    if (Py_EnterRecursiveCall(" in the log-record walk")) return NULL;
    Buf out = {NULL, 0, 0};
    PyObject *result = NULL;
    if (walk_into(&out, obj, plan, attrs) == 0) result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    PyMem_Free(out.data);
    Py_LeaveRecursiveCall();
    return result;
}

static PyObject *walk(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "walk(obj, plan, attrs) takes three arguments");
        return NULL;
    }
    if (other_entry == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "walk called before bind");
        return NULL;
    }
    if (!PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "attrs must be a list");
        return NULL;
    }
    if (!PyDict_CheckExact(args[0])) return PyObject_Vectorcall(python_walk, args, 3, NULL);
    return walk_dict(args[0], args[1], args[2]);
}

static PyObject *bind(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *o, *l, *w, *m;
    Py_ssize_t max;
    if (!PyArg_ParseTuple(args, "OOOOn", &o, &l, &w, &m, &max)) return NULL;
    Py_XSETREF(other_entry, Py_NewRef(o));
    Py_XSETREF(list_item, Py_NewRef(l));
    Py_XSETREF(python_walk, Py_NewRef(w));
    Py_XSETREF(mapping_type, Py_NewRef(m));
    leaf_values_max = max;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "walk(obj, plan, attrs) -> bytes: log_records._walk, compiled."},
    {"bind", bind, METH_VARARGS,
     "bind(other_entry, list_item, python_walk, Mapping, leaf_values_max): the Python side."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_walk(void) {
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_leaves, "leaves"}, {&s_children, "children"}, {&s_items, "items"}, {&s_keys, "keys"},
        {&s_values, "values"}, {&s_body_key, "body_key"}, {&s_attr_key, "attr_key"}, {&s_leaf, "leaf"},
        {&s_child, "child"}, {&s_key_field, "key_field"},
        {&s_number_entries, "number_entries"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL) return NULL;
    }
    return PyModule_Create(&module_def);
}
