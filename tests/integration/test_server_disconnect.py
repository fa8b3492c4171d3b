"""100 clients that go away mid-stream, mid-prefill and while waiting for a non-streaming answer
(closing cleanly or with a reset): every sequence is aborted and KV usage goes back to zero,
as /metrics shows (run by test_server_disconnect.sh)."""
import asyncio
import time
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_lib import Server, aopen, build, metric, post_json, run_tests  # noqa: E402

# a small step budget makes long prompts take many steps: clients can leave mid-prefill
S = Server("--max-num-batched-tokens", 64, "--kv-cache-memory", "512MiB", "--sse-keepalive", 0.5)
LONG = 3000  # max_tokens no client waits for


async def leave(writer, reset):
    if reset:  # RST instead of FIN
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def read_head(reader):
    status = await reader.readline()
    assert b" 200 " in status, status
    while (await reader.readline()) not in (b"\r\n", b""):
        pass


async def mid_stream(k):
    reader, writer = await aopen(S)
    body = {"prompt": "The %d" % k, "max_tokens": LONG, "ignore_eos": True, "stream": True}
    writer.write(build("POST", "/v1/completions", body))
    await writer.drain()
    await read_head(reader)
    seen = 0
    while seen < 3:  # a few tokens arrived: the sequence is decoding
        line = await asyncio.wait_for(reader.readline(), 60)
        assert line, "closed early"
        if line.startswith(b"data: {"):
            seen += 1
    await leave(writer, k % 2)
    return "stream"


async def mid_prefill(k):
    reader, writer = await aopen(S)
    prompt = [(k * 7 + i) % 2000 for i in range(1500)]  # distinct: no prefix-cache hits
    body = {"prompt": prompt, "max_tokens": 2500, "ignore_eos": True, "stream": True}
    writer.write(build("POST", "/v1/completions", body))
    await writer.drain()
    await read_head(reader)
    await asyncio.sleep(0.05)
    await leave(writer, k % 2)
    return "prefill"


async def mid_wait(k):
    reader, writer = await aopen(S)
    body = {"prompt": "A list %d" % k, "max_tokens": LONG, "ignore_eos": True}
    writer.write(build("POST", "/v1/completions", body))
    await writer.drain()
    await asyncio.sleep(0.5)
    await leave(writer, k % 2)
    return "wait"


async def all_clients():
    tasks = [mid_stream(k) for k in range(40)] + [mid_prefill(k) for k in range(30)] + \
            [mid_wait(k) for k in range(30)]
    return await asyncio.wait_for(asyncio.gather(*tasks), 120)


def test_disconnects_free_everything():
    before = S.metrics()
    kinds = asyncio.run(all_clients())
    assert len(kinds) == 100
    m = S.wait_idle(60)
    aborted = metric(m, "vllm:request_success_total", finished_reason="abort") - \
        metric(before, "vllm:request_success_total", finished_reason="abort")
    gone = metric(m, "tachyon:client_disconnects_total") - metric(before, "tachyon:client_disconnects_total")
    generated = metric(m, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    assert aborted == 100, "aborted %d of 100" % aborted
    assert gone == 100, "disconnects counted: %d" % gone
    assert generated < 100 * LONG / 4, "sequences ran on after their clients left: %d tokens" % generated
    assert metric(m, "vllm:kv_cache_usage_perc") == 0 and metric(m, "tachyon:kv_blocks_used") == 0
    # The server learns of a closed socket when it next polls it, which may be after the
    # engine went idle: give it a moment, then only the /metrics request itself may be open.
    end = time.time() + 10
    while metric(m, "tachyon:http_connections") > 1 and time.time() < end:
        time.sleep(0.05)
        m = S.metrics()
    assert metric(m, "tachyon:http_connections") <= 1, metric(m, "tachyon:http_connections")
    print("  100 clients left; %d tokens generated; KV usage back to 0" % generated)
    code, r = post_json(S, "/v1/completions", {"prompt": "The", "max_tokens": 4, "ignore_eos": True})
    assert code == 200 and r["usage"]["completion_tokens"] == 4


if __name__ == "__main__":
    run_tests([test_disconnects_free_everything], servers=[S])
