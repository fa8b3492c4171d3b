"""Soak under faults (issue 24 item 4): `tachyon serve` (the ASan build by default, on the null
backend unless --backend cpu) under a mixed load for a bounded time, with client faults, live flag changes and an overload burst, then the
accounting. Not a ctest test: run it by hand (tests/soak/soak.sh) and record the summary in
bench/RESULTS.md.

Load: CONCURRENCY clients loop until the deadline, each request drawn at random: chat or
completions, streaming or not, n > 1, stop strings, long prompts, tools, and hostile bodies
(invalid JSON, NUL bytes, bad fields) that must get a 4xx. Faults: a client cuts the connection
before the answer (after sending) or in the middle of a stream. A flag task changes live flags
every few seconds and a rebuild flag (block-size) now and then; an overload burst of BURST
requests at once arrives mid-run (each answered, or refused with 503/429).

At the end: every request is accounted for (answered, refused, cut by the client; anything else
is a failure), the server ends idle (KV usage, running, waiting, in flight all 0), its finished
counts agree with the clients' (no finish with reason error), RSS after warm-up stays flat, and
SIGTERM exits 0 with no sanitizer report in the log.
"""
import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from test_server_lib import Server, aopen, aread_response, build, metric, post_json, rss_mib  # noqa: E402

WORDS = ("the a quantum river memory batch server token latency school ocean galaxy thread "
         "network people history language forest number").split()
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
HOSTILE = [
    b"{", b"not json", b'{"messages": [{"role": "user", "content": "hi"}]}\x00junk',
    b'{"messages": "x"}', b'{"messages": [{"role": "user", "content": "hi"}], "n": 100}',
    b'{"prompt": "x", "max_tokens": -1}', b'{"prompt": "\xff\xfe"}', b'{"prompt": [1, 2, "x"]}',
    b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "nope"}]}',
    b'{"prompt": "x", "temperature": "hot"}', b'[1, 2, 3]', b'{"prompt": "x", "stop": [1]}',
]


class Tally:
    def __init__(self):
        self.counts = {}
        self.failures = []
        self.lock = threading.Lock()

    def add(self, kind, detail=None):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == "failed" and len(self.failures) < 20:
                self.failures.append(detail)


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_request(rng):
    """(path, body bytes, streaming, expect): expect is "ok" or "4xx"."""
    r = rng.random()
    if r < 0.08:
        return rng.choice(["/v1/chat/completions", "/v1/completions"]), rng.choice(HOSTILE), False, "4xx"
    chat = rng.random() < 0.5
    body = {"max_tokens": rng.choice([1, 4, 16, 48]), "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randrange(1 << 30)}
    long_prompt = rng.random() < 0.05
    text = words(rng, 400 if long_prompt else rng.randrange(3, 40))
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
        if rng.random() < 0.15:
            body["tools"] = TOOLS
            body["tool_choice"] = rng.choice(["auto", "required", "none"])
    else:
        body["prompt"] = text
    if rng.random() < 0.2:
        body["n"] = rng.randrange(2, 5)
        body["temperature"] = 0.8  # n > 1 needs sampling
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(WORDS), "\n"]
    stream = rng.random() < 0.5
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return ("/v1/chat/completions" if chat else "/v1/completions"), json.dumps(body).encode(), stream, "ok"


def raw_request(path, body):
    return build("POST", path, body, {"Content-Type": "application/json"})


async def one(server, rng, tally, fault):
    path, body, stream, expect = make_request(rng)
    try:
        reader, writer = await aopen(server)
    except OSError as e:
        tally.add("failed", "connect: %s" % e)
        return
    try:
        writer.write(raw_request(path, body))
        await writer.drain()
        if fault == "cut_early":
            await asyncio.sleep(rng.random() * 0.05)
            tally.add("cut")
            return
        if fault == "cut_stream" and stream and expect == "ok":
            status = await reader.readline()
            if b" 200 " not in status:
                code = int(status.split(b" ", 2)[1]) if status else 0
                tally.add("refused" if code in (429, 503) else "failed",
                          "cut_stream status %r" % status[:40])
                return
            await reader.read(rng.randrange(1, 2000))
            tally.add("cut")
            return
        code, _, data = await asyncio.wait_for(aread_response(reader), 300)
        if code in (429, 503):
            tally.add("refused")
        elif expect == "4xx":
            ok = 400 <= code < 500 and b'"error"' in data
            tally.add("answered" if ok else "failed", "hostile %r -> %d %r" % (body[:60], code, data[:200]))
        elif code != 200:
            tally.add("failed", "%s -> %d %r" % (path, code, data[:300]))
        elif stream:
            ok = data.rstrip().endswith(b"data: [DONE]")
            tally.add("answered" if ok else "failed", "stream without [DONE]: %r" % data[-200:])
        else:
            doc = json.loads(data)
            ok = doc.get("choices") and all(c.get("finish_reason") in ("stop", "length", "tool_calls")
                                            for c in doc["choices"])
            tally.add("answered" if ok else "failed", "bad answer %r" % data[:300])
    except (asyncio.TimeoutError, OSError, ValueError, IndexError) as e:
        tally.add("failed", "%s: %r" % (path, e))
    finally:
        writer.close()


