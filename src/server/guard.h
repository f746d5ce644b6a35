/* The connection guard of turbospark serve: the bounds libmicrohttpd does not give.
 *
 * libmicrohttpd has a connection limit, a per-address limit and an idle timeout; an idle timeout
 * restarts with every byte, so a client that sends one header byte every few seconds holds its
 * connection (and, with enough of them, the server) forever. The guard keeps one record per
 * connection with its phase and when that phase began, and closes (shutdown(2) of a dup of the
 * socket: the connection's own thread then sees the end and cleans up) any connection that
 *   - has not sent a whole request head within header_timeout of connecting (or, on a kept-alive
 *     connection, of starting its next request line),
 *   - has not sent its whole body within body_timeout of its head,
 *   - sits idle between requests for longer than idle_timeout.
 * It also caps the connections being parsed (waiting for, or in the middle of, a request head or
 * body): when a new connection makes them more than max_parsing, or all connections more than
 * max_connections, the oldest one still waiting for its request head is closed — a flood of slow
 * clients cannot keep a new, fast one (GET /health, a monitor) out; the new one is closed instead
 * only when nothing older can go. Connections being answered (their request complete) are never
 * closed by the guard: the scheduler bounds them (slots + queue).
 *
 * Threads: records are touched by libmicrohttpd's threads (open, phase changes, close) and by the
 * guard's own watchdog thread (every 100 ms), under one mutex. */
#ifndef TS_SERVER_GUARD_H
#define TS_SERVER_GUARD_H

#include "server/metrics.h"

#include <stdbool.h>

typedef enum ts_conn_phase {
    TS_CONN_WAIT,    /* no request line yet (new, or kept alive after a response) */
    TS_CONN_HEADERS, /* request line received, head not complete */
    TS_CONN_BODY,    /* head complete, body arriving */
    TS_CONN_ANSWER,  /* request complete: being answered */
} ts_conn_phase;

typedef struct ts_guard_params {
    double header_timeout; /* seconds from connecting (or from a kept-alive request's first line) */
    double body_timeout;   /* seconds from the end of the head */
    double idle_timeout;   /* seconds a kept-alive connection may wait for its next request */
    int max_parsing;       /* connections in WAIT, HEADERS or BODY */
    int max_connections;   /* all connections */
} ts_guard_params;

typedef struct ts_guard ts_guard;
typedef struct ts_conn ts_conn;

int ts_guard_new(const ts_guard_params *p, ts_metrics *mt, ts_guard **out, char *err, size_t errlen);
void ts_guard_free(ts_guard *g); /* stops the watchdog; every record must have been closed */

/* A new connection on socket fd: its record (NULL when out of memory: not guarded). May close an
 * older connection, or this one, to keep the caps. */
ts_conn *ts_guard_open(ts_guard *g, int fd);
void ts_guard_close(ts_guard *g, ts_conn *c);
void ts_guard_phase(ts_guard *g, ts_conn *c, ts_conn_phase ph);
bool ts_guard_closed(ts_guard *g, ts_conn *c); /* the guard shut this connection down */

/* Shutdown: closes every connection that is not being answered. */
void ts_guard_close_idle(ts_guard *g);

/* Connections by phase (for /metrics). */
void ts_guard_counts(ts_guard *g, int counts[4]);

#endif
