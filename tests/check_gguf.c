/*
 * check_gguf.c: the GGUF reader and writer.
 *
 * "core" writes files with the writer and reads them back (every value
 * type, nested arrays, tensors of several types), checks the header hash
 * and the getters' conversions and errors. "limits" feeds the reader
 * corrupted and truncated files, built byte by byte or patched from a
 * valid one, and checks each is refused with the expected status and
 * exactly one "gguf: PATH: " log line, without a crash (run it under
 * ASan/valgrind to check that nothing outside the map is read).
 * "boundaries" holds every validation rule of the reader, the getters and
 * the model binding's tensor checks at its edge: the largest legal value
 * accepted and the smallest violation (one byte, element, count or
 * alignment unit past it) refused with its message.
 *
 * Files live in a mkdtemp directory under /tmp that main() removes.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "kernels/types.h"
#include "model.h"
#include "synth.h"
#include "testutil.h"

static char tmp_dir[] = "/tmp/check_gguf.XXXXXX";

/* A fresh file name in tmp_dir (unique within the run, forked or not). */
static void tmp_path(char *out, size_t cap, const char *tag)
{
    static unsigned counter;
    snprintf(out, cap, "%s/%s.%ld.%u.gguf", tmp_dir, tag, (long)getpid(), counter++);
}

/* ---- a raw byte builder for hand-made (and broken) files ---- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf_t;

static void b_raw(buf_t *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    if (n != 0)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void b_le(buf_t *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    b_raw(b, tmp, n);
}

static void b_u8(buf_t *b, uint8_t v) { b_le(b, v, 1); }
static void b_u16(buf_t *b, uint16_t v) { b_le(b, v, 2); }
static void b_u32(buf_t *b, uint32_t v) { b_le(b, v, 4); }
static void b_u64(buf_t *b, uint64_t v) { b_le(b, v, 8); }

static void b_str(buf_t *b, const char *s)
{
    b_u64(b, strlen(s));
    b_raw(b, s, strlen(s));
}

static void b_zeros(buf_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b_u8(b, 0);
}

static void b_pad(buf_t *b, size_t align)
{
    while (b->n % align != 0)
        b_u8(b, 0);
}

static void b_free(buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void b_header(buf_t *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b_u32(b, BT_GGUF_MAGIC);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}

static void b_kv_u32(buf_t *b, const char *key, uint32_t v)
{
    b_str(b, key);
    b_u32(b, BT_GGUF_UINT32);
    b_u32(b, v);
}

/* A tensor info with up to 4 dims given as an array. */
static void b_tinfo(buf_t *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                    uint32_t type, uint64_t offset)
{
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    if (n != 0)
        ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void read_whole(const char *path, buf_t *out)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    uint8_t chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        b_raw(out, chunk, n);
    fclose(f);
}

/* ---- capturing stderr around a call ---- */

static int cap_saved_fd = -1;
static char cap_file[PATH_MAX];

static void capture_start(void)
{
    tmp_path(cap_file, sizeof cap_file, "stderr");
    fflush(stderr);
    cap_saved_fd = dup(STDERR_FILENO);
    int fd = open(cap_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(cap_saved_fd, 0);
    ck_assert_int_ge(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
}

/* Restores stderr; returns what was written (malloc'd, NUL-terminated). */
static char *capture_stop(void)
{
    fflush(stderr);
    dup2(cap_saved_fd, STDERR_FILENO);
    close(cap_saved_fd);
    cap_saved_fd = -1;
    buf_t b = {0};
    read_whole(cap_file, &b);
    unlink(cap_file);
    b_u8(&b, 0);
    if (getenv("CHECK_GGUF_SHOW_LOGS") != NULL) /* to read the messages */
        fputs((char *)b.p, stderr);
    return (char *)b.p;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* The log holds exactly one line and it contains want (when not NULL). */
static void check_one_line(const char *log, const char *want)
{
    ck_assert_msg(count_lines(log) == 1, "expected one log line, got: <<%s>>", log);
    if (want != NULL)
        ck_assert_msg(strstr(log, want) != NULL, "log <<%s>> lacks '%s'", log, want);
}

/* Opens path expecting status want, no output, one "gguf: PATH: " line
 * containing detail (when not NULL). */
static void expect_refused_path(const char *path, bt_status_t want, const char *detail)
{
    bt_gguf_t sentinel;
    bt_gguf_t *g = &sentinel;
    capture_start();
    bt_status_t st = bt_gguf_open(path, &g);
    char *log = capture_stop();
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "gguf: %s: ", path);
    ck_assert_msg(st == want, "%s: status %d (%s), expected %d; log: %s", path, st,
                  bt_status_str(st), want, log);
    ck_assert_msg(g == &sentinel, "output set on failure");
    check_one_line(log, prefix);
    if (detail != NULL)
        ck_assert_msg(strstr(log, detail) != NULL, "log <<%s>> lacks '%s'", log, detail);
    free(log);
}

/* Writes the bytes of b to a fresh file and expects them refused. */
static void expect_refused(const buf_t *b, bt_status_t want, const char *detail)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "bad");
    write_file(path, b->p, b->n);
    expect_refused_path(path, want, detail);
    unlink(path);
}

/* Opens a file made of b, expecting success (caller closes). */
static bt_gguf_t *open_bytes(const buf_t *b, char *path, size_t cap)
{
    tmp_path(path, cap, "ok");
    write_file(path, b->p, b->n);
    bt_gguf_t *g = NULL;
    bt_status_t st = bt_gguf_open(path, &g);
    ck_assert_msg(st == BT_OK, "open of a valid file failed: %s", bt_status_str(st));
    ck_assert_ptr_nonnull(g);
    return g;
}

/* ---- a small valid file through the writer ---- */

/* Deterministic bytes for tensor i. */
static void fill_pattern(uint8_t *p, uint64_t n, unsigned seed)
{
    for (uint64_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31u + seed * 7u + 1u);
}

/* A file with a couple of values and three tensors; u32val and seed vary
 * the metadata and the tensor data. */
static void write_small(const char *path, uint32_t u32val, unsigned seed)
{
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_str(w, "general.architecture", "llama"), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_u32(w, "llama.block_count", u32val), BT_OK);
    const char *toks[] = {"<s>", "a", "bc"};
    ck_assert_int_eq(bt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3), BT_OK);
    uint64_t ne_a[] = {4, 2}, ne_b[] = {32}, ne_c[] = {3};
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "a", BT_TYPE_F32, 2, ne_a), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "b", BT_TYPE_Q8_0, 1, ne_b), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "c", BT_TYPE_F16, 1, ne_c), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    uint8_t data[64];
    uint64_t sizes[] = {32, 34, 6};
    for (int i = 0; i < 3; i++) {
        fill_pattern(data, sizes[i], seed + (unsigned)i);
        ck_assert_int_eq(bt_gguf_writer_write_tensor(w, data, sizes[i]), BT_OK);
    }
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
}

/* ================================ core ================================ */

/* Raw encoding of the nested array [[1, 2], [3]] of uint16. */
static void nested_u16(buf_t *b)
{
    b_u32(b, BT_GGUF_UINT16);
    b_u64(b, 2);
    b_u16(b, 1);
    b_u16(b, 2);
    b_u32(b, BT_GGUF_UINT16);
    b_u64(b, 1);
    b_u16(b, 3);
}

/* depth levels of arrays around one u8: ARRAY(ARRAY(...(UINT8 x1))) */
static void nested_depth(buf_t *b, int depth)
{
    for (int d = 1; d < depth; d++) {
        b_u32(b, BT_GGUF_ARRAY);
        b_u64(b, 1);
    }
    b_u32(b, BT_GGUF_UINT8);
    b_u64(b, 1);
    b_u8(b, 42);
}

typedef struct tspec {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint64_t n_elements;
    uint64_t n_bytes;
} tspec_t;

