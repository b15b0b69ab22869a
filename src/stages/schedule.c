/* schedule.c: pipeline setup, GPipe and synchronous prefill, the decode ring. */
#include "stages/schedule.h"

#include <inttypes.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "sampler.h"
#include "stages/partition.h"

/* ---- setup ---- */

/* Rank 0 compares every rank's (file size, header hash) with its own and
 * reports the ranks that opened a different model. */
static bt_status_t check_same_model(bt_pipe_t *p)
{
    uint64_t mine[2] = {p->file_size, p->header_hash};
    uint64_t *all = p->world_rank == 0 ? malloc(sizeof mine * (size_t)p->world_size) : NULL;
    MPI_Gather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, 0, p->world);
    bt_status_t st = BT_OK;
    if (p->world_rank == 0) {
        char list[512] = "";
        size_t used = 0;
        for (int r = 1; r < p->world_size; r++)
            if ((all[2 * r] != mine[0] || all[2 * r + 1] != mine[1]) && used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used,
                                         "%srank %d (%" PRIu64 " bytes, hash %016" PRIx64 ")",
                                         used ? ", " : "", r, all[2 * r], all[2 * r + 1]);
        if (used > 0) {
            bt_log_error("ranks opened different model files: rank 0 has %" PRIu64
                         " bytes, hash %016" PRIx64 "; differing: %s",
                         mine[0], mine[1], list);
            st = BT_ERR_ARG;
        }
        free(all);
    }
    return st;
}

static void progress_cb(void *arg) { bt_transport_progress(arg); }

/* Per-token cost model: the matmul weights a token goes through in a
 * layer (bt_layer_weights_per_token; layer_cost [n_layer] gets each
 * layer's where they differ); the head's weights scaled by the share of
 * tokens that need logits; the embedding is a row lookup. */
static bt_stage_costs_t stage_costs(const bt_hparams_t *hp, double head_share,
                                    double *layer_cost)
{
    const double e = hp->n_embd;
    bool alike = true;
    for (int l = 0; l < hp->n_layer; l++) {
        layer_cost[l] = bt_layer_weights_per_token(hp, l);
        alike = alike && layer_cost[l] == layer_cost[0];
    }
    return (bt_stage_costs_t){
        .layer = layer_cost[hp->n_layer - 1],
        .layer_cost = alike ? NULL : layer_cost,
        .embed = e,
        .head = head_share * e * hp->n_vocab,
    };
}

/* Where this rank runs: the rank that leads its node (the lowest there),
 * the memory available on the node (measured once, by the leader) and
 * the host name. */
typedef struct node_info {
    int leader;
    uint64_t avail;
    char name[64];
} node_info_t;

static node_info_t this_node(MPI_Comm comm)
{
    node_info_t me = {0};
    MPI_Comm_rank(comm, &me.leader);
    MPI_Comm node;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        int node_rank;
        MPI_Comm_rank(node, &node_rank);
        me.avail = node_rank == 0 ? bt_mem_available() : 0;
        MPI_Bcast(&me.leader, 1, MPI_INT, 0, node);
        MPI_Bcast(&me.avail, 1, MPI_UINT64_T, 0, node);
        MPI_Comm_free(&node);
    } else {
        me.avail = bt_mem_available();
    }
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    MPI_Get_processor_name(name, &len);
    snprintf(me.name, sizeof me.name, "%.*s", len, name);
    return me;
}

/* The trace's capacity: cfg's, which counts 8 events a micro-batch, and on
 * tensor ranks the gathers' 4 a layer on top (at most INT_MAX). */
static int trace_capacity(const bt_pipe_t *p, const bt_pipe_config_t *cfg)
{
    if (cfg->trace_events <= 0 || p->tp_size == 1)
        return cfg->trace_events > 0 ? cfg->trace_events : 0;
    const int64_t n = (int64_t)cfg->trace_events * (8 + 4 * (int64_t)p->model->hp.n_layer) / 8;
    return n > INT_MAX ? INT_MAX : (int)n;
}

/* Rank 0: the memory model of bt_pipe_init's run (partition.h): per layer
 * its weights as they will be held and its KV cache; the first stage's
 * embedding table; the last stage's head and logits; on every rank the
 * buffers, the transport's message slots and the trace. layer_bytes has
 * n_layer entries. */
