"""/health and /metrics latency while the largest accepted prompt is tokenized (bench/health-latency.sh
runs it against a `tachyon serve` it started). Sends the largest body the server accepts (its
--max-request-body, less a little) as /tokenize, /v1/completions and /v1/chat/completions, one at
a time, and probes /health and /metrics on fresh connections every 10 ms while each is in
flight. Prints a Markdown table: per big request, its wall time and the probes' latency
(median, p99, max) and how many probes were answered while it ran.

Usage: python3 bench/health-latency.py PORT BODY_LIMIT_BYTES
"""
import json
import socket
import statistics
import sys
import threading
import time

PORT = int(sys.argv[1])
LIMIT = int(sys.argv[2])
WORDS = ("The quick brown fox jumps over the lazy dog; 12 + 34 = 46. Une phrase en fran\u00e7ais, "
         "\u65e5\u672c\u8a9e\u306e\u6587\u3002 def f(x): return x * 2. ")


SINK = bytearray(1 << 20)


def http(method, path, body=None, timeout=600):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    s.sendall(head.encode() + b"\r\n" + (body or b""))
    first = s.recv(64)
    while s.recv_into(SINK):  # the rest is drained, not kept: the client must not be the bottleneck
        pass
    s.close()
    return int(first.split(b" ", 2)[1])


def big_body(kind):
    room = LIMIT - 4096
    text = (WORDS * (room // len(WORDS.encode()) + 1)).encode()[:room].decode("utf-8", "ignore")
    # raw UTF-8 in the JSON (no \\u escapes), so the body is the text's size plus a few bytes
    if kind == "chat":
        doc = {"messages": [{"role": "user", "content": text}], "max_tokens": 1}
    else:
        doc = {"prompt": text, "max_tokens": 1}
    return json.dumps(doc, ensure_ascii=False).encode()


def run(path, body):
    result = {}

    def big():
        t = time.time()
        result["status"] = http("POST", path, body)
        result["secs"] = time.time() - t

    th = threading.Thread(target=big)
    th.start()
    time.sleep(0.05)  # the body is on its way; probes start while it is read and worked on
    lat = {"/health": [], "/metrics": []}
    while th.is_alive():
        for p in lat:
            if not th.is_alive():
                break
            t = time.time()  # a probe sent while the big request runs counts, however long it waits
            code = http("GET", p, timeout=60)
            assert code == 200, (p, code)
            lat[p].append((time.time() - t) * 1000)
        time.sleep(0.01)
    th.join()
    return result, lat


def row(name, result, lat):
    cells = ["%s (%d)" % (name, result["status"]), "%.2f" % result["secs"]]
    for p in ("/health", "/metrics"):
        v = sorted(lat[p])
        if not v:
            cells.append("no probe in flight")
            continue
        p99 = v[min(len(v) - 1, int(len(v) * 0.99))]
        cells.append("%d probes: %.1f / %.1f / %.1f" % (len(v), statistics.median(v), p99, v[-1]))
    print("| " + " | ".join(cells) + " |")


print("| big request (status) | its time s | /health median / p99 / max ms | /metrics median / p99 / max ms |")
print("|---|---|---|---|")
for name, path, kind in (("/tokenize", "/tokenize", "text"), ("/v1/completions", "/v1/completions", "text"),
                         ("/v1/chat/completions", "/v1/chat/completions", "chat")):
    body = big_body(kind)
    res, lat = run(path, body)
    row("%s %.1f MiB" % (name, len(body) / 1048576), res, lat)
