/*
 * tokenizer.h: text <-> token ids from a GGUF file's tokenizer.* metadata,
 * with llama.cpp's semantics.
 *
 * Kinds (tokenizer.ggml.model):
 *   "gpt2"   byte-level BPE. The text is cut by the pre-tokenizer that
 *            tokenizer.ggml.pre names (see bt_tokenizer_pre_t), every piece
 *            is spelled in GPT-2's byte alphabet and merged pair by pair in
 *            tokenizer.ggml.merges order (lowest rank first).
 *   "llama"  SentencePiece style: spaces become U+2581, a leading U+2581 is
 *            added (tokenizer.ggml.add_space_prefix, default true; also after
 *            every special token, as llama.cpp does), then adjacent symbols
 *            are merged while some concatenation is a token, highest
 *            tokenizer.ggml.scores first; characters that are no token
 *            become <0xXX> byte tokens.
 *   "none"   no vocabulary (baton's synthetic models; also a file with no
 *            tokenizer.ggml.model). Loads; encoding fails with
 *            BT_ERR_UNSUPPORTED.
 *
 * Special tokens: control (and unknown) tokens are matched in the text only
 * when the caller asks (parse_special); user-defined tokens always are, as
 * in llama.cpp and HF tokenizers. Longer token texts are matched first.
 *
 * Load copies everything it needs out of the GGUF map: the tokenizer does
 * not depend on the bt_gguf_t after bt_tokenizer_load() returns. A loaded
 * tokenizer is read-only: any number of threads may use it at once.
 */
#ifndef BT_TOKENIZER_H
#define BT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "gguf.h"

typedef enum bt_tokenizer_kind {
    BT_TOKENIZER_NONE = 0, /* no vocabulary */
    BT_TOKENIZER_BPE = 1,  /* "gpt2": byte-level BPE */
    BT_TOKENIZER_SPM = 2,  /* "llama": SentencePiece style */
} bt_tokenizer_kind_t;

/* tokenizer.ggml.token_type values (llama.cpp / gguf-py numbering). */
typedef enum bt_token_type {
    BT_TOKEN_UNDEFINED = 0,
    BT_TOKEN_NORMAL = 1,
    BT_TOKEN_UNKNOWN = 2,
    BT_TOKEN_CONTROL = 3,
    BT_TOKEN_USER_DEFINED = 4,
    BT_TOKEN_UNUSED = 5,
    BT_TOKEN_BYTE = 6,
} bt_token_type_t;

/* BPE pre-tokenizers, by the tokenizer.ggml.pre names that select them. */
typedef enum bt_tokenizer_pre {
    /* "default", a missing key, and (with a warning) any unknown name:
     * llama.cpp's default chain: [\p{P}$+<=>^~|]+, then the GPT-2 regex,
     * then \p{N}+, then [0-9][0-9][0-9] */
    BT_PRE_DEFAULT = 0,
    /* "gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "exaone4", ...: the
     * GPT-2 regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    BT_PRE_GPT2 = 1,
    /* "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
     * "minerva-7b": every \p{N} on its own, then the GPT-2 regex */
    BT_PRE_SMOLLM = 2,
    /* "llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", ...:
     * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
     *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
     * (the llama3 names also turn on ignore_merges and add_bos) */
    BT_PRE_LLAMA3 = 3,
    /* "qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", ...: as LLAMA3
     * with \p{N} one digit at a time */
    BT_PRE_QWEN2 = 4,
} bt_tokenizer_pre_t;

typedef struct bt_tokenizer bt_tokenizer_t;

/* Builds the tokenizer g describes. BT_ERR_FORMAT (one log message naming
 * the key, index and values) when the metadata is inconsistent: tokens /
 * token_type / scores arrays of different lengths or wrong element types, a
 * merge that is not "left right", names a token that is not in the
 * vocabulary or forms one that is not, a gpt2 vocabulary without merges, a
 * key of the wrong type; BT_ERR_UNSUPPORTED for an unknown
 * tokenizer.ggml.model; BT_ERR_NOMEM. A special token id out of range is
 * ignored with a warning (as llama.cpp). On success *out owns its memory
 * (bt_tokenizer_free). */
bt_status_t bt_tokenizer_load(const bt_gguf_t *g, bt_tokenizer_t **out);
void bt_tokenizer_free(bt_tokenizer_t *t);

/* ---- properties ---- */

bt_tokenizer_kind_t bt_tokenizer_kind(const bt_tokenizer_t *t);
bt_tokenizer_pre_t bt_tokenizer_pre(const bt_tokenizer_t *t);
/* Name of a kind ("none", "gpt2", "llama") / pre-tokenizer ("default",
 * "gpt2", "smollm", "llama3", "qwen2"); never NULL. */
const char *bt_tokenizer_kind_name(bt_tokenizer_kind_t kind);
const char *bt_tokenizer_pre_name(bt_tokenizer_pre_t pre);
/* Number of tokens (0 for NONE). */
int32_t bt_tokenizer_n_vocab(const bt_tokenizer_t *t);
/* Special ids, -1 when the model has none. bos/eos/unk/pad come from the
 * tokenizer.ggml.*_token_id keys (SPM defaults: bos 1, eos 2, unk 0, as
 * llama.cpp); eot from eot_token_id, else the first of "<|eot_id|>",
 * "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", ... present. */
