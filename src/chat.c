/* chat.c: ChatML and Gemma turns (chat.h). */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bt_chat_format_t bt_chat_format(const bt_gguf_t *g)
{
    bt_gguf_str_t tpl, arch;
    if (bt_gguf_get_str(g, "tokenizer.chat_template", &tpl) == BT_OK) {
        if (memmem(tpl.ptr, tpl.len, "<|im_start|>", 12) != NULL)
            return BT_CHAT_CHATML;
        if (memmem(tpl.ptr, tpl.len, "<start_of_turn>", 15) != NULL)
            return BT_CHAT_GEMMA;
        return BT_CHAT_NONE;
    }
    if (bt_gguf_get_str(g, "general.architecture", &arch) == BT_OK &&
        bt_gguf_str_eq(arch, "gemma3"))
        return BT_CHAT_GEMMA;
    return BT_CHAT_NONE;
}

const char *bt_chat_format_name(bt_chat_format_t f)
{
    switch (f) {
    case BT_CHAT_NONE: return "none";
    case BT_CHAT_CHATML: return "chatml";
    case BT_CHAT_GEMMA: return "gemma";
    }
    return "?";
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

static char *chatml_turn(const char *msg, const char *system, bool first)
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

/* s without the white space at its ends (llama.cpp's trim: " \t\n\r\v\f"):
 * the start in *s, the length returned. */
static int trimmed(const char **s)
{
    static const char ws[] = " \t\n\r\v\f";
    const char *a = *s == NULL ? "" : *s;
    a += strspn(a, ws);
    size_t n = strlen(a);
    while (n > 0 && strchr(ws, a[n - 1]) != NULL)
        n--;
    *s = a;
    return (int)n;
}

static char *gemma_turn(const char *msg, const char *system, bool first)
{
    char *out = NULL;
    int n_msg = trimmed(&msg), n_sys = trimmed(&system);
    int rc = asprintf(&out,
                      "%s<start_of_turn>user\n%.*s%s%.*s<end_of_turn>\n<start_of_turn>model\n",
                      first ? "" : "<end_of_turn>\n", first ? n_sys : 0, system,
                      first && n_sys > 0 ? "\n\n" : "", n_msg, msg);
    return rc < 0 ? NULL : out;
}

char *bt_chat_turn(bt_chat_format_t f, const char *msg, const char *system, bool first)
{
    switch (f) {
    case BT_CHAT_CHATML: return chatml_turn(msg, system, first);
    case BT_CHAT_GEMMA: return gemma_turn(msg, system, first);
    case BT_CHAT_NONE: break;
    }
    return NULL;
}
