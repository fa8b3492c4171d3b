/*
 * stats: what the engine did, for the console's charts and the /metrics endpoint.
 *
 * The engine thread records one stats_step_t per step and one stats_request_t per finished
 * choice; any thread takes a consistent copy with stats_snapshot() (a short copy under a mutex,
 * never blocking the engine for longer). The snapshot holds live gauges, monotonic counters,
 * latency histograms with vLLM's bucket boundaries, and a ring of the most recent steps that the
 * console samples a few times a second.
 *
 *     stats_t *st = stats_create();
 *     stats_record_step(st, &step);            // engine thread
 *     stats_snapshot_t snap;
 *     stats_snapshot(st, &snap);               // any thread
 *     stats_destroy(st);
 */
#ifndef TACHYON_STATS_H
#define TACHYON_STATS_H

#include <stdbool.h>
#include <stdint.h>

#define STATS_RING        2048 /* steps kept for the charts */
#define STATS_MAX_BUCKETS 32   /* histogram bucket bounds, +Inf not counted */

typedef struct stats_step {
    double t;           /* engine_now() at the end of the step, s */
    float step_ms;      /* wall time of the step, ms */
    float forward_ms;   /* of which the backend: forward pass and sampling math, ms */
    int running;        /* sequences in the batch */
    int waiting;        /* sequences queued */
    int kv_used;        /* blocks referenced */
    int kv_total;       /* blocks in the pool */
    int state_used;     /* recurrent-state slots held by sequences (models with state) */
    int state_total;    /* state slots in the pool (0: the model keeps no state) */
    int prefill_tokens; /* tokens scheduled this step that were prompt (or recompute) */
    int decode_tokens;  /* tokens scheduled this step that were decodes (a sequence's last sampled
                           token; its drafts are counted apart) */
    int preempted;      /* sequences preempted this step */
    int draft_tokens;   /* speculative drafts verified this step (spec.h) */
    int accepted;       /* of which accepted: each adds a token to the step's output */
} stats_step_t;

#define STATS_SPEC_POS 16 /* draft positions counted (SPEC_MAX_TOKENS) */

/* One finished choice. Latencies in seconds; a value < 0 is not recorded (e.g. no TTFT for a
 * request aborted before its first token). */
typedef struct stats_request {
    const char *id; /* the request's id (NULL: none), for the list of recent ones */
    int choice;
    int finish_reason; /* engine_finish_reason_t */
    int prompt_tokens, generation_tokens, cached_tokens;
    double queue_s; /* arrival to first scheduled */
    double ttft_s;  /* arrival to first token */
    double tpot_s;  /* mean time per output token after the first */
    double e2e_s;   /* arrival to finish */
    double t;       /* engine_now() at the finish */
} stats_request_t;

/* One live choice, for the console's table of active requests. */
typedef enum stats_req_state {
    STATS_REQ_WAITING,   /* queued, never scheduled */
    STATS_REQ_PREFILL,   /* computing its prompt */
    STATS_REQ_DECODE,    /* generating */
    STATS_REQ_PREEMPTED, /* back in the queue after losing its blocks; recomputed later */
} stats_req_state_t;

#define STATS_MAX_ACTIVE 256 /* active choices listed in a snapshot (the oldest first) */
#define STATS_ID_LEN     48  /* bytes of a listed request id, with its NUL (longer ones cut) */
#define STATS_RECENT     64  /* finished choices listed in a snapshot (the newest) */

typedef struct stats_active {
    char id[STATS_ID_LEN]; /* the request id, cut to fit */
    int choice;
    int prompt_tokens, generated, cached_tokens;
    double arrival;     /* engine_now() clock, s */
    double first_token; /* engine_now() of the first token, 0 = none yet */
    int preemptions;
    stats_req_state_t state;
} stats_active_t;

/* One finished choice, for the console's table (the newest STATS_RECENT). */
typedef struct stats_finished {
    char id[STATS_ID_LEN];
    int choice;
    int finish_reason; /* engine_finish_reason_t */
    int prompt_tokens, generated;
    double ttft_s; /* < 0: none (aborted before its first token) */
    double e2e_s;
    double t; /* engine_now() when it finished */
} stats_finished_t;

