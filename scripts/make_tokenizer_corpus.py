#!/usr/bin/env python3
"""Golden tokenizations for tests/unit/test_tokenizer.c, made with Hugging Face `tokenizers`.

Trains four small byte-level BPE tokenizers (deterministic) and saves them under
tests/fixtures/tokenizer/:

  qwen3   Qwen3's tokenizer.json structure: NFC, Split(Qwen3 regex, Isolated),
          ByteLevel(use_regex=false), a 1000-token vocabulary, Qwen3's 26 added tokens after the
          vocabulary, merges in the ["a", "b"] pair form, tokenizer_config.json with eos/pad.
  qwen35  the same with Qwen3.5's regex (\\p{M} joins letters), merges in the "a b" string
          form, and extra added tokens exercising lstrip/rstrip/single_word/normalized.
  gpt2    no normalizer, ByteLevel(use_regex=true) alone (GPT-2's built-in regex).
  edge    Sequence[NFC] normalizer and two Split stages: a regex with empty (lookahead)
          matches, Oniguruma's \h, line anchors and a dot that matches newlines, then a literal
          String pattern. Only every EDGE_EVERY-th
          corpus string carries its ids (to keep the fixtures small).

then writes, for every tokenizer (those four plus the model directories named on the command
line, by default tests/fixtures/tiny-qwen3 when its tokenizer.json is not empty):

  corpus.jsonl  line 1: {"meta": {...}} naming the tokenizers (directories relative to
                tests/fixtures) with the FNV-1a 64 hash of each tokenizer.json; then one
                object per string: "text" (or "hex": the raw input bytes, for invalid UTF-8
                and NULs; HF gets bytes.decode("utf-8", "replace")),
                "cat", "ids": {name: [...]}, "dec": {name: [skip_special, keep_special]} where
                a null member (or a missing name) means "equal to the text"; hex lines have
                "dechex" instead, both decodings as hex of their UTF-8 bytes.
  decode.jsonl  random id sequences (some splitting multi-byte characters, some with ids that
                name no token): {"tok", "ids", "skiphex", "keephex"}, the two decodings as hex
                of their UTF-8 bytes (they may hold NULs).

Run by hand with the fixture venv; the outputs are committed:

    /root/fxvenv/bin/python scripts/make_tokenizer_corpus.py [MODEL_DIR ...]
"""
import argparse
import json
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIXTURES, "tokenizer")
SEED = 20250611

QWEN3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's added tokens in id order, with their "special" flag (models.md 5.2).
QWEN_ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]

# ------------------------------------------------------------------------------------------
# Text material

WORDS = (
    "the of and to in is was for on that with as by at from his her it an are were which be "
    "this has had not but or have they one their its been also new first two after who all "
    "more other would time when there can into some than only over most made may such these "
    "many where then between during both through under used about while city year state "
    "world university known school number people since part being against government system "
    "language model token tokenizer server request batch cache memory kernel thread stream "
    "latency throughput benchmark quantum photon galaxy river mountain ocean forest music "
    "history science computer network protocol function variable pointer buffer array string"
).split()
CAPS = ["The", "A", "In", "It", "We", "They", "This", "HTTP", "GPU", "CUDA", "Qwen", "JSON"]
PUNCT = [".", ",", ";", ":", "!", "?", "...", " -", " —", " (", ")", "\"", "'", "/", "%"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
CJK = (
    "我们的模型在服务器上运行速度很快这是一个测试中文分词器的句子人工智能大语言模型"
    "東京都は日本の首都ですひらがなカタカナ漢字を混ぜた文章です"
)
HANGUL = "안녕하세요 한국어 토크나이저 테스트입니다 대한민국"
ARABIC = "مرحبا بالعالم هذه جملة عربية لاختبار المحلل اللغوي مع أرقام ١٢٣٤٥"
HEBREW = "שָׁלוֹם עוֹלָם זה משפט בעברית לבדיקה"
HINDI = "नमस्ते दुनिया यह हिंदी में एक वाक्य है क्षत्रिय द्वितीय"
THAI = "สวัสดีชาวโลกนี่คือประโยคภาษาไทยสำหรับทดสอบ"
OTHER = "Привет мир Ελληνικά γλώσσα Tiếng Việt có dấu ภาษา ქართული Հայերեն ᠮᠣᠩᠭᠣᠯ"
EMOJI = [
    "😀", "👍", "👍🏽", "❤️", "🇯🇵", "🇺🇸", "👨‍👩‍👧‍👦", "🧑🏿‍💻", "🏳️‍🌈", "👩‍❤️‍💋‍👨", "1️⃣", "#️⃣",
    "🫠", "🦀", "🐍", "✨", "🚀", "☕", "🙇‍♀️", "👁️‍🗨️",
]
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
    "<div class=\"a\"><span>hi</span></div>",
    "if __name__ == \"__main__\":\n    main()\n",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); }\n",
    "curl -s http://localhost:8000/v1/models | jq '.data[0].id'",
    "fn main() { let v: Vec<u32> = (0..10).collect(); println!(\"{:?}\", v); }",
    "    \t\t    indented with tabs and spaces",
    "/^[a-z0-9_.+-]+@[a-z0-9-]+\\.[a-z.]+$/i",
    "a->b->c; p = &q; *r = 0; x <<= 2; y >>= 3; z != w && v || !u;",
]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2029",
              "\u0085", "\u180e", "\u200b", "\ufeff", "\u2009", "\u202f", "\u000b", "\u000c"]

