/* The compiled Avro column decoder: Confluent-framed Avro values read straight into Arrow buffers, a column at
   a time, by a program schemas/_avro_plan.py compiles from the writer's and the reader's schemas (Avro's
   resolution rules applied once per schema pair, not per record).

   Columns(spec) holds one growable builder per Arrow array of the reader's type (spec: a tuple of (kind,
   children) per builder, the root first). decode(...) runs a program over the records [start, stop) of an
   Arrow binary column (its validity, int32 offsets and data buffers) and appends each to the builders; it
   stops at the first record of another schema id, one not in the framing, one that does not decode (the
   builders rolled back to before it, with a message) and declines (the Python path to decide) what it cannot
   answer as fastavro does. finish() hands the buffers out for pyarrow.Array.from_buffers.

   The bytes are hostile: every length is checked against what is left of the record before it is used,
   counts are bounded by the bytes left, sizes cannot overflow (an int32 offset past 2**31-1 is an error), and
   a builder grows in proportion to the bytes read. The interpreter lock is let go while records decode. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_NULL, K_BOOL, K_I32, K_I64, K_F32, K_F64, K_BIN, K_DEC, K_STRUCT, K_LIST };
static const int WIDTH[] = {0, 0, 4, 8, 4, 8, 0, 16, 0, 0};

/* the ops (schemas/_avro_plan.py's OPS: the same numbers) */
enum {
    OP_NULL, OP_BOOL, OP_INT, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_BYTES, OP_FIXED, OP_DEC_BYTES, OP_DEC_FIXED,
    OP_ENUM, OP_RECORD, OP_ARRAY, OP_MAP, OP_UNION, OP_NULL_INTO, OP_MEMBER, OP_ERROR, OP_DEFAULT, OP_COUNT
};
/* how an int or long lands: as it is, widened, or checked against the range fastavro's datetime types take */
enum { C_I32, C_I64, C_F32, C_F64, C_DATE, C_TIME_MS, C_TIME_US, C_TS_MS, C_TS_US };
/* what a string's bytes must be */
enum { S_ANY, S_UTF8, S_UUID };

enum { ST_DONE, ST_SCHEMA, ST_FRAMING, ST_ERROR, ST_DECLINE };
#define HEADER 5
#define MAX_DEPTH 128

typedef struct { uint8_t *p; Py_ssize_t len, cap; } buf_t;

typedef struct {
    int kind;
    Py_ssize_t length, nulls;
    buf_t valid, data, offs;
    Py_ssize_t nchild;
    Py_ssize_t *child;
} builder_t;

typedef struct { Py_ssize_t length, nulls, valid, data, offs; } snap_t;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    builder_t *b;
    snap_t *snap;
} Columns;

typedef struct {
    Columns *cols;
    const int64_t *prog;
    Py_ssize_t nprog;
    const uint8_t **cdata;
    Py_ssize_t *clen, nconst;
    int fail;      /* ST_ERROR or ST_DECLINE once something went wrong */
    int depth;
    char msg[200];
} ctx_t;

/* items: what the blocks of arrays and maps read from these bytes may still hold (as many as the bytes) */
typedef struct { const uint8_t *p, *end; int64_t items; } cur_t;

