/* sampler.c: greedy and the llama.cpp-style sampling chain. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The first index of the largest logit, NaNs never chosen (index 0 when
 * logits[0] is NaN or nothing is above -inf): the answer of a scan that
 * keeps the first strictly larger value. The scan runs in 16 lanes, each
 * with its own best, so that the compares do not wait on one another
 * (one chain took 4 ns a logit: 0.6 ms a row of a 152k vocabulary, more
 * than a layer of qwen3moe-mini); the lanes then meet, the lowest index
 * winning a tie. */
#define GREEDY_LANES 16

/* val[j], at[j] = the first largest of x[j], x[j + 16], ... over [0, n16)
 * (-inf and -1 where none is above -inf). */
static void greedy_lanes(const float *x, int n16, float *val, int32_t *at)
{
#if defined(__SSE2__)
    __m128 v[4];
    __m128i a[4];
    for (int k = 0; k < 4; k++)
        v[k] = _mm_set1_ps(-INFINITY), a[k] = _mm_set1_epi32(-1);
    __m128i idx = _mm_setr_epi32(0, 1, 2, 3);
    const __m128i four = _mm_set1_epi32(4);
    for (int i = 0; i < n16; i += GREEDY_LANES)
        for (int k = 0; k < 4; k++, idx = _mm_add_epi32(idx, four)) {
            const __m128 y = _mm_loadu_ps(x + i + 4 * k);
            const __m128 more = _mm_cmpgt_ps(y, v[k]); /* false for NaN */
            const __m128i m = _mm_castps_si128(more);
            v[k] = _mm_or_ps(_mm_and_ps(more, y), _mm_andnot_ps(more, v[k]));
            a[k] = _mm_or_si128(_mm_and_si128(m, idx), _mm_andnot_si128(m, a[k]));
        }
    for (int k = 0; k < 4; k++) {
        _mm_storeu_ps(val + 4 * k, v[k]);
        _mm_storeu_si128((__m128i *)(at + 4 * k), a[k]);
    }
#else
    for (int j = 0; j < GREEDY_LANES; j++)
        val[j] = -INFINITY, at[j] = -1;
    for (int i = 0; i < n16; i += GREEDY_LANES)
        for (int j = 0; j < GREEDY_LANES; j++)
            if (x[i + j] > val[j])
                val[j] = x[i + j], at[j] = i + j;
#endif
}

