/* One partition's fetched batches walked in one call, for the common case (fetch/_walk.py's walk, with
   the columnar decoder's scan of each batch): data produced in small batches (Java's and kafka-python's
   16 KiB) made the walk's Python per batch most of poll_batch()'s cost, on the application thread and, for
   where a fetch ends, on the network thread between a Fetch answer and the next request.

   walk_columns(records, fetch_offset, committed, check_crcs, crc32c, offsets, timestamps, spans) walks the
   v2 batches of `records` (a Fetch answer's partition data): each batch's length, magic and header, its
   CRC (by the crc32c package's function, passed in), control batches skipped; it appends the records at or
   past each batch's minimum offset (the fetch offset, then the end of the batches before) to three
   bytearrays as native int64: offset, timestamp (LogAppendTime: the batch's max timestamp), and the key
   and value spans as positions in `records` (4 per record). It returns (next_offset, bytes walked, leader
   epoch, records scanned, LogAppendTime rows [(first, stop)], the headers' spans (None when no
   record has any, see header_spans)), what the Python walk and scan give for the same data. Anything else
   returns NotImplemented with the bytearrays as they were: a legacy or compressed batch, a control batch
   under read_committed, a bad CRC, length, record or header (a key not UTF-8), headers on a record below the
   fetch offset, a base beyond 2**62, no whole batch, offsets out of their batch with CRCs unchecked.
   The Python walk then takes the fetch and words any error (tests/unit/fetch/test_compiled_walk.py).

   walk_records(records, fetch_offset, committed, check_crcs, crc32c, topic, partition, out, record_type) is
   the same walk for poll()'s records (fetch/_decode.py's decode_partition without deserializers): each
   batch's records appended to `out` as record_type tuples (ConsumerRecord) as decode_records makes them,
   headers too; (next_offset, bytes walked, None, leader epoch), or NotImplemented with `out` as it was, as
   above (but for headers: only a header key that is not UTF-8 declines).

   batches_end(records) is fetched_end's walk of the batch headers (managers/_log_end.py's _ends, whole
   batches only): the largest offset after a whole batch's last record, -1 without one (or when none is
   above -1); NotImplemented for a base beyond 2**62. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_records.h" /* scan_records, append_records */

#define LOG_OVERHEAD 12    /* base offset, length */
#define HEADER_SIZE 61     /* a v2 batch's header */
#define CRC_START 21       /* the CRC covers attributes to the end of the batch */
#define MIN_LENGTH 14      /* a magic v0 message with null key and value */
#define RELEASE_MIN_RECORDS 64
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_MASK 0x08
#define CONTROL_MASK 0x20

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static inline int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}
static inline int16_t be16(const unsigned char *p) { return (int16_t)((uint16_t)p[0] << 8 | (uint16_t)p[1]); }

typedef struct {
    Py_ssize_t payload, end;  /* the records of the batch: records[payload:end] */
    int64_t base_offset, last_offset, base_ts, max_ts, min_offset;
    Py_ssize_t count;
    int log_append;
    int32_t epoch;
} batch_t;

/* The header pass, holding the interpreter lock (the CRC is a Python call): the batches with records to
   scan into *out (PyMem), their count, where the walk ends. 1 done, 0 declined, -1 an exception. */
