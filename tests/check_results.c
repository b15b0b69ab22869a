/*
 * check_results.c: reads a baton-bench HDF5 file back with the HDF5 API.
 * Run by tests/bench.sh:
 *   check_results FILE N_RUNS N_ROWS N_LAYER BEFORE.h5|none
 * checks the layout attributes, the row counts, every row's fields against
 * its samples (mean and sample standard deviation) and its stage times
 * (what each rank sends and receives, bounded by the repetitions' time),
 * the provenance of every run and its links (one /links row per link
 * s -> s+1 naming the hosts of /runs), and, given
 * BEFORE.h5 (a copy taken before an append), that the rows it held are
 * unchanged byte for byte; "none" says the file has no earlier copy (a
 * first write), so no call can skip the comparison by leaving it out.
 * Rows of -sm tensor and -tp T hold their layout: layer_split has
 * n_ranks / tp stages, and on a stage of tensor ranks only its leader
 * sends or receives activations while every rank spends part of its busy
 * time in gathers (gather_s; 0 without tensor ranks), and the row holds
 * the probe of its stage's gathers (gather_latency_us and
 * gather_bandwidth_MBps, positive exactly when tp > 1); tp_comm is
 * "gather" or "allreduce", and "gather" without tensor ranks.
 *   check_results --set-version FILE N
 * rewrites FILE's format_version to N (tests/bad_input.sh);
 *   check_results --read FILE
 * reads FILE's /results with the readers baton-plan uses (bt_h5_read_results:
 * this version and version 4) and prints a line per row: test, split_mode,
 * tp, tp_comm, pipeline (tests/plots.sh); exit 1 when it is refused;
 *   check_results --writer DIR
 * instead drives the writer (bench/results_h5.c) itself in DIR: rows with
 * n_parallel, split_mode, tp, tp_comm and gather seconds written and read
 * back, a version 7 file (no tp_comm) read with tp_comm "gather", and
 * files of an older and a newer format version refused with a message that
 * names both versions, their bytes and modification time left as they were.
 */
#include <check.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "results_h5.h"
#include "testutil.h"

static const char *path, *before_path;
static long want_runs, want_rows, n_layer;

/* Reads a whole 1-D dataset in its file type; *n rows of *size bytes. */
static void *read_all(hid_t f, const char *name, hsize_t *n, size_t *size, hid_t *type)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(d >= 0, "no dataset /%s", name);
    hid_t sp = H5Dget_space(d);
    ck_assert_int_eq(H5Sget_simple_extent_ndims(sp), 1);
    H5Sget_simple_extent_dims(sp, n, NULL);
    hid_t ft = H5Dget_type(d);
    *type = H5Tget_native_type(ft, H5T_DIR_ASCEND);
    *size = H5Tget_size(*type);
    void *buf = calloc(*n ? *n : 1, *size);
    if (*n > 0)
        ck_assert_int_ge(H5Dread(d, *type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Dclose(d);
    return buf;
}

/* Offset of a member in a compound type; fails the test when absent. */
static size_t member(hid_t type, const char *name)
{
    int i = H5Tget_member_index(type, name);
    ck_assert_msg(i >= 0, "no field '%s'", name);
    return H5Tget_member_offset(type, (unsigned)i);
}

#define FIELD(buf, size, row, type, off) (*(type *)((char *)(buf) + (row) * (size) + (off)))
#define FSTR(buf, size, row, off) ((const char *)(buf) + (row) * (size) + (off))

START_TEST(test_layout_and_runs)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_msg(f >= 0, "cannot open %s", path);
    char format[64] = "";
    hid_t a = H5Aopen(f, "format", H5P_DEFAULT);
    hid_t at = H5Aget_type(a);
    H5Aread(a, at, format);
    H5Tclose(at);
    H5Aclose(a);
    ck_assert_str_eq(format, "baton-bench results");
    int version = 0;
    a = H5Aopen(f, "format_version", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT, &version);
    H5Aclose(a);
    ck_assert_int_eq(version, BT_H5_FORMAT_VERSION);
    /* 3: n_parallel in /results; 4: /profile, /plan; 5: split_mode, tp, gather_s;
     * 6: "sample" and "shared" /profile rows; 7: the experts a call chose;
     * 8: tp_comm */
    ck_assert_int_eq(version, 8);
    for (int i = 0; i < 2; i++) { /* a benchmark writes neither */
        const char *name = i ? "plan" : "profile";
        hsize_t rows;
        size_t rs;
        hid_t rt;
        free(read_all(f, name, &rows, &rs, &rt));
        H5Tclose(rt);
        ck_assert_msg(rows == 0, "/%s has %llu rows", name, (unsigned long long)rows);
    }

    hsize_t n;
    size_t sz;
    hid_t t;
    char *runs = read_all(f, "runs", &n, &sz, &t);
    ck_assert_int_eq((long)n, want_runs);
    for (hsize_t r = 0; r < n; r++) {
        ck_assert_int_eq(FIELD(runs, sz, r, int64_t, member(t, "run_id")), (int64_t)r);
        int ranks = FIELD(runs, sz, r, int32_t, member(t, "n_ranks"));
        ck_assert_int_ge(ranks, 1);
        const char *hosts = FSTR(runs, sz, r, member(t, "hosts"));
        int commas = 0;
        for (const char *c = hosts; *c; c++)
            commas += *c == ',';
        ck_assert_msg(*hosts && commas == ranks - 1, "run %llu: hosts '%s' for %d ranks",
                      (unsigned long long)r, hosts, ranks);
        ck_assert_ptr_nonnull(strstr(FSTR(runs, sz, r, member(t, "command_line")), "baton-bench"));
        ck_assert(strlen(FSTR(runs, sz, r, member(t, "mpi_version"))) > 0);
        ck_assert(strlen(FSTR(runs, sz, r, member(t, "build_commit"))) > 0);
        ck_assert(strlen(FSTR(runs, sz, r, member(t, "cpu_info"))) > 0);
        const char *start = FSTR(runs, sz, r, member(t, "start_time"));
        ck_assert_msg(strlen(start) == 20 && start[4] == '-' && start[10] == 'T' && start[19] == 'Z',
                      "start_time '%s' is not ISO 8601 UTC", start);
        member(t, "slurm_job_id");
        member(t, "configure_args");
    }
    free(runs);
    H5Tclose(t);
    H5Fclose(f);
}
END_TEST

