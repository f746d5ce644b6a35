/* Slot files (see slotfile.h). */
#include "server/slotfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char k_magic[8] = {'T', 'S', 'S', 'L', 'O', 'T', 0, 0};
enum { k_version = 1, k_header = 8 + 4 + 4 + 8 + 8 };

/* FNV-1a 64, continued from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
    return h;
}

/* Writes all of p[0 .. n) to fd. 0, or −1 with errno. */
static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

int ts_slotfile_save(const char *dir, const char *name, const ts_session *sess, const int32_t *ids, size_t n,
                     uint64_t *written, char *err, size_t errlen) {
    *written = 0;
    if ((int64_t)n != ts_session_pos(sess))
        return ts_errf(err, errlen, "the slot holds %zu token ids but its state %" PRId64 " tokens", n,
                       ts_session_pos(sess));
    ts_snapshot *snap = NULL;
    void *state = NULL;
    size_t state_n = 0;
    if (ts_session_snapshot(sess, &snap, err, errlen) ||
        ts_snapshot_encode(snap, &state, &state_n, err, errlen)) {
        ts_snapshot_free(snap);
        return -1;
    }
    ts_snapshot_free(snap);
    unsigned char head[k_header];
    const uint32_t version = k_version, zero = 0;
    const uint64_t count = n, sum = fnv(fnv(0xcbf29ce484222325ull, ids, n * sizeof *ids), state, state_n);
    memcpy(head, k_magic, 8);
    memcpy(head + 8, &version, 4);
    memcpy(head + 12, &zero, 4);
    memcpy(head + 16, &count, 8);
    memcpy(head + 24, &sum, 8);

    char tmp[4096], path[4096];
    int rc = 0;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.slot-save.XXXXXX", dir) >= sizeof tmp ||
        (size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        free(state);
        return ts_errf(err, errlen, "the path %.200s/%.200s is too long", dir, name);
    }
    struct stat st;
    if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
        free(state);
        ts_errf(err, errlen, "'%s' exists in the slot directory and is not a regular file", name);
        return -2;
    }
    int fd = mkstemp(tmp); /* a name of its own: two saves at once never write the same file */
    if (fd < 0) {
        rc = ts_errf(err, errlen, "cannot create a file in %s: %s", dir, strerror(errno));
    } else {
        if (write_all(fd, head, sizeof head) || write_all(fd, ids, n * sizeof *ids) ||
            write_all(fd, state, state_n))
            rc = ts_errf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        if (close(fd) && !rc) rc = ts_errf(err, errlen, "cannot write %s: %s", tmp, strerror(errno));
        if (!rc && rename(tmp, path)) rc = ts_errf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        if (rc) unlink(tmp);
    }
    free(state);
    if (!rc) *written = sizeof head + n * sizeof *ids + state_n;
    return rc;
}

int ts_slotfile_load(const char *dir, const char *name, const ts_model *m, uint64_t max_bytes,
                     ts_snapshot **snap, ts_tokens *ids, uint64_t *read_n, bool *missing, char *err,
                     size_t errlen) {
    *snap = NULL, *read_n = 0, *missing = false;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return ts_errf(err, errlen, "the path %.200s/%.200s is too long", dir, name);
    /* O_NONBLOCK: a FIFO put there must not hang the request; it is refused below */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        return ts_errf(err, errlen,
                       *missing ? "there is no file '%s' in the slot directory" : "cannot open %s: %s",
                       *missing ? name : path, strerror(errno));
    }
    struct stat st;
    unsigned char *data = NULL;
    int rc = 0;
    if (fstat(fd, &st))
        rc = ts_errf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = ts_errf(err, errlen, "'%s' is not a regular file", name);
    else if ((uint64_t)st.st_size > max_bytes)
        rc = ts_errf(err, errlen,
                     "'%s' is %" PRIu64
                     " bytes, more than the state of any slot of this server can be (%" PRIu64
                     "): not a slot file of this server",
                     name, (uint64_t)st.st_size, max_bytes);
    else if (!(data = malloc(st.st_size ? (size_t)st.st_size : 1)))
        rc = ts_errf(err, errlen, "out of memory reading '%s' (%" PRIu64 " bytes)", name,
                     (uint64_t)st.st_size);
    size_t size = rc ? 0 : (size_t)st.st_size, got = 0;
    while (!rc && got < size) {
        ssize_t r = read(fd, data + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = ts_errf(err, errlen, "cannot read %s: %s", path, r ? strerror(errno) : "it became shorter");
            break;
        }
        got += (size_t)r;
    }
    close(fd);
    uint32_t version = 0;
    uint64_t n = 0, sum = 0;
    if (!rc && (size < k_header || memcmp(data, k_magic, 8)))
        rc = ts_errf(err, errlen, "'%s' is not a turbospark slot file (no TSSLOT header)", name);
    if (!rc) {
        memcpy(&version, data + 8, 4), memcpy(&n, data + 16, 8), memcpy(&sum, data + 24, 8);
        if (version != k_version)
            rc = ts_errf(err, errlen,
                         "'%s' is a slot file of format version %" PRIu32 " (this build reads %d)", name,
                         version, k_version);
        else if (n > (size - k_header) / sizeof(int32_t))
            rc = ts_errf(err, errlen,
                         "'%s' says %" PRIu64 " tokens but is only %zu bytes: it is truncated or damaged",
                         name, n, size);
        else if (fnv(0xcbf29ce484222325ull, data + k_header, size - k_header) != sum)
            rc = ts_errf(err, errlen,
                         "'%s' is damaged: its bytes do not match the checksum it was saved with", name);
    }
    const int32_t n_vocab = ts_model_n_vocab(m);
    for (uint64_t i = 0; !rc && i < n; i++) {
        int32_t id;
        memcpy(&id, data + k_header + i * sizeof id, sizeof id);
        if (id < 0 || id >= n_vocab)
            rc = ts_errf(err, errlen,
                         "'%s' holds token id %" PRId32 " at %" PRIu64 ", outside the vocabulary (0..%" PRId32
                         "): it is damaged",
                         name, id, i, n_vocab - 1);
        else if (ts_tokens_push(ids, id))
            rc = ts_errf(err, errlen, "out of memory reading '%s'", name);
    }
    char e2[512];
    const size_t at = k_header + (size_t)n * sizeof(int32_t);
    if (!rc && ts_snapshot_decode(m, data + at, size - at, snap, e2, sizeof e2))
        rc = ts_errf(err, errlen, "'%s': %s", name, e2);
    if (!rc && ts_snapshot_pos(*snap) != (int64_t)n)
        rc = ts_errf(err, errlen,
                     "'%s' holds %" PRIu64 " token ids but a state of %" PRId64 " tokens: it is damaged",
                     name, n, ts_snapshot_pos(*snap));
    free(data);
    if (rc) {
        ts_snapshot_free(*snap);
        *snap = NULL;
        return -1;
    }
    *read_n = size;
    return 0;
}
