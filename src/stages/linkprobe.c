/* linkprobe.c: ping-pong between neighbor stages (see linkprobe.h). */
#include "stages/linkprobe.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stages/transport.h"

/* reps + 1 round trips of bytes with peer (the first unmeasured); the
 * initiator times them into rtt[reps], the other side only answers. */
static bt_status_t ping_pong(MPI_Comm comm, int peer, bool initiator, char *buf, size_t bytes,
                             int reps, double *rtt)
{
    for (int r = -1; r < reps; r++) {
        if (initiator) {
            double t0 = MPI_Wtime();
            BT_MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, peer, BT_TAG_PROBE, comm));
            BT_MPI_CHECK(
                MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, BT_TAG_PROBE, comm, MPI_STATUS_IGNORE));
            if (r >= 0)
                rtt[r] = MPI_Wtime() - t0;
        } else {
            BT_MPI_CHECK(
                MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, BT_TAG_PROBE, comm, MPI_STATUS_IGNORE));
            BT_MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, peer, BT_TAG_PROBE, comm));
        }
    }
    return BT_OK;
}

void bt_linkprobe_figures(double *lat_rtt, double *bw_rtt, bt_link_t *link)
{
    double lat = bt_median(lat_rtt, link->lat_reps), bw = bt_median(bw_rtt, link->bw_reps);
    link->latency_s = 0.5 * lat;
    link->bandwidth = bw > 0 ? 2.0 * (double)link->bw_bytes / bw : 0;
}

/* Rank from measures the link to from + 1 into rtt[lat_reps + bw_reps];
 * peer answers. */
static bt_status_t probe_link(MPI_Comm comm, int rank, const bt_link_t *want, char *buf,
                              double *rtt, bt_link_t *out)
{
    bool initiator = rank == want->from;
    int peer = initiator ? want->to : want->from;
    double *bw_rtt = rtt + want->lat_reps;
    bt_status_t st = ping_pong(comm, peer, initiator, buf, want->lat_bytes, want->lat_reps, rtt);
    if (st == BT_OK)
        st = ping_pong(comm, peer, initiator, buf, want->bw_bytes, want->bw_reps, bw_rtt);
    if (st != BT_OK || !initiator)
        return st;
    *out = *want;
    bt_linkprobe_figures(rtt, bw_rtt, out);
    return BT_OK;
}

bt_status_t bt_linkprobe_run(MPI_Comm comm, const bt_linkprobe_config_t *cfg, bt_link_t *links)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    bt_link_t want = {
        .lat_bytes = cfg && cfg->lat_bytes ? cfg->lat_bytes : 8,
        .lat_reps = cfg && cfg->lat_reps ? cfg->lat_reps : 10,
        .bw_bytes = cfg && cfg->bw_bytes ? cfg->bw_bytes : (size_t)1 << 20,
        .bw_reps = cfg && cfg->bw_reps ? cfg->bw_reps : 3,
    };
    bt_status_t st = BT_OK;
    if (want.lat_reps < 1 || want.bw_reps < 1 || want.lat_bytes > INT32_MAX ||
        want.bw_bytes > INT32_MAX) {
        bt_log_error("linkprobe: round trips (%d, %d) must be >= 1 and sizes (%zu, %zu bytes) "
                     "at most %d",
                     want.lat_reps, want.bw_reps, want.lat_bytes, want.bw_bytes, INT32_MAX);
        st = BT_ERR_ARG;
    }
    if ((st = bt_transport_agree(comm, st)) != BT_OK || size < 2)
        return st;

    size_t buf_bytes = want.bw_bytes > want.lat_bytes ? want.bw_bytes : want.lat_bytes;
    char *buf = calloc(buf_bytes, 1);
    double *rtt = calloc((size_t)want.lat_reps + (size_t)want.bw_reps, sizeof *rtt);
    bt_link_t mine = {0};
    if (buf == NULL || rtt == NULL) {
        bt_log_error("linkprobe: cannot allocate a %zu-byte message buffer", buf_bytes);
        st = BT_ERR_NOMEM;
    }
    if ((st = bt_transport_agree(comm, st)) != BT_OK)
        goto done;
    /* phase 0: links 0->1, 2->3, ...; phase 1: links 1->2, 3->4, ... */
    for (int phase = 0; phase < 2 && st == BT_OK; phase++) {
        int from = rank % 2 == phase ? rank : rank - 1;
        if (from >= 0 && from + 1 < size) {
            want.from = from;
            want.to = from + 1;
            st = probe_link(comm, rank, &want, buf, rtt, &mine);
        }
        st = bt_transport_agree(comm, st);
    }
    if (st != BT_OK)
        goto done;

    /* every rank's measurement (the last rank's is empty) to rank 0 */
    double pair[2] = {mine.latency_s, mine.bandwidth};
    double *all = rank == 0 ? malloc(sizeof pair * (size_t)size) : NULL;
    if (rank == 0 && all == NULL) {
        bt_log_error("linkprobe: cannot allocate %d results", size);
        st = BT_ERR_NOMEM;
    }
    if ((st = bt_transport_agree(comm, st)) != BT_OK) {
        free(all);
        goto done;
    }
    int rc = MPI_Gather(pair, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, comm);
    if (rc != MPI_SUCCESS)
        st = bt_mpi_error("MPI_Gather of the link probe", rc);
    for (int s = 0; rank == 0 && st == BT_OK && s < size - 1; s++) {
        links[s] = want;
        links[s].from = s;
        links[s].to = s + 1;
        links[s].latency_s = all[2 * s];
        links[s].bandwidth = all[2 * s + 1];
    }
    free(all);
