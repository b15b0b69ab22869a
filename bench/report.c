/* report.c: md, csv, json and jsonl output of benchmark rows. */
#include "report.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

void bt_mean_stddev(const double *v, int n, double *mean, double *stddev)
{
    double sum = 0.0, sq = 0.0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    double m = n > 0 ? sum / n : 0.0;
    for (int i = 0; i < n; i++)
        sq += (v[i] - m) * (v[i] - m);
    *mean = m;
    *stddev = n > 1 ? sqrt(sq / (n - 1)) : 0.0;
}

void bt_bench_row_finish(bt_bench_row_t *r)
{
    bt_mean_stddev(r->samples_ns, r->reps, &r->avg_ns, &r->stddev_ns);
    bt_mean_stddev(r->samples_ts, r->reps, &r->avg_ts, &r->stddev_ts);
}

/* ---- markdown ---- */

static void md_size(char *buf, size_t n, uint64_t bytes)
{
    if (bytes < 1024ull * 1024 * 1024)
        snprintf(buf, n, "%.2f MiB", (double)bytes / (1024.0 * 1024.0));
    else
        snprintf(buf, n, "%.2f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

static void md_params(char *buf, size_t n, uint64_t params)
{
    if (params < 1000000000ull)
        snprintf(buf, n, "%.2f M", (double)params / 1e6);
    else
        snprintf(buf, n, "%.2f B", (double)params / 1e9);
}

static void md_begin(FILE *f)
{
    fprintf(f, "| model | size | params | backend | threads | ranks | split | pipeline | sm | "
               "tp | tp comm | ub | parallel | test | t/s |\n");
    fprintf(f, "| --- | ---: | ---: | --- | ---: | ---: | --- | ---: | --- | ---: | --- | ---: "
               "| ---: | ---: | ---: |\n");
}

static void md_row(FILE *f, const bt_bench_row_t *r)
{
    char size[32], params[32];
    md_size(size, sizeof size, r->model_size);
    md_params(params, sizeof params, r->model_n_params);
    fprintf(f, "| %s | %s | %s | %s | %d | %d | %s | %d | %s | %d | %s | %d | %d | %s | "
               "%.2f ± %.2f |\n",
            r->model_type, size, params, r->backend, r->n_threads, r->n_ranks, r->layer_split,
            r->pipeline, r->split_mode, r->tp, r->tp_comm, r->n_ubatch, r->n_parallel, r->test,
            r->avg_ts, r->stddev_ts);
}

/* ---- csv / json ---- */

/* Writes s as a JSON string (quotes included). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void csv_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

static void num_array(FILE *f, const double *v, int n, bool integer)
{
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, integer ? "%s%.0f" : "%s%.6f", i ? ", " : "", v[i]);
    fputc(']', f);
}

/* The fields, in order, as (name, kind, pointer) so csv and json share one list. */
typedef enum { F_STR, F_INT, F_U64, F_NS, F_DBL, F_NS_ARR, F_TS_ARR } field_kind_t;

typedef struct field {
    const char *name;
    field_kind_t kind;
    size_t offset;
} field_t;

#define FIELD(name, kind) {#name, kind, offsetof(bt_bench_row_t, name)}
static const field_t fields[] = {
    FIELD(build_commit, F_STR),    FIELD(cpu_info, F_STR),       FIELD(backend, F_STR),
    FIELD(model_filename, F_STR),  FIELD(model_type, F_STR),     FIELD(model_size, F_U64),
    FIELD(model_n_params, F_U64),  FIELD(n_batch, F_INT),        FIELD(n_ubatch, F_INT),
    FIELD(n_threads, F_INT),       FIELD(n_prompt, F_INT),       FIELD(n_gen, F_INT),
    FIELD(test, F_STR),            FIELD(test_time, F_STR),      FIELD(avg_ns, F_NS),
    FIELD(stddev_ns, F_NS),        FIELD(avg_ts, F_DBL),         FIELD(stddev_ts, F_DBL),
    FIELD(samples_ns, F_NS_ARR),   FIELD(samples_ts, F_TS_ARR),  FIELD(n_ranks, F_INT),
    FIELD(pipeline, F_INT),        FIELD(split_mode, F_STR),     FIELD(tp, F_INT),
    FIELD(tp_comm, F_STR),         FIELD(n_parallel, F_INT),     FIELD(layer_split, F_STR),
    FIELD(tensor_split, F_STR),    FIELD(hosts, F_STR),          FIELD(expert_rows, F_DBL),
    FIELD(expert_count, F_DBL),
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

static void field_value(FILE *f, const bt_bench_row_t *r, const field_t *fd, bool csv)
{
    const char *base = (const char *)r + fd->offset;
    switch (fd->kind) {
    case F_STR:
        (csv ? csv_str : json_str)(f, base);
        break;
    case F_INT: fprintf(f, "%d", *(const int *)base); break;
    case F_U64: fprintf(f, "%llu", (unsigned long long)*(const uint64_t *)base); break;
    case F_NS: fprintf(f, "%.0f", *(const double *)base); break;
    case F_DBL: fprintf(f, "%.6f", *(const double *)base); break;
    case F_NS_ARR:
    case F_TS_ARR: {
        const double *v = *(double *const *)base;
        if (csv)
            fputc('"', f);
        num_array(f, v, r->reps, fd->kind == F_NS_ARR);
        if (csv)
            fputc('"', f);
        break;
    }
    }
}

static void json_object(FILE *f, const bt_bench_row_t *r, const char *indent, const char *nl)
{
    fprintf(f, "{%s", nl);
    for (size_t i = 0; i < N_FIELDS; i++) {
        fprintf(f, "%s\"%s\": ", indent, fields[i].name);
        field_value(f, r, &fields[i], false);
        fprintf(f, "%s%s", i + 1 < N_FIELDS ? "," : "", i + 1 < N_FIELDS ? (*nl ? nl : " ") : nl);
    }
    fputc('}', f);
}

void bt_report_begin(FILE *f, const char *format)
{
    if (!strcmp(format, "md")) {
        md_begin(f);
    } else if (!strcmp(format, "csv")) {
        for (size_t i = 0; i < N_FIELDS; i++)
            fprintf(f, "%s%s", i ? "," : "", fields[i].name);
        fputc('\n', f);
    } else if (!strcmp(format, "json")) {
        fputs("[\n", f);
    }
    fflush(f);
}

void bt_report_row(FILE *f, const char *format, const bt_bench_row_t *r, int index)
{
    if (!strcmp(format, "md")) {
        md_row(f, r);
    } else if (!strcmp(format, "csv")) {
        for (size_t i = 0; i < N_FIELDS; i++) {
            if (i)
                fputc(',', f);
            field_value(f, r, &fields[i], true);
        }
        fputc('\n', f);
    } else if (!strcmp(format, "json")) {
        fputs(index ? ",\n  " : "  ", f);
        json_object(f, r, "    ", "\n");
    } else {
        json_object(f, r, "", "");
        fputc('\n', f);
    }
    fflush(f);
}

void bt_report_end(FILE *f, const char *format)
{
    if (!strcmp(format, "json"))
        fputs("\n]\n", f);
    fflush(f);
}