static int grow(buf_t *b, Py_ssize_t more) {
    if (more > PY_SSIZE_T_MAX - b->len) return -1;
    Py_ssize_t need = b->len + more;
    if (need <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    uint8_t *p = PyMem_RawRealloc(b->p, (size_t)cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int fail(ctx_t *c, int status, const char *fmt, ...) {
    if (!c->fail) {
        va_list ap;
        va_start(ap, fmt);
        PyOS_vsnprintf(c->msg, sizeof c->msg, fmt, ap);
        va_end(ap);
        c->fail = status;
    }
    return -1;
}

#define NOMEM(c) fail((c), ST_DECLINE, "out of memory")

static int push_bit(ctx_t *c, buf_t *b, Py_ssize_t index, int on) {
    /* grown to the bit, not by a byte at every eighth: a program aiming a bit at a builder whose bitmap is not
       as long as its rows (an op for another kind of builder) must not write past it */
    while (b->len <= (index >> 3)) {
        if (grow(b, 1) < 0) return NOMEM(c);
        b->p[b->len++] = 0;
    }
    if (on) b->p[index >> 3] |= (uint8_t)(1u << (index & 7));
    else b->p[index >> 3] &= (uint8_t)~(1u << (index & 7));
    return 0;
}

/* a builder's row done: valid or null */
static int close_row(ctx_t *c, builder_t *b, int valid) {
    if (push_bit(c, &b->valid, b->length, valid) < 0) return -1;
    if (!valid) b->nulls++;
    b->length++;
    return 0;
}

static int push_offset(ctx_t *c, builder_t *b, Py_ssize_t end) {
    if (end > INT32_MAX) return fail(c, ST_ERROR, "the column holds more than 2 GiB in one array");
    if (grow(&b->offs, 4) < 0) return NOMEM(c);
    int32_t v = (int32_t)end;
    memcpy(b->offs.p + b->offs.len, &v, 4);
    b->offs.len += 4;
    return 0;
}

static builder_t *builder(ctx_t *c, int64_t index) {
    if (index < 0 || index >= c->cols->n) { fail(c, ST_DECLINE, "a program names builder %lld", (long long)index); return NULL; }
    return &c->cols->b[index];
}

/* a slot's data with nothing in it (zero, "", []): under a null or an empty row */
static int push_nothing(ctx_t *c, builder_t *b) {
    int w = WIDTH[b->kind];
    if (w) {
        if (grow(&b->data, w) < 0) return NOMEM(c);
        memset(b->data.p + b->data.len, 0, (size_t)w);
        b->data.len += w;
    } else if (b->kind == K_BOOL) {
        if (push_bit(c, &b->data, b->length, 0) < 0) return -1;
    } else if (b->kind == K_BIN) {
        if (push_offset(c, b, b->data.len) < 0) return -1;
    } else if (b->kind == K_LIST) {
        int32_t last;
        memcpy(&last, b->offs.p + b->offs.len - 4, 4);
        if (push_offset(c, b, last) < 0) return -1;
    }
    return 0;
}

/* a valid empty value in b (zero, "", [], a struct of such): what a null struct's children hold, so a field
   declared not nullable has no null under a null parent (pyarrow refuses to cast such a column to Spark's
   types, and the Python path has none there) */
static int append_empty(ctx_t *c, builder_t *b) {
    if (b->kind == K_NULL) return close_row(c, b, 0);
    if (push_nothing(c, b) < 0) return -1;
    for (Py_ssize_t i = 0; b->kind == K_STRUCT && i < b->nchild; i++)
        if (append_empty(c, &c->cols->b[b->child[i]]) < 0) return -1;
    return close_row(c, b, 1);
}

/* a null row in b; a struct's children (they keep its length) get empty values under it */
static int append_null(ctx_t *c, builder_t *b) {
    if (push_nothing(c, b) < 0) return -1;
    for (Py_ssize_t i = 0; b->kind == K_STRUCT && i < b->nchild; i++)
        if (append_empty(c, &c->cols->b[b->child[i]]) < 0) return -1;
    return close_row(c, b, 0);
}

static int push_fixed(ctx_t *c, builder_t *b, const void *v, int w) {
    if (grow(&b->data, w) < 0) return NOMEM(c);
    memcpy(b->data.p + b->data.len, v, (size_t)w);
    b->data.len += w;
    return close_row(c, b, 1);
}

/* Avro's zigzag varint, at most 10 bytes */
static int read_long(ctx_t *c, cur_t *r, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return fail(c, ST_ERROR, "the payload ends inside a number");
        uint8_t byte = *r->p++;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            if (shift == 63 && byte > 1) break;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return fail(c, ST_DECLINE, "a number longer than 10 bytes");  /* fastavro's answer, not ours to guess */
}

static int need(ctx_t *c, cur_t *r, int64_t n, const char *what) {
    if (n < 0) return fail(c, ST_ERROR, "a negative %s length (%lld)", what, (long long)n);
    if (n > r->end - r->p)
        return fail(c, ST_ERROR, "a %s of %lld bytes runs past the payload (%lld bytes left)", what, (long long)n,
                    (long long)(r->end - r->p));
    return 0;
}

/* a value skipped (a writer's field the reader lacks) whose bytes run past the payload or whose length is
   negative: fastavro skips by moving its position unchecked (past the end: the record still reads if nothing
   follows; back: it reads bytes again) and goes on from there: its answer, not ours to guess */
static int need_skip(ctx_t *c, cur_t *r, int64_t n, const char *what, int skipped) {
    if (skipped && (n < 0 || n > r->end - r->p))
        return fail(c, ST_DECLINE, "a skipped %s runs outside the payload", what);
    return need(c, r, n, what);
}

static int utf8_ok(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        int len; uint32_t cp;
        if (b >= 0xC2 && b <= 0xDF) { len = 2; cp = b & 0x1F; }
        else if (b >= 0xE0 && b <= 0xEF) { len = 3; cp = b & 0x0F; }
        else if (b >= 0xF0 && b <= 0xF4) { len = 4; cp = b & 0x07; }
        else return 0;
        if (n - i < len) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

static int push_bin(ctx_t *c, builder_t *b, const uint8_t *s, Py_ssize_t n) {
    if (grow(&b->data, n) < 0) return NOMEM(c);
    if (n) memcpy(b->data.p + b->data.len, s, (size_t)n);
    b->data.len += n;
    if (push_offset(c, b, b->data.len) < 0) return -1;
    return close_row(c, b, 1);
}

/* a uuid string in its canonical form (8-4-4-4-12 hex digits), lower-cased as str(uuid.UUID(s)) gives it; any
   other spelling declines (Python's uuid.UUID accepts braces, urn: and more: its answer, not ours to guess) */
static int push_uuid(ctx_t *c, builder_t *b, const uint8_t *s, Py_ssize_t n) {
    uint8_t out[36];
    if (n != 36) return fail(c, ST_DECLINE, "a uuid not in its canonical form");
    for (int i = 0; i < 36; i++) {
        uint8_t ch = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (ch != '-') return fail(c, ST_DECLINE, "a uuid not in its canonical form");
        } else if (ch >= 'A' && ch <= 'F') ch = (uint8_t)(ch - 'A' + 'a');
        else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return fail(c, ST_DECLINE, "a uuid not in its canonical form");
        out[i] = ch;
    }
    return push_bin(c, b, out, 36);
}

/* a big-endian two's complement integer of n bytes as a little-endian 128-bit decimal of at most `precision`
   digits */
static int push_decimal(ctx_t *c, builder_t *b, const uint8_t *s, Py_ssize_t n, int64_t precision) {
    __int128 v = 0;
    if (n == 0) return fail(c, ST_DECLINE, "an empty decimal");
    /* bytes beyond 16 may only repeat the sign */
    Py_ssize_t skip = n > 16 ? n - 16 : 0;
    uint8_t sign = (s[0] & 0x80) ? 0xFF : 0x00;
    for (Py_ssize_t i = 0; i < skip; i++)
        if (s[i] != sign) return fail(c, ST_ERROR, "a decimal of more than 38 digits");
    if (skip && ((s[skip] & 0x80) ? 0xFF : 0x00) != sign) return fail(c, ST_ERROR, "a decimal of more than 38 digits");
    v = (s[skip] & 0x80) ? -1 : 0;
    for (Py_ssize_t i = skip; i < n; i++) v = (__int128)(((unsigned __int128)v << 8) | s[i]);
    unsigned __int128 limit = 1, mag = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v : (unsigned __int128)v;
    for (int64_t i = 0; i < precision && i < 38; i++) limit *= 10;
    if (mag >= limit) return fail(c, ST_ERROR, "a decimal of more than %lld digits (the schema's precision)", (long long)precision);
    uint8_t le[16];
    for (int i = 0; i < 16; i++) le[i] = (uint8_t)((unsigned __int128)v >> (8 * i));
    return push_fixed(c, b, le, 16);
}

static int push_int(ctx_t *c, builder_t *b, int64_t v, int64_t conv) {
    switch (conv) {
    case C_I32: case C_DATE: case C_TIME_MS: {
        if (conv == C_DATE && (v < -719162 || v > 2932896)) return fail(c, ST_DECLINE, "a date out of Python's range");
        if (conv == C_TIME_MS && (v < 0 || v >= 86400000)) return fail(c, ST_DECLINE, "a time of day out of range");
        int32_t x = (int32_t)v;
        return push_fixed(c, b, &x, 4);
    }
    case C_I64: case C_TIME_US: case C_TS_MS: case C_TS_US:
        if (conv == C_TIME_US && (v < 0 || v >= 86400000000LL)) return fail(c, ST_DECLINE, "a time of day out of range");
        if (conv == C_TS_MS && (v < -62135596800000LL || v > 253402300799999LL)) return fail(c, ST_DECLINE, "a timestamp out of Python's range");
        if (conv == C_TS_US && (v < -62135596800000000LL || v > 253402300799999999LL)) return fail(c, ST_DECLINE, "a timestamp out of Python's range");
        return push_fixed(c, b, &v, 8);
    /* through a double, as fastavro's float(v) then pyarrow's float32 round it: a long rounded straight to a
       float can land one step away (2**54 + 2**30 + 1) */
    case C_F32: { float x = (float)(double)v; return push_fixed(c, b, &x, 4); }
    case C_F64: { double x = (double)v; return push_fixed(c, b, &x, 8); }
    }
    return fail(c, ST_DECLINE, "an unknown conversion");
}

/* k is never negative, and compared with what is left so that a hostile count in a program cannot overflow pc + k */
#define ARG(k) ((k) < c->nprog - pc ? c->prog[pc + (k)] : (fail(c, ST_DECLINE, "a program runs past its end"), -1))
#define TARGET(k) int64_t bi = ARG(k); builder_t *b = NULL; \
    if (c->fail) return -1; \
    if (bi >= 0 && !(b = builder(c, bi))) return -1;

static int run(ctx_t *c, Py_ssize_t pc, cur_t *r);

/* a map key as read: where it lies in the payload (alive for the whole decode) */
typedef struct { const uint8_t *p; int64_t n; } span_t;

static int span_cmp(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->n ? memcmp(x->p, y->p, (size_t)x->n) : 0;
}

/* a map whose blocks give one key twice: fastavro's dict keeps the last value at the first key's place, an
   Arrow map would keep both entries; the Python path's answer, not ours to imitate (sorted: n log n) */
static int unique_keys(ctx_t *c, buf_t *spans) {
    size_t n = (size_t)(spans->len / (Py_ssize_t)sizeof(span_t));
    span_t *k = (span_t *)spans->p;
    if (n < 2) return 0;
    qsort(k, n, sizeof(span_t), span_cmp);
    for (size_t i = 1; i < n; i++)
        if (span_cmp(&k[i - 1], &k[i]) == 0) return fail(c, ST_DECLINE, "a map gives one key twice");
    return 0;
}

/* an array's or a map's blocks: a count (negative: its absolute value, then the block's byte size), 0 ends;
   a map's keys go to `keys`, and where each lies to `spans` */
static int blocks(ctx_t *c, cur_t *r, Py_ssize_t item_pc, builder_t *keys, buf_t *spans) {
    for (;;) {
        int64_t count;
        if (read_long(c, r, &count) < 0) return -1;
        if (count == 0) return 0;
        if (count < 0) {
            int64_t size;
            /* fastavro negates it in 64 bits too (still negative) and reads on: its answer, not ours to guess */
            if (count == INT64_MIN) return fail(c, ST_DECLINE, "a block count out of range");
            count = -count;
            if (read_long(c, r, &size) < 0) return -1;
        }
        /* every item takes a byte but a null's or an empty record's: more than the bytes left is fastavro's
           call (a hostile count must not size anything here); so are more than the bytes in all the blocks read
           from them together (else items of no bytes, block after block, grow with the square of the bytes) */
        if (count > r->end - r->p) return fail(c, ST_DECLINE, "a block count of %lld past the bytes left", (long long)count);
        if (count > r->items) return fail(c, ST_DECLINE, "more items in the blocks than the payload has bytes");
        r->items -= count;
        for (int64_t i = 0; i < count; i++) {
            if (keys) {
                int64_t n;
                if (read_long(c, r, &n) < 0 || need(c, r, n, "map key") < 0) return -1;
                if (!utf8_ok(r->p, n)) return fail(c, ST_ERROR, "a map key is not UTF-8");
                if (push_bin(c, keys, r->p, n) < 0) return -1;
                span_t at = {r->p, n};
                if (grow(spans, (Py_ssize_t)sizeof at) < 0) return NOMEM(c);
                memcpy(spans->p + spans->len, &at, sizeof at);
                spans->len += (Py_ssize_t)sizeof at;
                r->p += n;
            }
            if (run(c, item_pc, r) < 0) return -1;
        }
    }
}

/* an array or a map skipped: a block that gives its byte size is passed over unread, as fastavro passes it */
static int skip_blocks(ctx_t *c, cur_t *r, Py_ssize_t item_pc, int is_map) {
    for (;;) {
        int64_t count, size, n;
        if (read_long(c, r, &count) < 0) return -1;
        if (count == 0) return 0;
        if (count < 0) {
            if (read_long(c, r, &size) < 0) return -1;
            if (size < 0 || size > r->end - r->p) return fail(c, ST_DECLINE, "a block size outside the payload");
            r->p += size;
            continue;
        }
        if (count > r->end - r->p) return fail(c, ST_DECLINE, "a block count of %lld past the bytes left", (long long)count);
        if (count > r->items) return fail(c, ST_DECLINE, "more items in the blocks than the payload has bytes");
        r->items -= count;
        for (int64_t i = 0; i < count; i++) {
            if (is_map) {
                if (read_long(c, r, &n) < 0 || need_skip(c, r, n, "map key", 1) < 0) return -1;
                r->p += n;
            }
            if (run(c, item_pc, r) < 0) return -1;
        }
    }
}

static int run(ctx_t *c, Py_ssize_t pc, cur_t *r) {
    if (pc < 0 || pc >= c->nprog) return fail(c, ST_DECLINE, "a program jumps out of itself");
    if (++c->depth > MAX_DEPTH) return fail(c, ST_DECLINE, "a schema nested more than %d deep", MAX_DEPTH);
    int rc = -1;
    switch (c->prog[pc]) {
    case OP_NULL: case OP_NULL_INTO: {  /* nothing read: a null where the reader has one */
        TARGET(1);
        rc = b ? append_null(c, b) : 0;
        break;
    }
    case OP_BOOL: {
        TARGET(1);
        if (!b && need_skip(c, r, 1, "boolean", 1) < 0) break;
        if (r->p >= r->end) { rc = fail(c, ST_ERROR, "the payload ends inside a boolean"); break; }
        int on = *r->p++ != 0;
        rc = 0;
        if (b && (push_bit(c, &b->data, b->length, on) < 0 || close_row(c, b, 1) < 0)) rc = -1;
        break;
    }
    case OP_INT: case OP_LONG: {
        TARGET(1);
        int64_t conv = ARG(2), v;
        if (c->fail || read_long(c, r, &v) < 0) break;
        /* an int past 32 bits: fastavro reads it, and a wider reader type takes it */
        if (c->prog[pc] == OP_INT && (conv == C_I32 || conv == C_DATE || conv == C_TIME_MS) && (v < INT32_MIN || v > INT32_MAX)) { rc = fail(c, ST_ERROR, "an int of %lld does not fit 32 bits", (long long)v); break; }
        rc = b ? push_int(c, b, v, conv) : 0;
        break;
    }
    case OP_FLOAT: case OP_DOUBLE: {
        TARGET(1);
        int64_t conv = ARG(2);
        int w = c->prog[pc] == OP_FLOAT ? 4 : 8;
        if (c->fail) break;
        if (!b && need_skip(c, r, w, w == 4 ? "float" : "double", 1) < 0) break;
        if (r->end - r->p < w) { rc = fail(c, ST_ERROR, "the payload ends inside a %s", w == 4 ? "float" : "double"); break; }
        double d;
        if (w == 4) { float f; memcpy(&f, r->p, 4); d = f; } else memcpy(&d, r->p, 8);
        r->p += w;
        rc = 0;
        if (b) {
            if (conv == C_F32) { float f = (float)d; rc = push_fixed(c, b, &f, 4); }
            else rc = push_fixed(c, b, &d, 8);
        }
        break;
    }
    case OP_BYTES: case OP_DEC_BYTES: {
        TARGET(1);
        int64_t check = ARG(2), n;
        if (c->fail || read_long(c, r, &n) < 0 || need_skip(c, r, n, c->prog[pc] == OP_BYTES ? "string" : "decimal", !b) < 0) break;
        const uint8_t *s = r->p;
        r->p += n;
        rc = 0;
        if (!b) break;  /* skipped: not decoded (fastavro skips a string's bytes unread) */
        /* a writer's string is text even read as bytes, as fastavro reads it */
        if (c->prog[pc] == OP_BYTES && check == S_UTF8 && !utf8_ok(s, n)) { rc = fail(c, ST_ERROR, "a string is not UTF-8"); break; }
        if (c->prog[pc] == OP_DEC_BYTES) rc = push_decimal(c, b, s, n, check);
        else if (check == S_UUID) rc = push_uuid(c, b, s, n);
        else rc = push_bin(c, b, s, n);
        break;
    }
    case OP_FIXED: case OP_DEC_FIXED: {
        TARGET(1);
        int64_t size = ARG(2), precision = ARG(3);
        if (c->fail || need_skip(c, r, size, "fixed", !b) < 0) break;
        const uint8_t *s = r->p;
        r->p += size;
        rc = !b ? 0 : c->prog[pc] == OP_FIXED ? push_bin(c, b, s, size) : push_decimal(c, b, s, size, precision);
        break;
    }
    case OP_ENUM: {  /* symbols: a tuple const of the reader's symbol (bytes) per writer index, None if it has none */
        TARGET(1);
        int64_t nsym = ARG(2), first = ARG(3), index;
        if (c->fail || read_long(c, r, &index) < 0) break;
        /* a program is built by _avro_plan, but the module is callable with any program: counts are bounded
           before they are negated or added (INT64_MIN, first + index) */
        if (nsym < 0 || nsym > c->nconst || first < 0 || first > c->nconst) { rc = fail(c, ST_DECLINE, "a program gives %lld enum symbols from const %lld", (long long)nsym, (long long)first); break; }
        if (index < 0 && index >= -nsym) { rc = fail(c, ST_DECLINE, "a negative enum index"); break; }  /* fastavro counts from the end */
        if (index < 0 || index >= nsym) { rc = fail(c, ST_ERROR, "an enum index of %lld (%lld symbols)", (long long)index, (long long)nsym); break; }
        int64_t k = first + index;
        if (k < 0 || k >= c->nconst) { rc = fail(c, ST_DECLINE, "a program names const %lld", (long long)k); break; }
        if (!c->cdata[k]) { rc = fail(c, ST_ERROR, "the enum symbol at index %lld is not in the reader's symbols and it has no default", (long long)index); break; }
        rc = b ? push_bin(c, b, c->cdata[k], c->clen[k]) : 0;
        break;
    }
    case OP_RECORD: {  /* b, nfields, field pcs..., ndefaults, default pcs... */
        TARGET(1);
        int64_t nf = ARG(2);
        if (c->fail) break;
        if (nf < 0 || nf > c->nprog) { rc = fail(c, ST_DECLINE, "a program gives %lld fields", (long long)nf); break; }
        rc = 0;
        for (int64_t i = 0; i < nf && rc == 0; i++) rc = run(c, ARG(3 + i), r);
        int64_t nd = rc ? 0 : ARG(3 + nf);
        if (rc == 0 && !c->fail && (nd < 0 || nd > c->nprog)) { rc = fail(c, ST_DECLINE, "a program gives %lld defaults", (long long)nd); break; }
        for (int64_t i = 0; i < nd && rc == 0; i++) rc = run(c, ARG(4 + nf + i), r);
        if (rc == 0 && b) rc = close_row(c, b, 1);
        break;
    }
    case OP_ARRAY: case OP_MAP: {  /* list b, item pc; a map: also its entries' struct and keys builders */
        TARGET(1);
        int is_map = c->prog[pc] == OP_MAP;
        int64_t item = ARG(2), ei = is_map ? ARG(3) : -1, ki = is_map ? ARG(4) : -1;
        builder_t *entries = NULL, *keys = NULL;
        if (c->fail) break;
        if (b && is_map && (!(entries = builder(c, ei)) || !(keys = builder(c, ki)))) break;
        Py_ssize_t before = entries ? entries->length : 0;
        if (!b) {  /* skipped */
            rc = skip_blocks(c, r, item, is_map);
            break;
        }
        buf_t spans = {NULL, 0, 0};
        int got = blocks(c, r, item, keys, &spans);
        if (got == 0 && keys) got = unique_keys(c, &spans);
        PyMem_RawFree(spans.p);
        if (got < 0) break;
        rc = 0;
        if (entries) {  /* each entry a valid struct row (the end taken once: a program naming one builder as
                           both entries and keys must not chase its own rows) */
            Py_ssize_t end = keys->length;
            for (Py_ssize_t i = before; i < end && rc == 0; i++) rc = close_row(c, entries, 1);
        }
        if (rc == 0 && b) {
            builder_t *items = entries ? entries : (b->nchild ? &c->cols->b[b->child[0]] : NULL);
            if (!items) { rc = fail(c, ST_DECLINE, "a list builder without items"); break; }
            rc = push_offset(c, b, items->length);
            if (rc == 0) rc = close_row(c, b, 1);
        }
        break;
    }
    case OP_UNION: {  /* n, branch pcs... */
        int64_t nb = ARG(1), index;
        if (c->fail || read_long(c, r, &index) < 0) break;
        if (nb < 0 || nb > c->nprog) { rc = fail(c, ST_DECLINE, "a program gives %lld branches", (long long)nb); break; }
        if (index < 0 && index >= -nb) { rc = fail(c, ST_DECLINE, "a negative union index"); break; }  /* fastavro counts from the end */
        if (index < 0 || index >= nb) { rc = fail(c, ST_ERROR, "a union branch index of %lld (%lld branches)", (long long)index, (long long)nb); break; }
        rc = run(c, ARG(2 + index), r);
        break;
    }
    case OP_MEMBER: {  /* struct b of a union's members, member k, pc: member k set, the others null */
        TARGET(1);
        int64_t k = ARG(2), inner = ARG(3);
        if (c->fail || !b) { rc = b ? -1 : run(c, inner, r); break; }
        if (k < 0 || k >= b->nchild) { rc = fail(c, ST_DECLINE, "a member out of range"); break; }
        rc = run(c, inner, r);
        for (Py_ssize_t i = 0; i < b->nchild && rc == 0; i++)
            if (i != k) rc = append_null(c, &c->cols->b[b->child[i]]);
        if (rc == 0) rc = close_row(c, b, 1);
        break;
    }
    case OP_ERROR: {  /* a resolution error every such record meets: the message a const */
        int64_t k = ARG(1);
        if (c->fail) break;
        if (k < 0 || k >= c->nconst || !c->cdata[k]) { rc = fail(c, ST_DECLINE, "a program names const %lld", (long long)k); break; }
        rc = fail(c, ST_ERROR, "%.*s", (int)(c->clen[k] > 180 ? 180 : c->clen[k]), (const char *)c->cdata[k]);
        break;
    }
    case OP_DEFAULT: {  /* a reader field the writer lacks: its default, encoded once, read by pc */
        int64_t k = ARG(1), inner = ARG(2);
        if (c->fail) break;
        if (k < 0 || k >= c->nconst || !c->cdata[k]) { rc = fail(c, ST_DECLINE, "a program names const %lld", (long long)k); break; }
        cur_t d = {c->cdata[k], c->cdata[k] + c->clen[k], c->clen[k]};
        rc = run(c, inner, &d);
        break;
    }
    default:
        rc = fail(c, ST_DECLINE, "an unknown op %lld", (long long)c->prog[pc]);
    }
    c->depth--;
    if (rc < 0 && !c->fail) fail(c, ST_DECLINE, "a program failed without saying why");
    return rc;
}

static void snapshot(Columns *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        builder_t *b = &self->b[i];
        self->snap[i] = (snap_t){b->length, b->nulls, b->valid.len, b->data.len, b->offs.len};
    }
}

static void rollback(Columns *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        builder_t *b = &self->b[i];
        snap_t s = self->snap[i];
        b->length = s.length; b->nulls = s.nulls; b->valid.len = s.valid; b->data.len = s.data; b->offs.len = s.offs;
    }
}

static void columns_clear(Columns *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        PyMem_RawFree(self->b[i].valid.p);
        PyMem_RawFree(self->b[i].data.p);
        PyMem_RawFree(self->b[i].offs.p);
        PyMem_Free(self->b[i].child);
    }
    PyMem_Free(self->b);
    PyMem_Free(self->snap);
    self->b = NULL;
    self->snap = NULL;
    self->n = 0;
}

