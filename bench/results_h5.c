/* results_h5.c: the HDF5 results file (see results_h5.h). */
#include "config.h"

#include "results_h5.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- records as stored ---- */

typedef struct h5_run {
    int64_t run_id;
    bt_run_info_t info;
} h5_run_t;

typedef bt_h5_result_t h5_result_t;

typedef struct h5_sample {
    int64_t row_id;
    int32_t rep;
    double ns, ts;
} h5_sample_t;

typedef struct h5_stage {
    int64_t row_id;
    int32_t rank;
    char host[64];
    double busy_s, wait_s, send_s, recv_s;
    double gather_s; /* of busy_s: gathers between tensor ranks */
} h5_stage_t;

typedef bt_h5_link_t h5_link_t;

/* ---- errors ---- */

static herr_t first_error(unsigned n, const H5E_error2_t *e, void *arg)
{
    if (n == 0)
        snprintf(arg, 256, "%s (%s)", e->desc ? e->desc : "?", e->func_name ? e->func_name : "?");
    return 0;
}

/* Logs what failed with HDF5's own innermost message. */
static bt_status_t h5_error(const char *path, const char *what)
{
    char msg[256] = "no HDF5 error message";
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_error, msg); /* innermost first */
    H5Eclear2(H5E_DEFAULT);
    bt_log_error("hdf5: %s: %s failed: %s", path, what, msg);
    return BT_ERR_IO;
}

#define BT_H5_CHECK(expr, what)                                                 \
    do {                                                                        \
        if ((expr) < 0) {                                                       \
            st = h5_error(path, what);                                          \
            goto done;                                                          \
        }                                                                       \
    } while (0)

/* ---- types ---- */

static hid_t str_type(size_t n)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    return t;
}

/* Inserts rec.field (a char array) under its own name, or under name. */
#define INSERT_STR_AS(t, rec, field, name)                                       \
    do {                                                                         \
        hid_t s_ = str_type(sizeof(((rec *)0)->field));                          \
        H5Tinsert(t, name, HOFFSET(rec, field), s_);                             \
        H5Tclose(s_);                                                            \
    } while (0)
#define INSERT_STR(t, rec, field) INSERT_STR_AS(t, rec, field, #field)
#define INSERT(t, rec, field, type) H5Tinsert(t, #field, HOFFSET(rec, field), type)

static hid_t run_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(h5_run_t));
    INSERT(t, h5_run_t, run_id, H5T_NATIVE_INT64);
    INSERT_STR_AS(t, h5_run_t, info.start_time, "start_time");
    INSERT_STR_AS(t, h5_run_t, info.command_line, "command_line");
    INSERT_STR_AS(t, h5_run_t, info.build_commit, "build_commit");
    INSERT_STR_AS(t, h5_run_t, info.configure_args, "configure_args");
    INSERT_STR_AS(t, h5_run_t, info.mpi_version, "mpi_version");
    INSERT_STR_AS(t, h5_run_t, info.cpu_info, "cpu_info");
    INSERT_STR_AS(t, h5_run_t, info.slurm_job_id, "slurm_job_id");
    INSERT_STR_AS(t, h5_run_t, info.hosts, "hosts");
    H5Tinsert(t, "n_ranks", HOFFSET(h5_run_t, info.n_ranks), H5T_NATIVE_INT32);
    return t;
}