/* Host i of a comma-separated list into out. */
static void nth_host(const char *hosts, int i, char *out, size_t n)
{
    while (i-- > 0 && hosts != NULL)
        hosts = (hosts = strchr(hosts, ',')) ? hosts + 1 : NULL;
    snprintf(out, n, "%.*s", hosts ? (int)strcspn(hosts, ",") : 0, hosts ? hosts : "");
}

START_TEST(test_links)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hsize_t nr, nl;
    size_t szr, szl;
    hid_t tr, tl;
    char *runs = read_all(f, "runs", &nr, &szr, &tr);
    char *links = read_all(f, "links", &nl, &szl, &tl);
    hsize_t total = 0;
    for (hsize_t r = 0; r < nr; r++) {
        int ranks = FIELD(runs, szr, r, int32_t, member(tr, "n_ranks"));
        const char *hosts = FSTR(runs, szr, r, member(tr, "hosts"));
        int seen = 0;
        for (hsize_t i = 0; i < nl; i++) {
            if (FIELD(links, szl, i, int64_t, member(tl, "run_id")) != (int64_t)r)
                continue;
            int from = FIELD(links, szl, i, int32_t, member(tl, "from_rank"));
            int to = FIELD(links, szl, i, int32_t, member(tl, "to_rank"));
            ck_assert_msg(from == seen && to == from + 1, "run %llu: link %d -> %d as link %d",
                          (unsigned long long)r, from, to, seen);
            char want[64];
            nth_host(hosts, from, want, sizeof want);
            ck_assert_str_eq(FSTR(links, szl, i, member(tl, "from_host")), want);
            nth_host(hosts, to, want, sizeof want);
            ck_assert_str_eq(FSTR(links, szl, i, member(tl, "to_host")), want);
            double lat = FIELD(links, szl, i, double, member(tl, "latency_us"));
            double bw = FIELD(links, szl, i, double, member(tl, "bandwidth_MBps"));
            ck_assert_msg(lat > 0 && lat < 1e6 && bw > 0 && bw < 1e7,
                          "run %llu link %d: latency %g us, bandwidth %g MB/s",
                          (unsigned long long)r, from, lat, bw);
            ck_assert(FIELD(links, szl, i, int64_t, member(tl, "lat_bytes")) > 0);
            ck_assert(FIELD(links, szl, i, int64_t, member(tl, "bw_bytes")) > 0);
            ck_assert(FIELD(links, szl, i, int32_t, member(tl, "lat_round_trips")) > 0);
            ck_assert(FIELD(links, szl, i, int32_t, member(tl, "bw_round_trips")) > 0);
            seen++;
        }
        ck_assert_int_eq(seen, ranks - 1);
        total += (hsize_t)seen;
    }
    ck_assert_int_eq(nl, total);
    free(runs);
    free(links);
    H5Tclose(tr);
    H5Tclose(tl);
    H5Fclose(f);
}
END_TEST

