#include "cli/npy.h"

#include "cli/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

int ts_npy_write_header(FILE *f, const char *descr, int n_dims, const int64_t *shape, char *err,
                        size_t errlen) {
    char dict[256];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < n_dims; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%" PRId64 "%s", shape[i],
                      n_dims == 1      ? ","
                      : i + 1 < n_dims ? ", "
                                       : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* magic (6) + version (2) + header length (2) + dict padded with spaces and a newline to 64 bytes */
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)(n + pad + 1);
    if (fwrite("\x93NUMPY\x01\x00", 1, 8, f) != 8 || fwrite(&hlen, 2, 1, f) != 1 ||
        fwrite(dict, 1, (size_t)n, f) != (size_t)n)
        return ts_errf(err, errlen, "cannot write .npy header: %s", strerror(errno));
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    return ferror(f) ? ts_errf(err, errlen, "cannot write .npy header: %s", strerror(errno)) : 0;
}

/* Parses the header dict; fills descr (e.g. "<i4"), fortran flag and shape. */
static int parse_dict(const char *d, const char *path, char descr[8], int *n_dims, int64_t *shape, char *err,
                      size_t errlen) {
    const char *p = strstr(d, "'descr'");
    if (!p || !(p = strchr(p + 7, '\'')) || strlen(p) < 5 || p[4] != '\'')
        return ts_errf(err, errlen, "%s: .npy header has no readable 'descr'", path);
    memcpy(descr, p + 1, 3);
    descr[3] = 0;
    if (strstr(d, "'fortran_order': True"))
        return ts_errf(err, errlen, "%s: Fortran-order .npy arrays are not supported", path);
    p = strstr(d, "'shape'");
    if (!p || !(p = strchr(p, '('))) return ts_errf(err, errlen, "%s: .npy header has no 'shape'", path);
    p++;
    *n_dims = 0;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0) return ts_errf(err, errlen, "%s: .npy shape is malformed", path);
        if (*n_dims == TS_NPY_MAX_DIMS)
            return ts_errf(err, errlen, "%s: .npy array has more than %d dims", path, TS_NPY_MAX_DIMS);
        shape[(*n_dims)++] = v;
        p = end;
    }
    if (*p != ')') return ts_errf(err, errlen, "%s: .npy shape is malformed", path);
    return 0;
}

int ts_npy_read(const char *path, char want, void **data, int *n_dims, int64_t shape[TS_NPY_MAX_DIMS],
                char *err, size_t errlen) {
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    unsigned char pre[10];
    char dict[4096], descr[8];
    int rc = -1;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        ts_errf(err, errlen, "%s is not a .npy file", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1)
        hlen = pre[8] | (size_t)pre[9] << 8;
    else {
        unsigned char b[2];
        if (fread(b, 1, 2, f) != 2) {
            ts_errf(err, errlen, "%s: truncated .npy header", path);
            goto out;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)b[0] << 16 | (size_t)b[1] << 24;
    }
    if (hlen >= sizeof dict || fread(dict, 1, hlen, f) != hlen) {
        ts_errf(err, errlen, "%s: .npy header is truncated or longer than %zu bytes", path, sizeof dict - 1);
        goto out;
    }
    dict[hlen] = 0;
    if (parse_dict(dict, path, descr, n_dims, shape, err, errlen)) goto out;
    int64_t count = 1;
    for (int i = 0; i < *n_dims; i++)
        if (__builtin_mul_overflow(count, shape[i], &count) || count > (INT64_C(1) << 34)) {
            ts_errf(err, errlen, "%s: .npy array is too large", path);
            goto out;
        }
    size_t esz = strcmp(descr, "<i8") == 0 ? 8 : 4;
    bool ok_type =
        want == 'f' ? strcmp(descr, "<f4") == 0 : (strcmp(descr, "<i4") == 0 || strcmp(descr, "<i8") == 0);
    if (!ok_type) {
        ts_errf(err, errlen, "%s: .npy dtype is '%s', expected %s", path, descr,
                want == 'f' ? "'<f4' (float32)" : "'<i4' (int32) or '<i8'");
        goto out;
    }
    void *raw = malloc((size_t)(count ? count : 1) * esz);
    if (!raw) {
        ts_errf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (fread(raw, esz, (size_t)count, f) != (size_t)count) {
        free(raw);
        ts_errf(err, errlen, "%s: .npy data is truncated (expected %" PRId64 " elements)", path, count);
        goto out;
    }
    if (esz == 8) { /* int64 -> int32, refusing values that do not fit */
        int32_t *o = raw;
        for (int64_t i = 0; i < count; i++) {
            int64_t v;
            memcpy(&v, (char *)raw + 8 * i, 8);
            if (v < INT32_MIN || v > INT32_MAX) {
                free(raw);
                ts_errf(err, errlen, "%s: element %" PRId64 " (%" PRId64 ") does not fit in int32", path, i,
                        v);
                goto out;
            }
            o[i] = (int32_t)v;
        }
    }
    *data = raw;
    rc = 0;
out:
    fclose(f);
    return rc;
}