static bt_stage_costs_t stage_memory(const bt_pipe_t *p, const bt_pipe_config_t *cfg, int n_ctx,
                                     int per_node, uint64_t *layer_bytes, double *layer_cost,
                                     char *what, size_t what_size)
{
    const bt_hparams_t *hp = &p->model->hp;
    bt_stage_costs_t c = stage_costs(hp, cfg->head_share, layer_cost);
    uint64_t every;
    bt_model_memory_share(p->model, p->tp_size, cfg->tp_allreduce, p->ops == &bt_ops_cpu,
                          cfg->no_mmap, layer_bytes, &c.embed_bytes, &c.head_bytes, &every);
    bt_share_t sh; /* bt_pipe_init checked that it splits the model */
    bt_share_init(hp, 0, p->tp_size, cfg->tp_allreduce, &sh);
    int kv_heads = 0; /* the largest share of the cache */
    for (int r = 0, kv0, kv1; r < p->tp_size; r++) {
        bt_share_kv(&sh, hp, r, &kv0, &kv1);
        kv_heads = kv1 - kv0 > kv_heads ? kv1 - kv0 : kv_heads;
    }
    const uint64_t kv = bt_kv_cache_bytes(1, p->n_slots, n_ctx, kv_heads * hp->head_dim,
                                          cfg->kv_type);
    for (int l = 0; l < hp->n_layer; l++) /* a stage's ranks on one node hold per_node shares */
        layer_bytes[l] = (layer_bytes[l] + kv) * (uint64_t)per_node;
    c.head_bytes *= (uint64_t)per_node;
    c.layer_bytes = layer_bytes;
    c.head_bytes += (uint64_t)p->logit_rows * (uint64_t)hp->n_vocab * sizeof(float);
    const uint64_t msg = bt_act_bytes(cfg->max_tok, hp->n_embd);
    /* the gathers' buffers, and the logits of a last stage's vocabulary share */
    c.rank_bytes = (every +
                    bt_tensor_bytes(hp, p->tp_size, cfg->tp_allreduce, cfg->max_tok,
                                    p->logit_rows, bt_share_largest(sh.vocab, sh.size)) +
                    bt_forward_buffer_bytes(hp, n_ctx, p->n_slots, cfg->max_tok, cfg->n_threads) +
                    BT_TRANSPORT_SLOTS * ((msg + 63) / 64 * 64) +
                    (uint64_t)trace_capacity(p, cfg) * sizeof(bt_event_t)) *
                   (uint64_t)per_node;
    char ctx[64];
    if (p->n_slots > 1)
        snprintf(ctx, sizeof ctx, "%d slots x %d positions", p->n_slots, n_ctx);
    else
        snprintf(ctx, sizeof ctx, "%d positions", n_ctx);
    char who[64] = "";
    if (per_node > 1)
        snprintf(who, sizeof who, "%d tensor ranks' shares of ", per_node);
    snprintf(what, what_size, "%sthe weights%s, the KV cache (%s) and buffers (micro-batch %d, "
             "%d threads)", who, cfg->no_mmap ? " (read in)" : "", ctx, cfg->max_tok,
             cfg->n_threads);
    c.what = what;
    return c;
}

/* -v: each stage's layers, compute and memory; each node's need and what
 * it has (the figures a test sizes a context by). */
static void log_split(const bt_pipe_t *p, const bt_stage_costs_t *c, const bt_nodes_t *nd)
{
    double total = 0.0;
    for (int s = 0; s < p->n_stages; s++)
        total += bt_stage_compute(c, p->bounds, p->n_stages, s);
    for (int s = 0; s < p->n_stages; s++) {
        const double comp = bt_stage_compute(c, p->bounds, p->n_stages, s);
        bt_log_debug("stage %d (rank %d, node '%s'): layers %d-%d, %.1f M multiply-adds a token "
                     "(%.1f%%), %.1f MiB", s, s * p->tp_size, nd->name[nd->node[s]], p->bounds[s],
                     p->bounds[s + 1] - 1, comp / 1e6, 100.0 * comp / total,
                     (double)bt_stage_bytes(c, p->bounds, p->n_stages, s) / 1048576.0);
    }
    for (int n = 0; n < nd->n_nodes; n++) {
        uint64_t need = 0;
        int k = 0;
        for (int s = 0; s < p->n_stages; s++)
            if (nd->node[s] == n) {
                need += bt_stage_bytes(c, p->bounds, p->n_stages, s);
                k++;
            }
        bt_log_debug("memory: node '%s' (%d stage%s): %s need %.1f MiB of %.1f MiB available",
                     nd->name[n], k, k > 1 ? "s" : "", c->what, (double)need / 1048576.0,
                     (double)nd->avail[n] / 1048576.0);
    }
}

/* -v, tensor parallelism: what each tensor rank of a stage holds, and how
 * uneven the largest share is (the ranks wait for the slowest at each
 * gather). */
