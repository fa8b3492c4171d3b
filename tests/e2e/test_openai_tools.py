"""Tool calling with the official `openai` client against `tachyon serve` (run by
test_openai_tools.sh in setup-venv's environment). The tiny model cannot be taught to call tools, so its replies
are scripted (TACHYON_SCRIPTED_OUTPUTS: the engine overrides the sampled tokens with a reply
chosen by the prompt's text); everything else is real: the chat templates render tools and the
history of calls, the parsers find the calls in the model's tokens, the wire carries them as vLLM
does, and the SDK's own stream accumulation assembles them."""
import json
import os
import shutil
import sys
import tempfile

import openai

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from test_server_lib import FIXTURES, Server, post_json, run_tests  # noqa: E402

TMP = tempfile.mkdtemp(prefix="tachyon-tools-")
THINK = "<think>\nThe user wants the weather: call the tool.\n</think>\n\n"
HERMES_CALL = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2, '
               '"units": {"temp": "C"}}}\n</tool_call>')
OK = "<think>\nok\n</think>\n\n"  # Qwen3 thinks first; without it all output is reasoning
RULES = [
    # after the tool answered (the history holds the call and its result): the final answer
    {"when": "21 degrees and sunny", "reply": OK + "It is 21 degrees and sunny in Paris."},
    {"when": "weather in Paris", "reply": THINK + "Let me check.\n" + HERMES_CALL},
    {"when": "Paris and Rome", "reply": OK + (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "days": 1.5e1}}\n</tool_call>')},
    # tool_choice named: the prompt already holds the call's opening with the name
    {"when": "named please", "reply": '{"city": "Oslo", "note": "fj\\u00f8rd \\"x\\""}}\n</tool_call>'},
    # tool_choice required: the prompt holds "<tool_call>\n"
    {"when": "required please", "reply": '{"name": "search", "arguments": {"q": "cats"}}\n</tool_call>'},
    {"when": "broken please", "reply": OK + '<tool_call>\n{"name": "get_weather", "arguments": {"city": '},
    {"when": "unknown please", "reply": OK + '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>'},
    # Qwen3.5's XML form (qwen3_coder), parameters typed by the tool's schema
    {"when": "XML weather", "reply": (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nZ\u00fcrich\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=units>\n{\"temp\": \"C\"}\n</parameter>\n"
        "</function>\n</tool_call>")},
]
with open(os.path.join(TMP, "script.json"), "w") as f:
    json.dump(RULES, f)
ENV = {"TACHYON_SCRIPTED_OUTPUTS": os.path.join(TMP, "script.json")}

# a copy of the tiny model whose chat template is Qwen3.5's: qwen3_coder is then its parser
QWEN35 = os.path.join(TMP, "tiny-qwen3.5")
shutil.copytree(os.path.join(FIXTURES, "tiny-qwen3"), QWEN35)
with open(os.path.join(QWEN35, "tokenizer_config.json")) as f:
    cfg = json.load(f)
with open(os.path.join(FIXTURES, "chat", "qwen3.5.jinja")) as f:
    cfg["chat_template"] = f.read()
with open(os.path.join(QWEN35, "tokenizer_config.json"), "w") as f:
    json.dump(cfg, f)

S = Server("--enable-auto-tool-choice", "--reasoning-parser", "qwen3", "--max-model-len", 2048, env=ENV)
S35 = Server("--model", QWEN35, "--enable-auto-tool-choice", "--reasoning-parser", "qwen3",
             "--max-model-len", 2048, "--served-model-name", "tiny", env=ENV)
PLAIN = Server("--max-model-len", 2048, env=ENV)  # no --enable-auto-tool-choice


def client(server):
    return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % server.port, api_key="x", max_retries=0,
                         timeout=120)


C, C35 = client(S), client(S35)
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "object"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
]


def ask(text, **kw):
    return dict(model=kw.pop("model", "tiny-qwen3"), messages=[{"role": "user", "content": text}],
                tools=TOOLS, max_tokens=200, **kw)


def streamed(c, **kw):
    """The SDK's own accumulation of a stream (ChatCompletionStreamState via .stream())."""
    with c.chat.completions.stream(**kw) as s:
        for _ in s:
            pass
        return s.get_final_completion()


def test_auto_call():
    r = C.chat.completions.create(**ask("What is the weather in Paris?"))
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    calls = c.message.tool_calls
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id.startswith("chatcmpl-tool-")
    assert calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == '{"city": "Paris", "days": 2, "units": {"temp": "C"}}'
    assert c.message.content == "\n\nLet me check.\n", repr(c.message.content)
    assert c.message.model_extra["reasoning"] == "\nThe user wants the weather: call the tool.\n"
    # streamed, as the SDK assembles it: the same call, the same content and reasoning
    f = streamed(C, **ask("What is the weather in Paris?"))
    fc = f.choices[0]
    assert fc.finish_reason == "tool_calls"
    assert [(t.function.name, t.function.arguments) for t in fc.message.tool_calls] == \
        [(t.function.name, t.function.arguments) for t in calls]
    assert fc.message.content == c.message.content


