#!/usr/bin/env python3
"""Speculative decoding under load and faults (not in CI): against a running `tachyon serve`
(build/asan/tachyon for the sanitizers), 12 clients send completions of random prose (1-64
tokens, greedy or sampled, streamed or not) and cut 30 % of their streams mid-response, while a
thread changes num-speculative-tokens (0, 1, 2, 4), max-num-seqs and max-num-batched-tokens live.
Prints a JSON tally; every request must succeed or be cut. Then read /metrics: no request left
running, the KV cache back to 0 %, the drafts and preemptions counted.

  build/asan/tachyon serve --model tests/fixtures/tiny-qwen3.5 --port 18779 \\
      --speculative-config '{"method":"mtp","num_speculative_tokens":2}' --max-num-seqs 8 \\
      --max-model-len 256 --kv-cache-memory 2MiB &      # 23 blocks: preemption guaranteed
  tests/soak/spec_stress.py 18779 90
"""
import json
import random
import socket
import sys
import threading
import time
import urllib.request


def main():
    port, duration = int(sys.argv[1]), float(sys.argv[2])
    base = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        model = json.load(r)["data"][0]["id"]
    tally = {"ok": 0, "cut": 0, "err": 0, "errors": {}}
    lock = threading.Lock()

    def post(path, body, timeout=120):
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()

    def client(seed, deadline):
        rng = random.Random(seed)
        words = ["the", "assert", "statement", "lambda", "list", "python", "x", "y"]
        while time.time() < deadline:
            body = {"model": model, "prompt": " ".join(rng.choice(words)
                                                       for _ in range(rng.randint(3, 60))),
                    "max_tokens": rng.randint(1, 64), "stream": rng.random() < 0.6,
                    "temperature": rng.choice([0, 0.7]), "seed": rng.randint(0, 99)}
            try:
                if body["stream"] and rng.random() < 0.3:  # the client goes away mid-stream
                    data = json.dumps(body).encode()
                    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(data) +
                                  data)
                        s.recv(rng.randint(10, 400))
                    with lock:
                        tally["cut"] += 1
                    continue
                post("/v1/completions", body)
                with lock:
                    tally["ok"] += 1
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    tally["err"] += 1
                    tally["errors"][repr(e)[:80]] = tally["errors"].get(repr(e)[:80], 0) + 1

    def flags(deadline):
        rng = random.Random(3)
        while time.time() < deadline:
            name, value = rng.choice([("num-speculative-tokens", rng.choice([0, 1, 2, 4])),
                                      ("max-num-seqs", rng.choice([2, 4, 8, 16])),
                                      ("max-num-batched-tokens", rng.choice([64, 256, 2048]))])
            try:
                post("/admin/flags/" + name, {"value": value}, timeout=300)
            except Exception as e:  # noqa: BLE001
                with lock:
                    tally["err"] += 1
                    tally["errors"]["flag " + repr(e)[:70]] = 1
            time.sleep(rng.uniform(1, 4))

    deadline = time.time() + duration
    threads = [threading.Thread(target=client, args=(i, deadline)) for i in range(12)]
    threads.append(threading.Thread(target=flags, args=(deadline,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(tally))
    return 1 if tally["err"] else 0


if __name__ == "__main__":
    sys.exit(main())
