/*
 * gguf.c: GGUF reader (mmap + full validation) and streaming writer.
 *
 * The reader walks the file once with a bounds-checked cursor. Every read
 * goes through cur_need(), which compares against the bytes left, so no
 * count, length or offset taken from the file is used before it is checked.
 * Arrays are sized as entries are actually parsed (each entry consumes file
 * bytes), so a huge count in the header never turns into a huge allocation.
 * After the tensor infos come the cross checks: duplicate keys and names
 * (by sorting), general.alignment, tensor extents against the file size and
 * overlapping tensor data.
 *
 * The writer keeps metadata values already encoded (the bytes that follow
 * the value type in the file) and tensor infos in memory, then streams the
 * header and the tensor data through a large stdio buffer.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"

/* Deepest nesting of arrays accepted (an array of scalars is depth 1). */
#define GGUF_MAX_ARRAY_DEPTH 8
/* Longest tensor name the reader accepts (GGUF spec) and the writer emits
 * (llama.cpp rejects names of GGML_MAX_NAME = 64 bytes or more). */
#define GGUF_MAX_NAME_READ 64
#define GGUF_MAX_NAME_WRITE 63
/* Smallest encodings, used to bound counts by the bytes left. */
#define GGUF_MIN_KV_BYTES 13     /* key length, >= 1 key byte, type, >= 1 value byte */
#define GGUF_MIN_TINFO_BYTES 33  /* name length, >= 1 name byte, n_dims, ne[0], type, offset */
#define GGUF_MIN_ARR_BYTES 12    /* element type + count of an (empty) array */
#define GGUF_ALIGNMENT_KEY "general.alignment"
/* Longest key or name printed in a message. */
#define GGUF_PRINT_MAX 80

#define SHOWN_BYTES (4 * GGUF_PRINT_MAX + 8)

typedef unsigned long long ull; /* for printing uint64_t with %llu */

static const char *const vtype_names[BT_GGUF_VTYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};

static const char *vtype_name(uint32_t t)
{
    return t < BT_GGUF_VTYPE_COUNT ? vtype_names[t] : "unknown";
}

/* Encoded size of a fixed-size value type, 0 for STRING, ARRAY and unknown. */
static uint64_t vtype_size(uint32_t t)
{
    switch (t) {
    case BT_GGUF_UINT8: case BT_GGUF_INT8: case BT_GGUF_BOOL: return 1;
    case BT_GGUF_UINT16: case BT_GGUF_INT16: return 2;
    case BT_GGUF_UINT32: case BT_GGUF_INT32: case BT_GGUF_FLOAT32: return 4;
    case BT_GGUF_UINT64: case BT_GGUF_INT64: case BT_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

uint64_t bt_gguf_kv_raw(const bt_gguf_kv_t *kv, const uint8_t **p)
{
    *p = (const uint8_t *)kv->key.ptr + kv->key.len + 4; /* the key, then the u32 value type */
    if (kv->type == BT_GGUF_STRING)
        return 8 + kv->v.str.len;
    if (kv->type == BT_GGUF_ARRAY)
        return 12 + kv->arr_bytes;
    return vtype_size(kv->type);
}

/* Little-endian loads, independent of the host's byte order. */
static uint64_t load_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A key or name from the file made safe to print: at most GGUF_PRINT_MAX
 * bytes, anything but printable ASCII as \xNN (so a message stays one
 * line), "..." when cut. Returns buf (SHOWN_BYTES long). */
static const char *shown(bt_gguf_str_t s, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t n = s.len > GGUF_PRINT_MAX ? GGUF_PRINT_MAX : s.len;
    char *o = buf;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
            *o++ = (char)ch;
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[ch >> 4];
            *o++ = hex[ch & 15];
        }
    }
    if (n < s.len) {
        memcpy(o, "...", 3);
        o += 3;
    }
    *o = '\0';
    return buf;
}

/* shown() into a temporary that lives until the end of the enclosing block. */
#define SHOW(s) shown((s), (char[SHOWN_BYTES]){0})

static bool is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* Rounds x up to a multiple of align (a power of two); -1 on overflow. */
static int align_up(uint64_t x, uint64_t align, uint64_t *out)
{
    uint64_t r;
    if (bt_add_u64(x, align - 1, &r) != 0)
        return -1;
    *out = r & ~(align - 1);
    return 0;
}

/* Grows *arr (of elem-sized entries) to hold at least n; -1 when out of memory. */
static int reserve(void **arr, uint64_t *cap, uint64_t n, size_t elem)
{
    if (n <= *cap)
        return 0;
    uint64_t nc = *cap != 0 ? *cap : 16;
    while (nc < n)
        nc *= 2;
    if (nc > SIZE_MAX / elem)
        return -1;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (p == NULL)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

/* ---- the cursor ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *label; /* path, or "writer" when checking a value to be written */
    const char *whole; /* "file" or "value", for truncation messages */
    char ctx[SHOWN_BYTES + 32]; /* what is being read: "metadata key 'x'", "tensor 3 'y'" */
} cursor_t;

static void cur_error(const cursor_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Logs the one message of a failure: "gguf: LABEL: ...". */
static void cur_error(const cursor_t *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bt_log_error("gguf: %s: %s", c->label, msg);
}

static uint64_t cur_left(const cursor_t *c) { return c->size - c->pos; }

static bt_status_t cur_need(cursor_t *c, uint64_t n, const char *what)
{
    if (n > cur_left(c)) {
        cur_error(c, "truncated: %s%s%s needs %llu bytes at offset %llu but %s has %llu",
                  c->ctx, c->ctx[0] ? " " : "", what, (ull)n, (ull)c->pos, c->whole,
                  (ull)c->size);
        return BT_ERR_FORMAT;
    }
    return BT_OK;
}

static bt_status_t cur_uint(cursor_t *c, unsigned n, const char *what, uint64_t *out)
{
    bt_status_t st = cur_need(c, n, what);
    if (st != BT_OK)
        return st;
    *out = load_le(c->base + c->pos, n);
    c->pos += n;
    return BT_OK;
}

static bt_status_t cur_u32(cursor_t *c, const char *what, uint32_t *out)
{
    uint64_t v;
    bt_status_t st = cur_uint(c, 4, what, &v);
    if (st == BT_OK)
        *out = (uint32_t)v;
    return st;
}

static bt_status_t cur_u64(cursor_t *c, const char *what, uint64_t *out)
{
    return cur_uint(c, 8, what, out);
}

/* A gguf string: u64 length, then that many bytes. */
static bt_status_t cur_str(cursor_t *c, const char *what, bt_gguf_str_t *out)
{
    uint64_t len;
    bt_status_t st = cur_u64(c, what, &len);
    if (st != BT_OK)
        return st;
    if (len > cur_left(c)) {
        cur_error(c, "truncated: %s%s%s of length %llu at offset %llu runs past the end "
                  "(%s has %llu bytes)", c->ctx, c->ctx[0] ? " " : "", what, (ull)len,
                  (ull)c->pos, c->whole, (ull)c->size);
        return BT_ERR_FORMAT;
    }
    out->len = len;
    out->ptr = (const char *)c->base + c->pos;
    c->pos += len;
    return BT_OK;
}

/* ---- metadata values ---- */

static bt_status_t parse_array(cursor_t *c, int depth, bt_gguf_kv_t *kv);

/* Checks a run of n BOOL bytes at p. */
static bt_status_t check_bools(cursor_t *c, const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        if (p[i] > 1) {
            cur_error(c, "%s bool element %llu is %u (must be 0 or 1)", c->ctx, (ull)i, p[i]);
            return BT_ERR_FORMAT;
        }
    }
    return BT_OK;
}

