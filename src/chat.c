/* chat.c: ChatML turns (chat.h). */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool bt_chat_is_chatml(const bt_gguf_t *g)
{
    bt_gguf_str_t tpl;
    return bt_gguf_get_str(g, "tokenizer.chat_template", &tpl) == BT_OK &&
           memmem(tpl.ptr, tpl.len, "<|im_start|>", 12) != NULL;
}

char *bt_chat_template_system(const bt_gguf_t *g)
{
    bt_gguf_str_t tpl;
    if (bt_gguf_get_str(g, "tokenizer.chat_template", &tpl) != BT_OK)
        return NULL;
    static const char open[] = "<|im_start|>system\n", close[] = "<|im_end|>";
    const char *end = tpl.ptr + tpl.len;
    const char *a = memmem(tpl.ptr, tpl.len, open, sizeof open - 1);
    if (a == NULL)
        return NULL;
    a += sizeof open - 1;
    const char *b = memmem(a, (size_t)(end - a), close, sizeof close - 1);
    return b == NULL ? NULL : strndup(a, (size_t)(b - a));
}

char *bt_chat_turn(const char *msg, const char *system, bool first)
{
    char *out = NULL;
    int rc;
    if (first)
        rc = system != NULL && *system
                 ? asprintf(&out, "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s"
                                  "<|im_end|>\n<|im_start|>assistant\n", system, msg)
                 : asprintf(&out, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", msg);
    else
        rc = asprintf(&out, "<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n",
                      msg);
    return rc < 0 ? NULL : out;
}