static hid_t result_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(h5_result_t));
    INSERT(t, h5_result_t, row_id, H5T_NATIVE_INT64);
    INSERT(t, h5_result_t, run_id, H5T_NATIVE_INT64);
    INSERT_STR(t, h5_result_t, test_time);
    INSERT_STR(t, h5_result_t, test);
    INSERT_STR(t, h5_result_t, model_filename);
    INSERT_STR(t, h5_result_t, model_type);
    INSERT_STR(t, h5_result_t, backend);
    INSERT(t, h5_result_t, model_size, H5T_NATIVE_UINT64);
    INSERT(t, h5_result_t, model_n_params, H5T_NATIVE_UINT64);
    INSERT(t, h5_result_t, n_batch, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, n_ubatch, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, n_threads, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, n_prompt, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, n_gen, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, n_ranks, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, pipeline, H5T_NATIVE_INT32);
    INSERT_STR(t, h5_result_t, split_mode);
    INSERT(t, h5_result_t, tp, H5T_NATIVE_INT32);
    INSERT_STR(t, h5_result_t, tp_comm);
    INSERT(t, h5_result_t, n_parallel, H5T_NATIVE_INT32);
    INSERT(t, h5_result_t, reps, H5T_NATIVE_INT32);
    INSERT_STR(t, h5_result_t, layer_split);
    INSERT_STR(t, h5_result_t, tensor_split);
    INSERT(t, h5_result_t, avg_ns, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, stddev_ns, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, avg_ts, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, stddev_ts, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, gather_latency_us, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, gather_bandwidth_MBps, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, expert_rows, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_result_t, expert_count, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t sample_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(h5_sample_t));
    INSERT(t, h5_sample_t, row_id, H5T_NATIVE_INT64);
    INSERT(t, h5_sample_t, rep, H5T_NATIVE_INT32);
    INSERT(t, h5_sample_t, ns, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_sample_t, ts, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t stage_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(h5_stage_t));
    INSERT(t, h5_stage_t, row_id, H5T_NATIVE_INT64);
    INSERT(t, h5_stage_t, rank, H5T_NATIVE_INT32);
    INSERT_STR(t, h5_stage_t, host);
    INSERT(t, h5_stage_t, busy_s, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_stage_t, wait_s, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_stage_t, send_s, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_stage_t, recv_s, H5T_NATIVE_DOUBLE);
    INSERT(t, h5_stage_t, gather_s, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t link_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(h5_link_t));
    INSERT(t, h5_link_t, run_id, H5T_NATIVE_INT64);
    H5Tinsert(t, "from_rank", HOFFSET(h5_link_t, link.from_rank), H5T_NATIVE_INT32);
    H5Tinsert(t, "to_rank", HOFFSET(h5_link_t, link.to_rank), H5T_NATIVE_INT32);
    INSERT_STR_AS(t, h5_link_t, link.from_host, "from_host");
    INSERT_STR_AS(t, h5_link_t, link.to_host, "to_host");
    H5Tinsert(t, "latency_us", HOFFSET(h5_link_t, link.latency_us), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "bandwidth_MBps", HOFFSET(h5_link_t, link.bandwidth_MBps), H5T_NATIVE_DOUBLE);
    H5Tinsert(t, "lat_bytes", HOFFSET(h5_link_t, link.lat_bytes), H5T_NATIVE_INT64);
    H5Tinsert(t, "bw_bytes", HOFFSET(h5_link_t, link.bw_bytes), H5T_NATIVE_INT64);
    H5Tinsert(t, "lat_round_trips", HOFFSET(h5_link_t, link.lat_round_trips), H5T_NATIVE_INT32);
    H5Tinsert(t, "bw_round_trips", HOFFSET(h5_link_t, link.bw_round_trips), H5T_NATIVE_INT32);
    return t;
}

static hid_t profile_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(bt_profile_row_t));
    INSERT(t, bt_profile_row_t, run_id, H5T_NATIVE_INT64);
    INSERT_STR(t, bt_profile_row_t, model_filename);
    INSERT_STR(t, bt_profile_row_t, kind);
    INSERT(t, bt_profile_row_t, n_rows, H5T_NATIVE_INT32);
    INSERT(t, bt_profile_row_t, n_ctx, H5T_NATIVE_INT32);
    INSERT(t, bt_profile_row_t, n_threads, H5T_NATIVE_INT32);
    INSERT(t, bt_profile_row_t, n_layer, H5T_NATIVE_INT32);
    INSERT(t, bt_profile_row_t, seconds, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_profile_row_t, act_bytes_row, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_profile_row_t, msg_bytes, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_profile_row_t, weight_bytes, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_profile_row_t, kv_bytes_pos, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_profile_row_t, experts, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t plan_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(bt_plan_row_t));
    INSERT_STR(t, bt_plan_row_t, created);
    INSERT_STR(t, bt_plan_row_t, source);
    INSERT(t, bt_plan_row_t, nodes, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, stages, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, ranks_per_node, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, tp, H5T_NATIVE_INT32);
    INSERT_STR(t, bt_plan_row_t, split);
    INSERT(t, bt_plan_row_t, n_ubatch, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, n_prompt, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, n_gen, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, latency_us, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, bandwidth_MBps, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, pp_gpipe_ts, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, pp_sync_ts, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, pp_speedup, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, pp_efficiency, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, n_parallel, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, n_groups, H5T_NATIVE_INT32);
    INSERT(t, bt_plan_row_t, tg_ts, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, node_gib, H5T_NATIVE_DOUBLE);
    INSERT(t, bt_plan_row_t, expert_spread, H5T_NATIVE_DOUBLE);
    return t;
}