/* Parses one value of the given type at the cursor. kv receives the decoded
 * scalar, string or array description (kv->type is left to the caller). */
static bt_status_t parse_value(cursor_t *c, uint32_t type, int depth, bt_gguf_kv_t *kv)
{
    bt_status_t st;
    uint64_t raw;

    if (type == BT_GGUF_STRING)
        return cur_str(c, "string value", &kv->v.str);
    if (type == BT_GGUF_ARRAY)
        return parse_array(c, depth + 1, kv);
    uint64_t size = vtype_size(type);
    if (size == 0) {
        cur_error(c, "%s has unknown value type %u", c->ctx, type);
        return BT_ERR_FORMAT;
    }
    st = cur_uint(c, (unsigned)size, "value", &raw);
    if (st != BT_OK)
        return st;
    switch (type) {
    case BT_GGUF_BOOL:
        if (raw > 1) {
            cur_error(c, "%s bool value is %llu (must be 0 or 1)", c->ctx, (ull)raw);
            return BT_ERR_FORMAT;
        }
        kv->v.u64 = raw;
        break;
    case BT_GGUF_UINT8: case BT_GGUF_UINT16: case BT_GGUF_UINT32: case BT_GGUF_UINT64:
        kv->v.u64 = raw;
        break;
    case BT_GGUF_INT8: kv->v.i64 = (int8_t)raw; break;
    case BT_GGUF_INT16: kv->v.i64 = (int16_t)raw; break;
    case BT_GGUF_INT32: kv->v.i64 = (int32_t)raw; break;
    case BT_GGUF_INT64: kv->v.i64 = (int64_t)raw; break;
    case BT_GGUF_FLOAT32: {
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, sizeof f);
        kv->v.f64 = f;
        break;
    }
    case BT_GGUF_FLOAT64:
        memcpy(&kv->v.f64, &raw, sizeof kv->v.f64);
        break;
    }
    return BT_OK;
}

/* Parses an array (element type, count, elements) at depth (1 = not nested).
 * Nested arrays are validated recursively; kv (may be NULL for nested ones)
 * receives the element type, count and the span of the element bytes. */
static bt_status_t parse_array(cursor_t *c, int depth, bt_gguf_kv_t *kv)
{
    bt_status_t st;
    uint32_t et;
    uint64_t n;

    if (depth > GGUF_MAX_ARRAY_DEPTH) {
        cur_error(c, "%s has arrays nested more than %d deep (at offset %llu)", c->ctx,
                  GGUF_MAX_ARRAY_DEPTH, (ull)c->pos);
        return BT_ERR_FORMAT;
    }
    if ((st = cur_u32(c, "array element type", &et)) != BT_OK)
        return st;
    if (et >= BT_GGUF_VTYPE_COUNT) {
        cur_error(c, "%s has unknown array element type %u", c->ctx, et);
        return BT_ERR_FORMAT;
    }
    if ((st = cur_u64(c, "array count", &n)) != BT_OK)
        return st;
    uint64_t start = c->pos;
    uint64_t esize = vtype_size(et);
    if (esize != 0) {
        uint64_t bytes;
        if (bt_mul_u64(n, esize, &bytes) != 0) {
            cur_error(c, "%s array count %llu x %s size %llu overflows", c->ctx, (ull)n,
                      vtype_name(et), (ull)esize);
            return BT_ERR_FORMAT;
        }
        if (bytes > cur_left(c)) {
            cur_error(c, "truncated: %s array of %llu %s needs %llu bytes at offset %llu "
                      "but %s has %llu", c->ctx, (ull)n, vtype_name(et), (ull)bytes,
                      (ull)c->pos, c->whole, (ull)c->size);
            return BT_ERR_FORMAT;
        }
        if (et == BT_GGUF_BOOL && (st = check_bools(c, c->base + c->pos, n)) != BT_OK)
            return st;
        c->pos += bytes;
    } else {
        /* Strings need at least their 8-byte length, arrays their 12-byte head. */
        uint64_t min = et == BT_GGUF_STRING ? 8 : GGUF_MIN_ARR_BYTES;
        if (n > cur_left(c) / min) {
            cur_error(c, "%s array count %llu of %s is impossible: only %llu bytes left "
                      "(each element needs at least %llu)", c->ctx, (ull)n, vtype_name(et),
                      (ull)cur_left(c), (ull)min);
            return BT_ERR_FORMAT;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (et == BT_GGUF_STRING) {
                bt_gguf_str_t s;
                st = cur_str(c, "array string", &s);
            } else {
                st = parse_array(c, depth + 1, NULL);
            }
            if (st != BT_OK)
                return st;
        }
    }
    if (kv != NULL) {
        kv->arr_type = (bt_gguf_vtype_t)et;
        kv->arr_n = n;
        kv->arr_data = c->base + start;
        kv->arr_bytes = c->pos - start;
    }
    return BT_OK;
}

/* One key/value pair: key string, value type, value. */
static bt_status_t parse_kv(cursor_t *c, uint64_t index, bt_gguf_kv_t *kv)
{
    bt_status_t st;
    uint32_t type;

    memset(kv, 0, sizeof *kv);
    snprintf(c->ctx, sizeof c->ctx, "metadata entry %llu", (ull)index);
    if ((st = cur_str(c, "key", &kv->key)) != BT_OK)
        return st;
    if (kv->key.len == 0) {
        cur_error(c, "metadata entry %llu has an empty key", (ull)index);
        return BT_ERR_FORMAT;
    }
    snprintf(c->ctx, sizeof c->ctx, "metadata key '%s'", SHOW(kv->key));
    if ((st = cur_u32(c, "value type", &type)) != BT_OK)
        return st;
    if (type >= BT_GGUF_VTYPE_COUNT) {
        cur_error(c, "%s has unknown value type %u", c->ctx, type);
        return BT_ERR_FORMAT;
    }
    kv->type = (bt_gguf_vtype_t)type;
    return parse_value(c, type, 0, kv);
}

/* ---- tensor infos ---- */