static void columns_dealloc(Columns *self) {
    columns_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Columns(spec): spec a tuple of (kind, (child index, ...)) per builder, the root first */
static int columns_init(Columns *self, PyObject *args, PyObject *Py_UNUSED(kw)) {
    PyObject *spec;
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &spec)) return -1;
    columns_clear(self);
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    if (n < 1) { PyErr_SetString(PyExc_ValueError, "a spec of at least one builder"); return -1; }
    self->b = PyMem_Calloc((size_t)n, sizeof(builder_t));
    self->snap = PyMem_Calloc((size_t)n, sizeof(snap_t));
    if (!self->b || !self->snap) { PyErr_NoMemory(); return -1; }
    self->n = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int kind;
        PyObject *children;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, i), "iO!", &kind, &PyTuple_Type, &children)) return -1;
        if (kind < K_NULL || kind > K_LIST) { PyErr_Format(PyExc_ValueError, "an unknown kind %d", kind); return -1; }
        builder_t *b = &self->b[i];
        b->kind = kind;
        b->nchild = PyTuple_GET_SIZE(children);
        if ((kind == K_LIST && b->nchild != 1) || (kind != K_LIST && kind != K_STRUCT && b->nchild)) {
            PyErr_SetString(PyExc_ValueError, "a list has one child, a struct any, others none");
            return -1;
        }
        if (b->nchild) {
            b->child = PyMem_Calloc((size_t)b->nchild, sizeof(Py_ssize_t));
            if (!b->child) { PyErr_NoMemory(); return -1; }
        }
        for (Py_ssize_t k = 0; k < b->nchild; k++) {
            Py_ssize_t ci = PyLong_AsSsize_t(PyTuple_GET_ITEM(children, k));
            if (ci == -1 && PyErr_Occurred()) return -1;
            if (ci <= i || ci >= n) { PyErr_SetString(PyExc_ValueError, "a child comes after its parent"); return -1; }
            b->child[k] = ci;
        }
        if (kind == K_BIN || kind == K_LIST) {
            int32_t zero = 0;
            if (grow(&b->offs, 4) < 0) { PyErr_NoMemory(); return -1; }
            memcpy(b->offs.p, &zero, 4);
            b->offs.len = 4;
        }
    }
    return 0;
}

