/* runopts.c: the flags every model-running program shares (runopts.h). */
#include "runopts.h"

#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "kv_cache.h"
#include "model.h"

void bt_run_opts_init(bt_run_opts_t *o, int default_threads, int ubatch)
{
    *o = (bt_run_opts_t){.ops = &bt_ops_cpu, .ubatch = ubatch, .pipeline = 1,
                         .threads = default_threads, .sampling = bt_sampler_defaults(),
                         .mmap = 1};
}

bt_status_t bt_parse_kernels(const char *flag, const char *arg, const bt_ops_t **ops)
{
    const bt_ops_t *t = bt_ops_by_name(arg);
    if (t != NULL) {
        *ops = t;
        return BT_OK;
    }
    if (strcmp(arg, "cuda") == 0)
        bt_log_error("%s cuda: this build has no CUDA kernels (configure --with-cuda)", flag);
    else
        bt_log_error("%s: '%s' is not one of cpu, exact, ref, cuda-host, auto%s", flag, arg,
                     bt_device_default != NULL ? ", cuda" : "");
    return BT_ERR_ARG;
}

void bt_run_opts_free(bt_run_opts_t *o)
{
    free(o->ratios);
    o->ratios = NULL;
}

void bt_run_normalize_argv(int argc, char **argv, const char *const (*extra)[2], int n_extra)
{
    static const char *const map[][2] = {
        {"-ub", "--ubatch-size"}, {"-ts", "--tensor-split"}, {"-sm", "--split-mode"},
        {"-tp", "--tensor-parallel"},
    };
    for (int i = 1; i < argc; i++) {
        for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
            if (strcmp(argv[i], map[k][0]) == 0)
                argv[i] = (char *)map[k][1];
        for (int k = 0; k < n_extra; k++)
            if (strcmp(argv[i], extra[k][0]) == 0)
                argv[i] = (char *)extra[k][1];
    }
}

bt_status_t bt_run_opt(int c, const char *arg, bt_run_opts_t *o, bool *handled)
{
    bt_sampler_params_t *sp = &o->sampling;
    bt_status_t st = BT_OK;
    *handled = true;
    switch (c) {
    case 'm': o->model = arg; break;
    case 'c': st = bt_parse_int("--ctx-size", arg, 1, 1 << 24, &o->n_ctx); break;
    case 't': st = bt_parse_int("--threads", arg, 1, 1024, &o->threads); break;
    case 's': st = bt_parse_u64("--seed", arg, &sp->seed), o->seed_given = 1; break;
    case 'v': o->verbose = 1; break;
    case BT_RUN_OPT_UB:
        st = bt_parse_int("-ub", arg, 1, 1 << 20, &o->ubatch);
        o->ubatch_given = 1;
        break;
    case BT_RUN_OPT_PIPELINE:
        st = bt_parse_int("--pipeline", arg, 0, 1, &o->pipeline);
        o->pipeline_given = 1;
        break;
    case BT_RUN_OPT_SM: st = bt_parse_split_mode("-sm", arg, &o->split_tensor); break;
    case BT_RUN_OPT_TP: st = bt_parse_int("-tp", arg, 1, BT_TP_MAX, &o->tp); break;
    case BT_RUN_OPT_TP_COMM: st = bt_parse_tp_comm("--tp-comm", arg, &o->tp_allreduce); break;
    case BT_RUN_OPT_TS:
        bt_run_opts_free(o);
        st = bt_parse_ratios("-ts", arg, &o->ratios, &o->n_ratios);
        break;
    case BT_RUN_OPT_REF: o->ops = &bt_ops_ref; break;
    case BT_RUN_OPT_KERNELS: st = bt_parse_kernels("--kernels", arg, &o->ops); break;
    case BT_RUN_OPT_GPU:
        st = bt_parse_int("--gpu", arg, 0, 1023, &o->gpu);
        o->gpu_given = 1;
        break;
    case BT_RUN_OPT_MMAP: st = bt_parse_int("--mmap", arg, 0, 1, &o->mmap); break;
    case BT_RUN_OPT_NO_MMAP: o->mmap = 0; break;
    case BT_RUN_OPT_KV_TYPE:
        o->kv_type = bt_kv_type_parse(arg);
        if (o->kv_type < 0) {
            bt_log_error("--kv-type: '%s' is not one of f32, f16", arg);
            st = BT_ERR_ARG;
        }
        break;
    case BT_RUN_OPT_TEMP: st = bt_parse_float("--temp", arg, &sp->temp), o->temp_given = 1; break;
    case BT_RUN_OPT_TOPK: st = bt_parse_int("--top-k", arg, 0, 1 << 24, &sp->top_k); break;
    case BT_RUN_OPT_TOPP: st = bt_parse_float("--top-p", arg, &sp->top_p); break;
    case BT_RUN_OPT_MINP: st = bt_parse_float("--min-p", arg, &sp->min_p); break;
    case BT_RUN_OPT_PENALTY: st = bt_parse_float("--repeat-penalty", arg, &sp->repeat_penalty); break;
    case BT_RUN_OPT_LASTN:
        st = bt_parse_int("--repeat-last-n", arg, 0, 1 << 20, &sp->repeat_last_n);
        break;
    default: *handled = false; break;
    }
    return st;
}

bt_status_t bt_run_opts_check(bt_run_opts_t *o, int n_ranks)
{
    if (bt_layout_tp(o->split_tensor, o->tp, o->pipeline, o->pipeline_given, n_ranks, &o->tp) !=
        BT_OK)
        return BT_ERR_ARG;
    if (o->split_tensor)
        o->pipeline = 0; /* one stage */
    return BT_OK;
}

bt_status_t bt_run_check_sampling(const bt_sampler_params_t *sp)
{
    const char *bad = !(sp->temp >= 0.0f)                       ? "--temp must be >= 0"
                      : !(sp->top_p > 0.0f && sp->top_p <= 1.0f) ? "--top-p must be in (0, 1]"
                      : !(sp->min_p >= 0.0f && sp->min_p <= 1.0f) ? "--min-p must be in [0, 1]"
                      : !(sp->repeat_penalty > 0.0f)            ? "--repeat-penalty must be > 0"
                                                                : NULL;
    if (bad != NULL) {
        bt_log_error("%s (temp %g, top-p %g, min-p %g, repeat penalty %g)", bad, sp->temp,
                     sp->top_p, sp->min_p, sp->repeat_penalty);
        return BT_ERR_ARG;
    }
    return BT_OK;
}