static bt_status_t parse_tensor_info(cursor_t *c, uint64_t index, uint64_t alignment,
                                     bt_gguf_tensor_t *t)
{
    bt_status_t st;

    memset(t, 0, sizeof *t);
    snprintf(c->ctx, sizeof c->ctx, "tensor info %llu", (ull)index);
    if ((st = cur_str(c, "name", &t->name)) != BT_OK)
        return st;
    if (t->name.len == 0) {
        cur_error(c, "tensor info %llu has an empty name", (ull)index);
        return BT_ERR_FORMAT;
    }
    if (t->name.len > GGUF_MAX_NAME_READ) {
        cur_error(c, "tensor info %llu name '%s' is %llu bytes long (at most %d)",
                  (ull)index, SHOW(t->name), (ull)t->name.len, GGUF_MAX_NAME_READ);
        return BT_ERR_FORMAT;
    }
    snprintf(c->ctx, sizeof c->ctx, "tensor '%s'", SHOW(t->name));
    const char *name = c->ctx; /* "tensor 'x'" for the messages below */

    if ((st = cur_u32(c, "n_dims", &t->n_dims)) != BT_OK)
        return st;
    if (t->n_dims == 0 || t->n_dims > BT_GGUF_MAX_DIMS) {
        cur_error(c, "%s has n_dims %u (must be 1..%d)", name, t->n_dims, BT_GGUF_MAX_DIMS);
        return BT_ERR_FORMAT;
    }
    for (uint32_t d = 0; d < BT_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    t->n_elements = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if ((st = cur_u64(c, "dimension", &t->ne[d])) != BT_OK)
            return st;
        /* ggml keeps dims as int64; an empty tensor is refused outright. */
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX) {
            cur_error(c, "%s ne[%u] is %llu (must be 1..2^63-1)", name, d, (ull)t->ne[d]);
            return BT_ERR_FORMAT;
        }
        if (bt_mul_u64(t->n_elements, t->ne[d], &t->n_elements) != 0 ||
            t->n_elements > (uint64_t)INT64_MAX) {
            cur_error(c, "%s element count overflows at ne[%u] = %llu", name, d,
                      (ull)t->ne[d]);
            return BT_ERR_FORMAT;
        }
    }
    if ((st = cur_u32(c, "type", &t->type)) != BT_OK)
        return st;
    const bt_type_info_t *ti = bt_type_info(t->type);
    if (ti == NULL) {
        cur_error(c, "%s has unknown tensor type id %u", name, t->type);
        return BT_ERR_UNSUPPORTED;
    }
    uint64_t bs = (uint64_t)ti->block_size;
    if (t->ne[0] % bs != 0) {
        cur_error(c, "%s ne[0] = %llu is not a multiple of the %s block size %llu", name,
                  (ull)t->ne[0], ti->name, (ull)bs);
        return BT_ERR_FORMAT;
    }
    /* n_bytes = ne0/bs * block_bytes * ne1 * ne2 * ne3 */
    uint64_t nb = t->ne[0] / bs;
    if (bt_mul_u64(nb, (uint64_t)ti->block_bytes, &nb) != 0 ||
        bt_mul_u64(nb, t->ne[1], &nb) != 0 || bt_mul_u64(nb, t->ne[2], &nb) != 0 ||
        bt_mul_u64(nb, t->ne[3], &nb) != 0) {
        cur_error(c, "%s byte size overflows (%llu x %llu x %llu x %llu of %s)", name,
                  (ull)t->ne[0], (ull)t->ne[1], (ull)t->ne[2], (ull)t->ne[3], ti->name);
        return BT_ERR_FORMAT;
    }
    t->n_bytes = nb;
    if ((st = cur_u64(c, "offset", &t->offset)) != BT_OK)
        return st;
    if (t->offset % alignment != 0) {
        cur_error(c, "%s offset %llu is not a multiple of the alignment %llu", name,
                  (ull)t->offset, (ull)alignment);
        return BT_ERR_FORMAT;
    }
    return BT_OK;
}

/* ---- sorting helpers for the cross checks ---- */

