#!/usr/bin/env python3
"""Builds the tiny Qwen3.5 test fixtures and their transformers golden outputs.

Run through scripts/make-fixtures (by hand, never in CI; it reuses make_fixtures.py's corpus and
helpers); the outputs are committed. With --golden-only it only recomputes the golden outputs from
the committed checkpoints. Writes:
  tests/fixtures/tiny-qwen3.5/      BF16 Qwen3_5ForConditionalGeneration checkpoint (the released
                                    models' layout: text model under model.language_model., a
                                    tiny vision tower under model.visual., mtp.*), untied
  tests/fixtures/tiny-qwen3.5-fp8/  block-FP8 Qwen3_5ForCausalLM (model.*, mtp.*), other shapes,
                                    a custom layer_types pattern, tied embeddings, two shards
  tests/fixtures/golden/tiny-qwen3.5{,-fp8}.{json,logits.f32}
  tests/fixtures/golden/tiny-qwen3.5{,-fp8}.mtp.{json,logits.f32}  (the MTP head's; alone with
                                    --mtp-golden-only)
Both have 8 layers (6 Gated DeltaNet, 2 gated full attention) and one MTP layer, and carry
tests/fixtures/tokenizer/qwen35's tokenizer with the Qwen3.5 chat template (chat/qwen3.5.jinja).
The golden outputs come from transformers' own torch code paths (no flash-linear-attention,
causal-conv1d or hub kernels: the script refuses to run when one is importable).
"""

import functools
import importlib.util
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
import transformers
import transformers.models.qwen3_5.modeling_qwen3_5 as mq
from tokenizers import Tokenizer
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                          Qwen3_5TextConfig)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (corpus, training loop, FP8 quantizer, golden helpers)

FIXTURES = mf.FIXTURES
BF16 = "tiny-qwen3.5"
FP8 = "tiny-qwen3.5-fp8"
SEED = 3535
VOCAB = 1088  # the tokenizer's 1031 ids, padded as Qwen's vocabularies are
ENDOFTEXT_ID, IM_START_ID, IM_END_ID = 1000, 1001, 1002
TRAIN_BATCH = 6
TRAIN_CHUNK = 16  # the chunked delta rule's chunk while training only (same math, cheaper solves)
BF16_STEPS, FP8_STEPS, MTP_STEPS = 30, 24, 8
LR = 5e-3
TOKENIZER = FIXTURES / "tokenizer" / "qwen35" / "tokenizer.json"
CHAT_TEMPLATE = FIXTURES / "chat" / "qwen3.5.jinja"

# Prompt lengths (tokens): the longer ones cross the 64-token chunks of the chunked delta rule and
# the scheduler's prefill chunks in the tests.
PROMPT_TOKENS = [1, 7, 19, 70, 150, 230]

TEXT_COMMON = {
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_output_gate": True,
    "bos_token_id": ENDOFTEXT_ID,
    "eos_token_id": ENDOFTEXT_ID,
    "hidden_act": "silu",
    "hidden_size": 128,
    "initializer_range": 0.02,
    "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 4096,
    "model_type": "qwen3_5_text",
    "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": False,
    "num_hidden_layers": 8,
    "rms_norm_eps": 1e-06,
    "vocab_size": VOCAB,
}

# Like Qwen3.5-9B in miniature: [lin, lin, lin, full] x 2 from full_attention_interval, 4 value
# heads over 2 key heads, head_dim 64 with 32 rotary dims, untied.
BF16_TEXT = dict(TEXT_COMMON, **{
    "full_attention_interval": 4,
    "head_dim": 64,
    "intermediate_size": 192,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_value_head_dim": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [6, 5, 5],
                        "partial_rotary_factor": 0.5, "rope_theta": 10000000,
                        "rope_type": "default"},
    "tie_word_embeddings": False,
})