async def client(server, seed, deadline, tally):
    rng = random.Random(seed)
    while time.time() < deadline:
        f = rng.random()
        fault = "cut_early" if f < 0.05 else "cut_stream" if f < 0.12 else None
        await one(server, rng, tally, fault)


async def burst(server, n, tally, seed):
    rng = random.Random(seed)
    await asyncio.gather(*(one(server, rng, tally, None) for _ in range(n)))


def flag_changer(server, deadline, log, stop):
    rng = random.Random(7)
    k = 0
    while time.time() < deadline and not stop.is_set():
        k += 1
        if k % 6 == 0:
            name, value = "block-size", rng.choice([16, 32])  # a rebuild: preempt and recompute
        else:
            name, value = rng.choice([("max-num-seqs", rng.choice([4, 8, 16, 32])),
                                      ("max-num-batched-tokens", rng.choice([256, 512, 2048])),
                                      ("enable-prefix-caching", rng.choice([True, False])),
                                      ("enable-chunked-prefill", rng.choice([True, False])),
                                      ("cpu-matmul-precision",
                                       rng.choice(["highest", "high", "medium"]))])
        try:
            code, r = post_json(server, "/admin/flags/" + name, {"value": value}, timeout=300)
            log.append((round(time.time()), name, value, code))
        except Exception as e:  # noqa: BLE001 - recorded and judged at the end
            log.append((round(time.time()), name, value, repr(e)))
        stop.wait(rng.uniform(2, 8))


KV_POOL_MIB = 128  # test_server_lib's Server: --kv-cache-memory 128MiB


def rss_outside_kv_pool_mib(pid):
    """The resident set less the KV pool's. The CPU backend maps its K and V pools (half the
    budget each, adjacent anonymous mappings the kernel often merges) untouched, and a page
    becomes resident when a block on it is first written: over a long run the RSS climbs by up
    to the whole pool with no leak (a 10-minute run: 252 -> 315 MiB, the pool's mapping 128 MiB
    resident at the end, smaps). An anonymous mapping the size of one pool (90-100 % of half the
    budget: whole blocks) or of both side by side, give or take a small neighbour the kernel
    merged in (up to 4 MiB), counts as the pool."""
    total = pool = 0
    with open("/proc/%d/smaps" % pid) as f:
        anon_size = None
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                anon_size = (hi - lo) / 2**20 if len(head) == 5 else None
            elif head[0] == "Rss:":
                kib = int(head[1])
                total += kib
                half = KV_POOL_MIB / 2
                if anon_size is not None and any(0.9 * n * half <= anon_size <= n * half + 4 for n in (1, 2)):
                    pool += kib
    return (total - pool) / 1024


def sampler(pid, samples, stop):
    t0 = time.time()
    while not stop.is_set():
        try:
            samples.append((time.time() - t0, rss_mib(pid), rss_outside_kv_pool_mib(pid)))
        except OSError:
            return
        stop.wait(5)