TRICKY = ["!\u180e", "!¡", "?¿", "\u180e!", "!\u0085", "\u0085\u0085", "a\u180eb", "\u2028x",
          "\u0085!", " \u180e", "\u180e\u180e", "¡\u0085", ".\u0085", " \u0085x"]

# Code points Unicode assigned after 14.0 (PCRE2 10.42's tables), letters, digits and marks.
NEW_UNICODE = [0x31350, 0x31351, 0x323AF, 0x2EBF0, 0x11F04, 0x11F05, 0x1E4D0, 0x1E4F0, 0x1E4F5,
               0x1C89, 0xA7CB, 0x10D4A, 0x11380, 0x0CF3, 0x0897, 0x11F00, 0x1E08F, 0x116D0,
               0x1CCF0, 0x16D70]


def words(rng, n):
    out = []
    for i in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if i == 0 or r < 0.08:
            w = rng.choice(CAPS) if r < 0.03 else w.capitalize()
        elif r < 0.12:
            w = w.upper()
        out.append(w)
        if rng.random() < 0.12:
            out[-1] += rng.choice(PUNCT)
    return " ".join(out)


def sample(rng, s, lo, hi):
    n = rng.randint(lo, hi)
    start = rng.randrange(max(1, len(s) - n))
    return s[start:start + n]


def random_chars(rng, n):
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
              (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x218F), (0x2460, 0x24FF),
              (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xE0FF),
              (0xFB00, 0xFB4F), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0xFFF0, 0xFFFF),
              (0x10000, 0x100FF), (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF),
              (0xE0000, 0xE007F), (0x10FFF0, 0x10FFFF)]
    out = []
    for _ in range(n):
        if rng.random() < 0.08:
            out.append(chr(rng.choice(NEW_UNICODE)))
            continue
        a, b = rng.choice(blocks)
        c = rng.randint(a, b)
        if 0xD800 <= c < 0xE000:
            c = 0xFFFD
        out.append(chr(c))
    return "".join(out)


def training_text(rng):
    parts = []
    for _ in range(1500):
        parts.append(words(rng, rng.randint(5, 30)))
    for _ in range(150):
        parts += [sample(rng, CJK, 5, 30), sample(rng, HANGUL, 5, 20), sample(rng, ARABIC, 5, 30),
                  sample(rng, HINDI, 5, 30), sample(rng, THAI, 5, 30), sample(rng, OTHER, 5, 30),
                  sample(rng, HEBREW, 5, 20), rng.choice(CODE), "".join(rng.sample(EMOJI, 3)),
                  str(rng.randint(0, 10**9))]
    # Where HF's \s (White_Space) and PCRE2's differ (U+0085, U+180E), with punctuation that
    # forms one piece with them on one side only, so that the merges tell the splits apart.
    for _ in range(400):
        parts.append(rng.choice(WORDS) + "".join(rng.choice(TRICKY) for _ in range(3)))
    return parts