static int walk_headers(const unsigned char *b, Py_ssize_t size, int64_t fetch_offset, int committed, int check_crcs,
                        PyObject *crc, batch_t **out, Py_ssize_t *nout, Py_ssize_t *total, int64_t *next_offset,
                        Py_ssize_t *walked, int64_t *leader_epoch) {
    const int64_t limit = (int64_t)1 << 62;
    Py_ssize_t pos = 0, n = 0, cap = 0;
    batch_t *batches = NULL;
    int64_t next = fetch_offset, epoch = -1;
    *total = 0;
    while (size - pos >= LOG_OVERHEAD) {
        int64_t base = be64(b + pos);
        int32_t length = be32(b + pos + 8);
        if (length < MIN_LENGTH) goto decline;  /* the walk words it */
        Py_ssize_t end = pos + LOG_OVERHEAD + length;
        if (end > size) break;  /* cut at the fetch size: fetched next time */
        if (b[pos + 16] != 2 || length < HEADER_SIZE - LOG_OVERHEAD) goto decline;
        int32_t batch_epoch = be32(b + pos + 12);
        uint32_t want = (uint32_t)be32(b + pos + 17);
        int16_t attributes = be16(b + pos + 21);
        int32_t last_delta = be32(b + pos + 23);
        int64_t base_ts = be64(b + pos + 27), max_ts = be64(b + pos + 35);
        int32_t count = be32(b + pos + 57);
        if (check_crcs) {
            PyObject *mv = PyMemoryView_FromMemory((char *)b + pos + CRC_START, end - pos - CRC_START, PyBUF_READ);
            if (!mv) goto error;
            PyObject *got = PyObject_CallOneArg(crc, mv);
            Py_DECREF(mv);
            if (!got) goto error;
            unsigned long value = PyLong_AsUnsignedLong(got);
            Py_DECREF(got);
            if (value == (unsigned long)-1 && PyErr_Occurred()) goto error;
            if (value != want) goto decline;
        }
        /* a record takes at least MIN_RECORD_SIZE bytes: a larger count is corrupt (and would size the columns) */
        if (count < 0 || count > (end - pos - HEADER_SIZE) / MIN_RECORD_SIZE || base >= limit || base <= -limit || base_ts >= limit ||
            base_ts <= -limit)
            goto decline;
        /* the columns are sized from the counts: only once the records are seen to be there */
        if (!(attributes & (CONTROL_MASK | CODEC_MASK)) && chain_records(b + pos + HEADER_SIZE, end - pos - HEADER_SIZE, count) < 0)
            goto decline;
        int64_t last = base + last_delta;
        if (attributes & CONTROL_MASK) {
            if (committed) goto decline;  /* the walk reads its marker */
        } else if (count) {
            if (attributes & CODEC_MASK) goto decline;
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                batch_t *grown = PyMem_Realloc(batches, (size_t)cap * sizeof(batch_t));
                if (!grown) { PyErr_NoMemory(); goto error; }
                batches = grown;
            }
            batches[n++] = (batch_t){pos + HEADER_SIZE, end, base, last, base_ts, max_ts, next, count,
                                     (attributes & TIMESTAMP_TYPE_MASK) != 0, batch_epoch};
            *total += count;
        }
        epoch = batch_epoch;
        if (last + 1 > next) next = last + 1;
        pos = end;
    }
    if (pos == 0 && size) goto decline;  /* not one whole batch: RecordTooLargeError, worded by the walk */
    *out = batches; *nout = n; *next_offset = next; *walked = pos; *leader_epoch = epoch;
    return 1;
decline:
    PyMem_Free(batches);
    return 0;
error:
    PyMem_Free(batches);
    return -1;
}

/* The record pass, without the interpreter lock: each batch's records scanned, those below its minimum
   offset dropped, LogAppendTime applied, offsets checked where CRCs are not; kept records are written
   from `of`, `ts`, `sp` and `hd` (where their headers lie, read afterwards with the lock) on. Returns how
   many were kept, -1 to decline (also for a dropped record with headers: the Python walk checks those).
   `ranges` gets each LogAppendTime batch's kept rows (first, stop), as the Python path gives them. */
static Py_ssize_t scan_batches(const unsigned char *b, const batch_t *batches, Py_ssize_t n, int check_crcs,
                               int64_t *of, int64_t *ts, int64_t *sp, int64_t *hd, int64_t *ranges,
                               Py_ssize_t *nranges) {
    Py_ssize_t k = 0;
    *nranges = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        const batch_t *t = &batches[j];
        if (scan_records(b + t->payload, t->end - t->payload, t->count, t->payload, t->base_offset, t->base_ts,
                         NULL, of + k, ts + k, sp + 4 * k, hd + 2 * k) < 0)
            return -1;
        Py_ssize_t kept = 0;
        int64_t previous = 0;
        for (Py_ssize_t i = 0; i < t->count; i++) {
            int64_t offset = of[k + i];
            /* as the loop: only a batch that begins before its minimum offset is filtered */
            if (t->base_offset < t->min_offset && offset < t->min_offset) {
                if (hd[2 * (k + i)] >= 0) return -1;
                continue;
            }
            if (!check_crcs && (offset < t->base_offset || offset > t->last_offset || (kept && offset <= previous)))
                return -1;  /* the exact loop words it */
            previous = offset;
            if (kept != i) {
                of[k + kept] = offset;
                ts[k + kept] = ts[k + i];
                memcpy(sp + 4 * (k + kept), sp + 4 * (k + i), 4 * sizeof(int64_t));
                hd[2 * (k + kept)] = hd[2 * (k + i)];
                hd[2 * (k + kept) + 1] = hd[2 * (k + i) + 1];
            }
            if (t->log_append) ts[k + kept] = t->max_ts;
            kept++;
        }
        if (t->log_append && kept) {  /* marked by row: offsets need not rise in data a CRC passes */
            ranges[2 * *nranges] = k;
            ranges[2 * *nranges + 1] = k + kept;
            ++*nranges;
        }
        k += kept;
    }
    return k;
}

