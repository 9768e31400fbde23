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

/* The fewest bytes a v2 record's length can claim: attributes, timestamp delta, offset delta, key length,
   value length and header count, a byte each. A shorter one is corrupt at once: with the length's own byte
   a record takes at least 7 bytes, so a batch of n bytes holds at most n / 7 records (no scan steps a
   byte at a time through a claimed count, no output is sized past what the bytes can hold). */
#define MIN_RECORD_LENGTH 6
#define MIN_RECORD_SIZE (MIN_RECORD_LENGTH + 1)

/* Whether the `count` records of a batch's payload b[0:n] are there: their lengths (each at least
   MIN_RECORD_LENGTH) chain from 0 to exactly n. Read before anything is sized from `count`, so that output
   goes with the records the bytes hold, not with what a header claims (a payload of zeros claiming n / 7
   records would size columns of 8 times its bytes for none). 0 they do, -1 they do not. */
static int chain_records(const unsigned char *b, Py_ssize_t n, Py_ssize_t count) {
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t len;
        if (rd_varint(b, n, &pos, &len) < 0 || len < MIN_RECORD_LENGTH || len > n - pos) return -1;
        pos += len;
    }
    return pos == n ? 0 : -1;
}

/* The fields of the `count` records of a batch's payload b[0:n], record i written at index i: its start
   (st, unless NULL), offset and timestamp (the bases plus its deltas), its key start, key end, value start,
   value end (sp, 4 per record; a null's end is its start - 1: nulls are said, never inferred from the
   bytes), and where its headers lie (hd, unless NULL: their start and the record's end, or -1 for a
   record without); positions plus `start`. -1 for anything else (headers where hd is NULL, a fault, a
   varint over 8 bytes, bytes left after the last record): the exact loop judges it.
   Touches no Python object: callable without the interpreter lock. The caller keeps the bases below 2**62
   (varints of at most 8 bytes stay below 2**55: no sum overflows int64). */
static int scan_records(const unsigned char *b, Py_ssize_t n, Py_ssize_t count, Py_ssize_t start,
                        int64_t base_offset, int64_t base_ts, int64_t *st, int64_t *of, int64_t *ts, int64_t *sp,
                        int64_t *hd) {
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++, sp += 4) {
        int64_t len, tsd, offd, klen, vlen;
        Py_ssize_t at = pos;
        if (rd_varint(b, n, &pos, &len) < 0 || len < MIN_RECORD_LENGTH || len > n - pos) return -1;
        Py_ssize_t end = pos + len;
        pos += 1;  /* attributes */
        if (rd_varint(b, end, &pos, &tsd) < 0 || rd_varint(b, end, &pos, &offd) < 0) return -1;
        /* -1 in any encoding is null, as Java's consumer reads it */
        if (rd_varint(b, end, &pos, &klen) < 0 || klen < -1 || klen > end - pos) return -1;
        Py_ssize_t kpos = pos; if (klen > 0) pos += klen;
        if (rd_varint(b, end, &pos, &vlen) < 0 || vlen < -1 || vlen > end - pos) return -1;
        Py_ssize_t vpos = pos; if (vlen > 0) pos += vlen;
        if (pos + 1 == end && b[pos] == 0) {  /* no headers: one 0x00 byte */
            if (hd) hd[2 * i] = -1;
        } else {
            if (!hd || pos >= end) return -1;
            hd[2 * i] = start + pos; hd[2 * i + 1] = start + end;  /* read by the caller, holding the lock */
        }
        pos = end;
        if (st) st[i] = start + at;
        of[i] = base_offset + offd; ts[i] = base_ts + tsd;
        sp[0] = start + kpos; sp[1] = start + kpos + klen;  /* klen -1: null */
        sp[2] = start + vpos; sp[3] = start + vpos + vlen;
    }
    return pos == n ? 0 : -1;
}

/* A record's headers at b[*pos:end] as the loop reads them (_decode_v2._headers): a tuple of (key str, value
   bytes or None) pairs into *headers (unless NULL: only checked), and their key and value bytes into *size.
   0 done; 1 declined (a negative count or length, a length past the record, a key that is not UTF-8: the loop
   words it); -1 an exception. The pairs and the tuple are untracked by the collector, as the record is.
   *last_key (a new reference, or NULL; the caller releases it) holds the key decoded last, reused for the
   same bytes. */
static int read_headers(const unsigned char *b, Py_ssize_t end, Py_ssize_t *pos, PyObject **headers, int64_t *size,
                        PyObject **last_key) {
    int64_t count;
    /* a header takes at least 2 bytes (its two lengths): a larger count is corrupt, and would size the tuple */
    if (rd_varint(b, end, pos, &count) < 0 || count < 0 || count > (end - *pos) / 2) return 1;
    PyObject *pairs = headers ? PyTuple_New((Py_ssize_t)count) : NULL;
    if (headers && !pairs) return -1;
    int64_t total = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t klen, vlen;
        if (rd_varint(b, end, pos, &klen) < 0 || klen < 0 || klen > end - *pos) goto declined;
        Py_ssize_t kpos = *pos;
        *pos += klen;
        if (rd_varint(b, end, pos, &vlen) < 0 || vlen < -1 || vlen > end - *pos) goto declined;
        Py_ssize_t vpos = *pos;
        if (vlen > 0) *pos += vlen;
        total += klen + (vlen > 0 ? vlen : 0);
        if (!pairs) continue;
        /* the same keys come record after record (a trace id's, a type's): the last one is used again */
        PyObject *key = NULL;
        if (*last_key) {
            Py_ssize_t n;
            const char *utf8 = PyUnicode_AsUTF8AndSize(*last_key, &n);
            if (!utf8) PyErr_Clear();  /* a key decoded from UTF-8 has its UTF-8: never */
            else if (n == klen && memcmp(utf8, b + kpos, (size_t)klen) == 0) key = Py_NewRef(*last_key);
        }
        if (!key) {
            key = PyUnicode_DecodeUTF8((const char *)b + kpos, klen, "strict");
            if (key) Py_XSETREF(*last_key, Py_NewRef(key));
        }
        if (!key) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto failed;
            PyErr_Clear();
            goto declined;
        }
        PyObject *value = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + vpos, vlen);
        PyObject *pair = value ? PyTuple_Pack(2, key, value) : NULL;
        Py_DECREF(key); Py_XDECREF(value);
        if (!pair) goto failed;
        PyObject_GC_UnTrack(pair);
        PyTuple_SET_ITEM(pairs, (Py_ssize_t)i, pair);
    }
    if (pairs) { PyObject_GC_UnTrack(pairs); *headers = pairs; }
    *size = total;
    return 0;