# ------------------------------------------------------------------------------------------
# Tokenizers


EDGE_REGEX = r"(?=[A-Z])|\h{2,}|\s|\p{N}+|^.|.$"
EDGE_EVERY = 6


def train(regex, vocab_size, parts, use_gpt2_regex=False, edge=False):
    tok = Tokenizer(models.BPE())
    if edge:
        tok.normalizer = normalizers.Sequence([normalizers.NFC()])
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.Split("ab", behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    elif use_gpt2_regex:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(parts, trainer=trainer)
    return tok


def add_qwen_tokens(tok):
    for content, special in QWEN_ADDED:
        t = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False,
                       single_word=False)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])


def save(tok, name, merges_as_strings=False, config=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    data = json.loads(tok.to_str())
    if merges_as_strings:
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                   for m in data["model"]["merges"]]
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
    # Reload from disk: the golden ids come from exactly the file the C test reads.
    return Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def added_decoder(tok):
    return {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                     "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
            for i, t in sorted(tok.get_added_tokens_decoder().items())}


def make_tokenizers():
    rng = random.Random(SEED)
    parts = training_text(rng)
    q3 = train(QWEN3_REGEX, 1000, parts)
    add_qwen_tokens(q3)
    q3 = save(q3, "qwen3", config={
        "added_tokens_decoder": added_decoder(q3), "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
        "tokenizer_class": "Qwen2Tokenizer"})
    q35 = train(QWEN35_REGEX, 1000, parts)
    add_qwen_tokens(q35)
    q35.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=True,
                                       normalized=False)])
    q35.add_tokens([AddedToken("[WORD]", single_word=True, normalized=False),
                    AddedToken("n\u0303o", normalized=True),
                    AddedToken(" sp", normalized=False),
                    AddedToken("<|im", normalized=False)])
    q35 = save(q35, "qwen35", merges_as_strings=True, config={
        "eos_token": {"__type": "AddedToken", "content": "<|im_end|>", "special": True},
        "pad_token": "<|endoftext|>",
        "bos_token": None})
    g2 = train(None, 600, parts, use_gpt2_regex=True)
    # A prefix of a later token comes first: matching must still prefer the longest.
    g2.add_tokens([AddedToken("<|end", normalized=False)])
    g2.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    g2 = save(g2, "gpt2")
    ed = train(EDGE_REGEX, 400, parts, edge=True)
    add_qwen_tokens(ed)
    ed = save(ed, "edge")
    return {"qwen3": ("tokenizer/qwen3", q3), "qwen35": ("tokenizer/qwen35", q35),
            "gpt2": ("tokenizer/gpt2", g2), "edge": ("tokenizer/edge", ed)}


# ------------------------------------------------------------------------------------------
# Corpus


