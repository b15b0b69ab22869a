/*
 * synth.h: synthetic llama-family models with seeded random weights.
 *
 * Named shapes give the dimensions of real models so benchmarks run with no
 * download; any field can be overridden before writing. Weights are uniform
 * with the variance of N(0, 1/fan_in) for matrices, N(0, 1) for token
 * embeddings and 1 + N(0, 0.01) for norm weights, so activations stay
 * finite through every layer. Each tensor has its own random stream derived
 * from (seed, tensor name), so the same seed gives the same weights for any
 * type, and a file is the same bytes every time.
 */
#ifndef BT_SYNTH_H
#define BT_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

typedef struct bt_synth_shape {
    const char *name;
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx_train;
    float rope_base, rms_eps;
    bool tied; /* no output.weight: the head reuses token_embd */
    int n_rot; /* llama.rope.dimension_count: rotated dims per head; 0: the head dim */
} bt_synth_shape_t;

/* Copies the named shape ("tiny", "smollm2-135m", "llama-1b") into *out;
 * BT_ERR_ARG with a message listing the names when unknown. */
bt_status_t bt_synth_shape(const char *name, bt_synth_shape_t *out);

/* Names of the shapes, comma-separated, for usage lines. */
const char *bt_synth_shape_names(void);

/* Parameter count of a shape (matrices, embeddings and norms). */
uint64_t bt_synth_n_params(const bt_synth_shape_t *s);

/* Writes the model to path with every matrix in `type` (norms stay f32).
 * Checks the shape first (positive dims, heads dividing n_embd, ...). */
bt_status_t bt_synth_write(const char *path, const bt_synth_shape_t *s, uint32_t type,
                           uint64_t seed);

#endif /* BT_SYNTH_H */
