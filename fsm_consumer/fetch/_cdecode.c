/* The compiled decoder of magic v2 records (fetch/_decode_v2.py's decode_records, the common case).

   decode_records(payload, count, base_offset, base_timestamp, log_append_time, min_offset, topic,
   partition, leader_epoch, out, record_type) appends the batch's records at or past min_offset to out as
   record_type tuples (ConsumerRecord), headers too, exactly as the Python loop does. Anything else (a fault
   of any kind, a header key that is not UTF-8, a varint longer than 8 bytes, bases near the int64 limits) returns
   NotImplemented with out as it was: the loop then decodes the batch and words any error, so both give
   the same records and the same errors (tests/unit/fetch/test_compiled_decoder.py).

   For poll_batch()'s columns (fetch/_columns.py): scan_fields (a batch's record fields in one pass),
   views (keys or values as an Arrow binary_view array over the payloads, nothing copied) and to_binary
   (the rows handed out joined into one binary array: the one copy of their bytes). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_records.h"  /* rd_varint, scan_records, append_records */

/* scan_fields and views let go of the interpreter lock for a batch of at least this many records (below
   it the hand-over would cost more than the loop) */
#define RELEASE_MIN_RECORDS 64

/* An integer argument as int64: 0 read, 1 outside int64 (the caller declines: the exact loop's to judge,
   Python's integers have no limit), -1 an exception (not an integer). */
static int int64_arg(PyObject *o, int64_t *out) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 1;
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* Reads the integer arguments args[i] for each index in `which` (-1 ends it) into out: 0, 1 or -1 as int64_arg. */
static int int64_args(PyObject *const *args, const int *which, int64_t *out) {
    for (; *which >= 0; which++, out++) {
        int got = int64_arg(args[*which], out);
        if (got) return got;
    }
    return 0;
}

