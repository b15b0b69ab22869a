/* types.c: the type table, the scalar f16/bf16 conversions and the rows of
 * the float types; the block formats are in quants.c. */
#include "types.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- scalar conversions ---- */

float bt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {                     /* inf / nan */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {                 /* normal */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {                 /* zero */
        bits = sign;
    } else {                               /* subnormal: man * 2^-24 */
        float f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t bt_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                 /* inf / nan (keep nan quiet) */
        return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0);
    if (ax >= 0x477ff000u)                 /* rounds to >= 65520: inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) {                /* below 2^-14: subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        /* a * 2^24 rounded to nearest even by the FPU's default mode */
        return sign | (uint16_t)lrintf(a * 0x1p24f);
    }
    /* normal: round mantissa from 23 to 10 bits, nearest even */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

float bt_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t bt_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)   /* nan: keep it a quiet nan */
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- rows ---- */

static void f32_to_float(float *restrict out, const void *restrict in, int64_t n)
{
    memcpy(out, in, (size_t)n * sizeof(float));
}

static void f32_from_float(void *restrict out, const float *restrict in, int64_t n)
{
    memcpy(out, in, (size_t)n * sizeof(float));
}

static void f16_to_float(float *restrict out, const void *restrict in, int64_t n)
{
    const uint16_t *h = in;
    for (int64_t i = 0; i < n; i++)
        out[i] = bt_f16_to_f32(h[i]);
}

static void f16_from_float(void *restrict out, const float *restrict in, int64_t n)
{
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++)
        h[i] = bt_f32_to_f16(in[i]);
}

static void bf16_to_float(float *restrict out, const void *restrict in, int64_t n)
{
    const uint16_t *h = in;
    for (int64_t i = 0; i < n; i++)
        out[i] = bt_bf16_to_f32(h[i]);
}

static void bf16_from_float(void *restrict out, const float *restrict in, int64_t n)
{
    uint16_t *h = out;
    for (int64_t i = 0; i < n; i++)
        h[i] = bt_f32_to_bf16(in[i]);
}

/* ---- the table ---- */

/* The GGUF block sizes; a padded struct would misread every file. */
_Static_assert(sizeof(bt_block_q4_0_t) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(bt_block_q4_1_t) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(bt_block_q5_0_t) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(bt_block_q5_1_t) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(bt_block_q8_0_t) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(bt_block_q4_k_t) == 144, "q4_k block is 144 bytes");
_Static_assert(sizeof(bt_block_q5_k_t) == 176, "q5_k block is 176 bytes");
_Static_assert(sizeof(bt_block_q6_k_t) == 210, "q6_k block is 210 bytes");
_Static_assert(sizeof(bt_block_mxfp4_t) == 17, "mxfp4 block is 17 bytes");

#define KNOWN(id, nm, bs, bb) [id] = {nm, bs, bb, NULL, NULL}
#define COMPUTE(id, nm, bs, bb, pfx) [id] = {nm, bs, bb, pfx##_to_float, pfx##_from_float}
#define BLOCKS(id, nm, bs, sfx)                                                                  \
    [id] = {nm, bs, sizeof(bt_block_##sfx##_t), bt_to_float_##sfx, bt_from_float_##sfx}

static const bt_type_info_t type_table[BT_TYPE_COUNT] = {
    COMPUTE(BT_TYPE_F32, "f32", 1, 4, f32),
    COMPUTE(BT_TYPE_F16, "f16", 1, 2, f16),
    BLOCKS(BT_TYPE_Q4_0, "q4_0", BT_QK4_0, q4_0),
    BLOCKS(BT_TYPE_Q4_1, "q4_1", BT_QK4_1, q4_1),
    BLOCKS(BT_TYPE_Q5_0, "q5_0", BT_QK5_0, q5_0),
    BLOCKS(BT_TYPE_Q5_1, "q5_1", BT_QK5_1, q5_1),
    BLOCKS(BT_TYPE_Q8_0, "q8_0", BT_QK8_0, q8_0),
    KNOWN(BT_TYPE_Q8_1, "q8_1", 32, 36),
    KNOWN(BT_TYPE_Q2_K, "q2_k", 256, 84),
    KNOWN(BT_TYPE_Q3_K, "q3_k", 256, 110),
    BLOCKS(BT_TYPE_Q4_K, "q4_k", BT_QK_K, q4_k),
    BLOCKS(BT_TYPE_Q5_K, "q5_k", BT_QK_K, q5_k),
    BLOCKS(BT_TYPE_Q6_K, "q6_k", BT_QK_K, q6_k),
    KNOWN(BT_TYPE_Q8_K, "q8_k", 256, 292),
    KNOWN(BT_TYPE_I8, "i8", 1, 1),
    KNOWN(BT_TYPE_I16, "i16", 1, 2),
    KNOWN(BT_TYPE_I32, "i32", 1, 4),
    KNOWN(BT_TYPE_I64, "i64", 1, 8),
    KNOWN(BT_TYPE_F64, "f64", 1, 8),
    COMPUTE(BT_TYPE_BF16, "bf16", 1, 2, bf16),
    BLOCKS(BT_TYPE_MXFP4, "mxfp4", BT_QK_MXFP4, mxfp4),
};

const bt_type_info_t *bt_type_info(uint32_t type)
{
    if (type >= BT_TYPE_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

bool bt_type_supported(uint32_t type)
{
    const bt_type_info_t *ti = bt_type_info(type);
    return ti != NULL && ti->to_float != NULL && ti->from_float != NULL;
}

/* The list is built once, by whichever thread asks first (pthread_once), so
 * threads never see it half written. */
static char supported_names[256];

static void build_supported_names(void)
{
    size_t used = 0;
    for (int t = 0; t < BT_TYPE_COUNT; t++)
        if (bt_type_supported((uint32_t)t) && used < sizeof supported_names)
            used += (size_t)snprintf(supported_names + used, sizeof supported_names - used,
                                     "%s%s", used ? ", " : "", type_table[t].name);
}

const char *bt_type_supported_names(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build_supported_names);
    return supported_names;
}

int bt_type_from_name(const char *name)
{
    for (int t = 0; t < BT_TYPE_COUNT; t++)
        if (type_table[t].name != NULL && strcasecmp(type_table[t].name, name) == 0)
            return t;
    return -1;
}

int bt_type_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
    const bt_type_info_t *ti = bt_type_info(type);
    if (ti == NULL || n % (uint64_t)ti->block_size != 0)
        return -1;
    uint64_t r;
    if (__builtin_mul_overflow(n / (uint64_t)ti->block_size, (uint64_t)ti->block_bytes, &r))
        return -1;
    *bytes = r;
    return 0;
}
