/* linkprobe.c: ping-pong between neighbor stages (see linkprobe.h). */
#include "stages/linkprobe.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

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