typedef struct dset_spec {
    const char *name;
    hid_t (*type)(void);
    hsize_t chunk;
} dset_spec_t;

static const dset_spec_t dsets[] = {
    {"runs", run_type, 4},
    {"results", result_type, 16},
    {"samples", sample_type, 64},
    {"stage_times", stage_type, 32},
    {"links", link_type, 16},
    {"profile", profile_type, 64},
    {"plan", plan_type, 16},
};
enum { D_RUNS, D_RESULTS, D_SAMPLES, D_STAGES, D_LINKS, D_PROFILE, D_PLAN, D_COUNT };

/* ---- file ---- */

static herr_t set_str_attr(hid_t obj, const char *name, const char *value)
{
    hid_t t = str_type(strlen(value) + 1), sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, t, value);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
    return rc;
}

static bt_status_t create_file(const char *path)
{
    bt_status_t st = BT_OK;
    hid_t f = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0)
        return h5_error(path, "creating the file");
    char now[32];
    time_t t = time(NULL);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    int version = BT_H5_FORMAT_VERSION;
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format_version", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT);
    BT_H5_CHECK(a, "writing attribute format_version");
    BT_H5_CHECK(H5Awrite(a, H5T_NATIVE_INT, &version), "writing attribute format_version");
    H5Aclose(a);
    BT_H5_CHECK(set_str_attr(f, "format", BT_H5_FORMAT), "writing attribute format");
    BT_H5_CHECK(set_str_attr(f, "created", now), "writing attribute created");
    BT_H5_CHECK(set_str_attr(f, "creator", PACKAGE_STRING), "writing attribute creator");
    for (int i = 0; i < D_COUNT; i++) {
        hsize_t zero = 0, unlimited = H5S_UNLIMITED;
        hid_t space = H5Screate_simple(1, &zero, &unlimited);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 1, &dsets[i].chunk);
        hid_t type = dsets[i].type();
        hid_t d = H5Dcreate2(f, dsets[i].name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Tclose(type);
        H5Pclose(dcpl);
        H5Sclose(space);
        BT_H5_CHECK(d, "creating a dataset");
        H5Dclose(d);
    }
done:
    H5Sclose(sp);
    if (H5Fclose(f) < 0 && st == BT_OK)
        st = h5_error(path, "closing the file");
    return st;
}

/* The root's integer attribute format_version; -1 when missing or not an
 * integer. */
static int read_format_version(hid_t f)
{
    int version = -1;
    if (H5Aexists(f, "format_version") <= 0)
        return -1;
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    hid_t t = a >= 0 ? H5Aget_type(a) : -1;
    if (t >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Aread(a, H5T_NATIVE_INT, &version) < 0)
        version = -1;
    if (t >= 0)
        H5Tclose(t);
    if (a >= 0)
        H5Aclose(a);
    return version;
}

/* Refuses a results file of another format version, saying what to do. */
static bt_status_t check_version(hid_t f, const char *path)
{
    int version = read_format_version(f);
    H5Eclear2(H5E_DEFAULT);
    if (version == BT_H5_FORMAT_VERSION)
        return BT_OK;
    if (version < 0)
        bt_log_error("hdf5: %s has no integer attribute 'format_version' (this build writes "
                     "version %d); refusing to write to it: give --hdf5 a new file",
                     path, BT_H5_FORMAT_VERSION);
    else if (version < BT_H5_FORMAT_VERSION)
        bt_log_error("hdf5: %s is format version %d, older than version %d that this build "
                     "writes (%s); refusing to use it: give --hdf5 a new file", path, version,
                     BT_H5_FORMAT_VERSION,
                     version == 7   ? "it lacks tp_comm in /results"
                     : version == 6 ? "it lacks the experts' fields of /results and /profile"
                     : version == 5 ? "its readers would misread the profile rows it would get"
                                    : "it lacks fields such as split_mode, tp or n_parallel");
    else
        bt_log_error("hdf5: %s is format version %d, newer than version %d that this build "
                     "writes; refusing to append to it: give --hdf5 a new file or use a newer "
                     "baton-bench", path, version, BT_H5_FORMAT_VERSION);
    return BT_ERR_ARG;
}