static int str_cmp(bt_gguf_str_t a, bt_gguf_str_t b)
{
    uint64_t n = a.len < b.len ? a.len : b.len;
    int r = n != 0 ? memcmp(a.ptr, b.ptr, (size_t)n) : 0;
    if (r != 0)
        return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* Pointer comparison breaks ties so that equal names keep file order. */
static int cmp_ptr(const void *a, const void *b) { return a < b ? -1 : a > b; }

static int cmp_kv_key(const void *pa, const void *pb)
{
    const bt_gguf_kv_t *a = *(const bt_gguf_kv_t *const *)pa;
    const bt_gguf_kv_t *b = *(const bt_gguf_kv_t *const *)pb;
    int r = str_cmp(a->key, b->key);
    return r != 0 ? r : cmp_ptr(a, b);
}

static int cmp_tensor_name(const void *pa, const void *pb)
{
    const bt_gguf_tensor_t *a = *(const bt_gguf_tensor_t *const *)pa;
    const bt_gguf_tensor_t *b = *(const bt_gguf_tensor_t *const *)pb;
    int r = str_cmp(a->name, b->name);
    return r != 0 ? r : cmp_ptr(a, b);
}

static int cmp_tensor_offset(const void *pa, const void *pb)
{
    const bt_gguf_tensor_t *a = *(const bt_gguf_tensor_t *const *)pa;
    const bt_gguf_tensor_t *b = *(const bt_gguf_tensor_t *const *)pb;
    if (a->offset != b->offset)
        return a->offset < b->offset ? -1 : 1;
    return cmp_ptr(a, b);
}

/* ---- open ---- */

/* The public struct plus what only this file needs. */
typedef struct gguf_impl {
    bt_gguf_t pub;
    const bt_gguf_tensor_t **by_name; /* [n_tensors] sorted by name, for bsearch */
    bool owns_map;                    /* mapped by bt_gguf_open (else borrowed) */
} gguf_impl_t;

static bt_status_t check_duplicate_keys(cursor_t *c, bt_gguf_t *g)
{
    if (g->n_kv < 2)
        return BT_OK;
    const bt_gguf_kv_t **v = malloc((size_t)g->n_kv * sizeof *v);
    if (v == NULL) {
        cur_error(c, "out of memory sorting %llu metadata keys", (ull)g->n_kv);
        return BT_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        v[i] = &g->kv[i];
    qsort(v, (size_t)g->n_kv, sizeof *v, cmp_kv_key);
    bt_status_t st = BT_OK;
    for (uint64_t i = 1; i < g->n_kv; i++) {
        if (str_cmp(v[i - 1]->key, v[i]->key) == 0) {
            cur_error(c, "duplicate metadata key '%s' (entries %llu and %llu)",
                      SHOW(v[i]->key), (ull)(v[i - 1] - g->kv), (ull)(v[i] - g->kv));
            st = BT_ERR_FORMAT;
            break;
        }
    }
    free(v);
    return st;
}

/* Reads general.alignment when present: a u32, a nonzero power of two. */
static bt_status_t read_alignment(cursor_t *c, bt_gguf_t *g)
{
    const bt_gguf_kv_t *kv = bt_gguf_find_kv(g, GGUF_ALIGNMENT_KEY);
    g->alignment = BT_GGUF_DEFAULT_ALIGNMENT;
    if (kv == NULL)
        return BT_OK;
    if (kv->type != BT_GGUF_UINT32) {
        cur_error(c, "%s has type %s (must be uint32)", GGUF_ALIGNMENT_KEY,
                  vtype_name(kv->type));
        return BT_ERR_FORMAT;
    }
    if (!is_pow2(kv->v.u64)) {
        cur_error(c, "%s is %llu (must be a nonzero power of two)", GGUF_ALIGNMENT_KEY,
                  (ull)kv->v.u64);
        return BT_ERR_FORMAT;
    }
    g->alignment = kv->v.u64;
    return BT_OK;
}

/* Extents against the file, then duplicate names and overlaps (by sorting). */
static bt_status_t check_tensors(cursor_t *c, gguf_impl_t *im)
{
    bt_gguf_t *g = &im->pub;
    if (g->n_tensors == 0)
        return BT_OK;
    if (g->data_offset > g->file_size) {
        cur_error(c, "data section starts at byte %llu but file has %llu",
                  (ull)g->data_offset, (ull)g->file_size);
        return BT_ERR_FORMAT;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        bt_gguf_tensor_t *t = &g->tensors[i];
        uint64_t start, end;
        if (bt_add_u64(g->data_offset, t->offset, &start) != 0 ||
            bt_add_u64(start, t->n_bytes, &end) != 0) {
            cur_error(c, "tensor '%s' offset %llu + size %llu overflows",
                      SHOW(t->name), (ull)t->offset, (ull)t->n_bytes);
            return BT_ERR_FORMAT;
        }
        if (end > g->file_size) {
            cur_error(c, "tensor '%s' ends at byte %llu but file has %llu",
                      SHOW(t->name), (ull)end, (ull)g->file_size);
            return BT_ERR_FORMAT;
        }
        t->data = g->map + start;
    }

    const bt_gguf_tensor_t **v = malloc((size_t)g->n_tensors * sizeof *v);
    if (v == NULL) {
        cur_error(c, "out of memory indexing %llu tensors", (ull)g->n_tensors);
        return BT_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        v[i] = &g->tensors[i];
    qsort(v, (size_t)g->n_tensors, sizeof *v, cmp_tensor_offset);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const bt_gguf_tensor_t *a = v[i - 1], *b = v[i];
        if (a->offset + a->n_bytes > b->offset) {
            cur_error(c, "tensors '%s' (data bytes %llu..%llu) and '%s' (from %llu) overlap",
                      SHOW(a->name), (ull)a->offset,
                      (ull)(a->offset + a->n_bytes), SHOW(b->name), (ull)b->offset);
            free(v);
            return BT_ERR_FORMAT;
        }
    }
    /* Re-sort by name: finds duplicates and becomes the lookup index. */
    qsort(v, (size_t)g->n_tensors, sizeof *v, cmp_tensor_name);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        if (str_cmp(v[i - 1]->name, v[i]->name) == 0) {
            cur_error(c, "duplicate tensor name '%s' (tensors %llu and %llu)",
                      SHOW(v[i]->name), (ull)(v[i - 1] - g->tensors),
                      (ull)(v[i] - g->tensors));
            free(v);
            return BT_ERR_FORMAT;
        }
    }
    im->by_name = v;
    return BT_OK;
}

/* Maps path read-only; logs and fails for anything but a nonempty regular file. */
static bt_status_t map_file(const char *path, const uint8_t **map, uint64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        bt_log_error("gguf: %s: cannot open: %s", path, strerror(errno));
        return BT_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        bt_log_error("gguf: %s: cannot stat: %s", path, strerror(errno));
        goto fail_io;
    }
    if (S_ISDIR(sb.st_mode)) {
        bt_log_error("gguf: %s: is a directory, not a GGUF file", path);
        goto fail_io;
    }
    if (!S_ISREG(sb.st_mode)) {
        bt_log_error("gguf: %s: not a regular file", path);
        goto fail_io;
    }
    if (sb.st_size == 0) {
        bt_log_error("gguf: %s: file is empty", path);
        close(fd);
        return BT_ERR_FORMAT;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        bt_log_error("gguf: %s: file of %llu bytes is too large to map", path,
                     (ull)sb.st_size);
        goto fail_io;
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        bt_log_error("gguf: %s: cannot mmap %llu bytes: %s", path, (ull)sb.st_size,
                     strerror(errno));
        goto fail_io;
    }
    close(fd);
    *map = p;
    *size = (uint64_t)sb.st_size;
    return BT_OK;

fail_io:
    close(fd);
    return BT_ERR_IO;
}

static bt_status_t parse_header(cursor_t *c, bt_gguf_t *g)
{
    bt_status_t st;
    uint32_t magic;

    if ((st = cur_u32(c, "magic", &magic)) != BT_OK)
        return st;
    if (magic != BT_GGUF_MAGIC) {
        cur_error(c, "bad magic 0x%08x (a GGUF file starts with \"GGUF\", 0x%08x)", magic,
                  BT_GGUF_MAGIC);
        return BT_ERR_FORMAT;
    }
    if ((st = cur_u32(c, "version", &g->version)) != BT_OK)
        return st;
    if (g->version != 2 && g->version != 3) {
        uint32_t v = g->version;
        bool swapped = (v & 0xffff) == 0 && (v >> 24) != 0; /* e.g. 0x03000000 */
        cur_error(c, "GGUF version %u is not supported (only 2 and 3%s)", v,
                  swapped ? "; this looks like a big-endian file" : "");
        return BT_ERR_UNSUPPORTED;
    }
    if ((st = cur_u64(c, "tensor count", &g->n_tensors)) != BT_OK ||
        (st = cur_u64(c, "metadata count", &g->n_kv)) != BT_OK)
        return st;
    if (g->n_tensors > cur_left(c) / GGUF_MIN_TINFO_BYTES) {
        cur_error(c, "tensor count %llu is impossible: %llu bytes follow the header and "
                  "each tensor info needs at least %d", (ull)g->n_tensors, (ull)cur_left(c),
                  GGUF_MIN_TINFO_BYTES);
        return BT_ERR_FORMAT;
    }
    if (g->n_kv > cur_left(c) / GGUF_MIN_KV_BYTES) {
        cur_error(c, "metadata count %llu is impossible: %llu bytes follow the header and "
                  "each entry needs at least %d", (ull)g->n_kv, (ull)cur_left(c),
                  GGUF_MIN_KV_BYTES);
        return BT_ERR_FORMAT;
    }
    return BT_OK;
}

/* Parses and validates g->map[0..g->file_size) into g (and im->by_name);
 * label names the file or buffer in messages. On failure frees what it
 * allocated (not the map, not g->path) and logs one message. */
