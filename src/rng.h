/*
 * rng.h: the project's pseudo-random numbers: xoshiro256** (Blackman and
 * Vigna) seeded through splitmix64. Deterministic for a seed on every
 * platform; not for cryptography.
 */
#ifndef BT_RNG_H
#define BT_RNG_H

#include <stdint.h>

typedef struct bt_rng {
    uint64_t s[4];
} bt_rng_t;

/* Advances *x and returns the next splitmix64 value. */
static inline uint64_t bt_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void bt_rng_seed(bt_rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = bt_splitmix64(&seed);
}

static inline uint64_t bt_rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t bt_rng_next(bt_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = bt_rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = bt_rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double bt_rng_uniform(bt_rng_t *r) { return (double)(bt_rng_next(r) >> 11) * 0x1p-53; }

#endif /* BT_RNG_H */
