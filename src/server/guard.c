/* The connection guard (see guard.h). */
#include "server/guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct ts_conn {
    int fd; /* our dup of the connection's socket: valid until ts_guard_close */
    ts_conn_phase phase;
    bool first;   /* no request finished on it yet */
    bool closed;  /* shut down by the guard */
    double since; /* when the phase's deadline started (monotonic seconds) */
    ts_conn *prev, *next;
};

struct ts_guard {
    ts_guard_params p;
    ts_metrics *mt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t watchdog;
    bool stop;
    ts_conn *head, *tail; /* oldest first (new records are appended) */
    int n[4];             /* open records by phase, not counting closed ones */
    int n_open;
};

/* Under mu. */
static void shut(ts_guard *g, ts_conn *c, ts_close_reason why) {
    if (c->closed) return;
    c->closed = true;
    g->n[c->phase]--, g->n_open--;
    shutdown(c->fd, SHUT_RDWR); /* the connection's thread reads the end and closes it */
    ts_metrics_conn_closed(g->mt, why);
}

/* Under mu: the deadline of c, or 0 for none. */
static double deadline(const ts_guard *g, const ts_conn *c) {
    switch (c->phase) {
    case TS_CONN_WAIT:
        return c->since + (c->first ? g->p.header_timeout : g->p.idle_timeout);
    case TS_CONN_HEADERS:
        return c->since + g->p.header_timeout;
    case TS_CONN_BODY:
        return c->since + g->p.body_timeout;
    default:
        return 0;
    }
}

static void *watchdog_main(void *arg) {
    ts_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = ts_now();
        for (ts_conn *c = g->head; c; c = c->next) {
            double d = deadline(g, c);
            if (c->closed || d == 0 || now < d) continue;
            shut(g, c,
                 c->phase == TS_CONN_BODY                ? TS_CLOSE_BODY_DEADLINE
                 : c->phase == TS_CONN_WAIT && !c->first ? TS_CLOSE_IDLE_DEADLINE
                                                         : TS_CLOSE_HEADER_DEADLINE);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int ts_guard_new(const ts_guard_params *p, ts_metrics *mt, ts_guard **out, char *err, size_t errlen) {
    *out = NULL;
    ts_guard *g = calloc(1, sizeof *g);
    if (!g) return ts_errf(err, errlen, "out of memory");
    g->p = *p, g->mt = mt;
    if (pthread_mutex_init(&g->mu, NULL)) {
        free(g);
        return ts_errf(err, errlen, "cannot create a mutex");
    }
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->watchdog, NULL, watchdog_main, g)) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return ts_errf(err, errlen, "cannot start the connection watchdog thread");
    }
    *out = g;
    return 0;
}

void ts_guard_free(ts_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->watchdog, NULL);
    while (g->head) ts_guard_close(g, g->head); /* none, after the daemon stopped */
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* Under mu: the oldest connection still waiting for a request head, other than `skip`. */
static ts_conn *oldest_waiting(ts_guard *g, const ts_conn *skip) {
    ts_conn *best = NULL;
    for (ts_conn *c = g->head; c; c = c->next)
        if (c != skip && !c->closed && (c->phase == TS_CONN_WAIT || c->phase == TS_CONN_HEADERS) &&
            (!best || c->since < best->since))
            best = c;
    return best;
}

ts_conn *ts_guard_open(ts_guard *g, int fd) {
    ts_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if ((c->fd = dup(fd)) < 0) { /* out of descriptors: not guarded, but not refused either */
        free(c);
        return NULL;
    }
    c->phase = TS_CONN_WAIT, c->first = true, c->since = ts_now();
    pthread_mutex_lock(&g->mu);
    c->prev = g->tail;
    if (g->tail)
        g->tail->next = c;
    else
        g->head = c;
    g->tail = c;
    g->n[TS_CONN_WAIT]++, g->n_open++;
    while (g->n[TS_CONN_WAIT] + g->n[TS_CONN_HEADERS] + g->n[TS_CONN_BODY] > g->p.max_parsing ||
           g->n_open > g->p.max_connections) {
        ts_conn *victim = oldest_waiting(g, c);
        shut(g, victim ? victim : c, TS_CLOSE_EVICTED);
        if (!victim) break;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

void ts_guard_close(ts_guard *g, ts_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (!c->closed) g->n[c->phase]--, g->n_open--;
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        g->tail = c->prev;
    pthread_mutex_unlock(&g->mu);
    close(c->fd);
    free(c);
}

void ts_guard_phase(ts_guard *g, ts_conn *c, ts_conn_phase ph) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (!c->closed) g->n[c->phase]--, g->n[ph]++;
    /* a first request's head is timed from the connection itself (its request line too) */
    if (!(ph == TS_CONN_HEADERS && c->first)) c->since = ts_now();
    if (ph == TS_CONN_WAIT && c->phase != TS_CONN_WAIT) c->first = false; /* a request finished */
    c->phase = ph;
    pthread_mutex_unlock(&g->mu);
}

bool ts_guard_closed(ts_guard *g, ts_conn *c) {
    if (!c) return false;
    pthread_mutex_lock(&g->mu);
    bool closed = c->closed;
    pthread_mutex_unlock(&g->mu);
    return closed;
}

void ts_guard_close_idle(ts_guard *g) {
    pthread_mutex_lock(&g->mu);
    for (ts_conn *c = g->head; c; c = c->next)
        if (c->phase != TS_CONN_ANSWER) shut(g, c, TS_CLOSE_SHUTDOWN);
    pthread_mutex_unlock(&g->mu);
}

void ts_guard_counts(ts_guard *g, int counts[4]) {
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < 4; i++) counts[i] = g->n[i];
    pthread_mutex_unlock(&g->mu);
}
