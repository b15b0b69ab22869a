/*
 * chat.h: the model's ChatML chat template (<|im_start|>role\n...<|im_end|>)
 * around user turns, shared by baton's --chat and its batch requests.
 * Only ChatML is supported; a model's template is read from
 * tokenizer.chat_template in its GGUF metadata.
 */
#ifndef BT_CHAT_H
#define BT_CHAT_H

#include <stdbool.h>

#include "gguf.h"

/* Whether the model's chat template is ChatML. */
bool bt_chat_is_chatml(const bt_gguf_t *g);

/* The template's default system message: the text between
 * "<|im_start|>system\n" and the next "<|im_end|>", malloc'd (the caller
 * frees it); NULL when the template has none (or out of memory). */
char *bt_chat_template_system(const bt_gguf_t *g);

/* The ChatML text of one user turn, malloc'd (the caller frees it); NULL
 * when out of memory. first: the conversation's first turn, with the
 * system block when system is not NULL or empty; later turns close the
 * previous reply first. */
char *bt_chat_turn(const char *msg, const char *system, bool first);

#endif /* BT_CHAT_H */