/* decode(program, consts, schema_id, valid, offsets, data, array_offset, start, stop) -> (index, status, info)
   program: int64 buffer; consts: a tuple of bytes or None; valid, offsets, data: a binary array's buffers
   (validity bitmap or None, int32 offsets, bytes) and its offset; rows [start, stop) of the array decoded. */
static PyObject *columns_decode(Columns *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) { PyErr_SetString(PyExc_TypeError, "9 arguments"); return NULL; }
    if (!PyTuple_Check(args[1])) { PyErr_SetString(PyExc_TypeError, "consts: a tuple"); return NULL; }
    long long want = PyLong_AsLongLong(args[2]);
    Py_ssize_t base = PyLong_AsSsize_t(args[6]), start = PyLong_AsSsize_t(args[7]), stop = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer prog = {0}, valid = {0}, offs = {0}, data = {0};
    PyObject *result = NULL;
    const uint8_t **cdata = NULL;
    Py_ssize_t *clen = NULL;
    if (PyObject_GetBuffer(args[0], &prog, PyBUF_SIMPLE) < 0) return NULL;
    if (args[3] != Py_None && PyObject_GetBuffer(args[3], &valid, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(args[4], &offs, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(args[5], &data, PyBUF_SIMPLE) < 0) goto done;
    if (base < 0 || start < 0 || stop < start || base > PY_SSIZE_T_MAX / 2 - stop || base + stop + 1 > offs.len / 4 ||
        (valid.buf && (base + stop + 7) / 8 > valid.len)) {
        PyErr_SetString(PyExc_ValueError, "start and stop outside the column's buffers");
        goto done;
    }
    Py_ssize_t nconst = PyTuple_GET_SIZE(args[1]);
    cdata = PyMem_Calloc((size_t)nconst + 1, sizeof *cdata);
    clen = PyMem_Calloc((size_t)nconst + 1, sizeof *clen);
    if (!cdata || !clen) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < nconst; k++) {
        PyObject *o = PyTuple_GET_ITEM(args[1], k);
        if (PyBytes_Check(o)) { cdata[k] = (const uint8_t *)PyBytes_AS_STRING(o); clen[k] = PyBytes_GET_SIZE(o); }
        else if (o != Py_None) { PyErr_SetString(PyExc_TypeError, "consts: bytes or None"); goto done; }
    }
    ctx_t c = {self, (const int64_t *)prog.buf, prog.len / 8, cdata, clen, nconst, 0, 0, {0}};
    if (c.nprog < 1) { PyErr_SetString(PyExc_ValueError, "an empty program"); goto done; }
    const int32_t *off = (const int32_t *)offs.buf;
    const uint8_t *bytes = data.buf, *bits = valid.buf;
    Py_ssize_t i = start;
    int status = ST_DONE;
    long long other = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < stop; i++) {
        Py_ssize_t at = base + i;
        if (bits && !(bits[at >> 3] & (1u << (at & 7)))) {  /* a null value (a tombstone): a null row */
            snapshot(self);
            if (append_null(&c, &self->b[0]) < 0) { rollback(self); status = c.fail; break; }
            continue;
        }
        int32_t a = off[at], z = off[at + 1];
        if (a < 0 || z < a || z > data.len) { status = ST_DECLINE; strcpy(c.msg, "offsets outside the column"); break; }
        const uint8_t *p = bytes + a;
        if (z - a < HEADER || p[0] != 0) { status = ST_FRAMING; break; }
        long long sid = ((long long)p[1] << 24) | (p[2] << 16) | (p[3] << 8) | p[4];
        if (sid != want) { status = ST_SCHEMA; other = sid; break; }
        cur_t r = {p + HEADER, bytes + z, z - a - HEADER};
        snapshot(self);
        c.fail = 0;
        c.depth = 0;
        if (run(&c, c.prog[0], &r) < 0) { rollback(self); status = c.fail ? c.fail : ST_DECLINE; break; }
    }
    Py_END_ALLOW_THREADS
    if (status == ST_SCHEMA) result = Py_BuildValue("(nil)", i, status, (long)other);
    else if (status == ST_ERROR || status == ST_DECLINE) result = Py_BuildValue("(nis)", i, status, c.msg);
    else result = Py_BuildValue("(niO)", i, status, Py_None);