# Other shapes: an explicit layer pattern, one value head per key head, dk != dv, a 3-tap conv,
# head_dim 128 (so the q / kv widths are multiples of 128, FP8 GEMMs on the GPU) with 32 rotary
# dims, 4 query heads per KV head, a ragged intermediate size, tied embeddings.
FP8_TEXT = dict(TEXT_COMMON, **{
    "head_dim": 128,
    "intermediate_size": 320,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "linear_attention",
                    "linear_attention", "full_attention", "linear_attention", "linear_attention"],
    "linear_conv_kernel_dim": 3,
    "linear_key_head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "linear_value_head_dim": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "rope_parameters": {"mrope_interleaved": True, "mrope_section": [6, 6, 4],
                        "partial_rotary_factor": 0.25, "rope_theta": 1000000,
                        "rope_type": "default"},
    "tie_word_embeddings": True,
})

VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
          "out_hidden_size": 128, "patch_size": 4, "spatial_merge_size": 2,
          "temporal_patch_size": 2, "num_position_embeddings": 16, "model_type": "qwen3_5_vision"}

FP8_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
             "weight_block_size": [128, 128],
             "modules_to_not_convert": ["lm_head", "linear_attn.in_proj_a", "linear_attn.in_proj_b",
                                        "linear_attn.conv1d"]}

GENERATION_CONFIG = {"bos_token_id": ENDOFTEXT_ID, "do_sample": True,
                     "eos_token_id": [IM_END_ID, ENDOFTEXT_ID], "pad_token_id": ENDOFTEXT_ID,
                     "temperature": 0.6, "top_k": 20, "top_p": 0.95}

log = mf.log


def hf_text_config(text):
    return Qwen3_5TextConfig(**text, attn_implementation="eager")


def vl_config_json(text):
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": dict(text, dtype="bfloat16"), "tie_word_embeddings": False,
            "transformers_version": transformers.__version__, "vision_config": VISION}


def text_config_json(text, quant):
    cfg = dict(text, architectures=["Qwen3_5ForCausalLM"], dtype="bfloat16",
               transformers_version=transformers.__version__)
    if quant:
        cfg["quantization_config"] = FP8_QUANT
    return dict(sorted(cfg.items()))


def write_tokenizer_files(directory):
    shutil.copyfile(TOKENIZER, directory / "tokenizer.json")
    tok = Tokenizer.from_file(str(TOKENIZER))
    decoder = {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized,
                        "rstrip": t.rstrip, "single_word": t.single_word, "special": t.special}
               for i, t in sorted(tok.get_added_tokens_decoder().items())}
    mf.write_json(directory / "tokenizer_config.json", {
        "add_bos_token": False, "added_tokens_decoder": decoder, "bos_token": None,
        "chat_template": CHAT_TEMPLATE.read_text(encoding="utf-8"),
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 262144, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None})
    mf.write_json(directory / "generation_config.json", GENERATION_CONFIG)
    return tok


# ---------------------------------------------------------------------------------------------
# Training


def training_stream(tok, docs, chats, rng):
    items = docs + chats
    rng.shuffle(items)
    ids = []
    for enc in tok.encode_batch(items):
        ids.extend(enc.ids)
        ids.append(ENDOFTEXT_ID)
    return torch.tensor(ids, dtype=torch.long)


def train_chunk_size(fn):
    """Runs fn with transformers' chunked delta rule on TRAIN_CHUNK-token chunks."""
    orig = mq.torch_chunk_gated_delta_rule
    mq.torch_chunk_gated_delta_rule = functools.partial(orig, chunk_size=TRAIN_CHUNK)
    try:
        return fn()
    finally:
        mq.torch_chunk_gated_delta_rule = orig


