/*
 * types.h: the weight types baton knows, as one table.
 *
 * Type ids follow the numbering of the GGUF specification (ggml_type), so a
 * tensor's type field maps straight onto bt_type_t. Every id the table knows
 * has its block geometry (elements per block, bytes per block), which is all
 * a file reader needs to check tensor extents. A type baton can compute with
 * also has to_float (exact dequantization of a row) and from_float
 * (quantization of a row, for baton-mkmodel); adding a type is one table
 * entry plus those two functions and, if wanted, a fast dot.
 */
#ifndef BT_KERNELS_TYPES_H
#define BT_KERNELS_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum bt_type {
    BT_TYPE_F32 = 0,
    BT_TYPE_F16 = 1,
    BT_TYPE_Q4_0 = 2,
    BT_TYPE_Q4_1 = 3,
    BT_TYPE_Q5_0 = 6,
    BT_TYPE_Q5_1 = 7,
    BT_TYPE_Q8_0 = 8,
    BT_TYPE_Q8_1 = 9,
    BT_TYPE_Q2_K = 10,
    BT_TYPE_Q3_K = 11,
    BT_TYPE_Q4_K = 12,
    BT_TYPE_Q5_K = 13,
    BT_TYPE_Q6_K = 14,
    BT_TYPE_Q8_K = 15,
    BT_TYPE_I8 = 24,
    BT_TYPE_I16 = 25,
    BT_TYPE_I32 = 26,
    BT_TYPE_I64 = 27,
    BT_TYPE_F64 = 28,
    BT_TYPE_BF16 = 30,
    BT_TYPE_MXFP4 = 39,
    BT_TYPE_COUNT = 40, /* bound for table lookups, not a type */
} bt_type_t;

/* Dequantizes n elements (n a multiple of the block size) to f32. */
typedef void (*bt_to_float_fn)(float *restrict out, const void *restrict in, int64_t n);
/* Quantizes n elements (n a multiple of the block size) from f32. */
typedef void (*bt_from_float_fn)(void *restrict out, const float *restrict in, int64_t n);

typedef struct bt_type_info {
    const char *name;        /* "f32", "q8_0", ... as GGUF tools print them */
    int64_t block_size;      /* elements per block */
    size_t block_bytes;      /* bytes per block */
    bt_to_float_fn to_float; /* NULL: known layout, no compute support */
    bt_from_float_fn from_float;
} bt_type_info_t;

/* Table entry for a type id, or NULL when the id is not a known type. */
const bt_type_info_t *bt_type_info(uint32_t type);

/* True when baton can compute with the type (to_float and from_float). */
bool bt_type_supported(uint32_t type);

/* The names of the types baton computes with, comma-separated (for usage
 * lines and messages); a static string. */
const char *bt_type_supported_names(void);

/* Parses a name like "q8_0" (case-insensitive); returns -1 if unknown. */
int bt_type_from_name(const char *name);

/* Bytes of a row of n elements: 0 on success, -1 when n is not a multiple
 * of the block size or the size overflows. */
int bt_type_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

/* Scalar conversions (exact, round-to-nearest-even for the narrowing ones). */
float bt_f16_to_f32(uint16_t h);
uint16_t bt_f32_to_f16(float f);
float bt_bf16_to_f32(uint16_t h);
uint16_t bt_f32_to_bf16(float f);

/* ---- block formats (quants.c) ----
 *
 * Byte layouts exactly as the GGUF specification (ggml's block_q*) defines
 * them; f16 fields hold raw IEEE half bits, multi-byte fields are little
 * endian (as GGUF files are). Each format has an exact dequantization
 * bt_to_float_<type> (value for value what llama.cpp's dequantize_row_<type>
 * gives) and a simple min/max quantizer bt_from_float_<type> (not llama.cpp's
 * search-based one; its error bound is stated at each function in quants.c).
 * Both take n, a multiple of the block size, and finite inputs.
 *
 * Legacy formats: blocks of 32; byte qs[j] holds element j in its low nibble
 * and element j + 16 in its high nibble. */
#define BT_QK4_0 32
typedef struct bt_block_q4_0 {
    uint16_t d;                /* f16 scale */
    uint8_t qs[BT_QK4_0 / 2]; /* value = d * (q - 8), q in 0..15 */
} bt_block_q4_0_t;

#define BT_QK4_1 32
typedef struct bt_block_q4_1 {
    uint16_t d;                /* f16 scale */
    uint16_t m;                /* f16 minimum */
    uint8_t qs[BT_QK4_1 / 2]; /* value = d * q + m, q in 0..15 */
} bt_block_q4_1_t;

#define BT_QK5_0 32
typedef struct bt_block_q5_0 {
    uint16_t d;                /* f16 scale */
    uint8_t qh[4];             /* bit j of the little-endian u32: bit 4 of q[j] */
    uint8_t qs[BT_QK5_0 / 2]; /* low 4 bits; value = d * (q - 16), q in 0..31 */
} bt_block_q5_0_t;

#define BT_QK5_1 32
typedef struct bt_block_q5_1 {
    uint16_t d;                /* f16 scale */
    uint16_t m;                /* f16 minimum */
    uint8_t qh[4];             /* as in q5_0 */
    uint8_t qs[BT_QK5_1 / 2]; /* value = d * q + m, q in 0..31 */
} bt_block_q5_1_t;

