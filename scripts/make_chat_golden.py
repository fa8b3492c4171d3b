#!/usr/bin/env python3
"""Golden renders of the Qwen chat templates, for tests/unit/test_chat.c.

Renders a fixed set of conversations with each template in tests/fixtures/chat/*.jinja through
transformers' own renderer (transformers.utils.chat_template_utils.render_jinja_template: the
sandboxed Jinja environment with trim_blocks, lstrip_blocks, the json.dumps-based tojson filter
and raise_exception that apply_chat_template uses) and writes one JSON line per render to
tests/fixtures/chat/golden-<template>.jsonl:

    {"name": ..., "messages": [...], "tools": [...] | null, "add_generation_prompt": bool,
     "enable_thinking": true | false | null (not passed), "json_flags": "vllm" (optional),
     "continue_final_message": true (optional), "rendered": "..."}
                                          or, where the template fails,
    {..., "error": "...", "error_kind": "raise" (raise_exception) | "python" (other errors)}

Lines with "json_flags": "vllm" are rendered after the preprocessing vLLM applies to OpenAI
messages (text parts joined with "\n", string tool-call arguments parsed into objects, missing
or empty arguments -> {}); the C side gets the same messages with CHAT_JSON_VLLM.

Every conversation goes through its JSON text before rendering, so the renderer sees exactly
what the C test parses (some are written as raw JSON to keep duplicate keys and number
spellings). Run with the project's venv:  /root/fxvenv/bin/python scripts/make_chat_golden.py
"""

import json
import pathlib

import jinja2
from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat"
TEMPLATES = ["qwen3", "qwen3-instruct-2507", "qwen3-thinking-2507", "qwen3.5"]

# Option sets each conversation is rendered with: (add_generation_prompt, enable_thinking).
OPTIONS = [(True, None), (True, False), (False, None)]
EXTRA_OPTIONS = [(True, True), (False, False)]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Say \"where\" — 天气.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 1},
                "threshold": {"type": "number", "default": 0.5, "exclusiveMaximum": 1.0},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.\nReturns a list of results with \\escapes\\ and\ttabs.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
}
TOOLS = [WEATHER, SEARCH]


def call(name, args, call_id="call_1", flat=False):
    """An OpenAI tool call; args is a dict (object form) or a str (JSON string form)."""
    if flat:
        return {"id": call_id, "name": name, "arguments": args}
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def sys(text):
    return {"role": "system", "content": text}


def user(text):
    return {"role": "user", "content": text}


def asst(text, **extra):
    return {"role": "assistant", "content": text, **extra}


def tool(text, call_id="call_1"):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


AGENT_LOOP = [
    sys("You are a careful agent."),
    user("What's the weather in Paris and Berlin?"),
    asst(None, reasoning_content="I need both cities.\n", tool_calls=[
        call("get_weather", {"city": "Paris"}, "c1"),
        call("get_weather", {"city": "Berlin", "unit": "celsius"}, "c2")]),
    tool('{"temp": 21, "sky": "clear"}', "c1"),
    tool('{"temp": 17.5, "sky": "rain"}', "c2"),
    asst("Let me also search.", reasoning_content="Maybe check news too.",
         tool_calls=[call("search", {"query": "Paris Berlin weather news", "limit": 3}, "c3")]),
    tool("No news.", "c3"),
    asst("Paris: 21°C, clear. Berlin: 17.5°C, rain.",
         reasoning_content="\n\nCombine the results.\n\n"),
]

