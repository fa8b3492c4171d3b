#!/usr/bin/env python3
"""Builds the tiny Qwen3 test fixtures and their transformers golden outputs.

Run through scripts/make-fixtures (by hand, never in CI); the outputs are committed. Writes:
  tests/fixtures/tiny-qwen3/      BF16 Qwen3ForCausalLM, tied embeddings, single safetensors file
  tests/fixtures/tiny-qwen3-fp8/  block-FP8 (e4m3, 128x128 tiles) Qwen3, untied, two shards + index
  tests/fixtures/golden/          logits and greedy continuations from transformers (eager, float32)
Both model directories carry the same byte-level BPE tokenizer, built with exactly the structure of
Qwen3's tokenizer.json (2048 regular ids, then Qwen3's 26 added tokens) and Qwen3's chat template.
Everything is seeded and trained on CPU with a fixed thread count, so reruns on the same machine and
package versions give the same bytes.
"""

import hashlib
import importlib
import inspect
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import safetensors
import safetensors.torch
import tokenizers
import torch
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
BF16 = "tiny-qwen3"
FP8 = "tiny-qwen3-fp8"
GOLDEN = "golden"

SEED = 1234
TRAIN_THREADS = 2
SEQ_LEN = 128
BATCH = 16
BF16_STEPS = 800
FP8_STEPS = 200
LR = 5e-3
REGULAR_VOCAB = 2048
PADDED_VOCAB = 2112
SIZE_LIMIT = 5 * 2**20
MIN_GREEDY_MARGIN = 1e-3
GREEDY_TOKENS = 32
FP8_MAX = 448.0
FP8_BLOCK = 128

# HF transformers models/qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX, verbatim.
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Qwen3's added tokens in id order with their `special` flags (Qwen3 tokenizer_config.json).
ADDED_TOKENS = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
]
ENDOFTEXT_ID = REGULAR_VOCAB
IM_START_ID = REGULAR_VOCAB + 1
IM_END_ID = REGULAR_VOCAB + 2

# The chat template of Qwen/Qwen3-0.6B (hybrid thinking), tokenizer_config.json "chat_template",
# verbatim; see tests/fixtures/README.md for the copies it was checked against.
QWEN3_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""
QWEN3_CHAT_TEMPLATE_SHA256 = "a55ee1b1660128b7098723e0abcd92caa0788061051c62d51cbe87d9cf1974d8"

# Hand-written multilingual text so the BPE learns merges for these scripts (the English corpus
# has almost none); it is repeated in the tokenizer corpus only.
MULTILINGUAL = """\
今天天气很好，我们一起去公园散步吧。人工智能正在改变世界，语言模型越来越大。北京是中国的首都，有很多历史古迹。我喜欢读书，也喜欢写代码。这个函数返回一个列表。
こんにちは、世界。今日はいい天気ですね。東京は日本の首都です。私はプログラムを書くのが好きです。この関数はリストを返します。
안녕하세요, 세계. 오늘 날씨가 좋네요. 서울은 한국의 수도입니다. 저는 책을 읽고 코드를 쓰는 것을 좋아합니다.
Привет, мир! Сегодня хорошая погода. Москва — столица России. Я люблю читать книги и писать программы. Эта функция возвращает список.
Γεια σου κόσμε. Ο καιρός είναι καλός σήμερα. Η Αθήνα είναι η πρωτεύουσα της Ελλάδας.
مرحبا بالعالم. الطقس جميل اليوم. القاهرة هي عاصمة مصر. أحب قراءة الكتب وكتابة البرامج.
שלום עולם. מזג האוויר יפה היום. ירושלים היא עיר עתיקה.
नमस्ते दुनिया। आज मौसम अच्छा है। दिल्ली भारत की राजधानी है। मुझे किताबें पढ़ना और प्रोग्राम लिखना पसंद है।
สวัสดีชาวโลก วันนี้อากาศดีมาก กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย ฉันชอบอ่านหนังสือและเขียนโปรแกรม
Xin chào thế giới. Hôm nay trời đẹp quá. Hà Nội là thủ đô của Việt Nam.
Café, naïve, résumé, façade, Zürich, São Paulo, Ångström, Kraków, İstanbul, Ærø, señor, smörgåsbord.
I love pizza 🍕 and coffee ☕! 😀😃😄😁 🚀✨🎉🔥 👍🏽 ❤️ 🇯🇵🇫🇷 👨‍👩‍👧 ✅ ❌ ⚠️ → ← ≤ ≥ ≠ ∑ ∞ π ° € £ ¥ © ®
"""


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Corpus


