"""`tachyon serve` over loopback: every endpoint, streaming and not, and the wire rules of
reference/server-and-bench.md section 0 (run by test_server_api.sh)."""
import json
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_lib import (FIXTURES, Server, build, check_stream_shape, connect, metric,  # noqa: E402
                             post_json, request, run_tests, stream, Reader)

A = Server("--max-model-len", 512, "--served-model-name", "tiny", "--served-model-name", "alias")
B = Server("--reasoning-parser", "qwen3", "--api-key", "k1", "--api-key", "k2")
AUTH = {"Authorization": "Bearer k1"}
MSG = [{"role": "user", "content": "What is a list in Python?"}]
GOLDEN = json.load(open(os.path.join(FIXTURES, "golden", "tiny-qwen3.json")))


def chat(server=A, headers=None, **kw):
    body = {"messages": MSG}
    body.update(kw)
    return post_json(server, "/v1/chat/completions", body, headers)


def comp(server=A, **kw):
    return post_json(server, "/v1/completions", kw)


def assert_error(code, body, status, param=None, contains=None):
    assert code == status, (code, body)
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert e["code"] == status and isinstance(e["message"], str) and e["message"]
    want_type = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status)
    if want_type:
        assert e["type"] == want_type, e
    if param is not None:
        assert e["param"] == param, e
    if contains:
        assert contains in e["message"], e["message"]


# -- small endpoints ----------------------------------------------------------------------------

def test_models():
    code, _, body = request(A, "GET", "/v1/models")
    assert code == 200
    m = json.loads(body)
    assert m["object"] == "list"
    assert [c["id"] for c in m["data"]] == ["tiny", "alias"]
    c = m["data"][0]
    assert c["object"] == "model" and c["root"] == "embedded" and c["max_model_len"] == 512
    assert c["owned_by"] and isinstance(c["created"], int) and c["permission"]


def test_served_model_names_vllm_form():
    """vLLM's --served-model-name takes one or more names after one flag (and the flag repeats):
    /v1/models lists them in order and a request may name any of them."""
    s = Server("--served-model-name", "one", "two", "--served-model-name=three")
    try:
        code, _, body = request(s, "GET", "/v1/models")
        assert code == 200 and [c["id"] for c in json.loads(body)["data"]] == ["one", "two", "three"], body
        for name in ("two", "three"):
            code, r = post_json(s, "/v1/completions", {"model": name, "prompt": "The", "max_tokens": 1})
            assert code == 200 and r["model"] == name, r
        code, r = post_json(s, "/v1/completions", {"model": "four", "prompt": "The", "max_tokens": 1})
        assert code == 404, r
    finally:
        assert s.stop() == 0


def test_health_version_ping_load():
    for path in ("/health", "/ping"):
        code, _, body = request(A, "GET", path)
        assert code == 200 and body == b"", (path, code, body)
    code, _, body = request(A, "GET", "/version")
    assert code == 200 and isinstance(json.loads(body)["version"], str)
    code, _, body = request(A, "GET", "/load")
    assert code == 200 and json.loads(body) == {"server_load": 0}


def test_unknown_path_and_method():
    code, _, body = request(A, "GET", "/v2/nothing")
    assert code == 404 and json.loads(body) == {"detail": "Not Found"}
    code, hs, body = request(A, "GET", "/v1/chat/completions")
    assert code == 405 and json.loads(body) == {"detail": "Method Not Allowed"}
    code, _, _ = request(A, "DELETE", "/v1/models")
    assert code == 405


def test_keep_alive_connection_reuse():
    s = connect(A)
    try:
        r = Reader(s)
        for _ in range(3):
            s.sendall(build("POST", "/v1/completions", {"prompt": "The", "max_tokens": 2}))
            code, hs = r.head()
            body = b"".join(r.chunks(hs))
            assert code == 200 and json.loads(body)["usage"]["completion_tokens"] <= 2
        s.sendall(build("GET", "/health"))
        code, hs = r.head()
        assert code == 200
        list(r.chunks(hs))
    finally:
        s.close()


# -- completions --------------------------------------------------------------------------------

def test_completions_golden_greedy():
    for p in GOLDEN["prompts"]:
        code, r = comp(prompt=p["ids"], max_tokens=len(p["greedy"]), temperature=0, ignore_eos=True,
                       skip_special_tokens=False)
        assert code == 200, r
        assert r["choices"][0]["text"] == p["greedy_text"], (r["choices"][0]["text"], p["greedy_text"])
        assert r["usage"] == {"prompt_tokens": len(p["ids"]), "completion_tokens": len(p["greedy"]),
                              "total_tokens": len(p["ids"]) + len(p["greedy"])}, r["usage"]


def test_completions_shape():
    code, r = comp(prompt="The Python", max_tokens=5, temperature=0, ignore_eos=True)
    assert code == 200
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-") and r["model"] == "tiny"
    c = r["choices"][0]
    assert c["index"] == 0 and c["finish_reason"] == "length" and c["stop_reason"] is None
    assert c["logprobs"] is None and isinstance(c["text"], str)
    assert r["usage"]["completion_tokens"] == 5
    code, r = comp(model="alias", prompt="The", max_tokens=1)
    assert code == 200 and r["model"] == "alias"