static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* buf, count, base_offset, base_timestamp, log_append_time|None, min_offset, topic, partition, leader_epoch, out, record_type */
    if (nargs != 11) { PyErr_SetString(PyExc_TypeError, "11 arguments"); return NULL; }
    PyObject *topic = args[6], *partition = args[7], *epoch = args[8], *out = args[9];
    if (!PyList_Check(out) || !PyType_Check(args[10]) || !PyType_IsSubtype((PyTypeObject *)args[10], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "out: a list, record_type: a tuple type");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[10];
    int lat = args[4] != Py_None;
    int64_t v[5] = {0, 0, 0, 0, 0};  /* count, base_offset, base_ts, min_offset, lat_ts */
    static const int plain[] = {1, 2, 3, 5, -1}, stamped[] = {1, 2, 3, 5, 4, -1};
    int read = int64_args(args, lat ? stamped : plain, v);
    if (read < 0) return NULL;
    if (read > 0) Py_RETURN_NOTIMPLEMENTED;
    int64_t count = v[0], base_offset = v[1], base_ts = v[2], min_offset = v[3], lat_ts = v[4];
    /* varints of at most 8 bytes stay below 2**55: with bases below 2**62 no sum overflows int64 */
    const int64_t limit = (int64_t)1 << 62;
    if (base_offset >= limit || base_offset <= -limit || base_ts >= limit || base_ts <= -limit || lat_ts >= limit
        || lat_ts <= -limit || count < 0)
        Py_RETURN_NOTIMPLEMENTED;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf; Py_ssize_t n = view.len;
    if (count > n / MIN_RECORD_SIZE) {  /* more records than the bytes can hold: the loop words it */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    int got = append_records(b, n, (Py_ssize_t)count, base_offset, base_ts, lat, lat_ts, min_offset, topic, partition,
                             epoch, out, type);
    PyBuffer_Release(&view);
    if (got < 0) return NULL;
    if (got > 0) Py_RETURN_NOTIMPLEMENTED;
    Py_RETURN_NONE;
}

/* scan_fields(payload, count, start, base_offset, base_timestamp, starts, offsets, timestamps, spans): the
   columnar fast path's fields (fetch/_vector.py's scan and parse) of one batch's records, appended to four
   bytearrays as native int64: each record's start, its offset and timestamp (the bases plus its deltas),
   and its key start, key end, value start, value end (4 per record); positions plus start, i.e. in the
   fetch's joined payloads. NotImplemented with every bytearray as it was for anything else (a record
   with headers, a fault, a varint over 8 bytes, a base beyond 2**62): the Python scan and numpy parse
   then take the fetch. */
static PyObject *scan_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) { PyErr_SetString(PyExc_TypeError, "payload, count, start, base offset, base timestamp, 4 bytearrays"); return NULL; }
    for (int k = 5; k < 9; k++)
        if (!PyByteArray_Check(args[k])) { PyErr_SetString(PyExc_TypeError, "starts, offsets, timestamps, spans: bytearrays"); return NULL; }
    int64_t v[4];  /* count, start, base offset, base timestamp */
    static const int which[] = {1, 2, 3, 4, -1};
    int read = int64_args(args, which, v);
    if (read < 0) return NULL;
    if (read > 0) Py_RETURN_NOTIMPLEMENTED;  /* beyond int64: the exact loop's to word */
    int64_t count = v[0], start = v[1], base_offset = v[2], base_ts = v[3];
    /* varints of at most 8 bytes stay below 2**55: with bases below 2**62 no sum overflows int64; positions
       plus a start below 2**62 neither */
    const int64_t limit = (int64_t)1 << 62;
    if (count < 0 || start < 0 || start >= limit || base_offset >= limit || base_offset <= -limit ||
        base_ts >= limit || base_ts <= -limit)
        Py_RETURN_NOTIMPLEMENTED;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf; Py_ssize_t n = view.len;
    /* more records than the bytes hold: corrupt, the exact loop words it; nothing sized from the claim */
    if (count > n / MIN_RECORD_SIZE || chain_records(b, n, (Py_ssize_t)count) < 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *outs[4] = {args[5], args[6], args[7], args[8]};
    const Py_ssize_t width[4] = {8, 8, 8, 32};
    Py_ssize_t marks[4];
    int resized = 0;
    for (; resized < 4; resized++) {
        PyObject *o = outs[resized];
        marks[resized] = PyByteArray_GET_SIZE(o);
        if (count > (PY_SSIZE_T_MAX - marks[resized]) / width[resized] ||
            PyByteArray_Resize(o, marks[resized] + count * width[resized]) < 0)
            goto fail;
    }
    /* bytearray storage is malloc-aligned */
    int64_t *st = (int64_t *)(PyByteArray_AS_STRING(outs[0]) + marks[0]);
    int64_t *of = (int64_t *)(PyByteArray_AS_STRING(outs[1]) + marks[1]);
    int64_t *ts = (int64_t *)(PyByteArray_AS_STRING(outs[2]) + marks[2]);
    int64_t *sp = (int64_t *)(PyByteArray_AS_STRING(outs[3]) + marks[3]);
    /* the loop reads the held payload and writes the bytearrays resized above, which no other code sees
       until this returns: the network thread may take the interpreter lock meanwhile (a batch of many
       records takes tens of microseconds, the network thread's pass from one Fetch answer to the next
       request waited for it) */
    PyThreadState *released = count >= RELEASE_MIN_RECORDS ? PyEval_SaveThread() : NULL;
    int declined = scan_records(b, n, (Py_ssize_t)count, (Py_ssize_t)start, base_offset, base_ts, st, of, ts, sp, NULL) < 0;
    if (released) PyEval_RestoreThread(released);
    if (declined) goto decline;
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
decline:
    PyBuffer_Release(&view);
    for (int k = 0; k < 4; k++)
        if (PyByteArray_Resize(outs[k], marks[k]) < 0) return NULL;
    Py_RETURN_NOTIMPLEMENTED;
fail:
    PyBuffer_Release(&view);
    while (resized-- > 0) PyByteArray_Resize(outs[resized], marks[resized]);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return NULL;
}

/* Buffers of a sequence of buffer objects; NULL (an exception set) on failure, every one got released. */
static Py_buffer *get_buffers(PyObject *seq, Py_ssize_t *count) {
    PyObject *fast = PySequence_Fast(seq, "a sequence of buffers");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    Py_buffer *bufs = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    if (!bufs) { Py_DECREF(fast); PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, i), &bufs[i], PyBUF_SIMPLE) < 0) {
            while (i-- > 0) PyBuffer_Release(&bufs[i]);
            PyMem_Free(bufs); Py_DECREF(fast); return NULL;
        }
    }
    Py_DECREF(fast);
    *count = n;
    return bufs;
}

static void release_buffers(Py_buffer *bufs, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
}