STDLIB_MODULES = [
    "abc", "argparse", "array", "ast", "asyncio", "base64", "bisect", "calendar", "cmath",
    "codecs", "collections", "concurrent.futures", "configparser", "contextlib", "copy", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum", "filecmp",
    "fnmatch", "fractions", "functools", "getopt", "gettext", "glob", "graphlib", "gzip",
    "hashlib", "heapq", "hmac", "html", "html.parser", "http.client", "http.server", "imaplib",
    "inspect", "io", "ipaddress", "itertools", "json", "keyword", "linecache", "locale",
    "logging", "lzma", "mailbox", "math", "mimetypes", "numbers", "operator", "optparse", "os",
    "pathlib", "pickle", "pkgutil", "platform", "plistlib", "poplib", "pprint", "queue",
    "random", "re", "reprlib", "sched", "secrets", "selectors", "shelve", "shlex", "shutil",
    "signal", "smtplib", "socket", "socketserver", "sqlite3", "ssl", "stat", "statistics",
    "string", "struct", "subprocess", "sys", "tarfile", "tempfile", "textwrap", "threading",
    "time", "timeit", "tokenize", "traceback", "types", "typing", "unicodedata", "unittest",
    "urllib.parse", "urllib.request", "uuid", "warnings", "wave", "weakref", "xml.dom.minidom",
    "xml.etree.ElementTree", "zipfile", "zlib",
]

CODE_MODULES = ["bisect", "colorsys", "fnmatch", "heapq", "json.decoder", "json.encoder",
                "shlex", "string", "textwrap"]


def stdlib_docstrings():
    """(subject, docstring) pairs of stdlib modules and their public members, in a fixed order."""
    out, seen = [], set()

    def add(subject, obj):
        doc = inspect.getdoc(obj)
        if not doc or len(doc) < 80 or doc in seen:
            return
        seen.add(doc)
        out.append((subject, doc))

    for name in STDLIB_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        add(name, mod)
        for attr in sorted(vars(mod)):
            if attr.startswith("_"):
                continue
            obj = getattr(mod, attr)
            if getattr(obj, "__module__", None) != mod.__name__:
                continue
            add(f"{name}.{attr}", obj)
            if inspect.isclass(obj):
                for meth, member in sorted(vars(obj).items()):
                    if not meth.startswith("_"):
                        add(f"{name}.{attr}.{meth}", member)
    return out


def pydoc_topics():
    from pydoc_data.topics import topics

    return [(key, topics[key]) for key in sorted(topics)]


def code_texts():
    return [inspect.getsource(importlib.import_module(m)) for m in CODE_MODULES]


def number_texts(rng):
    lines = []
    for _ in range(3000):
        a, b = rng.randint(0, 9999), rng.randint(1, 999)
        kind = rng.randrange(6)
        if kind == 0:
            lines.append(f"{a} + {b} = {a + b}")
        elif kind == 1:
            lines.append(f"{a} * {b} = {a * b}")
        elif kind == 2:
            year, month, day = rng.randint(1900, 2030), rng.randint(1, 12), rng.randint(1, 28)
            lines.append(f"{year}-{month:02d}-{day:02d}")
        elif kind == 3:
            lines.append(f"{a / b:.4f}")
        elif kind == 4:
            lines.append(f"0x{a:04X} {a:,} {b}%")
        else:
            lines.append(f"[{a}, {b}, {a - b}]")
    return ["\n".join(lines[i:i + 50]) for i in range(0, len(lines), 50)]


def strip_title(text):
    """Splits a pydoc topic into its title (the line above a row of *, = or -) and its body."""
    lines = text.strip().split("\n")
    if len(lines) > 2 and lines[1] and set(lines[1]) <= set("*=-~"):
        return lines[0].strip(), "\n".join(lines[2:])
    return None, text