def test_completions_default_max_tokens_16():
    code, r = comp(prompt="The", temperature=0, ignore_eos=True)
    assert code == 200 and r["usage"]["completion_tokens"] == 16, r["usage"]
    # explicit null: up to the context (max-model-len 512)
    code, r = comp(prompt=[352] * 500, max_tokens=None, temperature=0, ignore_eos=True)
    assert code == 200 and r["usage"]["completion_tokens"] == 12, r["usage"]
    assert r["choices"][0]["finish_reason"] == "length"
    # the default 16 is clamped to the room left
    code, r = comp(prompt=[352] * 505, temperature=0, ignore_eos=True)
    assert code == 200 and r["usage"]["completion_tokens"] == 7, r["usage"]


def test_context_length_400():
    code, r = comp(prompt=[352] * 500, max_tokens=20)
    assert_error(code, r, 400)
    assert r["error"]["message"] == (
        "This model's maximum context length is 512 tokens. However, you requested 520 tokens "
        "(500 in the messages, 20 in the completion). Please reduce the length of the messages "
        "or completion."), r["error"]["message"]
    code, r = comp(prompt=[352] * 600, max_tokens=1)
    assert_error(code, r, 400, contains="maximum context length is 512")
    code, r = chat(max_tokens=100000)
    assert_error(code, r, 400, contains="maximum context length is 512")


def test_completions_multiple_prompts_and_n():
    code, r = comp(prompt=["The", "A list"], n=2, max_tokens=3, temperature=1.0, seed=7, ignore_eos=True)
    assert code == 200, r
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert r["usage"]["completion_tokens"] == 12
    code, r1 = comp(prompt="The", max_tokens=3, temperature=0, ignore_eos=True)
    code, r2 = comp(prompt="A list", max_tokens=3, temperature=0, ignore_eos=True)
    code, r = comp(prompt=[[352], "ignored"], max_tokens=3)
    assert code == 400
    code, both = comp(prompt=["The", "A list"], max_tokens=3, temperature=0, ignore_eos=True)
    assert [c["text"] for c in both["choices"]] == [r1["choices"][0]["text"], r2["choices"][0]["text"]]
    assert both["usage"]["prompt_tokens"] == r1["usage"]["prompt_tokens"] + r2["usage"]["prompt_tokens"]


def test_completions_echo():
    code, r = comp(prompt="The Python", max_tokens=3, echo=True, temperature=0)
    assert code == 200 and r["choices"][0]["text"].startswith("The Python")
    code, hs, chunks, _, _ = stream(A, "/v1/completions", {"prompt": "The Python", "max_tokens": 3,
                                                          "echo": True, "temperature": 0, "stream": True})
    texts, _ = check_stream_shape(chunks, chat=False)
    assert texts[0] == r["choices"][0]["text"]
    # with logprobs, text_offset indexes the returned text, the echoed prompt first: each token's
    # text sits at its offset (the prompt's own tokens carry none: no prompt logprobs; a special
    # token, listed but left out of the text, is not looked for)
    for streamed in (False, True):
        body = {"prompt": "The Python", "max_tokens": 4, "echo": True, "temperature": 0,
                "logprobs": 1, "ignore_eos": True}
        if streamed:
            code, hs, chunks, _, _ = stream(A, "/v1/completions", dict(body, stream=True))
            text, offs, toks = "", [], []
            for c in chunks:
                ch = c["choices"][0] if isinstance(c, dict) and c.get("choices") else None
                if not ch:
                    continue
                text += ch["text"]
                if ch.get("logprobs"):
                    offs += ch["logprobs"]["text_offset"]
                    toks += ch["logprobs"]["tokens"]
        else:
            code, r = comp(**body)
            ch = r["choices"][0]
            text, offs, toks = ch["text"], ch["logprobs"]["text_offset"], ch["logprobs"]["tokens"]
        assert text.startswith("The Python") and len(toks) == 4 and offs[0] == len("The Python"), \
            (streamed, text, offs)
        for o, t in zip(offs, toks):
            special = t.startswith("<|") and t.endswith("|>")
            assert special or text[o:o + len(t)] == t, (streamed, text, offs, toks)


def test_completions_logprobs():
    code, r = comp(prompt="The", max_tokens=4, logprobs=2, temperature=0, ignore_eos=True)
    assert code == 200, r
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 4
    assert "".join(lp["tokens"]) == r["choices"][0]["text"]
    for v, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
        assert v <= 0 and 1 <= len(top) <= 3
        # greedy: the sampled token is the most likely one
        assert abs(max(top.values()) - v) < 1e-6
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
    code, hs, chunks, _, _ = stream(A, "/v1/completions", {"prompt": "The", "max_tokens": 4, "logprobs": 2,
                                                          "temperature": 0, "ignore_eos": True, "stream": True})
    toks = []
    for c in chunks[:-1]:
        for ch in c["choices"]:
            if ch["logprobs"]:
                toks += ch["logprobs"]["tokens"]
    assert toks == lp["tokens"]