static bt_status_t parse_all(gguf_impl_t *im, const char *label)
{
    bt_status_t st;
    uint64_t cap = 0;
    bt_gguf_t *g = &im->pub;

    cursor_t c = {.base = g->map, .size = g->file_size, .label = label, .whole = "file"};
    if ((st = parse_header(&c, g)) != BT_OK)
        goto fail;

    /* Metadata. The count was bounded above; storage grows with what is
     * actually parsed. */
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if (reserve((void **)&g->kv, &cap, i + 1, sizeof *g->kv) != 0) {
            cur_error(&c, "out of memory for metadata entry %llu", (ull)i);
            st = BT_ERR_NOMEM;
            goto fail;
        }
        if ((st = parse_kv(&c, i, &g->kv[i])) != BT_OK)
            goto fail;
    }
    c.ctx[0] = '\0';
    if ((st = check_duplicate_keys(&c, g)) != BT_OK || (st = read_alignment(&c, g)) != BT_OK)
        goto fail;

    /* Tensor infos. */
    cap = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (reserve((void **)&g->tensors, &cap, i + 1, sizeof *g->tensors) != 0) {
            cur_error(&c, "out of memory for tensor info %llu", (ull)i);
            st = BT_ERR_NOMEM;
            goto fail;
        }
        if ((st = parse_tensor_info(&c, i, g->alignment, &g->tensors[i])) != BT_OK)
            goto fail;
    }
    c.ctx[0] = '\0';

    /* The data section starts at the next multiple of the alignment (which
     * may lie past the end of a file without tensors). */
    if (align_up(c.pos, g->alignment, &g->data_offset) != 0) {
        cur_error(&c, "data offset overflows");
        st = BT_ERR_FORMAT;
        goto fail;
    }
    if ((st = check_tensors(&c, im)) != BT_OK)
        goto fail;
    return BT_OK;

fail:
    free(g->tensors);
    free(g->kv);
    g->tensors = NULL;
    g->kv = NULL;
    return st;
}

bt_status_t bt_gguf_open(const char *path, bt_gguf_t **out)
{
    bt_status_t st;

    if (path == NULL || out == NULL) {
        bt_log_error("gguf: open: %s is NULL", path == NULL ? "path" : "out");
        return BT_ERR_ARG;
    }
    gguf_impl_t *im = calloc(1, sizeof *im);
    if (im == NULL) {
        bt_log_error("gguf: %s: out of memory", path);
        return BT_ERR_NOMEM;
    }
    bt_gguf_t *g = &im->pub;
    g->path = strdup(path);
    if (g->path == NULL) {
        bt_log_error("gguf: %s: out of memory", path);
        st = BT_ERR_NOMEM;
        goto fail_free;
    }
    if ((st = map_file(path, &g->map, &g->file_size)) != BT_OK)
        goto fail_free;
    im->owns_map = true;
    if ((st = parse_all(im, path)) != BT_OK)
        goto fail_close;

    *out = g;
    return BT_OK;

fail_close:
    munmap((void *)g->map, (size_t)g->file_size);
fail_free:
    free(g->path);
    free(im);
    return st;
}

bt_status_t bt_gguf_open_buffer(const void *data, size_t size, const char *label,
                                bt_gguf_t **out)
{
    bt_status_t st;

    if (label == NULL)
        label = "buffer";
    if ((data == NULL && size > 0) || out == NULL) {
        bt_log_error("gguf: %s: open_buffer: %s is NULL", label, out == NULL ? "out" : "data");
        return BT_ERR_ARG;
    }
    if (size == 0) {
        bt_log_error("gguf: %s: file is empty", label);
        return BT_ERR_FORMAT;
    }
    gguf_impl_t *im = calloc(1, sizeof *im);
    if (im == NULL) {
        bt_log_error("gguf: %s: out of memory", label);
        return BT_ERR_NOMEM;
    }
    bt_gguf_t *g = &im->pub;
    g->path = strdup(label);
    if (g->path == NULL) {
        bt_log_error("gguf: %s: out of memory", label);
        st = BT_ERR_NOMEM;
        goto fail_free;
    }
    g->map = data;
    g->file_size = (uint64_t)size;
    if ((st = parse_all(im, label)) != BT_OK)
        goto fail_free;

    *out = g;
    return BT_OK;

fail_free:
    free(g->path);
    free(im);
    return st;
}

bool bt_gguf_file_mapped(const bt_gguf_t *g) { return ((const gguf_impl_t *)g)->owns_map; }

void bt_gguf_close(bt_gguf_t *g)
{
    if (g == NULL)
        return;
    gguf_impl_t *im = (gguf_impl_t *)g;
    if (im->owns_map)
        munmap((void *)g->map, (size_t)g->file_size);
    free(im->by_name);
    free(g->tensors);
    free(g->kv);
    free(g->path);
    free(im);
}

/* ---- lookups and getters ---- */

