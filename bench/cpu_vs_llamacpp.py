#!/usr/bin/env python3
"""Helper of bench/cpu-vs-llamacpp.sh (run it through that script).

    cpu_vs_llamacpp.py gguf PRESET_JSON TOKENIZER_JSON OUT.gguf TYPE   TYPE: F32, BF16 or Q8_0
    cpu_vs_llamacpp.py table RESULTS_DIR

gguf: a Qwen3 model with random weights (normal, std 0.02; norms 1) at the shapes of the config,
as the vendored converter (convert_hf_to_gguf.py, Qwen3Model) lays it out: the same tensor names,
metadata and tokenizer fields, written with the vendored gguf-py. The converter itself is not
run: it imports torch, whose PyPI wheel for Linux brings gigabytes of CUDA libraries; no weight
values matter to a speed measurement, only the shapes and the storage type. The tokenizer is the
test fixture's Qwen3-style BPE, padded with [PAD{i}] tokens to the vocabulary size as the
converter pads a short vocabulary.

table: prints the Markdown table of the runs' medians from RESULTS_DIR/*.txt, whose lines are
"ENGINE MEASURE VALUE" (ENGINE: tachyon, tachyon-high, tachyon-medium, F32, BF16, Q8_0; the
tachyon ones are its --cpu-matmul-precision highest, high and medium).
"""
import json
import os
import statistics
import sys

MEASURES = [
    ("pp128", "prompt 128 tokens, tok/s"),
    ("pp512", "prompt 512 tokens, tok/s"),
    ("tg32_d0", "decode 32 tokens at depth 0, tok/s"),
    ("tg32_d512", "decode 32 tokens at depth 512, tok/s"),
    ("batch8", "8 sequences, aggregate decode tok/s"),
    ("batch32", "32 sequences, aggregate decode tok/s"),
    ("rss512", "peak RSS at prompt 512, MiB"),
]
ENGINES = [("tachyon", "Tachyon"), ("tachyon-high", "Tachyon high"),
           ("tachyon-medium", "Tachyon medium"), ("F32", "llama.cpp F32"),
           ("BF16", "llama.cpp BF16"), ("Q8_0", "llama.cpp Q8_0")]


def make_gguf(cfg_path, tok_path, out, qtype_name):
    import numpy as np
    import gguf

    cfg = json.load(open(cfg_path))
    tok = json.load(open(tok_path))
    qtype = {"F32": gguf.GGMLQuantizationType.F32, "BF16": gguf.GGMLQuantizationType.BF16,
             "Q8_0": gguf.GGMLQuantizationType.Q8_0}[qtype_name]
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nH, nKV, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    I, V = cfg["intermediate_size"], cfg["vocab_size"]

    w = gguf.GGUFWriter(out, "qwen3")
    w.add_name("random-qwen3")
    w.add_context_length(cfg.get("max_position_embeddings", 40960))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(I)
    w.add_head_count(nH)
    w.add_head_count_kv(nKV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_freq_base(cfg.get("rope_theta", 1000000))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    w.add_file_type({"F32": gguf.LlamaFileType.ALL_F32, "BF16": gguf.LlamaFileType.MOSTLY_BF16,
                     "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[qtype_name])

    # tokenizer: gpt2-style BPE, the converter's Qwen2/Qwen3 pre-tokenizer name
    vocab = tok["model"]["vocab"]
    added = {t["id"]: t["content"] for t in tok.get("added_tokens", [])}
    tokens, types = [], []
    rev = {i: s for s, i in vocab.items()}
    for i in range(V):
        if i in added:
            tokens.append(added[i])
            types.append(gguf.TokenType.CONTROL)
        elif i in rev:
            tokens.append(rev[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append("[PAD%d]" % i)
            types.append(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = next((i for i, s in added.items() if s == "<|endoftext|>"), 0)
    w.add_eos_token_id(eos)
    w.add_bos_token_id(eos)
    w.add_add_bos_token(False)

    rng = np.random.default_rng(0)

    def tensor(name, shape, norm=False):
        if norm:
            w.add_tensor(name, np.ones(shape, dtype=np.float32))
            return
        data = (rng.standard_normal(size=shape, dtype=np.float32) * 0.02).astype(np.float32)
        q = gguf.quants.quantize(data, qtype) if qtype != gguf.GGMLQuantizationType.F32 else data
        w.add_tensor(name, q, raw_dtype=qtype)

    tensor("token_embd.weight", (V, H))
    if not cfg.get("tie_word_embeddings", False):
        tensor("output.weight", (V, H))
    tensor("output_norm.weight", (H,), norm=True)
    for l in range(L):
        p = "blk.%d." % l
        tensor(p + "attn_norm.weight", (H,), norm=True)
        tensor(p + "attn_q.weight", (nH * D, H))
        tensor(p + "attn_k.weight", (nKV * D, H))
        tensor(p + "attn_v.weight", (nKV * D, H))
        tensor(p + "attn_output.weight", (H, nH * D))
        tensor(p + "attn_q_norm.weight", (D,), norm=True)
        tensor(p + "attn_k_norm.weight", (D,), norm=True)
        tensor(p + "ffn_norm.weight", (H,), norm=True)
        tensor(p + "ffn_gate.weight", (I, H))
        tensor(p + "ffn_up.weight", (I, H))
        tensor(p + "ffn_down.weight", (H, I))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def table(results_dir):
    vals = {}
    for f in sorted(os.listdir(results_dir)):
        if not f.endswith(".txt"):
            continue
        for line in open(os.path.join(results_dir, f)):
            parts = line.split()
            if len(parts) == 3:
                try:
                    vals.setdefault((parts[0], parts[1]), []).append(float(parts[2]))
                except ValueError:
                    pass
    engines = [(e, label) for e, label in ENGINES if any(k[0] == e for k in vals)]
    rounds = max((len(v) for v in vals.values()), default=0)
    print("| measure (median of %d alternating rounds) | %s |" % (rounds, " | ".join(l for _, l in engines)))
    print("|---|" + "---|" * len(engines))
    for key, label in MEASURES:
        cells = []
        for e, _ in engines:
            v = vals.get((e, key))
            cells.append("%.1f" % statistics.median(v) if v else "-")
        print("| %s | %s |" % (label, " | ".join(cells)))


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "gguf":
        make_gguf(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
