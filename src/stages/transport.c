/* transport.c: activations stage to stage, tokens back to rank 0. */
#include "stages/transport.h"

#include <stdlib.h>
#include <string.h>

bt_status_t bt_mpi_error(const char *what, int code)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "error code %d", code);
    bt_log_error("%s failed: %s", what, msg);
    return BT_ERR_MPI;
}

bt_status_t bt_transport_init(bt_transport_t *t, MPI_Comm comm, int max_tok, int n_embd,
                              bt_trace_t *trace)
{
    *t = (bt_transport_t){.comm = comm, .n_embd = n_embd, .max_tok = max_tok, .trace = trace};
    MPI_Comm_rank(comm, &t->rank);
    MPI_Comm_size(comm, &t->size);
    t->prev = t->rank > 0 ? t->rank - 1 : MPI_PROC_NULL;
    t->next = t->rank < t->size - 1 ? t->rank + 1 : MPI_PROC_NULL;
    t->msg_bytes = bt_act_bytes(max_tok, n_embd);
    for (int i = 0; i < BT_TRANSPORT_SLOTS; i++) {
        t->recv_req[i] = t->send_req[i] = MPI_REQUEST_NULL;
        t->buf[i] = aligned_alloc(64, (t->msg_bytes + 63) / 64 * 64);
    }
    t->act_sent_to = calloc((size_t)t->size, sizeof(uint64_t));
    t->act_recv_from = calloc((size_t)t->size, sizeof(uint64_t));
    for (int i = 0; i < BT_TRANSPORT_SLOTS; i++)
        if (t->buf[i] == NULL)
            goto fail;
    if (t->act_sent_to == NULL || t->act_recv_from == NULL)
        goto fail;
    return BT_OK;
fail:
    bt_log_error("transport: cannot allocate %d buffers of %zu bytes", BT_TRANSPORT_SLOTS,
                 t->msg_bytes);
    bt_transport_free(t);
    return BT_ERR_NOMEM;
}

void bt_transport_free(bt_transport_t *t)
{
    for (int i = 0; i < BT_TRANSPORT_SLOTS; i++) {
        free(t->buf[i]);
        t->buf[i] = NULL;
    }
    free(t->act_sent_to);
    free(t->act_recv_from);
    t->act_sent_to = t->act_recv_from = NULL;
}

bt_act_header_t *bt_transport_header(const bt_transport_t *t, int slot)
{
    return (bt_act_header_t *)t->buf[slot];
}

bt_row_t *bt_transport_rows(const bt_transport_t *t, int slot)
{
    return (bt_row_t *)((char *)t->buf[slot] + sizeof(bt_act_header_t));
}

float *bt_transport_payload(const bt_transport_t *t, int slot)
{
    const int n_rows = bt_transport_header(t, slot)->n_rows;
    return (float *)((char *)t->buf[slot] + bt_act_payload_offset(n_rows));
}

bt_status_t bt_transport_acquire(bt_transport_t *t, int slot)
{
    if (t->send_req[slot] == MPI_REQUEST_NULL)
        return BT_OK;
    double t0 = bt_trace_now(t->trace);
    BT_MPI_CHECK(MPI_Wait(&t->send_req[slot], MPI_STATUS_IGNORE));
    bt_trace_span(t->trace, BT_EV_SEND_WAIT, t->send_mb[slot], t0);
    bt_trace_mark(t->trace, BT_EV_SEND_DONE, t->send_mb[slot]);
    return BT_OK;
}

bt_status_t bt_transport_post_recv(bt_transport_t *t, int slot)
{
    bt_status_t st = bt_transport_acquire(t, slot);
    if (st != BT_OK)
        return st;
    BT_MPI_CHECK(MPI_Irecv(t->buf[slot], (int)t->msg_bytes, MPI_BYTE, t->prev, BT_TAG_ACT, t->comm,
                           &t->recv_req[slot]));
    return BT_OK;
}