# -- chat ---------------------------------------------------------------------------------------

def test_chat_shape():
    code, r = chat(max_tokens=8, temperature=0)
    assert code == 200, r
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    c = r["choices"][0]
    assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str)
    assert "reasoning" not in c["message"], "no reasoning keys without the parser"
    assert c["finish_reason"] in ("stop", "length") and "stop_reason" in c and c["logprobs"] is None
    u = r["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert "completion_tokens_details" not in u


def test_chat_content_parts_and_unknown_fields():
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is a list"},
                                                      {"type": "text", "text": "in Python?"}]}],
            "max_tokens": 3, "some_future_field": {"x": 1}, "user": "u", "stop": None, "logprobs": None,
            "chat_template_kwargs": {"whatever": 1}, "parallel_tool_calls": True, "logit_bias": {}}
    code, r = post_json(A, "/v1/chat/completions", body)
    assert code == 200, r


def test_chat_max_completion_tokens_precedence():
    code, r = chat(max_tokens=9, max_completion_tokens=3, temperature=0, ignore_eos=True)
    assert code == 200 and r["usage"]["completion_tokens"] == 3, r
    code, r = chat(max_tokens=4, temperature=0, ignore_eos=True)
    assert r["usage"]["completion_tokens"] == 4


def test_chat_stream_rules():
    body = {"messages": MSG, "max_tokens": 12, "temperature": 0, "ignore_eos": True, "stream": True}
    code, hs, chunks, comments, events = stream(A, "/v1/chat/completions", body)
    assert code == 200 and not comments
    assert hs["content-type"].startswith("text/event-stream") and hs.get("cache-control") == "no-cache"
    texts, usage = check_stream_shape(chunks)
    code, r = chat(max_tokens=12, temperature=0, ignore_eos=True)
    assert texts[0] == r["choices"][0]["message"]["content"]
    fin = [c for c in chunks[:-1] if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(fin) == 1 and fin[0]["choices"][0]["finish_reason"] == "length"
    assert fin[0]["choices"][0]["stop_reason"] is None
    # every chunk but the role chunk and the finish chunk carries text
    for c in chunks[1:-1]:
        ch = c["choices"][0]
        if ch["finish_reason"] is None:
            assert ch["delta"].get("content"), c
        assert ch["logprobs"] is None


def test_stream_usage_options():
    base = {"messages": MSG, "max_tokens": 5, "temperature": 0, "ignore_eos": True, "stream": True}
    # no stream_options, and {}: no usage chunk (vllm-project/vllm#36379)
    for so in (None, {}):
        b = dict(base)
        if so is not None:
            b["stream_options"] = so
        code, _, chunks, _, _ = stream(A, "/v1/chat/completions", b)
        check_stream_shape(chunks, usage=False)
    for so in ({"include_usage": True}, {"continuous_usage_stats": False}):
        code, _, chunks, _, _ = stream(A, "/v1/chat/completions", dict(base, stream_options=so))
        _, u = check_stream_shape(chunks, usage=True)
        assert u["usage"]["completion_tokens"] == 5, u
        assert chunks[-2] is u
    code, _, chunks, _, _ = stream(A, "/v1/chat/completions", dict(base, stream_options={"include_usage": False}))
    check_stream_shape(chunks, usage=False)
    # continuous usage: every chunk has the running count
    code, _, chunks, _, _ = stream(A, "/v1/chat/completions",
                                   dict(base, stream_options={"include_usage": True, "continuous_usage_stats": True}))
    _, u = check_stream_shape(chunks, usage=True)
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-2]]
    assert counts[0] == 0 and counts == sorted(counts) and counts[-1] == 5, counts
    for c in chunks[:-1]:
        assert c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"]
    # stream_options without stream
    code, r = chat(max_tokens=2, stream_options={"include_usage": True})
    assert_error(code, r, 400, param="stream_options")
    assert r["error"]["message"] == "Stream options can only be defined when `stream=True`."


