/* What the compiled modules read of magic v2 records: a varint, the fields of one batch's records
   (fetch/_cdecode.c's scan_fields, fetch/_cwalk.c's walk_columns) and its records as tuples (decode_records,
   walk_records). Static: each module has its own copy. */
#ifndef FSM_CONSUMER_RECORDS_H
#define FSM_CONSUMER_RECORDS_H
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

/* The fields of the `count` records of a batch's payload b[0:n], record i written at index i: its start
   (st, unless NULL), offset and timestamp (the bases plus its deltas), and its key start, key end, value
   start, value end (sp, 4 per record); positions plus `start`. -1 for anything else (a record with
   headers, a fault, a varint over 8 bytes, bytes left after the last record): the exact loop judges it.
   Touches no Python object: callable without the interpreter lock. The caller keeps the bases below 2**62
   (varints of at most 8 bytes stay below 2**55: no sum overflows int64). */
static int scan_records(const unsigned char *b, Py_ssize_t n, Py_ssize_t count, Py_ssize_t start,
                        int64_t base_offset, int64_t base_ts, int64_t *st, int64_t *of, int64_t *ts, int64_t *sp) {
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++, sp += 4) {
        int64_t len, tsd, offd, klen, vlen;
        Py_ssize_t at = pos;
        if (rd_varint(b, n, &pos, &len) < 0 || len < 0 || len > n - pos) return -1;
        Py_ssize_t end = pos + len;
        if (pos >= end) return -1;
        pos += 1;  /* attributes */
        if (rd_varint(b, end, &pos, &tsd) < 0 || rd_varint(b, end, &pos, &offd) < 0) return -1;
        /* a null is told from an empty one by the byte before its span (0x01, the one-byte -1): a -1
           written in more bytes is left to the exact loop, as parse does */
        Py_ssize_t lpos = pos;
        if (rd_varint(b, end, &pos, &klen) < 0 || klen < -1 || klen > end - pos || (klen == -1 && pos - lpos != 1))
            return -1;
        Py_ssize_t kpos = pos; if (klen > 0) pos += klen;
        lpos = pos;
        if (rd_varint(b, end, &pos, &vlen) < 0 || vlen < -1 || vlen > end - pos || (vlen == -1 && pos - lpos != 1))
            return -1;
        Py_ssize_t vpos = pos; if (vlen > 0) pos += vlen;
        if (pos + 1 != end || b[pos] != 0) return -1;  /* no headers: one 0x00 byte */
        pos = end;
        if (st) st[i] = start + at;
        of[i] = base_offset + offd; ts[i] = base_ts + tsd;
        sp[0] = start + kpos; sp[1] = start + kpos + (klen > 0 ? klen : 0);
        sp[2] = start + vpos; sp[3] = start + vpos + (vlen > 0 ? vlen : 0);
    }
    return pos == n ? 0 : -1;
}

/* Appends to `out` the `count` records of a batch's payload b[0:n] as `type` tuples (ConsumerRecord), those
   below `min_offset` dropped when the batch begins before it, as fetch/_decode_v2.py's loop decodes them
   (timestamps: `lat_ts` for a LogAppendTime batch, `lat`). 0 done; 1 declined (a record with headers, any
   fault: the loop decodes the batch and words it) and -1 an exception, both with `out` as it was. The
   caller keeps the bases below 2**62. */
static int append_records(const unsigned char *b, Py_ssize_t n, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
                          int lat, int64_t lat_ts, int64_t min_offset, PyObject *topic, PyObject *partition,
                          PyObject *epoch, PyObject *out, PyTypeObject *type) {
    Py_ssize_t mark = PyList_GET_SIZE(out);
    PyObject *ts_type = PyLong_FromLong(lat ? 1 : 0), *minus1 = PyLong_FromLong(-1), *empty = PyTuple_New(0);
    int result = 0;
    if (!ts_type || !minus1 || !empty) goto error;
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
    goto done;
decline:
    result = 1;
    PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL);
    goto done;
error:
    result = -1;
    PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL);
done:
    Py_XDECREF(ts_type); Py_XDECREF(minus1); Py_XDECREF(empty);
    return result;
}

#endif
