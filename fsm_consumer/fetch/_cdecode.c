/* The compiled decoder of magic v2 records (fetch/_decode_v2.py's decode_records, the common case).

   decode_records(payload, count, base_offset, base_timestamp, log_append_time, min_offset, topic,
   partition, leader_epoch, out, record_type) appends the batch's records at or past min_offset to out as
   record_type tuples (ConsumerRecord), exactly as the Python loop does. Anything else (a record with
   headers, a fault of any kind, a varint longer than 8 bytes, bases near the int64 limits) returns
   NotImplemented with out as it was: the loop then decodes the batch and words any error, so both give
   the same records and the same errors (tests/unit/fetch/test_compiled_decoder.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static inline int rd_varint(const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos, int64_t *out) {
    uint64_t r = 0; int shift = 0;
    while (*pos < n) {
        unsigned char c = b[(*pos)++];
        r |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) { *out = (int64_t)(r >> 1) ^ -(int64_t)(r & 1); return 0; }
        shift += 7;
        if (shift > 56) return -1;  /* over 8 bytes: not ours to judge */
    }
    return -1;
}

static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    /* buf, count, base_offset, base_timestamp, log_append_time|None, min_offset, topic, partition, leader_epoch, out, record_type */
    if (nargs != 11) { PyErr_SetString(PyExc_TypeError, "11 arguments"); return NULL; }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf; Py_ssize_t n = view.len;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    int64_t base_offset = PyLong_AsLongLong(args[2]), base_ts = PyLong_AsLongLong(args[3]);
    int lat = args[4] != Py_None; int64_t lat_ts = lat ? PyLong_AsLongLong(args[4]) : 0;
    int64_t min_offset = PyLong_AsLongLong(args[5]);
    PyObject *topic = args[6], *partition = args[7], *epoch = args[8], *out = args[9];
    PyTypeObject *type = (PyTypeObject *)args[10];
    if (PyErr_Occurred()) { PyBuffer_Release(&view); return NULL; }
    /* varints of at most 8 bytes stay below 2**55: with bases below 2**62 no sum overflows int64 */
    const int64_t limit = (int64_t)1 << 62;
    if (base_offset >= limit || base_offset <= -limit || base_ts >= limit || base_ts <= -limit || lat_ts >= limit
        || lat_ts <= -limit) {
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t mark = PyList_GET_SIZE(out);
    PyObject *ts_type = PyLong_FromLong(lat ? 1 : 0), *minus1 = PyLong_FromLong(-1), *empty = PyTuple_New(0);
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t len, tsd, offd, klen, vlen;
        if (rd_varint(b, n, &pos, &len) < 0 || len < 0) goto decline;
        Py_ssize_t end = pos + len;
        if (end > n || pos >= n) goto decline;
        pos += 1;  /* attributes */
        if (rd_varint(b, end, &pos, &tsd) < 0 || rd_varint(b, end, &pos, &offd) < 0) goto decline;
        if (rd_varint(b, end, &pos, &klen) < 0 || klen < -1) goto decline;
        Py_ssize_t kpos = pos; if (klen > 0) pos += klen;
        if (pos > end) goto decline;
        if (rd_varint(b, end, &pos, &vlen) < 0 || vlen < -1) goto decline;
        Py_ssize_t vpos = pos; if (vlen > 0) pos += vlen;
        if (pos > end) goto decline;
        /* no headers: one 0x00 byte, as the loop's fast path reads it (any other form: the loop) */
        if (pos + 1 != end || b[pos] != 0) goto decline;
        pos = end;
        int64_t offset = base_offset + offd;
        /* as the loop: only a batch that begins before the fetch offset is filtered; elsewhere a record below
           the batch's base stays, and the offsets check words it (check_crcs off) */
        if (base_offset < min_offset && offset < min_offset) continue;
        PyObject *key = klen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + kpos, klen);
        PyObject *value = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + vpos, vlen);
        PyObject *o = PyLong_FromLongLong(offset), *t = PyLong_FromLongLong(lat ? lat_ts : base_ts + tsd);
        PyObject *ks = PyLong_FromLongLong(klen), *vs = PyLong_FromLongLong(vlen);
        if (!key || !value || !o || !t || !ks || !vs) goto fail_items;
        PyObject *rec = type->tp_alloc(type, 13);
        if (!rec) goto fail_items;
        PyObject **it = ((PyTupleObject *)rec)->ob_item;
        it[0] = Py_NewRef(topic); it[1] = Py_NewRef(partition); it[2] = Py_NewRef(epoch); it[3] = o; it[4] = t;
        it[5] = Py_NewRef(ts_type); it[6] = key; it[7] = value; it[8] = Py_NewRef(empty); it[9] = Py_NewRef(Py_None);
        it[10] = ks; it[11] = vs; it[12] = Py_NewRef(minus1);
        /* Holds only strings, numbers, bytes, None and the empty tuple: it cannot be part of a reference
           cycle, so the collector need not see it (CPython untracks such plain tuples in its first
           collection, but never a tuple subclass: each collection would traverse every record alive) */
        PyObject_GC_UnTrack(rec);
        int err = PyList_Append(out, rec); Py_DECREF(rec);
        if (err < 0) goto error;
        continue;
    fail_items:
        Py_XDECREF(key); Py_XDECREF(value); Py_XDECREF(o); Py_XDECREF(t); Py_XDECREF(ks); Py_XDECREF(vs);
        goto error;
    }
    if (pos != n) goto decline;
    Py_DECREF(ts_type); Py_DECREF(minus1); Py_DECREF(empty); PyBuffer_Release(&view);
    Py_RETURN_NONE;