def corpus(rng):
    items = []

    def add(cat, s):
        items.append((cat, s))

    add("empty", "")
    for s in ["HelloWorldFooBar", "abab cab", "ABC", "deadBEEF 12ab34", "xAxA", "A", "aB",
              "cafe\u0301Bab", "0xDEADbeef", "ab" * 20, "AbAbAB", "  A  B  ",
              "x\ny\n\nz", "a.b\r\nc\rd", "\n\n", "q\u2028r\u0085s"]:
        add("split_edges", s)
    for c in range(128):
        add("ascii", chr(c))
    for _ in range(230):
        add("english", words(rng, rng.randint(1, 30)))
    for _ in range(120):
        w = rng.choice(WORDS)
        c = rng.choice(CONTRACTIONS)
        form = rng.choice([str.upper, str.lower, str.capitalize, lambda x: x])
        add("contraction", form(f"{w}{c}") + " " + rng.choice(["DON'T", "It'S", "they'RE",
                                                            "I'M", "we'LL", "it'ſ", "'S'",
                                                            "don't", "O'Neil"]))
    for _ in range(110):
        add("cjk", sample(rng, CJK, 1, 40))
    for _ in range(40):
        add("hangul", sample(rng, HANGUL, 1, 30))
    # Hangul as conjoining jamo: NFC composes them into syllables.
    for _ in range(20):
        add("hangul_nfd", unicodedata.normalize("NFD", sample(rng, HANGUL, 2, 15)))
    for _ in range(100):
        k = rng.randint(1, 6)
        add("emoji", (" " if rng.random() < 0.5 else "").join(rng.choice(EMOJI) for _ in range(k)))
    marked = ["café", "naïve", "Ångström", "Việt Nam", "crème brûlée", "São Paulo", "Zoë",
              "ḍ̇", "q̣̇", "ếể", "a\u0323\u0301", "a\u0301\u0323", "e\u0301\u0301", "\u0301abc",
              "x\u0308\u0304", "Å", "Ω", "ﬁ", "ǅ", "ẛ̣", "\u0958", "\u1e9b\u0323"]
    for s in marked:
        for form in ("NFC", "NFD", "NFKC"):
            add("marks_" + form.lower(), unicodedata.normalize(form, s))
        add("marks_raw", s)
    for _ in range(60):
        s = words(rng, rng.randint(1, 8)) + " " + rng.choice(marked)
        add("marks_nfd", unicodedata.normalize("NFD", s))
    for name, text in (("arabic", ARABIC), ("hebrew", HEBREW), ("hindi", HINDI), ("thai", THAI),
                       ("other_scripts", OTHER)):
        for _ in range(45):
            add(name, sample(rng, text, 1, 40))
    for _ in range(150):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append(rng.choice(WHITESPACE) * rng.randint(1, 8))
            if rng.random() < 0.7:
                parts.append(rng.choice(WORDS + ["1", "!", "中", "é", ".", "x"]))
        add("whitespace", "".join(parts))
    for _ in range(60):
        add("whitespace_tricky", "".join(rng.choice(TRICKY + WORDS[:5]) for _ in range(4)))
    for n in (1, 2, 3, 7, 16, 33, 64, 200):
        add("spaces", " " * n)
        add("spaces", " " * n + "x")
        add("spaces", "x" + " " * n)
        add("spaces", "\t" * n + "\n")
    for _ in range(100):
        nl = [rng.choice(["\n", "\r\n", "\r", "\n\n", "\r\r", " \n", "\n ", "\r\n\r\n"])
              for _ in range(rng.randint(1, 5))]
        segs = [words(rng, rng.randint(0, 4)) for _ in range(len(nl) + 1)]
        add("newlines", "".join(a + b for a, b in zip(segs, nl)) + segs[-1])
    for _ in range(100):
        r = rng.random()
        if r < 0.3:
            s = str(rng.randint(0, 10 ** rng.randint(1, 40)))
        elif r < 0.5:
            s = f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
        elif r < 0.6:
            s = f"{rng.randint(0, 10**9):,}"
        elif r < 0.7:
            s = "".join(rng.choice("٠١٢٣٤٥٦٧٨٩") for _ in range(rng.randint(1, 8)))
        elif r < 0.8:
            s = "".join(rng.choice("０１２３４５６７８９") for _ in range(rng.randint(1, 8)))
        elif r < 0.9:
            s = rng.choice(["²³", "½ ¾", "Ⅻ", "ⅷ", "⑩", "𝟙𝟚𝟛", "٣.١٤", "v1.2.3", "0x1F", "1e-9"])
        else:
            s = words(rng, 3) + " " + str(rng.randint(0, 99999)) + "th"
        add("numbers", s)
    for s in CODE:
        add("code", s)
    for _ in range(130):
        a, b = rng.sample(CODE, 2)
        add("code", a[: rng.randint(0, len(a))] + b[rng.randint(0, len(b)):])
    glued = ["<think>hi</think>", "a<|im_end|>b", "<|im_start|>user\nHi<|im_end|>\n",
             "<|im_start|>assistant\n<think>\n\n</think>\n\n", "<think></think>",
             "<|im_end|><|im_end|>", "x<tool_call>{\"a\": 1}</tool_call>y", "<think>\n",
             "</think>\n\nThe answer is 42.", "<|endoftext|>", " <|im_end|> ", "\n<|im_end|>\n",
             "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
             "<tool_response>ok</tool_response>",
             "<mask>", " <mask> ", "a <mask>b", "a<mask> b", "\t<mask>\t<mask>\t", "[WORD]",
             "x [WORD] y", "x[WORD]y", "[WORD]y", "ño", "n\u0303o", "señor", "se\u00f1or",
             "a sp b", " sp", "sp", "<|im", "<|im_start|", "<|im<|im_end|>", "<|end",
             "<|endoftext|><|end", "<|end<|endoftext|>"]
    for s in glued:
        add("added", s)
    for _ in range(100):
        pieces = [rng.choice([c for c, _ in QWEN_ADDED]) for _ in range(rng.randint(1, 4))]
        fill = [rng.choice(["", " ", "\n", words(rng, rng.randint(1, 3)), "中文", "é"])
                for _ in range(len(pieces) + 1)]
        add("added", "".join(f + p for f, p in zip(fill, pieces)) + fill[-1])
    lookalike = ["<|im_end", "<think >", "< think>", "<|im_end|", "<|IM_END|>", "<thinking>",
                 "</think", "<<think>>", "<|im_end|>>", "<|im_end |>", "<| im_end|>", "think>",
                 "<think", "<|endoftext", "|im_end|>", "<tool_call", "<\u200bthink>",
                 "<think>"[:-1] + "\uff1e", "＜think＞"]
    for s in lookalike:
        add("lookalike", s)
        add("lookalike", "x" + s + " y")
    for _ in range(140):
        add("random_unicode", random_chars(rng, rng.randint(1, 20)))
    for cp in NEW_UNICODE:
        add("new_unicode", "a" + chr(cp) + chr(cp) + " b" + chr(cp))
    for _ in range(180):
        k = rng.randint(2, 5)
        pieces = [rng.choice([words(rng, rng.randint(1, 5)), sample(rng, CJK, 1, 8),
                              rng.choice(EMOJI), rng.choice(WHITESPACE), rng.choice(CODE)[:20],
                              str(rng.randint(0, 10**6)), sample(rng, HINDI, 1, 10),
                              sample(rng, ARABIC, 1, 10), rng.choice(marked),
                              rng.choice(glued), random_chars(rng, 3)]) for _ in range(k)]
        add("mixed", "".join(pieces))
    # Very long strings.
    add("long", words(rng, 500))
    add("long", "a" * 2000)
    add("long", "".join(rng.choice("abcdefghij") for _ in range(1200)))
    add("long", " " * 1000 + "x" + "\n" * 200)
    add("long", "1234567890" * 50)
    add("long", sample(rng, CJK * 20, 500, 500))
    add("long", "!@#$%^&*()" * 100)
    return items