typedef struct stats_hist {
    int n_bounds;
    double bounds[STATS_MAX_BUCKETS];       /* upper bounds, increasing */
    uint64_t counts[STATS_MAX_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    uint64_t count;
    double sum;
} stats_hist_t;

/* Expert load of a mixture-of-experts model, for the console's heat map and /metrics: tokens
 * routed to each expert of each MLP_MOE layer (a token counts once for each of its top-k
 * experts; prompt, decode and recomputed tokens alike). Rows are the model's MoE layers in
 * order (layer[r] is row r's index in the model), columns its experts: cell (r, e) is
 * [r * n_experts + e]. `total` counts since the engine started; `window` over the last
 * window_s seconds (STATS_EXPERT_WINDOW once the engine has run that long; whole seconds, so
 * it spans between window_s - 1 and window_s). Refreshed every STATS_EXPERT_REFRESH seconds
 * while the engine runs and when it goes idle. n_layers is 0 for a dense model, and for one
 * with more than STATS_EXPERT_CELLS cells (not tracked). */
#define STATS_EXPERT_CELLS   16384 /* 94 MoE layers x 128 experts (Qwen3-235B-A22B) fit */
#define STATS_EXPERT_LAYERS  256
#define STATS_EXPERT_WINDOW  10   /* s */
#define STATS_EXPERT_REFRESH 0.25 /* s */

typedef struct stats_experts {
    int n_layers;  /* rows: MoE layers */
    int n_experts; /* columns */
    int16_t layer[STATS_EXPERT_LAYERS];
    double window_s; /* seconds `window` covers */
    double t;        /* engine_now() of the last refresh */
    uint64_t total[STATS_EXPERT_CELLS];
    uint32_t window[STATS_EXPERT_CELLS];
} stats_experts_t;

typedef struct stats_snapshot {
    /* gauges (the last step) */
    int running, waiting, kv_used, kv_total;
    int state_used, state_total; /* recurrent-state slots (models with state) */
    /* counters since start */
    uint64_t steps;
    uint64_t prompt_tokens;     /* whole prompts (cached part included) of requests that gave
                                   their first token: vLLM's prompt_tokens_total */
    uint64_t generation_tokens; /* tokens sampled */
    uint64_t preemptions;
    uint64_t prefix_queries, prefix_hits; /* prompt tokens looked up / found in the cache */
    /* asynchronous scheduling (--async-scheduling): steps launched before the previous step's
     * samples came back, and their input tokens that were those samples (placeholders) */
    uint64_t steps_ahead, tokens_ahead;
    uint64_t requests_finished[4]; /* by engine_finish_reason_t */
    uint64_t requests_submitted;
    /* speculative decoding (vllm:spec_decode_*): sequences that verified drafts in a step,
     * drafts verified, drafts accepted, and accepted per draft position */
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted_tokens;
    uint64_t spec_accepted_per_pos[STATS_SPEC_POS];
    int spec_k; /* positions used so far (the largest num_speculative_tokens verified) */
    /* latency histograms, seconds */
    stats_hist_t ttft, tpot, itl, e2e, queue;
    /* vLLM's request phases: prefill = first scheduled to first token (ttft - queue), decode =
     * first token to finish (e2e - ttft), inference = first scheduled to finish (e2e - queue) */
    stats_hist_t prefill_time, decode_time, inference_time;
    stats_hist_t iteration_tokens; /* tokens scheduled per step (steps that ran any) */
    /* live choices: the first n_active of n_active_total, oldest first, as of active_t
     * (engine_now(), refreshed a few times a second while the engine runs) */
    stats_active_t active[STATS_MAX_ACTIVE];
    int n_active, n_active_total;
    double active_t;
    /* the last n_recent finished choices, oldest first */
    stats_finished_t recent[STATS_RECENT];
    int n_recent;
    /* the last n_steps steps, oldest first */
    stats_step_t steps_ring[STATS_RING];
    int n_steps;
    stats_experts_t experts; /* MoE models only (n_layers 0 otherwise) */
} stats_snapshot_t;

typedef struct stats stats_t;

stats_t *stats_create(void); /* NULL when out of memory */
void stats_destroy(stats_t *st);

void stats_record_step(stats_t *st, const stats_step_t *step);
/* Sets the KV gauges without recording a step: the pool's size, known before the first one. */
void stats_set_kv(stats_t *st, int used, int total);
void stats_record_request(stats_t *st, const stats_request_t *req);
/* One inter-token latency, seconds (every decode token after the first). */
void stats_record_itl(stats_t *st, double itl_s);
/* `n` inter-token latencies of the same value: a step's decode tokens share one, so the engine
 * records them with one lock instead of one per token. */
void stats_record_itl_n(stats_t *st, double itl_s, uint64_t n);
/* Replaces the list of live choices (n <= STATS_MAX_ACTIVE of n_total) as of time t. */
void stats_record_active(stats_t *st, const stats_active_t *a, int n, int n_total, double t);
/* Counters the engine bumps as things happen. */
void stats_add_submitted(stats_t *st, uint64_t n);
void stats_add_prompt_tokens(stats_t *st, uint64_t prompt);
/* Tokens sampled (appended to sequences), first tokens included: vllm:generation_tokens_total. */
void stats_add_generation_tokens(stats_t *st, uint64_t sampled);
void stats_add_prefix(stats_t *st, uint64_t queried, uint64_t hit);
void stats_add_ahead(stats_t *st, uint64_t steps, uint64_t tokens);
/* A step's speculative counts: `drafts` sequences verified `draft_tokens` drafts, `accepted` of
 * them accepted; accepted_per_pos[j] (j < n_pos) those accepted at draft position j. */
void stats_add_spec(stats_t *st, uint64_t drafts, uint64_t draft_tokens, uint64_t accepted,
                    const uint64_t *accepted_per_pos, int n_pos);
/* Acceptance rate (accepted / drafts verified) and mean acceptance length (tokens per verified
 * sequence and step: 1 + accepted / sequences, as vLLM counts it); NaN before any draft. */
double stats_spec_acceptance_rate(const stats_snapshot_t *s);
double stats_spec_mean_length(const stats_snapshot_t *s);
/* Starts tracking expert load: n_layers MoE layers (their model indices in layers) of
 * n_experts each, from time t (engine_now()). -1 (nothing tracked) when the cells do not fit
 * or out of memory. */
int stats_experts_init(stats_t *st, int n_layers, int n_experts, const int *layers, double t);
/* The cumulative counts [n_layers * n_experts] (rows as in stats_experts_t) at time t. */
void stats_record_experts(stats_t *st, const uint64_t *total, double t);
/* Drops from the expert-load window what is older than STATS_EXPERT_WINDOW at `now`: an idle
 * engine records nothing, so a reader ages the window before its snapshot (the engine's
 * engine_stats does) rather than showing the last busy seconds as current. */
void stats_age_experts(stats_t *st, double now);

void stats_snapshot(stats_t *st, stats_snapshot_t *out);

#define STATS_MERGE_MAX 16 /* snapshots stats_merge takes */

/* A data-parallel engine's snapshot from its replicas' (stats_merge.c): gauges, counters,
 * histograms and expert counts summed; the live choices of all, oldest first, and the newest
 * finished ones; the step rings merged by time, each step's gauges the sum of every replica's
 * latest then. At most STATS_MERGE_MAX parts. */
void stats_merge(stats_snapshot_t *out, stats_snapshot_t *const *parts, int n);

/* Quantile q in [0, 1] of a histogram, interpolated within the bucket (Prometheus'
 * histogram_quantile: the first bucket starts at 0, a quantile in the +Inf bucket is the
 * highest finite bound); NaN when empty or q is outside [0, 1]. Unlike Prometheus, q = 0 gives
 * the lower end of the first non-empty bucket rather than NaN when the first bucket is empty. */
double stats_hist_quantile(const stats_hist_t *h, double q);

/* Rates over the steps of the ring with t in (last.t - window_s, last.t], the last step being
 * the newest recorded (not "now": an idle engine keeps its last rates; compare the newest t with
 * the clock to tell). prompt = sum(prefill_tokens) / window, generation = sum(decode_tokens) /
 * window, so generation leaves out each request's first token (sampled at the end of its
 * prefill); the generation_tokens counter includes it. Accepted speculative drafts count as
 * generated tokens (rejected ones do not). When the ring no longer reaches back a
 * whole window, the rates are over the span it does hold. Both 0 with no steps. */
void stats_rates(const stats_snapshot_t *s, double window_s, double *prompt_tps, double *gen_tps);

#endif
