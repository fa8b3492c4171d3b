/*
 * bench dataset: the prompts of a benchmark run, built the way `vllm bench serve` builds them.
 *
 *     bench_prompt_t *p;
 *     bool synthetic;
 *     if (bench_dataset_build(&o, tok, o.num_prompts, &p, &synthetic, &err) < 0) ...;
 *     ... send p[i].text, max_tokens = p[i].output_len ...
 *     bench_dataset_free(p, o.num_prompts);
 *
 * Datasets (o->dataset):
 * - BENCH_DATASET_RANDOM: vLLM's RandomDataset (reference server-and-bench.md 3.6): lengths drawn
 *   uniformly in [floor(L*(1-r)), ceil(L*(1+r))] after removing the tokenizer's special tokens
 *   from the input length, consecutive vocabulary ids from a random offset over the non-special
 *   ids, a shared random prefix of o->prefix_len tokens, then decode -> re-encode adjusted to the
 *   exact length (up to 10 rounds; a short sequence is extended with non-special ids, where vLLM
 *   draws from the whole vocabulary and can put a chat-control token in a prompt; prompt_len is
 *   the length the final text re-encodes to). The generator is our own seeded PRNG (splitmix64
 * seeding a xoshiro256**), not numpy's PCG64 stream, so the prompts differ from vLLM's for the same
 * seed while every length follows the same distribution.
 * - BENCH_DATASET_SHAREGPT: vLLM's ShareGPTDataset (3.7) over the JSON file o->dataset_path:
 *   entries with >= 2 conversations, seeded shuffle, prompt = turn 0, completion = turn 1,
 *   lengths with tok (encode with special tokens, as the tokenizer's defaults), the
 *   is_valid_sequence filter (prompt and output >= 4, prompt <= 1024, total <= 2048; the output
 *   checks are skipped when o->output_len > 0 fixes the output length), the first n, and a seeded
 *   oversample when fewer pass. The shuffle is our PRNG, not Python's random.shuffle.
 * - BENCH_DATASET_SHAREGPT_SYNTHETIC, or BENCH_DATASET_SHAREGPT with no dataset_path: a seeded
 *   generator whose prompt and output token lengths follow ShareGPT V3 as vLLM samples it (see
 *   below); *synthetic is set so every report labels the run.
 *
 * Synthetic ShareGPT: what it matches and where the numbers come from. The targets are the
 * mean lengths of ShareGPT V3 (ShareGPT_V3_unfiltered_cleaned_split.json) as `vllm bench serve`
 * samples it (seed 0, 1000 prompts, vLLM's filter: prompt 4..1024, output >= 4, total <= 2048):
 * - seeds 000-002 (`vllm bench serve --backend openai-chat --dataset-name sharegpt --num-prompts
 *   1000`, Qwen3 tokenizer): "Total input tokens: 217393" for 1000 requests (Qwen3-14B and -32B;
 *   212,894 over 984 for Qwen3-235B-A22B-2507) and "Total generated tokens" 201,376 .. 201,833.
 *   The input count is the server's and includes Qwen's chat template for one user message
 *   (8 tokens: <|im_start|> user \n ... <|im_end|> \n <|im_start|> assistant \n), so the raw
 *   prompt mean is 217.4 - 8 = 209.4 tokens; the output mean is at least 201.8 (ShareGPT does
 *   not force ignore_eos).
 * - vllm-project/vllm PR #18566 (`vllm bench serve ... --dataset-path
 *   Aeala/ShareGPT_Vicuna_unfiltered`, Llama-3.1-8B-Instruct, openai-chat, 1000 prompts):
 *   229,711 input tokens (Llama 3.1's template, with its default system header, adds a few
 *   dozen) and 203,068 generated: the same ~200 tokens per side under another tokenizer.
 * The targets taken from both: prompt mean 208, output mean 203 tokens.
 * No public source for the medians or the shape turned up, so the shape is an assumption:
 * independent log-normals, prompt mu = ln 144, sigma = 1.2 and output mu = ln 138.5,
 * sigma = 0.9, each pair redrawn until it passes vLLM's filter; mu was fitted (numpy, 2M draws)
 * so that the filtered means hit 208 / 203. Measured on 1M draws of this generator: prompt mean
 * 208.2, median 133, p10 30, p90 509, p99 925; output mean 202.9, median 138, p10 44, p90 434,
 * p99 1049 (BENCH_SYNTH_* below; the unit test checks them).
 * Prompt text: words from a fixed English word list joined by spaces, encoded with tok, cut to
 * the drawn length and adjusted as the random dataset does, so prompt_len is exact under tok
 * (it counts the tokens encode(add_special) adds, as vLLM's ShareGPT lengths do). A fixed
 * o->output_len > 0 replaces the drawn output lengths.
 */
#ifndef TACHYON_BENCH_DATASET_H
#define TACHYON_BENCH_DATASET_H

#include <stdbool.h>

#include "bench.h"

/* Documented targets of the synthetic ShareGPT generator (tokens, after vLLM's filter). */
#define BENCH_SYNTH_PROMPT_MEAN   208.0
#define BENCH_SYNTH_PROMPT_MEDIAN 133.0
#define BENCH_SYNTH_OUTPUT_MEAN   203.0
#define BENCH_SYNTH_OUTPUT_MEDIAN 138.0

typedef struct bench_prompt {
    char *text;     /* the prompt sent (raw string; chat backends wrap it in one user message) */
    int prompt_len; /* tokens under tok, as vLLM counts them for this dataset */
    int output_len; /* max_tokens of the request */
} bench_prompt_t;

/* Builds n prompts for o->dataset (random / sharegpt file / sharegpt-synthetic) using tok for
 * lengths; *synthetic is set for the synthetic generator. Caller frees with bench_dataset_free.
 * Errors: n < 1, bad lengths or range ratio, an unreadable or malformed ShareGPT file, no entry
 * passing the filter, a tokenizer failure. On error *out is NULL. */
int bench_dataset_build(const bench_options_t *o, const bench_tokenizer_t *tok, int n,
                        bench_prompt_t **out, bool *synthetic, bench_err_t *err);

/* Frees p[0..n) and p; NULL is a no-op. */
void bench_dataset_free(bench_prompt_t *p, int n);

/* Draws n (prompt_len, output_len) pairs of the synthetic ShareGPT generator for seed without
 * building text (prompt_lens, output_lens: [n] caller-owned). The prompts that
 * bench_dataset_build makes for the same seed have exactly these lengths. */
void bench_dataset_synthetic_lengths(uint64_t seed, int n, int *prompt_lens, int *output_lens);

#endif