done:
    PyMem_Free(cdata);
    PyMem_Free(clen);
    PyBuffer_Release(&prog);
    if (valid.obj) PyBuffer_Release(&valid);
    if (offs.obj) PyBuffer_Release(&offs);
    if (data.obj) PyBuffer_Release(&data);
    return result;
}

/* a null row at the root (a permissive column's undecodable record) */
static PyObject *columns_append_null(Columns *self, PyObject *Py_UNUSED(unused)) {
    ctx_t c = {.cols = self};
    if (append_null(&c, &self->b[0]) < 0) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *take(buf_t *b) {
    return PyBytes_FromStringAndSize((const char *)b->p, b->len);
}

/* finish() -> [(length, null count, validity bytes or None, data bytes, offsets bytes), ...] per builder */
static PyObject *columns_finish(Columns *self, PyObject *Py_UNUSED(unused)) {
    PyObject *out = PyList_New(self->n);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        builder_t *b = &self->b[i];
        PyObject *valid = b->nulls ? take(&b->valid) : (Py_INCREF(Py_None), Py_None);
        PyObject *item = valid ? Py_BuildValue("(nnNNN)", b->length, b->nulls, valid, take(&b->data), take(&b->offs)) : NULL;
        if (!item) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

static PyMethodDef columns_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))columns_decode, METH_FASTCALL, NULL},
    {"append_null", (PyCFunction)columns_append_null, METH_NOARGS, NULL},
    {"finish", (PyCFunction)columns_finish, METH_NOARGS, NULL},
    {NULL},
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fsm_consumer.schemas._cavro.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)columns_init,
    .tp_dealloc = (destructor)columns_dealloc,
    .tp_methods = columns_methods,
};

static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_cavro", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__cavro(void) {
    if (PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&mod);
    if (!m) return NULL;
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) { Py_DECREF(&ColumnsType); Py_DECREF(m); return NULL; }
    return m;
}