def test_completions_stream():
    body = {"prompt": "The Python", "max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    code, _, chunks, _, _ = stream(A, "/v1/completions", body)
    texts, u = check_stream_shape(chunks, chat=False, usage=True)
    for c in chunks[:-2]:
        ch = c["choices"][0]
        assert set(ch) == {"index", "text", "logprobs", "finish_reason", "stop_reason"}, ch
    code, r = comp(prompt="The Python", max_tokens=6, temperature=0, ignore_eos=True)
    assert texts[0] == r["choices"][0]["text"] and u["usage"] == r["usage"]


def test_stream_equals_nonstream_sampled():
    """Seeded sampling: the streamed deltas add up to the non-streamed text exactly (no half code
    points, nothing lost or repeated), for texts full of multi-byte characters."""
    prompts = ["日本語のテキスト", "Ελληνικά και русский", "emoji 😀🎉 ok", "The Python"]
    for k, p in enumerate(prompts):
        body = {"prompt": p, "max_tokens": 24, "temperature": 1.3, "seed": 100 + k, "ignore_eos": True}
        code, r = comp(**body)
        assert code == 200
        code, _, chunks, _, _ = stream(A, "/v1/completions", dict(body, stream=True))
        texts, _ = check_stream_shape(chunks, chat=False)
        assert texts[0] == r["choices"][0]["text"], (texts[0], r["choices"][0]["text"])


def test_n_choices_stream():
    body = {"messages": MSG, "max_tokens": 4, "n": 3, "temperature": 1.0, "seed": 3, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    code, _, chunks, _, _ = stream(A, "/v1/chat/completions", body)
    texts, u = check_stream_shape(chunks, n_choices=3, usage=True)
    assert u["usage"]["completion_tokens"] == 12
    code, r = chat(max_tokens=4, n=3, temperature=1.0, seed=3, ignore_eos=True)
    assert [c["index"] for c in r["choices"]] == [0, 1, 2]
    assert [texts[i] for i in range(3)] == [c["message"]["content"] for c in r["choices"]]


def test_chat_logprobs():
    code, r = chat(max_tokens=4, temperature=0, ignore_eos=True, logprobs=True, top_logprobs=3)
    assert code == 200, r
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 4
    for e in content:
        assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 3
        assert bytes(e["bytes"]).decode() == e["token"]
        assert abs(e["top_logprobs"][0]["logprob"] - e["logprob"]) < 1e-6  # greedy
    assert "".join(e["token"] for e in content) == r["choices"][0]["message"]["content"]
    code, r = chat(max_tokens=2, logprobs=True)
    assert all(e["top_logprobs"] == [] for e in r["choices"][0]["logprobs"]["content"])
    body = {"messages": MSG, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "logprobs": True,
            "top_logprobs": 3, "stream": True}
    code, _, chunks, _, _ = stream(A, "/v1/chat/completions", body)
    got = []
    for c in chunks[:-1]:
        lp = c["choices"][0]["logprobs"]
        if lp:
            got += lp["content"]
    assert [e["token"] for e in got] == [e["token"] for e in content]
    code, r = chat(max_tokens=2, top_logprobs=2)
    assert_error(code, r, 400, param="top_logprobs")


def greedy_text(n=20):
    code, r = comp(prompt="The", max_tokens=n, temperature=0, ignore_eos=True)
    return r["choices"][0]["text"]


def test_stop_strings():
    full = greedy_text()
    stop = full[8:11]
    assert stop.strip(), full
    at = full.index(stop)
    body = {"prompt": "The", "max_tokens": 20, "temperature": 0, "ignore_eos": True, "stop": [stop]}
    code, r = comp(**body)
    c = r["choices"][0]
    assert c["text"] == full[:at] and c["finish_reason"] == "stop" and c["stop_reason"] == stop, c
    code, _, chunks, _, _ = stream(A, "/v1/completions", dict(body, stream=True))
    texts, _ = check_stream_shape(chunks, chat=False)
    assert texts[0] == full[:at], "a stop string prefix leaked into the stream: %r" % texts[0]
    fin = chunks[-2]["choices"][0]
    assert fin["finish_reason"] == "stop" and fin["stop_reason"] == stop
    code, r = comp(**dict(body, include_stop_str_in_output=True, stop=stop))
    assert r["choices"][0]["text"] == full[:at] + stop


def test_stop_token_ids():
    code, r = comp(prompt=GOLDEN["prompts"][0]["ids"], max_tokens=10, temperature=0, ignore_eos=True,
                   stop_token_ids=[GOLDEN["prompts"][0]["greedy"][3]], skip_special_tokens=False)
    c = r["choices"][0]
    assert c["finish_reason"] == "stop" and c["stop_reason"] == GOLDEN["prompts"][0]["greedy"][3], c
    assert r["usage"]["completion_tokens"] == 4


def test_model_not_found():
    code, r = chat(model="gpt-4", max_tokens=1)
    assert_error(code, r, 404)
    assert r["error"]["message"] == "The model `gpt-4` does not exist."


def test_tokenize_detokenize():
    code, r = post_json(A, "/tokenize", {"model": "tiny", "prompt": "Hello world", "add_special_tokens": False})
    assert code == 200, r
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == 512 and r["tokens"]
    code, d = post_json(A, "/detokenize", {"model": "tiny", "tokens": r["tokens"]})
    assert code == 200 and d == {"prompt": "Hello world"}
    code, r2 = post_json(A, "/tokenize", {"prompt": "Hello world", "return_token_strs": True})
    assert len(r2["token_strs"]) == r2["count"] and "".join(r2["token_strs"]).replace("\u0120", " ") == "Hello world"
    code, rc = post_json(A, "/tokenize", {"messages": MSG, "add_generation_prompt": True})
    code, ch = chat(max_tokens=1)
    assert code == 200 and rc["count"] == ch["usage"]["prompt_tokens"]
    code, r = post_json(A, "/detokenize", {"tokens": [99999999]})
    assert_error(code, r, 400)


def test_metrics():
    before = A.metrics()
    code, r = comp(prompt="The", max_tokens=3, temperature=0, ignore_eos=True)
    after = A.wait_idle()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "tachyon:kv_blocks_total", "tachyon:http_connections"):
        metric(after, name)
    assert metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total") == 3
    assert metric(after, "vllm:request_success_total", finished_reason="length") == \
        metric(before, "vllm:request_success_total", finished_reason="length") + 1
    for h in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
              "vllm:inter_token_latency_seconds", "vllm:request_prompt_tokens",
              "vllm:request_generation_tokens", "vllm:request_params_n", "vllm:request_queue_time_seconds",
              "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
              "vllm:request_inference_time_seconds", "vllm:iteration_tokens_total"):
        inf = metric(after, h + "_bucket", le="+Inf")
        assert inf == metric(after, h + "_count") and inf >= 1, h
        buckets = sorted((float(dict(ls)["le"]), v) for (n, ls), v in after.items()
                         if n == h + "_bucket" and dict(ls)["le"] != "+Inf")
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), "cumulative buckets"
    assert metric(after, "vllm:time_to_first_token_seconds_bucket", le="0.001") >= 0
    assert metric(after, "vllm:request_generation_tokens_sum") - metric(before, "vllm:request_generation_tokens_sum") == 3
    assert metric(after, "vllm:kv_cache_usage_perc") == 0
    # the request's 3 tokens: one prefill step (its prompt) and two decode steps of 1 token
    def steps_of_one(m):
        return sum(v for (n, ls), v in m.items() if n == "vllm:iteration_tokens_total_bucket"
                   and dict(ls)["le"] != "+Inf" and float(dict(ls)["le"]) == 1.0)
    assert steps_of_one(after) - steps_of_one(before) >= 2
    assert metric(after, "vllm:request_inference_time_seconds_sum") >= \
        metric(after, "vllm:request_decode_time_seconds_sum")
    code, hs, body = request(A, "GET", "/metrics")
    assert hs["content-type"].startswith("text/plain")
    assert '# TYPE vllm:prompt_tokens_total counter' in body.decode()