START_TEST(test_round_trip)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "rt");
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);

    /* scalars through the typed setters */
    ck_assert_int_eq(bt_gguf_writer_set_u32(w, "t.u32", 0xdeadbeefu), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_i32(w, "t.i32", -123456), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_f32(w, "t.f32", 3.25f), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_bool(w, "t.bool", true), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_bool(w, "t.bool0", false), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo w\xc3\xb6rld"), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_str(w, "t.empty", ""), BT_OK);
    /* the other scalar types through set_raw */
    uint8_t u8 = 200;
    int8_t i8 = -5;
    uint8_t u16[2] = {0xe8, 0xfd};                           /* 65000 */
    uint8_t i16[2] = {0xd0, 0x8a};                           /* -30000 */
    uint8_t u64[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
    uint8_t i64[8] = {0x01, 0, 0, 0, 0, 0, 0, 0x80};          /* INT64_MIN + 1 */
    double f64 = -1.0 / 3.0;
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.u8", BT_GGUF_UINT8, &u8, 1), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.i8", BT_GGUF_INT8, &i8, 1), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.u16", BT_GGUF_UINT16, u16, 2), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.i16", BT_GGUF_INT16, i16, 2), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.u64", BT_GGUF_UINT64, u64, 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.i64", BT_GGUF_INT64, i64, 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.f64", BT_GGUF_FLOAT64, &f64, 8), BT_OK);
    buf_t rs = {0};
    b_str(&rs, "raw string");
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.rawstr", BT_GGUF_STRING, rs.p, rs.n), BT_OK);
    /* arrays */
    uint32_t arr_u32[] = {1, 2, 3, 4000000000u};
    float arr_f32[] = {0.5f, -2.0f};
    uint8_t arr_bool[] = {1, 0, 1};
    const char *arr_str[] = {"a", "", "a longer string with spaces"};
    ck_assert_int_eq(bt_gguf_writer_set_arr(w, "t.arr_u32", BT_GGUF_UINT32, arr_u32, 4), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_arr(w, "t.arr_f32", BT_GGUF_FLOAT32, arr_f32, 2), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_arr(w, "t.arr_bool", BT_GGUF_BOOL, arr_bool, 3), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_arr(w, "t.arr_empty", BT_GGUF_INT64, NULL, 0), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_arr_str(w, "t.arr_str", arr_str, 3), BT_OK);
    buf_t nested = {0};
    b_u32(&nested, BT_GGUF_ARRAY);
    b_u64(&nested, 2);
    nested_u16(&nested);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.nested", BT_GGUF_ARRAY, nested.p, nested.n),
                     BT_OK);
    buf_t deep = {0};
    nested_depth(&deep, 8); /* the deepest nesting accepted */
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "t.deep", BT_GGUF_ARRAY, deep.p, deep.n), BT_OK);
    const char *keys[] = {"t.u32", "t.i32", "t.f32", "t.bool", "t.bool0", "t.str", "t.empty",
                          "t.u8", "t.i8", "t.u16", "t.i16", "t.u64", "t.i64", "t.f64",
                          "t.rawstr", "t.arr_u32", "t.arr_f32", "t.arr_bool", "t.arr_empty",
                          "t.arr_str", "t.nested", "t.deep"};
    const uint64_t n_keys = sizeof keys / sizeof keys[0];

    /* tensors */
    const tspec_t ts[] = {
        {"tok.f32", BT_TYPE_F32, 2, {8, 3, 1, 1}, 24, 96},
        {"w.f16", BT_TYPE_F16, 1, {16, 1, 1, 1}, 16, 32},
        {"w.q8", BT_TYPE_Q8_0, 2, {64, 2, 1, 1}, 128, 4 * sizeof(bt_block_q8_0_t)},
        {"t4d", BT_TYPE_F32, 4, {2, 1, 3, 2}, 12, 48},
        {"odd", BT_TYPE_F16, 1, {3, 1, 1, 1}, 3, 6},
        {"blk.0.attn_q.weight", BT_TYPE_Q8_0, 3, {32, 1, 2, 1}, 64, 2 * 34},
    };
    const int n_ts = (int)(sizeof ts / sizeof ts[0]);
    for (int i = 0; i < n_ts; i++)
        ck_assert_int_eq(bt_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims,
                                                   ts[i].ne), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    uint8_t data[512];
    for (int i = 0; i < n_ts; i++) {
        if (ts[i].type == BT_TYPE_F16) { /* real f16 values */
            uint16_t *h = (uint16_t *)data;
            for (uint64_t k = 0; k < ts[i].n_elements; k++)
                h[k] = bt_f32_to_f16((float)k * 0.25f - 1.0f);
        } else {
            fill_pattern(data, ts[i].n_bytes, (unsigned)i);
        }
        ck_assert_int_eq(bt_gguf_writer_write_tensor(w, data, ts[i].n_bytes), BT_OK);
    }
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);

    /* read back */
    bt_gguf_t *g = NULL;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    ck_assert_uint_eq(g->version, 3);
    ck_assert_uint_eq(g->alignment, BT_GGUF_DEFAULT_ALIGNMENT);
    ck_assert_uint_eq(g->n_kv, n_keys);
    for (uint64_t i = 0; i < n_keys; i++) /* order kept */
        ck_assert(bt_gguf_str_eq(g->kv[i].key, keys[i]));

    const bt_gguf_kv_t *kv;
    kv = bt_gguf_find_kv(g, "t.u32");
    ck_assert_int_eq(kv->type, BT_GGUF_UINT32);
    ck_assert_uint_eq(kv->v.u64, 0xdeadbeefu);
    kv = bt_gguf_find_kv(g, "t.i32");
    ck_assert_int_eq(kv->type, BT_GGUF_INT32);
    ck_assert_int_eq(kv->v.i64, -123456);
    kv = bt_gguf_find_kv(g, "t.f32");
    ck_assert_int_eq(kv->type, BT_GGUF_FLOAT32);
    ck_assert(kv->v.f64 == 3.25);
    kv = bt_gguf_find_kv(g, "t.bool");
    ck_assert_int_eq(kv->type, BT_GGUF_BOOL);
    ck_assert_uint_eq(kv->v.u64, 1);
    ck_assert_uint_eq(bt_gguf_find_kv(g, "t.bool0")->v.u64, 0);
    kv = bt_gguf_find_kv(g, "t.str");
    ck_assert_int_eq(kv->type, BT_GGUF_STRING);
    ck_assert(bt_gguf_str_eq(kv->v.str, "h\xc3\xa9llo w\xc3\xb6rld"));
    kv = bt_gguf_find_kv(g, "t.empty");
    ck_assert_int_eq(kv->type, BT_GGUF_STRING);
    ck_assert_uint_eq(kv->v.str.len, 0);
    kv = bt_gguf_find_kv(g, "t.u8");
    ck_assert_int_eq(kv->type, BT_GGUF_UINT8);
    ck_assert_uint_eq(kv->v.u64, 200);
    kv = bt_gguf_find_kv(g, "t.i8");
    ck_assert_int_eq(kv->type, BT_GGUF_INT8);
    ck_assert_int_eq(kv->v.i64, -5);
    kv = bt_gguf_find_kv(g, "t.u16");
    ck_assert_int_eq(kv->type, BT_GGUF_UINT16);
    ck_assert_uint_eq(kv->v.u64, 65000);
    kv = bt_gguf_find_kv(g, "t.i16");
    ck_assert_int_eq(kv->type, BT_GGUF_INT16);
    ck_assert_int_eq(kv->v.i64, -30000);
    kv = bt_gguf_find_kv(g, "t.u64");
    ck_assert_int_eq(kv->type, BT_GGUF_UINT64);
    ck_assert(kv->v.u64 == 0xfedcba9876543210ull);
    kv = bt_gguf_find_kv(g, "t.i64");
    ck_assert_int_eq(kv->type, BT_GGUF_INT64);
    ck_assert(kv->v.i64 == INT64_MIN + 1);
    kv = bt_gguf_find_kv(g, "t.f64");
    ck_assert_int_eq(kv->type, BT_GGUF_FLOAT64);
    ck_assert(kv->v.f64 == -1.0 / 3.0);
    kv = bt_gguf_find_kv(g, "t.rawstr");
    ck_assert_int_eq(kv->type, BT_GGUF_STRING);
    ck_assert(bt_gguf_str_eq(kv->v.str, "raw string"));

    kv = bt_gguf_find_kv(g, "t.arr_u32");
    ck_assert_int_eq(kv->type, BT_GGUF_ARRAY);
    ck_assert_int_eq(kv->arr_type, BT_GGUF_UINT32);
    ck_assert_uint_eq(kv->arr_n, 4);
    ck_assert_uint_eq(kv->arr_bytes, 16);
    ck_assert(memcmp(kv->arr_data, arr_u32, 16) == 0); /* host is little-endian */
    kv = bt_gguf_find_kv(g, "t.arr_f32");
    ck_assert_int_eq(kv->arr_type, BT_GGUF_FLOAT32);
    ck_assert_uint_eq(kv->arr_n, 2);
    ck_assert(memcmp(kv->arr_data, arr_f32, 8) == 0);
    kv = bt_gguf_find_kv(g, "t.arr_bool");
    ck_assert_int_eq(kv->arr_type, BT_GGUF_BOOL);
    ck_assert_uint_eq(kv->arr_n, 3);
    ck_assert(memcmp(kv->arr_data, arr_bool, 3) == 0);
    kv = bt_gguf_find_kv(g, "t.arr_empty");
    ck_assert_int_eq(kv->arr_type, BT_GGUF_INT64);
    ck_assert_uint_eq(kv->arr_n, 0);
    ck_assert_uint_eq(kv->arr_bytes, 0);

    kv = bt_gguf_find_kv(g, "t.arr_str");
    ck_assert_int_eq(kv->type, BT_GGUF_ARRAY);
    ck_assert_int_eq(kv->arr_type, BT_GGUF_STRING);
    ck_assert_uint_eq(kv->arr_n, 3);
    uint64_t pos = 0;
    bt_gguf_str_t s;
    for (int i = 0; i < 3; i++) {
        ck_assert(bt_gguf_arr_next_str(kv, &pos, &s));
        ck_assert(bt_gguf_str_eq(s, arr_str[i]));
    }
    ck_assert(!bt_gguf_arr_next_str(kv, &pos, &s));
    ck_assert_uint_eq(pos, kv->arr_bytes);
    pos = 1; /* a position the walk never gives: refused, not read past the end */
    ck_assert(!bt_gguf_arr_next_str(kv, &pos, &s));
    pos = kv->arr_bytes + 5;
    ck_assert(!bt_gguf_arr_next_str(kv, &pos, &s));

    kv = bt_gguf_find_kv(g, "t.nested");
    ck_assert_int_eq(kv->type, BT_GGUF_ARRAY);
    ck_assert_int_eq(kv->arr_type, BT_GGUF_ARRAY);
    ck_assert_uint_eq(kv->arr_n, 2);
    ck_assert_uint_eq(kv->arr_bytes, nested.n - 12);
    ck_assert(memcmp(kv->arr_data, nested.p + 12, nested.n - 12) == 0);
    kv = bt_gguf_find_kv(g, "t.deep");
    ck_assert_int_eq(kv->arr_type, BT_GGUF_ARRAY);
    ck_assert_uint_eq(kv->arr_bytes, deep.n - 12);
    pos = 0; /* not a string array */
    ck_assert(!bt_gguf_arr_next_str(kv, &pos, &s));

    /* tensors: shape, type, size, aligned offsets and every byte */
    ck_assert_uint_eq(g->n_tensors, (uint64_t)n_ts);
    ck_assert_uint_eq(g->data_offset % g->alignment, 0);
    uint64_t end = 0;
    for (int i = 0; i < n_ts; i++) {
        const bt_gguf_tensor_t *t = bt_gguf_find_tensor(g, ts[i].name);
        ck_assert_ptr_eq(t, &g->tensors[i]);
        ck_assert(bt_gguf_str_eq(t->name, ts[i].name));
        ck_assert_uint_eq(t->n_dims, ts[i].n_dims);
        for (int d = 0; d < 4; d++)
            ck_assert_uint_eq(t->ne[d], ts[i].ne[d]);
        ck_assert_uint_eq(t->type, ts[i].type);
        ck_assert_uint_eq(t->n_elements, ts[i].n_elements);
        ck_assert_uint_eq(t->n_bytes, ts[i].n_bytes);
        ck_assert_uint_eq(t->offset % g->alignment, 0);
        ck_assert_uint_eq(t->offset, end);
        ck_assert_ptr_eq(t->data, g->map + g->data_offset + t->offset);
        if (ts[i].type == BT_TYPE_F16) {
            const uint8_t *p = t->data;
            for (uint64_t k = 0; k < ts[i].n_elements; k++) {
                uint16_t h = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
                ck_assert(bt_f16_to_f32(h) == (float)k * 0.25f - 1.0f);
            }
        } else {
            fill_pattern(data, ts[i].n_bytes, (unsigned)i);
            ck_assert(memcmp(t->data, data, ts[i].n_bytes) == 0);
        }
        end = (t->offset + t->n_bytes + 31) / 32 * 32;
    }
    ck_assert_uint_eq(g->file_size, g->data_offset + end); /* last tensor padded too */
    ck_assert_ptr_null(bt_gguf_find_tensor(g, "missing"));
    ck_assert_ptr_null(bt_gguf_find_tensor(g, "w"));
    ck_assert_ptr_null(bt_gguf_find_tensor(g, "w.q8x"));
    ck_assert_ptr_null(bt_gguf_find_kv(g, "t"));
    bt_gguf_close(g);
    b_free(&rs);
    b_free(&nested);
    b_free(&deep);
    unlink(path);
}
END_TEST

START_TEST(test_custom_alignment)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "align");
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_u32(w, "general.alignment", 256), BT_OK);
    uint64_t ne1[] = {5}, ne2[] = {7};
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "x", BT_TYPE_F32, 1, ne1), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "y", BT_TYPE_F32, 1, ne2), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    float x[5] = {1, 2, 3, 4, 5}, y[7] = {7, 6, 5, 4, 3, 2, 1};
    ck_assert_int_eq(bt_gguf_writer_write_tensor(w, x, sizeof x), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_write_tensor(w, y, sizeof y), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);

    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    ck_assert_uint_eq(g->alignment, 256);
    ck_assert_uint_eq(g->data_offset, 256);
    ck_assert_uint_eq(g->tensors[1].offset, 256);
    ck_assert_uint_eq(g->file_size, 768);
    /* the map is page-aligned, so the data pointers are 256-aligned too */
    ck_assert_uint_eq((uintptr_t)g->tensors[1].data % 256, 0);
    ck_assert(memcmp(g->tensors[0].data, x, sizeof x) == 0);
    ck_assert(memcmp(g->tensors[1].data, y, sizeof y) == 0);
    bt_gguf_close(g);
    unlink(path);
}
END_TEST

START_TEST(test_no_tensors)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "meta");
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_str(w, "general.name", "empty"), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    ck_assert_uint_eq(g->n_tensors, 0);
    ck_assert_uint_eq(g->data_offset, g->file_size);
    ck_assert_ptr_null(bt_gguf_find_tensor(g, "x"));
    bt_gguf_close(g);
    unlink(path);

    /* Hand-made, without the trailing padding (as some tools write it): the
     * data section lies past the end but there is nothing in it. */
    buf_t b = {0};
    b_header(&b, 3, 0, 1);
    b_kv_u32(&b, "k", 1);
    g = open_bytes(&b, path, sizeof path);
    ck_assert_uint_eq(g->data_offset, 64);
    ck_assert_uint_eq(g->file_size, b.n);
    uint64_t h = bt_gguf_header_hash(g); /* hashes only what exists */
    bt_gguf_close(g);
    unlink(path);
    b_pad(&b, 32);
    g = open_bytes(&b, path, sizeof path);
    ck_assert(bt_gguf_header_hash(g) != h);
    bt_gguf_close(g);
    unlink(path);
    b_free(&b);
}
END_TEST

START_TEST(test_hand_made_ok)
{
    char path[PATH_MAX];
    /* version 2, a 64-byte tensor name (the GGUF limit) */
    char name64[65];
    memset(name64, 'n', 64);
    name64[64] = '\0';
    uint64_t ne[] = {8};
    buf_t b = {0};
    b_header(&b, 2, 1, 1);
    b_kv_u32(&b, "general.alignment", 16);
    b_tinfo(&b, name64, 1, ne, BT_TYPE_F32, 0);
    b_pad(&b, 16);
    b_zeros(&b, 32);
    bt_gguf_t *g = open_bytes(&b, path, sizeof path);
    ck_assert_uint_eq(g->version, 2);
    ck_assert_uint_eq(g->alignment, 16);
    ck_assert_ptr_eq(bt_gguf_find_tensor(g, name64), &g->tensors[0]);
    bt_gguf_close(g);
    unlink(path);
    b_free(&b);

    /* tensors stored out of order, with a gap between them */
    uint64_t ne2[] = {8, 2};
    b_header(&b, 3, 2, 0);
    b_tinfo(&b, "second", 1, ne, BT_TYPE_F32, 128);
    b_tinfo(&b, "first", 2, ne2, BT_TYPE_F32, 0);
    b_pad(&b, 32);
    b_zeros(&b, 160);
    g = open_bytes(&b, path, sizeof path);
    ck_assert_ptr_eq(bt_gguf_find_tensor(g, "first"), &g->tensors[1]);
    ck_assert_ptr_eq(bt_gguf_find_tensor(g, "second"), &g->tensors[0]);
    bt_gguf_close(g);
    unlink(path);
    b_free(&b);
}
END_TEST