/* Refuses a file whose attribute 'format' is not ours. */
static bt_status_t check_format(hid_t f, const char *path)
{
    char format[64] = "";
    htri_t has = H5Aexists(f, "format");
    if (has > 0) {
        hid_t a = H5Aopen(f, "format", H5P_DEFAULT);
        hid_t t = H5Aget_type(a);
        if (H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) &&
            H5Tget_size(t) < sizeof format) {
            hid_t mt = str_type(H5Tget_size(t) + 1);
            H5Aread(a, mt, format);
            H5Tclose(mt);
        }
        H5Tclose(t);
        H5Aclose(a);
    }
    if (strcmp(format, BT_H5_FORMAT) != 0) {
        bt_log_error("hdf5: %s is not a baton-bench results file (attribute 'format' is %s%s%s); "
                     "refusing to write to it",
                     path, *format ? "'" : "missing", format, *format ? "'" : "");
        H5Eclear2(H5E_DEFAULT);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

/* Refuses a file whose layout is not this version's, naming what differs. */
static bt_status_t check_layout(hid_t f, const char *path)
{
    if (check_format(f, path) != BT_OK || check_version(f, path) != BT_OK)
        return BT_ERR_ARG;
    for (int i = 0; i < D_COUNT; i++) {
        htri_t exists = H5Lexists(f, dsets[i].name, H5P_DEFAULT);
        hid_t d = exists > 0 ? H5Dopen2(f, dsets[i].name, H5P_DEFAULT) : -1;
        hid_t ft = d >= 0 ? H5Dget_type(d) : -1, mt = dsets[i].type();
        bool same = ft >= 0 && H5Tequal(ft, mt) > 0;
        if (ft >= 0)
            H5Tclose(ft);
        H5Tclose(mt);
        if (d >= 0)
            H5Dclose(d);
        if (!same) {
            bt_log_error("hdf5: %s: dataset /%s is %s; this file has another layout "
                         "(format version %d expected); refusing to write to it",
                         path, dsets[i].name, exists > 0 ? "of another type" : "missing",
                         BT_H5_FORMAT_VERSION);
            H5Eclear2(H5E_DEFAULT);
            return BT_ERR_ARG;
        }
    }
    return BT_OK;
}

/* Opens path read-write after checking its layout; the check opens it
 * read-only, so a refused file is not modified at all (opening for writing
 * may already touch the superblock). */
static bt_status_t open_checked(const char *path, hid_t *out)
{
#if H5_VERSION_GE(1, 12, 0)
    htri_t is_h5 = H5Fis_accessible(path, H5P_DEFAULT);
#else
    htri_t is_h5 = H5Fis_hdf5(path);
#endif
    if (is_h5 <= 0) {
        H5Eclear2(H5E_DEFAULT);
        bt_log_error("hdf5: %s exists but is not an HDF5 file; refusing to write to it", path);
        return BT_ERR_ARG;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return h5_error(path, "opening the file for reading");
    bt_status_t st = check_layout(f, path);
    if (H5Fclose(f) < 0 && st == BT_OK)
        st = h5_error(path, "closing the file after reading");
    if (st != BT_OK)
        return st;
    if ((f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT)) < 0)
        return h5_error(path, "opening the file for writing");
    *out = f;
    return BT_OK;
}

/* Appends n records to a 1-D dataset; *first gets the index of the first. */
static bt_status_t append(hid_t f, const char *path, int which, const void *recs, hsize_t n,
                          int64_t *first)
{
    bt_status_t st = BT_OK;
    hid_t d = H5Dopen2(f, dsets[which].name, H5P_DEFAULT), type = dsets[which].type();
    hid_t fs = -1, ms = -1;
    BT_H5_CHECK(d, "opening a dataset");
    fs = H5Dget_space(d);
    hsize_t cur;
    H5Sget_simple_extent_dims(fs, &cur, NULL);
    H5Sclose(fs);
    hsize_t ext = cur + n;
    BT_H5_CHECK(H5Dset_extent(d, &ext), "extending a dataset");
    fs = H5Dget_space(d);
    ms = H5Screate_simple(1, &n, NULL);
    BT_H5_CHECK(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &cur, NULL, &n, NULL),
                "selecting rows");
    BT_H5_CHECK(H5Dwrite(d, type, ms, fs, H5P_DEFAULT, recs), "writing rows");
    if (first != NULL)
        *first = (int64_t)cur;
done:
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    if (d >= 0)
        H5Dclose(d);
    H5Tclose(type);
    return st;
}