CONVERSATIONS = [
    ("user_only", [user("Hi")], None),
    ("system_user", [sys("You are helpful."), user("Hello!")], None),
    ("multi_turn", [user("Hi"), asst("Hello! How can I help?"), user("Tell me a joke.")], None),
    ("history_inline_reasoning", [
        user("2+2?"), asst("<think>\nsimple sum\n</think>\n\n4"), user("and 3+3?")], None),
    ("history_reasoning_content", [
        sys("S"), user("2+2?"), asst("4", reasoning_content="simple sum"), user("3+3?")], None),
    ("last_assistant_reasoning_content", [user("2+2?"), asst("4", reasoning_content="sum")],
     None),
    ("last_assistant_inline", [user("2+2?"), asst("<think>\nadd them\n</think>\n\nIt is 4.")],
     None),
    ("last_assistant_plain", [user("Hi"), asst("Hello")], None),
    ("reasoning_alias", [user("Q"), asst("A", reasoning="via reasoning key")], None),
    ("thinking_alias", [user("Q"), asst("A", thinking="via thinking key")], None),
    ("reasoning_first_wins", [
        user("Q"), asst("A", reasoning_content="first", reasoning="second")], None),
    ("reasoning_not_string", [
        user("Q"), asst("<think>inline</think>A", reasoning_content=5)], None),
    ("user_parts", [user(parts("Hello", " world", "!"))], None),
    ("system_parts", [{"role": "system", "content": parts("Be ", "brief.")}, user("Hi")], None),
    ("system_parts_tools", [{"role": "system", "content": parts("Be brief.")}, user("Hi")],
     TOOLS),
    ("assistant_parts", [user("Hi"), asst(parts("Hel", "lo")), user("Again")], None),
    ("system_null", [{"role": "system", "content": None}, user("Hi")], None),
    ("tools_no_system", [user("Weather in Paris?")], TOOLS),
    ("tools_with_system", [sys("You are a weather bot."), user("Weather in Paris?")], TOOLS),
    ("tools_empty_list", [sys("S"), user("Hi")], []),
    ("tool_call_object_args", [
        user("Weather in Paris?"),
        asst(None, tool_calls=[call("get_weather", {"city": "Paris", "days": 2})])], TOOLS),
    ("tool_call_string_args", [
        user("Weather in Paris?"),
        asst("", tool_calls=[call("get_weather", '{"city":"Paris",  "days":2}')])], TOOLS),
    ("tool_call_with_content", [
        user("Weather in Paris?"),
        asst("Let me check.", tool_calls=[call("get_weather", {"city": "Paris"})]),
        tool("sunny")], TOOLS),
    ("tool_calls_several", [
        user("Paris, Rome, Oslo?"),
        asst(None, tool_calls=[call("get_weather", {"city": "Paris"}, "a"),
                               call("get_weather", {"city": "Rome"}, "b"),
                               call("get_weather", {"city": "Oslo"}, "c")]),
        tool("sunny", "a"), tool("hot", "b"), tool("snow", "c")], TOOLS),
    ("tool_call_flat_form", [
        user("Search cats"), asst(None, tool_calls=[call("search", {"query": "cats"}, flat=True)]),
        tool("cats are great")], TOOLS),
    ("tool_call_no_args", [
        user("Ping"), asst(None, tool_calls=[{"id": "p", "function": {"name": "search"}}])],
     TOOLS),
    ("tool_response_one", [user("Q"), asst(None, tool_calls=[call("search", {"query": "q"})]),
                           tool("result"), asst("Done.")], TOOLS),
    ("agent_loop", AGENT_LOOP, TOOLS),
    ("agent_loop_then_new_query", AGENT_LOOP + [user("Thanks! And Rome?")], TOOLS),
    ("agent_loop_ends_on_tool", AGENT_LOOP[:5], TOOLS),
    ("legacy_wrapped_tool_response", [
        user("Q"), asst("<think>\nneed tool\n</think>\n\ncalling",
                        tool_calls=[call("search", {"query": "q"})]),
        user("<tool_response>\nresult\n</tool_response>"), asst("<think>got it</think>Answer")],
     TOOLS),
    ("wrapped_prefix_only", [
        user("<tool_response> is how I quote"), asst("ok", reasoning_content="r")], None),
    ("no_user", [sys("S"), asst("I speak first.")], None),
    ("only_tool_messages", [tool("orphan result")], None),
    ("tool_first_then_user", [tool("early"), user("Q")], None),
    ("system_not_first", [user("Hi"), sys("Late system"), user("Again")], None),
    ("developer_role", [{"role": "developer", "content": "Dev note"}, user("Hi")], None),
    ("empty_messages", [], None),
    ("empty_contents", [sys(""), user(""), asst(""), user("")], None),
    ("unicode_and_escapes", [
        sys("Système: «guillemets» — ünïcödé 中文 🚀"),
        user("Quote \"this\", back\\slash, tab\there,\nnewline, and </think> inside."),
        asst("Réponse: 好的 👍 with \"quotes\"", reasoning_content="pensée 🤔 </tool_call>"),
        user("Next: \u0001 control \u007f del")], None),
    ("unicode_tool_args", [
        user("Weather?"),
        asst(None, tool_calls=[call("get_weather", {
            "city": "Zürich \"Altstadt\" \\ 東京\n🌧", "note": "tab\tand \u0002 ctrl",
            "nested": {"list": [1, 2.5, "三", None, True, False], "empty": {}, "arr": []}})]),
        tool("Regen, 12°C 🌧")], TOOLS),
    ("unicode_whitespace_trim", [
        sys("\u3000 spaced system \u00a0"), user("\u2028 hi \u0085\t"),
        asst("\u2003 answer \u202f", reasoning_content="\u205f r \u1680"), user(" \x1c again \x1f")],
     None),
    ("reasoning_newlines", [user("Q"), asst("\n\nA\n", reasoning_content="\n\n thought \n\n")],
     None),
    ("assistant_think_unclosed", [user("Q"), asst("<think>never closed answer"), user("Q2")], None),
    ("assistant_multiple_close", [
        user("Q"), asst("<think>a</think>b</think>\n\nc"), user("Q2")], None),
    ("assistant_whitespace_content", [user("Q"), asst("  padded answer  \n"), user("Q2")], None),
    ("whitespace_reasoning", [user("Q"), asst("A", reasoning_content="   \n  ")], None),
    ("last_assistant_tool_calls_reasoning", [
        user("Weather?"), asst("", reasoning_content="call it",
                               tool_calls=[call("get_weather", {"city": "Oslo"})])], TOOLS),
    ("history_tool_calls_before_query", [
        user("Weather?"), asst("checking", reasoning_content="hidden",
                               tool_calls=[call("get_weather", {"city": "Oslo"})]),
        tool("cold"), asst("It is cold.", reasoning_content="also hidden"), user("Thanks")],
     TOOLS),
    ("tool_parts_content", [
        user("Q"), asst(None, tool_calls=[call("search", {"query": "q"})]),
        {"role": "tool", "tool_call_id": "call_1", "content": parts("part one", " part two")}],
     TOOLS),
    ("tool_response_markup", [
        user("Q"), asst(None, tool_calls=[call("search", {"query": "q"})]),
        tool("<tool_response>nested</tool_response>\n")], TOOLS),
    ("param_value_types", [
        user("Types"),
        asst(None, tool_calls=[call("search", {
            "query": "multi\nline", "limit": 10, "ratio": 0.25, "flag": True, "off": False,
            "nothing": None, "items": ["a", 1], "obj": {"k": "v", "n": -3}})])], TOOLS),
    ("args_null", [user("Q"), asst(None, tool_calls=[call("search", None)])], TOOLS),
    ("long_history", [
        sys("S"), user("u1"), asst("a1", reasoning_content="r1"), user("u2"), asst("<think>r2</think>a2"),
        user("u3"), asst("a3"), user("u4")], None),
    ("nul_inside", [
        sys("s\x00ys"), user("a\x00b c"), asst("x\x00y", reasoning_content="r\x00"),
        user(parts("p\x00", "q")),
        asst(None, tool_calls=[call("search", {"query": "n\x00ul"}), call("search", '{"query": "t\\u0000"}')]),
        tool("res\x00ult")],
     [{"type": "function", "function": {"name": "search", "description": "d\x00esc"}}]),
]

