/*
 * sampler.h: choosing the next token from a row of logits, with
 * llama.cpp's knobs and defaults: repetition penalty over the last tokens,
 * then top-k, top-p, min-p, then temperature and a seeded draw.
 * Temperature <= 0 is greedy (after the penalty). The sampler allocates its
 * buffers once (bt_sampler_init) and nothing per token.
 */
#ifndef BT_SAMPLER_H
#define BT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

/* Index of the largest logit; the lowest index wins a tie. n >= 1. */
int32_t bt_sample_greedy(const float *logits, int n);

typedef struct bt_sampler_params {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    int repeat_last_n;    /* tokens the penalty looks back over */
    uint64_t seed;
} bt_sampler_params_t;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05,
 * repeat penalty 1.0 over 64 tokens; the seed is left to the caller. */
bt_sampler_params_t bt_sampler_defaults(void);

typedef struct bt_sampler bt_sampler_t;

/* BT_ERR_ARG with a message for a value out of range (negative temp,
 * top-p outside (0, 1], min-p outside [0, 1], penalty <= 0). */
bt_status_t bt_sampler_init(const bt_sampler_params_t *p, int n_vocab, bt_sampler_t **out);
void bt_sampler_free(bt_sampler_t *s);

/* Picks a token from logits [n_vocab] (not modified). */
int32_t bt_sampler_sample(bt_sampler_t *s, const float *logits);

/* Records a token (prompt or generated) for the repetition penalty. */
void bt_sampler_accept(bt_sampler_t *s, int32_t token);

#endif /* BT_SAMPLER_H */
