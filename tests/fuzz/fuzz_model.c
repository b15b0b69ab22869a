/*
 * fuzz_model.c: libFuzzer target for a model bound from a GGUF file and
 * one forward pass through it.
 *
 * Each input is a whole file. bt_model_open() takes a path (the programs'
 * way in), so the input is written to an in-memory file (memfd) and opened
 * as /proc/self/fd/N: no disk, and the reader maps it as it maps a model.
 * When the hyperparameters load and every layer, the embeddings and the
 * head bind (shapes and types checked against them), two tokens (the first
 * and the last id) run through embed, all layers and the head, with the
 * scalar reference kernels or the fast ones and an f32 or f16 KV cache
 * (chosen by the input's size, so a given input always takes the same
 * path). Hostile but consistent
 * shapes (head counts, rope dims, key lengths, vocab sizes, sliding
 * windows, the tensors of every architecture in the table: the seed
 * corpus has a model of each) then reach the kernels, where
 * AddressSanitizer watches every buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "forward.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond) \
    do { \
        if (!(cond)) { \
            bt_log_capture(0); \
            bt_log_error("fuzz_model: assertion failed: %s", #cond); \
            abort(); \
        } \
    } while (0)

/* Cache positions and tokens of the forward pass, and the most memory it
 * may ask for (bigger models are bound but not run). */
#define FUZZ_CTX 4
#define FUZZ_TOK 2
#define FUZZ_MAX_BYTES ((size_t)64 << 20)

static void run_forward(const bt_model_t *m, const bt_ops_t *ops, uint32_t kv_type)
{
    const bt_hparams_t *hp = &m->hp;
    if (bt_forward_bytes(m, FUZZ_CTX, 1, FUZZ_TOK, 1, kv_type) > FUZZ_MAX_BYTES)
        return;
    bt_forward_t *f = NULL;
    if (bt_forward_init(m, ops, FUZZ_CTX, 1, FUZZ_TOK, 1, kv_type, &f) != BT_OK)
        return;
    float *x = malloc(sizeof *x * FUZZ_TOK * (size_t)hp->n_embd);           /* [FUZZ_TOK, n_embd] */
    float *logits = malloc(sizeof *logits * FUZZ_TOK * (size_t)hp->n_vocab); /* [FUZZ_TOK, n_vocab] */
    FUZZ_ASSERT(x != NULL && logits != NULL);
    int32_t tokens[FUZZ_TOK] = {0, hp->n_vocab - 1};
    if (bt_forward_embed(f, tokens, FUZZ_TOK, x) == BT_OK &&
        bt_forward_layers(f, x, FUZZ_TOK, 0) == BT_OK) {
        bt_forward_head(f, x, FUZZ_TOK, logits);
        volatile float sink = logits[0] + logits[FUZZ_TOK * (size_t)hp->n_vocab - 1];
        (void)sink;
    }
    /* positions past the cache are refused, not written */
    FUZZ_ASSERT(bt_forward_layers(f, x, FUZZ_TOK, FUZZ_CTX - 1) == BT_ERR_ARG);
    free(logits);
    free(x);
    bt_forward_free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_log_capture(1);
    int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    FUZZ_ASSERT(fd >= 0);
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        FUZZ_ASSERT(w > 0);
        done += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    bt_model_t *m = NULL;
    if (bt_model_load(path, 0, -1, true, true, &m) == BT_OK) {
        uint64_t bytes, params;
        bt_model_file_stats(m, &bytes, &params);
        FUZZ_ASSERT(bytes <= size);
        FUZZ_ASSERT(bt_model_max_n_in(m) > 0);
        (void)bt_ftype_name(m->file_type);
        run_forward(m, (size & 1) ? &bt_ops_ref : &bt_ops_cpu,
                    (size & 2) ? BT_TYPE_F16 : BT_TYPE_F32);
        bt_model_free(m);
    }
    close(fd);
    bt_log_flush_captured(0);
    bt_log_capture(0);
    return 0;
}