# Rendered with continue_final_message=True (and add_generation_prompt False, as it must be).
CONTINUE_CONVERSATIONS = [
    ("cont_empty_assistant", [user("hi"), asst("")], None),
    ("cont_trailing_spaces", [user("hi"), asst("Hello  ")], None),
    ("cont_trailing_newline", [user("hi"), asst("Hello\n")], None),
    ("cont_leading_space", [user("hi"), asst("  Hello")], None),
    ("cont_whitespace_only", [user("hi"), asst("   ")], None),
    ("cont_unicode_space", [user("hi"), asst("Hi\u3000")], None),
    ("cont_reasoning_content", [user("q"), asst("Partial", reasoning_content="thinking")], None),
    ("cont_inline_think", [user("q"), asst("<think>r</think>\n\nPartial ")], None),
    ("cont_think_only", [user("q"), asst("<think>still thinking")], None),
    ("cont_user_final", [user("Complete this: The")], None),
    ("cont_user_after_history", [user("a"), asst("b"), user("Go on: ")], None),
    ("cont_matches_template_text", [user("q"), asst("m")], None),
    ("cont_repeated_text", [user("Hello"), asst("Hello")], None),
    ("cont_history", [user("a"), asst("b"), user("c"), asst("d ")], None),
    ("cont_parts", [user("q"), asst(parts("Hel", "lo "))], None),
    ("cont_empty_parts", [user("q"), asst([])], None),
    ("cont_null_content", [user("q"), asst(None)], None),
    ("cont_tool_calls", [
        user("Weather?"), asst("Checking ", tool_calls=[call("get_weather", {"city": "Oslo"})])],
     TOOLS),
    ("cont_after_tool", [
        user("Q"), asst(None, tool_calls=[call("search", {"query": "q"})]), tool("result"),
        asst("So ")], TOOLS),
    ("cont_tool_final", [
        user("Q"), asst(None, tool_calls=[call("search", {"query": "q"})]), tool("result ")], TOOLS),
    ("cont_system_only", [sys("System ")], None),
    ("cont_nul", [user("a\x00b"), asst("x\x00y ")], None),
    ("cont_empty_conversation", [], None),
]

