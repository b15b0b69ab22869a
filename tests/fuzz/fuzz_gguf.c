/*
 * fuzz_gguf.c: libFuzzer target for the GGUF reader.
 *
 * Each input is a whole file, parsed from memory by bt_gguf_open_buffer()
 * (the reader bt_gguf_open() runs on the mapped file). libFuzzer hands over
 * a heap copy of exactly size bytes, so AddressSanitizer sees any read past
 * the end. On success the target uses everything the header promises: every
 * key through the typed getters, every string array walked, every tensor
 * found by name and its first and last data byte read, and the header hash.
 * A broken promise (a tensor outside the buffer, a lookup that misses)
 * aborts, which libFuzzer reports as a crash.
 *
 * Error messages are captured and dropped: a failing open logs one line,
 * and printing millions of them would only slow the run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts with a reason: a broken invariant is a crash to libFuzzer. */
#define FUZZ_ASSERT(cond) \
    do { \
        if (!(cond)) { \
            bt_log_capture(0); \
            bt_log_error("fuzz_gguf: assertion failed: %s", #cond); \
            abort(); \
        } \
    } while (0)

/* Reads every string of a string array; the pieces must lie in the buffer. */
static void walk_strings(const bt_gguf_t *g, const bt_gguf_kv_t *kv)
{
    uint64_t pos = 0, n = 0;
    bt_gguf_str_t s;
    const uint8_t *end = g->map + g->file_size;
    while (bt_gguf_arr_next_str(kv, &pos, &s)) {
        FUZZ_ASSERT((const uint8_t *)s.ptr >= g->map && (const uint8_t *)s.ptr <= end);
        FUZZ_ASSERT(s.len <= (uint64_t)(end - (const uint8_t *)s.ptr));
        n++;
    }
    FUZZ_ASSERT(n == kv->arr_n);
}

static void use_file(const bt_gguf_t *g)
{
    volatile uint8_t sink = 0;
    char key[128];

    for (uint64_t i = 0; i < g->n_kv; i++) {
        const bt_gguf_kv_t *kv = &g->kv[i];
        /* The getters take a NUL-terminated key; longer keys are skipped. */
        if (kv->key.len < sizeof key && memchr(kv->key.ptr, '\0', kv->key.len) == NULL) {
            memcpy(key, kv->key.ptr, kv->key.len);
            key[kv->key.len] = '\0';
            FUZZ_ASSERT(bt_gguf_find_kv(g, key) != NULL);
            uint32_t u;
            float f;
            bool b;
            bt_gguf_str_t s;
            (void)bt_gguf_get_u32(g, key, &u);
            (void)bt_gguf_get_f32(g, key, &f);
            (void)bt_gguf_get_bool(g, key, &b);
            if (bt_gguf_get_str(g, key, &s) == BT_OK && s.len > 0)
                sink ^= (uint8_t)s.ptr[s.len - 1];
        }
        if (kv->type == BT_GGUF_ARRAY && kv->arr_type == BT_GGUF_STRING)
            walk_strings(g, kv);
        if (kv->type == BT_GGUF_ARRAY && kv->arr_bytes > 0)
            sink ^= kv->arr_data[kv->arr_bytes - 1];
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const bt_gguf_tensor_t *t = &g->tensors[i];
        const uint8_t *p = t->data;
        FUZZ_ASSERT(t->n_bytes > 0 && p >= g->map && p + t->n_bytes <= g->map + g->file_size);
        sink ^= p[0];
        sink ^= p[t->n_bytes - 1];
        if (t->name.len < sizeof key && memchr(t->name.ptr, '\0', t->name.len) == NULL) {
            memcpy(key, t->name.ptr, t->name.len);
            key[t->name.len] = '\0';
            FUZZ_ASSERT(bt_gguf_find_tensor(g, key) == t);
        }
    }
    FUZZ_ASSERT(bt_gguf_find_tensor(g, "fuzz: no such tensor") == NULL);
    sink ^= (uint8_t)bt_gguf_header_hash(g);
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_gguf_t *g = NULL;
    bt_log_capture(1);
    if (bt_gguf_open_buffer(data, size, "fuzz.gguf", &g) == BT_OK) {
        use_file(g);
        bt_gguf_close(g);
    }
    bt_log_flush_captured(0);
    bt_log_capture(0);
    return 0;
}