bool bt_gguf_str_eq(bt_gguf_str_t s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

const bt_gguf_kv_t *bt_gguf_find_kv(const bt_gguf_t *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (bt_gguf_str_eq(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

static int cmp_name_key(const void *key, const void *elem)
{
    const bt_gguf_str_t *name = key;
    const bt_gguf_tensor_t *t = *(const bt_gguf_tensor_t *const *)elem;
    return str_cmp(*name, t->name);
}

const bt_gguf_tensor_t *bt_gguf_find_tensor(const bt_gguf_t *g, const char *name)
{
    const gguf_impl_t *im = (const gguf_impl_t *)g;
    if (g->n_tensors == 0)
        return NULL;
    bt_gguf_str_t key = {.len = strlen(name), .ptr = name};
    const bt_gguf_tensor_t *const *hit =
        bsearch(&key, im->by_name, (size_t)g->n_tensors, sizeof *im->by_name, cmp_name_key);
    return hit != NULL ? *hit : NULL;
}

/* Finds key for a getter: BT_ERR_ARG (silent) when absent. */
static bt_status_t getter_kv(const bt_gguf_t *g, const char *key, const bt_gguf_kv_t **kv)
{
    *kv = bt_gguf_find_kv(g, key);
    return *kv != NULL ? BT_OK : BT_ERR_ARG;
}

static bt_status_t wrong_type(const bt_gguf_t *g, const bt_gguf_kv_t *kv, const char *want)
{
    bt_log_error("gguf: %s: key '%s' has type %s but %s was expected", g->path,
                 SHOW(kv->key), vtype_name(kv->type), want);
    return BT_ERR_FORMAT;
}

bt_status_t bt_gguf_get_u32(const bt_gguf_t *g, const char *key, uint32_t *out)
{
    const bt_gguf_kv_t *kv;
    if (getter_kv(g, key, &kv) != BT_OK)
        return BT_ERR_ARG;
    switch (kv->type) {
    case BT_GGUF_UINT8: case BT_GGUF_UINT16: case BT_GGUF_UINT32: case BT_GGUF_UINT64:
        if (kv->v.u64 > UINT32_MAX) {
            bt_log_error("gguf: %s: key '%s' value %llu does not fit in uint32",
                         g->path, SHOW(kv->key), (ull)kv->v.u64);
            return BT_ERR_FORMAT;
        }
        *out = (uint32_t)kv->v.u64;
        return BT_OK;
    case BT_GGUF_INT8: case BT_GGUF_INT16: case BT_GGUF_INT32: case BT_GGUF_INT64:
        if (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX) {
            bt_log_error("gguf: %s: key '%s' value %lld does not fit in uint32",
                         g->path, SHOW(kv->key), (long long)kv->v.i64);
            return BT_ERR_FORMAT;
        }
        *out = (uint32_t)kv->v.i64;
        return BT_OK;
    default:
        return wrong_type(g, kv, "an integer");
    }
}

bt_status_t bt_gguf_get_f32(const bt_gguf_t *g, const char *key, float *out)
{
    const bt_gguf_kv_t *kv;
    if (getter_kv(g, key, &kv) != BT_OK)
        return BT_ERR_ARG;
    if (kv->type == BT_GGUF_FLOAT32) {
        *out = (float)kv->v.f64; /* exact: it was a float */
        return BT_OK;
    }
    if (kv->type == BT_GGUF_FLOAT64) {
        double d = kv->v.f64;
        /* Rounding to float is accepted; a finite value turning into an
         * infinity is not. */
        if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX)) {
            bt_log_error("gguf: %s: key '%s' value %g is out of float range",
                         g->path, SHOW(kv->key), d);
            return BT_ERR_FORMAT;
        }
        *out = (float)d;
        return BT_OK;
    }
    return wrong_type(g, kv, "float32 or float64");
}

bt_status_t bt_gguf_get_bool(const bt_gguf_t *g, const char *key, bool *out)
{
    const bt_gguf_kv_t *kv;
    if (getter_kv(g, key, &kv) != BT_OK)
        return BT_ERR_ARG;
    if (kv->type != BT_GGUF_BOOL)
        return wrong_type(g, kv, "bool");
    *out = kv->v.u64 != 0;
    return BT_OK;
}

bt_status_t bt_gguf_get_str(const bt_gguf_t *g, const char *key, bt_gguf_str_t *out)
{
    const bt_gguf_kv_t *kv;
    if (getter_kv(g, key, &kv) != BT_OK)
        return BT_ERR_ARG;
    if (kv->type != BT_GGUF_STRING)
        return wrong_type(g, kv, "string");
    *out = kv->v.str;
    return BT_OK;
}

bool bt_gguf_arr_next_str(const bt_gguf_kv_t *kv, uint64_t *pos, bt_gguf_str_t *out)
{
    /* *pos is a byte offset into the (validated) element bytes; the checks
     * only guard against a pos the caller changed. */
    if (kv->type != BT_GGUF_ARRAY || kv->arr_type != BT_GGUF_STRING)
        return false;
    if (*pos > kv->arr_bytes || kv->arr_bytes - *pos < 8)
        return false;
    uint64_t len = load_le(kv->arr_data + *pos, 8);
    if (len > kv->arr_bytes - *pos - 8)
        return false;
    out->len = len;
    out->ptr = (const char *)kv->arr_data + *pos + 8;
    *pos += 8 + len;
    return true;
}

uint64_t bt_gguf_header_hash(const bt_gguf_t *g)
{
    uint64_t n = g->data_offset < g->file_size ? g->data_offset : g->file_size;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 offset basis */
    for (uint64_t i = 0; i < n; i++) {
        h ^= g->map[i];
        h *= 0x100000001b3ull; /* FNV-1a 64 prime */
    }
    return h;
}

/* ---- writer ---- */

typedef struct wkv {
    char *key;
    bt_gguf_vtype_t type;
    uint8_t *val; /* the encoded value, as it follows the type in the file */
    uint64_t val_len;
} wkv_t;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[BT_GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset; /* set by begin */
} wtensor_t;

typedef enum wstate { W_COLLECT, W_WRITING, W_DONE, W_FAILED } wstate_t;

struct bt_gguf_writer {
    wkv_t *kv;
    uint64_t n_kv, cap_kv;
    wtensor_t *t;
    uint64_t n_t, cap_t;
    uint64_t alignment;
    wstate_t state;
    char *path;
    FILE *f;
    char *fbuf;       /* stdio buffer */
    uint64_t pos;     /* bytes written to the file so far */
    uint64_t next;    /* next tensor to write */
    int io_errno;     /* first write error, 0 when none */
};

#define WRITER_BUF_BYTES (4u << 20)

/* A growable byte buffer for encoding values. */
typedef struct bytes {
    uint8_t *p;
    uint64_t n, cap;
    bool oom;
} bytes_t;

static void put(bytes_t *b, const void *src, uint64_t n)
{
    if (b->oom || n == 0)
        return;
    if (n > UINT64_MAX - b->n || reserve((void **)&b->p, &b->cap, b->n + n, 1) != 0) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->n, src, (size_t)n);
    b->n += n;
}

static void put_le(bytes_t *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    put(b, tmp, n);
}

static void put_str(bytes_t *b, const char *s)
{
    size_t n = strlen(s);
    put_le(b, n, 8);
    put(b, s, n);
}

bt_status_t bt_gguf_writer_init(bt_gguf_writer_t **out)
{
    bt_gguf_writer_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        bt_log_error("gguf: writer: out of memory");
        return BT_ERR_NOMEM;
    }
    w->alignment = BT_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return BT_OK;
}

