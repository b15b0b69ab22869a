/* sampler.c: token choice from logits. */
#include "sampler.h"

int32_t bt_sample_greedy(const float *logits, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}
