#!/usr/bin/env python3
"""Helper of bench/tokenizer-speed.sh (run it through that script).

    tokenizer_speed.py text OUT                   the benchmark text, exactly 1,000,000 bytes
    tokenizer_speed.py train OUT_DIR QWEN3_DIR    a 32k-vocabulary Qwen3-style tokenizer
    tokenizer_speed.py hf NAME TOKENIZER_JSON TEXT TACHYON_IDS TACHYON_STATS
                                                  times HF `tokenizers`, checks that its ids
                                                  equal Tachyon's, prints a Markdown row

Everything is deterministic for a given Python and `tokenizers` version: the text is Python's
own documentation (pydoc_data.topics, sorted by key), stdlib sources read as files and
multilingual sentences drawn from fixed word lists with a fixed seed; the tokenizer is trained
on a different text: stdlib docstrings (inspect.getdoc), 6 MB of other stdlib sources and
multilingual sentences drawn with another seed.
"""
import importlib
import inspect
import json
import os
import random
import re
import sys
import sysconfig
import time

SIZE = int(os.environ.get("TOKENIZER_SPEED_BYTES", 1_000_000))  # smaller in BENCH_QUICK runs

# The Qwen3 pre-tokenizer regex and added tokens, as the corpus generator defines them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from make_tokenizer_corpus import QWEN3_REGEX, QWEN_ADDED  # noqa: E402

# Languages as (words, separator, sentence end).
LANGUAGES = [
    ("模型 服务器 推理 速度 我们 今天 中文 分词器 语言 大 计算 数据 网络 时间 问题 系统 用户 "
     "请求 缓存 内存 线程 测试 结果 文本 句子 人工智能 学习 训练 参数 北京 上海 城市 历史 科学 "
     "音乐 山 河 海 森林 朋友 学校 工作 生活 世界", "", "。"),
    ("東京 日本 首都 です ます 私 は が を に の 文章 テスト 速い 言語 モデル サーバー 推論 "
     "データ 時間 問題 ひらがな カタカナ 漢字 学校 友達 音楽 映画 天気 今日 明日 電車 駅 会社",
     "", "。"),
    ("안녕하세요 한국어 토크나이저 테스트 입니다 대한민국 서울 모델 서버 추론 속도 데이터 "
     "시간 문제 학교 친구 음악 영화 날씨 오늘 내일 회사 사람 세계 언어 컴퓨터", " ", "."),
    ("Привет мир это тест токенизатора модель сервер скорость данные время вопрос система "
     "пользователь запрос память поток результат текст язык город история наука музыка "
     "река гора лес друг школа работа жизнь Москва", " ", "."),
    ("مرحبا بالعالم هذه جملة عربية لاختبار المحلل اللغوي نموذج خادم سرعة بيانات وقت سؤال "
     "نظام مستخدم طلب ذاكرة نتيجة نص لغة مدينة تاريخ علم موسيقى نهر جبل غابة صديق مدرسة",
     " ", "."),
    ("नमस्ते दुनिया यह हिंदी में एक वाक्य है मॉडल सर्वर गति डेटा समय प्रश्न प्रणाली उपयोगकर्ता "
     "अनुरोध स्मृति परिणाम पाठ भाषा शहर इतिहास विज्ञान संगीत नदी पहाड़ जंगल मित्र विद्यालय",
     " ", "।"),
    ("Hallo Welt das ist ein Satz auf Deutsch Modell Server Geschwindigkeit Daten Zeit Frage "
     "System Benutzer Anfrage Speicher Ergebnis Text Sprache Stadt Geschichte Wissenschaft "
     "Musik Fluss Berg Wald Freund Schule Arbeit Leben größer Straße schön über", " ", "."),
    ("Bonjour le monde ceci est une phrase en français modèle serveur vitesse données temps "
     "question système utilisateur requête mémoire résultat texte langue ville histoire "
     "science musique rivière montagne forêt ami école travail vie été déjà très", " ", "."),
    ("Hola mundo esta es una frase en español modelo servidor velocidad datos tiempo pregunta "
     "sistema usuario petición memoria resultado texto idioma ciudad historia ciencia música "
     "río montaña bosque amigo escuela trabajo vida señor año niño", " ", "."),
    ("Γειά σου κόσμε αυτή είναι μια πρόταση στα ελληνικά μοντέλο διακομιστής ταχύτητα "
     "δεδομένα χρόνος ερώτηση σύστημα χρήστης μνήμη αποτέλεσμα κείμενο γλώσσα πόλη ιστορία",
     " ", "."),
    ("สวัสดี ชาวโลก นี่คือ ประโยค ภาษาไทย สำหรับ ทดสอบ แบบจำลอง เซิร์ฟเวอร์ ความเร็ว ข้อมูล "
     "เวลา คำถาม ระบบ ผู้ใช้ หน่วยความจำ ผลลัพธ์ ข้อความ ภาษา เมือง ประวัติศาสตร์", "", " "),
    ("Xin chào thế giới đây là một câu tiếng Việt mô hình máy chủ tốc độ dữ liệu thời gian "
     "câu hỏi hệ thống người dùng bộ nhớ kết quả văn bản ngôn ngữ thành phố lịch sử", " ", "."),
    ("😀 👍 👍🏽 ❤️ 🇯🇵 🇺🇸 👨‍👩‍👧‍👦 🧑🏿‍💻 🏳️‍🌈 🚀 ✨ 🦀 🐍 ☕ 🎉 🔥 💡 ✅ ❌ ⚠️", " ", ""),
]