START_TEST(test_header_hash)
{
    char p1[PATH_MAX], p2[PATH_MAX], p3[PATH_MAX], p4[PATH_MAX];
    tmp_path(p1, sizeof p1, "h1");
    tmp_path(p2, sizeof p2, "h2");
    tmp_path(p3, sizeof p3, "h3");
    tmp_path(p4, sizeof p4, "h4");
    write_small(p1, 4, 0);
    write_small(p2, 4, 0);
    write_small(p3, 5, 0); /* one metadata value differs */
    write_small(p4, 4, 9); /* only tensor data differs */
    bt_gguf_t *g1, *g2, *g3, *g4;
    ck_assert_int_eq(bt_gguf_open(p1, &g1), BT_OK);
    ck_assert_int_eq(bt_gguf_open(p2, &g2), BT_OK);
    ck_assert_int_eq(bt_gguf_open(p3, &g3), BT_OK);
    ck_assert_int_eq(bt_gguf_open(p4, &g4), BT_OK);
    ck_assert_uint_eq(g1->file_size, g2->file_size);
    ck_assert(memcmp(g1->map, g2->map, g1->file_size) == 0);
    ck_assert(bt_gguf_header_hash(g1) == bt_gguf_header_hash(g2));
    ck_assert(bt_gguf_header_hash(g1) != bt_gguf_header_hash(g3));
    ck_assert(bt_gguf_header_hash(g1) == bt_gguf_header_hash(g4));
    ck_assert(memcmp(g1->tensors[0].data, g4->tensors[0].data, 32) != 0);

    /* FNV-1a 64 of [0, data_offset), computed here independently */
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < g1->data_offset; i++)
        h = (h ^ g1->map[i]) * 0x100000001b3ull;
    ck_assert(bt_gguf_header_hash(g1) == h);
    bt_gguf_close(g1);
    bt_gguf_close(g2);
    bt_gguf_close(g3);
    bt_gguf_close(g4);
    unlink(p1);
    unlink(p2);
    unlink(p3);
    unlink(p4);
}
END_TEST

/* Calls a getter expecting status want and, for BT_ERR_FORMAT, one log line
 * (for other statuses, none). */
#define EXPECT_GET(call, want)                                                          \
    do {                                                                                \
        capture_start();                                                                \
        bt_status_t st_ = (call);                                                       \
        char *log_ = capture_stop();                                                    \
        ck_assert_msg(st_ == (want), "%s: status %d, log: %s", #call, st_, log_);        \
        if ((want) == BT_ERR_FORMAT)                                                    \
            check_one_line(log_, "gguf: ");                                             \
        else                                                                            \
            ck_assert_msg(log_[0] == '\0', "%s logged: %s", #call, log_);                \
        free(log_);                                                                     \
    } while (0)

START_TEST(test_getters)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "get");
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    uint8_t u8 = 7, big64[8] = {0, 0, 0, 0, 1, 0, 0, 0}; /* 2^32 */
    int8_t neg8 = -1;
    double f64 = 0.1, f64_huge = 1e300;
    uint8_t u64_ok[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    ck_assert_int_eq(bt_gguf_writer_set_u32(w, "u32", 123), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_i32(w, "i32", 77), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_i32(w, "i32neg", -77), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "u8", BT_GGUF_UINT8, &u8, 1), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "i8neg", BT_GGUF_INT8, &neg8, 1), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "u64big", BT_GGUF_UINT64, big64, 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "u64ok", BT_GGUF_UINT64, u64_ok, 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_f32(w, "f32", 1.5f), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "f64", BT_GGUF_FLOAT64, &f64, 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_raw(w, "f64huge", BT_GGUF_FLOAT64, &f64_huge, 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_bool(w, "bool", true), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_set_str(w, "str", "value"), BT_OK);
    uint32_t arr[] = {1};
    ck_assert_int_eq(bt_gguf_writer_set_arr(w, "arr", BT_GGUF_UINT32, arr, 1), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);

    uint32_t u = 0;
    float f = 0;
    bool b = false;
    bt_gguf_str_t s = {0};
    EXPECT_GET(bt_gguf_get_u32(g, "u32", &u), BT_OK);
    ck_assert_uint_eq(u, 123);
    EXPECT_GET(bt_gguf_get_u32(g, "i32", &u), BT_OK);
    ck_assert_uint_eq(u, 77);
    EXPECT_GET(bt_gguf_get_u32(g, "u8", &u), BT_OK);
    ck_assert_uint_eq(u, 7);
    EXPECT_GET(bt_gguf_get_u32(g, "u64ok", &u), BT_OK);
    ck_assert_uint_eq(u, UINT32_MAX);
    u = 99;
    EXPECT_GET(bt_gguf_get_u32(g, "i32neg", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "i8neg", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "u64big", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "f32", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "bool", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "str", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "arr", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "absent", &u), BT_ERR_ARG);
    ck_assert_uint_eq(u, 99); /* untouched on failure */

    EXPECT_GET(bt_gguf_get_f32(g, "f32", &f), BT_OK);
    ck_assert(f == 1.5f);
    EXPECT_GET(bt_gguf_get_f32(g, "f64", &f), BT_OK);
    ck_assert(f == 0.1f);
    f = 9;
    EXPECT_GET(bt_gguf_get_f32(g, "f64huge", &f), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_f32(g, "u32", &f), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_f32(g, "str", &f), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_f32(g, "absent", &f), BT_ERR_ARG);
    ck_assert(f == 9);

    EXPECT_GET(bt_gguf_get_bool(g, "bool", &b), BT_OK);
    ck_assert(b);
    EXPECT_GET(bt_gguf_get_bool(g, "u8", &b), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_bool(g, "absent", &b), BT_ERR_ARG);

    EXPECT_GET(bt_gguf_get_str(g, "str", &s), BT_OK);
    ck_assert(bt_gguf_str_eq(s, "value"));
    ck_assert(!bt_gguf_str_eq(s, "valu"));
    ck_assert(!bt_gguf_str_eq(s, "values"));
    ck_assert(!bt_gguf_str_eq(s, ""));
    EXPECT_GET(bt_gguf_get_str(g, "u32", &s), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_str(g, "arr", &s), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_str(g, "absent", &s), BT_ERR_ARG);
    ck_assert(bt_gguf_str_eq(s, "value"));

    uint64_t pos = 0; /* a u32 array is not a string array */
    ck_assert(!bt_gguf_arr_next_str(bt_gguf_find_kv(g, "arr"), &pos, &s));
    ck_assert(!bt_gguf_arr_next_str(bt_gguf_find_kv(g, "str"), &pos, &s));
    bt_gguf_close(g);
    unlink(path);
}
END_TEST

/* Runs a writer call expecting want with exactly one log line. */
#define EXPECT_WRITER_ERR(call, want)                                                   \
    do {                                                                                \
        capture_start();                                                                \
        bt_status_t st_ = (call);                                                       \
        char *log_ = capture_stop();                                                    \
        ck_assert_msg(st_ == (want), "%s: status %d, log: %s", #call, st_, log_);        \
        check_one_line(log_, "gguf: ");                                                 \
        free(log_);                                                                     \
    } while (0)

START_TEST(test_writer_errors)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "werr");
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    uint64_t ne[] = {32, 2}, ne_bad[] = {33}, ne0[] = {0};
    ck_assert_int_eq(bt_gguf_writer_set_u32(w, "k", 1), BT_OK);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_u32(w, "k", 2), BT_ERR_ARG);          /* duplicate */
    EXPECT_WRITER_ERR(bt_gguf_writer_set_str(w, "", "x"), BT_ERR_ARG);         /* empty key */
    EXPECT_WRITER_ERR(bt_gguf_writer_set_u32(w, "general.alignment", 48), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_u32(w, "general.alignment", 0), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_i32(w, "general.alignment", 32), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_arr(w, "a", BT_GGUF_STRING, "x", 1), BT_ERR_ARG);
    uint8_t bad_bool[] = {0, 2};
    EXPECT_WRITER_ERR(bt_gguf_writer_set_arr(w, "a", BT_GGUF_BOOL, bad_bool, 2), BT_ERR_ARG);
    uint8_t two = 2;
    EXPECT_WRITER_ERR(bt_gguf_writer_set_raw(w, "r", BT_GGUF_BOOL, &two, 1), BT_ERR_ARG);
    uint8_t short_u32[2] = {0};
    EXPECT_WRITER_ERR(bt_gguf_writer_set_raw(w, "r", BT_GGUF_UINT32, short_u32, 2), BT_ERR_ARG);
    uint8_t long_u8[2] = {0};
    EXPECT_WRITER_ERR(bt_gguf_writer_set_raw(w, "r", BT_GGUF_UINT8, long_u8, 2), BT_ERR_ARG);
    buf_t deep = {0};
    nested_depth(&deep, 9);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_raw(w, "r", BT_GGUF_ARRAY, deep.p, deep.n), BT_ERR_ARG);
    b_free(&deep);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_raw(w, "r", (bt_gguf_vtype_t)13, &two, 1), BT_ERR_ARG);

    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "t", BT_TYPE_Q8_0, 2, ne), BT_OK);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "t", BT_TYPE_F32, 1, ne), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "u", 4, 1, ne), BT_ERR_ARG);  /* unknown */
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "u", 999, 1, ne), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "u", BT_TYPE_Q8_0, 1, ne_bad), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "u", BT_TYPE_F32, 1, ne0), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "u", BT_TYPE_F32, 0, ne), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "u", BT_TYPE_F32, 5, ne), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "", BT_TYPE_F32, 1, ne), BT_ERR_ARG);
    char name64[65]; /* llama.cpp refuses 64-byte names, so the writer does */
    memset(name64, 'x', 64);
    name64[64] = '\0';
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, name64, BT_TYPE_F32, 1, ne), BT_ERR_ARG);
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "t2", BT_TYPE_F32, 1, ne), BT_OK);

    EXPECT_WRITER_ERR(bt_gguf_writer_write_tensor(w, "x", 1), BT_ERR_ARG);  /* before begin */
    EXPECT_WRITER_ERR(bt_gguf_writer_finish(w), BT_ERR_ARG);                /* before begin */
    char bad_path[PATH_MAX + 16];
    snprintf(bad_path, sizeof bad_path, "%s/no/such/dir.gguf", tmp_dir);
    EXPECT_WRITER_ERR(bt_gguf_writer_begin(w, bad_path), BT_ERR_IO);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    EXPECT_WRITER_ERR(bt_gguf_writer_set_u32(w, "late", 1), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_add_tensor(w, "late", BT_TYPE_F32, 1, ne), BT_ERR_ARG);
    EXPECT_WRITER_ERR(bt_gguf_writer_begin(w, path), BT_ERR_ARG);
    uint8_t data[128] = {0};
    EXPECT_WRITER_ERR(bt_gguf_writer_write_tensor(w, data, 67), BT_ERR_ARG); /* needs 68 */
    ck_assert_int_eq(bt_gguf_writer_write_tensor(w, data, 68), BT_OK);
    EXPECT_WRITER_ERR(bt_gguf_writer_finish(w), BT_ERR_ARG);                /* t2 missing */
    ck_assert_int_eq(bt_gguf_writer_write_tensor(w, data, 128), BT_OK);
    EXPECT_WRITER_ERR(bt_gguf_writer_write_tensor(w, data, 128), BT_ERR_ARG); /* one too many */
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);

    /* what was written despite the refused calls is a valid file */
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    ck_assert_uint_eq(g->n_kv, 1);
    ck_assert_uint_eq(g->n_tensors, 2);
    bt_gguf_close(g);
    unlink(path);

    /* a writer freed halfway leaks nothing and closes its file */
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "t", BT_TYPE_F32, 1, ne), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    bt_gguf_writer_free(w);
    unlink(path);
}
END_TEST

/* On /dev/full every write fails with ENOSPC (Linux). */
START_TEST(test_writer_io_error)
{
    if (access("/dev/full", W_OK) != 0) {
        fprintf(stderr, "SKIP: writer I/O error: no writable /dev/full on this system\n");
        return;
    }
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    uint64_t ne[] = {1u << 20}; /* 4 MiB: larger than the stdio buffer */
    ck_assert_int_eq(bt_gguf_writer_add_tensor(w, "big", BT_TYPE_F32, 1, ne), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, "/dev/full"), BT_OK); /* still buffered */
    float *data = calloc(1u << 20, sizeof *data);
    ck_assert_ptr_nonnull(data);
    capture_start();
    bt_status_t st = bt_gguf_writer_write_tensor(w, data, (1u << 20) * sizeof *data);
    if (st == BT_OK)
        st = bt_gguf_writer_finish(w);
    char *log = capture_stop();
    ck_assert_int_eq(st, BT_ERR_IO);
    check_one_line(log, "gguf: /dev/full: ");
    free(log);
    /* later calls fail quietly: the error was logged once */
    capture_start();
    st = bt_gguf_writer_finish(w);
    log = capture_stop();
    ck_assert_int_eq(st, BT_ERR_IO);
    ck_assert_str_eq(log, "");
    free(log);
    free(data);
    bt_gguf_writer_free(w);
}
END_TEST

