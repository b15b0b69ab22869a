/*
 * qemu-icount.c: a qemu-user TCG plugin that counts the guest instructions
 * a program executes, in total and those whose mnemonic is one of a few
 * (the 8-bit dot products and matrix multiplies: sdot, udot, usdot, sudot,
 * smmla, ummla, usmmla; and fmla, the float FMAs), printed at exit:
 *
 *   qemu-aarch64 -plugin ./qemu-icount.so -L SYSROOT prog ...
 *   icount: total N, sdot N, ..., fmla N
 *
 * Built by scripts/arm64-icount. Debian's qemu-user has plugin support but
 * ships no plugin header, so the few API entries used are declared here as
 * the QEMU TCG plugin API (version 1, QEMU 7.x) documents them. Counts are
 * plain adds from translated code: run the program on one thread.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };

#define EXPORT __attribute__((visibility("default")))
EXPORT extern int qemu_plugin_version;
EXPORT int qemu_plugin_version = 1;

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
char *qemu_plugin_insn_disas(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
                                              void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn,
                                                enum qemu_plugin_op op, void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *),
                                    void *userdata);
void qemu_plugin_outs(const char *string);
void g_free(void *mem);

/* The 8-bit dot products and matrix multiplies by their encodings (the
 * disassembler qemu 7.2 links, capstone 4, prints them as .byte), fmla by
 * its mnemonic. */
typedef struct {
    const char *name;
    uint32_t mask, value;
} op_t;
static const op_t ops[] = {
    {"sdot", 0xbfe0fc00, 0x0e809400},       /* vector; Q free */
    {"udot", 0xbfe0fc00, 0x2e809400},
    {"sdot(elem)", 0xbfc0f400, 0x0f80e000}, /* by element */
    {"udot(elem)", 0xbfc0f400, 0x2f80e000},
    {"usdot", 0xbfe0fc00, 0x0e809c00},
    {"usdot(elem)", 0xbfc0f400, 0x0f80f000},
    {"sudot(elem)", 0xbfc0f400, 0x0f00f000},
    {"smmla", 0xffe0fc00, 0x4e80a400},
    {"ummla", 0xffe0fc00, 0x6e80a400},
    {"usmmla", 0xffe0fc00, 0x4e80ac00},
    {"fmla", 0, 0},                         /* by mnemonic */
};
#define N_OPS (sizeof ops / sizeof ops[0])
static uint64_t total, counts[N_OPS];

const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);

static void on_tb(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    const size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &total, n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t w = 0;
        if (qemu_plugin_insn_size(insn) == 4)
            memcpy(&w, qemu_plugin_insn_data(insn), 4);
        char *d = qemu_plugin_insn_disas(insn);
        for (size_t k = 0; k < N_OPS; k++) {
            const bool hit = ops[k].mask ? (w & ops[k].mask) == ops[k].value
                                         : strncmp(d, "fmla ", 5) == 0;
            if (hit)
                qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                           &counts[k], 1);
        }
        g_free(d);
    }
}

static void on_exit(qemu_plugin_id_t id, void *p)
{
    (void)id, (void)p;
    char line[512];
    int o = snprintf(line, sizeof line, "icount: total %llu", (unsigned long long)total);
    for (size_t k = 0; k < N_OPS && o < (int)sizeof line; k++)
        o += snprintf(line + o, sizeof line - (size_t)o, ", %s %llu", ops[k].name,
                      (unsigned long long)counts[k]);
    snprintf(line + (o < (int)sizeof line - 1 ? o : (int)sizeof line - 2), 2, "\n");
    qemu_plugin_outs(line);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv);
EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    (void)info, (void)argc, (void)argv;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb);
    qemu_plugin_register_atexit_cb(id, on_exit, NULL);
    return 0;
}