# Conversations written as raw JSON: duplicate keys and number spellings survive to the parser.
RAW_CONVERSATIONS = [
    ("raw_numbers", """[
      {"role": "user", "content": "numbers"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "n", "type": "function",
        "function": {"name": "search", "arguments": {"a": 1.0, "b": 1e21, "c": 1E-7, "d": -0,
        "e": -0.0, "f": 123456789012345678901234567890, "g": 0.1, "h": 1e16, "i": 1e15,
        "j": 12345.678e3, "k": 0.0001, "l": 0.00001, "m": 5e-324, "n": 1e400, "o": [2.50, -1e-10]}}}]}
    ]"""),
    ("raw_duplicate_keys", """[
      {"role": "user", "content": "dups"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "d", "type": "function",
        "function": {"name": "search", "arguments": {"query": "first", "limit": 1,
        "query": "second", "x": {"k": 1, "k": 2}}}}]}
    ]"""),
]

RAW_TOOLS = """[{"type": "function", "function": {"name": "calc", "description": "Dup keys \
and 1.0", "parameters": {"type": "object", "properties": {"x": {"type": "number", "default": 1.0,
"maximum": 1e3, "minimum": -0.5}, "x": {"type": "integer"}}}}}]"""

# Rendered after vLLM's message preprocessing (CHAT_JSON_VLLM on the C side).
VLLM_CONVERSATIONS = [
    ("vllm_user_parts", [user(parts("line one", "line two")), ], None),
    ("vllm_system_parts", [{"role": "system", "content": parts("Be", "brief.")}, user("Hi")], None),
    ("vllm_string_args", [
        user("Weather?"),
        asst(None, tool_calls=[call("get_weather", '{"city":"Paris","days":3,"ratio":1.0}')]),
        tool("sunny")], TOOLS),
    ("vllm_empty_args", [
        user("Ping"), asst(None, tool_calls=[call("search", ""),
                                             {"id": "x", "function": {"name": "search"}}])],
     TOOLS),
    ("vllm_agent_loop", [
        user("Q"), asst(None, reasoning_content="think",
                        tool_calls=[call("search", '{"query": "q", "limit": 2}')]),
        {"role": "tool", "tool_call_id": "call_1", "content": parts("res", "ult")},
        asst("final", reasoning_content="done")], TOOLS),
]


