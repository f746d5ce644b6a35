/* safetensors reader (see safetensors.h).
 *
 * File layout: u64 little-endian N, then N bytes of JSON header, then the data buffer. The header
 * is an object {name: {"dtype": D, "shape": [..], "data_offsets": [begin, end]}, "__metadata__":
 * {str: str}}; offsets are relative to the data buffer. */
#include "convert/safetensors.h"

#include "common/error.h"
#include "common/json_check.h"
#include "common/half.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_file {
    char *path;
    const uint8_t *map; /* whole file, or NULL when empty */
    uint64_t size;
} st_file;

struct ts_st {
    st_file *files;
    uint32_t n_files;
    ts_st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    int64_t *slots; /* open-addressing hash of tensor indices, −1 empty */
    size_t n_slots;
};

static const struct {
    const char *name;
    size_t size;
} k_dtypes[TS_ST_DTYPE_COUNT] = {
    [TS_ST_BOOL] = {"BOOL", 1},       [TS_ST_U8] = {"U8", 1},           [TS_ST_I8] = {"I8", 1},
    [TS_ST_F8_E5M2] = {"F8_E5M2", 1}, [TS_ST_F8_E4M3] = {"F8_E4M3", 1}, [TS_ST_F8_E8M0] = {"F8_E8M0", 1},
    [TS_ST_I16] = {"I16", 2},         [TS_ST_U16] = {"U16", 2},         [TS_ST_F16] = {"F16", 2},
    [TS_ST_BF16] = {"BF16", 2},       [TS_ST_I32] = {"I32", 4},         [TS_ST_U32] = {"U32", 4},
    [TS_ST_F32] = {"F32", 4},         [TS_ST_I64] = {"I64", 8},         [TS_ST_U64] = {"U64", 8},
    [TS_ST_F64] = {"F64", 8},
};

const char *ts_st_dtype_name(ts_st_dtype d) {
    return (unsigned)d < TS_ST_DTYPE_COUNT ? k_dtypes[d].name : "?";
}
size_t ts_st_dtype_size(ts_st_dtype d) {
    return (unsigned)d < TS_ST_DTYPE_COUNT ? k_dtypes[d].size : 0;
}
bool ts_st_dtype_is_float(ts_st_dtype d) {
    return d == TS_ST_F16 || d == TS_ST_BF16 || d == TS_ST_F32;
}

size_t ts_st_count(const ts_st *st) {
    return st->n_tensors;
}
uint32_t ts_st_file_count(const ts_st *st) {
    return st->n_files;
}
const ts_st_tensor *ts_st_at(const ts_st *st, size_t i) {
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}
const char *ts_st_file_path(const ts_st *st, uint32_t file) {
    return file < st->n_files ? st->files[file].path : "?";
}

static uint64_t hash_name(const char *s) { /* FNV-1a */
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++) h = (h ^ (uint8_t)*s) * UINT64_C(1099511628211);
    return h;
}

const ts_st_tensor *ts_st_find(const ts_st *st, const char *name) {
    if (!st->n_slots) return NULL;
    for (size_t i = hash_name(name) & (st->n_slots - 1);; i = (i + 1) & (st->n_slots - 1)) {
        int64_t k = st->slots[i];
        if (k < 0) return NULL;
        if (strcmp(st->tensors[k].name, name) == 0) return &st->tensors[k];
    }
}

/* Inserts tensor k into the hash (growing it at half load); fails on a duplicate name. */
static int hash_insert(ts_st *st, size_t k, char *err, size_t errlen) {
    if (2 * (k + 1) > st->n_slots) {
        size_t n = st->n_slots ? 2 * st->n_slots : 1024;
        int64_t *s = malloc(n * sizeof *s);
        if (!s) return ts_errf(err, errlen, "out of memory indexing %zu tensors", k + 1);
        for (size_t i = 0; i < n; i++) s[i] = -1;
        free(st->slots);
        st->slots = s, st->n_slots = n;
        for (size_t j = 0; j < k; j++) {
            size_t i = hash_name(st->tensors[j].name) & (n - 1);
            while (s[i] >= 0) i = (i + 1) & (n - 1);
            s[i] = (int64_t)j;
        }
    }
    const ts_st_tensor *t = &st->tensors[k];
    size_t i = hash_name(t->name) & (st->n_slots - 1);
    for (; st->slots[i] >= 0; i = (i + 1) & (st->n_slots - 1)) {
        const ts_st_tensor *o = &st->tensors[st->slots[i]];
        if (strcmp(o->name, t->name) == 0) {
            if (o->file == t->file)
                return ts_errf(err, errlen, "%s: tensor '%s' appears twice in the header",
                               st->files[t->file].path, t->name);
            return ts_errf(err, errlen, "tensor '%s' is in two files (%s and %s)", t->name,
                           st->files[o->file].path, st->files[t->file].path);
        }
    }
    st->slots[i] = (int64_t)k;
    return 0;
}