def test_raw_stream_chunks():
    """The chunks themselves: the call's first delta has index, id, type and name; the argument
    pieces follow; the finish says tool_calls."""
    s = C.chat.completions.create(stream=True, **ask("What is the weather in Paris?"))
    first, args, finish = None, "", None
    for chunk in s:
        for ch in chunk.choices:
            for t in ch.delta.tool_calls or []:
                if first is None:
                    first = t
                    assert t.index == 0 and t.id and t.type == "function" and t.function.name == "get_weather"
                else:
                    assert t.index == 0 and t.id is None and t.function.name is None
                args += t.function.arguments or ""
            finish = ch.finish_reason or finish
    assert first is not None and finish == "tool_calls"
    assert json.loads(args) == {"city": "Paris", "days": 2, "units": {"temp": "C"}}


def test_parallel_calls():
    for get in (lambda: C.chat.completions.create(**ask("Weather in Paris and Rome?")),
                lambda: streamed(C, **ask("Weather in Paris and Rome?"))):
        c = get().choices[0]
        calls = c.message.tool_calls
        assert [t.function.name for t in calls] == ["get_weather", "get_weather"]
        assert [json.loads(t.function.arguments) for t in calls] == [{"city": "Paris"}, {"city": "Rome", "days": 15.0}]
        assert calls[0].id != calls[1].id
        assert c.message.content == "\n\n" and c.finish_reason == "tool_calls"


def test_agent_turn():
    """call -> tool message -> answer, the history rendered by the real chat template."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = C.chat.completions.create(model="tiny-qwen3", messages=msgs, tools=TOOLS, max_tokens=200)
    call = r.choices[0].message.tool_calls[0]
    msgs.append(r.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": call.id, "content": "21 degrees and sunny"})
    # the rendered history holds the call and the result where the template puts them
    code, raw = post_json(S, "/tokenize", {"messages": msgs, "tools": TOOLS})
    assert code == 200 and raw["count"] > 0, raw
    r2 = C.chat.completions.create(model="tiny-qwen3", messages=msgs, tools=TOOLS, max_tokens=200)
    c = r2.choices[0]
    assert c.finish_reason == "stop" and not c.message.tool_calls
    assert c.message.content == "\n\nIt is 21 degrees and sunny in Paris.", c.message.content


def test_named_and_required():
    named = {"type": "function", "function": {"name": "get_weather"}}
    for get in (lambda: C.chat.completions.create(**ask("named please", tool_choice=named)),
                lambda: streamed(C, **ask("named please", tool_choice=named))):
        c = get().choices[0]
        assert c.finish_reason == "stop", c.finish_reason  # as vLLM reports a named choice
        assert c.message.tool_calls[0].function.name == "get_weather"
        assert json.loads(c.message.tool_calls[0].function.arguments) == {"city": "Oslo", "note": 'fj\u00f8rd "x"'}
        assert not c.message.content
    for get in (lambda: C.chat.completions.create(**ask("required please", tool_choice="required")),
                lambda: streamed(C, **ask("required please", tool_choice="required"))):
        c = get().choices[0]
        assert c.finish_reason == "tool_calls"
        assert [(t.function.name, json.loads(t.function.arguments)) for t in c.message.tool_calls] == \
            [("search", {"q": "cats"})]


def test_malformed_is_content():
    r = C.chat.completions.create(**ask("broken please"))
    c = r.choices[0]
    assert not c.message.tool_calls and c.finish_reason == "stop"
    assert c.message.content == '\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": ', \
        repr(c.message.content)
    c = C.chat.completions.create(**ask("unknown please")).choices[0]
    assert not c.message.tool_calls and "launch" in c.message.content
    f = streamed(C, **ask("unknown please"))
    assert not f.choices[0].message.tool_calls and "launch" in f.choices[0].message.content


def test_tool_choice_none_and_flags():
    c = C.chat.completions.create(**ask("What is the weather in Paris?", tool_choice="none")).choices[0]
    assert not c.message.tool_calls and "<tool_call>" in c.message.content and c.finish_reason == "stop"
    plain = client(PLAIN)
    try:
        plain.chat.completions.create(**ask("What is the weather in Paris?"))
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert "--enable-auto-tool-choice" in str(e), e
    # required and named work without it: the call is forced, the parser from the template
    c = plain.chat.completions.create(**ask("required please", tool_choice="required")).choices[0]
    assert c.message.tool_calls[0].function.name == "search"


def test_qwen35_xml_calls():
    for get in (lambda: C35.chat.completions.create(**ask("XML weather?", model="tiny")),
                lambda: streamed(C35, **ask("XML weather?", model="tiny"))):
        c = get().choices[0]
        assert c.finish_reason == "tool_calls"
        t = c.message.tool_calls[0]
        assert t.id.startswith("call_") and t.function.name == "get_weather"
        assert t.function.arguments == '{"city": "Z\u00fcrich", "days": 3, "units": {"temp": "C"}}'
    # the agent turn through Qwen3.5's template (the call rendered back as XML)
    msgs = [{"role": "user", "content": "XML weather?"}]
    r = C35.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS, max_tokens=200)
    msgs.append(r.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": r.choices[0].message.tool_calls[0].id,
                 "content": "21 degrees and sunny"})
    c = C35.chat.completions.create(model="tiny", messages=msgs, tools=TOOLS, max_tokens=200).choices[0]
    assert c.message.content == "\n\nIt is 21 degrees and sunny in Paris." and c.finish_reason == "stop"


if __name__ == "__main__":
    print("openai", openai.__version__)
    try:
        run_tests([test_auto_call, test_raw_stream_chunks, test_parallel_calls, test_agent_turn,
                   test_named_and_required, test_malformed_is_content, test_tool_choice_none_and_flags,
                   test_qwen35_xml_calls], servers=[S, S35, PLAIN])
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
