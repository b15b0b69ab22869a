/* chat.c: ChatML, Gemma and Llama 3 conversations (chat.h). */
#include "chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How one format writes a message: open role mid content close. */
typedef struct format {
    const char *open, *mid, *close;
    const char *assistant; /* the assistant's role as the format names it */
    bool trim;             /* contents without the white space at their ends */
    bool system_in_user;   /* no system role: it opens the next user message */
} format_t;

static const format_t formats[] = {
    [BT_CHAT_CHATML] = {"<|im_start|>", "\n", "<|im_end|>\n", "assistant", false, false},
    [BT_CHAT_GEMMA] = {"<start_of_turn>", "\n", "<end_of_turn>\n", "model", true, true},
    [BT_CHAT_LLAMA3] = {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>", "assistant",
                        true, false},
};

bt_chat_format_t bt_chat_format(const bt_gguf_t *g)
{
    bt_gguf_str_t tpl, arch;
    if (bt_gguf_get_str(g, "tokenizer.chat_template", &tpl) == BT_OK) {
        if (memmem(tpl.ptr, tpl.len, "<|im_start|>", 12) != NULL)
            return BT_CHAT_CHATML;
        if (memmem(tpl.ptr, tpl.len, "<start_of_turn>", 15) != NULL)
            return BT_CHAT_GEMMA;
        if (memmem(tpl.ptr, tpl.len, "<|start_header_id|>", 19) != NULL)
            return BT_CHAT_LLAMA3;
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
    case BT_CHAT_LLAMA3: return "llama3";
    }
    return "?";
}

bt_chat_format_t bt_chat_format_by_name(const char *name)
{
    for (int f = BT_CHAT_CHATML; f <= BT_CHAT_LLAMA3; f++)
        if (strcmp(name, bt_chat_format_name((bt_chat_format_t)f)) == 0)
            return (bt_chat_format_t)f;
    return BT_CHAT_NONE;
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

/* A growing string; ok false once out of memory. */
typedef struct text {
    char *s;
    size_t n, cap;
    bool ok;
} text_t;

static void put(text_t *t, const char *s, size_t n)
{
    if (!t->ok)
        return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = 2 * (t->n + n + 1);
        char *p = realloc(t->s, cap);
        if (p == NULL) {
            t->ok = false;
            return;
        }
        t->s = p, t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

static void puts_(text_t *t, const char *s)
{
    put(t, s, strlen(s));
}

/* s (NULL: empty) without the white space at its ends when trim is set
 * (llama.cpp's trim: " \t\n\r\v\f"): the start in *s, the length returned. */
static size_t content(const char **s, bool trim)
{
    static const char ws[] = " \t\n\r\v\f";
    const char *a = *s == NULL ? "" : *s;
    size_t n;
    if (trim) {
        a += strspn(a, ws);
        n = strlen(a);
        while (n > 0 && strchr(ws, a[n - 1]) != NULL)
            n--;
    } else {
        n = strlen(a);
    }
    *s = a;
    return n;
}

static void message(text_t *t, const format_t *f, const char *role, const char *prefix,
                    const char *body)
{
    const size_t n_pre = content(&prefix, f->trim), n_body = content(&body, f->trim);
    puts_(t, f->open);
    puts_(t, role);
    puts_(t, f->mid);
    put(t, prefix, n_pre);
    if (n_pre > 0)
        puts_(t, "\n\n");
    put(t, body, n_body);
    puts_(t, f->close);
}

/* msgs in format f after lead (the close of an earlier reply, or ""). */
static char *render(bt_chat_format_t fmt, const char *lead, const bt_chat_msg_t *msgs, int n,
                    const char *default_system)
{
    if (fmt <= BT_CHAT_NONE || fmt > BT_CHAT_LLAMA3)
        return NULL;
    const format_t *f = &formats[fmt];
    text_t t = {.ok = true};
    const char *pending = NULL; /* a system message waiting for its user message */
    puts_(&t, lead);
    if (default_system != NULL && *default_system &&
        (n == 0 || strcmp(msgs[0].role, "system") != 0)) {
        if (f->system_in_user)
            pending = default_system;
        else
            message(&t, f, "system", NULL, default_system);
    }
    for (int i = 0; i < n && t.ok; i++) {
        const char *role = msgs[i].role;
        if (strcmp(role, "system") == 0 && f->system_in_user) {
            pending = msgs[i].content;
        } else if (strcmp(role, "system") == 0 || strcmp(role, "user") == 0) {
            message(&t, f, role, strcmp(role, "user") == 0 ? pending : NULL, msgs[i].content);
            if (strcmp(role, "user") == 0)
                pending = NULL;
        } else if (strcmp(role, "assistant") == 0) {
            message(&t, f, f->assistant, NULL, msgs[i].content);
        } else {
            t.ok = false;
        }
    }
    if (pending != NULL) /* a system message with no user message after it */
        message(&t, f, "user", pending, NULL);
    puts_(&t, f->open);
    puts_(&t, f->assistant);
    puts_(&t, f->mid);
    if (!t.ok) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

char *bt_chat_render(bt_chat_format_t f, const bt_chat_msg_t *msgs, int n,
                     const char *default_system)
{
    return render(f, "", msgs, n, default_system);
}

char *bt_chat_turn(bt_chat_format_t f, const char *msg, const char *system, bool first)
{
    const bt_chat_msg_t user = {"user", msg};
    if (f <= BT_CHAT_NONE || f > BT_CHAT_LLAMA3)
        return NULL;
    /* later turns first close the reply whose end-of-turn token was not fed */
    return render(f, first ? "" : formats[f].close, &user, 1, first ? system : NULL);
}