void bt_gguf_writer_free(bt_gguf_writer_t *w)
{
    if (w == NULL)
        return;
    if (w->f != NULL)
        fclose(w->f); /* an unfinished file is left as it is */
    for (uint64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (uint64_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w->fbuf);
    free(w->path);
    free(w);
}

static bt_status_t writer_collecting(const bt_gguf_writer_t *w, const char *what)
{
    if (w->state != W_COLLECT) {
        bt_log_error("gguf: writer: %s after bt_gguf_writer_begin()", what);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

/* Adds key with an encoded value (takes nothing: val is copied). */
static bt_status_t add_kv(bt_gguf_writer_t *w, const char *key, bt_gguf_vtype_t type,
                          const bytes_t *val)
{
    bt_status_t st;
    if ((st = writer_collecting(w, "metadata set")) != BT_OK)
        return st;
    if (key == NULL || key[0] == '\0') {
        bt_log_error("gguf: writer: empty metadata key");
        return BT_ERR_ARG;
    }
    if (val->oom) {
        bt_log_error("gguf: writer: out of memory encoding key '%s'", key);
        return BT_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) {
            bt_log_error("gguf: writer: duplicate metadata key '%s'", key);
            return BT_ERR_ARG;
        }
    }
    uint64_t alignment = 0;
    if (strcmp(key, GGUF_ALIGNMENT_KEY) == 0) {
        alignment = type == BT_GGUF_UINT32 ? load_le(val->p, 4) : 0;
        if (type != BT_GGUF_UINT32 || !is_pow2(alignment)) {
            bt_log_error("gguf: writer: %s must be a uint32 power of two (got %s %llu)",
                         GGUF_ALIGNMENT_KEY, vtype_name(type), (ull)alignment);
            return BT_ERR_ARG;
        }
    }
    if (reserve((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv) != 0)
        goto fail_nomem;
    wkv_t *kv = &w->kv[w->n_kv];
    kv->key = strdup(key);
    kv->val = malloc(val->n != 0 ? (size_t)val->n : 1);
    if (kv->key == NULL || kv->val == NULL) {
        free(kv->key);
        free(kv->val);
        goto fail_nomem;
    }
    if (val->n != 0)
        memcpy(kv->val, val->p, (size_t)val->n);
    kv->val_len = val->n;
    kv->type = type;
    w->n_kv++;
    if (alignment != 0)
        w->alignment = alignment;
    return BT_OK;

fail_nomem:
    bt_log_error("gguf: writer: out of memory adding key '%s'", key);
    return BT_ERR_NOMEM;
}

static bt_status_t set_scalar(bt_gguf_writer_t *w, const char *key, bt_gguf_vtype_t type,
                              uint64_t bits)
{
    bytes_t b = {0};
    put_le(&b, bits, (unsigned)vtype_size(type));
    bt_status_t st = add_kv(w, key, type, &b);
    free(b.p);
    return st;
}

bt_status_t bt_gguf_writer_set_u32(bt_gguf_writer_t *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, BT_GGUF_UINT32, v);
}

bt_status_t bt_gguf_writer_set_i32(bt_gguf_writer_t *w, const char *key, int32_t v)
{
    return set_scalar(w, key, BT_GGUF_INT32, (uint32_t)v);
}

bt_status_t bt_gguf_writer_set_f32(bt_gguf_writer_t *w, const char *key, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return set_scalar(w, key, BT_GGUF_FLOAT32, bits);
}

bt_status_t bt_gguf_writer_set_bool(bt_gguf_writer_t *w, const char *key, bool v)
{
    return set_scalar(w, key, BT_GGUF_BOOL, v ? 1 : 0);
}

bt_status_t bt_gguf_writer_set_str(bt_gguf_writer_t *w, const char *key, const char *v)
{
    if (v == NULL) {
        bt_log_error("gguf: writer: key '%s': string value is NULL", key ? key : "");
        return BT_ERR_ARG;
    }
    bytes_t b = {0};
    put_str(&b, v);
    bt_status_t st = add_kv(w, key, BT_GGUF_STRING, &b);
    free(b.p);
    return st;
}

bt_status_t bt_gguf_writer_set_arr(bt_gguf_writer_t *w, const char *key, bt_gguf_vtype_t elem_type,
                                   const void *data, uint64_t n)
{
    uint64_t esize = vtype_size(elem_type), bytes;
    if (esize == 0) {
        bt_log_error("gguf: writer: key '%s': array element type %s (%d) is not a fixed-size "
                     "scalar", key ? key : "", vtype_name(elem_type), (int)elem_type);
        return BT_ERR_ARG;
    }
    if (bt_mul_u64(n, esize, &bytes) != 0 || (n != 0 && data == NULL)) {
        bt_log_error("gguf: writer: key '%s': bad array of %llu %s", key ? key : "", (ull)n,
                     vtype_name(elem_type));
        return BT_ERR_ARG;
    }
    if (elem_type == BT_GGUF_BOOL) {
        const uint8_t *p = data;
        for (uint64_t i = 0; i < n; i++) {
            if (p[i] > 1) {
                bt_log_error("gguf: writer: key '%s': bool element %llu is %u (must be 0 or 1)",
                             key ? key : "", (ull)i, p[i]);
                return BT_ERR_ARG;
            }
        }
    }
    bytes_t b = {0};
    put_le(&b, (uint32_t)elem_type, 4);
    put_le(&b, n, 8);
    put(&b, data, bytes);
    bt_status_t st = add_kv(w, key, BT_GGUF_ARRAY, &b);
    free(b.p);
    return st;
}

bt_status_t bt_gguf_writer_set_arr_str(bt_gguf_writer_t *w, const char *key, const char *const *v,
                                       uint64_t n)
{
    if (n != 0 && v == NULL) {
        bt_log_error("gguf: writer: key '%s': string array is NULL", key ? key : "");
        return BT_ERR_ARG;
    }
    bytes_t b = {0};
    put_le(&b, BT_GGUF_STRING, 4);
    put_le(&b, n, 8);
    for (uint64_t i = 0; i < n; i++) {
        if (v[i] == NULL) {
            bt_log_error("gguf: writer: key '%s': string %llu is NULL", key ? key : "", (ull)i);
            free(b.p);
            return BT_ERR_ARG;
        }
        put_str(&b, v[i]);
    }
    bt_status_t st = add_kv(w, key, BT_GGUF_ARRAY, &b);
    free(b.p);
    return st;
}

bt_status_t bt_gguf_writer_set_raw(bt_gguf_writer_t *w, const char *key, bt_gguf_vtype_t type,
                                   const void *value, uint64_t n_bytes)
{
    if ((unsigned)type >= BT_GGUF_VTYPE_COUNT || (n_bytes != 0 && value == NULL)) {
        bt_log_error("gguf: writer: key '%s': bad raw value (type %d, %llu bytes)",
                     key ? key : "", (int)type, (ull)n_bytes);
        return BT_ERR_ARG;
    }
    /* The reader's own parser checks the value and that it is complete. */
    cursor_t c = {.base = value, .size = n_bytes, .label = "writer", .whole = "value"};
    snprintf(c.ctx, sizeof c.ctx, "key '%.80s'", key ? key : "");
    bt_gguf_kv_t kv;
    if (parse_value(&c, type, 0, &kv) != BT_OK)
        return BT_ERR_ARG;
    if (c.pos != n_bytes) {
        bt_log_error("gguf: writer: key '%s': %llu bytes after the %s value", key ? key : "",
                     (ull)(n_bytes - c.pos), vtype_name(type));
        return BT_ERR_ARG;
    }
    bytes_t b = {.p = (uint8_t *)value, .n = n_bytes, .cap = n_bytes}; /* only read */
    return add_kv(w, key, type, &b);
}

bt_status_t bt_gguf_writer_add_tensor(bt_gguf_writer_t *w, const char *name, uint32_t type,
                                      uint32_t n_dims, const uint64_t *ne)
{
    bt_status_t st;
    if ((st = writer_collecting(w, "tensor added")) != BT_OK)
        return st;
    size_t len = name != NULL ? strlen(name) : 0;
    if (len == 0 || len > GGUF_MAX_NAME_WRITE) {
        bt_log_error("gguf: writer: tensor name '%.80s' is %zu bytes (must be 1..%d)",
                     name ? name : "", len, GGUF_MAX_NAME_WRITE);
        return BT_ERR_ARG;
    }
    const bt_type_info_t *ti = bt_type_info(type);
    if (ti == NULL) {
        bt_log_error("gguf: writer: tensor '%s' has unknown type id %u", name, type);
        return BT_ERR_ARG;
    }
    if (n_dims == 0 || n_dims > BT_GGUF_MAX_DIMS || ne == NULL) {
        bt_log_error("gguf: writer: tensor '%s' has n_dims %u (must be 1..%d)", name, n_dims,
                     BT_GGUF_MAX_DIMS);
        return BT_ERR_ARG;
    }
    wtensor_t t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX || bt_mul_u64(n_el, ne[d], &n_el) != 0 ||
            n_el > (uint64_t)INT64_MAX) {
            bt_log_error("gguf: writer: tensor '%s' ne[%u] = %llu is zero or too large", name,
                         d, (ull)ne[d]);
            return BT_ERR_ARG;
        }
    }
    uint64_t row;
    if (bt_type_row_bytes(type, t.ne[0], &row) != 0 || bt_mul_u64(row, t.ne[1], &row) != 0 ||
        bt_mul_u64(row, t.ne[2], &row) != 0 || bt_mul_u64(row, t.ne[3], &row) != 0) {
        bt_log_error("gguf: writer: tensor '%s' ne[0] = %llu is not a multiple of the %s block "
                     "size %lld, or its size overflows", name, (ull)t.ne[0], ti->name,
                     (long long)ti->block_size);
        return BT_ERR_ARG;
    }
    t.n_bytes = row;
    for (uint64_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0) {
            bt_log_error("gguf: writer: duplicate tensor name '%s'", name);
            return BT_ERR_ARG;
        }
    }
    if (reserve((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t) != 0 ||
        (t.name = strdup(name)) == NULL) {
        bt_log_error("gguf: writer: out of memory adding tensor '%s'", name);
        return BT_ERR_NOMEM;
    }
    w->t[w->n_t++] = t;
    return BT_OK;
}