int32_t bt_sample_greedy(const float *logits, int n)
{
    if (n < 2 * GREEDY_LANES || isnan(logits[0])) {
        int32_t best = 0;
        for (int i = 1; i < n; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    float val[GREEDY_LANES];
    int32_t at[GREEDY_LANES];
    const int n16 = n / GREEDY_LANES * GREEDY_LANES;
    greedy_lanes(logits, n16, val, at);
    int i = n16;
    int32_t best = 0; /* logits[0] is not NaN: the answer when no lane found more than -inf */
    float top = -INFINITY;
    for (int j = 0; j < GREEDY_LANES; j++)
        if (at[j] >= 0 && (val[j] > top || (val[j] == top && at[j] < best)))
            top = val[j], best = at[j];
    for (; i < n; i++)
        if (logits[i] > top)
            top = logits[i], best = i;
    return best;
}

bt_sampler_params_t bt_sampler_defaults(void)
{
    return (bt_sampler_params_t){
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = 0,
    };
}

typedef struct cand {
    int32_t id;
    float logit;
    float p;
} cand_t;

struct bt_sampler {
    bt_sampler_params_t p;
    int n_vocab;
    cand_t *cand;      /* [n_vocab] */
    float *work;       /* [n_vocab] penalized logits */
    int32_t *recent;   /* ring of the last repeat_last_n tokens */
    int n_recent, head;
    bt_rng_t rng;
};

/* ---- setup ---- */

bt_status_t bt_sampler_init(const bt_sampler_params_t *p, int n_vocab, bt_sampler_t **out)
{
    const char *bad = !(p->temp >= 0.0f)                                ? "--temp must be >= 0"
                      : !(p->top_p > 0.0f && p->top_p <= 1.0f)          ? "--top-p must be in (0, 1]"
                      : !(p->min_p >= 0.0f && p->min_p <= 1.0f)         ? "--min-p must be in [0, 1]"
                      : !(p->repeat_penalty > 0.0f)                     ? "--repeat-penalty must be > 0"
                      : p->repeat_last_n < 0                            ? "--repeat-last-n must be >= 0"
                                                                        : NULL;
    if (bad != NULL || n_vocab < 1) {
        bt_log_error("sampler: %s (temp %g, top-p %g, min-p %g, repeat penalty %g, last %d)",
                     bad ? bad : "empty vocabulary", p->temp, p->top_p, p->min_p,
                     p->repeat_penalty, p->repeat_last_n);
        return BT_ERR_ARG;
    }
    bt_sampler_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return BT_ERR_NOMEM;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc(sizeof *s->cand * (size_t)n_vocab);
    s->work = malloc(sizeof *s->work * (size_t)n_vocab);
    s->recent = malloc(sizeof *s->recent * (size_t)(p->repeat_last_n + 1));
    if (s->cand == NULL || s->work == NULL || s->recent == NULL) {
        bt_sampler_free(s);
        return BT_ERR_NOMEM;
    }
    bt_rng_seed(&s->rng, p->seed);
    *out = s;
    return BT_OK;
}

void bt_sampler_free(bt_sampler_t *s)
{
    if (s == NULL)
        return;
    free(s->cand);
    free(s->work);
    free(s->recent);
    free(s);
}

void bt_sampler_accept(bt_sampler_t *s, int32_t token)
{
    if (s->p.repeat_last_n == 0)
        return;
    s->recent[s->head] = token;
    s->head = (s->head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n)
        s->n_recent++;
}

/* ---- the chain ---- */

/* llama.cpp's penalty: a positive logit is divided by the penalty, a
 * negative one multiplied, once per distinct recent token. */
static const float *penalize(bt_sampler_t *s, const float *logits)
{
    if (s->p.repeat_penalty == 1.0f || s->n_recent == 0)
        return logits;
    memcpy(s->work, logits, sizeof(float) * (size_t)s->n_vocab);
    for (int i = 0; i < s->n_recent; i++) {
        int32_t t = s->recent[i];
        if (t < 0 || t >= s->n_vocab)
            continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = s->recent[j] == t;
        if (!seen)
            s->work[t] = logits[t] > 0 ? logits[t] / s->p.repeat_penalty
                                       : logits[t] * s->p.repeat_penalty;
    }
    return s->work;
}

static int cmp_cand(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Keeps the k best candidates, sorted by logit (descending, id ascending
 * on ties): a bounded selection for small k, a full sort otherwise. */
static int top_k(cand_t *c, int n, int k)
{
    if (k <= 0 || k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return n;
    }
    /* insertion into a sorted prefix of length k */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && cmp_cand(&c[i], &c[k - 1]) >= 0)
            continue;
        cand_t x = c[i];
        int j = m < k ? m++ : k - 1;
        while (j > 0 && cmp_cand(&x, &c[j - 1]) < 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
    return m;
}

/* p = softmax(logit / temp) over the n sorted candidates. */
static void softmax(cand_t *c, int n, float temp)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / temp);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / sum);
}

int32_t bt_sampler_sample(bt_sampler_t *s, const float *logits)
{
    const float *l = penalize(s, logits);
    if (s->p.temp <= 0.0f)
        return bt_sample_greedy(l, s->n_vocab);
    for (int i = 0; i < s->n_vocab; i++)
        s->cand[i] = (cand_t){i, l[i], 0.0f};
    int n = top_k(s->cand, s->n_vocab, s->p.top_k);
    softmax(s->cand, n, 1.0f);
    if (s->p.top_p < 1.0f) { /* smallest prefix holding top_p of the mass */
        double cum = 0.0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += s->cand[i].p;
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (s->p.min_p > 0.0f) { /* p >= min_p * p_max, relative to the first */
        int keep = 1;
        while (keep < n && s->cand[keep].p >= s->p.min_p * s->cand[0].p)
            keep++;
        n = keep;
    }
    softmax(s->cand, n, s->p.temp);
    double u = bt_rng_uniform(&s->rng), cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += s->cand[i].p;
        if (u < cum)
            return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}