static void log_shares(const bt_pipe_t *p, const bt_share_t *s)
{
    const bt_hparams_t *hp = &p->model->hp;
    const struct {
        const char *what;
        const int *at;
    } dims[] = {{"query heads", s->head}, {"n_embd outputs", s->embd}, {"n_ff", s->ff},
                {"experts", s->expert}, {"vocabulary", s->vocab}};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const int *at = dims[d].at;
        if (at[s->size] == 0 || (s->sum && at == s->embd)) /* sum: no rank holds features */
            continue;
        char list[256] = "";
        size_t used = 0;
        for (int r = 0; r < s->size && used < sizeof list; r++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", r ? "/" : "",
                                     at[r + 1] - at[r]);
        bt_log_debug("tensor ranks: %s %s, the largest %.2fx the mean", dims[d].what, list,
                     (double)bt_share_largest(at, s->size) * s->size / at[s->size]);
    }
    char kv[256] = "";
    size_t used = 0;
    for (int r = 0, kv0, kv1; r < s->size && used < sizeof kv; r++) {
        bt_share_kv(s, hp, r, &kv0, &kv1);
        used += (size_t)snprintf(kv + used, sizeof kv - used, "%s%d-%d", r ? ", " : "", kv0,
                                 kv1 - 1);
    }
    bt_log_debug("tensor ranks: kv heads %s of %d (%s)", kv, hp->n_head_kv,
                 bt_share_whole_groups(s, hp) ? "whole groups"
                                              : "a group shared by ranks: its kv head on each");
    bt_log_debug("tensor ranks: %s", s->sum ? "--tp-comm allreduce: attn_output and ffn_down by "
                                              "input columns, partial sums added (golden "
                                              "tolerances, not one rank's bits)"
                                            : "--tp-comm gather: whole outputs gathered (one "
                                              "rank's bits)");
}

/* Rank 0 splits the layers by compute within every node's memory and
 * sends the bounds to all. A stage runs on its leader's node; the ranks of
 * a stage on that node hold a share each (tensor parallelism). */
static bt_status_t partition(bt_pipe_t *p, const bt_pipe_config_t *cfg, int n_ctx)
{
    const int S = p->n_stages, T = p->tp_size, W = p->world_size;
    node_info_t me = this_node(p->world);
    node_info_t *all = p->world_rank == 0 ? malloc(sizeof *all * (size_t)W) : NULL;
    MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, p->world);
    bt_status_t st = BT_OK;
    if (p->world_rank == 0) {
        const int n_layer = p->model->hp.n_layer;
        uint64_t *layer_bytes = malloc(sizeof *layer_bytes * (size_t)n_layer);
        double *layer_cost = malloc(sizeof *layer_cost * (size_t)n_layer);
        int *rank_node = malloc(sizeof *rank_node * (size_t)W);
        int *node = malloc(sizeof *node * (size_t)S);
        uint64_t *avail = malloc(sizeof *avail * (size_t)W);
        const char **names = malloc(sizeof *names * (size_t)W);
        if (all == NULL || layer_bytes == NULL || layer_cost == NULL || rank_node == NULL ||
            node == NULL ||
            avail == NULL || names == NULL) {
            st = BT_ERR_NOMEM;
        } else {
            bt_nodes_t nd = {0, node, avail, names};
            for (int r = 0; r < W; r++) { /* nodes numbered in the order of their first rank */
                rank_node[r] = all[r].leader == r ? nd.n_nodes : rank_node[all[r].leader];
                if (all[r].leader == r) {
                    avail[nd.n_nodes] = all[r].avail;
                    names[nd.n_nodes++] = all[r].name;
                }
            }
            int per_node = 1; /* the most ranks of one stage on its leader's node */
            for (int s = 0; s < S; s++) {
                node[s] = rank_node[s * T];
                int k = 0;
                for (int t = 0; t < T; t++)
                    k += rank_node[s * T + t] == node[s];
                per_node = k > per_node ? k : per_node;
            }
            char what[192];
            bt_stage_costs_t c =
                stage_memory(p, cfg, n_ctx, per_node, layer_bytes, layer_cost, what,
                             sizeof what);
            st = bt_partition(n_layer, S, cfg->ratios, cfg->n_ratios, &c, &nd, p->bounds);
            if (st == BT_OK)
                log_split(p, &c, &nd);
        }
        free(layer_bytes);
        free(layer_cost);
        free(rank_node);
        free(node);
        free(avail);
        free(names);
        free(all);
    }
    if ((st = bt_transport_agree(p->world, st)))
        return st;
    MPI_Bcast(p->bounds, p->n_stages + 1, MPI_INT, 0, p->world);
    return BT_OK;
}

/* The layout: T tensor ranks per stage (stage s is ranks s*T .. s*T + T -
 * 1), a pipeline communicator per tensor index and a communicator per
 * stage. Every rank refuses a T that does not divide the rank count. */
