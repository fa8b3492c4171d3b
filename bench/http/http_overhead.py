"""Server overhead benchmark: requests/s, p50/p99 TTFT and the server's CPU per request of
`tachyon serve` on the tiny model (cpu backend, and the null backend that does no model math),
side by side with a trivial libmicrohttpd responder (responder.c) that sends a canned SSE stream
of the same shape, so that the HTTP layer's cost reads as a ratio.

    python3 bench/http/http_overhead.py BUILD_DIR [--requests-scale 1.0]

BUILD_DIR holds the tachyon binary and bench/bench_responder (both CMake targets). BENCH_QUICK=1
in the environment: one level of 8 requests per server (the test suite's check that it works).

Each client keeps one connection and sends streaming /v1/completions requests (8 tokens,
ignore_eos) back to back; TTFT is the time to the first data chunk with a choice. The client is
Python asyncio on the same machine: at high concurrency it takes CPU from the server too, and
the same client is used for every target.
"""
import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = (b'{"prompt": "The Python", "max_tokens": 8, "ignore_eos": true, "stream": true, '
        b'"temperature": 0}')
REQ = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY


def cpu_seconds(pid):
    """(whole process, its libmicrohttpd threads), CPU seconds."""
    total = http = 0.0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                stat = f.read()
        except FileNotFoundError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        t = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        total += t
        if comm.startswith("MHD"):
            http += t
    return total, http


async def client(port, n, ttfts, lat):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(n):
        t0 = time.perf_counter()
        writer.write(REQ)
        first = None
        status = await reader.readline()
        assert b" 200 " in status, status
        headers = {}
        while True:
            line = await reader.readline()
            if line == b"\r\n":
                break
            k, v = line.split(b":", 1)
            headers[k.strip().lower()] = v.strip()
        buf = b""
        if headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size = int((await reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await reader.readline()
                    break
                buf += await reader.readexactly(size + 2)
                if first is None and b'"choices":[{' in buf:
                    first = time.perf_counter()
        else:
            buf = await reader.readexactly(int(headers[b"content-length"]))
            first = time.perf_counter()
        assert b"data: [DONE]" in buf
        ttfts.append(first - t0)
        lat.append(time.perf_counter() - t0)
    writer.close()


async def run_level(port, conc, total):
    ttfts, lat = [], []
    per = max(1, total // conc)
    t0 = time.perf_counter()
    await asyncio.gather(*[client(port, per, ttfts, lat) for _ in range(conc)])
    return time.perf_counter() - t0, ttfts, lat


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def start(cmd, pattern):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for raw in p.stderr:
        m = re.search(pattern, raw.decode())
        if m:
            return p, int(m.group(1))
    raise RuntimeError("did not start: %s" % cmd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", help="a build directory holding the tachyon binary")
    ap.add_argument("--requests-scale", type=float, default=1.0)
    a = ap.parse_args()
    tachyon = os.path.join(a.build, "tachyon")
    exe = os.path.join(a.build, "bench", "bench_responder")
    levels = [(1, 1000), (64, 5000), (1000, 5000)]
    quick = os.environ.get("BENCH_QUICK") == "1"
    if quick:
        levels = [(4, 8)]
    targets = [
        ("tachyon serve, cpu backend", [tachyon, "serve", "--port", "0", "--stats-interval", "0",
                                        "--kv-cache-memory", "256MiB"]),
        ("tachyon serve, null backend", [tachyon, "serve", "--port", "0", "--stats-interval", "0",
                                         "--kv-cache-memory", "256MiB", "--backend", "null"]),
        ("trivial responder", None),
    ]
    print("| server | clients | requests | req/s | TTFT p50 ms | TTFT p99 ms | server CPU ms/req "
          "| of which HTTP threads |")
    print("|---|---|---|---|---|---|---|---|")
    for name, cmd in targets:
        p, port = start(cmd or [exe, "0"], r"on http://[^ ]*:(\d+)")
        try:
            if not quick:
                asyncio.run(run_level(port, 4, 40))  # warm-up
            for conc, total in levels:
                total = max(conc, int(total * a.requests_scale))
                c0, h0 = cpu_seconds(p.pid)
                dt, ttfts, lat = asyncio.run(run_level(port, conc, total))
                c1, h1 = cpu_seconds(p.pid)
                n = len(lat)
                print("| %s | %d | %d | %.0f | %.2f | %.2f | %.3f | %.3f |" % (
                    name, conc, n, n / dt, 1e3 * statistics.median(ttfts), 1e3 * pct(ttfts, 0.99),
                    1e3 * (c1 - c0) / n, 1e3 * (h1 - h0) / n), flush=True)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(60)


if __name__ == "__main__":
    sys.exit(main())