static bt_status_t close_file(hid_t f, const char *path, bt_status_t st)
{
    if (H5Fclose(f) < 0 && st == BT_OK)
        st = h5_error(path, "closing the file");
    return st;
}

bt_status_t bt_h5_begin_run(const char *path, const bt_run_info_t *run,
                            const bt_run_link_t *links, int n_links, int64_t *run_id)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* errors are reported by us, once */
    bt_status_t st;
    if (access(path, F_OK) != 0 && (st = create_file(path)) != BT_OK)
        return st;
    hid_t f;
    if ((st = open_checked(path, &f)) != BT_OK)
        return st;
    h5_run_t rec;
    memset(&rec, 0, sizeof rec); /* padding too: every byte of a record reaches the file */
    rec.info = *run;
    hid_t d = H5Dopen2(f, "runs", H5P_DEFAULT), sp = H5Dget_space(d);
    hsize_t n;
    H5Sget_simple_extent_dims(sp, &n, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    rec.run_id = (int64_t)n;
    h5_link_t *lrec = calloc(n_links > 0 ? (size_t)n_links : 1, sizeof *lrec);
    if (lrec == NULL)
        return close_file(f, path, BT_ERR_NOMEM);
    for (int i = 0; i < n_links; i++)
        lrec[i] = (h5_link_t){rec.run_id, links[i]};
    /* the links first: a row in /runs means its links are complete */
    if (n_links == 0 || !(st = append(f, path, D_LINKS, lrec, (hsize_t)n_links, NULL)))
        st = append(f, path, D_RUNS, &rec, 1, NULL);
    free(lrec);
    if (st == BT_OK)
        *run_id = rec.run_id;
    return close_file(f, path, st);
}

bt_status_t bt_h5_append(const char *path, int64_t run_id, const bt_bench_row_t *r,
                         const char *const *rank_hosts)
{
    hid_t f;
    bt_status_t st = open_checked(path, &f);
    if (st != BT_OK)
        return st;
    h5_result_t res = {
        .run_id = run_id,
        .model_size = r->model_size,
        .model_n_params = r->model_n_params,
        .n_batch = r->n_batch,
        .n_ubatch = r->n_ubatch,
        .n_threads = r->n_threads,
        .n_prompt = r->n_prompt,
        .n_gen = r->n_gen,
        .n_ranks = r->n_ranks,
        .pipeline = r->pipeline,
        .n_parallel = r->n_parallel,
        .reps = r->reps,
        .tp = r->tp,
        .gather_latency_us = r->gather_latency_us,
        .gather_bandwidth_MBps = r->gather_bandwidth_MBps,
        .expert_rows = r->expert_rows,
        .expert_count = r->expert_count,
        .avg_ns = r->avg_ns,
        .stddev_ns = r->stddev_ns,
        .avg_ts = r->avg_ts,
        .stddev_ts = r->stddev_ts,
    };
#define COPY(field) snprintf(res.field, sizeof res.field, "%s", r->field)
    COPY(test_time);
    COPY(test);
    COPY(model_filename);
    COPY(model_type);
    COPY(backend);
    COPY(split_mode);
    COPY(tp_comm);
    COPY(layer_split);
    COPY(tensor_split);
#undef COPY
    hid_t d = H5Dopen2(f, "results", H5P_DEFAULT), sp = H5Dget_space(d);
    hsize_t n;
    H5Sget_simple_extent_dims(sp, &n, NULL);
    H5Sclose(sp);
    H5Dclose(d);
    res.row_id = (int64_t)n;

    /* Zeroed and filled field by field: the records' padding bytes are
     * written to the file too, and must not be uninitialised memory. */
    h5_sample_t *samples = calloc((size_t)r->reps, sizeof *samples);
    h5_stage_t *stages = calloc((size_t)r->n_ranks, sizeof *stages);
    if (samples == NULL || stages == NULL) {
        free(samples);
        free(stages);
        return close_file(f, path, BT_ERR_NOMEM);
    }
    for (int i = 0; i < r->reps; i++) {
        samples[i].row_id = res.row_id;
        samples[i].rep = i;
        samples[i].ns = r->samples_ns[i];
        samples[i].ts = r->samples_ts[i];
    }
    for (int i = 0; i < r->n_ranks; i++) {
        const bt_stage_time_t *s = &r->stages[i];
        stages[i].row_id = res.row_id;
        stages[i].rank = i;
        snprintf(stages[i].host, sizeof stages[i].host, "%s", rank_hosts[i]);
        stages[i].busy_s = s->busy;
        stages[i].wait_s = s->wait;
        stages[i].send_s = s->send;
        stages[i].recv_s = s->recv;
        stages[i].gather_s = s->gather;
    }
    /* samples and stage times first: a row in /results means its details
     * are complete */
    if (!(st = append(f, path, D_SAMPLES, samples, (hsize_t)r->reps, NULL)) &&
        !(st = append(f, path, D_STAGES, stages, (hsize_t)r->n_ranks, NULL)))
        st = append(f, path, D_RESULTS, &res, 1, NULL);
    free(samples);
    free(stages);
    return close_file(f, path, st);
}