def prose_paragraphs(text, limit):
    """Paragraphs of running prose (no grammar rules or indented code), cut to about `limit`
    characters at a sentence end."""
    out = []
    for para in text.strip().split("\n\n"):
        if not para or para[0].isspace() or "::=" in para or ">>>" in para:
            continue
        para = " ".join(para.split())
        if len(para) < 40:
            continue
        if len(para) > limit:
            cut = para[:limit]
            end = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
            para = cut[: end + 1] if end > 40 else cut.rsplit(" ", 1)[0] + "."
        out.append(para)
    return out


QUESTIONS = [
    "What is {s}?",
    "Tell me about {s}.",
    "Explain {s}.",
    "How does {s} work?",
    "Can you describe {s} in Python?",
    "What does {s} do?",
]
SYSTEMS = ["You are a helpful assistant.", "You are a concise Python expert."]


def conversation(subject, answer, rng):
    """One exchange rendered exactly as the Qwen3 template renders it, with the empty or short
    think block the template emits for the last assistant turn."""
    text = ""
    if rng.random() < 0.2:
        text += f"<|im_start|>system\n{rng.choice(SYSTEMS)}<|im_end|>\n"
    text += f"<|im_start|>user\n{rng.choice(QUESTIONS).format(s=subject)}<|im_end|>\n"
    text += "<|im_start|>assistant\n"
    if rng.random() < 0.5:
        text += "<think>\n\n</think>\n\n"
    else:
        text += f"<think>\nThe user asks about {subject}. I will explain it briefly.\n</think>\n\n"
    return text + f"{answer}<|im_end|>\n"


def chat_samples(topics, docstrings, rng):
    """Questions on pydoc topic titles answered with the topic's paragraphs, and questions on
    stdlib names answered with the first paragraph of their docstring."""
    samples = []
    for key, text in topics:
        title, body = strip_title(text)
        subject = title or key.replace("-", " ")
        if subject.startswith("The "):
            subject = "the " + subject[4:]
        for answer in prose_paragraphs(body, 360)[:4]:
            samples.append(conversation(subject, answer, rng))
    for subject, doc in docstrings:
        paragraphs = prose_paragraphs(doc, 360)
        if paragraphs:
            samples.append(conversation(subject, paragraphs[0], rng))
    return samples


# ---------------------------------------------------------------------------------------------
# Tokenizer


def build_tokenizer(corpus):
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False,
                               ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=REGULAR_VOCAB, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer=trainer)

    # The Python bindings build the ByteLevel decoder and the trained model with defaults that
    # differ from Qwen3's serialized options, so set those fields in the JSON.
    spec = json.loads(tok.to_str())
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                       "use_regex": False}
    spec["model"]["continuing_subword_prefix"] = ""
    spec["model"]["end_of_word_suffix"] = ""
    tok = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    if tok.get_vocab_size(with_added_tokens=False) != REGULAR_VOCAB:
        sys.exit(f"BPE training produced {tok.get_vocab_size()} ids, want {REGULAR_VOCAB}")

    def added(content, special):
        return AddedToken(content, single_word=False, lstrip=False, rstrip=False, normalized=False,
                          special=special)

    tok.add_special_tokens([added(c, s) for c, s in ADDED_TOKENS if s])
    tok.add_tokens([added(c, s) for c, s in ADDED_TOKENS if not s])
    for i, (content, _) in enumerate(ADDED_TOKENS):
        if tok.token_to_id(content) != REGULAR_VOCAB + i:
            sys.exit(f"added token {content} got id {tok.token_to_id(content)}")
    return tok


def tokenizer_config():
    decoder = {}
    for i, (content, special) in enumerate(ADDED_TOKENS):
        decoder[str(REGULAR_VOCAB + i)] = {"content": content, "lstrip": False, "normalized": False,
                                           "rstrip": False, "single_word": False,
                                           "special": special}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, s in ADDED_TOKENS[1:] if s],
        "bos_token": None,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


GENERATION_CONFIG = {
    "bos_token_id": ENDOFTEXT_ID,
    "do_sample": True,
    "eos_token_id": [IM_END_ID, ENDOFTEXT_ID],
    "pad_token_id": ENDOFTEXT_ID,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}