START_TEST(test_rows)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hsize_t nr, ns, nst;
    size_t szr, szs, szt;
    hid_t tr, ts, tt;
    char *res = read_all(f, "results", &nr, &szr, &tr);
    char *smp = read_all(f, "samples", &ns, &szs, &ts);
    char *stg = read_all(f, "stage_times", &nst, &szt, &tt);
    ck_assert_int_eq((long)nr, want_rows);
    hsize_t total_reps = 0, total_ranks = 0;
    for (hsize_t r = 0; r < nr; r++) {
        ck_assert_int_eq(FIELD(res, szr, r, int64_t, member(tr, "row_id")), (int64_t)r);
        const char *test = FSTR(res, szr, r, member(tr, "test"));
        int np = FIELD(res, szr, r, int32_t, member(tr, "n_prompt"));
        int ng = FIELD(res, szr, r, int32_t, member(tr, "n_gen"));
        char expect[64];
        if (np > 0 && ng > 0)
            snprintf(expect, sizeof expect, "pp%d+tg%d", np, ng);
        else
            snprintf(expect, sizeof expect, np > 0 ? "pp%d" : "tg%d", np > 0 ? np : ng);
        ck_assert_str_eq(test, expect);
        int reps = FIELD(res, szr, r, int32_t, member(tr, "reps"));
        int ranks = FIELD(res, szr, r, int32_t, member(tr, "n_ranks"));
        int pipeline = FIELD(res, szr, r, int32_t, member(tr, "pipeline"));
        ck_assert(pipeline == 0 || pipeline == 1);
        /* the layout: -sm layer stages of tp tensor ranks; -sm tensor one
         * stage of every rank, never with pipeline 1 (skipped) */
        const char *mode = FSTR(res, szr, r, member(tr, "split_mode"));
        int tp = FIELD(res, szr, r, int32_t, member(tr, "tp"));
        ck_assert_msg(!strcmp(mode, "layer") || !strcmp(mode, "tensor"),
                      "row %llu: split_mode '%s'", (unsigned long long)r, mode);
        ck_assert_msg(tp >= 1 && ranks % tp == 0, "row %llu: tp %d of %d ranks",
                      (unsigned long long)r, tp, ranks);
        if (!strcmp(mode, "tensor"))
            ck_assert_msg(tp == ranks && pipeline == 0, "row %llu: -sm tensor with tp %d of %d "
                          "ranks, pipeline %d", (unsigned long long)r, tp, ranks, pipeline);
        const int n_stages = ranks / tp;
        /* how the tensor ranks combined their shares: one rank a stage gathers */
        const char *comm = FSTR(res, szr, r, member(tr, "tp_comm"));
        ck_assert_msg(!strcmp(comm, "gather") || (tp > 1 && !strcmp(comm, "allreduce")),
                      "row %llu: tp_comm '%s' with tp %d", (unsigned long long)r, comm, tp);
        /* the gather probe: measured for stages of tensor ranks, 0 without */
        const double g_lat = FIELD(res, szr, r, double, member(tr, "gather_latency_us"));
        const double g_bw = FIELD(res, szr, r, double, member(tr, "gather_bandwidth_MBps"));
        ck_assert_msg(tp > 1 ? g_lat > 0 && g_bw > 0 : g_lat == 0 && g_bw == 0,
                      "row %llu: tp %d with a gather probe of %g us, %g MB/s",
                      (unsigned long long)r, tp, g_lat, g_bw);
        int npl = FIELD(res, szr, r, int32_t, member(tr, "n_parallel"));
        ck_assert_int_ge(npl, 1);
        ck_assert_int_ge(FIELD(res, szr, r, int32_t, member(tr, "n_ubatch")), 1);
        ck_assert(FIELD(res, szr, r, uint64_t, member(tr, "model_size")) > 0);
        ck_assert(FIELD(res, szr, r, uint64_t, member(tr, "model_n_params")) > 0);
        /* the layer split covers every layer once, one entry per rank */
        const char *split = FSTR(res, szr, r, member(tr, "layer_split"));
        long sum = 0;
        int parts = 0;
        for (const char *c = split; *c; parts++) {
            char *end;
            sum += strtol(c, &end, 10);
            c = *end == '/' ? end + 1 : end;
        }
        ck_assert_int_eq(sum, n_layer);
        ck_assert_int_eq(parts, n_stages);
        /* t/s per repetition; the averages and sample standard deviations
         * are those of this row's samples */
        double sum_ts = 0, sum_ns = 0, sq_ts = 0, sq_ns = 0;
        int count = 0;
        for (int pass = 0; pass < 2; pass++)
            for (hsize_t i = 0; i < ns; i++) {
                if (FIELD(smp, szs, i, int64_t, member(ts, "row_id")) != (int64_t)r)
                    continue;
                double t_ns = FIELD(smp, szs, i, double, member(ts, "ns"));
                double t_ts = FIELD(smp, szs, i, double, member(ts, "ts"));
                if (pass == 0) {
                    ck_assert(t_ns > 0 && t_ts > 0);
                    /* every one of the npl sequences runs the whole test */
                    ck_assert_double_eq_tol(t_ts, (double)npl * (np + ng) / (t_ns * 1e-9),
                                            1e-6 * t_ts);
                    sum_ts += t_ts;
                    sum_ns += t_ns;
                    count++;
                } else {
                    sq_ts += (t_ts - sum_ts / reps) * (t_ts - sum_ts / reps);
                    sq_ns += (t_ns - sum_ns / reps) * (t_ns - sum_ns / reps);
                }
            }
        ck_assert_int_eq(count, reps);
        double avg = FIELD(res, szr, r, double, member(tr, "avg_ts"));
        ck_assert_double_eq_tol(avg, sum_ts / reps, 1e-9 * avg);
        double avg_ns = FIELD(res, szr, r, double, member(tr, "avg_ns"));
        ck_assert_double_eq_tol(avg_ns, sum_ns / reps, 1e-9 * avg_ns);
        double sd_ts = FIELD(res, szr, r, double, member(tr, "stddev_ts"));
        double sd_ns = FIELD(res, szr, r, double, member(tr, "stddev_ns"));
        double want_sd_ts = reps > 1 ? sqrt(sq_ts / (reps - 1)) : 0;
        double want_sd_ns = reps > 1 ? sqrt(sq_ns / (reps - 1)) : 0;
        ck_assert_double_eq_tol(sd_ts, want_sd_ts, 1e-9 * avg + 1e-12);
        ck_assert_double_eq_tol(sd_ns, want_sd_ns, 1e-9 * avg_ns + 1e-12);
        total_reps += (hsize_t)reps;
        /* one stage-time row per rank. The times are sums over the traced
         * repetitions of each kind of event: wait is every blocked second,
         * send and receive its parts blocked on sends and on receives; only
         * rank 0 also waits for the token, so on the others wait is exactly
         * send + receive. Rank 0 receives activations from no one and the
         * last rank sends them to no one (its token goes untraced); every
         * other rank sends, and blocks at least in the final drain, and
         * receives, and blocks at least on its first micro-batch. With
         * tensor ranks this holds for each stage's leader (tp_rank 0); the
         * others neither send nor receive, and every rank of such a stage
         * spends part of busy in gathers. */
        double wall = sum_ns * 1e-9;
        int stages = 0;
        for (hsize_t i = 0; i < nst; i++)
            if (FIELD(stg, szt, i, int64_t, member(tt, "row_id")) == (int64_t)r) {
                ck_assert_int_eq(FIELD(stg, szt, i, int32_t, member(tt, "rank")), stages);
                double busy = FIELD(stg, szt, i, double, member(tt, "busy_s"));
                double wait = FIELD(stg, szt, i, double, member(tt, "wait_s"));
                double send = FIELD(stg, szt, i, double, member(tt, "send_s"));
                double recv = FIELD(stg, szt, i, double, member(tt, "recv_s"));
                double gather = FIELD(stg, szt, i, double, member(tt, "gather_s"));
                const int stage = stages / tp;
                const bool leader = stages % tp == 0;
                ck_assert_msg(isfinite(busy) && isfinite(wait) && isfinite(send) &&
                                  isfinite(recv) && busy > 0 && wait >= 0 && send >= 0 &&
                                  recv >= 0,
                              "row %llu rank %d: busy %g wait %g send %g recv %g s",
                              (unsigned long long)r, stages, busy, wait, send, recv);
                if (stages == 0)
                    ck_assert_msg(wait >= send + recv - 1e-12,
                                  "row %llu rank 0: wait %g s < send %g + recv %g",
                                  (unsigned long long)r, wait, send, recv);
                else
                    ck_assert_msg(fabs(wait - (send + recv)) <= 1e-9 * wait + 1e-12,
                                  "row %llu rank %d: wait %g s != send %g + recv %g",
                                  (unsigned long long)r, stages, wait, send, recv);
                ck_assert_msg((recv > 0) == (leader && stage > 0),
                              "row %llu rank %d of %d (stage %d of %d): recv %g s",
                              (unsigned long long)r, stages, ranks, stage, n_stages, recv);
                ck_assert_msg((send > 0) == (leader && stage < n_stages - 1),
                              "row %llu rank %d of %d (stage %d of %d): send %g s",
                              (unsigned long long)r, stages, ranks, stage, n_stages, send);
                ck_assert_msg(isfinite(gather) && (tp > 1 ? gather > 0 && gather <= busy
                                                          : gather == 0),
                              "row %llu rank %d, tp %d: gather %g s of busy %g s",
                              (unsigned long long)r, stages, tp, gather, busy);
                /* a rank's events lie in its repetitions, which start at its
                 * own barrier exit and end at its own finish, a little
                 * apart from rank 0's timed window: slack for a loaded
                 * machine, far below a unit or a double count */
                ck_assert_msg(busy + wait <= 1.25 * wall + 0.05 * reps,
                              "row %llu rank %d: busy %g + wait %g s over %d repetitions "
                              "timed at %g s",
                              (unsigned long long)r, stages, busy, wait, reps, wall);
                ck_assert(strlen(FSTR(stg, szt, i, member(tt, "host"))) > 0);
                stages++;
            }
        ck_assert_int_eq(stages, ranks);
        total_ranks += (hsize_t)ranks;
    }
    ck_assert_int_eq(ns, total_reps);
    ck_assert_int_eq(nst, total_ranks);
    free(res);
    free(smp);
    free(stg);
    H5Tclose(tr);
    H5Tclose(ts);
    H5Tclose(tt);
    H5Fclose(f);
}
END_TEST

