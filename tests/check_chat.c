/*
 * check_chat.c: chat templates (chat.h).
 *   format: which format a GGUF's metadata selects
 *   turns:  the exact text of ChatML, Gemma and Llama 3 turns and of whole
 *           conversations (baton-server's messages)
 * The Gemma turns as token ids on the real vocabulary are checked by
 * check_tokenizer --gemma3.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "gguf.h"
#include "testutil.h"

static char *tmpdir;

/* The chat format of a metadata-only GGUF; NULL leaves a key out. */
static bt_chat_format_t format_of(const char *arch, const char *tpl, char **system)
{
    char path[700];
    snprintf(path, sizeof path, "%s/chat.gguf", tmpdir);
    bt_gguf_writer_t *w;
    ck_assert_int_eq(bt_gguf_writer_init(&w), BT_OK);
    if (arch)
        ck_assert_int_eq(bt_gguf_writer_set_str(w, "general.architecture", arch), BT_OK);
    if (tpl)
        ck_assert_int_eq(bt_gguf_writer_set_str(w, "tokenizer.chat_template", tpl), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_begin(w, path), BT_OK);
    ck_assert_int_eq(bt_gguf_writer_finish(w), BT_OK);
    bt_gguf_writer_free(w);
    bt_gguf_t *g;
    ck_assert_int_eq(bt_gguf_open(path, &g), BT_OK);
    bt_chat_format_t f = bt_chat_format(g);
    if (system)
        *system = bt_chat_template_system(g);
    bt_gguf_close(g);
    return f;
}

static const char chatml_tpl[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}";
static const char gemma_tpl[] =
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\n' + "
    "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

static const char llama3_tpl[] =
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}";

START_TEST(test_format)
{
    char *sys;
    ck_assert_int_eq(format_of("llama", chatml_tpl, &sys), BT_CHAT_CHATML);
    ck_assert_str_eq(sys, "You are a helpful AI assistant named SmolLM");
    free(sys);
    ck_assert_int_eq(format_of("gemma3", gemma_tpl, &sys), BT_CHAT_GEMMA);
    ck_assert_ptr_null(sys); /* Gemma templates have no default system message */
    /* a Gemma template on another architecture is still Gemma */
    ck_assert_int_eq(format_of("llama", gemma_tpl, NULL), BT_CHAT_GEMMA);
    /* no template: Gemma 3 base files (llama.cpp would use ChatML, whose
     * markers are plain text in Gemma's vocabulary) */
    ck_assert_int_eq(format_of("gemma3", NULL, &sys), BT_CHAT_GEMMA);
    ck_assert_ptr_null(sys);
    ck_assert_int_eq(format_of("llama", NULL, NULL), BT_CHAT_NONE);
    ck_assert_int_eq(format_of(NULL, NULL, NULL), BT_CHAT_NONE);
    /* a template baton does not know is refused, whatever the architecture */
    ck_assert_int_eq(format_of("gemma3", "[INST] {{ messages }} [/INST]", NULL), BT_CHAT_NONE);
    ck_assert_str_eq(bt_chat_format_name(BT_CHAT_NONE), "none");
    ck_assert_str_eq(bt_chat_format_name(BT_CHAT_CHATML), "chatml");
    ck_assert_str_eq(bt_chat_format_name(BT_CHAT_GEMMA), "gemma");
    ck_assert_str_eq(bt_chat_format_name(BT_CHAT_LLAMA3), "llama3");
    ck_assert_int_eq(format_of("llama", llama3_tpl, &sys), BT_CHAT_LLAMA3);
    ck_assert_ptr_null(sys);
    for (int f = BT_CHAT_CHATML; f <= BT_CHAT_LLAMA3; f++)
        ck_assert_int_eq(bt_chat_format_by_name(bt_chat_format_name(f)), f);
    ck_assert_int_eq(bt_chat_format_by_name("mistral"), BT_CHAT_NONE);
    ck_assert_int_eq(bt_chat_format_by_name("none"), BT_CHAT_NONE);
}
END_TEST

static void expect_turn(bt_chat_format_t f, const char *msg, const char *system, bool first,
                        const char *want)
{
    char *got = bt_chat_turn(f, msg, system, first);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, want);
    free(got);
}

