// make-llamacpp-logits.cpp: llama.cpp's logits for a tiny reference model,
// with the protocol of tests/data/README.md: tokens 1..N_PROMPT at positions
// 0.. in one llama_decode with logits for every position, then N_GEN greedy
// single-token decodes. Writes rows [N_PROMPT + N_GEN][n_vocab] of raw
// float32 to OUT and prints the N_GEN + 1 greedy ids.
//
// Built against a llama.cpp build (never part of this tree), e.g.
//   L=.../llama.cpp; g++ -O2 -std=c++17 make-llamacpp-logits.cpp -I$L/include \
//       -I$L/ggml/include -L$L/build/bin -lllama -lggml -lggml-base \
//       -Wl,-rpath,$L/build/bin -o make-llamacpp-logits
//   ./make-llamacpp-logits MODEL.gguf OUT.logits.bin 32 8
#include "llama.h"

#include <cstdio>
#include <cstdlib>

static int argmax(const float *l, int n)
{
    int best = 0;
    for (int v = 1; v < n; v++)
        if (l[v] > l[best])
            best = v;
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: make-llamacpp-logits MODEL OUT N_PROMPT N_GEN\n");
        return 2;
    }
    const int n_prompt = atoi(argv[3]), n_gen = atoi(argv[4]);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (model == nullptr)
        return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context *ctx = llama_init_from_model(model, cp);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = fopen(argv[2], "wb");
    if (ctx == nullptr || out == nullptr)
        return 1;
    llama_batch b = llama_batch_init(512, 0, 1);
    b.n_tokens = n_prompt;
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = i + 1;
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    if (llama_decode(ctx, b) != 0)
        return 1;
    for (int i = 0; i < n_prompt; i++)
        fwrite(llama_get_logits_ith(ctx, i), sizeof(float), n_vocab, out);
    int id = argmax(llama_get_logits_ith(ctx, n_prompt - 1), n_vocab);
    for (int k = 0; k < n_gen; k++) {
        printf("%d ", id);
        b.n_tokens = 1;
        b.token[0] = id;
        b.pos[0] = n_prompt + k;
        if (llama_decode(ctx, b) != 0)
            return 1;
        const float *row = llama_get_logits_ith(ctx, 0);
        fwrite(row, sizeof(float), n_vocab, out);
        id = argmax(row, n_vocab);
    }
    printf("%d\n", id);
    fclose(out);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