START_TEST(test_append_kept_old_rows)
{
    if (before_path == NULL)
        return;
    hid_t fa = H5Fopen(before_path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t fb = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(fa >= 0 && fb >= 0);
    static const char *const names[] = {"runs", "results", "samples", "stage_times", "links"};
    for (int i = 0; i < 5; i++) {
        hsize_t na, nb;
        size_t sa, sb;
        hid_t ta, tb;
        char *a = read_all(fa, names[i], &na, &sa, &ta);
        char *b = read_all(fb, names[i], &nb, &sb, &tb);
        ck_assert_uint_eq(sa, sb);
        /* /links grows only when the new run has more than one rank */
        ck_assert_msg(nb > na || (i == 4 && nb == na), "/%s did not grow (%llu -> %llu)", names[i],
                      (unsigned long long)na, (unsigned long long)nb);
        ck_assert_msg(memcmp(a, b, na * sa) == 0, "/%s: old rows changed", names[i]);
        free(a);
        free(b);
        H5Tclose(ta);
        H5Tclose(tb);
    }
    H5Fclose(fa);
    H5Fclose(fb);
}
END_TEST

/* ---- the writer itself (--writer DIR) ---- */

static const char *dir;

static void dir_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* One test's row as bench.c fills it: reps samples, n_ranks stage times. */
typedef struct fake_row {
    bt_bench_row_t row;
    double ns[2], ts[2];
    bt_stage_time_t stages[2];
} fake_row_t;

static void fake_row_init_layout(fake_row_t *f, int n_parallel, const char *mode, int tp,
                                 const char *tp_comm)
{
    memset(f, 0, sizeof *f);
    bt_bench_row_t *r = &f->row;
    snprintf(r->test, sizeof r->test, "pp16");
    snprintf(r->test_time, sizeof r->test_time, "2026-01-01T00:00:00Z");
    snprintf(r->model_type, sizeof r->model_type, "llama 0.2M F32");
    snprintf(r->layer_split, sizeof r->layer_split, "2/2");
    r->model_size = 1000;
    r->model_n_params = 100;
    r->n_batch = 2048, r->n_ubatch = 8, r->n_threads = 1, r->n_prompt = 16;
    r->n_ranks = 2, r->pipeline = 1, r->n_parallel = n_parallel, r->reps = 2;
    snprintf(r->split_mode, sizeof r->split_mode, "%s", mode);
    r->tp = tp;
    snprintf(r->tp_comm, sizeof r->tp_comm, "%s", tp_comm);
    for (int i = 0; i < 2; i++) {
        f->ns[i] = 1e6 * (i + 1);
        f->ts[i] = n_parallel * 16 / (f->ns[i] * 1e-9);
        f->stages[i] = (bt_stage_time_t){0.001, 0.0005, 0.0002, 0.0003,
                                         tp > 1 ? 1e-4 * (i + 1) : 0};
    }
    r->samples_ns = f->ns;
    r->samples_ts = f->ts;
    r->stages = f->stages;
    bt_bench_row_finish(r);
}

static void fake_row_init(fake_row_t *f, int n_parallel)
{
    fake_row_init_layout(f, n_parallel, "layer", 1, "gather");
}

static const char *const fake_hosts[] = {"node0", "node1"};

/* A new file holding one run and one row per n_parallel value. */
static void write_file(const char *file, const int *npl, int n)
{
    unlink(file);
    bt_run_info_t run = {.n_ranks = 2};
    snprintf(run.command_line, sizeof run.command_line, "baton-bench --writer-test");
    snprintf(run.hosts, sizeof run.hosts, "node0,node1");
    bt_run_link_t link = {.from_rank = 0, .to_rank = 1, .latency_us = 1, .bandwidth_MBps = 1};
    int64_t run_id = -1;
    ck_assert_int_eq(bt_h5_begin_run(file, &run, &link, 1, &run_id), BT_OK);
    ck_assert_int_eq(run_id, 0);
    for (int i = 0; i < n; i++) {
        fake_row_t f;
        fake_row_init(&f, npl[i]);
        ck_assert_int_eq(bt_h5_append(file, run_id, &f.row, fake_hosts), BT_OK);
    }
}

START_TEST(test_writer_n_parallel)
{
    char p[1024];
    dir_path(p, sizeof p, "writer-npl.h5");
    static const int npl[] = {1, 4, 16};
    write_file(p, npl, 3);
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hsize_t n;
    size_t sz;
    hid_t t;
    char *res = read_all(f, "results", &n, &sz, &t);
    ck_assert_int_eq(n, 3);
    for (hsize_t r = 0; r < n; r++) {
        ck_assert_int_eq(FIELD(res, sz, r, int32_t, member(t, "n_parallel")), npl[r]);
        ck_assert_int_eq(FIELD(res, sz, r, int32_t, member(t, "pipeline")), 1);
        ck_assert_int_eq(FIELD(res, sz, r, int32_t, member(t, "reps")), 2);
        double want = (npl[r] * 16 / 1e-3 + npl[r] * 16 / 2e-3) / 2;
        ck_assert_double_eq_tol(FIELD(res, sz, r, double, member(t, "avg_ts")), want,
                                1e-9 * want);
    }
    free(res);
    H5Tclose(t);
    H5Fclose(f);
}
END_TEST

/* split_mode, tp and tp_comm in /results and gather_s in /stage_times:
 * written, read back with the HDF5 API and with bt_h5_read_results
 * (baton-plan's reader), row by row. */
START_TEST(test_writer_split_mode)
{
    char p[1024];
    dir_path(p, sizeof p, "writer-sm.h5");
    static const char *const modes[] = {"layer", "layer", "tensor"};
    static const int tps[] = {1, 2, 2};
    static const char *const comms[] = {"gather", "allreduce", "gather"};
    unlink(p);
    bt_run_info_t run = {.n_ranks = 2};
    snprintf(run.hosts, sizeof run.hosts, "node0,node1");
    int64_t run_id = -1;
    ck_assert_int_eq(bt_h5_begin_run(p, &run, NULL, 0, &run_id), BT_OK);
    for (int i = 0; i < 3; i++) {
        fake_row_t fr;
        fake_row_init_layout(&fr, 1, modes[i], tps[i], comms[i]);
        ck_assert_int_eq(bt_h5_append(p, run_id, &fr.row, fake_hosts), BT_OK);
    }
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert(f >= 0);
    hsize_t n, ns;
    size_t sz, szs;
    hid_t t, ts;
    char *res = read_all(f, "results", &n, &sz, &t);
    char *stg = read_all(f, "stage_times", &ns, &szs, &ts);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ns, 6);
    for (hsize_t r = 0; r < n; r++) {
        ck_assert_str_eq(FSTR(res, sz, r, member(t, "split_mode")), modes[r]);
        ck_assert_int_eq(FIELD(res, sz, r, int32_t, member(t, "tp")), tps[r]);
        ck_assert_str_eq(FSTR(res, sz, r, member(t, "tp_comm")), comms[r]);
        for (int k = 0; k < 2; k++) {
            const hsize_t i = 2 * r + (hsize_t)k;
            ck_assert_int_eq(FIELD(stg, szs, i, int64_t, member(ts, "row_id")), (int64_t)r);
            ck_assert_double_eq(FIELD(stg, szs, i, double, member(ts, "gather_s")),
                                tps[r] > 1 ? 1e-4 * (k + 1) : 0);
            ck_assert_double_eq(FIELD(stg, szs, i, double, member(ts, "busy_s")), 0.001);
        }
    }
    free(res);
    free(stg);
    H5Tclose(t);
    H5Tclose(ts);
    H5Fclose(f);
    bt_h5_result_t *rows;
    int nr;
    ck_assert_int_eq(bt_h5_read_results(p, &rows, &nr), BT_OK);
    ck_assert_int_eq(nr, 3);
    for (int r = 0; r < nr; r++) {
        ck_assert_str_eq(rows[r].split_mode, modes[r]);
        ck_assert_int_eq(rows[r].tp, tps[r]);
        ck_assert_str_eq(rows[r].tp_comm, comms[r]);
        ck_assert_int_eq(rows[r].n_parallel, 1);
        ck_assert_str_eq(rows[r].layer_split, "2/2");
    }
    free(rows);
}
END_TEST