def invalid_inputs(rng):
    fixed = [b"\xff", b"\xc0\x80", b"\xe4\xb8", b"\xe4\xb8A", b"\xe0\x80\x80", b"\xed\xa0\x80",
             b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\x80\x80\x80", b"a\xc3", b"\xc3\x28",
             b"\xf5\x80", b"a\x00b", b"\x00", b"<think>\xe4</think>", b"\xe4<|im_end|>\xb8\xad",
             b"\xf0\x9f\x98\x80\xf0\x9f", b"\xfe\xfe\xff\xff", b"caf\x65\xcc", b"\xcc\x81"]
    out = list(fixed)
    alphabet = [b"a", b" ", b"\n", b"\x80", b"\xbf", b"\xc2", b"\xdf", b"\xe0", b"\xe1", b"\xed",
                b"\xef", b"\xf0", b"\xf4", b"\xf5", b"\xa0", b"\x90", b"\x8f", b"\xff", b"\x00",
                "中".encode(), "😀".encode(), b"<think>"]
    for _ in range(100):
        out.append(b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))))
    return out


def decode_sequences(rng, tok):
    """Random id sequences, some splitting multi-byte characters, some with unknown ids."""
    vocab = tok.get_vocab()
    size = tok.get_vocab_size(with_added_tokens=True)
    added = sorted(tok.get_added_tokens_decoder())
    byte_tok = {}
    for b, ch in enumerate(_bytes_to_unicode()):
        if ch in vocab:
            byte_tok[b] = vocab[ch]
    seqs = []
    for _ in range(40):
        seqs.append([rng.randrange(size) for _ in range(rng.randint(1, 20))])
    for _ in range(40):
        s = rng.choice(["中文", "😀", "é", "ไทย", "👨‍👩‍👧", "हि"]).encode()
        cut = s[: rng.randint(1, len(s))]
        ids = [byte_tok[b] for b in cut]
        if rng.random() < 0.5 and added:
            ids.insert(rng.randint(0, len(ids)), rng.choice(added))
        if rng.random() < 0.5:
            ids.append(byte_tok[ord("a")])
        seqs.append(ids)
    seqs.append([byte_tok[b] for b in [0xE4, 0xB8]])
    seqs.append([size + 7, byte_tok[ord("a")], size])
    seqs.append([])
    return seqs


