#!/usr/bin/env python3
"""Builds the tiny Qwen3-MoE test fixtures and their transformers golden outputs.

Run through scripts/make-fixtures (by hand, never in CI; `scripts/make-fixtures moe` runs only
this); the outputs are committed. Writes:
  tests/fixtures/tiny-qwen3-moe/      BF16 Qwen3MoeForCausalLM: 3 layers, 8 experts top-2, no
                                      renormalisation, layer 1 dense (mlp_only_layers [1]), tied
                                      embeddings, saved by transformers' save_pretrained
  tests/fixtures/tiny-qwen3-moe-fp8/  block FP8: 4 layers, decoder_sparse_step 2 (layers 1 and 3
                                      MoE), 12 experts top-3, norm_topk_prob, untied, two shards
  tests/fixtures/golden/tiny-qwen3-moe{,-fp8}.json + .logits.f32   transformers, eager float32
  tests/fixtures/golden/tiny-qwen3-moe-fp8.w8a8.json + .logits.f32 the same model with every FP8
                                      linear's input quantized per token per 128 columns to e4m3
                                      (vLLM's W8A8), on short prompts
Both start from tests/fixtures/tiny-qwen3 (make_fixtures.py's output: its tokenizer, its trained
embedding and attention) and train their experts on the same corpus. Seeded, one thread set, so
reruns with the pinned package versions give the same bytes. Nothing else in tests/fixtures is
touched.
"""

