#!/usr/bin/env python3
"""Step-time model of the cuda backend (issue 21 item 6): predicts total tok/s for the seeds'
nine benchmark profiles by replaying each one step by step through the engine's scheduler and
pricing every step with per-op costs, the roofline numbers of `scripts/device-check perf`.

The method is reference/cuda-review.md's simulator (section 4.7 and appendix B), rebuilt here so
that it lives with the code and takes the microbenchmarks' numbers as they come in:

  step time = smooth-max(weight bytes / (BW ew), GEMM FLOPs / (peak ec(T)))      the linears
            + max(lm_head bytes / (0.8 BW), lm_head FLOPs / (0.6 BF16 peak))     logits rows only
            + activation bytes / (0.75 BW) + floor                               elementwise ops
            + decode KV bytes / (BW att)                                         decode attention
            + prefill attention FLOPs / pf_rate                                  causal, chunked
            + recurrent-state bytes / (BW att) + its FLOPs / (0.3 BF16 peak)     Qwen3.5's GDN
            + ceil(rows / SMs) samp + host gap + fixed                           sampling, host

with ec(T) = ec_max T / (T + Th) (small GEMMs fill fewer SMs). Engines: "tachyon" as built now
(tensor-core prefill attention at a predicted rate, the decodes of a mixed step on the split-KV
kernel), "tachyon-882fe22" as the review found it (CUDA-core prefill attention at 22 TFLOP/s,
mixed decodes on the prefill kernel), and "sglang" / "vllm" as the seeds ran them (FA3-class
attention, prefill-first or mixed steps). The scheduler: vLLM V1 mixed steps (running decodes
first, then chunked prefills, up to max-num-batched-tokens and max-num-seqs) or SGLang's
prefill-first steps; a 16-token block KV allocator whose capacity is the device memory left by
the weights (and, for Qwen3.5, one recurrent-state slot per max-num-seqs); preemption by
recompute of the newest running sequence when a step finds no block.

Calibration: the raw model leaves out HTTP, tokenizer and client costs and unmodelled kernel
inefficiency, so it runs the seeds' engine too, on the seeds' H100, and divides every engine's
raw number on the device asked for by the profile's factor (seed engine raw / seed measured); the
seeds' engine then reproduces the seed exactly on an H100, and the factor says how much the
model misses. A GPU run replaces the parameters with
measurements: --pf-tflops (perf_prefill_attention), --att (perf_attention: GB/s over the
device's copy bandwidth), --bw (the copy bandwidth).

Usage:
  bench/step_model.py [--device h100|h200] [--profile NAME ...] [--engine NAME ...]
                      [--pf-tflops X] [--att X] [--bw GB/s] [--requests-scale F]
  bench/step_model.py --self-test
"""

import argparse
import math
import random
import sys
from dataclasses import dataclass, field, replace

# ---------------------------------------------------------------------------------------------
# Hardware, models, engines, profiles


DEVICES = {
    # dense peaks (TFLOP/s) from NVIDIA's datasheets; bw: HBM spec (the H200's 4.8 TB/s measures
    # 4.24 as a copy, bench/RESULTS.md); usable memory for weights + KV at utilization 0.9
    "h100": dict(name="H100 SXM 80GB", bw=3.35e12, bf16=989e12, fp8=1979e12, sms=132, mem=80e9),
    "h200": dict(name="H200 141GB", bw=4.8e12, bf16=989e12, fp8=1979e12, sms=132, mem=141e9),
}


@dataclass
class Model:
    name: str
    linear_params: float  # per token through every linear of the decoder (no lm_head)
    hidden: int
    vocab: int
    weight_bytes_per_param: float  # 1 (FP8) or 2 (BF16)
    kv_bytes_per_token: float  # all layers, K and V
    attn_flops_per_pair: float  # per (query, key) pair, all attention layers: 4 nH D L_attn
    elt_bytes_per_token: float  # activations moved by the elementwise kernels, all layers
    state_bytes: float = 0.0  # recurrent state per sequence (read and written every step)
    state_flops_per_token: float = 0.0  # the delta rule's, per token
    max_len: int = 40960

    def weight_bytes(self):
        return self.linear_params * self.weight_bytes_per_param + 2 * self.vocab * self.hidden * 2


