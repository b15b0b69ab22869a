/*
 * baton-mkmodel: writes a synthetic GGUF of any family in arch.h (llama,
 * qwen2, qwen3, gemma3) with seeded random weights.
 *   baton-mkmodel --shape smollm2-135m --type q8_0 --seed 1 -o model.gguf
 *   baton-mkmodel --shape tiny --arch qwen3 -o tiny-qwen3.gguf
 * Any dimension of the shape can be overridden (--n-layer 7, ...).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "args.h"
#include "kernels/types.h"
#include "synth.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: baton-mkmodel [--shape NAME] [--arch A] [--type T] [--seed N] -o FILE "
            "[overrides]\n"
            "  --shape NAME      %s (default tiny)\n"
            "  --arch A          family (general.architecture): %s (default: the shape's)\n"
            "  --type T          type of every matrix (default f32): %s\n"
            "  --seed N          random seed (default 1)\n"
            "  -o, --output FILE where to write the GGUF\n"
            "  --vocab-from FILE copy FILE's tokenizer (tokenizer.* keys, chat template\n"
            "                    included); --n-vocab becomes its token count\n"
            "  overrides: --n-vocab --n-embd --n-layer --n-head --n-head-kv --n-ff --n-ctx N,\n"
            "             --n-rot N (rotated dims per head, even, <= head dim),\n"
            "             --head-dim N (even; writes key_length and value_length),\n"
            "             --swa N (gemma3 sliding window; 0: none),\n"
            "             --n-expert N, --n-expert-used K, --n-ff-exp N (experts: llama,\n"
            "             qwen3moe; llama's are --n-ff wide),\n"
            "             --rope-freqs N (llama: Llama 3 rope factors for original context N;\n"
            "             0: none), --rope-base F, --tied, --untied,\n"
            "             deepseek2: --q-lora N (0: attn_q), --kv-lora N, --d-qk N, --d-v N,\n"
            "             --n-dense N (leading dense layers), --n-shared N, --n-group N,\n"
            "             --n-group-used N, --softmax (gating; default the shape's)\n",
            bt_synth_shape_names(), bt_arch_names(), bt_type_supported_names());
}

enum {
    OPT_SHAPE = 256, OPT_TYPE, OPT_SEED, OPT_VOCAB, OPT_EMBD, OPT_LAYER, OPT_HEAD, OPT_HEAD_KV,
    OPT_FF, OPT_CTX, OPT_ROPE, OPT_TIED, OPT_UNTIED, OPT_ROT, OPT_ARCH, OPT_HEAD_DIM, OPT_SWA,
    OPT_ROPE_FREQS, OPT_EXPERT, OPT_EXPERT_USED, OPT_FF_EXP, OPT_Q_LORA, OPT_KV_LORA, OPT_D_QK,
    OPT_D_V, OPT_DENSE, OPT_SHARED, OPT_GROUP, OPT_GROUP_USED, OPT_SOFTMAX, OPT_VOCAB_FROM,
};

static bt_status_t parse_float(const char *flag, const char *s, float *out)
{
    char *end;
    float v = strtof(s, &end);
    if (*s == '\0' || *end != '\0' || !(v > 0.0f && v < 1e30f)) {
        bt_log_error("%s: '%s' is not a positive number", flag, s);
        return BT_ERR_ARG;
    }
    *out = v;
    return BT_OK;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"shape", required_argument, 0, OPT_SHAPE},   {"type", required_argument, 0, OPT_TYPE},
        {"seed", required_argument, 0, OPT_SEED},     {"output", required_argument, 0, 'o'},
        {"n-vocab", required_argument, 0, OPT_VOCAB},
        {"vocab-from", required_argument, 0, OPT_VOCAB_FROM}, {"n-embd", required_argument, 0, OPT_EMBD},
        {"n-layer", required_argument, 0, OPT_LAYER}, {"n-head", required_argument, 0, OPT_HEAD},
        {"n-head-kv", required_argument, 0, OPT_HEAD_KV},
        {"n-ff", required_argument, 0, OPT_FF},       {"n-ctx", required_argument, 0, OPT_CTX},
        {"rope-base", required_argument, 0, OPT_ROPE}, {"tied", no_argument, 0, OPT_TIED},
        {"untied", no_argument, 0, OPT_UNTIED},       {"help", no_argument, 0, 'h'},
        {"n-rot", required_argument, 0, OPT_ROT},     {"arch", required_argument, 0, OPT_ARCH},
        {"head-dim", required_argument, 0, OPT_HEAD_DIM},
        {"swa", required_argument, 0, OPT_SWA},
        {"rope-freqs", required_argument, 0, OPT_ROPE_FREQS},
        {"n-expert", required_argument, 0, OPT_EXPERT},
        {"n-expert-used", required_argument, 0, OPT_EXPERT_USED},
        {"n-ff-exp", required_argument, 0, OPT_FF_EXP},
        {"q-lora", required_argument, 0, OPT_Q_LORA},
        {"kv-lora", required_argument, 0, OPT_KV_LORA},
        {"d-qk", required_argument, 0, OPT_D_QK},
        {"d-v", required_argument, 0, OPT_D_V},
        {"n-dense", required_argument, 0, OPT_DENSE},
        {"n-shared", required_argument, 0, OPT_SHARED},
        {"n-group", required_argument, 0, OPT_GROUP},
        {"n-group-used", required_argument, 0, OPT_GROUP_USED},
        {"softmax", no_argument, 0, OPT_SOFTMAX},
        {0, 0, 0, 0},
    };
    /* The shape and its family come first so overrides apply whatever the
     * flag order. */
    const char *shape_name = "tiny", *arch = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--shape") == 0)
            shape_name = argv[i + 1];
        else if (strcmp(argv[i], "--arch") == 0)
            arch = argv[i + 1];
    }
    bt_synth_shape_t s;
    if (bt_synth_shape_arch(shape_name, arch, &s) != BT_OK)
        return 2;

    const char *out = NULL;
    uint32_t type = BT_TYPE_F32;
    uint64_t seed = 1;
    const char *vocab_from = NULL;
    bool n_vocab_given = false;
    bt_status_t st = BT_OK;
    int c;
    opterr = 0;
    while (st == BT_OK && (c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_SHAPE: /* handled above */
        case OPT_ARCH: break;
        case OPT_TYPE: {
            int t = bt_type_from_name(optarg);
            if (t < 0 || !bt_type_supported((uint32_t)t)) {
                bt_log_error("--type: '%s' is not a type baton can write (%s)", optarg,
                             bt_type_supported_names());
                st = BT_ERR_ARG;
            }
            type = (uint32_t)t;
            break;
        }
        case OPT_SEED: st = bt_parse_u64("--seed", optarg, &seed); break;
        case 'o': out = optarg; break;
        case OPT_VOCAB:
            st = bt_parse_int("--n-vocab", optarg, 1, 1 << 24, &s.n_vocab);
            n_vocab_given = true;
            break;
        case OPT_VOCAB_FROM: vocab_from = optarg; break;
        case OPT_EMBD: st = bt_parse_int("--n-embd", optarg, 1, 1 << 20, &s.n_embd); break;
        case OPT_LAYER: st = bt_parse_int("--n-layer", optarg, 1, 4096, &s.n_layer); break;
        case OPT_HEAD: st = bt_parse_int("--n-head", optarg, 1, 4096, &s.n_head); break;
        case OPT_HEAD_KV: st = bt_parse_int("--n-head-kv", optarg, 1, 4096, &s.n_head_kv); break;
        case OPT_FF: st = bt_parse_int("--n-ff", optarg, 1, 1 << 22, &s.n_ff); break;
        case OPT_CTX: st = bt_parse_int("--n-ctx", optarg, 1, 1 << 24, &s.n_ctx_train); break;
        case OPT_ROT: st = bt_parse_int("--n-rot", optarg, 2, 1 << 16, &s.n_rot); break;
        case OPT_HEAD_DIM: st = bt_parse_int("--head-dim", optarg, 1, 1 << 16, &s.head_dim); break;
        case OPT_SWA: st = bt_parse_int("--swa", optarg, 0, 1 << 24, &s.n_swa); break;
        case OPT_EXPERT: st = bt_parse_int("--n-expert", optarg, 0, 4096, &s.n_expert); break;
        case OPT_EXPERT_USED:
            st = bt_parse_int("--n-expert-used", optarg, 1, 4096, &s.n_expert_used);
            break;
        case OPT_FF_EXP: st = bt_parse_int("--n-ff-exp", optarg, 1, 1 << 22, &s.n_ff_exp); break;
        case OPT_Q_LORA: st = bt_parse_int("--q-lora", optarg, 0, 1 << 20, &s.q_lora); break;
        case OPT_KV_LORA: st = bt_parse_int("--kv-lora", optarg, 1, 1 << 20, &s.kv_lora); break;
        case OPT_D_QK: st = bt_parse_int("--d-qk", optarg, 1, 1 << 20, &s.d_qk); break;
        case OPT_D_V: st = bt_parse_int("--d-v", optarg, 1, 1 << 20, &s.d_v); break;
        case OPT_DENSE: st = bt_parse_int("--n-dense", optarg, 0, 4096, &s.n_dense); break;
        case OPT_SHARED: st = bt_parse_int("--n-shared", optarg, 1, 64, &s.n_shared); break;
        case OPT_GROUP: st = bt_parse_int("--n-group", optarg, 1, 64, &s.n_group); break;
        case OPT_GROUP_USED:
            st = bt_parse_int("--n-group-used", optarg, 1, 64, &s.n_group_used);
            break;
        case OPT_SOFTMAX: s.sigmoid = false; break;
        case OPT_ROPE_FREQS:
            st = bt_parse_int("--rope-freqs", optarg, 0, 1 << 24, &s.rope_freqs_ctx);
            break;
        case OPT_ROPE: st = parse_float("--rope-base", optarg, &s.rope_base); break;
        case OPT_TIED: s.tied = true; break;
        case OPT_UNTIED: s.tied = false; break;
        case 'h': usage(stdout); return 0;
        default: st = bt_getopt_error(c, argv); break;
        }
    }
    if (s.n_expert > 0 && s.n_expert_used == 0) /* experts given, the rest defaults */
        s.n_expert_used = s.n_expert < 2 ? s.n_expert : 2;
    if (s.n_expert > 0 && s.n_ff_exp == 0)
        s.n_ff_exp = s.n_ff;
    if (st == BT_OK && vocab_from != NULL && n_vocab_given) {
        bt_log_error("--n-vocab and --vocab-from: the vocabulary's size is its token count");
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && vocab_from != NULL && bt_synth_vocab_from(&s, vocab_from) != BT_OK)
        return 2; /* logged: the file and why */
    if (st == BT_OK && optind < argc) {
        bt_log_error("unexpected argument '%s'", argv[optind]);
        st = BT_ERR_ARG;
    }
    if (st == BT_OK && out == NULL) {
        bt_log_error("no output file given (-o FILE)");
        st = BT_ERR_ARG;
    }
    if (st != BT_OK) {
        usage(stderr);
        return 2;
    }
    if (bt_synth_check(&s) != BT_OK) /* logged: the value and why */
        return 2;
    double t0 = bt_now();
    if (bt_synth_write(out, &s, type, seed) != BT_OK)
        return 1;
    fprintf(stderr, "wrote %s: shape %s, %s, %s, %d layers, n_embd %d, %.1f M params, seed %llu "
                    "(%.1f s)\n",
            out, s.name, s.arch, bt_type_info(type)->name, s.n_layer, s.n_embd,
            (double)bt_synth_n_params(&s) / 1e6, (unsigned long long)seed, bt_now() - t0);
    printf("%s\n", out);
    return 0;
}