def test_async_scheduling_live():
    """--async-scheduling switched live over /admin/flags: the same greedy text with steps ahead,
    and /metrics counts them (auto on the CPU backend: none)."""
    kw = dict(prompt="The quick brown fox", max_tokens=8, temperature=0, ignore_eos=True)
    before = A.metrics()
    code, sync = comp(**kw)
    assert code == 200, sync
    mid = A.wait_idle()
    for name in ("tachyon:steps_ahead_total", "tachyon:tokens_ahead_total"):
        assert metric(mid, name) == metric(before, name), name
    code, r = post_json(A, "/admin/flags/async-scheduling", {"value": "on"})
    assert code == 200 and r["value"] == "on", r
    try:
        code, ahead = comp(**kw)
        assert code == 200, ahead
        after = A.wait_idle()
    finally:
        post_json(A, "/admin/flags/async-scheduling", {"value": "auto"})
    assert ahead["choices"][0]["text"] == sync["choices"][0]["text"]
    assert ahead["usage"] == sync["usage"]
    assert metric(after, "tachyon:steps_ahead_total") - metric(mid, "tachyon:steps_ahead_total") >= 5
    assert metric(after, "tachyon:tokens_ahead_total") - metric(mid, "tachyon:tokens_ahead_total") >= 5


def test_admin_flags():
    code, _, body = request(A, "GET", "/admin/flags")
    flags = json.loads(body)["data"]
    by = {f["name"]: f for f in flags}
    assert by["max-num-seqs"]["apply"] == "live" and by["block-size"]["apply"] == "rebuild"
    assert by["tensor-parallel-size"]["apply"] == "reload"
    assert by["max-model-len"]["value"] == "512"
    code, r = post_json(A, "/admin/flags/max-num-seqs", {"value": 8})
    assert code == 200 and r["value"] == "8", r
    code, _, body = request(A, "GET", "/admin/flags/max_num_seqs")
    assert code == 200 and json.loads(body)["value"] == "8"
    code, _, body = request(A, "PUT", "/admin/flags/max-num-seqs", {"value": "256"})
    assert code == 200 and json.loads(body)["value"] == "256"
    code, r = post_json(A, "/admin/flags/max-num-seqs", {"value": "abc"})
    assert_error(code, r, 400, contains="max-num-seqs")
    code, r = post_json(A, "/admin/flags/nope", {"value": 1})
    assert_error(code, r, 404)
    # reload flags reopen the engine in place: two data-parallel replicas, each with its series
    code, _, body = request(A, "PUT", "/admin/flags/data-parallel-size", {"value": 2})
    assert code == 200 and json.loads(body)["value"] == "2", body
    assert comp(prompt="The", max_tokens=4, temperature=0)[0] == 200
    code, _, body = request(A, "GET", "/metrics")
    assert 'vllm:num_requests_running{engine="1",' in body.decode()
    code, r = post_json(A, "/admin/flags/tensor-parallel-size", {"value": 3})
    assert_error(code, r, 400, contains="not a multiple of 3")
    code, _, body = request(A, "PUT", "/admin/flags/data-parallel-size", {"value": 1})
    assert code == 200 and json.loads(body)["value"] == "1", body
    code, _, body = request(A, "GET", "/health")
    assert code == 200
    # a rebuild flag, with a request in flight: it is preempted and recomputed, not lost
    res = {}
    t = threading.Thread(target=lambda: res.update(r=comp(prompt="The", max_tokens=60, temperature=0,
                                                            ignore_eos=True)))
    t.start()
    time.sleep(0.05)
    code, r = post_json(A, "/admin/flags/block-size", {"value": 32})
    assert code == 200 and r["value"] == "32", r
    t.join(60)
    assert res["r"][0] == 200 and res["r"][1]["usage"]["completion_tokens"] == 60
    m = A.metrics()
    assert metric(m, "vllm:cache_config_info", block_size="32") == 1
    code, r = post_json(A, "/admin/flags/block-size", {"value": 16})
    assert code == 200