decline:
    PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL);
    Py_DECREF(ts_type); Py_DECREF(minus1); Py_DECREF(empty); PyBuffer_Release(&view);
    Py_RETURN_NOTIMPLEMENTED;
error:
    PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL);
    Py_DECREF(ts_type); Py_DECREF(minus1); Py_DECREF(empty); PyBuffer_Release(&view);
    return NULL;
}

/* scan_fields(payload, count, start, out): the columnar fast path's fields (fetch/_vector.py's scan and parse)
   of one batch's records, appended to the bytearray out as 7 native int64 per record: the record's start,
   offset delta, timestamp delta, key start, key end, value start, value end (positions plus start, i.e. in
   the fetch's joined payloads). NotImplemented with out as it was for anything else (a record with
   headers, a fault, a varint over 8 bytes): the Python scan and numpy parse then take the fetch. */
static PyObject *scan_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyByteArray_Check(args[3])) { PyErr_SetString(PyExc_TypeError, "payload, count, start, bytearray"); return NULL; }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]), start = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (count < 0) Py_RETURN_NOTIMPLEMENTED;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf; Py_ssize_t n = view.len;
    PyObject *out = args[3];
    Py_ssize_t mark = PyByteArray_GET_SIZE(out);
    if (count > (PY_SSIZE_T_MAX - mark) / 56 || PyByteArray_Resize(out, mark + count * 56) < 0) {
        PyBuffer_Release(&view);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    int64_t *f = (int64_t *)(PyByteArray_AS_STRING(out) + mark);  /* bytearray storage is malloc-aligned */
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++, f += 7) {
        int64_t len, tsd, offd, klen, vlen;
        Py_ssize_t at = pos;
        if (rd_varint(b, n, &pos, &len) < 0 || len < 0 || len > n - pos) goto decline;
        Py_ssize_t end = pos + len;
        if (pos >= end) goto decline;
        pos += 1;  /* attributes */
        if (rd_varint(b, end, &pos, &tsd) < 0 || rd_varint(b, end, &pos, &offd) < 0) goto decline;
        /* a null is told from an empty one by the byte before its span (0x01, the one-byte -1): a -1
           written in more bytes is left to the exact loop, as parse does */
        Py_ssize_t lpos = pos;
        if (rd_varint(b, end, &pos, &klen) < 0 || klen < -1 || klen > end - pos || (klen == -1 && pos - lpos != 1))
            goto decline;
        Py_ssize_t kpos = pos; if (klen > 0) pos += klen;
        lpos = pos;
        if (rd_varint(b, end, &pos, &vlen) < 0 || vlen < -1 || vlen > end - pos || (vlen == -1 && pos - lpos != 1))
            goto decline;
        Py_ssize_t vpos = pos; if (vlen > 0) pos += vlen;
        if (pos + 1 != end || b[pos] != 0) goto decline;  /* no headers: one 0x00 byte */
        pos = end;
        f[0] = start + at; f[1] = offd; f[2] = tsd;
        f[3] = start + kpos; f[4] = start + kpos + (klen > 0 ? klen : 0);
        f[5] = start + vpos; f[6] = start + vpos + (vlen > 0 ? vlen : 0);
    }
    if (pos != n) goto decline;
    PyBuffer_Release(&view);
    Py_RETURN_TRUE;