/* =============================== limits =============================== */

START_TEST(test_empty_missing_dir)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "empty");
    write_file(path, "", 0);
    expect_refused_path(path, BT_ERR_FORMAT, "empty");
    unlink(path);
    tmp_path(path, sizeof path, "missing");
    expect_refused_path(path, BT_ERR_IO, "No such file");
    expect_refused_path(tmp_dir, BT_ERR_IO, "directory");
    if (access("/dev/null", R_OK) == 0)
        expect_refused_path("/dev/null", BT_ERR_IO, "not a regular file");
}
END_TEST

START_TEST(test_bad_magic)
{
    buf_t b = {0};
    b_raw(&b, "GGUX", 4);
    b_u32(&b, 3);
    b_u64(&b, 0);
    b_u64(&b, 0);
    expect_refused(&b, BT_ERR_FORMAT, "magic");
    b_free(&b);
    b_raw(&b, "GG", 2); /* shorter than the magic */
    expect_refused(&b, BT_ERR_FORMAT, "truncated");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_version)
{
    const uint32_t versions[] = {1, 99, 0, 0x03000000u /* big-endian v3 */};
    const char *details[] = {"version 1 ", "version 99 ", "version 0 ", "big-endian"};
    for (int i = 0; i < 4; i++) {
        buf_t b = {0};
        b_header(&b, versions[i], 0, 0);
        expect_refused(&b, BT_ERR_UNSUPPORTED, details[i]);
        b_free(&b);
    }
}
END_TEST

START_TEST(test_huge_counts)
{
    buf_t b = {0};
    b_header(&b, 3, 1ull << 63, 0);
    b_zeros(&b, 64);
    expect_refused(&b, BT_ERR_FORMAT, "tensor count 9223372036854775808");
    b_free(&b);
    b_header(&b, 3, 0, UINT64_MAX);
    b_zeros(&b, 64);
    expect_refused(&b, BT_ERR_FORMAT, "metadata count 18446744073709551615");
    b_free(&b);
    /* plausible by the file size but not there: truncated while parsing */
    b_header(&b, 3, 0, 3);
    b_kv_u32(&b, "a", 1);
    b_zeros(&b, 40);
    expect_refused(&b, BT_ERR_FORMAT, NULL);
    b_free(&b);
}
END_TEST

START_TEST(test_bad_strings)
{
    buf_t b = {0};
    /* key length past the end */
    b_header(&b, 3, 0, 1);
    b_u64(&b, 100);
    b_raw(&b, "abcdefghijklmnop", 16);
    expect_refused(&b, BT_ERR_FORMAT, "key of length 100");
    b_free(&b);
    /* key length 2^63 */
    b_header(&b, 3, 0, 1);
    b_u64(&b, 1ull << 63);
    b_zeros(&b, 32);
    expect_refused(&b, BT_ERR_FORMAT, "length 9223372036854775808");
    b_free(&b);
    /* empty key */
    b_header(&b, 3, 0, 1);
    b_str(&b, "");
    b_u32(&b, BT_GGUF_UINT32);
    b_u32(&b, 1);
    expect_refused(&b, BT_ERR_FORMAT, "empty key");
    b_free(&b);
    /* string value past the end */
    b_header(&b, 3, 0, 1);
    b_str(&b, "s");
    b_u32(&b, BT_GGUF_STRING);
    b_u64(&b, 1000);
    b_raw(&b, "short", 5);
    expect_refused(&b, BT_ERR_FORMAT, "metadata key 's' string value of length 1000");
    b_free(&b);
    /* string inside an array past the end */
    b_header(&b, 3, 0, 1);
    b_str(&b, "arr");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, BT_GGUF_STRING);
    b_u64(&b, 2);
    b_str(&b, "ok");
    b_u64(&b, UINT64_MAX);
    b_raw(&b, "x", 1);
    expect_refused(&b, BT_ERR_FORMAT, "array string");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_value_types)
{
    buf_t b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 13);
    b_u32(&b, 0);
    expect_refused(&b, BT_ERR_FORMAT, "unknown value type 13");
    b_free(&b);
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, 0xffffffffu);
    b_u32(&b, 0);
    expect_refused(&b, BT_ERR_FORMAT, "unknown value type 4294967295");
    b_free(&b);
    b_header(&b, 3, 0, 1);
    b_str(&b, "k");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, 77);
    b_u64(&b, 0);
    expect_refused(&b, BT_ERR_FORMAT, "unknown array element type 77");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_bool)
{
    buf_t b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "flag");
    b_u32(&b, BT_GGUF_BOOL);
    b_u8(&b, 2);
    b_zeros(&b, 8);
    expect_refused(&b, BT_ERR_FORMAT, "bool value is 2");
    b_free(&b);
    b_header(&b, 3, 0, 1);
    b_str(&b, "flags");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, BT_GGUF_BOOL);
    b_u64(&b, 3);
    b_u8(&b, 1);
    b_u8(&b, 0);
    b_u8(&b, 2);
    expect_refused(&b, BT_ERR_FORMAT, "bool element 2 is 2");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_array_counts)
{
    buf_t b = {0};
    /* count x element size overflows 64 bits */
    b_header(&b, 3, 0, 1);
    b_str(&b, "a");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, BT_GGUF_UINT64);
    b_u64(&b, 1ull << 62);
    b_zeros(&b, 16);
    expect_refused(&b, BT_ERR_FORMAT, "overflows");
    b_free(&b);
    /* no overflow, but far past the end */
    b_header(&b, 3, 0, 1);
    b_str(&b, "a");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, BT_GGUF_UINT32);
    b_u64(&b, 1ull << 40);
    b_zeros(&b, 16);
    expect_refused(&b, BT_ERR_FORMAT, "array of 1099511627776 uint32");
    b_free(&b);
    /* a string array count no file could hold */
    b_header(&b, 3, 0, 1);
    b_str(&b, "a");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, BT_GGUF_STRING);
    b_u64(&b, UINT64_MAX);
    b_zeros(&b, 16);
    expect_refused(&b, BT_ERR_FORMAT, "impossible");
    b_free(&b);
    /* same for nested arrays */
    b_header(&b, 3, 0, 1);
    b_str(&b, "a");
    b_u32(&b, BT_GGUF_ARRAY);
    b_u32(&b, BT_GGUF_ARRAY);
    b_u64(&b, 1ull << 60);
    b_zeros(&b, 16);
    expect_refused(&b, BT_ERR_FORMAT, "impossible");
    b_free(&b);
}
END_TEST

START_TEST(test_nested_too_deep)
{
    buf_t b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "deep");
    b_u32(&b, BT_GGUF_ARRAY);
    nested_depth(&b, 9);
    expect_refused(&b, BT_ERR_FORMAT, "nested more than 8");
    b_free(&b);
    /* a chain that would recurse far deeper stops at the limit too */
    b_header(&b, 3, 0, 1);
    b_str(&b, "deeper");
    b_u32(&b, BT_GGUF_ARRAY);
    nested_depth(&b, 10000);
    expect_refused(&b, BT_ERR_FORMAT, "nested more than 8");
    b_free(&b);
}
END_TEST

/* A file with one tensor info (fields as given) and data bytes of data. */
static void one_tensor(buf_t *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data)
{
    b_header(b, 3, 1, 0);
    b_tinfo(b, name, n_dims, ne, type, offset);
    b_pad(b, 32);
    b_zeros(b, data);
}

START_TEST(test_bad_dims)
{
    buf_t b = {0};
    uint64_t ne[5] = {4, 4, 4, 4, 4};
    one_tensor(&b, "w", 0, ne, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "tensor 'w' has n_dims 0");
    b_free(&b);
    one_tensor(&b, "w", 5, ne, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "tensor 'w' has n_dims 5");
    b_free(&b);
    uint64_t zero[] = {4, 0};
    one_tensor(&b, "w", 2, zero, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "ne[1] is 0");
    b_free(&b);
    uint64_t neg[] = {1ull << 63};
    one_tensor(&b, "w", 1, neg, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "ne[0] is 9223372036854775808");
    b_free(&b);
}
END_TEST

START_TEST(test_dims_overflow)
{
    buf_t b = {0};
    /* element count 2^32 * 2^32 = 2^64 */
    uint64_t ne[] = {1ull << 32, 1ull << 32};
    one_tensor(&b, "w", 2, ne, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "element count overflows");
    b_free(&b);
    /* count 2^62 fits, but its f32 bytes (2^64) do not */
    uint64_t ne2[] = {1ull << 31, 1ull << 31};
    one_tensor(&b, "w", 2, ne2, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "byte size overflows");
    b_free(&b);
    /* the product overflows only at the fourth dim */
    uint64_t ne4[] = {1u << 16, 1u << 16, 1u << 16, 1u << 16};
    one_tensor(&b, "w", 4, ne4, BT_TYPE_F32, 0, 64);
    expect_refused(&b, BT_ERR_FORMAT, "overflows at ne[3]");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_tensor_type)
{
    buf_t b = {0};
    uint64_t ne[] = {32};
    one_tensor(&b, "blk.0.ffn_up.weight", 1, ne, 4, 0, 64); /* removed q4_2 */
    expect_refused(&b, BT_ERR_UNSUPPORTED, "tensor 'blk.0.ffn_up.weight' has unknown tensor type id 4");
    b_free(&b);
    one_tensor(&b, "w", 1, ne, 123456, 0, 64);
    expect_refused(&b, BT_ERR_UNSUPPORTED, "type id 123456");
    b_free(&b);
    uint64_t ne33[] = {33, 2};
    one_tensor(&b, "w", 2, ne33, BT_TYPE_Q8_0, 0, 256);
    expect_refused(&b, BT_ERR_FORMAT, "ne[0] = 33 is not a multiple of the q8_0 block size 32");
    b_free(&b);
    uint64_t ne128[] = {128};
    one_tensor(&b, "w", 1, ne128, BT_TYPE_Q4_K, 0, 256);
    expect_refused(&b, BT_ERR_FORMAT, "block size 256");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_offsets)
{
    buf_t b = {0};
    uint64_t ne[] = {16}; /* 64 bytes of f32 */
    /* data section is 64 bytes; the tensor would end at 96 */
    one_tensor(&b, "blk.3.attn_q.weight", 1, ne, BT_TYPE_F32, 32, 64);
    char want[128];
    snprintf(want, sizeof want, "tensor 'blk.3.attn_q.weight' ends at byte %zu but file has %zu",
             b.n + 32, b.n);
    expect_refused(&b, BT_ERR_FORMAT, want);
    b_free(&b);
    /* one byte short */
    one_tensor(&b, "w", 1, ne, BT_TYPE_F32, 0, 63);
    expect_refused(&b, BT_ERR_FORMAT, "ends at byte");
    b_free(&b);
    /* offset far past the end */
    one_tensor(&b, "w", 1, ne, BT_TYPE_F32, 1ull << 40, 64);
    expect_refused(&b, BT_ERR_FORMAT, "ends at byte");
    b_free(&b);
    /* offset + size wraps around */
    one_tensor(&b, "w", 1, ne, BT_TYPE_F32, UINT64_MAX & ~31ull, 64);
    expect_refused(&b, BT_ERR_FORMAT, "overflows");
    b_free(&b);
    /* misaligned */
    one_tensor(&b, "w", 1, ne, BT_TYPE_F32, 4, 128);
    expect_refused(&b, BT_ERR_FORMAT, "offset 4 is not a multiple of the alignment 32");
    b_free(&b);
    /* infos end unaligned and the file stops there: no data section */
    b_header(&b, 3, 1, 0);
    b_tinfo(&b, "w", 1, ne, BT_TYPE_F32, 0);
    ck_assert_uint_ne(b.n % 32, 0);
    expect_refused(&b, BT_ERR_FORMAT, "data section starts at byte");
    b_free(&b);
}
END_TEST

START_TEST(test_overlap)
{
    buf_t b = {0};
    uint64_t ne16[] = {16}, ne4[] = {4};
    b_header(&b, 3, 3, 0);
    b_tinfo(&b, "a", 1, ne4, BT_TYPE_F32, 64);
    b_tinfo(&b, "b", 1, ne16, BT_TYPE_F32, 0);   /* bytes 0..64 */
    b_tinfo(&b, "c", 1, ne16, BT_TYPE_F32, 32);  /* bytes 32..96: overlaps b */
    b_pad(&b, 32);
    b_zeros(&b, 128);
    expect_refused(&b, BT_ERR_FORMAT, "tensors 'b' (data bytes 0..64) and 'c' (from 32) overlap");
    b_free(&b);
    /* the same offset twice */
    b_header(&b, 3, 2, 0);
    b_tinfo(&b, "a", 1, ne4, BT_TYPE_F32, 0);
    b_tinfo(&b, "b", 1, ne4, BT_TYPE_F32, 0);
    b_pad(&b, 32);
    b_zeros(&b, 32);
    expect_refused(&b, BT_ERR_FORMAT, "overlap");
    b_free(&b);
}
END_TEST

