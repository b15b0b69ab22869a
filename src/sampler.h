/*
 * sampler.h: choosing the next token from a row of logits.
 * Greedy for now; temperature, top-k and top-p come with the real-model work.
 */
#ifndef BT_SAMPLER_H
#define BT_SAMPLER_H

#include <stdint.h>

/* Index of the largest logit; the lowest index wins a tie. n >= 1. */
int32_t bt_sample_greedy(const float *logits, int n);

#endif /* BT_SAMPLER_H */