MODELS = {
    # models.md 1: 40 layers, hidden 5120, 40 / 8 heads of 128, intermediate 17408, vocab 151936
    "qwen3-14b-fp8": Model("Qwen3-14B-FP8", 13.21e9, 5120, 151936, 1, 40 * 2 * 8 * 128 * 2,
                           4 * 40 * 128 * 40, 14.6e6),
    # models.md 4: 24 Gated DeltaNet + 8 gated attention layers, hidden 4096, 16 / 4 heads of
    # 256, intermediate 12288, vocab 248320; GDN state 32 x 128 x 128 f32 a layer (48 MiB)
    "qwen3.5-9b": Model("Qwen3.5-9B (BF16)", 24 * 218.1e6 + 8 * 209.7e6, 4096, 248320, 2,
                        8 * 2 * 4 * 256 * 2, 4 * 16 * 256 * 8, 14.6e6 * (4096 * 32) / (5120 * 40),
                        state_bytes=24 * 32 * 128 * 128 * 4,
                        state_flops_per_token=24 * 32 * 128 * 128 * 8, max_len=32768),
}


@dataclass
class Engine:
    name: str
    ew: float  # weight-streaming efficiency of the GEMMs
    ec_max: float  # GEMM compute efficiency at large T
    th: float  # tokens at which a GEMM reaches half of ec_max
    cmp_mult: float  # f32 GEMM outputs (Tachyon) cost a little more
    floor: float  # s per step of elementwise launches
    att_decode: float  # decode attention's share of BW in a pure decode step
    att_mixed: float  # ... in a step with prefills
    pf_tflops: float  # prefill attention
    samp: float  # s per wave of sampled rows
    fixed: float  # s per step of host work the GPU waits for
    mixed: bool = True  # vLLM V1 mixed steps, else SGLang's prefill-first steps
    budget: int = 2048  # max-num-batched-tokens (prefill chunk)
    max_seqs: int = 256
    elt_scale: float = 1.0  # elementwise bytes relative to Tachyon's


ENGINES = {
    "tachyon": Engine("Tachyon (tensor-core attention, split-KV mixed decodes)", 0.65, 0.52, 96,
                      1.05, 1.0e-3, 0.72, 0.72, 150.0, 0.3e-3, 0.2e-3),
    # asynchronous scheduling (--async-scheduling): the step's host work overlaps the device's,
    # as in SGLang's and vLLM's overlap schedulers (their 0.05 ms); a prediction, not measured
    "tachyon-async": Engine("Tachyon with asynchronous scheduling", 0.65, 0.52, 96, 1.05, 1.0e-3,
                            0.72, 0.72, 150.0, 0.3e-3, 0.05e-3),
    "tachyon-882fe22": Engine("Tachyon at 882fe22 (CUDA-core prefill attention)", 0.65, 0.52, 96,
                              1.05, 1.0e-3, 0.72, 0.62, 22.0, 0.3e-3, 0.2e-3),
    "sglang": Engine("SGLang-like (FA3, prefill-first, 8192 / 1024)", 0.72, 0.55, 64, 1.0, 1.0e-3,
                     0.80, 0.80, 450.0, 0.05e-3, 0.05e-3, mixed=False, budget=8192, max_seqs=1024,
                     elt_scale=14.0 / 14.6),
    "vllm": Engine("vLLM-like (FA3, mixed, 8192 / 512)", 0.72, 0.55, 64, 1.0, 1.0e-3, 0.80, 0.80,
                   450.0, 0.05e-3, 0.05e-3, budget=8192, max_seqs=512, elt_scale=14.0 / 14.6),
}