class Mtp(torch.nn.Module):
    """vLLM's Qwen3_5MultiTokenPredictor (models.md 4.8): u = fc(concat(norm_e(embed(x_{t+1})),
    norm_h(h_t))), one full-attention decoder layer at the positions of x_{t+1}, a final norm and
    the shared lm_head predict x_{t+2}."""

    def __init__(self, text):
        super().__init__()
        h = text["hidden_size"]
        cfg = hf_text_config(dict(text, num_hidden_layers=1, layer_types=["full_attention"]))
        self.fc = torch.nn.Linear(2 * h, h, bias=False)
        self.pre_fc_norm_embedding = mq.Qwen3_5RMSNorm(h, eps=text["rms_norm_eps"])
        self.pre_fc_norm_hidden = mq.Qwen3_5RMSNorm(h, eps=text["rms_norm_eps"])
        self.layers = torch.nn.ModuleList([mq.Qwen3_5DecoderLayer(cfg, 0)])
        self.norm = mq.Qwen3_5RMSNorm(h, eps=text["rms_norm_eps"])
        for m in self.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, std=0.02)

    def forward(self, model, ids):
        with torch.no_grad():
            hidden = model.model(input_ids=ids).last_hidden_state
        emb = model.model.embed_tokens(ids[:, 1:]).detach()
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(emb),
                               self.pre_fc_norm_hidden(hidden[:, :-1])], dim=-1))
        n = u.shape[1]
        pos = torch.arange(1, n + 1)[None]
        cos_sin = model.model.rotary_emb(u, pos)
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        u = self.layers[0](u, position_embeddings=cos_sin, attention_mask=mask)
        return model.lm_head(self.norm(u))


def train_mtp(model, text, stream):
    mtp = Mtp(text)
    gen = torch.Generator().manual_seed(SEED + 7)
    opt = torch.optim.AdamW(mtp.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.01)
    for step in range(MTP_STEPS):
        starts = torch.randint(0, len(stream) - mf.SEQ_LEN, (TRAIN_BATCH,), generator=gen)
        ids = torch.stack([stream[s:s + mf.SEQ_LEN] for s in starts.tolist()])
        logits = mtp(model, ids)[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 ids[:, 2:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % 10 == 0:
            log(f"  mtp step {step + 1}/{MTP_STEPS} loss {loss.item():.3f}")
    return {"mtp." + k: v for k, v in mtp.state_dict().items()}


def train_model(text, stream, steps, seed, label):
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(hf_text_config(text))
    mf.BATCH = TRAIN_BATCH
    loss = train_chunk_size(lambda: mf.train(model, stream, steps, LR, seed, label))
    mtp = train_chunk_size(lambda: train_mtp(model, text, stream))
    model.eval()
    return model, mtp, loss


# ---------------------------------------------------------------------------------------------
# Saving


def bf16(state):
    return {k: v.detach().to(torch.bfloat16).contiguous() for k, v in state.items()}


def save_bf16(model, mtp, text, out):
    """The released layout: model.language_model.*, model.visual.* (a random tiny tower that
    text-only serving must leave out), lm_head, mtp.*; one file, as save_pretrained writes it."""
    torch.manual_seed(SEED + 1)
    vl = Qwen3_5ForConditionalGeneration(Qwen3_5Config(text_config=text, vision_config=VISION))
    tensors = {}
    for name, value in bf16(model.state_dict()).items():
        tensors[name.replace("model.", "model.language_model.", 1)] = value
    for name, value in bf16(vl.state_dict()).items():
        if name.startswith("model.visual."):
            tensors[name] = value
    tensors.update(bf16(mtp))
    safetensors.torch.save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"),
                                metadata={"format": "pt"})
    mf.write_json(out / "config.json", vl_config_json(text))


FP8_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "linear_attn.in_proj_qkv",
               "linear_attn.in_proj_z", "linear_attn.out_proj", "mtp.fc")


def is_fp8(name):
    return name.endswith(".weight") and any(
        f".{lin}." in name or name.startswith(f"{lin}.") for lin in FP8_LINEARS)