void ts_st_close(ts_st *st) {
    if (!st) return;
    for (uint32_t f = 0; f < st->n_files; f++) {
        if (st->files[f].map) munmap((void *)st->files[f].map, st->files[f].size);
        free(st->files[f].path);
    }
    for (size_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    free(st->files);
    free(st->tensors);
    free(st->slots);
    free(st);
}

/* A JSON number that is a non-negative integer below 2^53 (JSON doubles are exact up to there). */
static bool json_uint(const cJSON *j, uint64_t *v) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || d != floor(d)) return false;
    *v = (uint64_t)d;
    return true;
}

typedef struct span {
    uint64_t begin, end;
    size_t tensor;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Parses one header entry into a tensor; data_len is the size of the data buffer. */
static int parse_entry(const char *path, const cJSON *e, const uint8_t *data, uint64_t data_len,
                       ts_st_tensor *t, uint64_t *begin_out, uint64_t *end_out, char *err, size_t errlen) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return ts_errf(err, errlen, "%s: header entry '%s' is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return ts_errf(err, errlen,
                       "%s: tensor '%s' needs a string 'dtype', an array 'shape' and an array "
                       "'data_offsets' in the header",
                       path, name);
    int d = 0;
    while (d < TS_ST_DTYPE_COUNT && strcmp(k_dtypes[d].name, dt->valuestring) != 0) d++;
    if (d == TS_ST_DTYPE_COUNT)
        return ts_errf(err, errlen,
                       "%s: tensor '%s' has dtype '%.32s', which is not a safetensors dtype this reader "
                       "knows",
                       path, name, dt->valuestring);
    t->dtype = (ts_st_dtype)d;
    int n_dims = cJSON_GetArraySize(sh);
    if (n_dims > TS_ST_MAX_DIMS)
        return ts_errf(err, errlen, "%s: tensor '%s' has %d dimensions (at most %d supported)", path, name,
                       n_dims, TS_ST_MAX_DIMS);
    t->n_dims = (uint32_t)n_dims;
    uint64_t nel = 1;
    for (int i = 0; i < n_dims; i++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(sh, i), &v))
            return ts_errf(err, errlen,
                           "%s: tensor '%s' has a shape entry that is not a non-negative integer", path,
                           name);
        t->shape[i] = (int64_t)v;
        if (v && nel > UINT64_MAX / 16 / v)
            return ts_errf(err, errlen, "%s: tensor '%s' has a shape whose element count overflows", path,
                           name);
        nel *= v;
    }
    uint64_t begin, end;
    if (cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &begin) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &end))
        return ts_errf(err, errlen,
                       "%s: tensor '%s' needs data_offsets [begin, end] of two non-negative integers", path,
                       name);
    if (begin > end || end > data_len)
        return ts_errf(err, errlen,
                       "%s: tensor '%s' has data_offsets [%" PRIu64 ", %" PRIu64 "] outside the %" PRIu64
                       "-byte data section (is the file truncated?)",
                       path, name, begin, end, data_len);
    uint64_t nbytes = nel * k_dtypes[d].size;
    if (end - begin != nbytes)
        return ts_errf(err, errlen,
                       "%s: tensor '%s' of dtype %s and %" PRIu64 " elements needs %" PRIu64
                       " bytes, but its data_offsets span %" PRIu64,
                       path, name, k_dtypes[d].name, nel, nbytes, end - begin);
    t->nelements = (int64_t)nel;
    t->nbytes = nbytes;
    t->data = data + begin;
    *begin_out = begin, *end_out = end;
    return 0;
}

