/*
 * chat.h: the model's chat template around conversations, shared by
 * baton's --chat, its batch requests and baton-server. Three formats are
 * known:
 *   ChatML  <|im_start|>role\n...<|im_end|>\n   (SmolLM2, Qwen, ...)
 *   Gemma   <start_of_turn>role\n...<end_of_turn>\n, the assistant's role
 *           written "model", no system role: a system message opens the
 *           next user turn, followed by a blank line; contents trimmed of
 *           surrounding white space (llama.cpp's built-in "gemma" format)
 *   Llama 3 <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>,
 *           contents trimmed (the BOS the template writes first is the
 *           tokenizer's to add)
 * The format is read from tokenizer.chat_template in the GGUF metadata (by
 * the markers it contains); a file without that key whose
 * general.architecture is "gemma3" (Gemma 3 base models ship none) gets the
 * Gemma format. Anything else has no format baton can use.
 */
#ifndef BT_CHAT_H
#define BT_CHAT_H

#include <stdbool.h>

#include "gguf.h"

typedef enum bt_chat_format {
    BT_CHAT_NONE = 0,   /* no template, or one baton does not know */
    BT_CHAT_CHATML = 1,
    BT_CHAT_GEMMA = 2,
    BT_CHAT_LLAMA3 = 3,
} bt_chat_format_t;

/* One message of a conversation: role "system", "user" or "assistant". */
typedef struct bt_chat_msg {
    const char *role;
    const char *content;
} bt_chat_msg_t;

/* The model's chat format (see above); never fails. */
bt_chat_format_t bt_chat_format(const bt_gguf_t *g);

/* "none", "chatml", "gemma", "llama3"; never NULL. */
const char *bt_chat_format_name(bt_chat_format_t f);

/* The format a name above stands for (--chat-template); BT_CHAT_NONE for
 * any other name. */
bt_chat_format_t bt_chat_format_by_name(const char *name);

/* The template's default system message: for ChatML the text between
 * "<|im_start|>system\n" and the next "<|im_end|>", malloc'd (the caller
 * frees it); NULL when the template has none (Gemma templates never do) or
 * out of memory. */
char *bt_chat_template_system(const bt_gguf_t *g);

/* The text of one user turn in format f, ending with the opening of the
 * assistant's reply, malloc'd (the caller frees it); NULL when out of
 * memory or f is BT_CHAT_NONE. first: the conversation's first turn, with
 * the system message when system is not NULL or empty; later turns first
 * close the previous reply (whose end-of-turn token ended generation and
 * was not fed). */
char *bt_chat_turn(bt_chat_format_t f, const char *msg, const char *system, bool first);

/* The whole conversation msgs[0..n) in format f, ending with the opening
 * of the assistant's reply, malloc'd; NULL when out of memory, f is
 * BT_CHAT_NONE or a role is none of the three. default_system (may be
 * NULL) opens a conversation that does not begin with a system message. */
char *bt_chat_render(bt_chat_format_t f, const bt_chat_msg_t *msgs, int n,
                     const char *default_system);

#endif /* BT_CHAT_H */