static bt_status_t layout(bt_pipe_t *p, const bt_pipe_config_t *cfg)
{
    const int T = cfg->tp > 0 ? cfg->tp : 1;
    if (T > BT_TP_MAX || p->world_size % T != 0) {
        bt_log_error("tensor parallelism: -tp %d does not divide the %d ranks into stages of %d "
                     "tensor ranks (at most %d)", T, p->world_size, T, BT_TP_MAX);
        return BT_ERR_ARG;
    }
    p->tp_size = T;
    p->tp_rank = p->world_rank % T;
    p->follower = p->tp_rank > 0;
    p->rank = p->world_rank / T;
    p->n_stages = p->world_size / T;
    p->comm = p->world;
    p->tp_comm = MPI_COMM_NULL;
    if (T > 1) {
        BT_MPI_CHECK(MPI_Comm_split(p->world, p->tp_rank, p->rank, &p->comm));
        BT_MPI_CHECK(MPI_Comm_split(p->world, p->rank, p->tp_rank, &p->tp_comm));
    }
    return BT_OK;
}

/* A fatal CUDA error on one rank stops the run (every rank): the message
 * first, then MPI_Abort. */
static void device_fatal(const char *msg)
{
    bt_log_error("%s", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* This rank's kernel set: --kernels auto and cuda become a table and a
 * device here, the device chosen by the rank's place on its node. */
static bt_status_t resolve_kernels(bt_pipe_t *p, const bt_pipe_config_t *cfg)
{
    int local_rank = 0;
    MPI_Comm node;
    if (MPI_Comm_split_type(p->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_free(&node);
    }
    char why[300];
    p->ops = bt_kernels_resolve(cfg->ops, bt_device_default, local_rank,
                                cfg->gpu_given ? cfg->gpu : -1, &p->device, why, sizeof why);
    if (p->ops == NULL) {
        bt_log_error("%s", why);
        return BT_ERR_ARG;
    }
    if (p->device >= 0) {
        bt_device_default->set_fatal(device_fatal);
        bt_log_info("rank %d: CUDA device %d (%s)", p->world_rank, p->device,
                    bt_device_default->name());
    }
    return BT_OK;
}

/* A GPU rank's share on its device: every weight it binds (part 1 copies
 * each matrix there once), the largest cache rows an attention call
 * copies (keys and values of every position of a slot) and the
 * staging of a micro-batch's widest product. */
static bt_status_t device_fits(const bt_pipe_t *p, const bt_pipe_config_t *cfg, int n_ctx)
{
    const bt_hparams_t *hp = &p->model->hp;
    const uint64_t el = cfg->kv_type == BT_TYPE_F16 ? 2 : 4;
    const uint64_t kv = 2 * (uint64_t)n_ctx * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * el;
    const uint64_t wide = (uint64_t)(hp->n_vocab > 4 * hp->n_embd ? hp->n_vocab : 4 * hp->n_embd);
    const uint64_t stage = 3 * (uint64_t)cfg->max_tok * wide * sizeof(float);
    char why[400];
    if (bt_device_fits(bt_device_default, p->device, p->model->weight_bytes + kv + stage, why,
                       sizeof why))
        return BT_OK;
    bt_log_error("%s", why);
    return BT_ERR_NOMEM;
}

bt_status_t bt_pipe_init(bt_pipe_t *p, MPI_Comm comm, const bt_pipe_config_t *cfg)
{
    *p = (bt_pipe_t){.world = comm,
                     .comm = MPI_COMM_NULL,
                     .tp_comm = MPI_COMM_NULL,
                     .tp_size = 1,
                     .max_tok = cfg->max_tok,
                     .n_slots = cfg->n_slots > 0 ? cfg->n_slots : 1,
                     .all_logits = cfg->all_logits,
                     .no_sampling = cfg->no_sampling,
                     .device = -1};
    /* logits rows at once: a micro-batch's rows that need them (at most one
     * per sequence unless every row's are kept) */
    p->logit_rows = cfg->all_logits || p->n_slots > cfg->max_tok ? cfg->max_tok : p->n_slots;
    MPI_Comm_rank(comm, &p->world_rank);
    MPI_Comm_size(comm, &p->world_size);
    bt_log_capture(1);

    /* the kernels' instruction set (BATON_ISA) and BATON_MEM_AVAILABLE, per node: all
     * fail if one can't */
    char why[200];
    bt_status_t st = BT_OK;
    uint64_t mem_env;
    if (!bt_isa_from_env(why, sizeof why) || !bt_mem_from_env(&mem_env, why, sizeof why)) {
        bt_log_error("%s", why);
        st = BT_ERR_ARG;
    }
    if ((st = bt_transport_agree(comm, st)) || (st = bt_transport_agree(comm, layout(p, cfg))) ||
        (st = bt_transport_agree(comm, resolve_kernels(p, cfg))))
        goto fail;
    p->first = p->rank == 0;
    p->last = p->rank == p->n_stages - 1;
    st = bt_model_open(cfg->model_path, &p->model);
    if ((st = bt_transport_agree(comm, st)))
        goto fail;
    p->file_size = p->model->gguf->file_size;
    p->header_hash = bt_gguf_header_hash(p->model->gguf);
    if ((st = bt_transport_agree(comm, check_same_model(p))))
        goto fail;
    bt_share_t share;
    if ((st = bt_transport_agree(comm, bt_share_init(&p->model->hp, p->tp_rank, p->tp_size,
                                                     cfg->tp_allreduce, &share))))
        goto fail;
    if (p->tp_size > 1 && p->world_rank == 0)
        log_shares(p, &share);

    p->bounds = malloc(sizeof(int) * (size_t)(p->n_stages + 1));
    const int train = p->model->hp.n_ctx_train;
    const int n_ctx = cfg->n_ctx > 0 ? cfg->n_ctx : train < BT_DEFAULT_CTX ? train : BT_DEFAULT_CTX;
    if ((st = bt_transport_agree(comm, p->bounds ? BT_OK : BT_ERR_NOMEM)) ||
        (st = partition(p, cfg, n_ctx)))
        goto fail;

    st = bt_model_bind(p->model, p->bounds[p->rank], p->bounds[p->rank + 1],
                       p->first && !p->follower, p->last);
    if (st == BT_OK && p->tp_size > 1)
        st = bt_model_shard(p->model, &share);
    if ((st = bt_transport_agree(comm, st)))
        goto fail;
    if (st == BT_OK && p->device >= 0)
        st = device_fits(p, cfg, n_ctx);
    st = st == BT_OK ? bt_model_place_weights(p->model, !cfg->no_mmap) : st;
    if (st == BT_OK && p->ops == &bt_ops_cpu)
        st = bt_model_pack(p->model);
    if ((st = bt_transport_agree(comm, st)))
        goto fail;
    st = bt_forward_init(p->model, p->ops, n_ctx, p->n_slots, cfg->max_tok, cfg->n_threads,
                         cfg->kv_type, &p->fwd);
    if (st == BT_OK && p->last && !p->follower) {
        size_t rows = (size_t)p->logit_rows;
        p->logits = malloc(rows * (size_t)p->model->hp.n_vocab * sizeof(float));
        if (p->logits == NULL) {
            bt_log_error("cannot allocate logits for %zu rows of %d", rows,
                         p->model->hp.n_vocab);
            st = BT_ERR_NOMEM;
        }
    }
    if (st == BT_OK && cfg->trace_events > 0) {
        st = bt_trace_init(&p->trace, trace_capacity(p, cfg));
        p->tracing = st == BT_OK;
    }
    if (st == BT_OK)
        st = bt_tensor_init(&p->tensor, p->tp_comm, p->fwd, p->last ? p->logit_rows : 0,
                            p->tracing ? &p->trace : NULL);
    if (st == BT_OK && !p->follower)
        st = bt_transport_init(&p->tr, p->comm, cfg->max_tok, p->model->hp.n_embd,
                               p->tracing ? &p->trace : NULL);
    if ((st = bt_transport_agree(comm, st)))
        goto fail;
    if (!p->follower)
        bt_forward_set_progress(p->fwd, progress_cb, &p->tr);
    bt_log_capture(0);
    /* mpirun binds each rank to one core unless told otherwise (with 2
     * ranks or fewer), and -t threads on one core run at its speed */
    if (cfg->n_threads > omp_get_num_procs())
        bt_log_warn("%d threads, but this rank may run on %d CPU%s (its affinity mask): they "
                    "share them; with mpirun add --bind-to none, or --map-by slot:PE=%d",
                    cfg->n_threads, omp_get_num_procs(), omp_get_num_procs() == 1 ? "" : "s",
                    cfg->n_threads);

    return BT_OK;

fail:
    bt_log_capture(0);
    bt_pipe_free(p);
    return st;
}

void bt_pipe_free(bt_pipe_t *p)
{
    bt_transport_free(&p->tr);
    bt_tensor_free(&p->tensor);
    if (p->tracing)
        bt_trace_free(&p->trace);
    free(p->logits);
    bt_forward_free(p->fwd);
    bt_model_free(p->model);
    free(p->bounds);
    if (p->tp_comm != MPI_COMM_NULL)
        MPI_Comm_free(&p->tp_comm);
    if (p->comm != MPI_COMM_NULL && p->comm != p->world)
        MPI_Comm_free(&p->comm);
    *p = (bt_pipe_t){0};
}

/* ---- schedules ---- */

int32_t bt_pipe_choose(const bt_pipe_t *p, bt_sampler_t *s, const float *row)
{
    const int32_t tok = p->no_sampling ? 0
                        : s != NULL    ? bt_sampler_sample(s, row)
                                       : bt_sample_greedy(row, p->model->hp.n_vocab);
    if (s != NULL)
        bt_sampler_accept(s, tok);
    return tok;
}

/* Last stage: the logits this micro-batch needs, handed to on_logits. */
static bt_status_t head(bt_pipe_t *p, const float *x, int nt, int pos, bool final,
                        bt_logits_fn on_logits, void *arg, int32_t *token)
{
    const int n_vocab = p->model->hp.n_vocab, n_embd = p->model->hp.n_embd;
    const float *last_row;
    bt_status_t st = BT_OK;
    if (p->all_logits) {
        st = bt_tensor_head(&p->tensor, x, NULL, nt, p->logits);
        if (st == BT_OK && on_logits != NULL)
            st = on_logits(arg, p->logits, nt, pos);
        last_row = p->logits + (size_t)(nt - 1) * n_vocab;
    } else {
        if (!final)
            return BT_OK;
        st = bt_tensor_head(&p->tensor, x + (size_t)(nt - 1) * n_embd, NULL, 1, p->logits);
        if (st == BT_OK && on_logits != NULL)
            st = on_logits(arg, p->logits, 1, pos + nt - 1);
        last_row = p->logits;
    }
    if (final)
        *token = bt_pipe_choose(p, p->sampler, last_row);
    return st;
}

/* One prompt or decode step through the pipeline. With stop != NULL a
 * rank after the first may receive STOP instead of micro-batch 0: it passes
 * it on, sets *stop and returns. */
static bt_status_t run(bt_pipe_t *p, const int32_t *tokens, int n_tokens, int pos0, int ubatch,
                       bt_pipe_mode_t mode, bt_logits_fn on_logits, void *arg, int32_t *next,
                       bool *stop)
{
    if (ubatch < 1 || ubatch > p->max_tok || n_tokens < 1) {
        bt_log_error("prefill: %d tokens in micro-batches of %d (at most %d)", n_tokens, ubatch,
                     p->max_tok);
        return BT_ERR_ARG;
    }
    bt_transport_t *t = &p->tr;
    const int n_mb = (n_tokens + ubatch - 1) / ubatch;
    const bool sync = mode == BT_PIPE_SYNC && p->n_stages > 1;
    const int last_rank = p->n_stages - 1;
    int32_t token = -1;
    bt_status_t st = BT_OK;

    if (!p->first && (st = bt_transport_post_recv(t, 0)))
        return st;
    for (int mb = 0; mb < n_mb && st == BT_OK; mb++) {
        const int slot = mb % BT_TRANSPORT_SLOTS;
        const int nt = n_tokens - mb * ubatch < ubatch ? n_tokens - mb * ubatch : ubatch;
        const int pos = pos0 + mb * ubatch;
        if (p->first) {
            if ((st = bt_transport_acquire(t, slot)))
                break;
            *bt_transport_header(t, slot) = (bt_act_header_t){.mb = mb, .n_rows = nt};
            bt_row_t *rows = bt_transport_rows(t, slot);
            for (int r = 0; r < nt; r++)
                rows[r] = (bt_row_t){0, pos + r, 0, 0};
        } else {
            if ((st = bt_transport_wait_recv(t, slot, mb, nt, mb == 0 ? stop : NULL)))
                break;
            if (stop != NULL && *stop)
                return p->last ? BT_OK : bt_transport_send_stop(t);
            if (mb + 1 < n_mb && (st = bt_transport_post_recv(t, (mb + 1) % BT_TRANSPORT_SLOTS)))
                break;
        }
        float *x = bt_transport_payload(t, slot); /* [nt, n_embd] */
        double t0 = bt_trace_now(p->tr.trace);
        if (p->first && (st = bt_forward_embed(p->fwd, tokens + mb * ubatch, nt, x)))
            break;
        p->tensor.mb = mb;
        if ((st = bt_tensor_layers(&p->tensor, x, bt_transport_rows(t, slot), nt)))
            break;
        if (p->last)
            st = head(p, x, nt, pos, mb == n_mb - 1, on_logits, arg, &token);
        bt_trace_span(p->tr.trace, BT_EV_COMPUTE, mb, t0);
        if (st != BT_OK)
            break;
        if (!p->last && (st = bt_transport_send(t, slot)))
            break;
        if (sync && mb + 1 < n_mb) {
            if (p->last) {
                st = bt_transport_send_int(t, 0, BT_TAG_DONE, mb);
            } else if (p->first) {
                int32_t done;
                t0 = bt_trace_now(p->tr.trace);
                st = bt_transport_recv_int(t, last_rank, BT_TAG_DONE, &done);
                bt_trace_span(p->tr.trace, BT_EV_TOKEN_WAIT, mb, t0);
            }
        }
    }
    if (st == BT_OK)
        st = bt_transport_drain(t);
    if (st == BT_OK && p->n_stages > 1) {
        if (p->last) {
            st = bt_transport_send_int(t, 0, BT_TAG_TOKEN, token);
        } else if (p->first) {
            double t0 = bt_trace_now(p->tr.trace);
            st = bt_transport_recv_int(t, last_rank, BT_TAG_TOKEN, &token);
            bt_trace_span(p->tr.trace, BT_EV_TOKEN_WAIT, n_mb - 1, t0);
        }
    }
    if (st == BT_OK && p->first && next != NULL)
        *next = token;
    return st;
}

bt_status_t bt_pipe_prefill(bt_pipe_t *p, const int32_t *tokens, int n_tokens, int pos0,
                            int ubatch, bt_pipe_mode_t mode, bt_logits_fn on_logits, void *arg,
                            int32_t *next)
{
    if (p->follower)
        return bt_tensor_follow(&p->tensor);
    return bt_tensor_end(&p->tensor,
                         run(p, tokens, n_tokens, pos0, ubatch, mode, on_logits, arg, next, NULL));
}

bt_status_t bt_pipe_decode(bt_pipe_t *p, int32_t token, int pos, bt_logits_fn on_logits,
                           void *arg, int32_t *next)
{
    if (p->follower)
        return bt_tensor_follow(&p->tensor);
    return bt_tensor_end(&p->tensor,
                         run(p, &token, 1, pos, 1, BT_PIPE_GPIPE, on_logits, arg, next, NULL));
}

bt_status_t bt_pipe_generate(bt_pipe_t *p, int32_t first, int pos0, int max_steps,
                             bt_token_fn on_token, bt_logits_fn on_logits, void *arg,
                             int *n_steps)
{
    bt_status_t st = BT_OK;
    int steps = 0;
    if (p->follower) {
        st = bt_tensor_follow(&p->tensor);
    } else if (p->first) {
        int32_t tok = first;
        bool more = on_token(arg, tok);
        while (more && steps < max_steps && st == BT_OK) {
            st = run(p, &tok, 1, pos0 + steps, 1, BT_PIPE_GPIPE, on_logits, arg, &tok, NULL);
            steps++;
            more = st == BT_OK && on_token(arg, tok);
        }
        if (st == BT_OK && p->n_stages > 1)
            st = bt_transport_send_stop(&p->tr);
    } else {
        bool stopped = false;
        while (st == BT_OK && !stopped) {
            st = run(p, NULL, 1, pos0 + steps, 1, BT_PIPE_GPIPE, on_logits, arg, NULL, &stopped);
            steps += !stopped;
        }
    }
    if (n_steps != NULL)
        *n_steps = steps;
    return p->follower ? st : bt_tensor_end(&p->tensor, st);
}

bt_status_t bt_pipe_probe_gathers(bt_pipe_t *p, double *latency_s, double *bandwidth)
{
    return bt_transport_agree(p->world, bt_tensor_probe(&p->tensor, latency_s, bandwidth));
}

bt_status_t bt_pipe_bcast(bt_pipe_t *p, void *buf, int bytes)
{
    BT_MPI_CHECK(MPI_Bcast(buf, bytes, MPI_BYTE, 0, p->world));
    return BT_OK;
}

int bt_default_threads(MPI_Comm comm)
{
    MPI_Comm node;
    int local = 1;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &local);
        MPI_Comm_free(&node);
    }
    int t = omp_get_num_procs() / local;
    return t > 0 ? t : 1;
}

/* ---- reports ---- */

void bt_pipe_trace_start(bt_pipe_t *p)
{
    MPI_Barrier(p->world);
    p->tensor.n_gathers = p->tensor.gather_floats = 0;
    if (p->tracing)
        bt_trace_start(&p->trace);
}

/* Seconds of rank r's n events in gathers between tensor ranks. */
static double gather_seconds(const bt_event_t *ev, int n)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        sum += ev[i].kind == BT_EV_COLLECTIVE ? ev[i].t1 - ev[i].t0 : 0.0;
    return sum;
}