/* Rewrites the root attribute format_version of file. */
static void set_version(const char *file, int version)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    ck_assert(a >= 0);
    ck_assert_int_ge(H5Awrite(a, H5T_NATIVE_INT, &version), 0);
    H5Aclose(a);
    ck_assert_int_ge(H5Fclose(f), 0);
}

/* The whole file into a malloc'd buffer of *n bytes. */
static char *slurp(const char *file, size_t *n)
{
    FILE *fp = fopen(file, "rb");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc(size > 0 ? (size_t)size : 1);
    ck_assert_uint_eq(fread(buf, 1, (size_t)size, fp), (size_t)size);
    fclose(fp);
    *n = (size_t)size;
    return buf;
}

/* Runs the writer's two entry points on file with stderr going to log;
 * both must refuse the file. */
static void refused(const char *file, const char *log)
{
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    bt_run_info_t run = {.n_ranks = 1};
    int64_t run_id = -1;
    bt_status_t st_run = bt_h5_begin_run(file, &run, NULL, 0, &run_id);
    fake_row_t fr;
    fake_row_init(&fr, 4);
    bt_status_t st_row = bt_h5_append(file, 0, &fr.row, fake_hosts);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_int_eq(st_run, BT_ERR_ARG);
    ck_assert_int_eq(st_row, BT_ERR_ARG);
    ck_assert_int_eq(run_id, -1);
}