/* views(parts, starts, spans, field): the keys (field 0) or values (field 2) of the records whose spans
   (4 native int64 per record: key start, key end, value start, value end, positions in the parts joined;
   part k starts at starts[k]) are given, as the buffers of an Arrow binary_view array whose data buffers
   are the parts: (validity bitmap or None when nothing is null, the 16-byte views, null count). Nothing is
   copied but values of up to 12 bytes, which a view holds. A null's span ends one before it starts (its
   length, -1). NotImplemented when a span lies outside its part or a part is beyond int32 offsets. */
static PyObject *views(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "parts, starts, spans, field"); return NULL; }
    Py_ssize_t field = PyLong_AsSsize_t(args[3]);
    if (field == -1 && PyErr_Occurred()) return NULL;
    if (field != 0 && field != 2) { PyErr_SetString(PyExc_ValueError, "field is 0 (keys) or 2 (values)"); return NULL; }
    Py_ssize_t nparts = 0;
    Py_buffer *parts = get_buffers(args[0], &nparts);
    if (!parts) return NULL;
    Py_buffer stv, spv;
    if (PyObject_GetBuffer(args[1], &stv, PyBUF_SIMPLE) < 0) { release_buffers(parts, nparts); return NULL; }
    if (PyObject_GetBuffer(args[2], &spv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&stv); release_buffers(parts, nparts); return NULL;
    }
    const int64_t *starts = stv.buf, *sp = spv.buf;
    Py_ssize_t n = spv.len / (Py_ssize_t)(4 * sizeof(int64_t));
    PyObject *out = NULL, *validity = NULL, *result = NULL;
    int64_t nulls = 0;
    if (stv.len != nparts * (Py_ssize_t)sizeof(int64_t) || (n && !nparts)) goto decline;
    for (Py_ssize_t k = 0; k < nparts; k++)  /* parts in order, from 0 up: no position below overflows */
        if (parts[k].len > INT32_MAX || starts[k] < 0 || (k && starts[k] < starts[k - 1])) goto decline;
    out = PyBytes_FromStringAndSize(NULL, 16 * n);
    /* a bitmap for the nulls is made up front (an eighth of a byte per record), so that the loop allocates
       nothing: dropped when nothing is null */
    validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (!out || !validity) goto done;
    unsigned char *v = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *bits = (unsigned char *)PyBytes_AS_STRING(validity);
    int bad = 0;
    /* reads the held buffers and writes the two new objects, which no other code sees yet: the network
       thread may take the interpreter lock meanwhile, as in scan_fields */
    PyThreadState *released = n >= RELEASE_MIN_RECORDS ? PyEval_SaveThread() : NULL;
    memset(v, 0, 16 * n);
    memset(bits, 0xff, (n + 7) / 8);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++, v += 16) {
        int64_t a = sp[4 * i + field], b = sp[4 * i + field + 1];
        if (a > INT64_MIN && b == a - 1) {  /* null (a checked first: a - 1 must not overflow) */
            bits[i >> 3] &= (unsigned char)~(1 << (i & 7));
            nulls++;
            continue;
        }
        while (k + 1 < nparts && starts[k + 1] <= a) k++;  /* the part holding a */
        /* spans and starts are ours, but a bad one must not read outside a part: no subtraction overflows */
        if (a < starts[k] || b < a || b - a > INT32_MAX) { bad = 1; break; }  /* starts[k] >= 0: no overflow */
        int64_t local = a - starts[k], len = b - a;
        if (local > parts[k].len || len > parts[k].len - local) { bad = 1; break; }
        const unsigned char *d = (const unsigned char *)parts[k].buf;
        int32_t l32 = (int32_t)len, k32 = (int32_t)k, o32 = (int32_t)local;
        memcpy(v, &l32, 4);
        if (len <= 12) {
            memcpy(v + 4, d + local, (size_t)len);
        } else {
            memcpy(v + 4, d + local, 4);
            memcpy(v + 8, &k32, 4);
            memcpy(v + 12, &o32, 4);
        }
    }
    if (released) PyEval_RestoreThread(released);
    if (bad) goto decline;
    result = Py_BuildValue("(OOn)", nulls ? validity : Py_None, out, (Py_ssize_t)nulls);
    goto done;
decline:
    result = Py_NewRef(Py_NotImplemented);
done:
    Py_XDECREF(out); Py_XDECREF(validity);
    PyBuffer_Release(&stv); PyBuffer_Release(&spv); release_buffers(parts, nparts);
    return result;
}