declined:
    Py_XDECREF(pairs);
    return 1;
failed:
    Py_XDECREF(pairs);
    return -1;
}

/* Appends to `out` the `count` records of a batch's payload b[0:n] as `type` tuples (ConsumerRecord), those
   below `min_offset` dropped when the batch begins before it, as fetch/_decode_v2.py's loop decodes them
   (timestamps: `lat_ts` for a LogAppendTime batch, `lat`). 0 done; 1 declined (any fault: the loop decodes
   the batch and words it) and -1 an exception, both with `out` as it was. The
   caller keeps the bases below 2**62. */
static int append_records(const unsigned char *b, Py_ssize_t n, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
                          int lat, int64_t lat_ts, int64_t min_offset, PyObject *topic, PyObject *partition,
                          PyObject *epoch, PyObject *out, PyTypeObject *type) {
    Py_ssize_t mark = PyList_GET_SIZE(out);
    PyObject *ts_type = PyLong_FromLong(lat ? 1 : 0), *minus1 = PyLong_FromLong(-1), *empty = PyTuple_New(0);
    PyObject *last_key = NULL;
    int result = 0;
    if (!ts_type || !minus1 || !empty) goto error;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t len, tsd, offd, klen, vlen;
        if (rd_varint(b, n, &pos, &len) < 0 || len < MIN_RECORD_LENGTH || len > n - pos) goto decline;
        Py_ssize_t end = pos + len;
        pos += 1;  /* attributes */
        if (rd_varint(b, end, &pos, &tsd) < 0 || rd_varint(b, end, &pos, &offd) < 0) goto decline;
        if (rd_varint(b, end, &pos, &klen) < 0 || klen < -1) goto decline;
        Py_ssize_t kpos = pos; if (klen > 0) pos += klen;
        if (pos > end) goto decline;
        if (rd_varint(b, end, &pos, &vlen) < 0 || vlen < -1) goto decline;
        Py_ssize_t vpos = pos; if (vlen > 0) pos += vlen;
        if (pos > end) goto decline;
        int64_t offset = base_offset + offd;
        /* as the loop: only a batch that begins before the fetch offset is filtered; elsewhere a record below
           the batch's base stays, and the offsets check words it (check_crcs off) */
        int dropped = base_offset < min_offset && offset < min_offset;
        PyObject *headers = NULL;
        int64_t header_size = -1;
        if (pos + 1 == end && b[pos] == 0) {  /* no headers: one 0x00 byte, as the loop's fast path reads it */
            pos = end;
        } else {
            /* read whole even for a record dropped below: the loop words a bad one before it filters */
            int got = read_headers(b, end, &pos, &headers, &header_size, &last_key);
            if (got < 0) goto error;
            if (got > 0 || pos != end) { Py_XDECREF(headers); goto decline; }
        }
        if (dropped) { Py_XDECREF(headers); continue; }
        if (!headers) headers = Py_NewRef(empty);
        PyObject *key = klen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + kpos, klen);
        PyObject *value = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)b + vpos, vlen);
        PyObject *o = PyLong_FromLongLong(offset), *t = PyLong_FromLongLong(lat ? lat_ts : base_ts + tsd);
        PyObject *ks = PyLong_FromLongLong(klen), *vs = PyLong_FromLongLong(vlen);
        PyObject *hs = header_size < 0 ? Py_NewRef(minus1) : PyLong_FromLongLong(header_size);
        if (!key || !value || !o || !t || !ks || !vs || !hs) goto fail_items;
        PyObject *rec = type->tp_alloc(type, 13);
        if (!rec) goto fail_items;
        PyObject **it = ((PyTupleObject *)rec)->ob_item;
        it[0] = Py_NewRef(topic); it[1] = Py_NewRef(partition); it[2] = Py_NewRef(epoch); it[3] = o; it[4] = t;
        it[5] = Py_NewRef(ts_type); it[6] = key; it[7] = value; it[8] = headers; it[9] = Py_NewRef(Py_None);
        it[10] = ks; it[11] = vs; it[12] = hs;
        /* Holds only strings, numbers, bytes, None and tuples of those: it cannot be part of a reference
           cycle, so the collector need not see it (CPython untracks such plain tuples in its first
           collection, but never a tuple subclass: each collection would traverse every record alive) */
        PyObject_GC_UnTrack(rec);
        int err = PyList_Append(out, rec); Py_DECREF(rec);
        if (err < 0) goto error;
        continue;
    fail_items:
        Py_XDECREF(key); Py_XDECREF(value); Py_XDECREF(o); Py_XDECREF(t); Py_XDECREF(ks); Py_XDECREF(vs);
        Py_XDECREF(hs); Py_DECREF(headers);
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
    Py_XDECREF(ts_type); Py_XDECREF(minus1); Py_XDECREF(empty); Py_XDECREF(last_key);
    return result;
}

#endif