# Modules whose docstrings train the tokenizer; none of them is in SOURCE_FILES.
DOC_MODULES = [
    "abc", "argparse", "ast", "asyncio", "base64", "binascii", "bz2", "calendar", "cmath",
    "codecs", "collections", "concurrent.futures", "configparser", "contextlib", "copy", "csv",
    "ctypes", "dataclasses", "datetime", "decimal", "email", "enum", "fractions", "ftplib",
    "functools", "gc", "getopt", "gettext", "glob", "gzip", "hashlib", "hmac", "html",
    "html.parser", "http.client", "http.server", "imaplib", "importlib", "io", "ipaddress",
    "itertools", "logging", "lzma", "mailbox", "math", "mimetypes", "multiprocessing", "operator",
    "os", "pathlib", "pickle", "platform", "plistlib", "poplib", "pprint", "queue", "random",
    "re", "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "signal", "smtplib",
    "socket", "socketserver", "sqlite3", "ssl", "statistics", "string", "struct", "subprocess",
    "sys", "tarfile", "tempfile", "threading", "time", "timeit", "tokenize", "traceback",
    "typing", "unicodedata", "unittest", "urllib.parse", "urllib.request", "uuid", "warnings",
    "weakref", "xml.dom.minidom", "xml.etree.ElementTree", "zipfile", "zlib",
]

# Stdlib sources (as files) for the code part of the benchmark text, in this order.
SOURCE_FILES = [
    "bisect.py", "heapq.py", "textwrap.py", "difflib.py", "fnmatch.py", "json/decoder.py",
    "json/encoder.py", "json/scanner.py", "colorsys.py", "graphlib.py", "keyword.py",
    "numbers.py", "opcode.py", "quopri.py", "reprlib.py", "stat.py", "this.py", "token.py",
    "tomllib/_parser.py", "wave.py", "zipapp.py", "netrc.py", "nturl2path.py", "rlcompleter.py",
    "sndhdr.py", "imghdr.py", "filecmp.py", "fileinput.py", "linecache.py", "optparse.py",
]


def multilingual(seed, n_bytes):
    rng = random.Random(seed)
    langs = [(w.split(), sep, end) for w, sep, end in LANGUAGES]
    lines, size = [], 0
    while size < n_bytes:
        words, sep, end = langs[rng.randrange(len(langs))]
        line = sep.join(rng.choice(words) for _ in range(rng.randint(4, 24))) + end
        lines.append(line)
        size += len(line.encode()) + 1
    return lines