START_TEST(test_duplicates)
{
    buf_t b = {0};
    uint64_t ne[] = {8};
    b_header(&b, 3, 3, 0);
    b_tinfo(&b, "x", 1, ne, BT_TYPE_F32, 0);
    b_tinfo(&b, "y", 1, ne, BT_TYPE_F32, 32);
    b_tinfo(&b, "x", 1, ne, BT_TYPE_F32, 64);
    b_pad(&b, 32);
    b_zeros(&b, 96);
    expect_refused(&b, BT_ERR_FORMAT, "duplicate tensor name 'x' (tensors 0 and 2)");
    b_free(&b);
    b_header(&b, 3, 0, 3);
    b_kv_u32(&b, "k", 1);
    b_kv_u32(&b, "j", 2);
    b_kv_u32(&b, "k", 3);
    expect_refused(&b, BT_ERR_FORMAT, "duplicate metadata key 'k' (entries 0 and 2)");
    b_free(&b);
    /* a key with a newline and a quote is printed escaped, on one line */
    b_header(&b, 3, 0, 2);
    b_kv_u32(&b, "a\nb'\x01", 1);
    b_kv_u32(&b, "a\nb'\x01", 2);
    expect_refused(&b, BT_ERR_FORMAT, "duplicate metadata key 'a\\x0ab'\\x01'");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_alignment)
{
    const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (int i = 0; i < 4; i++) {
        buf_t b = {0};
        b_header(&b, 3, 0, 1);
        b_kv_u32(&b, "general.alignment", bad[i]);
        char want[80];
        snprintf(want, sizeof want, "general.alignment is %u (must be", bad[i]);
        expect_refused(&b, BT_ERR_FORMAT, want);
        b_free(&b);
    }
    buf_t b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "general.alignment");
    b_u32(&b, BT_GGUF_UINT64);
    b_u64(&b, 32);
    expect_refused(&b, BT_ERR_FORMAT, "general.alignment has type uint64");
    b_free(&b);
}
END_TEST

START_TEST(test_bad_tensor_names)
{
    buf_t b = {0};
    uint64_t ne[] = {8};
    char name65[66];
    memset(name65, 'n', 65);
    name65[65] = '\0';
    one_tensor(&b, name65, 1, ne, BT_TYPE_F32, 0, 32);
    expect_refused(&b, BT_ERR_FORMAT, "is 65 bytes long (at most 64)");
    b_free(&b);
    one_tensor(&b, "", 1, ne, BT_TYPE_F32, 0, 32);
    expect_refused(&b, BT_ERR_FORMAT, "tensor info 0 has an empty name");
    b_free(&b);
}
END_TEST

/* Every proper prefix of a valid file up to the end of its last tensor is
 * refused (an empty prefix as empty, the others as truncated). */
START_TEST(test_truncated_everywhere)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "full");
    write_small(path, 4, 0);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    uint64_t need = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        uint64_t end = g->data_offset + g->tensors[i].offset + g->tensors[i].n_bytes;
        need = end > need ? end : need;
    }
    ck_assert_uint_gt(need, g->data_offset);
    bt_gguf_close(g);
    buf_t full = {0};
    read_whole(path, &full);
    unlink(path);
    for (uint64_t len = 0; len < need; len++) {
        buf_t b = {0};
        b_raw(&b, full.p, (size_t)len);
        expect_refused(&b, BT_ERR_FORMAT, NULL);
        b_free(&b);
    }
    /* the file cut right after its last tensor's bytes is still valid */
    buf_t b = {0};
    b_raw(&b, full.p, (size_t)need);
    g = open_bytes(&b, path, sizeof path);
    bt_gguf_close(g);
    unlink(path);
    b_free(&b);
    b_free(&full);
}
END_TEST

/* Touches everything a successful open hands out (ASan checks the reads). */
static unsigned touch_all(const bt_gguf_t *g)
{
    unsigned sum = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const bt_gguf_kv_t *kv = &g->kv[i];
        for (uint64_t k = 0; k < kv->key.len; k++)
            sum += (uint8_t)kv->key.ptr[k];
        if (kv->type == BT_GGUF_STRING)
            for (uint64_t k = 0; k < kv->v.str.len; k++)
                sum += (uint8_t)kv->v.str.ptr[k];
        if (kv->type == BT_GGUF_ARRAY) {
            for (uint64_t k = 0; k < kv->arr_bytes; k++)
                sum += kv->arr_data[k];
            uint64_t pos = 0;
            bt_gguf_str_t s;
            while (bt_gguf_arr_next_str(kv, &pos, &s))
                sum += (unsigned)s.len + (s.len ? (uint8_t)s.ptr[s.len - 1] : 0);
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const uint8_t *d = g->tensors[i].data;
        sum += d[0] + d[g->tensors[i].n_bytes - 1] + (unsigned)g->tensors[i].name.ptr[0];
    }
    return sum + (unsigned)bt_gguf_header_hash(g);
}

/* Random byte changes in the header of a valid file: each open either
 * succeeds (then everything it returns is readable) or fails with exactly
 * one message. Deterministic (fixed LCG seed). */
START_TEST(test_random_corruption)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "fuzzbase");
    write_small(path, 4, 0);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    size_t header = (size_t)g->data_offset;
    bt_gguf_close(g);
    buf_t full = {0};
    read_whole(path, &full);
    unlink(path);

    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n_ok = 0, n_bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        buf_t b = {0};
        b_raw(&b, full.p, full.n);
        int n_changes = 1 + iter % 4;
        for (int k = 0; k < n_changes; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % header;
            uint8_t v = (uint8_t)(rng >> 17);
            /* mostly flip one bit; sometimes write an extreme byte */
            b.p[at] = (rng & 0x100) ? (uint8_t)(b.p[at] ^ (1u << (v & 7))) : (uint8_t)(v | 0x80);
        }
        tmp_path(path, sizeof path, "fuzz");
        write_file(path, b.p, b.n);
        capture_start();
        bt_gguf_t *out = NULL;
        bt_status_t st = bt_gguf_open(path, &out);
        char *log = capture_stop();
        if (st == BT_OK) {
            ck_assert_str_eq(log, "");
            (void)touch_all(out);
            bt_gguf_close(out);
            n_ok++;
        } else {
            ck_assert_ptr_null(out);
            check_one_line(log, "gguf: ");
            n_bad++;
        }
        free(log);
        unlink(path);
        b_free(&b);
    }
    ck_assert_int_gt(n_bad, 1000);
    ck_assert_int_gt(n_ok, 0);
    b_free(&full);
}
END_TEST

/* bt_gguf_open_buffer: the same file from memory gives the same result as
 * from disk (pointers into the caller's bytes, which close leaves alone);
 * every truncation is refused with one message naming the label; an empty
 * or NULL buffer is refused. */
START_TEST(test_open_buffer)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "buffer");
    write_small(path, 4, 0);
    buf_t full = {0};
    read_whole(path, &full);
    bt_gguf_t *gf, *gb = NULL;
    ck_assert_int_eq(bt_gguf_open(path, &gf), BT_OK);
    unlink(path);
    ck_assert_int_eq(bt_gguf_open_buffer(full.p, full.n, "mem.gguf", &gb), BT_OK);
    ck_assert_str_eq(gb->path, "mem.gguf");
    ck_assert_ptr_eq(gb->map, full.p);
    ck_assert_uint_eq(gb->file_size, full.n);
    ck_assert_uint_eq(gb->n_kv, gf->n_kv);
    ck_assert_uint_eq(gb->n_tensors, gf->n_tensors);
    ck_assert_uint_eq(gb->data_offset, gf->data_offset);
    ck_assert_uint_eq(bt_gguf_header_hash(gb), bt_gguf_header_hash(gf));
    for (uint64_t i = 0; i < gb->n_tensors; i++) {
        const bt_gguf_tensor_t *t = &gb->tensors[i];
        ck_assert_ptr_eq(t->data, full.p + gb->data_offset + t->offset);
        ck_assert_uint_eq(t->n_bytes, gf->tensors[i].n_bytes);
        ck_assert_int_eq(memcmp(t->data, gf->tensors[i].data, (size_t)t->n_bytes), 0);
    }
    ck_assert_uint_eq(touch_all(gb), touch_all(gf));
    uint64_t header = gb->data_offset;
    bt_gguf_close(gb);
    bt_gguf_close(gf);
    ck_assert_uint_eq(full.p[0], 'G'); /* close did not touch the caller's bytes */

    for (uint64_t len = 1; len < header; len += 7) {
        bt_gguf_t *g = NULL;
        capture_start();
        bt_status_t st = bt_gguf_open_buffer(full.p, (size_t)len, "cut.gguf", &g);
        char *log = capture_stop();
        ck_assert_int_eq(st, BT_ERR_FORMAT);
        ck_assert_ptr_null(g);
        check_one_line(log, "gguf: cut.gguf: ");
        free(log);
    }
    bt_gguf_t *g = NULL;
    capture_start();
    ck_assert_int_eq(bt_gguf_open_buffer(full.p, 0, NULL, &g), BT_ERR_FORMAT);
    char *log = capture_stop();
    check_one_line(log, "gguf: buffer: file is empty");
    free(log);
    capture_start();
    ck_assert_int_eq(bt_gguf_open_buffer(NULL, 16, "null", &g), BT_ERR_ARG);
    log = capture_stop();
    check_one_line(log, "gguf: null: ");
    free(log);
    ck_assert_ptr_null(g);
    b_free(&full);
}
END_TEST

/* ============================= boundaries ============================= */

/* Every validation rule of the reader at its boundary. Each maker builds a
 * small file from one value v; the rows give, for each rule, the largest
 * legal value (BT_OK: the file opens and everything it hands out is
 * readable, or for a rule that a file cannot pass alone, the message of
 * the next check) and the smallest violation: one byte, one element, one
 * count or one alignment unit past it (refused with want and one message
 * containing detail). tests/fuzz/make-seeds.py writes the same files as
 * fuzz seeds (edge-*.gguf); tests/mutants.txt weakens each rule by one
 * unit (F23-F64) and these rows notice each. */

#define U64_2P(k) (1ull << (k))

typedef unsigned long long ull; /* for printing uint64_t with %llu */

typedef void (*bound_maker_t)(buf_t *b, uint64_t v);

typedef struct bound {
    const char *rule;
    bound_maker_t make;
    uint64_t v;
    bt_status_t want;
    const char *detail; /* in the one message; NULL: opens */
} bound_t;

/* A file of one metadata entry: key, value type, then the value's bytes as
 * the caller appends them. */
static void b_one_kv(buf_t *b, const char *key, uint32_t type)
{
    b_header(b, 3, 0, 1);
    b_str(b, key);
    b_u32(b, type);
}

static void mk_magic(buf_t *b, uint64_t v)
{
    b_u32(b, (uint32_t)v);
    b_u32(b, 3);
    b_u64(b, 0);
    b_u64(b, 0);
}

static void mk_version(buf_t *b, uint64_t v) { b_header(b, (uint32_t)v, 0, 0); }

/* header, one 33-byte tensor info ("w": 1 f32), padding, its 4 bytes:
 * 44 bytes follow the header */
static void mk_tensor_count(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {1};
    b_header(b, 3, v, 0);
    b_tinfo(b, "w", 1, ne, BT_TYPE_F32, 0);
    b_pad(b, 32);
    b_zeros(b, 4);
}

/* only the 33-byte tensor info after the header: the count fits exactly */
static void mk_tensor_count_tight(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {1};
    b_header(b, 3, v, 0);
    b_tinfo(b, "w", 1, ne, BT_TYPE_F32, 0);
}

/* one 14-byte entry (key "k", uint8) */
static void mk_kv_count(buf_t *b, uint64_t v)
{
    b_header(b, 3, 0, v);
    b_str(b, "k");
    b_u32(b, BT_GGUF_UINT8);
    b_u8(b, 1);
}

/* 13 bytes after the header: the smallest entry the count check assumes */
static void mk_kv_count_tight(buf_t *b, uint64_t v)
{
    b_header(b, 3, 0, v);
    b_str(b, "k");
    b_u32(b, BT_GGUF_UINT8);
}

/* a key length, then 5 key bytes and the end of the file */
static void mk_key_len(buf_t *b, uint64_t v)
{
    b_header(b, 3, 0, 1);
    b_u64(b, v);
    b_raw(b, "abcde", 5);
}

/* a key of v bytes */
static void mk_key_empty(buf_t *b, uint64_t v)
{
    b_header(b, 3, 0, 1);
    b_u64(b, v);
    b_raw(b, "kk", (size_t)v);
    b_u32(b, BT_GGUF_UINT8);
    b_u8(b, 1);
}

