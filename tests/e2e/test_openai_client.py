"""The official `openai` Python client against `tachyon serve`: what a real application sees
(run by test_openai.sh in setup-venv's environment)."""
import asyncio
import os
import sys

import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from test_server_lib import Server, run_tests  # noqa: E402

S = Server("--api-key", "sk-test", "--reasoning-parser", "qwen3", "--max-model-len", 1024,
           "--served-model-name", "tiny")
BASE = "http://127.0.0.1:%d/v1" % S.port
client = openai.OpenAI(base_url=BASE, api_key="sk-test", max_retries=0, timeout=120)
MSG = [{"role": "user", "content": "What is a list in Python?"}]


def test_models():
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert models.data[0].model_extra["max_model_len"] == 1024


def test_chat_sync():
    r = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=40, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert c.finish_reason in ("stop", "length")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    extra = c.message.model_extra
    assert extra["reasoning"] == extra["reasoning_content"] and extra["reasoning"], extra
    assert r.usage.completion_tokens_details.reasoning_tokens > 0


def test_chat_stream():
    kw = dict(model="tiny", messages=MSG, max_tokens=40, temperature=0)
    stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw)
    content, reasoning, finish, usage, roles = "", "", [], None, 0
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles += 1
            content += ch.delta.content or ""
            reasoning += (ch.delta.model_extra or {}).get("reasoning") or ""
            if ch.finish_reason:
                finish.append(ch.finish_reason)
    assert roles == 1 and len(finish) == 1 and usage is not None
    r = client.chat.completions.create(**kw)
    assert content == (r.choices[0].message.content or "")
    assert reasoning == r.choices[0].message.model_extra["reasoning"]
    assert usage.completion_tokens == r.usage.completion_tokens


def test_completions_and_logprobs():
    r = client.completions.create(model="tiny", prompt="The Python", max_tokens=5, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert c.finish_reason == "length" and r.usage.completion_tokens == 5
    # special tokens (<|im_end|>) show in logprobs but not in the text, as in vLLM
    assert len(c.logprobs.tokens) == 5 and "".join(c.logprobs.tokens).replace("<|im_end|>", "") == c.text
    text = "".join(ch.choices[0].text for ch in client.completions.create(
        model="tiny", prompt="The Python", max_tokens=5, temperature=0, stream=True, extra_body={"ignore_eos": True})
        if ch.choices)
    assert text == c.text
    r = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=3, logprobs=True, top_logprobs=2,
                                       temperature=0)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in lp)


def test_n_and_stop():
    r = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=5, n=2, temperature=1.0, seed=1)
    assert [c.index for c in r.choices] == [0, 1]
    r = client.completions.create(model="tiny", prompt="The", max_tokens=20, temperature=0, stop=["."],
                                  extra_body={"ignore_eos": True})
    assert "." not in r.choices[0].text


def test_errors():
    try:
        client.chat.completions.create(model="gpt-4", messages=MSG, max_tokens=2)
        raise AssertionError("no error")
    except openai.NotFoundError as e:
        assert e.status_code == 404 and "does not exist" in str(e)
    try:
        client.chat.completions.create(model="tiny", messages=MSG, max_tokens=2, temperature=7)
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and "temperature" in str(e)
    try:
        client.completions.create(model="tiny", prompt="The", max_tokens=5000)
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert "maximum context length is 1024" in str(e)
    bad = openai.OpenAI(base_url=BASE, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        raise AssertionError("no error")
    except openai.AuthenticationError as e:
        assert e.status_code == 401


def test_async_concurrent_streams():
    async def run():
        ac = openai.AsyncOpenAI(base_url=BASE, api_key="sk-test", max_retries=0, timeout=120)

        async def one(k):
            s = await ac.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Q%d" % k}],
                                                 max_tokens=8, stream=True, stream_options={"include_usage": True})
            n_fin, usage = 0, None
            async for chunk in s:
                usage = chunk.usage or usage
                n_fin += sum(1 for c in chunk.choices if c.finish_reason)
            return n_fin, usage.completion_tokens

        out = await asyncio.gather(*[one(k) for k in range(32)])
        await ac.close()
        return out

    out = asyncio.run(run())
    assert all(f == 1 and 1 <= n <= 8 for f, n in out), out


if __name__ == "__main__":
    print("openai", openai.__version__)
    run_tests([test_models, test_chat_sync, test_chat_stream, test_completions_and_logprobs, test_n_and_stop,
               test_errors, test_async_concurrent_streams], servers=[S])