/* What both walks begin with: records, fetch_offset, committed, check_crcs and crc32c (args[0:5]) read and
   the header pass run. 1 walked (w->view held and w->batches allocated: the caller releases both), 0 declined
   (a fetch offset beyond int64, or the header pass's: the Python walk's) and -1 an exception, nothing held. */
typedef struct {
    Py_buffer view;
    batch_t *batches;
    Py_ssize_t nbatches, total, walked;
    int64_t next_offset, leader_epoch;
    int check_crcs;
} walk_t;

static int begin_walk(PyObject *const *args, walk_t *w) {
    int64_t fetch_offset = PyLong_AsLongLong(args[1]);
    if (fetch_offset == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return 0;
    }
    int committed = PyObject_IsTrue(args[2]), check_crcs = PyObject_IsTrue(args[3]);
    if (committed < 0 || check_crcs < 0) return -1;
    if (PyObject_GetBuffer(args[0], &w->view, PyBUF_SIMPLE) < 0) return -1;
    w->batches = NULL;
    w->check_crcs = check_crcs;
    int done = walk_headers(w->view.buf, w->view.len, fetch_offset, committed, check_crcs, args[4], &w->batches,
                            &w->nbatches, &w->total, &w->next_offset, &w->walked, &w->leader_epoch);
    if (done <= 0) PyBuffer_Release(&w->view);
    return done;
}

/* The headers of the kept rows (heads: where each row's lie, or -1 for none) as spans in the records, for
   poll_batch()'s header column without a Python object per header: *out is None when no row has any, else
   (first, spans): row r's headers are entries first[r]:first[r + 1] (native int64, rows + 1) of spans (4 native
   int64 per header: key start, key end, value start, value end; a null value's end is its start - 1, as
   views reads it). Read as read_headers reads them: 1 declined (a bad count or length, bytes left, a key
   that is not UTF-8: the Python walk words it), 0 done,
   -1 an exception. A key's UTF-8 is judged by Python's decoder, once for each run of the same key bytes. */
static int header_spans(const unsigned char *b, const int64_t *heads, Py_ssize_t kept, PyObject **out) {
    Py_ssize_t total = 0, cap = 0, r;
    int64_t *spans = NULL;
    PyObject *first = NULL;
    const unsigned char *last_key = NULL;
    int64_t last_len = -1;
    int result = 1;
    for (r = 0; r < kept && heads[2 * r] < 0; r++) {}
    if (r == kept) { *out = Py_NewRef(Py_None); return 0; }
    first = PyBytes_FromStringAndSize(NULL, (kept + 1) * (Py_ssize_t)sizeof(int64_t));
    if (!first) return -1;
    int64_t *at = (int64_t *)PyBytes_AS_STRING(first);
    for (r = 0; r < kept; r++) {
        at[r] = total;
        if (heads[2 * r] < 0) continue;
        Py_ssize_t pos = (Py_ssize_t)heads[2 * r], end = (Py_ssize_t)heads[2 * r + 1];
        int64_t count;
        /* a header takes at least 2 bytes (its two lengths): a larger count is corrupt */
        if (rd_varint(b, end, &pos, &count) < 0 || count < 0 || count > (end - pos) / 2) goto done;
        if (total + count > cap) {
            Py_ssize_t grown_cap = 2 * cap > total + count ? 2 * cap : total + count + 16;
            int64_t *grown = PyMem_Realloc(spans, (size_t)grown_cap * 4 * sizeof(int64_t));
            if (!grown) { PyErr_NoMemory(); result = -1; goto done; }
            spans = grown; cap = grown_cap;
        }
        for (int64_t i = 0; i < count; i++, total++) {
            int64_t klen, vlen;
            if (rd_varint(b, end, &pos, &klen) < 0 || klen < 0 || klen > end - pos) goto done;
            Py_ssize_t kpos = pos;
            pos += klen;
            if (rd_varint(b, end, &pos, &vlen) < 0 || vlen < -1 || vlen > end - pos) goto done;
            Py_ssize_t vpos = pos;
            if (vlen > 0) pos += vlen;
            if (klen != last_len || memcmp(last_key, b + kpos, (size_t)klen) != 0) {
                PyObject *key = PyUnicode_DecodeUTF8((const char *)b + kpos, klen, "strict");
                if (!key) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { result = -1; goto done; }
                    PyErr_Clear();
                    goto done;
                }
                Py_DECREF(key);
                last_key = b + kpos; last_len = klen;
            }
            int64_t *sp = spans + 4 * total;
            sp[0] = kpos; sp[1] = kpos + klen; sp[2] = vpos; sp[3] = vpos + vlen;  /* vlen -1: null */
        }
        if (pos != end) goto done;
    }
    at[kept] = total;
    PyObject *joined = PyBytes_FromStringAndSize((const char *)spans, total * 4 * (Py_ssize_t)sizeof(int64_t));
    if (!joined) { result = -1; goto done; }
    *out = Py_BuildValue("(NN)", first, joined);
    first = NULL;
    result = *out ? 0 : -1;
