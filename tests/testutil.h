/* testutil.h: small helpers shared by the Check suites. */
#ifndef BT_TESTUTIL_H
#define BT_TESTUTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh directory under $TMPDIR (or /tmp) for one test program; removed
 * by tu_rmdir_all. */
static inline char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    static char path[512];
    snprintf(path, sizeof path, "%s/baton-test-XXXXXX", base && *base ? base : "/tmp");
    return mkdtemp(path);
}

static inline void tu_rmdir_all(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

/* The golden data folder, or NULL (with a message) when it is absent. */
static inline const char *tu_golden_dir(void)
{
    const char *dir = getenv("BT_GOLDEN_DIR");
    static char probe[600];
    if (dir == NULL || *dir == '\0')
        dir = "../shared/golden";
    snprintf(probe, sizeof probe, "%s/tiny-llama-golden-f32.gguf", dir);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "SKIP: golden data not found at %s (set BT_GOLDEN_DIR)\n", dir);
        return NULL;
    }
    return dir;
}

/* Reads a whole file; NULL on failure. */
static inline void *tu_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL)
        *size = (size_t)n;
    return buf;
}

/* Runs a suite, frees it, returns the number of failed tests. */
static inline int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

#endif /* BT_TESTUTIL_H */