def make_text(out):
    from pydoc_data.topics import topics
    parts = [topics[k] for k in sorted(topics)]
    stdlib = sysconfig.get_paths()["stdlib"]
    for f in SOURCE_FILES:
        if not os.path.exists(os.path.join(stdlib, f)):  # removed in later Pythons
            continue
        with open(os.path.join(stdlib, f), encoding="utf-8") as fh:
            parts.append(fh.read())
    # English and code first, then a fifth of the text multilingual, interleaved by line so
    # that every part of the text mixes scripts.
    english = "\n".join(parts).encode()[:int(SIZE * 0.8)].decode("utf-8", "ignore").split("\n")
    other = multilingual(1, SIZE // 5 + 10000)
    lines = []
    step = max(1, len(english) // len(other))
    for i, line in enumerate(english):
        lines.append(line)
        if i % step == step - 1 and other:
            lines.append(other.pop())
    lines.extend(other)
    data = "\n".join(lines).encode()
    assert len(data) >= SIZE, len(data)
    cut = SIZE
    while (data[cut] & 0xC0) == 0x80:
        cut -= 1
    data = data[:cut] + b"\n" * (SIZE - cut)
    with open(out, "wb") as f:
        f.write(data)


def docstrings():
    seen, out = set(), []

    def add(doc):
        if doc and doc not in seen:
            seen.add(doc)
            out.append(doc)

    for name in DOC_MODULES:
        mod = importlib.import_module(name)
        add(inspect.getdoc(mod))
        for attr in sorted(dir(mod)):
            if attr.startswith("_"):
                continue
            obj = getattr(mod, attr, None)
            if getattr(obj, "__module__", name) != name and not inspect.ismodule(obj):
                continue
            if not isinstance(obj, (int, float, str, bytes)):  # not the doc of int, str...
                add(inspect.getdoc(obj))
            if inspect.isclass(obj):
                for member in sorted(vars(obj)):
                    if not member.startswith("_"):
                        add(inspect.getdoc(getattr(obj, member, None)))
    return out


def stdlib_sources(limit):
    """Stdlib .py files other than SOURCE_FILES, in path order, up to limit bytes."""
    stdlib = sysconfig.get_paths()["stdlib"]
    skip_dirs = {"test", "tests", "idlelib", "site-packages", "dist-packages", "__pycache__",
                 "turtledemo", "ensurepip"}
    out, size = [], 0
    for d, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(x for x in dirs if x not in skip_dirs and not x.startswith("config-"))
        for f in sorted(files):
            path = os.path.join(d, f)
            if not f.endswith(".py") or os.path.relpath(path, stdlib) in SOURCE_FILES:
                continue
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            out.append(text)
            size += len(text.encode())
            if size >= limit:
                return out
    return out


def train(out_dir, qwen3_dir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers

    parts = docstrings() + stdlib_sources(6_000_000)
    parts += multilingual(2, sum(len(p.encode()) for p in parts) // 5)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=32000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(parts, trainer=trainer)
    for content, special in QWEN_ADDED:
        t = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([t])
        else:
            tok.add_tokens([t])
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    # Qwen3's tokenizer_config.json, its added-token ids moved to where this vocabulary
    # puts them.
    with open(os.path.join(qwen3_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["added_tokens_decoder"] = {
        str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                 "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
        for i, t in sorted(tok.get_added_tokens_decoder().items())}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    print(f"trained on {len(parts)} texts, {sum(len(p.encode()) for p in parts)} bytes: "
          f"{tok.get_vocab_size(with_added_tokens=True)} tokens", file=sys.stderr)


def best_of(n, fn):
    times, result = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), times[0], result


def chunks(data, size):
    """Pieces of at most size bytes, cut at UTF-8 character boundaries."""
    out, i = [], 0
    while i < len(data):
        j = min(i + size, len(data))
        while j < len(data) and (data[j] & 0xC0) == 0x80:
            j -= 1
        out.append(data[i:j].decode())
        i = j
    return out


def hf(name, path, text_path, ids_path, stats_path):
    from tokenizers import Tokenizer

    with open(text_path, "rb") as f:
        data = f.read()
    text = data.decode()
    tok = Tokenizer.from_file(path)
    best, first, enc = best_of(5, lambda: tok.encode(text))
    ids = enc.ids
    with open(ids_path, encoding="utf-8") as f:
        tachyon_ids = json.load(f)
    if ids != tachyon_ids:
        k = next((i for i, (a, b) in enumerate(zip(ids, tachyon_ids)) if a != b),
                 min(len(ids), len(tachyon_ids)))
        sys.exit(f"{name}: Tachyon's ids differ from HF's: {len(tachyon_ids)} vs {len(ids)} "
                 f"tokens, first difference at token {k}: "
                 f"{tachyon_ids[k:k + 5]} vs {ids[k:k + 5]}")
    pieces = chunks(data, 4096)
    bbest, bfirst, batch = best_of(5, lambda: tok.encode_batch(pieces))
    n_batch = sum(len(e.ids) for e in batch)

    with open(stats_path, encoding="utf-8") as f:
        stats = f.read()
    m = re.search(r"encode: (\d+) bytes, (\d+) tokens in ([0-9.e+-]+) ms \(best of \d+, "
                  r"first ([0-9.e+-]+) ms\)", stats)
    if not m or int(m.group(1)) != len(data) or int(m.group(2)) != len(ids):
        sys.exit(f"{name}: cannot read tachyon --stats output: {stats!r}")
    t_best, t_first = float(m.group(3)) / 1e3, float(m.group(4)) / 1e3
    mb = len(data) / 1e6
    print(f"| {name} | {tok.get_vocab_size(with_added_tokens=True)} | {len(data)} | {len(ids)} "
          f"| {mb / t_best:.2f} | {len(ids) / t_best:,.0f} "
          f"| {mb / best:.2f} | {len(ids) / best:,.0f} "
          f"| {best / t_best:.2f}x "
          f"| {mb / bbest:.2f} | {n_batch / bbest:,.0f} "
          f"| {t_first * 1e3:.0f} / {first * 1e3:.0f} |")


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "text" and len(sys.argv) == 3:
        make_text(sys.argv[2])
    elif cmd == "train" and len(sys.argv) == 4:
        train(sys.argv[2], sys.argv[3])
    elif cmd == "hf" and len(sys.argv) == 7:
        hf(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