decline:
    PyBuffer_Release(&view);
    if (PyByteArray_Resize(out, mark) < 0) return NULL;
    Py_RETURN_NOTIMPLEMENTED;
}

/* gather(data, spans, field): the keys (field 0) or values (field 2) of the records whose spans (4 native
   int64 per record: key start, key end, value start, value end, positions in data) are given, as the three
   buffers of an Arrow binary array: (validity bitmap or None when nothing is null, int32 offsets, bytes).
   Null is an empty span after 0x01 (the one-byte -1 length), as _gather tells it. NotImplemented when the
   bytes exceed an int32 offset or a span lies outside data (the Arrow path then gathers). */
static PyObject *gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "data, spans, field"); return NULL; }
    Py_ssize_t field = PyLong_AsSsize_t(args[2]);
    if (field == -1 && PyErr_Occurred()) return NULL;
    if (field != 0 && field != 2) { PyErr_SetString(PyExc_ValueError, "field is 0 (keys) or 2 (values)"); return NULL; }
    Py_buffer dv, sv;
    if (PyObject_GetBuffer(args[0], &dv, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &sv, PyBUF_SIMPLE) < 0) { PyBuffer_Release(&dv); return NULL; }
    const unsigned char *d = dv.buf; const int64_t *sp = sv.buf;
    Py_ssize_t n = sv.len / (Py_ssize_t)(4 * sizeof(int64_t));
    PyObject *offsets = NULL, *values = NULL, *validity = NULL, *result = NULL;
    int64_t total = 0, nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = sp[4 * i + field], b = sp[4 * i + field + 1];
        if (a < 1 || b < a || b > dv.len) goto decline;  /* a value follows at least its length byte */
        total += b - a;
        if (a == b && d[a - 1] == 1) nulls++;
    }
    if (total > INT32_MAX) goto decline;
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    values = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!offsets || !values) goto done;
    if (nulls) {
        validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
        if (!validity) goto done;
        memset(PyBytes_AS_STRING(validity), 0, (n + 7) / 8);
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(values), *bits = validity ? (unsigned char *)PyBytes_AS_STRING(validity) : NULL;
    int32_t at = 0;
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = sp[4 * i + field], b = sp[4 * i + field + 1];
        if (b > a) { memcpy(out + at, d + a, (size_t)(b - a)); at += (int32_t)(b - a); }
        if (bits && !(a == b && d[a - 1] == 1)) bits[i >> 3] |= (unsigned char)(1 << (i & 7));
        off[i + 1] = at;
    }
    result = Py_BuildValue("(OOOn)", validity ? validity : Py_None, offsets, values, (Py_ssize_t)nulls);
    goto done;
decline:
    result = Py_NewRef(Py_NotImplemented);
done:
    Py_XDECREF(offsets); Py_XDECREF(values); Py_XDECREF(validity);
    PyBuffer_Release(&dv); PyBuffer_Release(&sv);
    return result;
}

static PyMethodDef methods[] = {
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL, NULL},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, NULL},
    {"scan_fields", (PyCFunction)(void (*)(void))scan_fields, METH_FASTCALL, NULL},
    {NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_cdecode", NULL, -1, methods};
PyMODINIT_FUNC PyInit__cdecode(void) { return PyModule_Create(&mod); }
