"""Malformed and hostile requests: each gets the right 4xx (in vLLM's error envelope where the
server itself answers), slow clients are cut off by the connection timeout, and the server keeps
serving throughout (run by test_server_hostile.sh)."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server_lib import Reader, Server, build, connect, metric, post_json, request, run_tests  # noqa: E402

S = Server("--max-model-len", 512, "--http-timeout", 2)
CHAT, COMP, TOK, DETOK = "/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"
MSG = [{"role": "user", "content": "hi"}]


def raw_post(path, body_bytes, extra=""):
    return (("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
             % (path, len(body_bytes), extra)).encode() + body_bytes)


def chat_with(**kw):
    b = {"messages": MSG, "max_tokens": 2}
    b.update(kw)
    return raw_post(CHAT, json.dumps(b).encode())


def comp_with(**kw):
    b = {"prompt": "The", "max_tokens": 2}
    b.update(kw)
    return raw_post(COMP, json.dumps(b).encode())


CASES = []  # (name, raw request, expected status, our JSON error envelope expected)


def case(name, raw, status, envelope=True):
    CASES.append((name, raw, status, envelope))


# 1. invalid JSON, on every JSON endpoint
BAD_JSON = [b"", b"{", b"}", b"[", b"{\"messages\":", b"{'a': 1}", b"{\"a\": 1,}", b"nul", b"tru",
            b"{\"a\" 1}", b"[1, 2", b"{\"a\": NaN}", b"{\"a\": Infinity}", b"{\"a\": 1} // c",
            b"{} {}", b"[" * 5000 + b"]" * 5000, b"\x00", b"{\"a\": \"\\x\"}", b"{\"a\": \"\\ud800\"}",
            b"{\"a\": 01}", b"{\"a\": .5}", b"{\"a\": 1e}", b"{\"a\": \"unterminated}", b"\"a string\"",
            b"123", b"null", b"[]", b"true"]
for path in (CHAT, COMP, TOK, DETOK):
    for k, body in enumerate(BAD_JSON):
        case("bad json %d on %s" % (k, path), raw_post(path, body), 400)

# 2. invalid UTF-8 inside otherwise valid JSON
BAD_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf5\x80\x80\x80", b"\x80", b"\xf0\x28\x8c\x28"]
for k, bad in enumerate(BAD_UTF8):
    case("utf8 %d chat" % k, raw_post(CHAT, b'{"messages":[{"role":"user","content":"a' + bad + b'"}]}'), 400)
    case("utf8 %d completions" % k, raw_post(COMP, b'{"prompt":"a' + bad + b'"}'), 400)
    case("utf8 %d tokenize" % k, raw_post(TOK, b'{"prompt":"' + bad + b'"}'), 400)

# 3. wrong types
NUM_FIELDS = ["temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"]
INT_FIELDS = ["top_k", "n", "max_tokens", "max_completion_tokens", "min_tokens", "seed", "priority",
              "top_logprobs", "truncate_prompt_tokens"]
BOOL_FIELDS = ["stream", "ignore_eos", "skip_special_tokens", "include_stop_str_in_output", "logprobs",
               "add_generation_prompt", "continue_final_message", "include_reasoning", "echo"]
for f in NUM_FIELDS:
    for v in ("0.5", [], {}, True):
        case("chat %s=%r" % (f, v), chat_with(**{f: v}), 400)
for f in INT_FIELDS:
    for v in ("3", 1.5, [], True):
        case("chat %s=%r" % (f, v), chat_with(**{f: v}), 400)
for f in BOOL_FIELDS:
    for v in ("yes", 1, []):
        case("chat %s=%r" % (f, v), chat_with(**{f: v}), 400)
for f, vals in {"stop": [5, [5], {"a": 1}, ["a", None]], "stop_token_ids": [5, ["a"], [1.5], [-1]],
                "stream_options": ["x", [1]], "chat_template_kwargs": ["x", {"enable_thinking": "no"}],
                "tools": ["x", {}], "logit_bias": [[1], "x"], "response_format": ["json", {"type": 5}],
                "model": [5, ["tiny"]], "user": [5, {}], "messages": ["hi", {}, 5, None]}.items():
    for v in vals:
        case("chat %s=%r" % (f, v), chat_with(**{f: v}), 400)

# 4. numbers out of range
for f, v in [("temperature", -1), ("temperature", 2.5), ("temperature", 1e308), ("temperature", -1e308),
             ("top_p", 0), ("top_p", 1.5), ("top_p", -0.1), ("min_p", -0.5), ("min_p", 1.5),
             ("top_k", -2), ("top_k", 1e20), ("n", 0), ("n", -1), ("n", 17), ("n", 1000000000),
             ("max_tokens", 0), ("max_tokens", -1), ("max_tokens", -100), ("max_tokens", 1e12),
             ("max_tokens", 9223372036854775808), ("max_completion_tokens", 0), ("min_tokens", -1),
             ("presence_penalty", 3), ("presence_penalty", -3), ("frequency_penalty", 2.5),
             ("repetition_penalty", 0), ("repetition_penalty", -1), ("seed", 1e30), ("seed", -1e30),
             ("top_logprobs", 21), ("top_logprobs", -1), ("top_logprobs", -2), ("truncate_prompt_tokens", -5),
             ("max_tokens", 100000), ("priority", 1e40)]:
    case("chat %s=%r" % (f, v), chat_with(**{f: v}), 400)
case("chat min_tokens > max_tokens", chat_with(min_tokens=5, max_tokens=2), 400)
case("chat greedy with n=2", chat_with(temperature=0, n=2), 400)
case("chat top_logprobs without logprobs", chat_with(top_logprobs=2), 400)
case("chat 17 stop strings", chat_with(stop=["s%d" % i for i in range(17)]), 400)
case("chat 65 stop ids", chat_with(stop_token_ids=list(range(65))), 400)
case("chat stream_options without stream", chat_with(stream_options={"include_usage": True}), 400)
for f, v in [("logprobs", -1), ("logprobs", 21), ("logprobs", 1e6), ("logprobs", True), ("n", 0),
             ("max_tokens", 0), ("echo", "x"), ("suffix", "x"), ("temperature", 5), ("prompt", [999999]),
             ("prompt", [-1]), ("prompt", [1.5]), ("prompt", [[1], "a"]), ("prompt", ["a", [1]]),
             ("prompt", [[]]), ("prompt", []), ("prompt", ""), ("prompt", 5), ("prompt", {"a": 1}),
             ("prompt", None), ("prompt", [None]), ("prompt", ["a"] * 1025), ("add_special_tokens", "x"),
             ("prompt", [1] * 600)]:
    case("completions %s=%.40r" % (f, v), comp_with(**{f: v}), 400)

# 5. messages the chat format cannot take
for k, msgs in enumerate([[], [1], ["user"], [{"content": "x"}], [{"role": 5, "content": "x"}],
                          [{"role": "robot", "content": "x"}], [{"role": "", "content": "x"}],
                          [{"role": "USER", "content": "x"}], [{"role": "user", "content": 5}],
                          [{"role": "user", "content": {"text": "x"}}],
                          [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                          [{"role": "user", "content": [5]}], [{"role": "developer", "content": "x"}],
                          [{"role": "assistant", "content": "x", "tool_calls": "bad"}],
                          [{"role": "assistant", "content": "x", "tool_calls": [{"function": {}}]}]]):
    case("messages %d" % k, raw_post(CHAT, json.dumps({"messages": msgs}).encode()), 400)
case("messages missing", raw_post(CHAT, b'{"max_tokens": 2}'), 400)
case("tools []", chat_with(tools=[]), 400)
case("tool_choice without tools", chat_with(tool_choice="auto"), 400)
F_TOOLS = [{"type": "function", "function": {"name": "f"}}]
for k, choice in enumerate(["auto", "sometimes", 5, [], {}, {"type": "function"}, {"function": "f"},
                            {"function": {}}, {"function": {"name": ""}}, {"function": {"name": 5}},
                            {"function": {"name": "g"}}]):
    # "auto" needs --enable-auto-tool-choice (this server has none); the rest is malformed
    case("tool_choice %d" % k, chat_with(tools=F_TOOLS, tool_choice=choice), 400)
case("tools without tool_choice: auto", chat_with(tools=F_TOOLS), 400)
case("response_format json_object", chat_with(response_format={"type": "json_object"}), 400)
case("response_format json_schema without schema", chat_with(response_format={"type": "json_schema"}), 400)
case("logit_bias", chat_with(logit_bias={"1": 5}), 400)
case("use_beam_search", chat_with(use_beam_search=True), 400)
case("prompt_logprobs", chat_with(prompt_logprobs=1), 400)
case("chat echo", chat_with(echo=True), 400)
case("continue_final_message and add_generation_prompt",
     chat_with(continue_final_message=True, add_generation_prompt=True), 400)
case("unknown model", chat_with(model="gpt-4o"), 404)
case("unknown model on completions", comp_with(model="x"), 404)
case("unknown model on tokenize", raw_post(TOK, b'{"model": "x", "prompt": "a"}'), 404)

# 5b. U+0000 where a name or a stop string is expected, raw control characters inside strings,
# data after the document, an object key that holds U+0000 (cJSON would cut it to "model")
case("stop string with NUL", chat_with(stop=["a\u0000b"]), 400)
case("stop list with NUL", comp_with(stop="\u0000"), 400)
case("model with NUL", chat_with(model="tiny\u0000x"), 404)
case("tool_choice with NUL", chat_with(tools=[{"type": "function", "function": {"name": "f"}}],
                                      tool_choice="auto\u0000"), 400)
for path in (CHAT, COMP, TOK, DETOK):
    case("NUL after the document on %s" % path, raw_post(path, b'{"prompt": "a"}\x00garbage'), 400)
    case("NUL byte after the document on %s" % path, raw_post(path, b'{"prompt": "a"}\x00'), 400)
    case("key with NUL on %s" % path, raw_post(path, b'{"mod\\u0000el": "x", "prompt": "a"}'), 400)
for k, ctl in enumerate([b"\x00", b"\x01", b"\n", b"\t", b"\x1f"]):
    case("raw control %d in a prompt" % k, raw_post(COMP, b'{"prompt": "a' + ctl + b'b"}'), 400)
    case("raw control %d in content" % k,
         raw_post(CHAT, b'{"messages": [{"role": "user", "content": "a' + ctl + b'b"}]}'), 400)
    case("raw control %d in tokenize" % k, raw_post(TOK, b'{"prompt": "a' + ctl + b'b"}'), 400)

# 5c. tools entries as vLLM's schema types them
FN = {"name": "f"}
for k, tools in enumerate([[1], [None], ["x"], [[]], [{}], [{"type": "function"}],
                           [{"type": "function", "function": None}], [{"type": "function", "function": "f"}],
                           [{"type": "other", "function": FN}], [{"type": 5, "function": FN}],
                           [{"function": {}}], [{"function": {"name": 5}}], [{"function": {"name": None}}],
                           [{"function": {"name": "a\u0000b"}}],
                           [{"function": {"name": "f", "description": 5}}],
                           [{"function": {"name": "f", "parameters": "x"}}],
                           [{"function": {"name": "f", "parameters": []}}],
                           [{"function": {"name": "f", "strict": "yes"}}],
                           [{"function": FN}, 5]]):
    case("tools %d on chat" % k, chat_with(tools=tools), 400)
    case("tools %d on tokenize" % k, raw_post(TOK, json.dumps({"messages": MSG, "tools": tools}).encode()), 400)

# 5d. fields of vLLM's schemas that change nothing here still get their type checked
for f, v in [("add_special_tokens", "yes"), ("spaces_between_special_tokens", 1), ("length_penalty", "1"),
             ("request_id", 5), ("cache_salt", 5), ("cache_salt", ""), ("kv_transfer_params", []),
             ("vllm_xargs", "x"), ("structured_outputs", 5), ("mm_processor_kwargs", [1]),
             ("parallel_tool_calls", "yes"), ("documents", {"a": "b"}), ("documents", ["x"]),
             ("return_tokens_as_token_ids", 1), ("reasoning_effort", "max"), ("reasoning_effort", 1),
             ("chat_template", "{{ messages }}")]:
    case("chat %s=%r" % (f, v), chat_with(**{f: v}), 400)
for f, v in [("add_special_tokens", "yes"), ("length_penalty", []), ("request_id", {}), ("cache_salt", "")]:
    case("completions %s=%r" % (f, v), comp_with(**{f: v}), 400)
case("tokenize add_special_tokens", raw_post(TOK, b'{"prompt": "a", "add_special_tokens": 1}'), 400)
case("tokenize chat_template", raw_post(TOK, json.dumps({"messages": MSG, "chat_template": "x"}).encode()), 400)

# 6. tokenize / detokenize
for k, b in enumerate([{}, {"prompt": 5}, {"prompt": None}, {"messages": []}, {"messages": "x"},
                       {"prompt": "a", "return_token_strs": "yes"}]):
    case("tokenize %d" % k, raw_post(TOK, json.dumps(b).encode()), 400)
for k, b in enumerate([{}, {"tokens": "abc"}, {"tokens": [-1]}, {"tokens": [1e10]}, {"tokens": [1.5]},
                       {"tokens": ["a"]}, {"tokens": None}, {"tokens": {"a": 1}}]):
    case("detokenize %d" % k, raw_post(DETOK, json.dumps(b).encode()), 400)

# 7. admin flags
for k, b in enumerate([b'{"value": "abc"}', b'{"value": -5}', b'{}', b'{"value": [1]}', b'{"value": {}}',
                       b'[1]', b'{"value": 1e100}', b'{"value": "1 "}', b'not json', b'{"value": "\xff"}',
                       b'{"value": 0}']):
    case("admin max-num-seqs %d" % k, raw_post("/admin/flags/max-num-seqs", b), 400)
# reload flags reopen the engine in place (test_server_api); here the values they refuse
case("admin reload flag 0", raw_post("/admin/flags/tensor-parallel-size", b'{"value": 0}'), 400)
case("admin reload flag 99", raw_post("/admin/flags/data-parallel-size", b'{"value": 99}'), 400)
case("admin enum flag", raw_post("/admin/flags/scheduling-policy", b'{"value": "random"}'), 400)
case("admin unknown flag", raw_post("/admin/flags/warp-speed", b'{"value": 9}'), 404)
case("admin nested path", build("GET", "/admin/flags/a/b"), 404, False)
case("admin flag DELETE", b"DELETE /admin/flags/max-num-seqs HTTP/1.1\r\nHost: x\r\n\r\n", 405, False)

# 8. HTTP level
case("unknown path", build("GET", "/v1/engines"), 404, False)
case("path prefix", build("GET", "/v1/modelsX"), 404, False)
case("GET on chat", build("GET", CHAT), 405, False)
case("PUT on completions", build("PUT", COMP, {}), 405, False)
case("DELETE models", build("DELETE", "/v1/models"), 405, False)
case("POST metrics", build("POST", "/metrics", {}), 405, False)
case("declared body over the limit", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40000000\r\n\r\n", 413)
case("declared body over the limit, expect 100", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
     b"Content-Length: 99999999999\r\nExpect: 100-continue\r\n\r\n", 413)
case("bad content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, False)
case("negative content-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400, False)
case("bad chunk size", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n", 400, False)
case("header without colon", b"GET /health HTTP/1.1\r\nHost: x\r\nNoColonHere\r\n\r\n", 400, False)
case("huge header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n", 431, False)
case("huge url", b"GET /" + b"a" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, False)
case("HTTP/2.0 request line", b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 505, False)

# 9. request heads a proxy in front could frame differently (smuggling), and paths cut by %00
body9 = b'{"prompt": "a", "max_tokens": 1}'
case("two different content-lengths", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
     b"Content-Length: 5\r\n\r\n" % len(body9) + body9, 400)
case("a content-length list", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d, %d\r\n\r\n"
     % (len(body9), len(body9)) + body9, 400, False)
case("content-length and chunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400)
case("transfer coding gzip", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501)
case("no Host in HTTP/1.1", b"GET /health HTTP/1.1\r\n\r\n", 400, False)
case("bare LF everywhere", b"GET /health HTTP/1.1\nHost: x\n\n", 400)
case("bare LF after the request line", b"GET /health HTTP/1.1\nHost: x\r\n\r\n", 400)
case("bare LF after a header", b"GET /health HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n", 400)
case("bare LF ending the head", b"GET /health HTTP/1.1\r\nHost: x\r\n\n", 400)
case("folded header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n 2\r\n\r\n", 400)
case("folded header with a tab", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\t2\r\n\r\n", 400)
case("space before the colon", b"GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400, False)
case("NUL inside a header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400)
for path in (b"/admin/flags%00.json", b"/admin/flags/max-num-seqs%00", b"/health%00x", b"/v1/models%00"):
    case("%s" % path.decode(), b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n", 404, False)


def send_case(raw, timeout=30):
    s = connect(S, timeout)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (and closed) before the whole request was read
        r = Reader(s, timeout)
        code, hs = r.head()
        body = b"".join(r.chunks(hs))
        return code, hs, body
    finally:
        s.close()


def test_hostile_requests():
    assert len(CASES) >= 200, len(CASES)
    bad = []
    for name, raw, status, envelope in CASES:
        code, hs, body = send_case(raw)
        if code != status:
            bad.append("%s: got %d want %d: %.200r" % (name, code, status, body))
            continue
        if envelope:
            e = json.loads(body).get("error")
            if not (isinstance(e, dict) and e.get("code") == status and e.get("message") and "type" in e
                    and "param" in e):
                bad.append("%s: not the error envelope: %.200r" % (name, body))
    assert not bad, "%d of %d cases wrong:\n%s" % (len(bad), len(CASES), "\n".join(bad))
    print("  %d hostile requests answered as expected" % len(CASES))
    still_serving()


def test_oversized_body_streamed():
    # no Content-Length: the body is counted as it arrives, and answered 413 once read
    s = connect(S)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        piece = b"x" * (1 << 20)
        for _ in range(34):
            s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
        s.sendall(b"0\r\n\r\n")
        r = Reader(s)
        code, hs = r.head()
        body = json.loads(b"".join(r.chunks(hs)))
        assert code == 413 and body["error"]["code"] == 413, (code, body)
    finally:
        s.close()
    # just under the limit is read whole (and is then merely invalid JSON)
    body = b'{"prompt": "' + b"a" * ((32 << 20) - 100) + b'"'
    code, _, data = send_case(raw_post(COMP, body), timeout=120)
    assert code == 400, code
    still_serving()


def test_garbage_and_early_close():
    # not HTTP at all: the connection is dropped; half a request then close; nothing breaks
    for raw in (b"HELLO\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET /health HTT",
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro"):
        s = connect(S, 10)
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()
    still_serving()


def test_slow_loris():
    """Connections that send headers (or a body) a byte at a time and stall are closed by the
    connection timeout (2 s here), while other clients are served meanwhile."""
    slow = []
    for k in range(40):
        s = connect(S, 30)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " if k % 2 else
                  b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"prompt\"")
        slow.append(s)
    t0 = time.time()
    code, _, _ = request(S, "GET", "/health", timeout=5)
    assert code == 200
    code, r = post_json(S, COMP, {"prompt": "The", "max_tokens": 3}, timeout=10)
    assert code == 200, r
    # keep two of them dribbling a byte per second: activity resets the timer, so they live on
    # only while they send; then they stall too
    for _ in range(3):
        for s in slow[:2]:
            s.sendall(b"a")
        time.sleep(1)
    closed = 0
    for s in slow:
        s.settimeout(max(0.1, 12 - (time.time() - t0)))
        try:
            while s.recv(65536):
                pass
            closed += 1
        except socket.timeout:
            pass
        except OSError:
            closed += 1
        s.close()
    elapsed = time.time() - t0
    assert closed == len(slow), "%d of %d slow connections were closed" % (closed, len(slow))
    assert elapsed < 12, elapsed
    still_serving()


def test_strict_heads_still_accept():
    """The head checks refuse nothing a client sends: no space after the colon, trailing blanks,
    the same Content-Length twice, HTTP/1.0 without Host, escaped paths, and several requests
    pipelined on one connection (each head checked where it lies in the read buffer)."""
    for raw in (b"GET /health HTTP/1.1\r\nHost:x\r\n\r\n",
                b"GET /health HTTP/1.1\r\nHost: x  \r\nX-Empty:\r\nX-T:\tv\r\n\r\n",
                b"GET /health HTTP/1.0\r\n\r\n",
                b"GET /%761/models HTTP/1.1\r\nHost: x\r\n\r\n",
                b"GET /health?x=%00 HTTP/1.1\r\nHost: x\r\nCookie: a=b; c=d\r\n\r\n",
                b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-length: 15\r\n\r\n"
                b'{"prompt":"a"}\n'):
        code, _, body = send_case(raw)
        assert code == 200, (raw, code, body)
    body = json.dumps({"prompt": "The", "max_tokens": 1}).encode()
    one = raw_post(COMP, body)
    s = connect(S)
    try:
        s.sendall(one + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + one +
                  b"GET /health HTTP/1.1\r\nHost: x\nBad: lf\r\n\r\n")
        r = Reader(s)
        for want in (200, 200, 200, 400):
            code, hs = r.head()
            b"".join(r.chunks(hs))
            assert code == want, (want, code)
    finally:
        s.close()
    still_serving()


def test_open_without_key():
    """Bound to every address without --api-key: the log warns; /admin still answers loopback
    clients (its refusal of others is test_server_units' loopback test)."""
    srv = Server("--host", "0.0.0.0")
    try:
        assert "warning: listening on 0.0.0.0 without --api-key" in srv.log(), srv.log()
        code, _, _ = request(srv, "GET", "/admin/flags")
        assert code == 200, code
    finally:
        assert srv.stop() == 0
    assert "warning" not in S.log()


def test_large_bodies_on_workers():
    """Bodies over 64 KiB are parsed and tokenized by a worker while the connection waits: the
    answers are those of the HTTP thread's path (bench/health-latency.sh measures /health then)."""
    text = "hello world " * 20000
    small = tokenize({"prompt": "hello world "})
    big = tokenize({"prompt": text})
    assert len(big) >= 20000 * (len(small) - 1) and big[:2] == small[:2], (len(big), small)
    code, r = post_json(S, DETOK, {"tokens": big})
    assert code == 200 and r["prompt"] == text, code
    code, r = post_json(S, COMP, {"prompt": text, "max_tokens": 1})
    assert code == 400 and "context" in r["error"]["message"], r
    code, r = post_json(S, CHAT, {"messages": [{"role": "user", "content": text}], "max_tokens": 1})
    assert code == 400 and r["error"]["code"] == 400, r
    code, _, body = send_case(raw_post(TOK, b'{"prompt": "' + b"a" * 100000))
    assert code == 400 and json.loads(body)["error"]["code"] == 400, body
    # a generation whose body is large for other reasons runs as usual
    code, r = post_json(S, COMP, {"prompt": "The", "max_tokens": 2, "user": "u" * 100000})
    assert code == 200 and r["usage"]["completion_tokens"] == 2, r
    still_serving()


def tokenize(body):
    code, r = post_json(S, TOK, body, timeout=30)
    assert code == 200, (body, code, r)
    return r["tokens"]


def test_defect_regressions():
    """Requests that once killed the server or lost input (the defects issue, items 1-3)."""
    # 1. the chat form of /tokenize with a final message to continue: a double free, on every
    # template (the fixture model has Qwen3's; test_chat's golden renders cover the others)
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}],
            "add_generation_prompt": False, "continue_final_message": True}
    for _ in range(3):
        want = tokenize({"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                                   "<think>\n\n</think>\n\n"})
        assert tokenize(body) == want
    code, r = post_json(S, CHAT, dict(body, max_tokens=2), timeout=30)
    assert code == 200, r
    # every error path of the chat form of /tokenize answers and frees once
    for bad in ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}],
                 "continue_final_message": True},
                {"messages": [], "continue_final_message": True},
                {"messages": [{"role": "user", "content": "hi"}], "continue_final_message": True,
                 "add_generation_prompt": True},
                {"messages": [{"role": "robot", "content": "x"}]},
                {"messages": [{"role": "assistant", "content": "x", "tool_calls": [{"function": {}}]}]},
                {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}],
                 "tool_choice": "required"}):
        for path in (TOK, CHAT):
            code, r = post_json(S, path, bad, timeout=30)
            assert code == 400 and r["error"]["code"] == 400, (path, bad, code, r)
    assert S.alive()

    # 2. continue_final_message continues what transformers renders: trailing whitespace kept
    # where the template keeps it (Qwen3), the message continued after its text
    for text in ("Hello  ", "Hello\n", "  Hello", "m"):
        got = tokenize({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text}],
                        "add_generation_prompt": False, "continue_final_message": True})
        want = tokenize({"prompt": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                                   "<think>\n\n</think>\n\n" + text.lstrip("\n")})
        assert got == want, (text, got, want)
        code, r = post_json(S, CHAT, {"messages": [{"role": "user", "content": "hi"},
                                                   {"role": "assistant", "content": text}],
                                      "continue_final_message": True, "max_tokens": 2}, timeout=30)
        assert code == 200 and r["usage"]["prompt_tokens"] == len(want), (text, code, r)

    # 4. an error message names the value given
    for n in (17, 20, 1000):
        code, r = post_json(S, CHAT, {"messages": MSG, "n": n, "temperature": 1})
        assert code == 400 and "got %d" % n in r["error"]["message"], (n, r)
    # fields of vLLM's schemas that change nothing here are accepted with the right types
    code, r = post_json(S, CHAT, {"messages": MSG, "max_tokens": 1, "add_special_tokens": False,
                                  "request_id": "r1", "cache_salt": "s", "parallel_tool_calls": True,
                                  "documents": [{"title": "t", "text": "x"}], "reasoning_effort": "low",
                                  "length_penalty": 1.0, "chat_template": None})
    assert code == 200, r
    code, r = post_json(S, CHAT, {"messages": MSG, "max_tokens": 1, "tool_choice": "none",
                                  "tools": [{"function": {"name": "f", "description": None}},
                                            {"type": "function", "function": {"name": "g", "parameters": {},
                                                                              "strict": False}}]})
    assert code == 200, r

    # 3. U+0000 inside a string is text like any other: nothing after it is lost
    whole = tokenize({"prompt": "a\u0000b c"})
    assert len(whole) > len(tokenize({"prompt": "a"})) and len(whole) >= 3, whole
    code, r = post_json(S, DETOK, {"tokens": whole})
    assert code == 200 and r["prompt"] == "a\u0000b c", r
    code, r = post_json(S, COMP, {"prompt": "a\u0000b c", "max_tokens": 1, "echo": True})
    assert code == 200 and r["usage"]["prompt_tokens"] == len(whole), r
    assert r["choices"][0]["text"].startswith("a\u0000b c"), r
    code, r = post_json(S, COMP, {"prompt": ["x", "a\u0000b c"], "max_tokens": 1})
    assert code == 200 and r["usage"]["prompt_tokens"] == len(whole) + len(tokenize({"prompt": "x"})), r
    chat_nul = tokenize({"messages": [{"role": "user", "content": "a\u0000b c"}]})
    chat_plain = tokenize({"messages": [{"role": "user", "content": "a"}]})
    assert len(chat_nul) > len(chat_plain), (chat_nul, chat_plain)
    parts = tokenize({"messages": [{"role": "user", "content": [{"type": "text", "text": "a\u0000b c"}]}]})
    assert parts == chat_nul, (parts, chat_nul)
    code, r = post_json(S, CHAT, {"messages": [{"role": "user", "content": "a\u0000b c"}], "max_tokens": 1})
    assert code == 200 and r["usage"]["prompt_tokens"] == len(chat_nul), r
    still_serving()


def still_serving():
    code, _, _ = request(S, "GET", "/health", timeout=10)
    assert code == 200
    code, r = post_json(S, CHAT, {"messages": MSG, "max_tokens": 3}, timeout=30)
    assert code == 200 and r["choices"][0]["message"]["role"] == "assistant", r
    m = S.wait_idle(30)
    assert metric(m, "vllm:kv_cache_usage_perc") == 0


if __name__ == "__main__":
    run_tests([test_hostile_requests, test_strict_heads_still_accept, test_open_without_key,
               test_large_bodies_on_workers, test_defect_regressions, test_oversized_body_streamed,
               test_garbage_and_early_close, test_slow_loris], servers=[S])
