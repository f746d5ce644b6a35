/* Reading fixture files in the unit tests. */
#ifndef TS_TEST_FILES_H
#define TS_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

/* The whole file at path, NUL-terminated (its length in *len when len is not NULL), or NULL when it
 * cannot be opened or read. The caller frees it. */
static inline char *ts_test_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0) s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) free(s), s = NULL;
    if (s) {
        s[n] = 0;
        if (len) *len = (size_t)n;
    }
    fclose(f);
    return s;
}

#endif