/* An older version (its rows lack n_parallel) and a newer one are refused
 * before anything is written: the bytes and the modification time (set to
 * 2001 first, so a rewrite within the same clock tick would still show)
 * stay as they were, and the message names the version found, this
 * build's, and what to do. */
START_TEST(test_writer_refuses_other_versions)
{
    /* the one before this (4: no split_mode, tp) too: the readers take it,
     * the writer does not append to it */
    static const int versions[] = {1, 2, BT_H5_FORMAT_VERSION - 1, BT_H5_FORMAT_VERSION + 1};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        char p[1024], log[1024];
        dir_path(p, sizeof p, "writer-old.h5");
        dir_path(log, sizeof log, "writer-old.log");
        static const int npl[] = {2};
        write_file(p, npl, 1);
        set_version(p, versions[i]);
        const struct timespec past[2] = {{978307200, 123456789}, {978307200, 123456789}};
        ck_assert_int_eq(utimensat(AT_FDCWD, p, past, 0), 0);
        size_t n0, n1;
        char *before = slurp(p, &n0);
        refused(p, log);
        char *after = slurp(p, &n1);
        struct stat sb;
        ck_assert_int_eq(stat(p, &sb), 0);
        ck_assert_msg(n0 == n1 && memcmp(before, after, n0) == 0,
                      "version %d: the refused file changed (%zu -> %zu bytes)", versions[i],
                      n0, n1);
        ck_assert_msg(sb.st_mtim.tv_sec == past[1].tv_sec &&
                          sb.st_mtim.tv_nsec == past[1].tv_nsec,
                      "version %d: the refused file's mtime changed", versions[i]);
        size_t nl;
        char *msg = slurp(log, &nl);
        msg = realloc(msg, nl + 1);
        msg[nl] = '\0';
        char found[64], ours[64];
        snprintf(found, sizeof found, "format version %d, %s than version %d", versions[i],
                 versions[i] < BT_H5_FORMAT_VERSION ? "older" : "newer", BT_H5_FORMAT_VERSION);
        snprintf(ours, sizeof ours, "give --hdf5 a new file");
        ck_assert_msg(strstr(msg, found) && strstr(msg, ours) && strstr(msg, p),
                      "version %d: message '%s' lacks '%s' or '%s' or the path", versions[i],
                      msg, found, ours);
        /* one line per refused call (begin_run and append), nothing else */
        int lines = 0;
        for (char *c = msg; *c; c++)
            lines += *c == '\n';
        ck_assert_int_eq(lines, 2);
        free(msg);
        free(before);
        free(after);
    }
}
END_TEST