@dataclass
class Profile:
    name: str
    model: str
    n: int
    prompt: int  # 0: the synthetic ShareGPT lengths
    output: int
    rate: float  # requests per second (0: all at t = 0)
    seed_engine: str
    seed_tok_s: float
    seed_file: str
    sharegpt_means: tuple = (208, 203)  # (prompt, output) means the lengths are scaled to


PROFILES = [
    Profile("sharegpt", "qwen3-14b-fp8", 1000, 0, 0, 0, "sglang", 10426, "001"),
    Profile("short", "qwen3-14b-fp8", 1000, 128, 4, 0, "sglang", 16885, "001"),
    Profile("medium", "qwen3-14b-fp8", 500, 2000, 100, 0, "sglang", 14764, "001"),
    Profile("long", "qwen3-14b-fp8", 500, 4000, 200, 0, "sglang", 12258, "001"),
    Profile("very-long", "qwen3-14b-fp8", 100, 32000, 100, 0, "sglang", 10014, "001"),
    # 003 (guidellm): ShareGPT with 342 / 281 mean tokens, then the random profiles at their rates
    Profile("3.5-sharegpt", "qwen3.5-9b", 1000, 0, 0, 1000, "vllm", 11768, "003", (342, 281)),
    Profile("3.5-throughput", "qwen3.5-9b", 1000, 1024, 128, 1000, "vllm", 34470, "003"),
    Profile("3.5-long-context", "qwen3.5-9b", 100, 32000, 100, 1, "vllm", 32659, "003"),
    Profile("3.5-generation-heavy", "qwen3.5-9b", 200, 1000, 2000, 1, "vllm", 3025, "003"),
]