/* the last string of the file: length v, 5 bytes there */
static void mk_str_len(buf_t *b, uint64_t v)
{
    b_one_kv(b, "s", BT_GGUF_STRING);
    b_u64(b, v);
    b_raw(b, "hello", 5);
}

static void mk_arr_str_len(buf_t *b, uint64_t v)
{
    b_one_kv(b, "a", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_STRING);
    b_u64(b, 1);
    b_u64(b, v);
    b_raw(b, "hello", 5);
}

static void mk_vtype(buf_t *b, uint64_t v)
{
    b_one_kv(b, "k", (uint32_t)v);
    b_zeros(b, 8);
}

static void mk_arr_etype(buf_t *b, uint64_t v)
{
    b_one_kv(b, "k", BT_GGUF_ARRAY);
    b_u32(b, (uint32_t)v);
    b_u64(b, 0);
}

static void mk_bool(buf_t *b, uint64_t v)
{
    b_one_kv(b, "b", BT_GGUF_BOOL);
    b_u8(b, (uint8_t)v);
}

/* [1, 0, v]: the last element is the one at the boundary */
static void mk_bool_arr(buf_t *b, uint64_t v)
{
    b_one_kv(b, "b", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_BOOL);
    b_u64(b, 3);
    b_u8(b, 1);
    b_u8(b, 0);
    b_u8(b, (uint8_t)v);
}

static void mk_depth(buf_t *b, uint64_t v)
{
    b_one_kv(b, "d", BT_GGUF_ARRAY);
    nested_depth(b, (int)v);
}

/* v uint8 elements announced, 5 there */
static void mk_arr_u8(buf_t *b, uint64_t v)
{
    b_one_kv(b, "a", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_UINT8);
    b_u64(b, v);
    b_raw(b, "abcde", 5);
}

/* v uint32 elements announced, 2 there */
static void mk_arr_u32(buf_t *b, uint64_t v)
{
    b_one_kv(b, "a", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_UINT32);
    b_u64(b, v);
    b_zeros(b, 8);
}

static void mk_arr_u64(buf_t *b, uint64_t v)
{
    b_one_kv(b, "a", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_UINT64);
    b_u64(b, v);
    b_zeros(b, 16);
}

/* v strings announced, 4 empty ones (32 bytes) there */
static void mk_arr_strs(buf_t *b, uint64_t v)
{
    b_one_kv(b, "a", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_STRING);
    b_u64(b, v);
    b_zeros(b, 4 * 8);
}

/* v arrays announced, 3 empty uint8 arrays (36 bytes) there */
static void mk_arr_arrs(buf_t *b, uint64_t v)
{
    b_one_kv(b, "a", BT_GGUF_ARRAY);
    b_u32(b, BT_GGUF_ARRAY);
    b_u64(b, v);
    for (int i = 0; i < 3; i++) {
        b_u32(b, BT_GGUF_UINT8);
        b_u64(b, 0);
    }
}

static void mk_name_len(buf_t *b, uint64_t v)
{
    char name[66] = {0};
    const uint64_t ne[] = {8};
    memset(name, 'n', (size_t)v);
    one_tensor(b, name, 1, ne, BT_TYPE_F32, 0, 32);
}

static void mk_ndims(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {8, 1, 1, 1, 1};
    one_tensor(b, "w", (uint32_t)v, ne, BT_TYPE_F32, 0, 32);
}

static void mk_ne1(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {8, v};
    one_tensor(b, "w", 2, ne, BT_TYPE_F32, 0, 32);
}

/* i8: one byte per element, so the size never overflows first */
static void mk_ne0_i8(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {v};
    one_tensor(b, "w", 1, ne, BT_TYPE_I8, 0, 32);
}

static void mk_nel_i8(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {2, v};
    one_tensor(b, "w", 2, ne, BT_TYPE_I8, 0, 32);
}

static void mk_bytes_f32(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {v};
    one_tensor(b, "w", 1, ne, BT_TYPE_F32, 0, 32);
}

/* 256 elements of type v: a whole block of every known type */
static void mk_type(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {256};
    one_tensor(b, "w", 1, ne, (uint32_t)v, 0, 2048);
}

static void mk_block_q8_0(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {v};
    one_tensor(b, "w", 1, ne, BT_TYPE_Q8_0, 0, 64);
}

static void mk_block_q4_k(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {v};
    one_tensor(b, "w", 1, ne, BT_TYPE_Q4_K, 0, 288);
}

/* 8 f32 at offset v of a 128-byte data section */
static void mk_offset(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {8};
    one_tensor(b, "w", 1, ne, BT_TYPE_F32, v, 128);
}

static void mk_offset_align64(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {8};
    b_header(b, 3, 1, 1);
    b_kv_u32(b, "general.alignment", 64);
    b_tinfo(b, "w", 1, ne, BT_TYPE_F32, v);
    b_pad(b, 64);
    b_zeros(b, 128);
}

/* one f32 whose infos end at byte 57 (data section at 64), the file v bytes */
static void mk_file_size(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {1};
    b_header(b, 3, 1, 0);
    b_tinfo(b, "w", 1, ne, BT_TYPE_F32, 0);
    b_zeros(b, (size_t)v - b->n);
}

/* 8 f32 at offset 0, the file v bytes */
static void mk_tensor_end(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {8};
    b_header(b, 3, 1, 0);
    b_tinfo(b, "w", 1, ne, BT_TYPE_F32, 0);
    b_zeros(b, (size_t)v - b->n);
}

/* one f32 at offset v (near 2^64: data section start + offset) */
static void mk_start_overflow(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {1};
    one_tensor(b, "w", 1, ne, BT_TYPE_F32, v, 32);
}

/* v f32 starting 32 bytes below 2^64 (start + size) */
static void mk_end_overflow(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {v};
    one_tensor(b, "w", 1, ne, BT_TYPE_F32, 0ull - 96, 32);
}

/* 'a': v bytes at 0, 'b': 32 bytes at 32 */
static void mk_overlap(buf_t *b, uint64_t v)
{
    const uint64_t ne_a[] = {v}, ne_b[] = {32};
    b_header(b, 3, 2, 0);
    b_tinfo(b, "a", 1, ne_a, BT_TYPE_I8, 0);
    b_tinfo(b, "b", 1, ne_b, BT_TYPE_I8, 32);
    b_pad(b, 32);
    b_zeros(b, 64);
}

/* Pairs of keys or names: the last two differ by one byte, the last is equal. */
static const char *const name_pairs[][2] = {{"ab", "ac"}, {"a", "ab"}, {"ab", "a"}, {"ab", "ab"}};

static void mk_dup_keys(buf_t *b, uint64_t v)
{
    b_header(b, 3, 0, 2);
    b_kv_u32(b, name_pairs[v][0], 1);
    b_kv_u32(b, name_pairs[v][1], 2);
}

static void mk_dup_names(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {8};
    b_header(b, 3, 2, 0);
    b_tinfo(b, name_pairs[v][0], 1, ne, BT_TYPE_F32, 0);
    b_tinfo(b, name_pairs[v][1], 1, ne, BT_TYPE_F32, 32);
    b_pad(b, 32);
    b_zeros(b, 64);
}