/* to_binary(pieces): binary and binary_view arrays (slices of them) joined into the buffers of one Arrow
   binary array: (validity bitmap or None, int32 offsets, bytes, null count); the one copy of their bytes.
   A piece is (kind, validity or None, offset, length, a, b): kind 0 a binary_view array (a its views, b
   its data buffers), kind 1 a binary array (a its int32 offsets, b its data). OverflowError past 2 GiB. */
typedef struct { int kind; Py_buffer validity, a, b; Py_buffer *parts; Py_ssize_t nparts, offset, length; int has_validity; } piece_t;

static void release_piece(piece_t *p) {
    if (p->has_validity) PyBuffer_Release(&p->validity);
    if (p->a.obj) PyBuffer_Release(&p->a);
    if (p->b.obj) PyBuffer_Release(&p->b);
    if (p->parts) release_buffers(p->parts, p->nparts);
}

static inline int present(const piece_t *p, Py_ssize_t i) {
    if (!p->has_validity) return 1;
    Py_ssize_t bit = p->offset + i;
    return (((const unsigned char *)p->validity.buf)[bit >> 3] >> (bit & 7)) & 1;
}

/* the bytes of element i of a piece (present or not: a null's are empty), once checked by element_fits */
static inline const unsigned char *element(const piece_t *p, Py_ssize_t i, int32_t *len) {
    if (p->kind == 1) {
        const int32_t *off = (const int32_t *)p->a.buf + p->offset + i;
        *len = off[1] - off[0];
        return (const unsigned char *)p->b.buf + off[0];
    }
    const unsigned char *v = (const unsigned char *)p->a.buf + 16 * (p->offset + i);
    memcpy(len, v, 4);
    if (*len <= 12) return v + 4;
    int32_t k, o;
    memcpy(&k, v + 8, 4); memcpy(&o, v + 12, 4);
    return (const unsigned char *)p->parts[k].buf + o;
}

/* Whether element i of a piece lies inside its buffer (*len its length): every index and bound read from the
   piece is checked before it is used, in integers, so a bad array is refused, never read out of bounds.
   These arrays are ours, but a bad one must not crash. */
static int element_fits(const piece_t *p, Py_ssize_t i, int32_t *len) {
    if (p->kind == 1) {
        const int32_t *off = (const int32_t *)p->a.buf + p->offset + i;
        if (off[0] < 0 || off[1] < off[0] || off[1] > p->b.len) return 0;
        *len = off[1] - off[0];
        return 1;
    }
    const unsigned char *v = (const unsigned char *)p->a.buf + 16 * (p->offset + i);
    memcpy(len, v, 4);
    if (*len < 0) return 0;
    if (*len <= 12) return 1;  /* inline */
    int32_t k, o;
    memcpy(&k, v + 8, 4); memcpy(&o, v + 12, 4);
    return k >= 0 && k < p->nparts && o >= 0 && o <= p->parts[k].len && *len <= p->parts[k].len - o;
}

