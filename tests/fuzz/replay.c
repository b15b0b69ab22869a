/*
 * replay.c: runs a libFuzzer target's LLVMFuzzerTestOneInput once on each
 * file named on the command line (directories: every file in them), the
 * way libFuzzer runs a corpus, but built by any compiler without libFuzzer.
 * `make check` runs the committed corpus through the targets this way
 * (tests/fuzz_replay.sh), so inputs that once crashed stay fixed in every
 * build, the sanitizer build included. Exits non-zero when a file cannot be
 * read; a crash in the target is a crash here.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads path whole into a malloc'd buffer of exactly its size (so an
 * overread is outside the allocation). */
static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0) {
        fprintf(stderr, "replay: %s: cannot stat\n", path);
        fclose(f);
        return -1;
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *buf = malloc(n > 0 ? n : 1);
    if (buf == NULL || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "replay: %s: cannot read %zu bytes\n", path, n);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file in dir, in name order; returns the count run or -1. */
static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int status = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *p);
            if (p == NULL) {
                status = -1;
                break;
            }
            names = p;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        if (names[n] == NULL) {
            status = -1;
            break;
        }
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 0)
        qsort(names, n, sizeof *names, cmp_str);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (status == 0 && stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (run_file(names[i]) != 0)
                status = -1;
            else
                count++;
        }
        free(names[i]);
    }
    free(names);
    return status != 0 ? -1 : count;
}

int main(int argc, char **argv)
{
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int n = S_ISDIR(sb.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0 ? 1 : -1;
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replay: %s: %d inputs\n", argc > 0 ? argv[0] : "?", total);
    return 0;
}
