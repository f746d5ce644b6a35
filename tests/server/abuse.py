#!/usr/bin/env python3
"""Abuse of a running `turbospark serve` on loopback (driven by test_abuse.sh; standard library only).

    abuse.py flood URL PID          slow headers, deadlines, big bodies, browsers' checks, error bodies
    abuse.py cors URL               a server started with --cors http://ok.example --allow-host my.box
    abuse.py hold URL N SECONDS     N connections that trickle a request head (for the shutdown check)

Every count and wait is bounded; the figures asked for in issue 17 are printed (/health latency
during a slow-header flood, peak RSS for 8 concurrent 8 MiB bodies). Exit status 1 on any failure.
The server under test runs with --header-timeout 2 --body-timeout 2 --max-connections 200 and the
default --max-parsing 64 (see test_abuse.sh)."""
import json
import os
import socket
import sys
import threading
import time
import urllib.parse

FAILS = []


def bad(msg):
    print("FAIL: " + msg)
    FAILS.append(msg)


def addr(url):
    u = urllib.parse.urlparse(url)
    return u.hostname, u.port


def request(url, raw, timeout=10.0):
    """Sends raw bytes on a new connection; returns (status, headers dict, body bytes, seconds)."""
    t = time.monotonic()
    s = socket.create_connection(addr(url), timeout=timeout)
    try:
        s.sendall(raw)
        buf = b""
        while b"\r\n\r\n" not in buf:
            b = s.recv(65536)
            if not b:
                raise ConnectionError("closed before a response head (%r)" % buf[:80])
            buf += b
        head, body = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        n = int(hdrs.get("content-length", "-1"))
        while n < 0 or len(body) < n:
            b = s.recv(65536)
            if not b:
                break
            body += b
        return status, hdrs, body, time.monotonic() - t
    finally:
        s.close()


def http(url, method, path, body=b"", headers=None, timeout=10.0):
    h = {"Host": "%s:%d" % addr(url)}
    if body or method == "POST":
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    raw = ("%s %s HTTP/1.1\r\n" % (method, path)).encode("latin-1")
    for k, v in h.items():
        raw += k.encode("latin-1") + b": " + (v if isinstance(v, bytes) else v.encode("latin-1")) + b"\r\n"
    return request(url, raw + b"\r\n" + body, timeout)


JSON = {"Content-Type": "application/json"}


def check_error_body(what, status, hdrs, body, code=None):
    """Our error bodies: application/json, strict UTF-8, {"error": {message, type, param, code}}."""
    if "application/json" not in hdrs.get("content-type", ""):
        bad("%s: %d answered with content-type %r, not JSON: %r" % (what, status, hdrs.get("content-type"), body[:100]))
        return
    try:
        e = json.loads(body.decode("utf-8", "strict"))["error"]
        assert set(e) == {"message", "type", "param", "code"}, sorted(e)
        assert code is None or e["code"] == code, "code %r, expected %r" % (e["code"], code)
    except Exception as x:  # noqa: BLE001 (any defect is the finding)
        bad("%s: error body %r: %s" % (what, body[:200], x))


def expect(what, got, status, code=None):
    st, hdrs, body, _ = got
    if st != status:
        bad("%s: HTTP %d, expected %d: %r" % (what, st, status, body[:200]))
    elif status >= 400:
        check_error_body(what, st, hdrs, body, code)
    return got


def vm(pid, key):
    for ln in open("/proc/%d/status" % pid):
        if ln.startswith(key + ":"):
            return int(ln.split()[1])  # KiB
    return 0


def metric(url, name):
    st, _, body, _ = http(url, "GET", "/metrics")
    for ln in body.decode().splitlines():
        if ln.startswith(name + " "):
            return float(ln.split()[-1])
    return 0.0


# ---- slow clients -------------------------------------------------------------------------------

class Trickler(threading.Thread):
    """Keeps n connections open, each sending one header line every `every` seconds and never
    finishing its head; reopens a connection the server closed (as an attacker would)."""

    def __init__(self, url, n, every=0.5, reopen=True):
        super().__init__(daemon=True)
        self.url, self.n, self.every, self.reopen = url, n, every, reopen
        self.stop = False
        self.opened = self.closed_by_server = 0

    def run(self):
        socks = []
        while not self.stop:
            while len(socks) < self.n and not self.stop and (self.reopen or self.opened < self.n):
                try:
                    s = socket.create_connection(addr(self.url), timeout=2)
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    s.setblocking(False)
                    socks.append(s)
                    self.opened += 1
                except OSError:
                    time.sleep(0.01)
                    break
            if not self.reopen and self.opened >= self.n and not socks:
                break
            time.sleep(self.every)
            alive = []
            for s in socks:
                try:
                    s.send(b"X-Slow: 1\r\n")
                    if s.recv(1, socket.MSG_PEEK) == b"":
                        raise ConnectionError
                    alive.append(s)
                except BlockingIOError:
                    alive.append(s)  # nothing to read: still open
                except OSError:
                    self.closed_by_server += 1
                    s.close()
            socks = alive
        for s in socks:
            s.close()