/* Rewrites dataset name of file without its member drop, as a version
 * that predates the member wrote it (chunked and extendible, as the writer
 * makes its datasets). */
static void drop_member(const char *file, const char *name, const char *drop)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    ck_assert(f >= 0);
    hsize_t n;
    size_t sz;
    hid_t t;
    char *rows = read_all(f, name, &n, &sz, &t);
    /* the other members at their offsets in rows: the memory type to write */
    hid_t mt = H5Tcreate(H5T_COMPOUND, sz);
    bool dropped = false;
    for (int i = 0; i < H5Tget_nmembers(t); i++) {
        char *m = H5Tget_member_name(t, (unsigned)i);
        hid_t mtype = H5Tget_member_type(t, (unsigned)i);
        if (strcmp(m, drop) == 0)
            dropped = true;
        else
            ck_assert_int_ge(H5Tinsert(mt, m, H5Tget_member_offset(t, (unsigned)i), mtype), 0);
        H5Tclose(mtype);
        H5free_memory(m);
    }
    ck_assert_msg(dropped, "/%s has no member '%s'", name, drop);
    hid_t ft = H5Tcopy(mt);
    ck_assert_int_ge(H5Tpack(ft), 0);
    ck_assert_int_ge(H5Ldelete(f, name, H5P_DEFAULT), 0);
    hsize_t max = H5S_UNLIMITED, chunk = 16;
    hid_t sp = H5Screate_simple(1, &n, &max), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t d = H5Dcreate2(f, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ck_assert(d >= 0);
    if (n > 0)
        ck_assert_int_ge(H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows), 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(ft);
    H5Tclose(mt);
    H5Tclose(t);
    free(rows);
    ck_assert_int_ge(H5Fclose(f), 0);
}

/* A version 7 file (/results without tp_comm) reads with tp_comm "gather",
 * the only way version 7 combined tensor ranks, and its other fields as
 * written; the writer refuses it, naming what it lacks. */