/* general.alignment = 32 as value type v */
static void mk_align_type(buf_t *b, uint64_t v)
{
    static const unsigned size[BT_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    b_one_kv(b, "general.alignment", (uint32_t)v);
    b_le(b, 32, size[v]);
}

static void mk_align(buf_t *b, uint64_t v)
{
    b_header(b, 3, 0, 1);
    b_kv_u32(b, "general.alignment", (uint32_t)v);
}

/* alignment 1 places the data section and the tensor right after the
 * infos, at an odd byte */
static void mk_align1_tensor(buf_t *b, uint64_t v)
{
    const uint64_t ne[] = {3};
    b_header(b, 3, 1, 1);
    b_kv_u32(b, "general.alignment", (uint32_t)v);
    b_tinfo(b, "w", 1, ne, BT_TYPE_I8, 1);
    b_zeros(b, 4);
}

static const bound_t bounds[] = {
    /* header */
    {"magic", mk_magic, BT_GGUF_MAGIC - 1, BT_ERR_FORMAT, "bad magic 0x46554746"},
    {"magic", mk_magic, BT_GGUF_MAGIC, BT_OK, NULL},
    {"magic", mk_magic, BT_GGUF_MAGIC + 1, BT_ERR_FORMAT, "bad magic 0x46554748"},
    {"version", mk_version, 1, BT_ERR_UNSUPPORTED, "GGUF version 1 is not supported"},
    {"version", mk_version, 2, BT_OK, NULL},
    {"version", mk_version, 3, BT_OK, NULL},
    {"version", mk_version, 4, BT_ERR_UNSUPPORTED, "GGUF version 4 is not supported"},
    {"tensor count", mk_tensor_count, 1, BT_OK, NULL},
    {"tensor count", mk_tensor_count, 2, BT_ERR_FORMAT,
     "tensor count 2 is impossible: 44 bytes follow the header"},
    {"tensor count, 33-byte info", mk_tensor_count_tight, 1, BT_ERR_FORMAT,
     "data section starts at byte 64 but file has 57"},
    {"tensor count, 33-byte info", mk_tensor_count_tight, 2, BT_ERR_FORMAT,
     "tensor count 2 is impossible: 33 bytes follow the header"},
    {"metadata count", mk_kv_count, 1, BT_OK, NULL},
    {"metadata count", mk_kv_count, 2, BT_ERR_FORMAT,
     "metadata count 2 is impossible: 14 bytes follow the header"},
    {"metadata count, 13 bytes", mk_kv_count_tight, 1, BT_ERR_FORMAT,
     "truncated: metadata key 'k' value needs 1 bytes at offset 37 but file has 37"},
    {"metadata count, 13 bytes", mk_kv_count_tight, 2, BT_ERR_FORMAT,
     "metadata count 2 is impossible: 13 bytes follow the header"},
    /* strings */
    {"key length", mk_key_len, 5, BT_ERR_FORMAT,
     "truncated: metadata key 'abcde' value type needs 4 bytes at offset 37 but file has 37"},
    {"key length", mk_key_len, 6, BT_ERR_FORMAT,
     "metadata entry 0 key of length 6 at offset 32 runs past the end (file has 37 bytes)"},
    {"empty key", mk_key_empty, 0, BT_ERR_FORMAT, "metadata entry 0 has an empty key"},
    {"empty key", mk_key_empty, 1, BT_OK, NULL},
    {"string length", mk_str_len, 5, BT_OK, NULL},
    {"string length", mk_str_len, 6, BT_ERR_FORMAT,
     "metadata key 's' string value of length 6 at offset 45 runs past the end (file has 50 "
     "bytes)"},
    {"array string length", mk_arr_str_len, 5, BT_OK, NULL},
    {"array string length", mk_arr_str_len, 6, BT_ERR_FORMAT,
     "metadata key 'a' array string of length 6 at offset 57 runs past the end (file has 62 "
     "bytes)"},
    /* value types */
    {"value type", mk_vtype, BT_GGUF_FLOAT64, BT_OK, NULL},
    {"value type", mk_vtype, BT_GGUF_VTYPE_COUNT, BT_ERR_FORMAT, "has unknown value type 13"},
    {"array element type", mk_arr_etype, BT_GGUF_FLOAT64, BT_OK, NULL},
    {"array element type", mk_arr_etype, BT_GGUF_VTYPE_COUNT, BT_ERR_FORMAT,
     "metadata key 'k' has unknown array element type 13"},
    {"bool", mk_bool, 1, BT_OK, NULL},
    {"bool", mk_bool, 2, BT_ERR_FORMAT, "metadata key 'b' bool value is 2 (must be 0 or 1)"},
    {"bool array", mk_bool_arr, 1, BT_OK, NULL},
    {"bool array", mk_bool_arr, 2, BT_ERR_FORMAT, "metadata key 'b' bool element 2 is 2"},
    {"array nesting", mk_depth, 8, BT_OK, NULL},
    {"array nesting", mk_depth, 9, BT_ERR_FORMAT, "has arrays nested more than 8 deep"},
    /* array counts */
    {"uint8 array count", mk_arr_u8, 5, BT_OK, NULL},
    {"uint8 array count", mk_arr_u8, 6, BT_ERR_FORMAT,
     "truncated: metadata key 'a' array of 6 uint8 needs 6 bytes at offset 49 but file has 54"},
    {"uint32 array count", mk_arr_u32, 2, BT_OK, NULL},
    {"uint32 array count", mk_arr_u32, 3, BT_ERR_FORMAT,
     "array of 3 uint32 needs 12 bytes at offset 49 but file has 57"},
    {"uint64 array bytes", mk_arr_u64, U64_2P(61) - 1, BT_ERR_FORMAT,
     "array of 2305843009213693951 uint64 needs 18446744073709551608 bytes"},
    {"uint64 array bytes", mk_arr_u64, U64_2P(61), BT_ERR_FORMAT,
     "array count 2305843009213693952 x uint64 size 8 overflows"},
    {"string array count", mk_arr_strs, 4, BT_OK, NULL},
    {"string array count", mk_arr_strs, 5, BT_ERR_FORMAT,
     "array count 5 of string is impossible: only 32 bytes left (each element needs at least 8)"},
    {"nested array count", mk_arr_arrs, 3, BT_OK, NULL},
    {"nested array count", mk_arr_arrs, 4, BT_ERR_FORMAT,
     "array count 4 of array is impossible: only 36 bytes left (each element needs at least 12)"},
    /* tensor infos */
    {"tensor name length", mk_name_len, 0, BT_ERR_FORMAT, "tensor info 0 has an empty name"},
    {"tensor name length", mk_name_len, 1, BT_OK, NULL},
    {"tensor name length", mk_name_len, 64, BT_OK, NULL},
    {"tensor name length", mk_name_len, 65, BT_ERR_FORMAT, "is 65 bytes long (at most 64)"},
    {"n_dims", mk_ndims, 0, BT_ERR_FORMAT, "tensor 'w' has n_dims 0 (must be 1..4)"},
    {"n_dims", mk_ndims, 1, BT_OK, NULL},
    {"n_dims", mk_ndims, 4, BT_OK, NULL},
    {"n_dims", mk_ndims, 5, BT_ERR_FORMAT, "tensor 'w' has n_dims 5 (must be 1..4)"},
    {"dim zero", mk_ne1, 0, BT_ERR_FORMAT, "tensor 'w' ne[1] is 0 (must be 1..2^63-1)"},
    {"dim zero", mk_ne1, 1, BT_OK, NULL},
    {"dim range", mk_ne0_i8, U64_2P(63) - 1, BT_ERR_FORMAT,
     "tensor 'w' ends at byte 9223372036854775871 but file has 96"},
    {"dim range", mk_ne0_i8, U64_2P(63), BT_ERR_FORMAT,
     "tensor 'w' ne[0] is 9223372036854775808 (must be 1..2^63-1)"},
    {"element count", mk_nel_i8, U64_2P(62) - 1, BT_ERR_FORMAT,
     "tensor 'w' ends at byte 9223372036854775902 but file has 128"},
    {"element count", mk_nel_i8, U64_2P(62), BT_ERR_FORMAT,
     "tensor 'w' element count overflows at ne[1] = 4611686018427387904"},
    {"byte size", mk_bytes_f32, U64_2P(62) - 1, BT_ERR_FORMAT,
     "tensor 'w' offset 0 + size 18446744073709551612 overflows"},
    {"byte size", mk_bytes_f32, U64_2P(62), BT_ERR_FORMAT, "tensor 'w' byte size overflows"},
    /* type ids: each end of each run of known ids */
    {"type id", mk_type, BT_TYPE_Q4_1, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_Q4_1 + 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 4"},
    {"type id", mk_type, BT_TYPE_Q5_0 - 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 5"},
    {"type id", mk_type, BT_TYPE_Q5_0, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_Q8_K, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_Q8_K + 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 16"},
    {"type id", mk_type, BT_TYPE_I8 - 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 23"},
    {"type id", mk_type, BT_TYPE_I8, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_F64, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_F64 + 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 29"},
    {"type id", mk_type, BT_TYPE_BF16, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_BF16 + 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 31"},
    {"type id", mk_type, BT_TYPE_MXFP4 - 1, BT_ERR_UNSUPPORTED, "has unknown tensor type id 38"},
    {"type id", mk_type, BT_TYPE_MXFP4, BT_OK, NULL},
    {"type id", mk_type, BT_TYPE_COUNT, BT_ERR_UNSUPPORTED, "has unknown tensor type id 40"},
    {"block size", mk_block_q8_0, 31, BT_ERR_FORMAT,
     "tensor 'w' ne[0] = 31 is not a multiple of the q8_0 block size 32"},
    {"block size", mk_block_q8_0, 32, BT_OK, NULL},
    {"block size", mk_block_q8_0, 33, BT_ERR_FORMAT,
     "tensor 'w' ne[0] = 33 is not a multiple of the q8_0 block size 32"},
    {"block size", mk_block_q4_k, 255, BT_ERR_FORMAT, "ne[0] = 255 is not a multiple"},
    {"block size", mk_block_q4_k, 256, BT_OK, NULL},
    {"block size", mk_block_q4_k, 257, BT_ERR_FORMAT, "ne[0] = 257 is not a multiple"},
    /* offsets, the data section, extents */
    {"offset alignment", mk_offset, 31, BT_ERR_FORMAT,
     "tensor 'w' offset 31 is not a multiple of the alignment 32"},
    {"offset alignment", mk_offset, 32, BT_OK, NULL},
    {"offset alignment", mk_offset, 33, BT_ERR_FORMAT,
     "tensor 'w' offset 33 is not a multiple of the alignment 32"},
    {"offset alignment 64", mk_offset_align64, 32, BT_ERR_FORMAT,
     "tensor 'w' offset 32 is not a multiple of the alignment 64"},
    {"offset alignment 64", mk_offset_align64, 64, BT_OK, NULL},
    {"data section", mk_file_size, 63, BT_ERR_FORMAT,
     "data section starts at byte 64 but file has 63"},
    {"data section", mk_file_size, 64, BT_ERR_FORMAT, "tensor 'w' ends at byte 68 but file has 64"},
    {"data section", mk_file_size, 68, BT_OK, NULL},
    {"tensor end", mk_tensor_end, 95, BT_ERR_FORMAT, "tensor 'w' ends at byte 96 but file has 95"},
    {"tensor end", mk_tensor_end, 96, BT_OK, NULL},
    {"tensor end, offset", mk_offset, 96, BT_OK, NULL},
    {"tensor end, offset", mk_offset, 128, BT_ERR_FORMAT,
     "tensor 'w' ends at byte 224 but file has 192"},
    {"start overflow", mk_start_overflow, 0ull - 96, BT_ERR_FORMAT,
     "tensor 'w' ends at byte 18446744073709551588 but file has 96"},
    {"start overflow", mk_start_overflow, 0ull - 64, BT_ERR_FORMAT,
     "tensor 'w' offset 18446744073709551552 + size 4 overflows"},
    {"end overflow", mk_end_overflow, 7, BT_ERR_FORMAT,
     "tensor 'w' ends at byte 18446744073709551612 but file has 96"},
    {"end overflow", mk_end_overflow, 8, BT_ERR_FORMAT,
     "tensor 'w' offset 18446744073709551520 + size 32 overflows"},
    {"overlap", mk_overlap, 32, BT_OK, NULL},
    {"overlap", mk_overlap, 33, BT_ERR_FORMAT,
     "tensors 'a' (data bytes 0..33) and 'b' (from 32) overlap"},
    /* duplicates */
    {"duplicate key", mk_dup_keys, 0, BT_OK, NULL},
    {"duplicate key", mk_dup_keys, 1, BT_OK, NULL},
    {"duplicate key", mk_dup_keys, 2, BT_OK, NULL},
    {"duplicate key", mk_dup_keys, 3, BT_ERR_FORMAT,
     "duplicate metadata key 'ab' (entries 0 and 1)"},
    {"duplicate name", mk_dup_names, 0, BT_OK, NULL},
    {"duplicate name", mk_dup_names, 1, BT_OK, NULL},
    {"duplicate name", mk_dup_names, 2, BT_OK, NULL},
    {"duplicate name", mk_dup_names, 3, BT_ERR_FORMAT,
     "duplicate tensor name 'ab' (tensors 0 and 1)"},
    /* general.alignment */
    {"alignment type", mk_align_type, BT_GGUF_UINT16, BT_ERR_FORMAT,
     "general.alignment has type uint16 (must be uint32)"},
    {"alignment type", mk_align_type, BT_GGUF_UINT32, BT_OK, NULL},
    {"alignment type", mk_align_type, BT_GGUF_INT32, BT_ERR_FORMAT,
     "general.alignment has type int32 (must be uint32)"},
    {"alignment type", mk_align_type, BT_GGUF_UINT64, BT_ERR_FORMAT,
     "general.alignment has type uint64 (must be uint32)"},
    {"alignment", mk_align, 0, BT_ERR_FORMAT, "general.alignment is 0 (must be a nonzero power"},
    {"alignment", mk_align, 1, BT_OK, NULL},
    {"alignment", mk_align, 2, BT_OK, NULL},
    {"alignment", mk_align, 31, BT_ERR_FORMAT, "general.alignment is 31 (must be"},
    {"alignment", mk_align, 32, BT_OK, NULL},
    {"alignment", mk_align, 33, BT_ERR_FORMAT, "general.alignment is 33 (must be"},
    {"alignment", mk_align, 96, BT_ERR_FORMAT, "general.alignment is 96 (must be"},
    {"alignment", mk_align, U64_2P(31), BT_OK, NULL},
    {"alignment", mk_align, U64_2P(31) + U64_2P(30), BT_ERR_FORMAT,
     "general.alignment is 3221225472 (must be"},
    {"alignment 1, odd offset", mk_align1_tensor, 1, BT_OK, NULL},
    {"alignment 1, odd offset", mk_align1_tensor, 2, BT_ERR_FORMAT,
     "tensor 'w' offset 1 is not a multiple of the alignment 2"},
};

#define N_BOUNDS ((int)(sizeof bounds / sizeof bounds[0]))

/* Row _i of bounds: refused with its message, or accepted and readable. */
START_TEST(test_bound_reader)
{
    const bound_t *r = &bounds[_i];
    buf_t b = {0};
    r->make(&b, r->v);
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "bound");
    write_file(path, b.p, b.n);
    bt_gguf_t *g = NULL;
    capture_start();
    bt_status_t st = bt_gguf_open(path, &g);
    char *log = capture_stop();
    ck_assert_msg(st == r->want, "%s = %llu: status %d (%s), expected %d; log: %s", r->rule,
                  (ull)r->v, st, bt_status_str(st), r->want, log);
    if (st == BT_OK) {
        ck_assert_msg(log[0] == '\0', "%s = %llu: logged %s", r->rule, (ull)r->v, log);
        (void)touch_all(g);
        bt_gguf_close(g);
    } else {
        char prefix[PATH_MAX + 16];
        snprintf(prefix, sizeof prefix, "gguf: %s: ", path);
        ck_assert_ptr_null(g);
        check_one_line(log, prefix);
        ck_assert_msg(strstr(log, r->detail) != NULL, "%s = %llu: log <<%s>> lacks '%s'",
                      r->rule, (ull)r->v, log, r->detail);
    }
    free(log);
    unlink(path);
    b_free(&b);
}
END_TEST

/* The getters' range checks at their edges: the largest value that
 * converts and the first that does not, on both sides. */
START_TEST(test_bound_getters)
{
    char path[PATH_MAX];
    tmp_path(path, sizeof path, "getb");
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    const struct {
        const char *key;
        bt_gguf_vtype_t type;
        uint64_t bits;
    } vals[] = {
        {"u64.max", BT_GGUF_UINT64, UINT32_MAX},
        {"u64.over", BT_GGUF_UINT64, (uint64_t)UINT32_MAX + 1},
        {"i64.zero", BT_GGUF_INT64, 0},
        {"i64.neg", BT_GGUF_INT64, (uint64_t)-1},
        {"i64.max", BT_GGUF_INT64, UINT32_MAX},
        {"i64.over", BT_GGUF_INT64, (uint64_t)UINT32_MAX + 1},
    };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        uint8_t le[8];
        for (int k = 0; k < 8; k++)
            le[k] = (uint8_t)(vals[i].bits >> (8 * k));
        ck_assert_int_eq(bt_gguf_writer_set_raw(w, vals[i].key, vals[i].type, le, 8), BT_OK);
    }
    const double dv[] = {FLT_MAX, nextafter((double)FLT_MAX, INFINITY), -FLT_MAX,
                         nextafter(-(double)FLT_MAX, -INFINITY), -INFINITY};
    const char *dk[] = {"f64.max", "f64.over", "f64.min", "f64.under", "f64.-inf"};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(bt_gguf_writer_set_raw(w, dk[i], BT_GGUF_FLOAT64, &dv[i], 8), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);

    uint32_t u = 0;
    EXPECT_GET(bt_gguf_get_u32(g, "u64.max", &u), BT_OK);
    ck_assert_uint_eq(u, UINT32_MAX);
    EXPECT_GET(bt_gguf_get_u32(g, "u64.over", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "i64.zero", &u), BT_OK);
    ck_assert_uint_eq(u, 0);
    EXPECT_GET(bt_gguf_get_u32(g, "i64.neg", &u), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_u32(g, "i64.max", &u), BT_OK);
    ck_assert_uint_eq(u, UINT32_MAX);
    EXPECT_GET(bt_gguf_get_u32(g, "i64.over", &u), BT_ERR_FORMAT);
    float f = 0;
    EXPECT_GET(bt_gguf_get_f32(g, "f64.max", &f), BT_OK);
    ck_assert(f == FLT_MAX);
    EXPECT_GET(bt_gguf_get_f32(g, "f64.over", &f), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_f32(g, "f64.min", &f), BT_OK);
    ck_assert(f == -FLT_MAX);
    EXPECT_GET(bt_gguf_get_f32(g, "f64.under", &f), BT_ERR_FORMAT);
    EXPECT_GET(bt_gguf_get_f32(g, "f64.-inf", &f), BT_OK); /* not finite: kept as it is */
    ck_assert(isinf(f) && f < 0);
    bt_gguf_close(g);
    unlink(path);
}
END_TEST

/* ---- the model binding's checks of the file's tensors ---- */

/* One change to a model file: a tensor's dims or type, or a u32 key. */
typedef struct medit {
    const char *tensor; /* NULL: no tensor changed */
    uint32_t n_dims;    /* 0: keep */
    int64_t dne[4];     /* added to the tensor's dims (when n_dims != 0: of n_dims) */
    int type;           /* -1: keep (0 is f32) */
    const char *key;    /* NULL: no key changed */
    uint32_t u32;
} medit_t;

/* Writes src's metadata and tensors to path with e applied (a changed
 * tensor gets zero data of its new size). Metadata values are copied as
 * their bytes in the map: from after the value type to the next key's
 * length (or the first tensor info's). */
static void rewrite_model(const bt_gguf_t *src, const char *path, const medit_t *e)
{
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    ck_assert_uint_gt(src->n_tensors, 0);
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const bt_gguf_kv_t *kv = &src->kv[i];
        char key[256];
        ck_assert_uint_lt(kv->key.len, sizeof key);
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = '\0';
        if (e->key != NULL && strcmp(key, e->key) == 0) {
            ck_assert_int_eq(bt_gguf_writer_set_u32(w, key, e->u32), BT_OK);
            continue;
        }
        const uint8_t *start = (const uint8_t *)kv->key.ptr + kv->key.len + 4;
        const uint8_t *end = i + 1 < src->n_kv ? (const uint8_t *)src->kv[i + 1].key.ptr - 8
                                               : (const uint8_t *)src->tensors[0].name.ptr - 8;
        ck_assert_int_eq(bt_gguf_writer_set_raw(w, key, kv->type, start, (uint64_t)(end - start)),
                         BT_OK);
    }
    uint64_t *sizes = calloc((size_t)src->n_tensors, sizeof *sizes);
    ck_assert_ptr_nonnull(sizes);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const bt_gguf_tensor_t *t = &src->tensors[i];
        char name[80];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        uint32_t n_dims = t->n_dims, type = t->type;
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (e->tensor != NULL && strcmp(name, e->tensor) == 0) {
            if (e->n_dims != 0)
                n_dims = e->n_dims;
            for (int d = 0; d < 4; d++)
                ne[d] = (uint64_t)((int64_t)ne[d] + e->dne[d]);
            if (e->type >= 0)
                type = (uint32_t)e->type;
        }
        ck_assert_int_eq(bt_gguf_writer_add_tensor(w, name, type, n_dims, ne), BT_OK);
        ck_assert_int_eq(bt_type_row_bytes(type, ne[0], &sizes[i]), 0);
        sizes[i] *= ne[1] * ne[2] * ne[3];
    }
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const bt_gguf_tensor_t *t = &src->tensors[i];
        void *zeros = NULL;
        const void *data = t->data;
        if (sizes[i] != t->n_bytes)
            data = zeros = calloc(1, (size_t)sizes[i]);
        ck_assert_ptr_nonnull(data);
        ck_assert_int_eq(bt_gguf_writer_write_tensor(w, data, sizes[i]), BT_OK);
        free(zeros);
    }
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    free(sizes);
}

/* The one-layer tiny llama in f32, read back as the source of the edits. */
static bt_gguf_t *open_tiny_model(char *path, size_t cap)
{
    bt_synth_shape_t s;
    ck_assert_int_eq(bt_synth_shape("tiny", &s), BT_OK);
    s.n_layer = 1;
    tmp_path(path, cap, "tiny");
    ck_assert_int_eq(bt_synth_write(path, &s, BT_TYPE_F32, 1), BT_OK);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    return g;
}

/* The message of a tensor of shape ne where [want0, want1] was expected. */
static const char *shape_msg(char *buf, size_t cap, const char *name, const uint64_t *ne,
                             uint64_t want0, uint64_t want1)
{
    snprintf(buf, cap, "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
             name, (ull)ne[0], (ull)ne[1], (ull)ne[2], (ull)ne[3], (ull)want0, (ull)want1);
    return buf;
}

/* Each dim of a vector and of a matrix one below and one above the
 * model's, a third and a fourth dim of 1 (accepted) and of 2; a norm
 * vector in f16 instead of f32; a matrix in a type the kernels cannot
 * compute with (q8_1) beside one they can (q8_0); block_count at the most
 * the tensor count allows (the file's one layer) and one more. A refused
 * file gives one message naming the tensor or key and the value; an
 * accepted one opens without a message. */
START_TEST(test_bound_model)
{
    char src_path[PATH_MAX];
    bt_gguf_t *src = open_tiny_model(src_path, sizeof src_path);
    const bt_gguf_tensor_t *norm = bt_gguf_find_tensor(src, "output_norm.weight");
    const bt_gguf_tensor_t *up = bt_gguf_find_tensor(src, "blk.0.ffn_up.weight");
    ck_assert_ptr_nonnull(norm);
    ck_assert_ptr_nonnull(up);
    ck_assert_uint_eq(norm->n_dims, 1);
    ck_assert_uint_eq(up->n_dims, 2);
    const uint64_t e = norm->ne[0], u0 = up->ne[0], u1 = up->ne[1];
    const char *nn = "output_norm.weight", *un = "blk.0.ffn_up.weight";
    char shape[8][160];
    shape_msg(shape[0], sizeof shape[0], nn, (uint64_t[]){e - 1, 1, 1, 1}, e, 1);
    shape_msg(shape[1], sizeof shape[1], nn, (uint64_t[]){e + 1, 1, 1, 1}, e, 1);
    shape_msg(shape[2], sizeof shape[2], un, (uint64_t[]){u0 - 1, u1, 1, 1}, u0, u1);
    shape_msg(shape[3], sizeof shape[3], un, (uint64_t[]){u0 + 1, u1, 1, 1}, u0, u1);
    shape_msg(shape[4], sizeof shape[4], un, (uint64_t[]){u0, u1 - 1, 1, 1}, u0, u1);
    shape_msg(shape[5], sizeof shape[5], un, (uint64_t[]){u0, u1 + 1, 1, 1}, u0, u1);
    shape_msg(shape[6], sizeof shape[6], un, (uint64_t[]){u0, u1, 2, 1}, u0, u1);
    shape_msg(shape[7], sizeof shape[7], un, (uint64_t[]){u0, u1, 1, 2}, u0, u1);
    /* block_count: one layer's tensors fit once into the file's tensor count */
    uint64_t per_layer = 0;
    for (uint64_t i = 0; i < src->n_tensors; i++)
        per_layer += src->tensors[i].name.len > 6 &&
                     memcmp(src->tensors[i].name.ptr, "blk.0.", 6) == 0;
    ck_assert_uint_eq(src->n_tensors / per_layer, 1);
    const struct {
        medit_t e;
        bt_status_t want;
        const char *detail;
    } rows[] = {
        {{.type = -1}, BT_OK, NULL},
        {{.tensor = nn, .dne = {-1}, .type = -1}, BT_ERR_FORMAT, shape[0]},
        {{.tensor = nn, .dne = {1}, .type = -1}, BT_ERR_FORMAT, shape[1]},
        {{.tensor = un, .dne = {-1}, .type = -1}, BT_ERR_FORMAT, shape[2]},
        {{.tensor = un, .dne = {1}, .type = -1}, BT_ERR_FORMAT, shape[3]},
        {{.tensor = un, .dne = {0, -1}, .type = -1}, BT_ERR_FORMAT, shape[4]},
        {{.tensor = un, .dne = {0, 1}, .type = -1}, BT_ERR_FORMAT, shape[5]},
        {{.tensor = un, .n_dims = 3, .type = -1}, BT_OK, NULL},
        {{.tensor = un, .n_dims = 3, .dne = {0, 0, 1}, .type = -1}, BT_ERR_FORMAT, shape[6]},
        {{.tensor = un, .n_dims = 4, .type = -1}, BT_OK, NULL},
        {{.tensor = un, .n_dims = 4, .dne = {0, 0, 0, 1}, .type = -1}, BT_ERR_FORMAT, shape[7]},
        {{.tensor = nn, .type = BT_TYPE_F16}, BT_ERR_UNSUPPORTED,
         "tensor 'output_norm.weight' must be f32, found type 1"},
        {{.tensor = un, .type = BT_TYPE_Q8_0}, BT_OK, NULL},
        {{.tensor = un, .type = BT_TYPE_Q8_1}, BT_ERR_UNSUPPORTED,
         "tensor 'blk.0.ffn_up.weight' has type q8_1 (9), which baton cannot compute with"},
        {{.key = "llama.block_count", .u32 = 1, .type = -1}, BT_OK, NULL},
        {{.key = "llama.block_count", .u32 = 2, .type = -1}, BT_ERR_FORMAT,
         "block_count 2 is impossible"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char path[PATH_MAX];
        tmp_path(path, sizeof path, "model");
        rewrite_model(src, path, &rows[i].e);
        bt_model_t *m = NULL;
        capture_start();
        bt_status_t st = bt_model_open(path, &m);
        char *log = capture_stop();
        ck_assert_msg(st == rows[i].want, "row %zu: status %d (%s), expected %d; log: %s", i, st,
                      bt_status_str(st), rows[i].want, log);
        if (st == BT_OK) {
            ck_assert_msg(log[0] == '\0', "row %zu logged: %s", i, log);
            bt_model_free(m);
        } else {
            ck_assert_ptr_null(m);
            check_one_line(log, "model: ");
            ck_assert_msg(strstr(log, rows[i].detail) != NULL, "row %zu: log <<%s>> lacks '%s'",
                          i, log, rows[i].detail);
        }
        free(log);
        unlink(path);
    }
    bt_gguf_close(src);
    unlink(src_path);
}
END_TEST

static Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *core = tcase_create("core");
    tcase_add_test(core, test_round_trip);
    tcase_add_test(core, test_custom_alignment);
    tcase_add_test(core, test_no_tensors);
    tcase_add_test(core, test_hand_made_ok);
    tcase_add_test(core, test_header_hash);
    tcase_add_test(core, test_getters);
    tcase_add_test(core, test_writer_errors);
    tcase_add_test(core, test_writer_io_error);
    suite_add_tcase(s, core);

    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 120); /* the exhaustive loops are slow under sanitizers */
    tcase_add_test(limits, test_empty_missing_dir);
    tcase_add_test(limits, test_open_buffer);
    tcase_add_test(limits, test_bad_magic);
    tcase_add_test(limits, test_bad_version);
    tcase_add_test(limits, test_huge_counts);
    tcase_add_test(limits, test_bad_strings);
    tcase_add_test(limits, test_bad_value_types);
    tcase_add_test(limits, test_bad_bool);
    tcase_add_test(limits, test_bad_array_counts);
    tcase_add_test(limits, test_nested_too_deep);
    tcase_add_test(limits, test_bad_dims);
    tcase_add_test(limits, test_dims_overflow);
    tcase_add_test(limits, test_bad_tensor_type);
    tcase_add_test(limits, test_bad_offsets);
    tcase_add_test(limits, test_overlap);
    tcase_add_test(limits, test_duplicates);
    tcase_add_test(limits, test_bad_alignment);
    tcase_add_test(limits, test_bad_tensor_names);
    tcase_add_test(limits, test_truncated_everywhere);
    tcase_add_test(limits, test_random_corruption);
    suite_add_tcase(s, limits);

    TCase *bounds_tc = tcase_create("boundaries");
    tcase_set_timeout(bounds_tc, 60);
    tcase_add_loop_test(bounds_tc, test_bound_reader, 0, N_BOUNDS);
    tcase_add_test(bounds_tc, test_bound_getters);
    tcase_add_test(bounds_tc, test_bound_model);
    suite_add_tcase(s, bounds_tc);
    return s;
}

/* Removes tmp_dir and whatever a failed test left in it. */
static void remove_tmp_dir(void)
{
    DIR *d = opendir(tmp_dir);
    if (d != NULL) {
        struct dirent *e;
        char path[PATH_MAX + 256];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
}

int main(void)
{
    if (mkdtemp(tmp_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int failed = tu_run(gguf_suite());
    remove_tmp_dir();
    return failed != 0;
}