def fnv1a64(path):
    """FNV-1a 64 of a file, which the C test recomputes to catch a stale corpus."""
    h = 0xCBF29CE484222325
    with open(path, "rb") as f:
        for b in f.read():
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", help="model directories (default: tiny-qwen3)")
    args = ap.parse_args()
    toks = make_tokenizers()
    dirs = args.models or [os.path.join(FIXTURES, "tiny-qwen3")]
    for d in dirs:
        path = os.path.join(d, "tokenizer.json")
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            print(f"skipping {d}: no tokenizer.json", file=sys.stderr)
            continue
        rel = os.path.relpath(os.path.abspath(d), FIXTURES)
        toks[os.path.basename(os.path.normpath(d))] = (rel, Tokenizer.from_file(path))
    for rel, tok in toks.values():
        check_transformers(os.path.join(FIXTURES, rel), tok)

    rng = random.Random(SEED + 1)
    items = [(c, s, None) for c, s in corpus(rng)]
    items += [("invalid_utf8", b.decode("utf-8", "replace"), b) for b in invalid_inputs(rng)]
    with open(os.path.join(OUT, "corpus.jsonl"), "w", encoding="utf-8") as f:
        meta = {"generator": "scripts/make_tokenizer_corpus.py",
                "tokenizers_version": tokenizers.__version__, "seed": SEED,
                "tokenizers": {name: rel for name, (rel, _) in toks.items()},
                "fnv1a64": {name: fnv1a64(os.path.join(FIXTURES, rel, "tokenizer.json"))
                            for name, (rel, _) in toks.items()}}
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for k, (cat, text, raw) in enumerate(items):
            line = {"cat": cat}
            if raw is not None or "\0" in text:
                line["hex"] = (raw if raw is not None else text.encode()).hex()
            else:
                line["text"] = text
            line["ids"], dec_key = {}, "dechex" if "hex" in line else "dec"
            line[dec_key] = {}
            for name, (_, tok) in toks.items():
                if name == "edge" and k % EDGE_EVERY and cat != "split_edges":
                    continue
                ids = tok.encode(text).ids
                line["ids"][name] = ids
                dec = [tok.decode(ids, skip_special_tokens=skip) for skip in (True, False)]
                if "hex" in line:
                    line["dechex"][name] = [d.encode().hex() for d in dec]
                elif dec != [text, text]:
                    line["dec"][name] = [None if d == text else d for d in dec]
            f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    with open(os.path.join(OUT, "decode.jsonl"), "w", encoding="utf-8") as f:
        for name, (_, tok) in toks.items():
            for ids in decode_sequences(random.Random(f"{SEED}-{name}"), tok):
                line = {"tok": name, "ids": ids,
                        "skiphex": tok.decode(ids, skip_special_tokens=True).encode().hex(),
                        "keephex": tok.decode(ids, skip_special_tokens=False).encode().hex()}
                f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{len(items)} strings, tokenizers: {', '.join(toks)}", file=sys.stderr)


def check_transformers(d, tok):
    """Reports (stderr) where transformers' tokenizer disagrees with the tokenizers library."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return
    try:
        hf = AutoTokenizer.from_pretrained(d)
    except Exception as e:  # noqa: BLE001 - a report, not a failure
        print(f"{d}: transformers cannot load it ({type(e).__name__}); not compared",
              file=sys.stderr)
        return
    rng = random.Random(SEED + 2)
    bad = 0
    items = corpus(rng)
    for _, s in items:
        if hf.encode(s, add_special_tokens=True) != tok.encode(s).ids:
            bad += 1
    print(f"{d}: transformers and tokenizers disagree on {bad} of {len(items)} strings",
          file=sys.stderr)


if __name__ == "__main__":
    main()