/* Writes n bytes, remembering the first error (reported by writer_check). */
static void wr(bt_gguf_writer_t *w, const void *p, uint64_t n)
{
    if (w->io_errno != 0 || n == 0)
        return;
    if (fwrite(p, 1, (size_t)n, w->f) != (size_t)n)
        w->io_errno = errno != 0 ? errno : EIO;
    else
        w->pos += n;
}

static void wr_le(bt_gguf_writer_t *w, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    wr(w, tmp, n);
}

static void wr_pad(bt_gguf_writer_t *w)
{
    static const uint8_t zeros[256];
    uint64_t end = w->pos;
    (void)align_up(w->pos, w->alignment, &end); /* no overflow: pos is a real file size */
    while (w->pos < end && w->io_errno == 0) {
        uint64_t n = end - w->pos < sizeof zeros ? end - w->pos : sizeof zeros;
        wr(w, zeros, n);
    }
}

/* Logs the first I/O error once and puts the writer in the failed state. */
static bt_status_t writer_check(bt_gguf_writer_t *w, const char *what)
{
    if (w->io_errno == 0)
        return BT_OK;
    bt_log_error("gguf: %s: %s failed: %s", w->path, what, strerror(w->io_errno));
    w->state = W_FAILED;
    return BT_ERR_IO;
}

bt_status_t bt_gguf_writer_begin(bt_gguf_writer_t *w, const char *path)
{
    bt_status_t st;
    if ((st = writer_collecting(w, "begin")) != BT_OK)
        return st;
    if (path == NULL) {
        bt_log_error("gguf: writer: path is NULL");
        return BT_ERR_ARG;
    }

    /* Offsets of the tensor data, each aligned, relative to the data section. */
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        if (bt_add_u64(off, w->t[i].n_bytes, &off) != 0 || align_up(off, w->alignment, &off)) {
            bt_log_error("gguf: %s: total tensor data size overflows at tensor '%s'", path,
                         w->t[i].name);
            return BT_ERR_ARG;
        }
    }

    w->path = strdup(path);
    w->fbuf = malloc(WRITER_BUF_BYTES);
    if (w->path == NULL || w->fbuf == NULL) {
        bt_log_error("gguf: %s: out of memory", path);
        st = BT_ERR_NOMEM;
        goto fail_free;
    }
    w->f = fopen(path, "wb");
    if (w->f == NULL) {
        bt_log_error("gguf: %s: cannot create: %s", path, strerror(errno));
        st = BT_ERR_IO;
        goto fail_free;
    }
    setvbuf(w->f, w->fbuf, _IOFBF, WRITER_BUF_BYTES);
    w->state = W_WRITING;
    errno = 0;

    wr_le(w, BT_GGUF_MAGIC, 4);
    wr_le(w, BT_GGUF_VERSION, 4);
    wr_le(w, w->n_t, 8);
    wr_le(w, w->n_kv, 8);
    for (uint64_t i = 0; i < w->n_kv; i++) {
        size_t klen = strlen(w->kv[i].key);
        wr_le(w, klen, 8);
        wr(w, w->kv[i].key, klen);
        wr_le(w, (uint32_t)w->kv[i].type, 4);
        wr(w, w->kv[i].val, w->kv[i].val_len);
    }
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor_t *t = &w->t[i];
        size_t nlen = strlen(t->name);
        wr_le(w, nlen, 8);
        wr(w, t->name, nlen);
        wr_le(w, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++)
            wr_le(w, t->ne[d], 8);
        wr_le(w, t->type, 4);
        wr_le(w, t->offset, 8);
    }
    wr_pad(w);
    return writer_check(w, "writing the header");

fail_free:
    free(w->fbuf);
    free(w->path);
    w->fbuf = NULL;
    w->path = NULL;
    return st;
}

bt_status_t bt_gguf_writer_write_tensor(bt_gguf_writer_t *w, const void *data, uint64_t n_bytes)
{
    if (w->state == W_FAILED)
        return BT_ERR_IO; /* already logged */
    if (w->state != W_WRITING || w->next >= w->n_t) {
        bt_log_error("gguf: writer: write_tensor with no declared tensor left to write "
                     "(%llu of %llu written)", (ull)w->next, (ull)w->n_t);
        return BT_ERR_ARG;
    }
    const wtensor_t *t = &w->t[w->next];
    if (n_bytes != t->n_bytes || data == NULL || n_bytes > SIZE_MAX) {
        bt_log_error("gguf: %s: tensor '%s' needs %llu bytes of data, got %llu%s", w->path,
                     t->name, (ull)t->n_bytes, (ull)n_bytes, data == NULL ? " (NULL)" : "");
        return BT_ERR_ARG;
    }
    errno = 0;
    wr(w, data, n_bytes);
    wr_pad(w);
    w->next++;
    return writer_check(w, "writing tensor data");
}

bt_status_t bt_gguf_writer_finish(bt_gguf_writer_t *w)
{
    if (w->state == W_FAILED)
        return BT_ERR_IO;
    if (w->state != W_WRITING) {
        bt_log_error("gguf: writer: finish without begin");
        return BT_ERR_ARG;
    }
    if (w->next != w->n_t) {
        bt_log_error("gguf: %s: only %llu of %llu declared tensors were written", w->path,
                     (ull)w->next, (ull)w->n_t);
        return BT_ERR_ARG;
    }
    errno = 0;
    if (fflush(w->f) != 0 && w->io_errno == 0)
        w->io_errno = errno != 0 ? errno : EIO;
    if (fclose(w->f) != 0 && w->io_errno == 0)
        w->io_errno = errno != 0 ? errno : EIO;
    w->f = NULL;
    if (writer_check(w, "closing") != BT_OK)
        return BT_ERR_IO;
    w->state = W_DONE;
    return BT_OK;
}