def test_speculative_live():
    """n-gram speculative drafts switched on and off live through /admin/flags: a streamed
    greedy completion is the same with drafts (chunks may carry several tokens; usage counts
    tokens), and the vllm:spec_decode_* counters move only while drafts are on."""
    ids = [5, 6, 7, 8, 9, 10] * 3
    body = {"prompt": ids, "max_tokens": 40, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    code, _, chunks, _, _ = stream(A, "/v1/completions", body)
    plain, u0 = check_stream_shape(chunks, chat=False, usage=True)
    before = A.wait_idle()
    for name, value in (("speculative-method", "ngram"), ("prompt-lookup-min", 1), ("prompt-lookup-max", 4),
                        ("num-speculative-tokens", 3)):
        code, r = post_json(A, "/admin/flags/" + name, {"value": value})
        assert code == 200, r
    try:
        code, _, chunks, _, _ = stream(A, "/v1/completions", body)
        texts, u = check_stream_shape(chunks, chat=False, usage=True)
        assert texts[0] == plain[0] and u["usage"] == u0["usage"], (texts, u)
        assert u["usage"]["completion_tokens"] == 40
        on = A.wait_idle()
        drafted = metric(on, "vllm:spec_decode_num_draft_tokens_total")
        assert drafted > metric(before, "vllm:spec_decode_num_draft_tokens_total")
        assert metric(on, "vllm:spec_decode_num_accepted_tokens_total") > 0
        assert metric(on, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position="0") > 0
        assert metric(on, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total") == 40
    finally:
        code, r = post_json(A, "/admin/flags/num-speculative-tokens", {"value": 0})
        assert code == 200, r
    code, _, chunks, _, _ = stream(A, "/v1/completions", body)
    texts, _ = check_stream_shape(chunks, chat=False, usage=True)
    assert texts[0] == plain[0]
    assert metric(A.wait_idle(), "vllm:spec_decode_num_draft_tokens_total") == drafted


# -- reasoning parser and auth (server B) ------------------------------------------------------

def test_auth():
    body = {"messages": MSG, "max_tokens": 1}
    for hdr in (None, {"Authorization": "Bearer nope"}, {"Authorization": "k1"}, {"Authorization": "Basic k1"},
                {"Authorization": "Bearer k1x"}, {"Authorization": "Bearer k"}):
        code, _, data = request(B, "POST", "/v1/chat/completions", body, hdr)
        assert code == 401 and json.loads(data) == {"error": "Unauthorized"}, (hdr, code, data)
    for key in ("k1", "k2"):
        for scheme in ("Bearer", "bearer", "BEARER"):
            code, r = post_json(B, "/v1/chat/completions", body, {"Authorization": "%s %s" % (scheme, key)})
            assert code == 200, (scheme, key, r)
    for path in ("/health", "/ping", "/version", "/metrics", "/load"):
        code, _, _ = request(B, "GET", path)
        assert code == 200, path
    for method, path in (("GET", "/v1/models"), ("POST", "/tokenize"), ("POST", "/detokenize"),
                         ("GET", "/admin/flags"), ("POST", "/admin/flags/max-num-seqs"), ("POST", "/v1/completions")):
        code, _, data = request(B, method, path, {} if method == "POST" else None)
        assert code == 401 and json.loads(data) == {"error": "Unauthorized"}, (path, code)
    code, _, _ = request(B, "GET", "/v1/models", headers=AUTH)
    assert code == 200


def test_api_key_from_env():
    s = Server(env={"TACHYON_API_KEY": "envkey"})
    try:
        code, _, _ = request(s, "GET", "/v1/models")
        assert code == 401
        code, _, _ = request(s, "GET", "/v1/models", headers={"Authorization": "Bearer envkey"})
        assert code == 200
    finally:
        assert s.stop() == 0


def test_reasoning_nonstream():
    code, r = chat(B, AUTH, max_tokens=60, temperature=0)
    assert code == 200, r
    m = r["choices"][0]["message"]
    assert "reasoning" in m and "reasoning_content" in m and m["reasoning"] == m["reasoning_content"]
    assert m["reasoning"], m
    assert "</think>" not in (m["content"] or "") and "<think>" not in m["reasoning"]
    details = r["usage"]["completion_tokens_details"]
    assert 0 < details["reasoning_tokens"] <= r["usage"]["completion_tokens"]
    # the same request without the parser gives the raw text: reasoning + </think> + content
    code, raw = chat(A, max_tokens=60, temperature=0)
    text = raw["choices"][0]["message"]["content"]
    assert "</think>" in text, text
    before, after = text.split("</think>", 1)
    assert m["reasoning"] == before.replace("<think>", "", 1) and (m["content"] or "") == after
    code, r = chat(B, AUTH, max_tokens=20, temperature=0, include_reasoning=False)
    assert "reasoning" not in r["choices"][0]["message"]


def test_reasoning_stream():
    body = {"messages": MSG, "max_tokens": 60, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    code, _, chunks, _, _ = stream(B, "/v1/chat/completions", body, AUTH)
    assert code == 200
    reasoning, content, phase = "", "", "reasoning"
    for c in chunks[1:-2]:
        d = c["choices"][0]["delta"]
        if "reasoning" in d:
            assert d["reasoning"] == d["reasoning_content"]
            assert phase == "reasoning", "reasoning after content"
            reasoning += d["reasoning"]
        if d.get("content"):
            phase = "content"
            content += d["content"]
    code, r = chat(B, AUTH, max_tokens=60, temperature=0)
    m = r["choices"][0]["message"]
    assert reasoning == m["reasoning"] and content == (m["content"] or ""), (reasoning, content, m)
    assert chunks[-2]["usage"]["completion_tokens_details"]["reasoning_tokens"] == \
        r["usage"]["completion_tokens_details"]["reasoning_tokens"]


def test_reasoning_thinking_disabled():
    code, r = chat(B, AUTH, max_tokens=20, temperature=0, chat_template_kwargs={"enable_thinking": False})
    m = r["choices"][0]["message"]
    assert m["reasoning"] is None and m["content"], m


# -- overload, keep-alive comments, disconnect watch, shutdown ---------------------------------

def long_body(**kw):
    b = {"prompt": "The", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}
    b.update(kw)
    return b


def test_overload_503_and_keepalive():
    s = Server("--max-num-seqs", 1, "--max-queued-requests", 1, "--sse-keepalive", 0.3)
    try:
        holder = connect(s)
        holder.sendall(build("POST", "/v1/completions", long_body(stream=True)))
        r = Reader(holder)
        assert r.head()[0] == 200
        time.sleep(0.3)
        # the second waits in the queue; as a stream it gets keep-alive comments meanwhile
        waiter = connect(s)
        waiter.sendall(build("POST", "/v1/completions", {"prompt": "The", "max_tokens": 2, "stream": True}))
        wr = Reader(waiter)
        code, hs = wr.head()
        assert code == 200
        first = next(wr.chunks(hs))
        assert first.startswith(b": keep-alive\n\n"), first
        # the third finds the queue full
        code, hs503, data = request(s, "POST", "/v1/completions", {"prompt": "The", "max_tokens": 2})
        assert code == 503 and hs503.get("retry-after"), (code, hs503)
        body = json.loads(data)
        assert_error(code, body, 503, contains="max-queued-requests")
        assert metric(s.metrics(), "tachyon:requests_rejected_total") == 1
        holder.close()  # frees the slot: the waiter runs
        rest = b"".join(wr.chunks(hs))
        assert b"data: [DONE]" in rest, rest
        waiter.close()
        s.wait_idle(30)
    finally:
        assert s.stop() == 0


def test_nonstream_disconnect_is_noticed():
    s = Server()
    try:
        c = connect(s)
        c.sendall(build("POST", "/v1/completions", long_body()))
        s.wait_metric("vllm:num_requests_running", 1)
        c.close()
        m = s.wait_idle(10)
        assert metric(m, "tachyon:client_disconnects_total") == 1
        assert metric(m, "vllm:request_success_total", finished_reason="abort") == 1
    finally:
        assert s.stop() == 0


def test_shutdown_answers_in_flight():
    s = Server("--shutdown-timeout", 1)
    try:
        c1 = connect(s)
        c1.sendall(build("POST", "/v1/completions", long_body(stream=True)))
        r1 = Reader(c1)
        code, hs1 = r1.head()
        assert code == 200
        c2 = connect(s)
        c2.sendall(build("POST", "/v1/chat/completions",
                         {"messages": MSG, "max_tokens": 3000, "ignore_eos": True}))
        idle = connect(s)  # a keep-alive connection with no request
        time.sleep(0.3)
        s.proc.send_signal(signal.SIGTERM)
        # the stream ends with an abort finish and [DONE]
        body = b"".join(r1.chunks(hs1)).decode()
        events = [e[6:] for e in body.split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "[DONE]"
        fin = json.loads(events[-2])["choices"][0]
        assert fin["finish_reason"] == "abort", fin
        # the waiting request gets its partial answer
        r2 = Reader(c2)
        code, hs2 = r2.head()
        ans = json.loads(b"".join(r2.chunks(hs2)))
        assert code == 200 and ans["choices"][0]["finish_reason"] == "abort", ans
        assert s.proc.wait(30) == 0
        s._reader.join(10)  # the log's last lines may still be on their way from the pipe
        assert "stopped" in s.log()
        for c in (c1, c2, idle):
            c.close()
        # nothing listens any more
        try:
            socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
            raise AssertionError("still accepting connections")
        except OSError:
            pass
    finally:
        assert s.stop() == 0


def test_drain_refuses_new_connections():
    """SIGTERM: the listening socket closes first; a connection made during the drain is answered
    503 or refused at once (never left waiting until exit), a request on an open keep-alive
    connection gets 503 and a close, the in-flight stream finishes, and the exit status is 0."""
    s = Server("--shutdown-timeout", 60)
    try:
        c1 = connect(s)
        c1.sendall(build("POST", "/v1/completions", long_body(stream=True, max_tokens=300)))
        r1 = Reader(c1)
        code, hs1 = r1.head()
        assert code == 200
        kept = connect(s)  # a keep-alive connection, used once before the signal
        kept.sendall(build("GET", "/health"))
        rk = Reader(kept)
        assert rk.head()[0] == 200
        queued = connect(s)  # accepted by the kernel; its request arrives during the drain
        s.proc.send_signal(signal.SIGTERM)
        end = time.time() + 10
        while "shutting down" not in s.log() and time.time() < end:
            time.sleep(0.01)
        for sock in (queued, None):
            try:
                c = sock or socket.create_connection(("127.0.0.1", s.port), timeout=3)
                c.settimeout(3)
                c.sendall(build("GET", "/v1/models"))
                code, hs = Reader(c, 3).head()
                assert code == 503 and hs.get("connection") == "close", (code, hs)
                c.close()
            except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
                pass  # refused: as good as a 503 for a client that retries elsewhere
        kept.sendall(build("GET", "/v1/models"))
        code, hs = rk.head()
        assert code == 503 and hs.get("connection") == "close", (code, hs)
        body = b"".join(r1.chunks(hs1)).decode()
        events = [e[6:] for e in body.split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        assert s.proc.wait(30) == 0
        for c in (c1, kept):
            c.close()
    finally:
        assert s.stop() == 0


def test_sighup_keeps_serving():
    """SIGHUP re-reads nothing: it is logged, the stream in flight goes on to its end, new requests
    are answered, and SIGTERM still drains and exits 0 (its default action killed the server)."""
    s = Server()
    try:
        c1 = connect(s)
        c1.sendall(build("POST", "/v1/completions", long_body(stream=True, max_tokens=200)))
        r1 = Reader(c1)
        code, hs1 = r1.head()
        assert code == 200
        s.proc.send_signal(signal.SIGHUP)
        end = time.time() + 10
        while "SIGHUP" not in s.log() and time.time() < end:
            time.sleep(0.01)
        assert "nothing to re-read" in s.log(), s.log()
        body = b"".join(r1.chunks(hs1)).decode()
        events = [e[6:] for e in body.split("\n\n") if e.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        c1.close()
        s.proc.send_signal(signal.SIGHUP)
        code, _, _ = request(s, "GET", "/health")
        assert code == 200 and s.proc.poll() is None
    finally:
        assert s.stop() == 0


TESTS = [test_models, test_served_model_names_vllm_form, test_health_version_ping_load, test_unknown_path_and_method,
         test_keep_alive_connection_reuse, test_completions_golden_greedy, test_completions_shape,
         test_completions_default_max_tokens_16, test_context_length_400,
         test_completions_multiple_prompts_and_n, test_completions_echo, test_completions_logprobs,
         test_chat_shape, test_chat_content_parts_and_unknown_fields,
         test_chat_max_completion_tokens_precedence, test_chat_stream_rules, test_stream_usage_options,
         test_completions_stream, test_stream_equals_nonstream_sampled, test_n_choices_stream,
         test_chat_logprobs, test_stop_strings, test_stop_token_ids, test_model_not_found,
         test_tokenize_detokenize, test_metrics, test_async_scheduling_live, test_admin_flags,
         test_speculative_live, test_auth,
         test_api_key_from_env, test_reasoning_nonstream, test_reasoning_stream,
         test_reasoning_thinking_disabled,
         test_overload_503_and_keepalive, test_nonstream_disconnect_is_noticed,
         test_shutdown_answers_in_flight, test_drain_refuses_new_connections,
         test_sighup_keeps_serving]

if __name__ == "__main__":
    run_tests(TESTS, servers=[A, B])