/* Maps one file and appends its tensors. */
static int add_file(ts_st *st, const char *path, char *err, size_t errlen) {
    st_file *nf = realloc(st->files, (st->n_files + 1) * sizeof *nf);
    if (!nf) return ts_errf(err, errlen, "out of memory");
    st->files = nf;
    uint32_t fi = st->n_files;
    st_file *f = &st->files[fi];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return ts_errf(err, errlen, "out of memory");
    st->n_files++;

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return ts_errf(err, errlen, "%s is not a regular file", path);
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        return ts_errf(err, errlen,
                       "%s is not a safetensors file: %" PRIu64 " bytes, shorter than the 8-byte header "
                       "length",
                       path, f->size);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return ts_errf(err, errlen, "cannot map %s: %s", path, strerror(errno));
    f->map = m;

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i];
    if (hlen > f->size - 8)
        return ts_errf(err, errlen,
                       "%s: header length %" PRIu64 " runs past the end of the %" PRIu64
                       "-byte file (truncated, or not a safetensors file)",
                       path, hlen, f->size);
    if (hlen > TS_ST_MAX_HEADER)
        return ts_errf(err, errlen, "%s: header length %" PRIu64 " exceeds safetensors' limit of %u bytes",
                       path, hlen, TS_ST_MAX_HEADER);
    const char *hdr = (const char *)f->map + 8;
    if (hlen == 0 || hdr[0] != '{')
        return ts_errf(err, errlen, "%s: the header does not start with a JSON object", path);
    char what[4200]; /* a name cut at \u0000 by cJSON could pass for another tensor's: refused */
    snprintf(what, sizeof what, "%s: the header", path);
    if (ts_json_check_text(what, hdr, (size_t)hlen, "a tensor table", err, errlen)) return -1;
    const char *end_parse = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end_parse, false);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = end_parse ? (size_t)(end_parse - hdr) : 0;
        cJSON_Delete(root);
        return ts_errf(err, errlen, "%s: the header is not valid JSON (near byte %zu of %" PRIu64 ")", path,
                       at, hlen);
    }
    for (const char *p = end_parse; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != '\0') {
            cJSON_Delete(root);
            return ts_errf(err, errlen, "%s: the header has bytes after its JSON object", path);
        }
    const uint8_t *data = f->map + 8 + hlen;
    uint64_t data_len = f->size - 8 - hlen;

    int n = cJSON_GetArraySize(root), rc = 0;
    size_t first = st->n_tensors;
    span *spans = malloc(((size_t)n + 1) * sizeof *spans);
    if (!spans) rc = ts_errf(err, errlen, "out of memory");
    size_t n_spans = 0;
    for (const cJSON *e = root->child; !rc && e; e = e->next) {
        if (!e->string || !e->string[0]) {
            rc = ts_errf(err, errlen, "%s: the header has an entry with an empty name", path);
            break;
        }
        if (strcmp(e->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(e)) rc = ts_errf(err, errlen, "%s: '__metadata__' is not an object", path);
            continue;
        }
        if (st->n_tensors == st->cap_tensors) {
            size_t cap = st->cap_tensors ? 2 * st->cap_tensors : 256;
            ts_st_tensor *nt = realloc(st->tensors, cap * sizeof *nt);
            if (!nt) {
                rc = ts_errf(err, errlen, "out of memory");
                break;
            }
            st->tensors = nt, st->cap_tensors = cap;
        }
        ts_st_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof *t);
        t->file = fi;
        uint64_t b = 0, en = 0;
        rc = parse_entry(path, e, data, data_len, t, &b, &en, err, errlen);
        if (rc) break;
        t->name = strdup(e->string);
        if (!t->name) {
            rc = ts_errf(err, errlen, "out of memory");
            break;
        }
        st->n_tensors++;
        rc = hash_insert(st, st->n_tensors - 1, err, errlen);
        spans[n_spans++] = (span){b, en, st->n_tensors - 1};
    }
    cJSON_Delete(root);
    if (!rc && n_spans > 1) { /* no two tensors may share bytes */
        qsort(spans, n_spans, sizeof *spans, cmp_span);
        for (size_t i = 1; i < n_spans; i++)
            if (spans[i].begin < spans[i - 1].end) {
                rc = ts_errf(err, errlen, "%s: tensors '%s' and '%s' overlap in the data section", path,
                             st->tensors[spans[i - 1].tensor].name, st->tensors[spans[i].tensor].name);
                break;
            }
    }
    (void)first;
    free(spans);
    return rc;
}