def write_json(path, obj):
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer_files(tok, directory):
    # Unindented: the pretty form is twice the size and the fixtures have a size budget.
    tok.save(str(directory / "tokenizer.json"), pretty=False)
    write_json(directory / "tokenizer_config.json", tokenizer_config())
    write_json(directory / "generation_config.json", GENERATION_CONFIG)


def check_tokenizer(directory, samples):
    """The saved tokenizer round-trips through tokenizers and transformers, and the chat template
    renders what models.md 6.1 says the Qwen3 template renders."""
    path = directory / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    pre = spec["pre_tokenizer"]["pretokenizers"]
    assert pre[0]["pattern"]["Regex"] == PRETOKENIZE_REGEX, "regex not verbatim"
    assert pre[0]["behavior"] == "Isolated" and pre[0]["invert"] is False
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    assert pre[1] == byte_level and spec["post_processor"] == byte_level
    assert spec["decoder"] == byte_level and spec["normalizer"] == {"type": "NFC"}
    model = spec["model"]
    expect = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False}
    assert {k: model[k] for k in expect} == expect, "BPE options differ from Qwen3"
    vocab = model["vocab"]
    assert sorted(vocab.values()) == list(range(REGULAR_VOCAB))
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    assert len(alphabet) == 256 and all(sym in vocab for sym in alphabet)
    for i, (content, special) in enumerate(ADDED_TOKENS):
        entry = spec["added_tokens"][i]
        assert entry == {"id": REGULAR_VOCAB + i, "content": content, "single_word": False,
                         "lstrip": False, "rstrip": False, "normalized": False, "special": special}

    tok = Tokenizer.from_file(str(path))
    assert json.loads(tok.to_str()) == spec, "tokenizer.json does not round-trip"
    hf = AutoTokenizer.from_pretrained(str(directory))
    assert type(hf).__name__.startswith("Qwen2Tokenizer"), type(hf).__name__
    assert hf.eos_token_id == IM_END_ID and hf.pad_token_id == ENDOFTEXT_ID
    assert hf.bos_token is None and hf.unk_token is None
    for text in samples:
        ids = tok.encode(text).ids
        assert hf.encode(text) == ids, f"transformers and tokenizers disagree on {text[:40]!r}"
        assert tok.decode(ids, skip_special_tokens=False) == text or "\u0301" in text
    think = tok.encode("<think>\nhm\n</think>\n\nok<|im_end|>").ids
    assert hf.decode(think, skip_special_tokens=True) == "<think>\nhm\n</think>\n\nok"

    def render(messages, **kw):
        return hf.apply_chat_template(messages, tokenize=False, **kw)

    user = [{"role": "user", "content": "Hi"}]
    assert render(user, add_generation_prompt=True) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert render([{"role": "system", "content": "S"}] + user, add_generation_prompt=True,
                  enable_thinking=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    history = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nR1\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2", "reasoning_content": "R2"},
    ]
    assert render(history) == (
        "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nR2\n</think>\n\n"
        "A2<|im_end|>\n")
    assert render(user + [{"role": "assistant", "content": "Hello"}]) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        "Hello<|im_end|>\n")
    tool = {"type": "function", "function": {"name": "add", "description": "Adds.",
                                             "parameters": {"type": "object", "properties": {}}}}
    calls = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "1+2?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function",
                         "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}]},
        {"role": "tool", "content": "3"},
        {"role": "tool", "content": "ok"},
    ]
    assert render(calls, tools=[tool], add_generation_prompt=True) == (
        "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> "
        "XML tags:\n<tools>\n" + json.dumps(tool, ensure_ascii=False) + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
        "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n1+2?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n"
        "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\nok\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    return tok


# ---------------------------------------------------------------------------------------------
# Models


def qwen3_config(layers, intermediate, tied):
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ENDOFTEXT_ID,
        "eos_token_id": IM_END_ID,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 128,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "max_position_embeddings": 4096,
        "max_window_layers": layers,
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "transformers_version": transformers.__version__,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": PADDED_VOCAB,
    }
    return cfg


