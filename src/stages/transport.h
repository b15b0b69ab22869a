/*
 * transport.h: all MPI point-to-point traffic of a pipeline stage.
 *
 * Activations go from rank s straight to rank s+1 (never through rank 0) as
 * one message per micro-batch: a bt_act_header_t, the row table (n_rows
 * bt_row_t: slot, position, flags of each row), and from the next 64-byte
 * boundary the activations, n_rows rows of n_embd f32. A stage owns
 * BT_TRANSPORT_SLOTS message buffers used as a ring: while it computes micro-batch m in slot m % 3, the receive for m+1
 * is already posted into the next slot and the send of m-1 may still be
 * draining from the one before. A slot is reused only after its send
 * request completed. bt_transport_progress() tests every outstanding
 * request; the schedule calls it between layers so rendezvous-sized
 * messages keep moving while the stage computes.
 *
 * Tokens travel the other way round the ring: the last stage sends each
 * sampled token id (and, in synchronous mode, a "done" signal per
 * micro-batch) to rank 0; with many sequences (serve.h), one message of
 * ids per micro-batch.
 */
#ifndef BT_STAGES_TRANSPORT_H
#define BT_STAGES_TRANSPORT_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "rows.h"
#include "stages/trace.h"

/* MPI tags used by baton; never bare numbers. */
typedef enum bt_tag {
    BT_TAG_ACT = 100,   /* activations: header + payload, stage s -> s+1 */
    BT_TAG_TOKEN = 101, /* sampled token id, last stage -> rank 0 */
    BT_TAG_DONE = 102,  /* synchronous mode: micro-batch left the last stage */
    BT_TAG_PROBE = 103, /* link probe ping-pong */
    BT_TAG_SEQ = 104,   /* serve: a new sequence's sampler, rank 0 -> last stage */
    BT_TAG_IDS = 105,   /* serve: a micro-batch's chosen ids, last stage -> rank 0 */
    BT_TAG_TP_LOGITS = 106, /* a tensor rank's vocabulary share of logits -> its stage's leader */
    BT_TAG_BUSY = 107,  /* serve: a stage's busy seconds so far, stage s > 0 -> rank 0 */
} bt_tag_t;

typedef struct bt_act_header {
    int32_t mb;     /* micro-batch index within the call */
    int32_t n_rows; /* rows in the table and the payload */
    int32_t flags;  /* BT_ACT_STOP or 0 */
    int32_t pad;
} bt_act_header_t;

/* Bytes from the start of a message to its activations. */
static inline size_t bt_act_payload_offset(int n_rows)
{
    return (sizeof(bt_act_header_t) + (size_t)n_rows * sizeof(bt_row_t) + 63) / 64 * 64;
}

/* Bytes of a message of n_rows rows of n_embd. */
static inline size_t bt_act_bytes(int n_rows, int n_embd)
{
    return bt_act_payload_offset(n_rows) + (size_t)n_rows * (size_t)n_embd * sizeof(float);
}

/* Header flag: no payload; generation ended, pass it on and stop. */
#define BT_ACT_STOP 1

#define BT_TRANSPORT_SLOTS 3

typedef struct bt_transport {
    MPI_Comm comm;
    int rank, size;
    int prev, next;   /* neighbor ranks, MPI_PROC_NULL at the ends */
    int n_embd;
    int max_tok;
    size_t msg_bytes; /* a message of max_tok rows */
    void *buf[BT_TRANSPORT_SLOTS];
    MPI_Request recv_req[BT_TRANSPORT_SLOTS];
    MPI_Status recv_status[BT_TRANSPORT_SLOTS]; /* kept when a test completes a receive */
    MPI_Request send_req[BT_TRANSPORT_SLOTS];
    int send_mb[BT_TRANSPORT_SLOTS]; /* micro-batch in flight per slot, for the trace */
    bt_trace_t *trace; /* may be NULL */
    /* traffic counters: messages per peer rank (size entries each) */
    uint64_t *act_sent_to, *act_recv_from;
    uint64_t bytes_sent, bytes_recv;
} bt_transport_t;

/* Sets up the ring of buffers for micro-batches of up to max_tok rows. */
bt_status_t bt_transport_init(bt_transport_t *t, MPI_Comm comm, int max_tok, int n_embd,
                              bt_trace_t *trace);
/* Cancels nothing: call bt_transport_drain first. Frees the buffers. */
void bt_transport_free(bt_transport_t *t);

/* The header, row table [n_rows] and payload [n_rows, n_embd] of a slot;
 * the table and payload are placed by the header's n_rows, so set it (or
 * receive the message) first. */
bt_act_header_t *bt_transport_header(const bt_transport_t *t, int slot);
bt_row_t *bt_transport_rows(const bt_transport_t *t, int slot);
float *bt_transport_payload(const bt_transport_t *t, int slot);

/* Waits until the slot's previous send completed, so it can be written. */
bt_status_t bt_transport_acquire(bt_transport_t *t, int slot);
/* Acquires the slot and posts the receive of the next micro-batch into it. */
bt_status_t bt_transport_post_recv(bt_transport_t *t, int slot);
/* Waits for the receive posted into slot; checks the message against the
 * expected micro-batch index and row count (expect_tok -1: any count up to
 * max_tok). A STOP message sets *stop when stop is not NULL (and is a
 * protocol error otherwise). */
bt_status_t bt_transport_wait_recv(bt_transport_t *t, int slot, int expect_mb, int expect_tok,
                                   bool *stop);
/* Sends a STOP header to the next rank and waits for it to leave. */
bt_status_t bt_transport_send_stop(bt_transport_t *t);
/* Posts the send of the slot's message (header, rows, payload) to the next rank. */
bt_status_t bt_transport_send(bt_transport_t *t, int slot);
/* Tests every outstanding request (drives progress); never blocks. */
void bt_transport_progress(bt_transport_t *t);
/* Waits for every outstanding send. */
bt_status_t bt_transport_drain(bt_transport_t *t);

/* Token ring (small blocking messages). */
bt_status_t bt_transport_send_int(bt_transport_t *t, int dest, bt_tag_t tag, int32_t v);
bt_status_t bt_transport_recv_int(bt_transport_t *t, int src, bt_tag_t tag, int32_t *v);

/* Combines each rank's status: every rank returns the first non-OK status
 * of any rank (lowest rank first), so all ranks fail together and none
 * waits for a peer that gave up. Messages captured with bt_log_capture()
 * are printed by that lowest failing rank only and dropped elsewhere, so
 * a failure every rank saw alike is reported once. */
bt_status_t bt_transport_agree(MPI_Comm comm, bt_status_t st);

/* Decodes an MPI error code into a message and returns BT_ERR_MPI. */
bt_status_t bt_mpi_error(const char *what, int code);
#define BT_MPI_CHECK(call)                                                      \
    do {                                                                        \
        int bt_mpi_rc_ = (call);                                                \
        if (bt_mpi_rc_ != MPI_SUCCESS)                                          \
            return bt_mpi_error(#call, bt_mpi_rc_);                             \
    } while (0)

#endif /* BT_STAGES_TRANSPORT_H */