START_TEST(test_reader_version7)
{
    char p[1024], log[1024];
    dir_path(p, sizeof p, "reader-v7.h5");
    dir_path(log, sizeof log, "reader-v7.log");
    unlink(p);
    bt_run_info_t run = {.n_ranks = 2};
    snprintf(run.hosts, sizeof run.hosts, "node0,node1");
    int64_t run_id = -1;
    ck_assert_int_eq(bt_h5_begin_run(p, &run, NULL, 0, &run_id), BT_OK);
    fake_row_t fr;
    /* written as allreduce, so the "gather" read back is the reader's, not the file's */
    fake_row_init_layout(&fr, 2, "layer", 2, "allreduce");
    ck_assert_int_eq(bt_h5_append(p, run_id, &fr.row, fake_hosts), BT_OK);
    drop_member(p, "results", "tp_comm");
    set_version(p, 7);
    bt_h5_result_t *rows;
    int n;
    ck_assert_int_eq(bt_h5_read_results(p, &rows, &n), BT_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(rows[0].tp_comm, "gather");
    ck_assert_str_eq(rows[0].split_mode, "layer");
    ck_assert_int_eq(rows[0].tp, 2);
    ck_assert_int_eq(rows[0].n_parallel, 2);
    ck_assert_str_eq(rows[0].layer_split, "2/2");
    ck_assert_double_eq_tol(rows[0].avg_ns, 1.5e6, 1e-3);
    free(rows);
    refused(p, log);
    size_t nl;
    char *msg = slurp(log, &nl);
    msg = realloc(msg, nl + 1);
    msg[nl] = '\0';
    ck_assert_msg(strstr(msg, "format version 7, older than version 8") &&
                      strstr(msg, "it lacks tp_comm in /results"),
                  "message '%s'", msg);
    free(msg);
}
END_TEST

/* bt_h5_read_results takes versions BT_H5_READ_VERSION_MIN to this one and
 * refuses others, older and newer, with one message naming the file, its
 * version and the versions read. */
START_TEST(test_reader_versions)
{
    ck_assert_int_eq(BT_H5_READ_VERSION_MIN, 4);
    char p[1024], log[1024];
    dir_path(p, sizeof p, "reader.h5");
    dir_path(log, sizeof log, "reader.log");
    static const int npl[] = {3};
    static const int versions[] = {3, BT_H5_READ_VERSION_MIN, BT_H5_FORMAT_VERSION,
                                   BT_H5_FORMAT_VERSION + 1};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        write_file(p, npl, 1);
        set_version(p, versions[i]);
        fflush(stderr);
        int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ck_assert(saved >= 0 && fd >= 0);
        dup2(fd, 2);
        close(fd);
        bt_h5_result_t *rows = NULL;
        int n = -1;
        bt_status_t st = bt_h5_read_results(p, &rows, &n);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        const bool readable = versions[i] >= BT_H5_READ_VERSION_MIN &&
                              versions[i] <= BT_H5_FORMAT_VERSION;
        size_t nl;
        char *msg = slurp(log, &nl);
        msg = realloc(msg, nl + 1);
        msg[nl] = '\0';
        if (readable) {
            /* the file holds the fields: they read as written */
            ck_assert_msg(st == BT_OK && n == 1, "version %d refused: %s", versions[i], msg);
            ck_assert_str_eq(rows[0].split_mode, "layer");
            ck_assert_int_eq(rows[0].tp, 1);
            ck_assert_str_eq(rows[0].tp_comm, "gather");
            ck_assert_int_eq(rows[0].n_parallel, 3);
        } else {
            char want[128];
            snprintf(want, sizeof want, "is format version %d; this build reads versions %d to %d",
                     versions[i], BT_H5_READ_VERSION_MIN, BT_H5_FORMAT_VERSION);
            ck_assert_msg(st == BT_ERR_ARG && n == 0 && rows == NULL,
                          "version %d: status %d, %d rows", versions[i], st, n);
            ck_assert_msg(strstr(msg, want) && strstr(msg, p), "version %d: message '%s' lacks "
                          "'%s' or the path", versions[i], msg, want);
        }
        free(msg);
        free(rows);
    }
}
END_TEST

static int run_writer_suite(void)
{
    Suite *s = suite_create("results_h5_writer");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_writer_n_parallel);
    tcase_add_test(tc, test_writer_split_mode);
    suite_add_tcase(s, tc);
    tc = tcase_create("limits");
    tcase_add_test(tc, test_writer_refuses_other_versions);
    tcase_add_test(tc, test_reader_versions);
    tcase_add_test(tc, test_reader_version7);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* --read FILE: /results through bt_h5_read_results, a line per row. */
static int read_main(const char *file)
{
    bt_h5_result_t *rows;
    int n;
    if (bt_h5_read_results(file, &rows, &n) != BT_OK)
        return 1;
    for (int i = 0; i < n; i++)
        printf("%s %s %d %s %d\n", rows[i].test, rows[i].split_mode, rows[i].tp, rows[i].tp_comm,
               rows[i].pipeline);
    free(rows);
    return 0;
}

/* --set-version FILE N: rewrites FILE's format_version to N (a file of
 * another version for tests/bad_input.sh); 0 on success. */
static int set_version_main(const char *file, const char *value)
{
    int version = (int)strtol(value, NULL, 10);
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t a = f >= 0 ? H5Aopen(f, "format_version", H5P_DEFAULT) : -1;
    herr_t rc = a >= 0 ? H5Awrite(a, H5T_NATIVE_INT, &version) : -1;
    if (a >= 0)
        H5Aclose(a);
    if (f >= 0 && H5Fclose(f) < 0)
        rc = -1;
    if (rc < 0)
        fprintf(stderr, "check_results: cannot set format_version of %s to %d\n", file, version);
    return rc < 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--set-version") == 0)
        return set_version_main(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "--read") == 0)
        return read_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--writer") == 0) {
        dir = argv[2];
        return run_writer_suite() == 0 ? 0 : 1;
    }
    if (argc != 6) {
        fprintf(stderr, "usage: check_results FILE N_RUNS N_ROWS N_LAYER BEFORE.h5|none\n"
                        "       check_results --writer DIR\n"
                        "       check_results --read FILE\n"
                        "       check_results --set-version FILE N\n");
        return 2;
    }
    path = argv[1];
    want_runs = strtol(argv[2], NULL, 10);
    want_rows = strtol(argv[3], NULL, 10);
    n_layer = strtol(argv[4], NULL, 10);
    before_path = strcmp(argv[5], "none") != 0 ? argv[5] : NULL;
    Suite *s = suite_create("results_h5");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_layout_and_runs);
    tcase_add_test(tc, test_rows);
    tcase_add_test(tc, test_links);
    tcase_add_test(tc, test_append_kept_old_rows);
    suite_add_tcase(s, tc);
    int failed = tu_run(s);
    return failed == 0 ? 0 : 1;
}
