/*
 * linkprobe.h: latency and bandwidth of each pipeline link, measured once at
 * start with a short ping-pong between stage s and stage s+1.
 *
 * Latency is half the median round trip of lat_bytes-sized messages (8 by
 * default); bandwidth is 2 * bw_bytes over the median round trip of
 * bw_bytes-sized messages (1 MiB by default), i.e. what one direction
 * carries while the other answers. One unmeasured round trip of each size
 * comes first. Links are measured in two phases (links from even stages,
 * then from odd ones) so that a rank is in one ping-pong at a time and
 * disjoint links are measured at once. At 1 Gbit/s the defaults take about
 * 4 * 2 MiB / 125 MB/s = 70 ms per phase.
 */
#ifndef BT_STAGES_LINKPROBE_H
#define BT_STAGES_LINKPROBE_H

#include <mpi.h>
#include <stddef.h>

#include "common.h"

typedef struct bt_linkprobe_config {
    size_t lat_bytes; /* small message size (0: 8) */
    int lat_reps;     /* measured small round trips (0: 10) */
    size_t bw_bytes;  /* large message size (0: 1 MiB) */
    int bw_reps;      /* measured large round trips (0: 3) */
} bt_linkprobe_config_t;

/* The link from rank `from` to rank from + 1. */
typedef struct bt_link {
    int from, to;
    double latency_s;   /* one way: half the median small round trip */
    double bandwidth;   /* bytes/s: 2 * bw_bytes / median large round trip */
    size_t lat_bytes, bw_bytes;
    int lat_reps, bw_reps;
} bt_link_t;

/*
 * The probe's arithmetic, apart from any MPI: from lat_reps round-trip
 * times of lat_bytes messages (lat_rtt) and bw_reps of bw_bytes messages
 * (bw_rtt), all in seconds, sets link->latency_s to half the median of
 * lat_rtt and link->bandwidth to 2 * bw_bytes / the median of bw_rtt (0
 * when that median is not positive). The median of an even count is the
 * mean of the middle two. Sorts both arrays in place; the counts and sizes
 * come from link.
 */
void bt_linkprobe_figures(double *lat_rtt, double *bw_rtt, bt_link_t *link);

/*
 * Collective over comm (every rank calls it). cfg may be NULL (defaults).
 * On rank 0, links[0 .. size-2] get every link; other ranks may pass NULL.
 * With one rank there is no link and nothing is sent. Returns BT_OK, or
 * BT_ERR_ARG for a config out of range, BT_ERR_NOMEM, BT_ERR_MPI (logged);
 * the status is agreed on by every rank.
 */
bt_status_t bt_linkprobe_run(MPI_Comm comm, const bt_linkprobe_config_t *cfg, bt_link_t *links);

/*
 * The stage boundary of a hybrid layout (T tensor ranks a stage; stage s is
 * ranks s*T .. s*T + T - 1 of comm): how long one activation message of
 * `bytes` takes from stage 0, where every rank holds it, until every rank
 * of stage 1 holds it, by each way of crossing (docs/design.md, "Tensor
 * parallelism"):
 *   BT_BOUNDARY_STAGE       leader to leader, then a broadcast inside
 *                           stage 1 (what the pipeline does): the message
 *                           crosses once
 *   BT_BOUNDARY_PAIR_SPLIT  tensor rank t to tensor rank t, each its 1/T
 *                           slice, then an all-gather inside stage 1: the
 *                           message crosses once, in T streams
 *   BT_BOUNDARY_PAIR_WHOLE  tensor rank t to tensor rank t, the whole
 *                           message each: it crosses T times, and nothing
 *                           is shared afterwards
 * Each time is the median over reps of the slowest rank's time from a
 * barrier to its part done (one unmeasured try first). Stage 1's ranks
 * check the bytes they end with. Collective over comm; every rank gets
 * seconds[]; all 0 when there are fewer than 2 stages or T < 2. Returns
 * BT_OK, BT_ERR_ARG (logged) for T not dividing the ranks or a size over
 * INT32_MAX, BT_ERR_NOMEM, BT_ERR_MPI (logged); agreed by every rank.
 */
enum { BT_BOUNDARY_STAGE, BT_BOUNDARY_PAIR_SPLIT, BT_BOUNDARY_PAIR_WHOLE, BT_BOUNDARY_N };
extern const char *const bt_boundary_names[BT_BOUNDARY_N];
bt_status_t bt_linkprobe_boundary(MPI_Comm comm, int T, size_t bytes, int reps,
                                  double seconds[BT_BOUNDARY_N]);

#endif /* BT_STAGES_LINKPROBE_H */
