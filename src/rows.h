/*
 * rows.h: the row table of a micro-batch, shared by the forward pass (which
 * computes rows), the transport (which carries the table in front of the
 * activations) and the schedulers (which fill it).
 */
#ifndef BT_ROWS_H
#define BT_ROWS_H

#include <stdint.h>

/* One row of a micro-batch. */
typedef struct bt_row {
    int32_t slot;  /* KV cache slot of its sequence */
    int32_t pos;   /* absolute position in that sequence */
    int32_t flags; /* BT_ROW_* */
    int32_t seq;   /* the scheduler's sequence id (hooks on the last stage) */
} bt_row_t;

#define BT_ROW_LOGITS 1 /* the last stage computes this row's logits */
#define BT_ROW_SAMPLE 2 /* and chooses its sequence's next token from them */
#define BT_ROW_FIRST 4  /* the first row of a new sequence in its slot */

#endif /* BT_ROWS_H */