def slow_headers(url):
    """520 slow-header connections against --max-connections 200: /health must still answer."""
    fl = Trickler(url, 520, every=0.5)
    fl.start()
    time.sleep(1.0)
    lat, failed, why = [], 0, []
    t_end = time.monotonic() + 5
    while time.monotonic() < t_end:
        try:
            st, _, _, dt = http(url, "GET", "/health", timeout=5)
            if st != 200:
                failed += 1
            lat.append(dt)
        except OSError as x:
            failed += 1
            why.append(repr(x)[:60])
        time.sleep(0.1)
    fl.stop = True
    fl.join(10)
    lat.sort()
    p50 = lat[len(lat) // 2] if lat else -1
    print("slow-header flood (520 tricklers, reconnecting): %d /health requests, %d failed, latency p50 %.1f ms, "
          "max %.1f ms; %d flood connections opened, %d closed by the server"
          % (len(lat) + failed, failed, p50 * 1e3, (lat[-1] if lat else -1) * 1e3, fl.opened, fl.closed_by_server))
    # Each new connection closes the oldest one still waiting for its head; a probe is lost only
    # when 64 flood connections arrive before its thread reads its head (seen 0 to 3 times in 50 on
    # 2 busy cores at ~1,000 flood connections/s). Before the guard, every new connection failed
    # while such a flood held (issue 17).
    if failed > 2 or not lat:
        bad("/health failed %d times during the slow-header flood: %s" % (failed, "; ".join(why[:3])))
    elif lat[-1] > 2.0:
        bad("/health took %.2f s during the slow-header flood" % lat[-1])


def deadlines(url):
    """A few slow clients (no eviction): the head deadline (2 s) closes them although every byte
    resets libmicrohttpd's 60 s idle timeout; the body deadline (2 s) likewise."""
    t0 = time.monotonic()
    fl = Trickler(url, 3, every=0.3, reopen=False)
    fl.start()
    fl.join(8)
    dt = time.monotonic() - t0
    if fl.closed_by_server != 3:
        bad("head deadline: %d of 3 slow heads were closed within %.1f s" % (fl.closed_by_server, dt))
    elif dt < 1.5:
        bad("head deadline: closed after %.1f s, before the 2 s deadline" % dt)
    else:
        print("head deadline: 3 slow heads closed after %.1f s (--header-timeout 2)" % dt)
    s = socket.create_connection(addr(url), timeout=2)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100000\r\n\r\n{\"prompt\":\"")
    t0, closed = time.monotonic(), False
    while time.monotonic() - t0 < 8 and not closed:
        time.sleep(0.3)
        try:
            s.sendall(b"aaaaaaaaaa")
            s.setblocking(False)
            closed = s.recv(1, socket.MSG_PEEK) == b""
            s.setblocking(True)
        except BlockingIOError:
            s.setblocking(True)
        except OSError:
            closed = True
    dt = time.monotonic() - t0
    s.close()
    if not closed or dt < 1.5:
        bad("body deadline: a trickled body was %s after %.1f s" % ("closed" if closed else "still open", dt))
    else:
        print("body deadline: a trickled body closed after %.1f s (--body-timeout 2)" % dt)


def big_bodies(url, pid):
    """8 concurrent 8 MiB bodies of each kind: refused before a tree is built; peak RSS bounded."""
    n_ids = (8 << 20) // 2 - 32
    kinds = {
        "token ids": (b"/v1/completions", b'{"prompt":[' + b"1," * (n_ids - 1) + b'1]}', 413, "request_too_large"),
        "messages": (b"/v1/chat/completions",
                     b'{"messages":[' + b'{"role":"user","content":"a"},' * ((8 << 20) // 31 - 1)
                     + b'{"role":"user","content":"a"}]}', 413, "request_too_large"),
        "prompt text": (b"/v1/completions", b'{"prompt":"' + b"a" * ((8 << 20) - 16) + b'"}', 400,
                        "context_length_exceeded"),
    }
    hwm0 = vm(pid, "VmHWM")
    for name, (path, body, status, code) in kinds.items():
        assert len(body) <= 8 << 20, len(body)
        res = [None] * 8
        t0 = time.monotonic()

        def one(i):
            try:
                res[i] = http(url, "POST", path.decode(), body, JSON, timeout=60)
            except OSError as x:
                res[i] = x
        th = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in th:
            t.start()
        for t in th:
            t.join(90)
        dt = time.monotonic() - t0
        for i, r in enumerate(res):
            if isinstance(r, tuple):
                expect("8 MiB %s #%d" % (name, i), r, status, code)
            else:
                bad("8 MiB %s #%d: %r" % (name, i, r))
        print("8 concurrent 8 MiB bodies (%s): refused in %.2f s, server peak RSS now %.0f MiB"
              % (name, dt, vm(pid, "VmHWM") / 1024))
    grew = (vm(pid, "VmHWM") - hwm0) / 1024
    print("peak RSS grew by %.0f MiB over 24 refused 8 MiB requests (8 at a time)" % grew)
    if os.environ.get("TS_SANITIZE") == "1":  # ASan keeps freed memory in quarantine: no RSS bound
        print("(sanitizer build: the peak-RSS bound is not checked)")
    elif grew > 320:
        bad("8 concurrent 8 MiB requests raised the server's peak RSS by %.0f MiB (bound 320)" % grew)


def browsers(url):
    port = addr(url)[1]
    body = b'{"prompt":"And","max_tokens":1}'
    expect("text/plain POST", http(url, "POST", "/v1/completions", body, {"Content-Type": "text/plain"}), 415,
           "unsupported_media_type")
    expect("form POST", http(url, "POST", "/v1/completions", body,
                             {"Content-Type": "application/x-www-form-urlencoded"}), 415, "unsupported_media_type")
    expect("POST without Content-Type", http(url, "POST", "/v1/completions", body), 415, "unsupported_media_type")
    expect("application/json; charset=utf-8",
           http(url, "POST", "/v1/completions", body, {"Content-Type": "Application/JSON; charset=utf-8"}), 200)
    expect("Host evil.example", http(url, "GET", "/health", headers={"Host": "evil.example"}), 403, "host_not_allowed")
    expect("Host evil.example POST", http(url, "POST", "/v1/completions", body, dict(JSON, Host="evil.example:%d" % port)),
           403, "host_not_allowed")
    expect("Host 127.1.2.3.nip.io", http(url, "GET", "/health", headers={"Host": "127.1.2.3.nip.io"}), 403)
    for h in ("localhost:%d" % port, "127.0.0.1", "[::1]:%d" % port, "LOCALHOST"):
        expect("Host " + h, http(url, "GET", "/health", headers={"Host": h}), 200)
    got = expect("foreign Origin POST", http(url, "POST", "/v1/completions", body,
                                             dict(JSON, Origin="http://evil.example")), 403, "origin_not_allowed")
    st, hdrs, _, _ = http(url, "GET", "/health", headers={"Origin": "http://evil.example"})
    if any(k.startswith("access-control-") for k in list(hdrs) + list(got[1])):
        bad("CORS headers without --cors: %r" % hdrs)
    expect("OPTIONS without --cors", http(url, "OPTIONS", "/v1/completions",
                                          headers={"Origin": "http://evil.example",
                                                   "Access-Control-Request-Method": "POST"}), 405)


def cors(url):
    body = b'{"prompt":"And","max_tokens":1}'
    ok = {"Origin": "http://ok.example"}
    st, hdrs, _, _ = expect("preflight", http(url, "OPTIONS", "/v1/chat/completions", headers=dict(
        ok, **{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})), 204)
    if hdrs.get("access-control-allow-origin") != "http://ok.example" or "POST" not in hdrs.get(
            "access-control-allow-methods", "") or "content-type" not in hdrs.get("access-control-allow-headers", "").lower():
        bad("preflight headers: %r" % hdrs)
    st, hdrs, _, _ = expect("POST from the --cors origin", http(url, "POST", "/v1/completions", body, dict(JSON, **ok)),
                            200)
    if hdrs.get("access-control-allow-origin") != "http://ok.example":
        bad("no Access-Control-Allow-Origin on an allowed POST: %r" % hdrs)
    expect("POST from another origin", http(url, "POST", "/v1/completions", body,
                                            dict(JSON, Origin="http://evil.example")), 403, "origin_not_allowed")
    expect("preflight from another origin", http(url, "OPTIONS", "/v1/completions",
                                                 headers={"Origin": "http://evil.example"}), 405)
    expect("--allow-host my.box", http(url, "GET", "/health", headers={"Host": "my.box:8080"}), 200)
    expect("Host other.box", http(url, "GET", "/health", headers={"Host": "other.box"}), 403, "host_not_allowed")


def error_bodies(url):
    """Hostile bytes echoed in error messages: every error body of ours is valid UTF-8 JSON."""
    cases = [
        ("GET", "/v1/" + "%C3%A9" * 70 + "%C3", b"", {}),                    # a path cut inside a character
        ("GET", "/v1/models/%FF%FE" + "%E2%82%AC" * 50, b"", {}),
        ("GET", "/v1/%00%01%1b[31m", b"", {}),                               # control characters
        ("POST", "/v1/chat/completions", b'{"messages":[{"role":"\xff' + "\u00e9".encode() * 40 + b'","content":"x"}]}', JSON),
        ("POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":[{"type":"\xc3\xa9\xe2\x82' + b'x' * 80 + b'"}]}]}', JSON),
        ("POST", "/v1/completions", b'{"prompt":"x","response_format":{"type":"' + "\u20ac".encode() * 30 + b'"}}', JSON),
        ("POST", "/v1/completions", b"{}", {"Content-Type": b"text/\xff\xfe" + "\u00e9".encode() * 40}),
        ("POST", "/v1/completions", b"{}", dict(JSON, **{"Transfer-Encoding": b"gzip\xc3" + b"\xa9" * 3})),
        ("GET", "/health", b"", {"Host": b"\xe2\x82\xac" * 30 + b"\xe2"}),
        ("POST", "/v1/completions", b"{}", dict(JSON, Origin=b"http://\xf0\x9f\x98\x80" * 20)),
        ("POST", "/v1/completions", b'{"prompt":"x","repetition_penalty":1e-50}', JSON),
        ("POST", "/v1/completions", b'{"prompt":"x","max_tokens":"\xff"}', JSON),
    ]
    n = 0
    for method, path, body, hdrs in cases:
        try:
            st, h, b, _ = http(url, method, path, body, hdrs)
        except OSError as x:
            bad("%s %s: %r" % (method, path[:40], x))
            continue
        if st < 400:
            bad("%s %s: HTTP %d, expected an error" % (method, path[:40], st))
            continue
        n += 1
        check_error_body("%s %s" % (method, path[:40]), st, h, b)
    print("%d error bodies with hostile bytes echoed: all valid UTF-8 JSON" % n if not FAILS else "")


