/*
 * gguf.h: GGUF v3 files, read through mmap and written as a stream.
 *
 * Reading: bt_gguf_open() maps the file read-only and validates all of it
 * before returning: header, every metadata key/value (all value types,
 * arrays nested up to 8 deep), every tensor info, general.alignment and the
 * data section. Every count, length, offset and tensor extent is checked
 * against the file size with overflow-safe arithmetic. A bad file gives
 * BT_ERR_FORMAT (or BT_ERR_UNSUPPORTED for a valid but unknown version or
 * tensor type) and exactly one error message naming the field and the
 * values, e.g.
 *   gguf: model.gguf: tensor 'blk.3.attn_q.weight' ends at byte 91234 but file has 90000
 * After a successful open nothing in the file is read out of bounds: all
 * pointers below point into the map and stay valid until bt_gguf_close().
 *
 * Tensor data is not touched by open (only its extent is checked), so a
 * caller that reads only some tensors pages in only those.
 *
 * Writing: bt_gguf_writer_* collects metadata and tensor infos, then streams
 * the header and the tensor data in declaration order, so a multi-GiB model
 * never has to be in memory at once.
 */
#ifndef BT_GGUF_H
#define BT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define BT_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define BT_GGUF_VERSION 3
#define BT_GGUF_DEFAULT_ALIGNMENT 32
#define BT_GGUF_MAX_DIMS 4

/* Metadata value types (GGUF spec). */
typedef enum bt_gguf_vtype {
    BT_GGUF_UINT8 = 0,
    BT_GGUF_INT8 = 1,
    BT_GGUF_UINT16 = 2,
    BT_GGUF_INT16 = 3,
    BT_GGUF_UINT32 = 4,
    BT_GGUF_INT32 = 5,
    BT_GGUF_FLOAT32 = 6,
    BT_GGUF_BOOL = 7,
    BT_GGUF_STRING = 8,
    BT_GGUF_ARRAY = 9,
    BT_GGUF_UINT64 = 10,
    BT_GGUF_INT64 = 11,
    BT_GGUF_FLOAT64 = 12,
    BT_GGUF_VTYPE_COUNT
} bt_gguf_vtype_t;

/* A string inside the map: not NUL-terminated. */
typedef struct bt_gguf_str {
    uint64_t len;
    const char *ptr;
} bt_gguf_str_t;

/* One metadata entry. Scalars are decoded into the union; a string is in
 * .str; an array keeps its element type, count and the raw bytes of its
 * elements (already validated, nested arrays included). */
typedef struct bt_gguf_kv {
    bt_gguf_str_t key;
    bt_gguf_vtype_t type;
    union {
        uint64_t u64; /* UINT8/16/32/64 and BOOL (0 or 1) */
        int64_t i64;  /* INT8/16/32/64 */
        double f64;   /* FLOAT32/64 */
        bt_gguf_str_t str;
    } v;
    bt_gguf_vtype_t arr_type; /* ARRAY only */
    uint64_t arr_n;           /* ARRAY only: element count */
    const uint8_t *arr_data;  /* ARRAY only: first element's bytes */
    uint64_t arr_bytes;       /* ARRAY only: total bytes of the elements */
} bt_gguf_kv_t;

typedef struct bt_gguf_tensor {
    bt_gguf_str_t name;
    uint32_t n_dims;
    uint64_t ne[BT_GGUF_MAX_DIMS]; /* ne[0] is contiguous; unused dims are 1 */
    uint32_t type;                 /* bt_type_t id */
    uint64_t offset;               /* from the start of the data section */
    uint64_t n_elements;
    uint64_t n_bytes;
    const void *data;              /* into the map */
} bt_gguf_tensor_t;

typedef struct bt_gguf {
    char *path;
    const uint8_t *map;
    uint64_t file_size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section in the file */
    uint64_t n_kv;
    bt_gguf_kv_t *kv;
    uint64_t n_tensors;
    bt_gguf_tensor_t *tensors;
} bt_gguf_t;

/* Opens, maps and validates path. On success *out owns the map; release it
 * with bt_gguf_close(). On failure logs one message and leaves *out unset. */
bt_status_t bt_gguf_open(const char *path, bt_gguf_t **out);
/* Whether g maps its file (bt_gguf_open): its pages can be dropped and read
 * again. False for a borrowed buffer (bt_gguf_open_buffer). */
bool bt_gguf_file_mapped(const bt_gguf_t *g);

/* Validates size bytes at data exactly as bt_gguf_open() validates a file
 * (label, or "buffer" when NULL, names it in messages and becomes g->path).
 * The bytes are borrowed, not copied: they must stay valid and unchanged
 * until bt_gguf_close(), which does not free them. A size of 0 is an empty
 * file (BT_ERR_FORMAT). For tests and the fuzz targets. */
bt_status_t bt_gguf_open_buffer(const void *data, size_t size, const char *label,
                                bt_gguf_t **out);
void bt_gguf_close(bt_gguf_t *g);

/* Lookups return NULL when absent. */
const bt_gguf_kv_t *bt_gguf_find_kv(const bt_gguf_t *g, const char *key);
const bt_gguf_tensor_t *bt_gguf_find_tensor(const bt_gguf_t *g, const char *name);