int ts_st_open_file(const char *path, ts_st **out, char *err, size_t errlen) {
    *out = NULL;
    ts_st *st = calloc(1, sizeof *st);
    if (!st) return ts_errf(err, errlen, "out of memory");
    if (add_file(st, path, err, errlen)) {
        ts_st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

/* Reads a whole small file (the index) into a NUL-terminated buffer. */
static char *slurp(const char *path, size_t max, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 65536 * 2;
            char *nb = cap > max + 1 ? NULL : realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                ts_errf(err, errlen, "%s is larger than %zu bytes (or memory ran out)", path, max);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        ts_errf(err, errlen, "cannot read %s", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int open_index(ts_st *st, const char *dir, const char *index_path, char *err, size_t errlen) {
    size_t len;
    char *text = slurp(index_path, 256u << 20, &len, err, errlen);
    if (!text) return -1;
    if (ts_json_check_text(index_path, text, len, "a tensor index", err, errlen)) return free(text), -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return ts_errf(err, errlen, "%s: %s", index_path, root ? "no 'weight_map' object" : "not valid JSON");
    }
    int rc = 0;
    /* shards in order of first mention, each opened once */
    char **names = NULL;
    size_t n_names = 0;
    for (const cJSON *e = wm->child; !rc && e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) {
            rc = ts_errf(err, errlen, "%s: weight_map entry '%s' is not a file name", index_path, e->string);
            break;
        }
        const char *fn = e->valuestring;
        if (strchr(fn, '/') || strcmp(fn, ".") == 0 || strcmp(fn, "..") == 0) {
            rc = ts_errf(err, errlen,
                         "%s: weight_map names the file '%s', which is not a plain file name in the "
                         "checkpoint directory",
                         index_path, fn);
            break;
        }
        size_t i = 0;
        while (i < n_names && strcmp(names[i], fn) != 0) i++;
        if (i < n_names) continue;
        char **nn = realloc(names, (n_names + 1) * sizeof *nn);
        if (!nn) {
            rc = ts_errf(err, errlen, "out of memory");
            break;
        }
        names = nn;
        names[n_names++] = (char *)fn;
    }
    if (!rc && n_names == 0) rc = ts_errf(err, errlen, "%s: the weight_map is empty", index_path);
    for (size_t i = 0; !rc && i < n_names; i++) {
        size_t pl = strlen(dir) + strlen(names[i]) + 2;
        char *p = malloc(pl);
        if (!p) {
            rc = ts_errf(err, errlen, "out of memory");
            break;
        }
        snprintf(p, pl, "%s/%s", dir, names[i]);
        rc = add_file(st, p, err, errlen);
        free(p);
    }
    /* every entry must be where the index says */
    for (const cJSON *e = wm->child; !rc && e; e = e->next) {
        const ts_st_tensor *t = ts_st_find(st, e->string);
        const char *fp = t ? st->files[t->file].path : NULL;
        const char *base = fp ? strrchr(fp, '/') : NULL;
        base = base ? base + 1 : fp;
        if (!t || strcmp(base, e->valuestring) != 0)
            rc = ts_errf(err, errlen, "%s: tensor '%s' should be in %s but %s", index_path, e->string,
                         e->valuestring, t ? "is in another shard" : "no shard holds it");
    }
    free(names);
    cJSON_Delete(root);
    return rc;
}

int ts_st_open_dir(const char *dir, ts_st **out, char *err, size_t errlen) {
    *out = NULL;
    ts_st *st = calloc(1, sizeof *st);
    if (!st) return ts_errf(err, errlen, "out of memory");
    size_t pl = strlen(dir) + 64;
    char *p = malloc(pl);
    if (!p) {
        free(st);
        return ts_errf(err, errlen, "out of memory");
    }
    struct stat sb;
    int rc;
    snprintf(p, pl, "%s/model.safetensors.index.json", dir);
    if (stat(p, &sb) == 0) {
        rc = open_index(st, dir, p, err, errlen);
    } else {
        snprintf(p, pl, "%s/model.safetensors", dir);
        if (stat(p, &sb) == 0)
            rc = add_file(st, p, err, errlen);
        else
            rc = ts_errf(err, errlen, "%s holds neither model.safetensors nor model.safetensors.index.json",
                         dir);
    }
    free(p);
    if (rc) {
        ts_st_close(st);
        return -1;
    }
    *out = st;
    return 0;
}

void ts_st_read_f32(const ts_st_tensor *t, int64_t first, int64_t n, float *out) {
    const uint8_t *p = t->data + (uint64_t)first * k_dtypes[t->dtype].size;
    switch (t->dtype) {
    case TS_ST_F32:
        memcpy(out, p, (size_t)n * 4);
        break;
    case TS_ST_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = ts_bf16_to_fp32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    case TS_ST_F16:
        for (int64_t i = 0; i < n; i++) out[i] = ts_fp16_to_fp32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    default:
        for (int64_t i = 0; i < n; i++) out[i] = NAN; /* callers check ts_st_dtype_is_float first */
    }
}

bool ts_st_read_i64(const ts_st_tensor *t, int64_t i, int64_t *out) {
    const uint8_t *p = t->data + (uint64_t)i * 8;
    uint64_t u = 0;
    for (int b = 7; b >= 0; b--) u = u << 8 | p[b];
    if (t->dtype == TS_ST_I64 || t->dtype == TS_ST_U64) {
        if (t->dtype == TS_ST_U64 && u > INT64_MAX) return false;
        *out = (int64_t)u;
        return true;
    }
    if (t->dtype == TS_ST_F64) {
        double d;
        memcpy(&d, &u, sizeof d);
        if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != floor(d)) return false;
        *out = (int64_t)d;
        return true;
    }
    return false;
}

void ts_st_release(const ts_st_tensor *t, int64_t first, int64_t n) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t a = (uintptr_t)(t->data + (uint64_t)first * k_dtypes[t->dtype].size);
    uintptr_t b = a + (uint64_t)n * k_dtypes[t->dtype].size;
    a = (a + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page; /* whole pages inside the range only */
    b = b / (uintptr_t)page * (uintptr_t)page;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}