def finished(m, reason):
    return metric(m, "vllm:request_success_total", finished_reason=reason)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=1800, help="seconds of load (default 1800)")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", default="null",
                    help="null (default: no model math, so that the ASan build still serves "
                         "hundreds of requests a second and the faults, not the forward pass, "
                         "are what is soaked) or cpu")
    ap.add_argument("--async-scheduling", default="auto",
                    help="serve's --async-scheduling (on: steps ahead on the cpu backend too; the "
                         "null backend samples synchronously whatever this says)")
    args = ap.parse_args()

    server = Server("--backend", args.backend, "--max-num-seqs", 16, "--max-queued-requests", 64, "--max-model-len", 4096,
                    "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--shutdown-timeout", 60,
                    "--async-scheduling", args.async_scheduling,
                    env={"ASAN_OPTIONS": "detect_leaks=1:quarantine_size_mb=64"})
    pid = server.proc.pid
    tally, flag_log, rss, burst_refused = Tally(), [], [], []
    stop = threading.Event()
    t0 = time.time()
    deadline = t0 + args.duration
    threads = [threading.Thread(target=flag_changer, args=(server, deadline, flag_log, stop), daemon=True),
               threading.Thread(target=sampler, args=(pid, rss, stop), daemon=True)]
    for t in threads:
        t.start()

    async def load():
        tasks = [asyncio.create_task(client(server, args.seed * 1000 + i, deadline, tally))
                 for i in range(args.concurrency)]
        await asyncio.sleep(args.duration / 2)
        # the null backend drains faster than these clients send, so the burst meets a server
        # made small for it (one sequence, four waiting): most of it must be refused with 503
        loop = asyncio.get_running_loop()
        small = [("max-num-seqs", 1), ("max-queued-requests", 4)]
        for name, value in small:
            await loop.run_in_executor(None, post_json, server, "/admin/flags/" + name, {"value": value})
        refused_before = tally.counts.get("refused", 0)
        await burst(server, args.burst, tally, args.seed)
        burst_refused.append(tally.counts.get("refused", 0) - refused_before)
        for name, value in (("max-num-seqs", 16), ("max-queued-requests", 64)):
            await loop.run_in_executor(None, post_json, server, "/admin/flags/" + name, {"value": value})
        await asyncio.gather(*tasks)

    asyncio.run(load())
    load_s = time.time() - t0
    stop.set()
    for t in threads:
        t.join(330)
    problems = []
    try:
        m = server.wait_idle(120)
    except AssertionError as e:
        problems.append(str(e))
        m = server.metrics()
    answered_srv = finished(m, "stop") + finished(m, "length")
    counts = dict(tally.counts)
    if finished(m, "error") != 0:
        problems.append("%d requests finished with reason error" % finished(m, "error"))
    if counts.get("failed"):
        problems.append("%d requests failed: %s" % (counts["failed"], tally.failures[:5]))
    if not burst_refused or burst_refused[0] == 0:
        problems.append("the overload burst got no 503")
    bad_flags = [f for f in flag_log if f[3] != 200]
    if bad_flags:
        problems.append("flag changes refused: %s" % bad_flags[:5])
    # RSS outside the KV pool (whose pages come in as blocks are first used, up to its size):
    # after warm-up (20-30 % of the run) the last quarter's peak stays near the warm-up level
    def window(lo, hi, col):
        return max([s[col] for s in rss if lo <= s[0] < hi] or [rss[-1][col]])
    warm_mib, late_mib = window(load_s * 0.2, load_s * 0.3, 2), window(load_s * 0.75, 1e9, 2)
    if late_mib > warm_mib * 1.10 + 32:
        problems.append("RSS outside the KV pool grew from %.0f MiB after warm-up to %.0f MiB"
                        % (warm_mib, late_mib))
    rc = server.stop(timeout=120)
    if rc != 0:
        problems.append("exit status %d" % rc)
    summary = {
        "duration_s": round(load_s), "backend": args.backend, "concurrency": args.concurrency,
        "burst": args.burst, "burst_refused": burst_refused[0] if burst_refused else None,
        "requests": sum(counts.values()), "by_outcome": counts,
        "server_finished": {r: int(finished(m, r)) for r in ("stop", "length", "abort", "error")},
        "server_answered": int(answered_srv), "flag_changes": len(flag_log),
        "rebuilds": sum(1 for f in flag_log if f[1] == "block-size"),
        "rss_mib": {"start": round(rss[0][1]), "after_warmup": round(window(load_s * 0.2, load_s * 0.3, 1)),
                    "last_quarter_peak": round(window(load_s * 0.75, 1e9, 1)), "end": round(rss[-1][1])},
        "rss_outside_kv_pool_mib": {"start": round(rss[0][2]), "after_warmup": round(warm_mib),
                                    "last_quarter_peak": round(late_mib), "end": round(rss[-1][2])},
        "exit_status": rc, "sanitizer_report": False, "problems": problems,
    }
    print(json.dumps(summary, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