bt_status_t bt_transport_wait_recv(bt_transport_t *t, int slot, int expect_mb, int expect_tok,
                                   bool *stop)
{
    MPI_Status *status = &t->recv_status[slot];
    if (t->recv_req[slot] != MPI_REQUEST_NULL) { /* else a progress test completed it */
        double t0 = bt_trace_now(t->trace);
        BT_MPI_CHECK(MPI_Wait(&t->recv_req[slot], status));
        bt_trace_span(t->trace, BT_EV_RECV_WAIT, expect_mb, t0);
    }
    int bytes = 0;
    MPI_Get_count(status, MPI_BYTE, &bytes);
    const bt_act_header_t *h = bt_transport_header(t, slot);
    if (stop != NULL && (size_t)bytes == sizeof *h && h->flags == BT_ACT_STOP) {
        *stop = true;
        return BT_OK;
    }
    const bool count_ok = expect_tok >= 0 ? h->n_rows == expect_tok
                                          : h->n_rows >= 1 && h->n_rows <= t->max_tok;
    const int n = count_ok ? h->n_rows : expect_tok;
    size_t want = n >= 0 ? bt_act_bytes(n, t->n_embd) : 0;
    if (!count_ok || (size_t)bytes != want || h->mb != expect_mb || h->flags) {
        bt_log_error("transport: from rank %d expected micro-batch %d of %d rows (%zu bytes), "
                     "got micro-batch %d of %d rows (%d bytes)",
                     status->MPI_SOURCE, expect_mb, n, want, h->mb, h->n_rows, bytes);
        return BT_ERR_MPI;
    }
    t->act_recv_from[status->MPI_SOURCE]++;
    t->bytes_recv += (uint64_t)bytes;
    return BT_OK;
}

bt_status_t bt_transport_send(bt_transport_t *t, int slot)
{
    const bt_act_header_t *h = bt_transport_header(t, slot);
    size_t bytes = h->flags == BT_ACT_STOP ? sizeof *h : bt_act_bytes(h->n_rows, t->n_embd);
    BT_MPI_CHECK(MPI_Isend(t->buf[slot], (int)bytes, MPI_BYTE, t->next, BT_TAG_ACT, t->comm,
                           &t->send_req[slot]));
    t->send_mb[slot] = h->mb;
    bt_trace_mark(t->trace, BT_EV_SEND_POSTED, h->mb);
    if (t->next != MPI_PROC_NULL) {
        t->act_sent_to[t->next]++;
        t->bytes_sent += bytes;
    }
    return BT_OK;
}

bt_status_t bt_transport_send_stop(bt_transport_t *t)
{
    bt_status_t st = bt_transport_acquire(t, 0);
    if (st != BT_OK)
        return st;
    bt_act_header_t *h = bt_transport_header(t, 0);
    *h = (bt_act_header_t){.flags = BT_ACT_STOP};
    if ((st = bt_transport_send(t, 0)))
        return st;
    return bt_transport_acquire(t, 0);
}

void bt_transport_progress(bt_transport_t *t)
{
    for (int i = 0; i < BT_TRANSPORT_SLOTS; i++) {
        int done;
        if (t->recv_req[i] != MPI_REQUEST_NULL)
            MPI_Test(&t->recv_req[i], &done, &t->recv_status[i]);
        if (t->send_req[i] != MPI_REQUEST_NULL &&
            MPI_Test(&t->send_req[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
            bt_trace_mark(t->trace, BT_EV_SEND_DONE, t->send_mb[i]);
    }
}

bt_status_t bt_transport_drain(bt_transport_t *t)
{
    for (int i = 0; i < BT_TRANSPORT_SLOTS; i++) {
        bt_status_t st = bt_transport_acquire(t, i);
        if (st != BT_OK)
            return st;
    }
    return BT_OK;
}

bt_status_t bt_transport_send_int(bt_transport_t *t, int dest, bt_tag_t tag, int32_t v)
{
    BT_MPI_CHECK(MPI_Send(&v, 1, MPI_INT32_T, dest, (int)tag, t->comm));
    return BT_OK;
}

bt_status_t bt_transport_recv_int(bt_transport_t *t, int src, bt_tag_t tag, int32_t *v)
{
    BT_MPI_CHECK(MPI_Recv(v, 1, MPI_INT32_T, src, (int)tag, t->comm, MPI_STATUS_IGNORE));
    return BT_OK;
}

bt_status_t bt_transport_agree(MPI_Comm comm, bt_status_t st)
{
    /* (rank, status) in one int so a single reduction finds the lowest
     * failing rank and its status */
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int mine = st == BT_OK ? size * 16 : rank * 16 + (-(int)st);
    int first;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return BT_ERR_MPI;
    bt_log_flush_captured(first / 16 == rank);
    return first >= size * 16 ? BT_OK : (bt_status_t)(-(first % 16));
}