bt_status_t bt_pipe_trace_report(bt_pipe_t *p, const char *path, int n_mb, bool print)
{
    if (!p->tracing)
        return BT_OK;
    const int S = p->n_stages, T = p->tp_size, W = p->world_size;
    const bool root = p->world_rank == 0;
    int n = p->trace.n;
    /* the gathers since the trace started: how many, and the floats received */
    const double mine[2] = {(double)p->tensor.n_gathers, (double)p->tensor.gather_floats};
    double *gathered = root ? malloc(sizeof mine * (size_t)W) : NULL;
    MPI_Gather(mine, 2, MPI_DOUBLE, gathered, 2, MPI_DOUBLE, 0, p->world);
    int *counts = root ? malloc(sizeof(int) * (size_t)W) : NULL;
    int *displs = root ? malloc(sizeof(int) * (size_t)W) : NULL;
    MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, p->world);
    int total = 0;
    if (root)
        for (int r = 0; r < W; r++) {
            displs[r] = total * (int)sizeof(bt_event_t);
            total += counts[r];
        }
    bt_event_t *all = root ? malloc(sizeof(bt_event_t) * (size_t)(total ? total : 1)) : NULL;
    int *byte_counts = root ? malloc(sizeof(int) * (size_t)W) : NULL;
    if (root)
        for (int r = 0; r < W; r++)
            byte_counts[r] = counts[r] * (int)sizeof(bt_event_t);
    MPI_Gatherv(p->trace.ev, n * (int)sizeof(bt_event_t), MPI_BYTE, all, byte_counts, displs,
                MPI_BYTE, 0, p->world);
    bt_status_t st = BT_OK;
    bt_trace_stats_t *stage = root ? malloc(sizeof *stage * (size_t)W) : NULL;
    if (root) {
        double span = 0, bubble = 0;
        st = stage != NULL ? bt_trace_summary(all, counts, W, stage, &span, &bubble)
                           : BT_ERR_NOMEM;
        for (int r = 0; print && st == BT_OK && r < W; r++) {
            const double pc = span > 0 ? 100 / span : 0;
            if (T == 1)
                bt_log_info("stage %d: busy %5.1f%%  wait %5.1f%%  (%d events)", r,
                            pc * stage[r].busy, pc * stage[r].wait, counts[r]);
            else
                bt_log_info("stage %d rank %d: busy %5.1f%% (gathers %4.1f%%: %.0f of them, "
                            "%.2f MiB received)  wait %5.1f%%  (%d events)", r / T, r % T,
                            pc * stage[r].busy,
                            pc * gather_seconds(all + displs[r] / (int)sizeof(bt_event_t),
                                                counts[r]),
                            gathered ? gathered[2 * r] : 0.0,
                            gathered ? gathered[2 * r + 1] * sizeof(float) / 1048576.0 : 0.0,
                            pc * stage[r].wait, counts[r]);
        }
        if (print && st == BT_OK)
            bt_log_info("bubble: measured %.1f%% (idle share of stage time over %.3f s), "
                        "ideal (S-1)/(M+S-1) = %.1f%% for S=%d, M=%d",
                        100 * bubble, span,
                        n_mb + S - 1 > 0 ? 100.0 * (S - 1) / (n_mb + S - 1) : 0.0, S, n_mb);
        if (path != NULL && st == BT_OK)
            st = bt_trace_write_json(path, all, counts, W);
    }
    free(stage);
    free(byte_counts);
    free(all);
    free(displs);
    free(counts);
    free(gathered);
    int code = (int)st;
    MPI_Bcast(&code, 1, MPI_INT, 0, p->world);
    return (bt_status_t)code;
}

