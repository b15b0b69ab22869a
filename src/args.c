/* args.c: strict number parsing for the command lines. */
#include "args.h"

#include <getopt.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bt_status_t parse_long(const char *flag, const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0') {
        bt_log_error("%s: '%s' is not an integer", flag, s);
        return BT_ERR_ARG;
    }
    if (errno == ERANGE || v < min || v > max) {
        bt_log_error("%s: %s is out of range (%ld..%ld)", flag, s, min, max);
        return BT_ERR_ARG;
    }
    *out = v;
    return BT_OK;
}

bt_status_t bt_parse_int(const char *flag, const char *s, long min, long max, int *out)
{
    long v;
    bt_status_t st = parse_long(flag, s, min, max, &v);
    if (st == BT_OK)
        *out = (int)v;
    return st;
}

bt_status_t bt_parse_u64(const char *flag, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == '\0') {
        bt_log_error("%s: '%s' is not a non-negative integer", flag, s);
        return BT_ERR_ARG;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE) {
        bt_log_error("%s: '%s' is not a 64-bit non-negative integer", flag, s);
        return BT_ERR_ARG;
    }
    *out = v;
    return BT_OK;
}

bt_status_t bt_parse_int_list(const char *flag, const char *s, long min, long max, int **out,
                              int *n)
{
    int count = 1;
    for (const char *p = s; *p; p++)
        count += *p == ',';
    int *v = malloc((size_t)count * sizeof *v);
    if (v == NULL)
        return BT_ERR_NOMEM;
    const char *p = s;
    for (int i = 0; i < count; i++) {
        char item[32];
        size_t len = 0;
        while (p[len] != ',' && p[len] != '\0')
            len++;
        if (len == 0 || len >= sizeof item) {
            bt_log_error("%s: '%s': item %d is %s", flag, s, i + 1, len ? "too long" : "empty");
            free(v);
            return BT_ERR_ARG;
        }
        for (size_t j = 0; j < len; j++)
            item[j] = p[j];
        item[len] = '\0';
        if (bt_parse_int(flag, item, min, max, &v[i]) != BT_OK) {
            free(v);
            return BT_ERR_ARG;
        }
        p += len + (p[len] == ',');
    }
    *out = v;
    *n = count;
    return BT_OK;
}

bt_status_t bt_parse_ratios(const char *flag, const char *s, double **ratios, int *n)
{
    int count = 1;
    for (const char *p = s; *p; p++)
        count += *p == ',' || *p == '/';
    double *r = malloc((size_t)count * sizeof *r);
    if (r == NULL)
        return BT_ERR_NOMEM;
    const char *p = s;
    for (int i = 0; i < count; i++) {
        char *end;
        r[i] = strtod(p, &end);
        if (end == p || (*end != ',' && *end != '/' && *end != '\0')) {
            bt_log_error("%s: '%s': item %d is not a number", flag, s, i + 1);
            free(r);
            return BT_ERR_ARG;
        }
        p = *end ? end + 1 : end;
    }
    *ratios = r;
    *n = count;
    return BT_OK;
}

bt_status_t bt_parse_split_mode(const char *flag, const char *s, int *out)
{
    if (strcmp(s, "layer") == 0 || strcmp(s, "tensor") == 0) {
        *out = s[0] == 't';
        return BT_OK;
    }
    bt_log_error("%s: '%s' is not one of layer, tensor", flag, s);
    return BT_ERR_ARG;
}

bt_status_t bt_parse_tp_comm(const char *flag, const char *s, int *out)
{
    if (strcmp(s, "gather") == 0 || strcmp(s, "allreduce") == 0) {
        *out = s[0] == 'a';
        return BT_OK;
    }
    bt_log_error("%s: '%s' is not one of gather, allreduce", flag, s);
    return BT_ERR_ARG;
}

const char *bt_tp_comm_name(int allreduce) { return allreduce ? "allreduce" : "gather"; }

bt_status_t bt_layout_tp(int split_tensor, int tp, int pipeline, int pipeline_given, int n_ranks,
                         int *out)
{
    if (split_tensor && tp > 0 && tp != n_ranks) {
        bt_log_error("-sm tensor makes all %d ranks one stage of %d tensor ranks, but -tp is %d "
                     "(-sm layer -tp %d runs %d stages of %d)", n_ranks, n_ranks, tp, tp,
                     tp > 0 && n_ranks % tp == 0 ? n_ranks / tp : 0, tp);
        return BT_ERR_ARG;
    }
    if (split_tensor && pipeline && pipeline_given) {
        bt_log_error("-sm tensor with --pipeline 1: the %d ranks form one stage, which has no "
                     "pipeline to fill (use -sm layer -tp T for stages of T tensor ranks)",
                     n_ranks);
        return BT_ERR_ARG;
    }
    const int t = split_tensor ? n_ranks : tp > 0 ? tp : 1;
    if (n_ranks % t != 0) {
        bt_log_error("-tp %d does not divide the %d ranks into stages (np = stages x -tp)", t,
                     n_ranks);
        return BT_ERR_ARG;
    }
    *out = t;
    return BT_OK;
}

bt_status_t bt_parse_float(const char *flag, const char *s, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (*s == '\0' || *end != '\0') {
        bt_log_error("%s: '%s' is not a number", flag, s);
        return BT_ERR_ARG;
    }
    *out = v;
    return BT_OK;
}

bt_status_t bt_getopt_error(int c, char **argv)
{
    if (c == ':')
        bt_log_error("option '%s' needs a value", argv[optind - 1]);
    else
        bt_log_error("unknown option '%s'", argv[optind - 1]);
    return BT_ERR_ARG;
}