done:
    Py_XDECREF(first);
    PyMem_Free(spans);
    return result;
}

static PyObject *walk_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "records, fetch_offset, committed, check_crcs, crc32c, 3 bytearrays");
        return NULL;
    }
    PyObject *outs[3] = {args[5], args[6], args[7]};
    for (int k = 0; k < 3; k++)
        if (!PyByteArray_Check(outs[k])) { PyErr_SetString(PyExc_TypeError, "offsets, timestamps, spans: bytearrays"); return NULL; }
    walk_t w;
    int begun = begin_walk(args, &w);
    if (begun < 0) return NULL;
    if (begun == 0) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *b = w.view.buf;
    const Py_ssize_t total = w.total;
    int64_t *ranges = NULL, *heads = NULL;
    PyObject *headers = NULL;
    Py_ssize_t nranges = 0, kept = 0;
    Py_ssize_t marks[3];
    const Py_ssize_t width[3] = {8, 8, 32};
    int resized = 0;
    PyObject *result = NULL;
    ranges = PyMem_Malloc((size_t)(2 * w.nbatches + 1) * sizeof(int64_t));
    heads = PyMem_Malloc((size_t)(2 * total + 1) * sizeof(int64_t));
    if (!ranges || !heads) { PyErr_NoMemory(); goto fail; }
    for (; resized < 3; resized++) {
        marks[resized] = PyByteArray_GET_SIZE(outs[resized]);
        if (total > (PY_SSIZE_T_MAX - marks[resized]) / width[resized] ||
            PyByteArray_Resize(outs[resized], marks[resized] + total * width[resized]) < 0)
            goto fail;
    }
    int64_t *of = (int64_t *)(PyByteArray_AS_STRING(outs[0]) + marks[0]);
    int64_t *ts = (int64_t *)(PyByteArray_AS_STRING(outs[1]) + marks[1]);
    int64_t *sp = (int64_t *)(PyByteArray_AS_STRING(outs[2]) + marks[2]);
    /* reads the held records and writes the bytearrays resized above, which no other code sees until this
       returns: the network thread may take the interpreter lock meanwhile */
    PyThreadState *released = total >= RELEASE_MIN_RECORDS ? PyEval_SaveThread() : NULL;
    kept = scan_batches(b, w.batches, w.nbatches, w.check_crcs, of, ts, sp, heads, ranges, &nranges);
    if (released) PyEval_RestoreThread(released);
    if (kept < 0) goto decline;
    int spanned = header_spans(b, heads, kept, &headers);
    if (spanned < 0) goto fail;
    if (spanned > 0) goto decline;
    for (int k = 0; k < 3; k++)
        if (PyByteArray_Resize(outs[k], marks[k] + kept * width[k]) < 0) goto fail;
    PyObject *log_append = PyList_New(nranges);
    if (!log_append) goto fail;
    for (Py_ssize_t i = 0; i < nranges; i++) {
        PyObject *range = Py_BuildValue("(LL)", (long long)ranges[2 * i], (long long)ranges[2 * i + 1]);
        if (!range) { Py_DECREF(log_append); goto fail; }
        PyList_SET_ITEM(log_append, i, range);
    }
    result = Py_BuildValue("(LnLnNO)", (long long)w.next_offset, w.walked, (long long)w.leader_epoch, total,
                           log_append, headers);
    if (!result) goto fail;
    goto out;
decline:
    for (int k = 0; k < resized; k++)
        if (PyByteArray_Resize(outs[k], marks[k]) < 0) goto fail;
    result = Py_NewRef(Py_NotImplemented);
    goto out;
