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

/* Q8_0 block: 32 int8 values sharing one f16 scale (GGUF spec). */
#define BT_QK8_0 32
typedef struct bt_block_q8_0 {
    uint16_t d;            /* f16 scale */
    int8_t qs[BT_QK8_0];   /* value = d * qs[i] */
} bt_block_q8_0_t;

#endif /* BT_KERNELS_TYPES_H */