/* Q8_0 block: 32 int8 values sharing one f16 scale (GGUF spec). */
#define BT_QK8_0 32
typedef struct bt_block_q8_0 {
    uint16_t d;            /* f16 scale */
    int8_t qs[BT_QK8_0];   /* value = d * qs[i] */
} bt_block_q8_0_t;

/* MXFP4 (OCP microscaling FP4): 32 E2M1 values sharing one E8M0 exponent e.
 * Element j < 16 is the low nibble of qs[j], element j + 16 its high
 * nibble. A nibble c is sign (bit 3) and one of the magnitudes 0, 0.5, 1,
 * 1.5, 2, 3, 4, 6 (bits 0-2); value = E2M1(c) * 2^(e - 127) for every e
 * (e = 0 and 1 give float subnormals, no NaN), which is
 * bt_mxfp4_values[c] * 2^(e - 128) with the table doubled to integers. */
#define BT_QK_MXFP4 32
typedef struct bt_block_mxfp4 {
    uint8_t e;                    /* E8M0 shared exponent */
    uint8_t qs[BT_QK_MXFP4 / 2]; /* E2M1 codes */
} bt_block_mxfp4_t;

/* Twice the E2M1 value of each 4-bit code. */
extern const int8_t bt_mxfp4_values[16];

/* K-quants: super-blocks of 256 elements.
 *
 * Q4_K / Q5_K: 8 sub-blocks of 32, each with a 6-bit scale sc[j] and a 6-bit
 * min m[j] packed into 12 bytes:
 *   scales[0..3]  bits 0-5: sc[0..3]        bits 6-7: bits 4-5 of sc[4..7]
 *   scales[4..7]  bits 0-5: m[0..3]         bits 6-7: bits 4-5 of m[4..7]
 *   scales[8..11] bits 0-3: bits 0-3 of sc[4..7], bits 4-7: bits 0-3 of m[4..7]
 * value = (d * sc[j]) * q - (dmin * m[j]) for element e in sub-block j = e / 32.
 * qs is 4 chunks of 32 bytes; chunk c covers elements 64c .. 64c + 63:
 * byte qs[32c + l] holds element 64c + l (low nibble) and 64c + 32 + l (high).
 * Q5_K adds bit 4 of q: element 64c + l in bit 2c of qh[l], element
 * 64c + 32 + l in bit 2c + 1 of qh[l]. */
#define BT_QK_K 256
#define BT_K_SCALE_SIZE 12
typedef struct bt_block_q4_k {
    uint16_t d;                       /* f16 scale of the sub-block scales */
    uint16_t dmin;                    /* f16 scale of the sub-block mins */
    uint8_t scales[BT_K_SCALE_SIZE]; /* 8 x (6-bit scale, 6-bit min) */
    uint8_t qs[BT_QK_K / 2];         /* 4-bit q */
} bt_block_q4_k_t;

typedef struct bt_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[BT_K_SCALE_SIZE];
    uint8_t qh[BT_QK_K / 8];         /* bit 4 of q */
    uint8_t qs[BT_QK_K / 2];         /* bits 0-3 of q */
} bt_block_q5_k_t;

/* Q6_K: 16 sub-blocks of 16 with int8 scales; value = (d * scales[e / 16]) *
 * (q - 32), q in 0..63. Two halves of 128 elements; half h uses ql[64h ..],
 * qh[32h ..]. Within a half, for l < 32 and g = 0..3, element 32g + l takes
 * its low 4 bits from ql[l + 32 (g & 1)] (low nibble for g < 2, high nibble
 * for g >= 2) and its high 2 bits from bits 2g, 2g + 1 of qh[l]. */
typedef struct bt_block_q6_k {
    uint8_t ql[BT_QK_K / 2];      /* bits 0-3 of q */
    uint8_t qh[BT_QK_K / 4];      /* bits 4-5 of q */
    int8_t scales[BT_QK_K / 16];  /* sub-block scales */
    uint16_t d;                   /* f16 super-block scale */
} bt_block_q6_k_t;

/* Rows of each block format: n elements, n a multiple of the block size. */
void bt_to_float_q4_0(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q4_0(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q4_1(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q4_1(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q5_0(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q5_0(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q5_1(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q5_1(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q8_0(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q8_0(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_mxfp4(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_mxfp4(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q4_k(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q4_k(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q5_k(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q5_k(void *restrict out, const float *restrict in, int64_t n);
void bt_to_float_q6_k(float *restrict out, const void *restrict in, int64_t n);
void bt_from_float_q6_k(void *restrict out, const float *restrict in, int64_t n);

/* Q4_K / Q5_K: step[j] = d * sc[j] and off[j] = dmin * m[j] for the 8
 * sub-blocks of a super-block (element = step * q - off), as to_float
 * computes them. */
void bt_k_steps(float *step, float *off, uint16_t d, uint16_t dmin, const uint8_t *scales);

/* Sub-block j's 6-bit scale and min from the 12 packed bytes. */
static inline void bt_k_scale_min(const uint8_t *restrict s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

#endif /* BT_KERNELS_TYPES_H */
