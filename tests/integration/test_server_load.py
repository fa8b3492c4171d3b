"""1,000 concurrent streaming requests on the tiny model: every one completes with a well-formed
stream, and the server ends idle (run by test_server_load.sh)."""
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_lib import Server, arequest, check_stream_shape, chunks_of, metric, run_tests  # noqa: E402

N = 1000
S = Server()


async def one(k, start):
    await start.wait()
    chat = k % 2 == 0
    body = {"max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}, "seed": k}
    if chat:
        body["messages"] = [{"role": "user", "content": "Question %d: what is a tuple?" % k}]
    else:
        body["prompt"] = "The %d" % k
    code, hs, data = await arequest(S, "POST", "/v1/chat/completions" if chat else "/v1/completions", body)
    assert code == 200, (code, data[:300])
    texts, usage = check_stream_shape(chunks_of(data), chat=chat, usage=True)
    assert 1 <= usage["usage"]["completion_tokens"] <= 8
    return usage["usage"]["completion_tokens"]


async def run_all():
    start = asyncio.Event()
    tasks = [asyncio.create_task(one(k, start)) for k in range(N)]
    await asyncio.sleep(0.2)
    start.set()
    return await asyncio.wait_for(asyncio.gather(*tasks), 600)


def test_1000_concurrent_streams():
    before = S.metrics()
    t0 = time.time()
    tokens = asyncio.run(run_all())
    dt = time.time() - t0
    m = S.wait_idle(60)
    done = sum(metric(m, "vllm:request_success_total", finished_reason=r) -
               metric(before, "vllm:request_success_total", finished_reason=r) for r in ("stop", "length"))
    assert done == N, done
    assert metric(m, "vllm:request_success_total", finished_reason="abort") == 0
    assert metric(m, "vllm:request_success_total", finished_reason="error") == 0
    print("  %d streams, %d tokens in %.1f s (%.0f requests/s)" % (N, sum(tokens), dt, N / dt))


if __name__ == "__main__":
    run_tests([test_1000_concurrent_streams], servers=[S])