void bt_pipe_stage_times(const bt_pipe_t *p, double out[5])
{
    out[0] = out[1] = out[2] = out[3] = out[4] = 0.0;
    for (int i = 0; p->tracing && i < p->trace.n; i++) {
        const bt_event_t *e = &p->trace.ev[i];
        double d = e->t1 - e->t0;
        switch (e->kind) {
        case BT_EV_COMPUTE: out[0] += d; break;
        case BT_EV_SEND_WAIT: out[1] += d, out[2] += d; break;
        case BT_EV_RECV_WAIT: out[1] += d, out[3] += d; break;
        case BT_EV_TOKEN_WAIT: out[1] += d; break;
        case BT_EV_COLLECTIVE: out[4] += d; break;
        default: break;
        }
    }
}

void bt_pipe_report_memory(bt_pipe_t *p)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mine[3] = {(double)p->model->weight_bytes, (double)p->model->packed_bytes,
                      (double)ru.ru_maxrss * 1024.0};
    double *all = p->world_rank == 0 ? malloc(sizeof mine * (size_t)p->world_size) : NULL;
    MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, p->world);
    if (p->world_rank == 0) {
        for (int r = 0; r < p->world_size; r++) {
            const int s = r / p->tp_size;
            char share[48] = "";
            if (p->tp_size > 1)
                snprintf(share, sizeof share, " (tensor rank %d of %d)", r % p->tp_size,
                         p->tp_size);
            bt_log_info("rank %d: layers %d-%d%s, weights %.1f MiB (%.1f MiB packed), peak RSS "
                        "%.1f MiB", r, p->bounds[s], p->bounds[s + 1] - 1, share,
                        all[3 * r] / 1048576.0, all[3 * r + 1] / 1048576.0,
                        all[3 * r + 2] / 1048576.0);
        }
        free(all);
    }
}