bt_status_t bt_h5_append_profile(const char *path, const bt_profile_row_t *rows, int n)
{
    hid_t f;
    bt_status_t st = open_checked(path, &f);
    if (st != BT_OK)
        return st;
    bt_profile_row_t *rec = calloc(n > 0 ? (size_t)n : 1, sizeof *rec);
    if (rec == NULL)
        return close_file(f, path, BT_ERR_NOMEM);
    for (int i = 0; i < n; i++) { /* zeroed padding: every byte of a record reaches the file */
        memset(&rec[i], 0, sizeof rec[i]);
        rec[i].run_id = rows[i].run_id;
        snprintf(rec[i].model_filename, sizeof rec[i].model_filename, "%s",
                 rows[i].model_filename);
        snprintf(rec[i].kind, sizeof rec[i].kind, "%s", rows[i].kind);
        rec[i].n_rows = rows[i].n_rows;
        rec[i].n_ctx = rows[i].n_ctx;
        rec[i].n_threads = rows[i].n_threads;
        rec[i].n_layer = rows[i].n_layer;
        rec[i].seconds = rows[i].seconds;
        rec[i].act_bytes_row = rows[i].act_bytes_row;
        rec[i].msg_bytes = rows[i].msg_bytes;
        rec[i].weight_bytes = rows[i].weight_bytes;
        rec[i].kv_bytes_pos = rows[i].kv_bytes_pos;
        rec[i].experts = rows[i].experts;
    }
    st = append(f, path, D_PROFILE, rec, (hsize_t)n, NULL);
    free(rec);
    return close_file(f, path, st);
}

/* Whether a file of this version lacks field name: the fields versions 5,
 * 7 and 8 added (an older dataset lacks them and only them). */
static bool added_after(const char *name, int version)
{
    static const struct {
        const char *name;
        int since;
    } added[] = {{"split_mode", 5},    {"tp", 5},           {"gather_s", 5},
                 {"expert_rows", 7},   {"expert_count", 7}, {"experts", 7},
                 {"expert_spread", 7}, {"tp_comm", 8}};
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++)
        if (!strcmp(name, added[i].name))
            return version < added[i].since;
    return false;
}

/* An older version's dataset /name of file type ft against this build's
 * type mt: the same members by name, but for those added since. HDF5 reads
 * by name, leaving a member the file lacks as it was in the buffer. */
static bt_status_t check_older_type(hid_t ft, hid_t mt, const char *path, const char *name,
                                    int version)
{
    bool ok = H5Tget_class(ft) == H5T_COMPOUND;
    const int n_mt = ok ? H5Tget_nmembers(mt) : 0, n_ft = ok ? H5Tget_nmembers(ft) : 0;
    for (int i = 0; ok && i < n_mt; i++) {
        char *m = H5Tget_member_name(mt, (unsigned)i);
        ok = H5Tget_member_index(ft, m) >= 0 || added_after(m, version);
        H5free_memory(m);
    }
    for (int i = 0; ok && i < n_ft; i++) {
        char *m = H5Tget_member_name(ft, (unsigned)i);
        ok = H5Tget_member_index(mt, m) >= 0;
        H5free_memory(m);
    }
    H5Eclear2(H5E_DEFAULT);
    if (!ok) {
        bt_log_error("hdf5: %s: dataset /%s is not of format version %d's layout; refusing to "
                     "read it", path, name, version);
        return BT_ERR_ARG;
    }
    return BT_OK;
}