done:
    free(rtt);
    free(buf);
    return st;
}

/* ---- the stage boundary of a hybrid layout ---- */

const char *const bt_boundary_names[BT_BOUNDARY_N] = {"stage", "pair-split", "pair-whole"};

typedef struct boundary {
    MPI_Comm comm, stage; /* all ranks; this rank's stage */
    int T, s, t;          /* tensor ranks a stage; this rank's stage and tensor index */
    int bytes;
    int *counts, *displs; /* [T]: tensor rank t's slice of the message */
} boundary_t;

/* One crossing by `how`: stage 0's ranks send from msg, stage 1's end with
 * the whole message in buf; other stages take no part. */
static bt_status_t cross(const boundary_t *b, int how, const char *msg, char *buf)
{
    if (b->s > 1)
        return BT_OK;
    const int peer = b->s == 0 ? b->T + b->t : b->t; /* the other stage's tensor rank t */
    const bool send = b->s == 0;
    int off = 0, n = b->bytes; /* what this pair carries */
    if (how == BT_BOUNDARY_STAGE && b->t != 0)
        n = 0;
    if (how == BT_BOUNDARY_PAIR_SPLIT) {
        off = b->displs[b->t];
        n = b->counts[b->t];
    }
    if (n > 0 && send)
        BT_MPI_CHECK(MPI_Send(msg + off, n, MPI_BYTE, peer, BT_TAG_PROBE, b->comm));
    else if (n > 0)
        BT_MPI_CHECK(
            MPI_Recv(buf + off, n, MPI_BYTE, peer, BT_TAG_PROBE, b->comm, MPI_STATUS_IGNORE));
    if (send || how == BT_BOUNDARY_PAIR_WHOLE)
        return BT_OK;
    if (how == BT_BOUNDARY_STAGE)
        BT_MPI_CHECK(MPI_Bcast(buf, b->bytes, MPI_BYTE, 0, b->stage));
    else
        BT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, b->counts,
                                    b->displs, MPI_BYTE, b->stage));
    return BT_OK;
}

/* Median over reps of the slowest rank's crossing by `how` into *sec; stage
 * 1's ranks check each message they end with against msg. */
static bt_status_t time_crossings(const boundary_t *b, int how, int reps, const char *msg,
                                  char *buf, double *sec, double *samples)
{
    for (int r = -1; r < reps; r++) {
        if (b->s == 1)
            memset(buf, 0, (size_t)b->bytes);
        BT_MPI_CHECK(MPI_Barrier(b->comm));
        double t0 = MPI_Wtime();
        bt_status_t st = cross(b, how, msg, buf);
        double mine = MPI_Wtime() - t0, slowest;
        if (st == BT_OK && b->s == 1 && memcmp(buf, msg, (size_t)b->bytes) != 0) {
            bt_log_error("boundary probe (%s): tensor rank %d of stage 1 ended with other bytes "
                         "than stage 0 sent",
                         bt_boundary_names[how], b->t);
            st = BT_ERR_MPI;
        }
        if ((st = bt_transport_agree(b->comm, st)) != BT_OK)
            return st;
        BT_MPI_CHECK(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, b->comm));
        if (r >= 0)
            samples[r] = slowest;
    }
    *sec = bt_median(samples, reps);
    return BT_OK;
}

bt_status_t bt_linkprobe_boundary(MPI_Comm comm, int T, size_t bytes, int reps,
                                  double seconds[BT_BOUNDARY_N])
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int i = 0; i < BT_BOUNDARY_N; i++)
        seconds[i] = 0.0;
    bt_status_t st = BT_OK;
    if (T < 1 || size % T != 0 || bytes > INT32_MAX || reps < 1) {
        bt_log_error("boundary probe: %d tensor ranks a stage must divide the %d ranks, the "
                     "message (%zu bytes) be at most %d bytes and the repetitions (%d) >= 1",
                     T, size, bytes, INT32_MAX, reps);
        st = BT_ERR_ARG;
    }
    if ((st = bt_transport_agree(comm, st)) != BT_OK || T < 2 || size / T < 2)
        return st;

    boundary_t b = {.comm = comm, .T = T, .s = rank / T, .t = rank % T, .bytes = (int)bytes};
    BT_MPI_CHECK(MPI_Comm_split(comm, b.s, b.t, &b.stage));
    char *msg = malloc(bytes > 0 ? bytes : 1), *buf = malloc(bytes > 0 ? bytes : 1);
    double *samples = malloc(sizeof *samples * (size_t)reps);
    b.counts = malloc(sizeof *b.counts * (size_t)T);
    b.displs = malloc(sizeof *b.displs * (size_t)T);
    if (msg == NULL || buf == NULL || samples == NULL || b.counts == NULL || b.displs == NULL) {
        bt_log_error("boundary probe: cannot allocate two %zu-byte messages", bytes);
        st = BT_ERR_NOMEM;
    }
    if ((st = bt_transport_agree(comm, st)) == BT_OK) {
        for (size_t i = 0; i < bytes; i++)
            msg[i] = (char)(i * 131 + 7);
        for (int t = 0, off = 0; t < T; t++) {
            b.counts[t] = b.bytes / T + (t < b.bytes % T);
            b.displs[t] = off;
            off += b.counts[t];
        }
        for (int how = 0; how < BT_BOUNDARY_N && st == BT_OK; how++)
            st = time_crossings(&b, how, reps, msg, buf, &seconds[how], samples);
    }
    free(b.displs);
    free(b.counts);
    free(samples);
    free(buf);
    free(msg);
    MPI_Comm_free(&b.stage);
    return st;
}