START_TEST(test_turns_chatml)
{
    expect_turn(BT_CHAT_CHATML, "Hi", NULL, true,
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_turn(BT_CHAT_CHATML, "Hi", "", true,
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_turn(BT_CHAT_CHATML, "Hi", "Be terse.", true,
                "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                "<|im_start|>assistant\n");
    expect_turn(BT_CHAT_CHATML, "And now?", "Be terse.", false,
                "<|im_end|>\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n");
}
END_TEST

START_TEST(test_turns_gemma)
{
    expect_turn(BT_CHAT_GEMMA, "Hi", NULL, true,
                "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    expect_turn(BT_CHAT_GEMMA, "Hi", "", true,
                "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    /* the system message opens the first user turn, then a blank line */
    expect_turn(BT_CHAT_GEMMA, "What is 2+2?", "You are terse.", true,
                "<start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n"
                "<start_of_turn>model\n");
    /* a later turn closes the model's reply; the system message is gone */
    expect_turn(BT_CHAT_GEMMA, "And 3+3?", "You are terse.", false,
                "<end_of_turn>\n<start_of_turn>user\nAnd 3+3?<end_of_turn>\n"
                "<start_of_turn>model\n");
    /* contents are trimmed (llama.cpp's gemma format); inner space stays */
    expect_turn(BT_CHAT_GEMMA, " \t two  words\n\n", "\n sys \r\n", true,
                "<start_of_turn>user\nsys\n\ntwo  words<end_of_turn>\n<start_of_turn>model\n");
    expect_turn(BT_CHAT_GEMMA, "Hi", " \n", true,
                "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    expect_turn(BT_CHAT_GEMMA, "", NULL, true,
                "<start_of_turn>user\n<end_of_turn>\n<start_of_turn>model\n");
    ck_assert_ptr_null(bt_chat_turn(BT_CHAT_NONE, "Hi", NULL, true));
}
END_TEST

START_TEST(test_turns_llama3)
{
    expect_turn(BT_CHAT_LLAMA3, " Hi\n", "Be terse.", true,
                "<|start_header_id|>system<|end_header_id|>\n\nBe terse.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    expect_turn(BT_CHAT_LLAMA3, "More", NULL, false,
                "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nMore<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
}
END_TEST

static void expect_render(bt_chat_format_t f, const bt_chat_msg_t *m, int n, const char *sys,
                          const char *want)
{
    char *got = bt_chat_render(f, m, n, sys);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, want);
    free(got);
}

/* Whole conversations: system, user and assistant messages in order. */
START_TEST(test_render)
{
    const bt_chat_msg_t conv[] = {
        {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"},
    };
    expect_render(BT_CHAT_CHATML, conv, 4, "default",
                  "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
                  "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* no system message: the template's default opens it */
    expect_render(BT_CHAT_CHATML, conv + 1, 1, "default",
                  "<|im_start|>system\ndefault<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
                  "<|im_start|>assistant\n");
    /* Gemma: the system message opens the next user message; "model" replies */
    expect_render(BT_CHAT_GEMMA, conv, 4, NULL,
                  "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1"
                  "<end_of_turn>\n<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n");
    expect_render(BT_CHAT_LLAMA3, conv + 1, 3, NULL,
                  "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    const bt_chat_msg_t bad[] = {{"tool", "x"}};
    ck_assert_ptr_null(bt_chat_render(BT_CHAT_CHATML, bad, 1, NULL));
    ck_assert_ptr_null(bt_chat_render(BT_CHAT_NONE, conv, 4, NULL));
}
END_TEST

static Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, test_format);
    suite_add_tcase(s, tc);
    tc = tcase_create("turns");
    tcase_add_test(tc, test_turns_chatml);
    tcase_add_test(tc, test_turns_gemma);
    tcase_add_test(tc, test_turns_llama3);
    tcase_add_test(tc, test_render);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    tmpdir = tu_mkdtemp();
    if (tmpdir == NULL) {
        perror("mkdtemp");
        return 1;
    }
    int failed = tu_run(chat_suite());
    tu_rmdir_all(tmpdir);
    return failed == 0 ? 0 : 1;
}