def vllm_preprocess(messages):
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        if isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        for c in m.get("tool_calls") or []:
            fn = c["function"] if c.get("function") else c
            args = fn.get("arguments")
            if not args:
                fn["arguments"] = {}
            elif not isinstance(args, (dict, list)):
                fn["arguments"] = json.loads(args)
        out.append(m)
    return out


def render(template, messages, tools, agp, think, cont=False):
    kwargs = {} if think is None else {"enable_thinking": think}
    if cont:
        kwargs["continue_final_message"] = True
    try:
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools,
                                            chat_template=template, add_generation_prompt=agp,
                                            **kwargs)
        return {"rendered": rendered[0]}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"error": str(e), "error_kind": "raise"}
        return {"error": f"{type(e).__name__}: {e}", "error_kind": "python"}
    except Exception as e:  # the template failed inside Python (TypeError, ...)
        return {"error": f"{type(e).__name__}: {e}", "error_kind": "python"}


def line(name, messages_text, tools_text, agp, think, result, flags=None, cont=False):
    head = {"name": name}
    tail = {"add_generation_prompt": agp, "enable_thinking": think}
    if flags:
        tail["json_flags"] = flags
    if cont:
        tail["continue_final_message"] = True
    tail.update(result)
    return (json.dumps(head, ensure_ascii=False)[:-1] + ', "messages": ' + messages_text +
            ', "tools": ' + tools_text + ", " + json.dumps(tail, ensure_ascii=False)[1:])


def main():
    for tname in TEMPLATES:
        template = (FIXTURES / f"{tname}.jinja").read_text()
        lines = []
        cases = [(n, json.dumps(m, ensure_ascii=False), json.dumps(t, ensure_ascii=False), None)
                 for n, m, t in CONVERSATIONS]
        cases += [(n, " ".join(raw.split()), json.dumps(TOOLS), None) for n, raw in RAW_CONVERSATIONS]
        cases.append(("raw_tools", json.dumps([user("Q")]), " ".join(RAW_TOOLS.split()), None))
        cases += [(n, json.dumps(m, ensure_ascii=False), json.dumps(t, ensure_ascii=False), "vllm")
                  for n, m, t in VLLM_CONVERSATIONS]
        for i, (name, mtext, ttext, flags) in enumerate(cases):
            messages, tools = json.loads(mtext), json.loads(ttext)
            if flags == "vllm":
                messages = vllm_preprocess(messages)
            options = OPTIONS + (EXTRA_OPTIONS if i % 4 == 0 else [])
            for agp, think in options:
                result = render(template, messages, tools, agp, think)
                lines.append(line(name, mtext, ttext, agp, think, result, flags))
        for name, messages, tools in CONTINUE_CONVERSATIONS:
            mtext, ttext = json.dumps(messages, ensure_ascii=False), json.dumps(tools)
            for think, flags in ((None, None), (False, None), (None, "vllm")):
                msgs = vllm_preprocess(messages) if flags else json.loads(mtext)
                result = render(template, msgs, tools, False, think, cont=True)
                lines.append(line(name, mtext, ttext, False, think, result, flags, cont=True))
            cases.append((name, mtext, ttext, None))
        out = FIXTURES / f"golden-{tname}.jsonl"
        out.write_text("\n".join(lines) + "\n")
        n_err = sum('"error":' in ln for ln in lines)
        print(f"{out.relative_to(ROOT)}: {len(lines)} renders of {len(cases)} conversations, "
              f"{n_err} errors")


if __name__ == "__main__":
    main()