static PyObject *to_binary(PyObject *self, PyObject *arg) {
    PyObject *fast = PySequence_Fast(arg, "a sequence of pieces");
    if (!fast) return NULL;
    Py_ssize_t np_ = PySequence_Fast_GET_SIZE(fast), got = 0;
    piece_t *ps = PyMem_Calloc(np_ ? np_ : 1, sizeof(piece_t));
    PyObject *offsets = NULL, *data = NULL, *validity = NULL, *result = NULL;
    if (!ps) { PyErr_NoMemory(); goto done; }
    int64_t total = 0, n = 0, nulls = 0;
    for (; got < np_; got++) {
        PyObject *t = PySequence_Fast_GET_ITEM(fast, got);
        piece_t *p = &ps[got];
        PyObject *va, *a, *b;
        if (!PyArg_ParseTuple(t, "iOnnOO", &p->kind, &va, &p->offset, &p->length, &a, &b)) goto done;
        if (va != Py_None) {
            if (PyObject_GetBuffer(va, &p->validity, PyBUF_SIMPLE) < 0) goto done;
            p->has_validity = 1;
        }
        if (p->kind != 0 && p->kind != 1) { PyErr_SetString(PyExc_ValueError, "kind is 0 (views) or 1 (binary)"); goto done; }
        if (PyObject_GetBuffer(a, &p->a, PyBUF_SIMPLE) < 0) goto done;
        if (p->kind == 1) {
            if (PyObject_GetBuffer(b, &p->b, PyBUF_SIMPLE) < 0) goto done;
        } else if (!(p->parts = get_buffers(b, &p->nparts))) {
            goto done;
        }
        /* the buffer a holds offset + length (+ 1) entries: compared by division, no product overflows */
        Py_ssize_t width = p->kind == 1 ? 4 : 16, entries = p->a.len / width, extra = p->kind == 1;
        if (p->offset < 0 || p->length < 0 || p->offset > entries || p->length > entries - p->offset - extra ||
            (p->has_validity && (p->offset + p->length + 7) / 8 > p->validity.len)) {
            PyErr_SetString(PyExc_ValueError, "a piece's buffers are shorter than its offset and length");
            goto done;
        }
        for (Py_ssize_t i = 0; i < p->length; i++) {
            if (!present(p, i)) { nulls++; continue; }
            int32_t len;
            if (!element_fits(p, i, &len)) { PyErr_SetString(PyExc_ValueError, "an element lies outside its buffer"); goto done; }
            total += len;
        }
        n += p->length;
    }
    if (total > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "over 2 GiB of keys or values in one batch"); goto done; }
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!offsets || !data) goto done;
    unsigned char *bits = NULL;
    if (nulls) {
        validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (!validity) goto done;
        bits = (unsigned char *)PyBytes_AS_STRING(validity);
        memset(bits, 0, (n + 7) / 8);
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    int32_t at = 0;
    Py_ssize_t row = 0;
    off[0] = 0;
    /* the copy touches only buffers held above: the background thread may run meanwhile (it waited for
       the interpreter lock through every copy of a fetch's bytes) */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < np_; j++) {
        for (Py_ssize_t i = 0; i < ps[j].length; i++, row++) {
            if (present(&ps[j], i)) {
                int32_t len;
                const unsigned char *src = element(&ps[j], i, &len);
                if (len) { memcpy(out + at, src, (size_t)len); at += len; }
                if (bits) bits[row >> 3] |= (unsigned char)(1 << (row & 7));
            }
            off[row + 1] = at;
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(OOOn)", validity ? validity : Py_None, offsets, data, (Py_ssize_t)nulls);
done:
    for (Py_ssize_t j = 0; ps && j < np_; j++) release_piece(&ps[j]);
    PyMem_Free(ps);
    Py_XDECREF(offsets); Py_XDECREF(data); Py_XDECREF(validity);
    Py_DECREF(fast);
    return result;
}

/* untrack(items): each tuple of the list `items` (a plain tuple, or a subclass such as a NamedTuple that adds
   no __dict__ and no slots) whose items the collector does not follow (no collected object, or a tuple
   untracked already) is untracked; the rest are left as they are. Such a tuple cannot be part of a reference cycle.
   CPython untracks plain tuples of that kind in their first collection, but never a tuple subclass: every
   record kept a while (a share consumer's buffered and handed-out records) would be traversed by every
   collection, and moved to the oldest generation, whose full collections it then triggers. Returns None. */
static PyObject *untrack(PyObject *self, PyObject *items) {
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "untrack takes a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *t = PyList_GET_ITEM(items, i);
        PyTypeObject *type = Py_TYPE(t);
        if (!PyTuple_Check(t) || type->tp_basicsize != PyTuple_Type.tp_basicsize || type->tp_dictoffset != 0
            || !PyObject_GC_IsTracked(t))
            continue;
        Py_ssize_t n = PyTuple_GET_SIZE(t), j = 0;
        for (; j < n; j++) {
            PyObject *item = PyTuple_GET_ITEM(t, j);
            /* as CPython's own test for plain tuples: a tuple untracked stays so (immutable), but any other
               collected object may be tracked later (a dict of plain values is untracked until it holds more) */
            if (PyObject_IS_GC(item) && (!PyTuple_Check(item) || PyObject_GC_IsTracked(item))) break;
        }
        if (j == n) PyObject_GC_UnTrack(t);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"untrack", (PyCFunction)untrack, METH_O, NULL},
    {"views", (PyCFunction)(void (*)(void))views, METH_FASTCALL, NULL},
    {"to_binary", (PyCFunction)to_binary, METH_O, NULL},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, NULL},
    {"scan_fields", (PyCFunction)(void (*)(void))scan_fields, METH_FASTCALL, NULL},
    {NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_cdecode", NULL, -1, methods};
PyMODINIT_FUNC PyInit__cdecode(void) { return PyModule_Create(&mod); }