def protocol(url):
    expect("Transfer-Encoding: gzip, chunked", http(url, "POST", "/v1/completions", b"5\r\nhello\r\n0\r\n\r\n",
                                                     dict(JSON, **{"Transfer-Encoding": "gzip, chunked"})), 501,
           "unsupported_transfer_encoding")
    t0 = time.monotonic()
    expect("Transfer-Encoding: identity", request(url, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                       b"Content-Type: application/json\r\n"
                                                       b"Transfer-Encoding: identity\r\n\r\n{\"prompt\":\"x\"}", 5),
           501, "unsupported_transfer_encoding")
    if time.monotonic() - t0 > 2:
        bad("Transfer-Encoding: identity took %.1f s to answer" % (time.monotonic() - t0))
    expect("repetition_penalty 1e-50", http(url, "POST", "/v1/completions",
                                            b'{"prompt":"x","repetition_penalty":1e-50}', JSON), 400, "invalid_value")
    # a head libmicrohttpd refuses itself (431) is counted in /metrics, not lost
    before = metric(url, 'turbospark_http_requests_unanswered_total{reason="http_error"}')
    try:
        st, _, _, _ = request(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
        if st != 431:
            bad("a 70 kB header: HTTP %d, expected libmicrohttpd's 431" % st)
    except OSError as x:
        bad("a 70 kB header: %r" % x)
    time.sleep(0.2)
    after = metric(url, 'turbospark_http_requests_unanswered_total{reason="http_error"}')
    if after != before + 1:
        bad("/metrics counted %g malformed-HTTP refusals for one" % (after - before))


def accounting(url):
    m = {}
    st, _, body, _ = http(url, "GET", "/metrics")
    for ln in body.decode().splitlines():
        if ln and not ln.startswith("#"):
            k, v = ln.rsplit(" ", 1)
            m[k] = float(v)
    print("metrics: " + ", ".join("%s=%g" % (k.replace("turbospark_http_", ""), v) for k, v in sorted(m.items())
                                  if k.startswith("turbospark_http_") and v))
    for code in ("403", "405", "413", "415", "501"):
        if not m.get('turbospark_http_requests_total{code="%s"}' % code):
            bad("/metrics counted no %s although the server sent some" % code)
    if m.get('turbospark_http_requests_total{code="500"}'):
        bad("/metrics counts 500s, but the server sent none")
    for why in ("header_deadline", "body_deadline", "evicted"):
        if not m.get('turbospark_http_connections_closed_total{reason="%s"}' % why):
            bad("/metrics: no connection closed for %s" % why)


def hold(url, n, seconds):
    fl = Trickler(url, n, every=0.5, reopen=False)
    fl.start()
    time.sleep(seconds)


def main():
    cmd, url = sys.argv[1], sys.argv[2]
    if cmd == "hold":
        hold(url, int(sys.argv[3]), float(sys.argv[4]))
        return 0
    if cmd == "cors":
        cors(url)
    else:
        pid = int(sys.argv[3])
        slow_headers(url)
        deadlines(url)
        protocol(url)
        browsers(url)
        error_bodies(url)
        big_bodies(url, pid)
        accounting(url)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