/* Every row of dataset which into *rows (records of size rec, each set
 * to *init first: the defaults of the fields an older version lacks). */
static bt_status_t read_rows(const char *path, int which, size_t rec, const void *init,
                             void **rows, int *n)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    *rows = NULL;
    *n = 0;
    if (access(path, R_OK) != 0) {
        bt_log_error("hdf5: cannot read %s", path);
        return BT_ERR_IO;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        return h5_error(path, "opening the file for reading");
    hid_t d = -1, type = -1, sp = -1;
    bt_status_t st = check_format(f, path);
    const int version = st == BT_OK ? read_format_version(f) : -1;
    H5Eclear2(H5E_DEFAULT);
    if (st != BT_OK)
        goto done;
    if (version == BT_H5_FORMAT_VERSION || version < 0) { /* < 0: check_version says why */
        if ((st = check_layout(f, path)) != BT_OK)
            goto done;
    } else if (version < BT_H5_READ_VERSION_MIN || version > BT_H5_FORMAT_VERSION) {
        bt_log_error("hdf5: %s is format version %d; this build reads versions %d to %d", path,
                     version, BT_H5_READ_VERSION_MIN, BT_H5_FORMAT_VERSION);
        st = BT_ERR_ARG;
        goto done;
    }
    d = H5Dopen2(f, dsets[which].name, H5P_DEFAULT);
    type = dsets[which].type();
    BT_H5_CHECK(d, "opening a dataset");
    if (version < BT_H5_FORMAT_VERSION) {
        hid_t ft = H5Dget_type(d);
        BT_H5_CHECK(ft, "reading a dataset's type");
        st = check_older_type(ft, type, path, dsets[which].name, version);
        H5Tclose(ft);
        if (st != BT_OK)
            goto done;
    }
    sp = H5Dget_space(d);
    hsize_t count;
    H5Sget_simple_extent_dims(sp, &count, NULL);
    *rows = calloc(count > 0 ? (size_t)count : 1, rec);
    if (*rows == NULL) {
        st = BT_ERR_NOMEM;
        goto done;
    }
    for (hsize_t i = 0; init != NULL && i < count; i++)
        memcpy((char *)*rows + i * rec, init, rec);
    if (count > 0)
        BT_H5_CHECK(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *rows), "reading rows");
    *n = (int)count;
done:
    if (sp >= 0)
        H5Sclose(sp);
    if (type >= 0)
        H5Tclose(type);
    if (d >= 0)
        H5Dclose(d);
    if (st != BT_OK) {
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return close_file(f, path, st);
}

bt_status_t bt_h5_read_profile(const char *path, bt_profile_row_t **rows, int *n)
{
    return read_rows(path, D_PROFILE, sizeof **rows, NULL, (void **)rows, n);
}

bt_status_t bt_h5_read_results(const char *path, bt_h5_result_t **rows, int *n)
{
    /* what the versions that lack them ran: version 4 one rank a stage,
     * versions 4 to 7 gathers */
    static const bt_h5_result_t older = {.split_mode = "layer", .tp = 1, .tp_comm = "gather"};
    return read_rows(path, D_RESULTS, sizeof **rows, &older, (void **)rows, n);
}

bt_status_t bt_h5_read_links(const char *path, bt_h5_link_t **rows, int *n)
{
    return read_rows(path, D_LINKS, sizeof **rows, NULL, (void **)rows, n);
}

bt_status_t bt_h5_append_plan(const char *path, const bt_plan_row_t *rows, int n)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    bt_status_t st;
    if (access(path, F_OK) != 0 && (st = create_file(path)) != BT_OK)
        return st;
    hid_t f;
    if ((st = open_checked(path, &f)) != BT_OK)
        return st;
    /* the rows are the records: bt_plan_row_t is the dataset's type */
    return close_file(f, path, append(f, path, D_PLAN, rows, (hsize_t)n, NULL));
}
