"""Helpers for the `tachyon serve` integration tests (Python standard library only).

Server(...) starts `$TACHYON_BIN serve --port 0 ...` on the embedded tiny model and reads the
port it chose from its "serving ... on http://HOST:PORT" line; stop() sends SIGTERM and checks
the exit status and that the log holds no sanitizer report. request()/stream() are small
HTTP/1.1 clients over raw sockets (so that tests control every byte), and arequest()/astream()
their asyncio twins for many concurrent clients.
"""
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

BIN = os.environ.get("TACHYON_BIN")
FIXTURES = os.environ.get("TACHYON_FIXTURES")
SANITIZER = re.compile(r"AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer|runtime error:")


class Server:
    def __init__(self, *args, env=None, start_timeout=120):
        if not BIN:
            raise RuntimeError("TACHYON_BIN is not set")
        cmd = [BIN, "serve", "--port", "0", "--threads", "2", "--kv-cache-memory", "128MiB",
               "--stats-interval", "0"] + [str(a) for a in args]
        full_env = dict(os.environ)
        full_env.pop("TACHYON_API_KEY", None)
        full_env.update(env or {})
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=full_env)
        self.lines = []
        self.port = None
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._ready.wait(start_timeout) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start: %s\n%s" % (cmd, self.log()))
        self.host = "127.0.0.1"

    def _read_log(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            m = re.search(r"serving .* on http://[^ ]*:(\d+)", line)
            if m and self.port is None:
                self.port = int(m.group(1))
                self._ready.set()
        self._ready.set()

    def log(self):
        return "".join(self.lines)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Stops the server; returns its exit status. Raises when it fails to stop in time or
        the log holds a sanitizer report."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("server did not stop within %ss\n%s" % (timeout, self.log()[-4000:]))
        self._reader.join(10)
        if SANITIZER.search(self.log()):
            raise AssertionError("sanitizer report in the server log:\n" + self.log()[-8000:])
        return rc

    # -- metrics ---------------------------------------------------------------------------
    def metrics(self):
        st, _, body = request(self, "GET", "/metrics")
        assert st == 200, st
        return parse_metrics(body.decode())

    def wait_metric(self, name, value, timeout=60, **labels):
        """Waits until /metrics shows name{labels} == value (a loaded machine is slow to get
        there); returns the metrics."""
        end = time.time() + timeout
        while True:
            m = self.metrics()
            if metric(m, name, **labels) == value:
                return m
            if time.time() > end:
                raise AssertionError("%s is %s, not %s, after %ss" % (name, metric(m, name, **labels), value,
                                                                    timeout))
            time.sleep(0.05)

    def wait_idle(self, timeout=60):
        """Waits until nothing runs, waits or holds KV blocks; returns the last metrics."""
        end = time.time() + timeout
        while True:
            m = self.metrics()
            if (metric(m, "vllm:kv_cache_usage_perc") == 0 and metric(m, "vllm:num_requests_running") == 0
                    and metric(m, "vllm:num_requests_waiting") == 0
                    and metric(m, "tachyon:requests_in_flight") == 0):
                return m
            if time.time() > end:
                raise AssertionError("server not idle after %ss: kv=%s running=%s waiting=%s in_flight=%s" % (
                    timeout, metric(m, "vllm:kv_cache_usage_perc"), metric(m, "vllm:num_requests_running"),
                    metric(m, "vllm:num_requests_waiting"), metric(m, "tachyon:requests_in_flight")))
            time.sleep(0.1)


def parse_metrics(text):
    """{(name, frozenset(labels)): value}"""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, "bad metrics line: %r" % line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def metric(metrics, name, **labels):
    """The value of a series; labels given must match, others (engine, model_name) are free."""
    want = set(labels.items())
    vals = [v for (n, ls), v in metrics.items() if n == name and want <= set(ls)]
    assert len(vals) == 1, "%s%s: %d series" % (name, labels, len(vals))
    return vals[0]


# -- HTTP over raw sockets ----------------------------------------------------------------------

def build(method, path, body=None, headers=None, host="127.0.0.1"):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    hs = {"Host": host}
    if body is not None:
        hs["Content-Type"] = "application/json"
        hs["Content-Length"] = str(len(body))
    hs.update(headers or {})
    head = "%s %s HTTP/1.1\r\n" % (method, path) + "".join(
        "%s: %s\r\n" % (k, v) for k, v in hs.items() if v is not None) + "\r\n"
    return head.encode() + (body or b"")


class Reader:
    """Reads an HTTP/1.1 response from a socket, with a deadline."""

    def __init__(self, sock, timeout=60):
        self.sock = sock
        self.buf = b""
        self.deadline = time.time() + timeout

    def _more(self):
        left = self.deadline - time.time()
        if left <= 0:
            raise TimeoutError("response timed out")
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("connection closed")
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def head(self):
        status = self.line()
        parts = status.split(b" ", 2)
        code = int(parts[1])
        headers = {}
        while True:
            line = self.line()
            if not line:
                break
            k, v = line.split(b":", 1)
            headers[k.decode().strip().lower()] = v.decode().strip()
        return code, headers

    def chunks(self, headers):
        """Yields the body in pieces as they arrive."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    while self.line():
                        pass
                    return
                data = self.exact(size)
                self.exact(2)
                yield data
        else:
            n = int(headers.get("content-length", "0"))
            if n:
                yield self.exact(n)


def connect(server, timeout=60):
    s = socket.create_connection((server.host, server.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def request(server, method, path, body=None, headers=None, timeout=120, raw=None):
    """One request on a new connection: (status, headers, body bytes)."""
    s = connect(server, timeout)
    try:
        s.sendall(raw if raw is not None else build(method, path, body, headers))
        r = Reader(s, timeout)
        code, hs = r.head()
        data = b"".join(r.chunks(hs))
        return code, hs, data
    finally:
        s.close()


def post_json(server, path, body, headers=None, timeout=120):
    code, hs, data = request(server, "POST", path, body, headers, timeout)
    try:
        return code, json.loads(data) if data else None
    except ValueError:
        raise AssertionError("not JSON (%d): %r" % (code, data[:500]))


def sse_events(pieces):
    """Splits an SSE byte stream into events: ("data", str) and ("comment", str), with arrival
    times."""
    buf = b""
    for piece in pieces:
        buf += piece
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            t = time.time()
            for line in ev.decode("utf-8").split("\n"):
                if line.startswith("data: "):
                    yield t, "data", line[6:]
                elif line.startswith(":"):
                    yield t, "comment", line[1:].strip()
                else:
                    raise AssertionError("bad SSE line %r" % line)
    assert buf == b"", "SSE stream ends with a partial event: %r" % buf


def stream(server, path, body, headers=None, timeout=120):
    """A streaming request: (status, headers, [parsed chunk dicts | "[DONE]"], comments, raw
    events with times). A non-200 answer returns its JSON body as the only chunk."""
    s = connect(server, timeout)
    try:
        s.sendall(build("POST", path, body, headers))
        r = Reader(s, timeout)
        code, hs = r.head()
        if code != 200:
            data = b"".join(r.chunks(hs))
            return code, hs, [json.loads(data)], [], []
        assert hs.get("content-type", "").startswith("text/event-stream"), hs
        chunks, comments, events = [], [], []
        for t, kind, text in sse_events(r.chunks(hs)):
            events.append((t, kind, text))
            if kind == "comment":
                comments.append(text)
            elif text == "[DONE]":
                chunks.append("[DONE]")
            else:
                chunks.append(json.loads(text))
        return code, hs, chunks, comments, events
    finally:
        s.close()


# -- asyncio ------------------------------------------------------------------------------------

async def aopen(server):
    return await asyncio.open_connection(server.host, server.port)


async def aread_response(reader):
    """(status, headers, body) of one response; a chunked body is decoded."""
    status = await reader.readline()
    code = int(status.split(b" ", 2)[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.split(b":", 1)
        headers[k.decode().strip().lower()] = v.decode().strip()
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    else:
        n = int(headers.get("content-length", "0"))
        if n:
            body = await reader.readexactly(n)
    return code, headers, body


async def arequest(server, method, path, body=None, headers=None):
    reader, writer = await aopen(server)
    try:
        writer.write(build(method, path, body, headers))
        await writer.drain()
        return await aread_response(reader)
    finally:
        writer.close()


def chunks_of(body):
    """The parsed data events of a complete SSE body."""
    out = []
    for _, kind, text in sse_events([body]):
        if kind == "data":
            out.append("[DONE]" if text == "[DONE]" else json.loads(text))
    return out


# -- checks -------------------------------------------------------------------------------------

def check_stream_shape(chunks, n_choices=1, chat=True, usage=False):
    """The wire rules every stream must follow; returns {index: text} (content, or text for
    completions) and the usage chunk (or None)."""
    assert chunks and chunks[-1] == "[DONE]", "stream must end with [DONE]: %r" % chunks[-3:]
    assert chunks.count("[DONE]") == 1
    body = chunks[:-1]
    ids = {c["id"] for c in body}
    created = {c["created"] for c in body}
    assert len(ids) == 1 and len(created) == 1, "id and created must be the same in every chunk"
    prefix = "chatcmpl-" if chat else "cmpl-"
    assert next(iter(ids)).startswith(prefix)
    texts, finished, roles = {}, {}, {}
    usage_chunk = None
    for k, c in enumerate(body):
        assert c["object"] == ("chat.completion.chunk" if chat else "text_completion")
        if not c["choices"]:
            assert usage_chunk is None, "one usage chunk"
            assert k == len(body) - 1, "the usage chunk comes last, before [DONE]"
            usage_chunk = c
            continue
        for ch in c["choices"]:
            i = ch["index"]
            assert i not in finished, "chunk for choice %d after its finish" % i
            assert "finish_reason" in ch
            if chat:
                d = ch["delta"]
                if i not in roles:
                    assert d == {"role": "assistant", "content": ""}, "first chunk is the role chunk: %r" % d
                    assert ch["finish_reason"] is None
                    roles[i] = True
                    continue
                assert "role" not in d
                texts[i] = texts.get(i, "") + (d.get("content") or "")
            else:
                texts[i] = texts.get(i, "") + ch["text"]
            if ch["finish_reason"] is not None:
                assert ch["finish_reason"] in ("stop", "length", "abort"), ch["finish_reason"]
                assert "stop_reason" in ch
                finished[i] = ch["finish_reason"]
    assert sorted(finished) == list(range(n_choices)), "one finish per choice: %r" % finished
    if usage:
        assert usage_chunk is not None, "usage chunk missing"
        u = usage_chunk["usage"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    else:
        assert usage_chunk is None, "usage chunk without include_usage"
    return texts, usage_chunk


def run_tests(tests, servers=()):
    """Runs test functions in order; prints a line per test; exits 1 on any failure."""
    failed = 0
    t0 = time.time()
    for fn in tests:
        t = time.time()
        try:
            fn()
            print("PASS %-45s %.1fs" % (fn.__name__, time.time() - t), flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failed += 1
            import traceback
            print("FAIL %s: %s" % (fn.__name__, e), flush=True)
            traceback.print_exc()
    for s in servers:
        if s is None:
            continue
        try:
            rc = s.stop()
            if rc != 0:
                failed += 1
                print("FAIL server exit status %d\n%s" % (rc, s.log()[-3000:]))
        except Exception as e:  # noqa: BLE001
            failed += 1
            print("FAIL stopping the server: %s" % e)
    print("%d tests, %d failed, %.1fs" % (len(tests), failed, time.time() - t0))
    sys.exit(1 if failed else 0)