import copy
import json
import random
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F
import transformers
from tokenizers import Tokenizer
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (the dense fixtures' corpus, training and goldens)

BF16 = "tiny-qwen3-moe"
FP8 = "tiny-qwen3-moe-fp8"
W8A8 = f"{FP8}.w8a8"
SEED = 4321
BF16_STEPS = 400
FP8_STEPS = 300
LR = 3e-3
SIZE_LIMIT = 7 * 2**20
W8A8_GREEDY = 16
W8A8_MIN_MARGIN = 0.05  # a flipped e4m3 rounding moves logits by ~1e-2
W8A8_PROMPTS = mf.PROMPTS[:2]  # the 1- and 7-token prompts


def moe_config(layers, experts, top_k, moe_inter, inter, tied, **extra):
    cfg = {k: v for k, v in mf.qwen3_config(layers, inter, tied).items()
           if k not in ("max_window_layers", "sliding_window", "use_sliding_window")}
    cfg.update({
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": moe_inter,
        "norm_topk_prob": False,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
    })
    cfg.update(extra)
    return dict(sorted(cfg.items()))


def bf16_config():
    """Written with transformers 5's name for the expert count (num_local_experts)."""
    cfg = moe_config(3, 8, 2, 64, 192, True, mlp_only_layers=[1])
    cfg["num_local_experts"] = cfg.pop("num_experts")
    return dict(sorted(cfg.items()))


def fp8_config():
    """As Qwen's -FP8 configs: num_experts, quantization_config with the router unconverted."""
    cfg = moe_config(4, 12, 3, 96, 320, False, decoder_sparse_step=2, norm_topk_prob=True)
    cfg["quantization_config"] = {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head"] + [f"model.layers.{i}.mlp.gate" for i in (1, 3)],
    }
    return cfg


def hf_config(cfg):
    kw = {k: v for k, v in cfg.items()
          if k not in ("quantization_config", "architectures", "transformers_version",
                       "torch_dtype")}
    if "num_local_experts" in kw:
        kw["num_experts"] = kw.pop("num_local_experts")
    return Qwen3MoeConfig(**kw, attn_implementation="eager", experts_implementation="eager")


def init_from_dense(cfg, dense):
    """A fresh model whose embedding, norms and attention come from tiny-qwen3's layers (model
    layer l takes dense layer min(l, 2)), dense MLPs from its first channels; router and experts
    keep their random init."""
    model = Qwen3MoeForCausalLM(hf_config(cfg))
    new = model.state_dict()
    for name in new:
        if name == "lm_head.weight":
            src = "model.embed_tokens.weight"
        elif name.startswith("model.layers."):
            parts = name.split(".")
            parts[2] = str(min(int(parts[2]), 2))
            src = ".".join(parts)
        else:
            src = name
        if src not in dense or ".experts." in name or name.endswith("mlp.gate.weight"):
            continue
        value = dense[src]
        rows, cols = new[name].shape[0], new[name].shape[-1]
        new[name] = value[:rows, :cols].clone() if value.dim() == 2 else value.clone()
    model.load_state_dict(new)
    return model


def save_pretrained_bf16(model, out):
    """model.safetensors as transformers writes it: BF16, one tensor per expert."""
    with tempfile.TemporaryDirectory() as tmp:
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
        shutil.copyfile(Path(tmp) / "model.safetensors", out / "model.safetensors")


def checkpoint_state(model):
    """The BF16 tensors under the checkpoint's names."""
    with tempfile.TemporaryDirectory() as tmp:
        save_pretrained_bf16(model, Path(tmp))
        return safetensors.torch.load_file(str(Path(tmp) / "model.safetensors"))


def fuse_experts(state, cfg):
    """A checkpoint's per-expert tensors as transformers' Qwen3MoeExperts holds them:
    gate_up_proj [E, 2I, H] (gate rows, then up rows) and down_proj [E, H, I]."""
    out, experts = {}, {}
    for name, value in state.items():
        if ".mlp.experts." not in name:
            out[name] = value
            continue
        prefix, rest = name.split(".mlp.experts.")
        e, proj = rest.split(".")[:2]
        experts.setdefault(prefix, {})[(int(e), proj)] = value
    n = cfg.get("num_experts", cfg.get("num_local_experts"))
    for prefix, t in experts.items():
        out[f"{prefix}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([t[(e, "gate_proj")], t[(e, "up_proj")]]) for e in range(n)])
        out[f"{prefix}.mlp.experts.down_proj"] = torch.stack([t[(e, "down_proj")] for e in range(n)])
    return out


def is_moe_fp8(name):
    """Every projection of the attention, the dense MLPs and the experts; not the router."""
    return name.startswith("model.layers.") and name.endswith(("_proj.weight"))


def save_bf16(model, cfg, tok, out):
    save_pretrained_bf16(model, out)
    with safetensors.safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.metadata() == {"format": "pt"}, f.metadata()
        keys = set(f.keys())
        assert "model.layers.0.mlp.experts.7.down_proj.weight" in keys, "not per-expert tensors"
        assert "lm_head.weight" not in keys and "model.layers.1.mlp.gate_proj.weight" in keys
        assert all(f.get_slice(k).get_dtype() == "BF16" for k in keys)
    mf.write_json(out / "config.json", cfg)
    mf.write_tokenizer_files(tok, out)


def quantize(x, group=mf.FP8_BLOCK):
    """vLLM's per-token-group FP8 quantization (models.md 2.4), back to f32."""
    shape = x.shape
    rows = x.reshape(-1, shape[-1]).float()
    out = torch.empty_like(rows)
    for g in range(0, shape[-1], group):
        part = rows[:, g:g + group]
        s = part.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10) / mf.FP8_MAX
        q = (part / s).clamp(-mf.FP8_MAX, mf.FP8_MAX).to(torch.float8_e4m3fn).float()
        out[:, g:g + group] = q * s
    return out.reshape(shape)


def experts_w8a8(self, hidden_states, top_k_index, top_k_weights):
    """Qwen3MoeExperts.forward (eager) with the inputs of gate_up and down quantized."""
    final = torch.zeros_like(hidden_states)
    mask = F.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
    for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        if e == self.num_experts:
            continue
        pos, token = torch.where(mask[e])
        gate, up = F.linear(quantize(hidden_states[token]), self.gate_up_proj[e]).chunk(2, -1)
        y = F.linear(quantize(self.act_fn(gate) * up), self.down_proj[e])
        final.index_add_(0, token, y * top_k_weights[token, pos, None])
    return final


def reference_model(cfg, state, w8a8=False):
    """Qwen3MoeForCausalLM in float32 holding exactly the stored values (models.md 2.3 for FP8),
    optionally with W8A8: every quantized linear's input quantized as vLLM does."""
    model = Qwen3MoeForCausalLM(hf_config(cfg)).float().eval()
    missing, unexpected = model.load_state_dict(fuse_experts(state, cfg), strict=False)
    assert not unexpected, unexpected
    assert missing == (["lm_head.weight"] if cfg["tie_word_embeddings"] else []), missing
    if w8a8:
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name.endswith("_proj"):
                module.register_forward_pre_hook(lambda m, args: (quantize(args[0]),))
            elif type(module).__name__ == "Qwen3MoeExperts":
                module.forward = types.MethodType(experts_w8a8, module)
    return model


def load_stored_bf16(directory):
    return {k: v.float() for k, v in
            safetensors.torch.load_file(str(directory / "model.safetensors")).items()}


def check_roundtrip(directory, golden_dir):
    """transformers' own loader (per-expert tensors converted to its fused experts) on the saved
    BF16 fixture reproduces the golden logits."""
    golden = json.loads((golden_dir / f"{BF16}.json").read_text())
    rows = np.fromfile(golden_dir / golden["logits_file"], dtype="<f4").reshape(
        -1, mf.PADDED_VOCAB)
    model = Qwen3MoeForCausalLM.from_pretrained(str(directory), dtype=torch.float32,
                                                attn_implementation="eager",
                                                experts_implementation="eager").eval()
    for p in golden["prompts"]:
        logits = mf.full_logits(model, p["ids"]).numpy()
        want = rows[p["logits_row_offset"]:p["logits_row_offset"] + len(p["logit_positions"])]
        diff = abs(logits[p["logit_positions"]] - want).max()
        assert diff <= 1e-4, f"from_pretrained logits differ by {diff}"


def build(staging):
    dense_dir = mf.FIXTURES / mf.BF16
    tok = Tokenizer.from_file(str(dense_dir / "tokenizer.json"))
    dense = load_stored_bf16(dense_dir)
    rng = random.Random(SEED)
    topics, docstrings = mf.pydoc_topics(), mf.stdlib_docstrings()
    english = [text for _, text in topics] + [text for _, text in docstrings]
    stream = mf.training_stream(tok, english, mf.chat_samples(topics, docstrings, rng), rng)
    mf.log(f"training stream: {len(stream)} tokens")

    bf16_dir, fp8_dir, golden_dir = (staging / n for n in (BF16, FP8, mf.GOLDEN))
    bf16_cfg, fp8_cfg = bf16_config(), fp8_config()
    model = init_from_dense(bf16_cfg, dense)
    bf16_loss = mf.train(model, stream, BF16_STEPS, LR, SEED, BF16)
    save_bf16(model, bf16_cfg, tok, bf16_dir)

    model = init_from_dense(fp8_cfg, dense)
    fp8_loss = mf.train(model, stream, FP8_STEPS, LR, SEED + 1, FP8)
    mf.save_fp8_fixture(checkpoint_state(model), fp8_cfg, tok, fp8_dir, is_fp8=is_moe_fp8,
                        first_shard=lambda k: not k.startswith(("model.layers.2.",
                                                                "model.layers.3.", "lm_head",
                                                                "model.norm")))

    torch.set_num_threads(1)
    fp8_state = mf.load_stored_fp8(fp8_dir)
    golden = {
        BF16: mf.make_golden(BF16, reference_model(bf16_cfg, load_stored_bf16(bf16_dir)), tok,
                             golden_dir),
        FP8: mf.make_golden(FP8, reference_model(fp8_cfg, fp8_state), tok, golden_dir),
        W8A8: mf.make_golden(FP8, reference_model(fp8_cfg, fp8_state, w8a8=True), tok,
                             golden_dir, name=W8A8, prompt_sets=W8A8_PROMPTS,
                             n_greedy=W8A8_GREEDY, min_margin=W8A8_MIN_MARGIN,
                             reference="eager float32, W8A8: every FP8 linear's input "
                                       "quantized per token per 128 columns to e4m3"),
    }
    check_roundtrip(bf16_dir, golden_dir)
    return bf16_loss, fp8_loss, golden


def main():
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(mf.TRAIN_THREADS)
    mf.log(f"torch {torch.__version__}, transformers {transformers.__version__}")
    ours = [BF16, FP8, f"{mf.GOLDEN}/{BF16}.", f"{mf.GOLDEN}/{FP8}."]
    with tempfile.TemporaryDirectory(prefix="make-moe-fixtures-") as tmp:
        staging = Path(tmp)
        for name in (BF16, FP8, mf.GOLDEN):
            (staging / name).mkdir()
        bf16_loss, fp8_loss, golden = build(staging)
        for name in (BF16, FP8):
            shutil.rmtree(mf.FIXTURES / name, ignore_errors=True)
            shutil.copytree(staging / name, mf.FIXTURES / name)
        for path in (staging / mf.GOLDEN).iterdir():
            shutil.copyfile(path, mf.FIXTURES / mf.GOLDEN / path.name)
    mf.log(f"final training loss: {BF16} {bf16_loss:.3f}, {FP8} {fp8_loss:.3f}")
    for name, prompts in golden.items():
        for p in prompts:
            mf.log(f"{name} [{len(p['ids'])} tokens] margin {p['greedy_min_margin']:.4f}: "
                   f"{p['text'][-40:]!r} -> {p['greedy_text']!r}")
    total = 0
    for path in sorted(mf.FIXTURES.rglob("*")):
        rel = str(path.relative_to(mf.FIXTURES))
        if path.is_file() and any(rel.startswith(o) for o in ours):
            mf.log(f"{path.stat().st_size:>10}  {rel}")
            total += path.stat().st_size
    mf.log(f"written by make_moe_fixtures: {total} bytes = {total / 2**20:.3f} MiB")
    if total >= SIZE_LIMIT:
        sys.exit(f"the MoE fixtures exceed {SIZE_LIMIT} bytes")


if __name__ == "__main__":
    main()