def sharegpt_lengths(n, means, seed=42):
    """bench/dataset.c's synthetic ShareGPT: log-normal prompt and output lengths under vLLM's
    filter (prompt 4..1024, total <= 2048), scaled to the profile's means."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        p = round(math.exp(4.96981 + 1.2 * rng.gauss(0, 1)))
        o = round(math.exp(4.93087 + 0.9 * rng.gauss(0, 1)))
        if 4 <= p <= 1024 and o >= 4 and p + o <= 2048:
            out.append((p, o))
    mp = sum(p for p, _ in out) / n
    mo = sum(o for _, o in out) / n
    return [(max(4, round(p * means[0] / mp)), max(4, round(o * means[1] / mo))) for p, o in out]


# ---------------------------------------------------------------------------------------------
# One step's price


def smooth_max(a, b):
    return (a ** 3 + b ** 3) ** (1.0 / 3.0)


@dataclass
class StepWork:
    tokens: int = 0  # every token the step computes
    rows: int = 0  # logit rows (decodes, prompts that end)
    decode_kv_tokens: int = 0  # context tokens the decodes read
    pf_pairs: float = 0.0  # causal (query, key) pairs of the prefill chunks
    state_seqs: int = 0  # sequences whose recurrent state the step reads and writes
    decodes: int = 0
    prefills: int = 0


def step_time(w: StepWork, m: Model, e: Engine, d: dict, bw=None):
    bw = bw or d["bw"]
    peak = d["fp8"] if m.weight_bytes_per_param == 1 else d["bf16"]
    T = max(w.tokens, 1)
    gemm = smooth_max(m.linear_params * m.weight_bytes_per_param / (bw * e.ew),
                      2 * m.linear_params * T / (peak * e.ec_max * T / (T + e.th)) * e.cmp_mult)
    lm = max(m.vocab * m.hidden * 2 / (0.8 * bw), 2 * m.vocab * m.hidden * w.rows / (0.6 * d["bf16"]))
    elt = m.elt_bytes_per_token * e.elt_scale * T / (0.75 * bw) + e.floor
    att = e.att_decode if w.prefills == 0 else e.att_mixed
    kv = w.decode_kv_tokens * m.kv_bytes_per_token / (bw * att)
    pf = w.pf_pairs * m.attn_flops_per_pair / (e.pf_tflops * 1e12)
    state = (w.state_seqs * 2 * m.state_bytes / (bw * att) +
             w.tokens * m.state_flops_per_token / (0.3 * d["bf16"]))
    host = math.ceil(w.rows / d["sms"]) * e.samp + 30e-6 + e.fixed
    return gemm + lm + elt + kv + pf + state + host, pf


# ---------------------------------------------------------------------------------------------
# The replay


@dataclass
class Seq:
    prompt: int
    output: int
    arrival: float
    computed: int = 0  # tokens with K/V (prompt and generated)
    generated: int = 0
    blocks: int = 0


@dataclass
class Result:
    tok_s: float
    seconds: float
    pf_seconds: float
    steps: int
    preemptions: int
    tokens: int = 0
    kv_tokens: int = 0


def kv_capacity(m: Model, e: Engine, d: dict):
    """Tokens of KV the device holds at utilization 0.9 after the weights, 2.5 GB of activations
    and workspaces, and (Qwen3.5) a state slot per max-num-seqs."""
    left = 0.9 * d["mem"] - m.weight_bytes() - 2.5e9 - e.max_seqs * m.state_bytes
    return max(int(left // m.kv_bytes_per_token), 16 * 64)


def replay(p: Profile, e: Engine, d: dict, scale=1.0, bw=None, block=16):
    m = MODELS[p.model]
    n = max(1, int(p.n * scale))
    lens = (sharegpt_lengths(n, p.sharegpt_means) if p.prompt == 0
            else [(p.prompt, p.output)] * n)
    seqs = [Seq(pl + 8 if p.prompt == 0 else pl, ol, i / p.rate if p.rate else 0.0)
            for i, (pl, ol) in enumerate(lens)]  # +8: a chat template around ShareGPT turns
    blocks_total = kv_capacity(m, e, d) // block
    free = blocks_total
    waiting, running = list(seqs), []
    t, steps, pf_s, preempt = 0.0, 0, 0.0, 0
    total_tokens = sum(s.prompt + s.output for s in seqs)

    def need_blocks(s, upto):
        return max(0, -(-upto // block) - s.blocks)

    while waiting or running:
        if not running and all(s.arrival > t for s in waiting):
            t = min(s.arrival for s in waiting)
            continue
        w = StepWork()
        budget = e.budget
        plan = []  # (seq, n_new)

        def take(s, n_new):
            """Blocks for s's next n_new tokens, preempting the newest running sequences (not
            s) while the pool is short; False when even that cannot make room."""
            nonlocal free, preempt, plan
            nb = need_blocks(s, s.computed + n_new)
            while nb > free and running and running[-1] is not s:
                v = running.pop()  # preempted: recomputed from its start later
                free += v.blocks
                v.blocks, v.computed = 0, 0
                waiting.insert(0, v)
                preempt += 1
                plan = [(q, k) for q, k in plan if q is not v]
            if nb > free:
                return False
            free -= nb
            s.blocks += nb
            plan.append((s, n_new))
            return True

        def admit():
            """Waiting requests that have arrived, a chunk each of what is left of the budget,
            while blocks allow (SGLang also keeps room for half of the running outputs)."""
            nonlocal budget, free
            reserve = 0 if e.mixed else sum(
                -(-(q.output - q.generated) // (2 * block)) for q in running)
            for s in list(waiting):
                if budget <= 0 or len(running) >= e.max_seqs or s.arrival > t:
                    break
                n_new = min(s.prompt + s.generated - s.computed, budget)
                if need_blocks(s, s.computed + n_new) + reserve > free:
                    break
                take(s, n_new)
                waiting.remove(s)
                running.append(s)
                budget -= n_new
                reserve += 0 if e.mixed else -(-s.output // (2 * block))

        inflight = [s for s in running if s.prompt + s.generated - s.computed > 1]
        if e.mixed:  # vLLM V1: the running first (decodes, chunks in flight), then admissions
            for s in list(running):
                if budget <= 0 or s not in running:
                    continue
                left = s.prompt + s.generated - s.computed
                n_new = min(left, budget) if left > 1 else 1
                if not take(s, n_new):
                    break
                budget -= n_new
            admit()
        elif inflight or any(q.arrival <= t for q in waiting) and len(running) < e.max_seqs:
            for s in inflight:  # SGLang: a prefill step (chunks in flight, then admissions)
                if budget <= 0:
                    break
                n_new = min(s.prompt + s.generated - s.computed, budget)
                if not take(s, n_new):
                    break
                budget -= n_new
            admit()
        if not plan and not e.mixed and running:  # SGLang: else a decode step of all running
            for s in list(running):
                if s in running and not take(s, 1):
                    break
        if not plan:
            if running:  # nothing fits: the newest goes back, the rest get its blocks
                v = running.pop()
                free += v.blocks
                v.blocks, v.computed = 0, 0
                waiting.insert(0, v)
                preempt += 1
                continue
            later = [s.arrival for s in waiting if s.arrival > t]
            t = min(later) if later else t + 1e-3
            continue
        for s, n_new in plan:
            w.tokens += n_new
            if s.computed + n_new >= s.prompt + s.generated:
                w.rows += 1
            if n_new == 1 and s.computed >= s.prompt:
                w.decodes += 1
                w.decode_kv_tokens += s.computed + 1
            else:
                w.prefills += 1
                c0 = s.computed
                w.pf_pairs += n_new * c0 + n_new * (n_new + 1) / 2
            if m.state_bytes:
                w.state_seqs += 1
        dt, pf = step_time(w, m, e, d, bw)
        t += dt
        pf_s += pf
        steps += 1
        for s, n_new in plan:
            s.computed += n_new
            if s.computed >= s.prompt + s.generated:
                s.generated += 1
                if s.generated >= s.output:
                    running.remove(s)
                    free += s.blocks
                    s.blocks = 0
    return Result(total_tokens / t, t, pf_s, steps, preempt, total_tokens,
                  blocks_total * block)


# ---------------------------------------------------------------------------------------------
# Report


def predict(profiles, engines, device, args):
    d = dict(DEVICES[device])
    bw = args.bw * 1e9 if args.bw else None
    rows = []
    for p in profiles:
        # the seeds ran on H100s: their engine's raw model there over what they measured
        seed = replay(p, ENGINES[p.seed_engine], DEVICES["h100"], args.requests_scale)
        factor = seed.tok_s / p.seed_tok_s
        row = dict(profile=p, seed=seed, factor=factor, engines={})
        for name in engines:
            e = ENGINES[name]
            if name.startswith("tachyon"):
                e = replace(e, pf_tflops=args.pf_tflops or e.pf_tflops,
                            att_decode=args.att or e.att_decode,
                            att_mixed=args.att or e.att_mixed)
            r = replay(p, e, d, args.requests_scale, bw)
            row["engines"][name] = (r, r.tok_s / factor)
        rows.append(row)
    return rows


def print_table(rows, engines, device):
    print(f"Predicted total tok/s on one {DEVICES[device]['name']} (calibrated: each engine's raw "
          f"model / the seed engine's raw-to-measured factor on the seeds' H100)\n")
    head = ["profile", "model", "seed (engine: measured)", "factor"]
    for name in engines:
        head += [f"{name} raw", f"{name}", "of seed"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        p = row["profile"]
        cells = [p.name, MODELS[p.model].name, f"{p.seed_engine} {p.seed_file}: {p.seed_tok_s:,.0f}",
                 f"{row['factor']:.2f}"]
        for name in engines:
            r, cal = row["engines"][name]
            cells += [f"{r.tok_s:,.0f}", f"**{cal:,.0f}**", f"{cal / p.seed_tok_s:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print()
    for name in engines:
        print(f"- {name}: {ENGINES[name].name}")
    print("- prefill-attention seconds / total (first engine): " + "; ".join(
        f"{r['profile'].name} {r['engines'][engines[0]][0].pf_seconds:.1f} / "
        f"{r['engines'][engines[0]][0].seconds:.1f}" for r in rows))


# ---------------------------------------------------------------------------------------------
# Self-test (ctest: test_step_model)


def self_test():
    d = DEVICES["h100"]
    m = MODELS["qwen3-14b-fp8"]
    e = ENGINES["tachyon"]
    fails = []

    def check(cond, what):
        if not cond:
            fails.append(what)

    # a batch-1 decode step is weight-streaming bound: ~13.2 GB / (3.35 TB/s 0.65) + the rest
    w = StepWork(tokens=1, rows=1, decode_kv_tokens=200, decodes=1)
    dt, _ = step_time(w, m, e, d)
    stream = m.linear_params / (d["bw"] * e.ew)
    check(stream < dt < stream + 3e-3, f"batch-1 decode step {dt * 1e3:.2f} ms")
    # more prefill attention throughput never slows a profile down; the 32k one gains most
    p = PROFILES[4]
    slow = replay(p, replace(e, pf_tflops=22), d, 0.2)
    fast = replay(p, e, d, 0.2)
    check(fast.tok_s > 3 * slow.tok_s, f"32k: {slow.tok_s:.0f} -> {fast.tok_s:.0f} tok/s")
    check(fast.tokens == int(p.n * 0.2) * (p.prompt + p.output), "tokens conserved")
    # bandwidth helps decode-heavy profiles
    a = replay(PROFILES[0], e, d, 0.2)
    b = replay(PROFILES[0], e, d, 0.2, bw=1.5 * d["bw"])
    check(b.tok_s > a.tok_s, "more bandwidth, more ShareGPT throughput")
    # a pool too small for the batch preempts, and still finishes every request
    small = dict(d, mem=m.weight_bytes() / 0.9 + 2.5e9 / 0.9 + 2e9)
    r = replay(PROFILES[3], e, small, 0.1)
    check(r.preemptions > 0 and r.tokens == 50 * 4200, f"small pool: {r.preemptions} preemptions")
    # arrival-bound profiles take at least as long as the arrivals
    r = replay(PROFILES[7], ENGINES["vllm"], DEVICES["h100"], 0.2)
    check(r.seconds >= 19.0, f"1 req/s for 20 requests took {r.seconds:.1f} s")
    # calibration reproduces the seed engine's measured number
    args = argparse.Namespace(bw=None, requests_scale=0.2, pf_tflops=None, att=None)
    row = predict([PROFILES[1]], ["sglang"], "h100", args)[0]
    check(abs(row["engines"]["sglang"][1] - PROFILES[1].seed_tok_s) < 1, "calibration")
    for f in fails:
        print("step_model self-test: FAILED:", f)
    print(f"step_model self-test: {6 - len(fails)} of 6 checks passed")
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="h100", choices=sorted(DEVICES))
    ap.add_argument("--profile", nargs="*", help="profile names (default: all nine)")
    ap.add_argument("--engine", nargs="*", default=["tachyon-882fe22", "tachyon"],
                    choices=sorted(ENGINES))
    ap.add_argument("--pf-tflops", type=float, help="Tachyon's prefill attention TFLOP/s")
    ap.add_argument("--att", type=float, help="Tachyon's decode attention share of --bw")
    ap.add_argument("--bw", type=float, help="HBM bandwidth, GB/s (default: the datasheet's)")
    ap.add_argument("--requests-scale", type=float, default=1.0,
                    help="replay this fraction of each profile's requests (quick runs)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    names = {p.name: p for p in PROFILES}
    profiles = [names[n] for n in args.profile] if args.profile else PROFILES
    rows = predict(profiles, args.engine, args.device, args)
    print_table(rows, args.engine, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