def save_fp8(model, mtp, text, out):
    """Block-FP8 projections (not in_proj_a / in_proj_b, as real -FP8 checkpoints), A_log in F32,
    the rest BF16; tied, so no lm_head; two shards and an index."""
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    state.update(mtp)
    tensors = {}
    for name, value in state.items():
        if is_fp8(name):
            q, s = mf.quantize_block_fp8(value.detach().to(torch.bfloat16))
            tensors[name] = q
            tensors[name + "_scale_inv"] = s
        elif name.endswith(".A_log"):
            tensors[name] = value.detach().float().contiguous()
        else:
            tensors[name] = value.detach().to(torch.bfloat16).contiguous()
    first = ("model.embed_tokens.",) + tuple(f"model.layers.{i}." for i in range(4))
    shards = [{k: v for k, v in tensors.items() if k.startswith(first)}]
    shards.append({k: v for k, v in tensors.items() if k not in shards[0]})
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for fname, shard in zip(names, shards):
        safetensors.torch.save_file(dict(sorted(shard.items())), str(out / fname),
                                    metadata={"format": "pt"})
        weight_map.update({k: fname for k in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    mf.write_json(out / "model.safetensors.index.json",
                  {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    mf.write_json(out / "config.json", text_config_json(text, True))


# ---------------------------------------------------------------------------------------------
# Golden outputs


def load_text_state(directory):
    """f32 text-model state dict ("model.*", "lm_head.weight") of the stored values: FP8 as
    fp8 * scale_inv (models.md 2.3)."""
    files = sorted(directory.glob("*.safetensors"))
    raw = {}
    for f in files:
        raw.update(safetensors.torch.load_file(str(f)))
    out = {}
    for name, value in raw.items():
        if name.endswith("_scale_inv") or name.startswith(("mtp.", "model.visual.")):
            continue
        if value.dtype == torch.float8_e4m3fn:
            value = mf.dequantize_block_fp8(value, raw[name + "_scale_inv"])
        out[name.replace("model.language_model.", "model.", 1)] = value.float()
    return out


def reference_model(text, state):
    model = Qwen3_5ForCausalLM(hf_text_config(text)).float().eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert missing == (["lm_head.weight"] if text["tie_word_embeddings"] else []), missing
    return model


def prompt_candidates(tok, topics, n):
    """Prompt texts of about n tokens: a chat turn for the chat slot, else prose cut at a word."""
    if n == PROMPT_TOKENS[2]:
        return ["<|im_start|>user\nWhat is a lambda expression?<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n",
                "<|im_start|>user\nTell me about exceptions.<|im_end|>\n<|im_start|>assistant\n"
                "<think>\n"]
    out = []
    for _, body in topics:
        words = " ".join(body.split()).split(" ")
        text = ""
        for w in words:
            longer = (text + " " + w) if text else w
            if len(tok.encode(longer).ids) > n:
                break
            text = longer
        if len(tok.encode(text).ids) >= max(1, n - 3):
            out.append(text)
        if len(out) == 6:
            break
    return out


def make_golden(fixture, text, directory, tok, topics, golden_dir):
    model = reference_model(text, load_text_state(directory))
    prompts, rows = [], []
    for n in PROMPT_TOKENS:
        chosen = None
        for cand in prompt_candidates(tok, topics, n):
            ids = tok.encode(cand).ids
            out, margin = mf.greedy(model, ids)
            log(f"  {fixture}: {len(ids):3d}-token prompt {cand[:32]!r}... margin {margin:.4f}")
            if margin >= mf.MIN_GREEDY_MARGIN:
                chosen = (cand, ids, out, margin)
                break
        if chosen is None:
            sys.exit(f"{fixture}: no prompt of ~{n} tokens has greedy margins >= "
                     f"{mf.MIN_GREEDY_MARGIN}")
        cand, ids, out, margin = chosen
        positions = mf.logit_positions(len(ids))
        logits = mf.full_logits(model, ids)
        prompts.append({"text": cand, "ids": ids, "logit_positions": positions,
                        "logits_row_offset": len(rows), "greedy": out,
                        "greedy_min_margin": round(margin, 6),
                        "greedy_text": tok.decode(out, skip_special_tokens=False),
                        "greedy_last_logits_row": len(rows) + len(positions)})
        rows.extend(logits[p].numpy() for p in positions)
        # the logits that pick the last greedy token (prompt + all but the last generated token,
        # one full forward): an engine that decodes token by token must reach them through its
        # recurrent state
        rows.append(mf.full_logits(model, ids + out[:-1])[-1].numpy())
    logits_file = f"{fixture}.logits.f32"
    np.stack(rows).astype("<f4").tofile(golden_dir / logits_file)
    mf.write_golden_json(golden_dir / f"{fixture}.json", {
        "fixture": fixture, "vocab_size": VOCAB,
        "reference": f"transformers {transformers.__version__} eager float32, torch code paths",
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "logits_file": logits_file, "prompts": prompts})
    return prompts


def check_from_pretrained(fixture, directory, cls, golden_dir):
    """transformers' own loader on the saved checkpoint reproduces the golden logits (the layout
    is what it reads: vision tower and MTP head ignored, FP8 dequantized by its integration is
    not checked: FP8 goes through load_text_state)."""
    golden = json.loads((golden_dir / f"{fixture}.json").read_text())
    rows = np.fromfile(golden_dir / golden["logits_file"], dtype="<f4").reshape(-1, VOCAB)
    model = cls.from_pretrained(str(directory), dtype=torch.float32,
                                attn_implementation="eager").eval()
    for p in golden["prompts"]:
        logits = mf.full_logits(model, p["ids"]).numpy()
        want = rows[p["logits_row_offset"]:p["logits_row_offset"] + len(p["logit_positions"])]
        diff = np.abs(logits[p["logit_positions"]] - want).max()
        assert diff <= 1e-4, f"{fixture}: from_pretrained logits differ by {diff}"


def load_mtp(text, directory):
    """The checkpoint's MTP head (mtp.*: BF16, or block FP8 dequantized exactly) as an f32 Mtp."""
    raw = {}
    for f in sorted(directory.glob("*.safetensors")):
        raw.update(safetensors.torch.load_file(str(f)))
    mtp = Mtp(text).float().eval()
    state = {}
    for name, value in raw.items():
        if not name.startswith("mtp.") or name.endswith("_scale_inv"):
            continue
        if value.dtype == torch.float8_e4m3fn:
            value = mf.dequantize_block_fp8(value, raw[name + "_scale_inv"])
        state[name[len("mtp."):]] = value.float()
    mtp.load_state_dict(state, strict=True)
    return mtp


def mtp_run(model, mtp, tokens, hidden, positions):
    """The MTP head over a whole sequence of its inputs at once (causal, so each row is what an
    engine computes for it with the earlier rows' K/V cached): row i embeds tokens[i] (x_{t+1})
    beside hidden[i] (h_t) at positions[i] (t, as vLLM's proposer places it). Returns the logits
    and the head's normed output (the hidden of the next draft)."""
    emb = model.model.embed_tokens(torch.tensor([tokens]))
    u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(emb), mtp.pre_fc_norm_hidden(hidden[None])],
                         dim=-1))
    n = u.shape[1]
    cos_sin = model.model.rotary_emb(u, torch.tensor([positions]))
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
    out = mtp.norm(mtp.layers[0](u, position_embeddings=cos_sin, attention_mask=mask))
    return model.lm_head(out)[0], out[0]


MTP_GOLDEN_DRAFTS = 4


def make_mtp_golden(fixture, text, directory, golden_dir):
    """golden/<fixture>.mtp.{json,logits.f32}: the MTP head's logits, in f32 on the stored
    weights, for two of the golden prompts followed by their first 8 greedy tokens (sequence
    x_0..x_{n-1}, the model's final-norm hidden states h_t from one forward):
      step 0, every position t = 0..n-2: input (x_{t+1}, h_t) at position t (rows 0..n-2);
      then MTP_GOLDEN_DRAFTS - 1 chained draft steps from the last position: step j embeds the
      previous step's argmax draft beside the previous step's output at position n - 2 + j
      (one row each);
    and the model's own greedy next token after every prefix (greedy_next[t] follows x_0..x_t)
    with its top-1/top-2 margin, so that a test can tell which drafts an engine accepts."""
    model = reference_model(text, load_text_state(directory))
    mtp = load_mtp(text, directory)
    golden = json.loads((golden_dir / f"{fixture}.json").read_text())
    cases, rows = [], []
    with torch.no_grad():
        for p in golden["prompts"][2:4]:
            seq = p["ids"] + p["greedy"][:8]
            n = len(seq)
            hidden = model.model(input_ids=torch.tensor([seq])).last_hidden_state[0]
            target = model.lm_head(hidden)
            top2 = target.topk(2, dim=-1).values
            toks, hid, pos = seq[1:], hidden[:-1], list(range(n - 1))
            logits, out = mtp_run(model, mtp, toks, hid, pos)
            step0 = logits.numpy()
            drafts, chained = [int(step0[-1].argmax())], []
            for j in range(1, MTP_GOLDEN_DRAFTS):
                toks, pos = toks + [drafts[-1]], pos + [n - 2 + j]
                hid = torch.cat([hid, out[-1:]])
                logits, out = mtp_run(model, mtp, toks, hid, pos)
                chained.append(logits[-1].numpy())
                drafts.append(int(chained[-1].argmax()))
            cases.append({"ids": seq, "logits_row_offset": len(rows), "step0_rows": n - 1,
                          "drafts": drafts,
                          "greedy_next": target.argmax(-1).tolist(),
                          "greedy_next_margin": [round(float(m), 6)
                                                 for m in (top2[:, 0] - top2[:, 1])],
                          "accepted_at_step0": int(sum(int(step0[t].argmax()) == seq[t + 2]
                                                       for t in range(n - 2)))})
            rows.extend(step0)
            rows.extend(chained)
    logits_file = f"{fixture}.mtp.logits.f32"
    np.stack(rows).astype("<f4").tofile(golden_dir / logits_file)
    mf.write_golden_json(golden_dir / f"{fixture}.mtp.json", {
        "fixture": fixture, "vocab_size": VOCAB, "chained_steps": MTP_GOLDEN_DRAFTS - 1,
        "reference": f"transformers {transformers.__version__} eager float32 (the MTP layer is "
                     "transformers' Qwen3_5DecoderLayer; fc and norms as vLLM's "
                     "Qwen3_5MultiTokenPredictor)",
        "logits_file": logits_file, "prompts": cases})


# ---------------------------------------------------------------------------------------------


def golden_only():
    """--golden-only: the golden outputs again from the committed checkpoints (no training)."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    tok = Tokenizer.from_file(str(TOKENIZER))
    topics = mf.pydoc_topics()
    with tempfile.TemporaryDirectory(prefix="make-fixtures-qwen35-") as tmp:
        golden_dir = Path(tmp)
        for name, text in ((BF16, BF16_TEXT), (FP8, FP8_TEXT)):
            make_golden(name, text, FIXTURES / name, tok, topics, golden_dir)
            make_mtp_golden(name, text, FIXTURES / name, golden_dir)
        check_from_pretrained(BF16, FIXTURES / BF16, Qwen3_5ForConditionalGeneration, golden_dir)
        for f in golden_dir.iterdir():
            shutil.copyfile(f, FIXTURES / "golden" / f.name)
    log("golden outputs rewritten")


def mtp_golden_only():
    """--mtp-golden-only: the MTP head's golden outputs again, beside the committed ones."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="make-fixtures-qwen35-") as tmp:
        golden_dir = Path(tmp)
        for name, text in ((BF16, BF16_TEXT), (FP8, FP8_TEXT)):
            shutil.copyfile(FIXTURES / "golden" / f"{name}.json", golden_dir / f"{name}.json")
            make_mtp_golden(name, text, FIXTURES / name, golden_dir)
            for f in golden_dir.glob(f"{name}.mtp.*"):
                shutil.copyfile(f, FIXTURES / "golden" / f.name)
    log("MTP golden outputs rewritten")


def main():
    if sys.argv[1:] == ["--golden-only"]:
        return golden_only()
    if sys.argv[1:] == ["--mtp-golden-only"]:
        return mtp_golden_only()
    for pkg in ("fla", "causal_conv1d", "kernels"):
        if importlib.util.find_spec(pkg) is not None:
            sys.exit(f"{pkg} is installed: the golden outputs must come from transformers' torch "
                     "code paths; run in an environment without it")
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(mf.TRAIN_THREADS)
    rng = random.Random(SEED)
    topics = mf.pydoc_topics()
    docstrings = mf.stdlib_docstrings()
    english = [t for _, t in topics] + [t for _, t in docstrings]
    chats = mf.chat_samples(topics, docstrings, rng)
    with tempfile.TemporaryDirectory(prefix="make-fixtures-qwen35-") as tmp:
        staging = Path(tmp)
        bf16_dir, fp8_dir, golden_dir = staging / BF16, staging / FP8, staging / "golden"
        for d in (bf16_dir, fp8_dir, golden_dir):
            d.mkdir()
        tok = write_tokenizer_files(bf16_dir)
        write_tokenizer_files(fp8_dir)
        stream = training_stream(tok, english, chats, rng)
        log(f"training stream: {len(stream)} tokens")

        model, mtp, bf16_loss = train_model(BF16_TEXT, stream, BF16_STEPS, SEED, BF16)
        save_bf16(model, mtp, BF16_TEXT, bf16_dir)
        model, mtp, fp8_loss = train_model(FP8_TEXT, stream, FP8_STEPS, SEED + 2, FP8)
        save_fp8(model, mtp, FP8_TEXT, fp8_dir)

        torch.set_num_threads(1)
        golden = {BF16: make_golden(BF16, BF16_TEXT, bf16_dir, tok, topics, golden_dir),
                  FP8: make_golden(FP8, FP8_TEXT, fp8_dir, tok, topics, golden_dir)}
        make_mtp_golden(BF16, BF16_TEXT, bf16_dir, golden_dir)
        make_mtp_golden(FP8, FP8_TEXT, fp8_dir, golden_dir)
        check_from_pretrained(BF16, bf16_dir, Qwen3_5ForConditionalGeneration, golden_dir)
        for name in (BF16, FP8):
            dst = FIXTURES / name
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(staging / name, dst)
        for f in golden_dir.iterdir():
            shutil.copyfile(f, FIXTURES / "golden" / f.name)
    log(f"final training loss: {BF16} {bf16_loss:.3f}, {FP8} {fp8_loss:.3f}")
    for fixture, prompts in golden.items():
        for p in prompts:
            log(f"{fixture} [{len(p['ids'])} tokens] margin {p['greedy_min_margin']:.4f}: "
                f"{p['text'][-40:]!r} -> {p['greedy_text']!r}")
    total = 0
    for path in sorted(list((FIXTURES / BF16).iterdir()) + list((FIXTURES / FP8).iterdir()) +
                       sorted((FIXTURES / "golden").glob("tiny-qwen3.5*"))):
        log(f"{path.stat().st_size:>10}  {path.relative_to(FIXTURES)}")
        total += path.stat().st_size
    log(f"written: {total} bytes = {total / 2**20:.3f} MiB")


if __name__ == "__main__":
    main()