int32_t bt_tokenizer_bos(const bt_tokenizer_t *t);
int32_t bt_tokenizer_eos(const bt_tokenizer_t *t);
int32_t bt_tokenizer_eot(const bt_tokenizer_t *t);
int32_t bt_tokenizer_unk(const bt_tokenizer_t *t);
int32_t bt_tokenizer_pad(const bt_tokenizer_t *t);
/* Whether encoding with add_special prepends BOS / appends EOS
 * (tokenizer.ggml.add_bos_token / add_eos_token; default: BOS for SPM and
 * the llama3 pre-tokenizers, else none). */
bool bt_tokenizer_add_bos(const bt_tokenizer_t *t);
bool bt_tokenizer_add_eos(const bt_tokenizer_t *t);
/* End of generation: EOS, EOT, and the tokens llama.cpp stops on by their
 * text (<|im_end|>, <|endoftext|>, <|eot_id|>, <end_of_turn>, <|end|>,
 * <|eom_id|>, </s>, FIM pad/repo/sep, ...), which are also re-typed as
 * control tokens (so Gemma's user-defined "</s>" is matched in text only
 * with parse_special). False for ids out of range. */
bool bt_tokenizer_is_eog(const bt_tokenizer_t *t, int32_t id);
/* The token's type; BT_TOKEN_UNDEFINED for ids out of range. Tokens that
 * llama.cpp treats as EOG by their text count as CONTROL. */
bt_token_type_t bt_tokenizer_token_type(const bt_tokenizer_t *t, int32_t id);
/* The token's text as stored in the vocabulary (byte-level alphabet for
 * gpt2, U+2581 for spaces in llama), NUL-terminated, owned by t; NULL for
 * ids out of range. */
const char *bt_tokenizer_token_text(const bt_tokenizer_t *t, int32_t id);
/* The id whose vocabulary text is exactly text[0..len), or -1 (e.g. the id
 * of "<|im_start|>" for a chat template). */
int32_t bt_tokenizer_find(const bt_tokenizer_t *t, const char *text, size_t len);

/* ---- encoding ---- */

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is kept byte for byte).
 * add_special: prepend BOS / append EOS when the model asks for them.
 * parse_special: control token texts in the text become their ids.
 * On success *ids is a malloc'd array of *n ids (NULL when *n == 0) that
 * the caller frees. BT_ERR_UNSUPPORTED (logged) for a NONE tokenizer,
 * BT_ERR_ARG for a NULL text with len > 0, BT_ERR_NOMEM. */
bt_status_t bt_tokenizer_encode(const bt_tokenizer_t *t, const char *text, size_t len,
                                bool add_special, bool parse_special, int32_t **ids, int *n);

/* ---- decoding ---- */

/* The bytes one token stands for: gpt2 byte-level text mapped back to bytes;
 * llama U+2581 -> ' ' and <0xAB> byte tokens -> that byte; user-defined
 * tokens as their text; control/unknown tokens empty unless special is set
 * (then their text); unused tokens and ids out of range empty. Returns the
 * piece's length; copies it (not NUL-terminated) into buf only when it fits
 * in size bytes, so a caller with a short buffer retries with the length. */
int bt_tokenizer_piece(const bt_tokenizer_t *t, int32_t id, bool special, char *buf, size_t size);

enum {
    BT_DETOK_SPECIAL = 1,      /* render control tokens as their text */
    BT_DETOK_STRIP_PREFIX = 2, /* drop the leading space the SPM space prefix
                                * put before the first piece */
};

/* Whole-sequence decoding: the concatenated pieces of ids[0..n), as a
 * malloc'd NUL-terminated string (*text, *len without the NUL). */
bt_status_t bt_tokenizer_decode(const bt_tokenizer_t *t, const int32_t *ids, int n, int flags,
                                char **text, size_t *len);

/* Streaming decoder for generation: push ids one at a time and print what
 * comes back. Bytes are held until they form complete UTF-8 characters, so
 * a character whose bytes arrive over several tokens is printed once,
 * whole; bytes that can never become valid UTF-8 are passed on as they are
 * (nothing is lost: the concatenated output equals bt_tokenizer_decode). */
typedef struct bt_detok bt_detok_t;

bt_status_t bt_detok_init(const bt_tokenizer_t *t, int flags, bt_detok_t **out);
void bt_detok_free(bt_detok_t *d);
/* Appends the piece of id. *text / *len: the complete characters ready to
 * print (possibly empty), valid until the next call on d. */
bt_status_t bt_detok_push(bt_detok_t *d, int32_t id, const char **text, size_t *len);
/* Ends the stream: returns whatever bytes are still held (an incomplete
 * character at the very end), and resets d for a new stream. */
void bt_detok_flush(bt_detok_t *d, const char **text, size_t *len);

#endif /* BT_TOKENIZER_H */