/* Typed getters. Return BT_OK and set *out when the key exists and holds a
 * value convertible without loss (any integer type that fits for the integer
 * getters; FLOAT32/FLOAT64 for the float getter); BT_ERR_ARG (no log) when
 * absent; BT_ERR_FORMAT with one log message when present with a wrong type
 * or an out-of-range value. */
bt_status_t bt_gguf_get_u32(const bt_gguf_t *g, const char *key, uint32_t *out);
bt_status_t bt_gguf_get_f32(const bt_gguf_t *g, const char *key, float *out);
bt_status_t bt_gguf_get_bool(const bt_gguf_t *g, const char *key, bool *out);
/* The string points into the map. */
bt_status_t bt_gguf_get_str(const bt_gguf_t *g, const char *key, bt_gguf_str_t *out);

/* The bytes of kv's value in the file, after its value type (as
 * bt_gguf_writer_set_raw takes them): sets *p and returns their count. */
uint64_t bt_gguf_kv_raw(const bt_gguf_kv_t *kv, const uint8_t **p);

/* True when s equals the NUL-terminated c. */
bool bt_gguf_str_eq(bt_gguf_str_t s, const char *c);

/* Walks the elements of a string array in order: set *pos = 0 before the
 * first call; each call sets *out to the next string and returns true, or
 * returns false after the last one. The kv must be an ARRAY of STRING. */
bool bt_gguf_arr_next_str(const bt_gguf_kv_t *kv, uint64_t *pos, bt_gguf_str_t *out);

/* 64-bit FNV-1a hash of everything before the data section (header,
 * metadata, tensor infos): two files with the same hash and size describe
 * the same model. */
uint64_t bt_gguf_header_hash(const bt_gguf_t *g);

/* ---- writer ---- */

typedef struct bt_gguf_writer bt_gguf_writer_t;

bt_status_t bt_gguf_writer_init(bt_gguf_writer_t **out);
void bt_gguf_writer_free(bt_gguf_writer_t *w);

/* Metadata, in the order added. Strings are copied. An empty or duplicate
 * key, general.alignment that is not a u32 power of two, or a call after
 * bt_gguf_writer_begin() gives BT_ERR_ARG. */
bt_status_t bt_gguf_writer_set_u32(bt_gguf_writer_t *w, const char *key, uint32_t v);
bt_status_t bt_gguf_writer_set_i32(bt_gguf_writer_t *w, const char *key, int32_t v);
bt_status_t bt_gguf_writer_set_f32(bt_gguf_writer_t *w, const char *key, float v);
bt_status_t bt_gguf_writer_set_bool(bt_gguf_writer_t *w, const char *key, bool v);
bt_status_t bt_gguf_writer_set_str(bt_gguf_writer_t *w, const char *key, const char *v);
/* Array of fixed-size scalars: elem_type not STRING/ARRAY; data holds n
 * elements of that type, little-endian. */
bt_status_t bt_gguf_writer_set_arr(bt_gguf_writer_t *w, const char *key, bt_gguf_vtype_t elem_type,
                                   const void *data, uint64_t n);
bt_status_t bt_gguf_writer_set_arr_str(bt_gguf_writer_t *w, const char *key, const char *const *v,
                                       uint64_t n);
/* Any value type, given as its encoding in the file (the bytes after the
 * value type: a scalar little-endian, a string as u64 length + bytes, an
 * ARRAY as element type, count and elements, nested arrays included). The
 * bytes are validated exactly as the reader would (BT_ERR_ARG, one log
 * message, when they are not one complete valid value) and copied. For
 * types without a setter above (u8, i16, u64, f64, ...) and nested arrays
 * (which this reader accepts but llama.cpp's does not). */
bt_status_t bt_gguf_writer_set_raw(bt_gguf_writer_t *w, const char *key, bt_gguf_vtype_t type,
                                   const void *value, uint64_t n_bytes);

/* Declares a tensor (ne[0] contiguous); data is written later in the same
 * order. Fails with BT_ERR_ARG for an unknown type, a row length that is not
 * a multiple of the block size, a zero dim, a duplicate name, or a name that
 * is empty or longer than 63 bytes (llama.cpp's limit). */
bt_status_t bt_gguf_writer_add_tensor(bt_gguf_writer_t *w, const char *name, uint32_t type,
                                      uint32_t n_dims, const uint64_t *ne);

/* Creates path and writes header, metadata and tensor infos (alignment
 * BT_GGUF_DEFAULT_ALIGNMENT unless general.alignment was set as u32). */
bt_status_t bt_gguf_writer_begin(bt_gguf_writer_t *w, const char *path);
/* Writes the next declared tensor's data (exactly its n_bytes) and pads. */
bt_status_t bt_gguf_writer_write_tensor(bt_gguf_writer_t *w, const void *data, uint64_t n_bytes);
/* Checks every declared tensor was written, flushes and closes the file. */
bt_status_t bt_gguf_writer_finish(bt_gguf_writer_t *w);

#endif /* BT_GGUF_H */
