/* Replays files through the fuzz harness body without libFuzzer (a ctest test in the default
 * suite, so the sanitizer build runs it under ASan + UBSan).
 *
 *   gguf_replay [--ok PATH...] [--fail PATH...]
 *
 * PATH is a file or a directory (its *.gguf files). Files after --ok must be accepted by the
 * reader, files after --fail refused; every one must keep the harness's invariants. Each file is
 * read into a heap buffer of exactly its size, so a read past the end is caught by ASan. */
#include "fuzz_gguf.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int n_files, n_bad;

static void replay_file(const char *path, int expect_fail) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gguf_replay: cannot open %s: %s\n", path, strerror(errno));
        n_bad++;
        return;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size > (1 << 28)) {
        fprintf(stderr, "gguf_replay: %s: cannot stat, or larger than 256 MiB\n", path);
        fclose(f);
        n_bad++;
        return;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf || fread(buf, 1, size, f) != size) {
        fprintf(stderr, "gguf_replay: cannot read %s\n", path);
        free(buf);
        fclose(f);
        n_bad++;
        return;
    }
    fclose(f);
    int refused = ts_fuzz_gguf_one(buf, size);
    free(buf);
    n_files++;
    if (refused != expect_fail) {
        fprintf(stderr, "gguf_replay: %s was %s, expected it to be %s\n", path,
                refused ? "refused" : "accepted", expect_fail ? "refused" : "accepted");
        n_bad++;
    }
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay_path(const char *path, int expect_fail) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "gguf_replay: %s: %s\n", path, strerror(errno));
        n_bad++;
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        replay_file(path, expect_fail);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "gguf_replay: cannot list %s: %s\n", path, strerror(errno));
        n_bad++;
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **p = realloc(names, cap * sizeof *names);
            if (!p) abort();
            names = p;
        }
        size_t plen = strlen(path) + 1 + len + 1;
        names[n] = malloc(plen);
        if (!names[n]) abort();
        snprintf(names[n++], plen, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    if (n == 0) {
        fprintf(stderr, "gguf_replay: %s holds no .gguf file\n", path);
        n_bad++;
    }
    for (size_t i = 0; i < n; i++) {
        replay_file(names[i], expect_fail);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    int expect_fail = -1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ok") == 0)
            expect_fail = 0;
        else if (strcmp(argv[i], "--fail") == 0)
            expect_fail = 1;
        else if (expect_fail < 0) {
            fprintf(stderr, "usage: gguf_replay [--ok PATH...] [--fail PATH...]\n");
            return 2;
        } else
            replay_path(argv[i], expect_fail);
    }
    printf("gguf_replay: %d files replayed, %d problems\n", n_files, n_bad);
    return n_bad || n_files == 0 ? 1 : 0;
}