def fp8_config():
    cfg = qwen3_config(2, 320, False)
    out = {}
    for key, value in cfg.items():
        if key == "rope_scaling":
            continue
        if key == "rope_theta":
            out["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                          "quant_method": "fp8", "weight_block_size": [128, 128]}
            out["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000}
            continue
        out[key] = value
    return dict(sorted(out.items()))


def hf_config(cfg, attn):
    kw = {k: v for k, v in cfg.items()
          if k not in ("quantization_config", "architectures", "transformers_version",
                       "torch_dtype")}
    return Qwen3Config(**kw, attn_implementation=attn)


def training_stream(tok, docs, chats, rng):
    """One token array: shuffled documents and conversations, each closed by <|endoftext|>."""
    items = docs + chats
    rng.shuffle(items)
    encoded = tok.encode_batch(items)
    ids = []
    for enc in encoded:
        ids.extend(enc.ids)
        ids.append(ENDOFTEXT_ID)
    return torch.tensor(ids, dtype=torch.long)


def train(model, stream, steps, lr, seed, label):
    """Next-token training on random SEQ_LEN windows of the stream; returns the mean loss of the
    last logged stretch of steps."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, steps // 20)

    def lr_factor(step):
        # Linear warmup, then cosine decay to 10%.
        decay = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps))
        return min(1.0, (step + 1) / warmup) * decay

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    model.train()
    t0, recent = time.time(), []
    for step in range(steps):
        starts = torch.randint(0, len(stream) - SEQ_LEN, (BATCH,), generator=gen)
        batch = torch.stack([stream[s:s + SEQ_LEN] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        recent.append(loss.item())
        if (step + 1) % 50 == 0 or step + 1 == steps:
            log(f"  {label} step {step + 1}/{steps} loss {sum(recent) / len(recent):.3f} "
                f"({time.time() - t0:.0f}s)")
            final, recent = sum(recent) / len(recent), []
    model.eval()
    return final


def bf16_state(model):
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}


def save_bf16_fixture(model, cfg, tok, out):
    """Saves through transformers' own save_pretrained so the file is what HF writes for a tied
    Qwen3 (no lm_head.weight, metadata format=pt), then checks exactly that."""
    with tempfile.TemporaryDirectory() as tmp:
        bf16 = Qwen3ForCausalLM(hf_config(cfg, "eager")).to(torch.bfloat16)
        bf16.load_state_dict(bf16_state(model))
        bf16.save_pretrained(tmp, safe_serialization=True)
        shutil.copyfile(Path(tmp) / "model.safetensors", out / "model.safetensors")
    with safetensors.safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}, f.metadata()
        keys = set(f.keys())
        assert "lm_head.weight" not in keys and "model.embed_tokens.weight" in keys
        assert all(f.get_slice(k).get_dtype() == "BF16" for k in keys)
    write_json(out / "config.json", cfg)
    write_tokenizer_files(tok, out)


def quantize_block_fp8(w):
    """Per 128x128 tile: scale_inv = bf16(amax/448), q = e4m3(w / scale_inv), so that
    float(q) * float(scale_inv) is exactly the stored weight."""
    n, k = w.shape
    nb, kb = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    scale_inv = torch.empty(nb, kb, dtype=torch.bfloat16)
    for i in range(nb):
        for j in range(kb):
            rows = slice(i * FP8_BLOCK, (i + 1) * FP8_BLOCK)
            cols = slice(j * FP8_BLOCK, (j + 1) * FP8_BLOCK)
            tile = w[rows, cols].float()
            s = (tile.abs().max() / FP8_MAX).to(torch.bfloat16)
            if s.item() == 0:
                s = torch.tensor(1.0, dtype=torch.bfloat16)
            scale_inv[i, j] = s
            q[rows, cols] = (tile / s.float()).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale_inv


def dequantize_block_fp8(q, scale_inv):
    n, k = q.shape
    full = scale_inv.float().repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)
    return q.float() * full[:n, :k]


LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def is_fp8_linear(name):
    return name.startswith("model.layers.") and name.endswith(".weight") and any(
        f".{lin}." in name for lin in LINEARS)


def save_fp8_fixture(state, cfg, tok, out, is_fp8=is_fp8_linear, first_shard=None):
    """BF16 `state` with the `is_fp8` linears in block FP8, in two shards (`first_shard`'s, rest)."""
    first_shard = first_shard or (lambda k: k == "model.embed_tokens.weight" or
                                  k.startswith("model.layers.0."))
    tensors = {}
    for name, value in state.items():
        if is_fp8(name):
            q, s = quantize_block_fp8(value)
            tensors[name] = q
            tensors[name + "_scale_inv"] = s
        else:
            tensors[name] = value
    assert "lm_head.weight" in tensors
    shard1 = {k: v for k, v in tensors.items() if first_shard(k)}
    shard2 = {k: v for k, v in tensors.items() if k not in shard1}
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for fname, shard in zip(names, (shard1, shard2)):
        safetensors.torch.save_file(dict(sorted(shard.items())), str(out / fname),
                                    metadata={"format": "pt"})
        weight_map.update({k: fname for k in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    write_json(out / "model.safetensors.index.json",
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    write_json(out / "config.json", cfg)
    write_tokenizer_files(tok, out)


def fp8_init_from(bf16_model, cfg):
    """Starts the 2-layer FP8 model from the trained BF16 model: layers 0-1, the first 320 MLP
    channels, and lm_head = the tied embedding."""
    model = Qwen3ForCausalLM(hf_config(cfg, "eager"))
    src = bf16_model.state_dict()
    inter = cfg["intermediate_size"]
    new = {}
    for name, value in model.state_dict().items():
        if name == "lm_head.weight":
            new[name] = src["model.embed_tokens.weight"].clone()
        elif name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
            new[name] = src[name][:inter].clone()
        elif name.endswith("mlp.down_proj.weight"):
            new[name] = src[name][:, :inter].clone()
        else:
            new[name] = src[name].clone()
    model.load_state_dict(new)
    return model


# ---------------------------------------------------------------------------------------------
# Golden outputs


def load_stored_bf16(directory):
    """f32 state dict holding exactly the stored BF16 values of tiny-qwen3."""
    sd = safetensors.torch.load_file(str(directory / "model.safetensors"))
    return {k: v.float() for k, v in sd.items()}


def load_stored_fp8(directory):
    """f32 state dict of tiny-qwen3-fp8: fp8 * scale_inv for FP8 linears (models.md 2.3)."""
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    raw = {}
    for fname in sorted(set(index["weight_map"].values())):
        raw.update(safetensors.torch.load_file(str(directory / fname)))
    out = {}
    for name, value in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if value.dtype == torch.float8_e4m3fn:
            out[name] = dequantize_block_fp8(value, raw[name + "_scale_inv"])
        else:
            out[name] = value.float()
    return out


def reference_model(cfg, state):
    model = Qwen3ForCausalLM(hf_config(cfg, "eager")).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert missing == (["lm_head.weight"] if cfg["tie_word_embeddings"] else []), missing
    if cfg["tie_word_embeddings"]:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model


@torch.no_grad()
def full_logits(model, ids):
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids, n=GREEDY_TOKENS):
    ids, out, margins = list(ids), [], []
    for _ in range(n):
        last = full_logits(model, ids)[-1]
        top = torch.topk(last, 2)
        margins.append((top.values[0] - top.values[1]).item())
        nxt = int(top.indices[0])
        out.append(nxt)
        ids.append(nxt)
    return out, min(margins)


def logit_positions(n):
    if n <= 8:
        return list(range(n))
    return sorted({round(i * (n - 1) / 7) for i in range(8)})


# Candidate prompt texts per slot, tried in order until every greedy step has a clear winner.
PROMPTS = [
    (1, ["The", "A", "In", "It"]),
    (7, ["The default value of the argument is",
         "A function definition defines a user",
         "The following example shows how to"]),
    (17, ["<|im_start|>user\nWhat is a lambda expression?<|im_end|>\n<|im_start|>assistant\n",
          "<|im_start|>user\nHow does the with statement work?<|im_end|>\n<|im_start|>assistant\n",
          "<|im_start|>user\nTell me about exceptions.<|im_end|>\n<|im_start|>assistant\n"]),
    (33, ["If the object is a class instance and the attribute reference occurs on both sides of "
          "the assignment operator, the right-hand side",
          "When a description of an arithmetic operator below uses the phrase \"the numeric "
          "arguments are converted to a common type\", this means"]),
    (60, ["The value 3.14 was rounded to 3.\nThe string 'naïve café' has 10 code points; "
          "東京 is a city. A function definition is an executable statement. Its execution "
          "binds the function name to",
          "The \"for\" statement is used to iterate over the elements of a sequence (such as a "
          "string, tuple or list) or other iterable object. The expression list is evaluated "
          "once; it should yield an iterable object. An iterator is created for the",
          "The \"while\" statement is used for repeated execution as long as an expression is "
          "true. This repeatedly tests the expression and, if it is true, executes the first "
          "suite; if the expression is false (which may be the first time it is tested) the"]),
]


def make_golden(fixture, model, tok, golden_dir, name=None, prompt_sets=PROMPTS,
                n_greedy=GREEDY_TOKENS, min_margin=MIN_GREEDY_MARGIN, reference="eager float32"):
    """golden/<name or fixture>.json, .logits.f32: each prompt set's first with margins >= min."""
    name = name or fixture
    prompts, rows = [], []
    for target, candidates in prompt_sets:
        chosen = None
        for text in candidates:
            ids = tok.encode(text).ids
            out, margin = greedy(model, ids, n_greedy)
            log(f"  {name}: {len(ids):2d}-token prompt {text[:32]!r}... greedy min margin "
                f"{margin:.4f}")
            if margin >= min_margin:
                chosen = (text, ids, out, margin)
                break
        if chosen is None:
            sys.exit(f"{name}: no prompt of ~{target} tokens has greedy margins >= {min_margin}")
        text, ids, out, margin = chosen
        positions = logit_positions(len(ids))
        logits = full_logits(model, ids)
        prompts.append({
            "text": text,
            "ids": ids,
            "logit_positions": positions,
            "logits_row_offset": len(rows),
            "greedy": out,
            "greedy_min_margin": round(margin, 6),
            "greedy_text": tok.decode(out, skip_special_tokens=False),
        })
        rows.extend(logits[p].numpy() for p in positions)
    logits_file = f"{name}.logits.f32"
    np.stack(rows).astype("<f4").tofile(golden_dir / logits_file)
    write_golden_json(golden_dir / f"{name}.json", {
        "fixture": fixture,
        "vocab_size": PADDED_VOCAB,
        "reference": f"transformers {transformers.__version__} {reference}",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "logits_file": logits_file,
        "prompts": prompts,
    })
    return prompts


def write_golden_json(path, golden):
    """Indented JSON with each value on one line, so id lists do not take one line per id."""
    def fields(obj, indent):
        pad = " " * indent
        return ",\n".join(f"{pad}{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}"
                           for k, v in obj.items())

    head = {k: v for k, v in golden.items() if k != "prompts"}
    prompts = ",\n".join("    {\n" + fields(p, 6) + "\n    }" for p in golden["prompts"])
    path.write_text("{\n" + fields(head, 2) + ',\n  "prompts": [\n' + prompts + "\n  ]\n}\n",
                    encoding="utf-8")


def check_bf16_roundtrip(bf16_dir, golden_dir):
    """transformers' own loader on the saved fixture reproduces the golden logits."""
    golden = json.loads((golden_dir / f"{BF16}.json").read_text())
    rows = np.fromfile(golden_dir / golden["logits_file"], dtype="<f4").reshape(-1, PADDED_VOCAB)
    model = Qwen3ForCausalLM.from_pretrained(str(bf16_dir), dtype=torch.float32,
                                             attn_implementation="eager").eval()
    for p in golden["prompts"]:
        logits = full_logits(model, p["ids"]).numpy()
        want = rows[p["logits_row_offset"]:p["logits_row_offset"] + len(p["logit_positions"])]
        diff = np.abs(logits[p["logit_positions"]] - want).max()
        assert diff <= 1e-4, f"from_pretrained logits differ by {diff}"


# ---------------------------------------------------------------------------------------------


def install(staging):
    """Replaces the fixture directories only once everything was built and checked, so a failed
    run leaves the committed fixtures (which CMake embeds) untouched."""
    for name in (BF16, FP8, GOLDEN):
        dst = FIXTURES / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(staging / name, dst)


def main():
    if hashlib.sha256(QWEN3_CHAT_TEMPLATE.encode()).hexdigest() != QWEN3_CHAT_TEMPLATE_SHA256:
        sys.exit("the embedded Qwen3 chat template was altered")
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(TRAIN_THREADS)
    rng = random.Random(SEED)
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"tokenizers {tokenizers.__version__}, safetensors {safetensors.__version__}, "
        f"python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="make-fixtures-") as tmp:
        staging = Path(tmp)
        for name in (BF16, FP8, GOLDEN):
            (staging / name).mkdir()
        results = build(staging, rng)
        install(staging)
    report(*results)


def build(staging, rng):
    bf16_dir, fp8_dir, golden_dir = staging / BF16, staging / FP8, staging / GOLDEN
    topics = pydoc_topics()
    docstrings = stdlib_docstrings()
    english = [text for _, text in topics] + [text for _, text in docstrings]
    chats = chat_samples(topics, docstrings, rng)
    code = code_texts()
    numbers = number_texts(rng)
    log(f"corpus: {len(english)} English documents ({sum(map(len, english))} chars), "
        f"{len(chats)} conversations, {len(code)} code files")

    tok = build_tokenizer(english + code + numbers + [MULTILINGUAL] * 100 + chats[:500])
    bf16_cfg = qwen3_config(3, 384, True)
    fp8_cfg = fp8_config()
    for directory, cfg in ((bf16_dir, bf16_cfg), (fp8_dir, fp8_cfg)):
        write_json(directory / "config.json", cfg)
        write_tokenizer_files(tok, directory)
    checks = [MULTILINGUAL, code[0][:2000], numbers[0], chats[0], topics[0][1][:2000],
              "cafe\u0301 e\u0301te\u0301", "<|im_start|>user\nhi<|im_end|><think></think>"]
    for directory in (bf16_dir, fp8_dir):
        tok = check_tokenizer(directory, checks)
    log(f"tokenizer: {REGULAR_VOCAB} BPE ids + {len(ADDED_TOKENS)} added tokens")

    stream = training_stream(tok, english, chats, rng)
    log(f"training stream: {len(stream)} tokens")

    model = Qwen3ForCausalLM(hf_config(bf16_cfg, "eager"))
    bf16_loss = train(model, stream, BF16_STEPS, LR, SEED, BF16)
    save_bf16_fixture(model, bf16_cfg, tok, bf16_dir)

    fp8_model = fp8_init_from(model, fp8_cfg)
    fp8_loss = train(fp8_model, stream, FP8_STEPS, LR / 3, SEED + 1, FP8)
    save_fp8_fixture(bf16_state(fp8_model), fp8_cfg, tok, fp8_dir)

    torch.set_num_threads(1)
    golden = {name: make_golden(name, reference_model(cfg, load(d)), tok, golden_dir) for name, cfg,
              load, d in ((BF16, bf16_cfg, load_stored_bf16, bf16_dir),
                          (FP8, fp8_cfg, load_stored_fp8, fp8_dir))}
    check_bf16_roundtrip(bf16_dir, golden_dir)
    return bf16_loss, fp8_loss, golden


def report(bf16_loss, fp8_loss, golden):
    log(f"final training loss: {BF16} {bf16_loss:.3f}, {FP8} {fp8_loss:.3f}")
    for fixture, prompts in golden.items():
        for p in prompts:
            log(f"{fixture} [{len(p['ids'])} tokens] margin {p['greedy_min_margin']:.4f}: "
                f"{p['text'][-40:]!r} -> {p['greedy_text']!r}")
    ours = 0
    for name in (BF16, FP8, GOLDEN):
        for path in sorted((FIXTURES / name).rglob("*")):
            log(f"{path.stat().st_size:>10}  {path.relative_to(FIXTURES)}")
            ours += path.stat().st_size
    log(f"written by make-fixtures: {ours} bytes = {ours / 1e6:.3f} MB = {ours / 2**20:.3f} MiB")
    total = sum(f.stat().st_size for f in FIXTURES.rglob("*") if f.is_file())
    log(f"all of tests/fixtures:    {total} bytes = {total / 1e6:.3f} MB = {total / 2**20:.3f} MiB")
    if ours >= SIZE_LIMIT:
        sys.exit(f"the fixtures written here exceed {SIZE_LIMIT} bytes")


if __name__ == "__main__":
    main()