fail:
    while (resized-- > 0) PyByteArray_Resize(outs[resized], marks[resized]);
    result = NULL;
out:
    Py_XDECREF(headers);
    PyMem_Free(w.batches);
    PyMem_Free(ranges);
    PyMem_Free(heads);
    PyBuffer_Release(&w.view);
    return result;
}

static PyObject *walk_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "records, fetch_offset, committed, check_crcs, crc32c, topic, partition, out, type");
        return NULL;
    }
    PyObject *topic = args[5], *partition = args[6], *out = args[7];
    PyTypeObject *type = (PyTypeObject *)args[8];
    if (!PyList_Check(out) || !PyType_Check(args[8])) { PyErr_SetString(PyExc_TypeError, "out: a list, type: a type"); return NULL; }
    walk_t w;
    int begun = begin_walk(args, &w);
    if (begun < 0) return NULL;
    if (begun == 0) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *b = w.view.buf;
    const int64_t limit = (int64_t)1 << 62;
    Py_ssize_t mark = PyList_GET_SIZE(out);
    PyObject *result = NULL;
    for (Py_ssize_t j = 0; j < w.nbatches; j++) {
        const batch_t *t = &w.batches[j];
        if (t->log_append && (t->max_ts >= limit || t->max_ts <= -limit)) goto decline;
        PyObject *epoch = PyLong_FromLong(t->epoch);
        if (!epoch) goto fail;
        Py_ssize_t before = PyList_GET_SIZE(out);
        int got = append_records(b + t->payload, t->end - t->payload, t->count, t->base_offset, t->base_ts, t->log_append,
                                 t->max_ts, t->min_offset, topic, partition, epoch, out, type);
        Py_DECREF(epoch);
        if (got < 0) goto fail;
        if (got > 0) goto decline;
        if (!w.check_crcs) {  /* as _check_offsets: the kept records rise within their batch's range */
            int64_t previous = 0;
            for (Py_ssize_t i = before; i < PyList_GET_SIZE(out); i++) {
                int64_t offset = PyLong_AsLongLong(PyTuple_GET_ITEM(PyList_GET_ITEM(out, i), 3));
                if (offset < t->base_offset || offset > t->last_offset || (i > before && offset <= previous))
                    goto decline;
                previous = offset;
            }
        }
    }
    result = Py_BuildValue("(LnOL)", (long long)w.next_offset, w.walked, Py_None, (long long)w.leader_epoch);
    if (!result) goto fail;
    goto out;
decline:
    if (PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL) < 0) goto fail;
    result = Py_NewRef(Py_NotImplemented);
    goto out;
fail:
    PyList_SetSlice(out, mark, PyList_GET_SIZE(out), NULL);
    result = NULL;
out:
    PyMem_Free(w.batches);
    PyBuffer_Release(&w.view);
    return result;
}

static PyObject *batches_end(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t pos = 0, size = view.len;
    int64_t end_offset = -1;
    const int64_t limit = (int64_t)1 << 62;
    /* as _ends(whole=True): header by header, stopping at the first batch cut short or malformed */
    while (pos + 16 < size) {
        int64_t base = be64(b + pos);
        int32_t length = be32(b + pos + 8);
        if (base >= limit || base <= -limit) {  /* Python's integers add it without overflow */
            PyBuffer_Release(&view);
            Py_RETURN_NOTIMPLEMENTED;
        }
        if (length <= 0 || length > size - pos - LOG_OVERHEAD) break;
        Py_ssize_t after = pos + LOG_OVERHEAD + length;
        int64_t end;
        if (b[pos + 16] >= 2) {
            if (pos + 27 > size || length < 27 - LOG_OVERHEAD) break;
            end = base + be32(b + pos + 23) + 1;
        } else {
            end = base + 1;
        }
        if (end > end_offset) end_offset = end;
        pos = after;
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(end_offset);
}

static PyMethodDef methods[] = {
    {"walk_columns", (PyCFunction)(void (*)(void))walk_columns, METH_FASTCALL, NULL},
    {"walk_records", (PyCFunction)(void (*)(void))walk_records, METH_FASTCALL, NULL},
    {"batches_end", (PyCFunction)batches_end, METH_O, NULL},
    {NULL},
};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_cwalk", NULL, -1, methods};
PyMODINIT_FUNC PyInit__cwalk(void) { return PyModule_Create(&mod); }
