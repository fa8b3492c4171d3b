/*
 * spec: speculative decoding in the engine step (spec.h): --speculative-config, the n-gram
 * drafter, and the draft / plan / verify passes around the scheduler and the sampler.
 */
#include "spec.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_int.h"
#include "grow.h"
#include "json.h"
#include "spec_mtp.h"

// ---------------------------------------------------------------------------------------------
// --speculative-config

/* An integer member in [lo, hi], or -1 with a message. */
static int config_int(const cJSON *item, int lo, int hi, int *out, err_t *err) {
    if (!cJSON_IsNumber(item) || item->valuedouble != (double)(int)item->valuedouble ||
        item->valuedouble < lo || item->valuedouble > hi)
        return err_set(err, "\"%s\" must be an integer in [%d, %d]", item->string, lo, hi);
    *out = (int)item->valuedouble;
    return 0;
}

int spec_parse_config(const char *json, struct flag_values *v, err_t *err) {
    cJSON *root = json_parse(json, strlen(json), err);
    if (!root) return -1;
    int rc = -1, k = -1, nmax = -1, nmin = -1, off_at = 0;
    spec_method_t method = SPEC_NONE;
    if (!cJSON_IsObject(root)) {
        err_set(err, "must be a JSON object, such as "
                     "{\"method\":\"ngram\",\"num_speculative_tokens\":3}");
        goto out;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        const char *key = item->string;
        if (strcmp(key, "method") == 0) {
            if (!cJSON_IsString(item)) {
                err_set(err, "\"method\" must be a string");
                goto out;
            }
            /* vLLM's names: "mtp", and the model-specific ones it still takes */
            const char *m = item->valuestring;
            if (strcmp(m, "ngram") == 0) {
                method = SPEC_NGRAM;
            } else if (strcmp(m, "mtp") == 0 || strcmp(m, "qwen3_next_mtp") == 0 ||
                       strcmp(m, "qwen3_5_mtp") == 0) {
                method = SPEC_MTP;
            } else {
                err_set(err,
                        "method \"%.60s\" is not supported (supported: \"ngram\", \"mtp\" "
                        "(also as \"qwen3_next_mtp\", \"qwen3_5_mtp\"))",
                        m);
                goto out;
            }
        } else if (strcmp(key, "num_speculative_tokens") == 0) {
            if (config_int(item, 1, SPEC_MAX_TOKENS, &k, err) < 0) goto out;
        } else if (strcmp(key, "prompt_lookup_max") == 0) {
            if (config_int(item, 1, SPEC_MAX_NGRAM, &nmax, err) < 0) goto out;
        } else if (strcmp(key, "prompt_lookup_min") == 0) {
            if (config_int(item, 1, SPEC_MAX_NGRAM, &nmin, err) < 0) goto out;
        } else if (strcmp(key, "disable_by_batch_size") == 0) {
            if (config_int(item, 0, 65536, &off_at, err) < 0) goto out;
        } else {
            err_set(err,
                    "unknown key \"%.60s\" (known: method, num_speculative_tokens, "
                    "prompt_lookup_max, prompt_lookup_min, disable_by_batch_size)",
                    key);
            goto out;
        }
    }
    if (method == SPEC_NONE) {
        err_set(err, "\"method\" is missing (supported: \"ngram\", \"mtp\")");
        goto out;
    }
    if (method == SPEC_MTP && (nmax >= 0 || nmin >= 0)) {
        err_set(err, "prompt_lookup_max and prompt_lookup_min apply to method \"ngram\" only");
        goto out;
    }
    if (k < 0) {
        err_set(err, "\"num_speculative_tokens\" is missing");
        goto out;
    }
    if (nmax < 0 && nmin < 0) nmax = nmin = 5;
    if (nmax < 0) nmax = nmin;
    if (nmin < 0) nmin = nmax;
    if (nmin > nmax) {
        err_set(err, "prompt_lookup_min (%d) is more than prompt_lookup_max (%d)", nmin, nmax);
        goto out;
    }
    v->speculative_method = method;
    v->num_speculative_tokens = k;
    v->prompt_lookup_max = nmax;
    v->prompt_lookup_min = nmin;
    v->speculative_disable_by_batch_size = off_at;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Drafters

int spec_ngram_propose(const int32_t *t, int n, int nmin, int nmax, int k, int32_t *out) {
    if (k <= 0 || nmin < 1 || n < 2) return 0;
    if (nmax > n - 1) nmax = n - 1;
    if (nmin > nmax) return 0;
    /* One pass from the most recent position back: each earlier place of the last token is a
     * candidate end; the longest match (at most nmax) wins, the most recent on a tie, which is
     * "for g from nmax down, the most recent occurrence of the last g tokens". */
    int32_t last = t[n - 1];
    int best = 0, best_end = -1;
    for (int e = n - 2; e >= nmin - 1 && best < nmax; e--) {
        if (t[e] != last) continue;
        int len = 1, cap = e + 1 < nmax ? e + 1 : nmax;
        while (len < cap && t[e - len] == t[n - 1 - len])
            len++;
        if (len > best) {
            best = len;
            best_end = e;
        }
    }
    if (best < nmin) return 0;
    /* what followed, up to the end; then as if the drafts were context too (a loop of period
     * n - from goes on: "a b a b" drafts "a b a" for k = 3, not "a") */
    int from = best_end + 1, period = n - from;
    for (int j = 0; j < k; j++)
        out[j] = j < period ? t[from + j] : out[j - period];
    return k;
}

static int ngram_propose(const flag_values_t *f, const int32_t *tokens, int n, int k,
                         int32_t *out) {
    int nmin =
        f->prompt_lookup_min < f->prompt_lookup_max ? f->prompt_lookup_min : f->prompt_lookup_max;
    return spec_ngram_propose(tokens, n, nmin, f->prompt_lookup_max, k, out);
}

static const spec_drafter_t NGRAM = {.name = "ngram", .propose = ngram_propose};

const spec_drafter_t *spec_drafter(spec_method_t m) {
    return m == SPEC_NGRAM ? &NGRAM : NULL;
}

// ---------------------------------------------------------------------------------------------
// The step

struct spec {
    eng_choice_t **drafted; /* [cap] the choices given drafts this step */
    int n_drafted, cap;
    bool *emit; /* [cap_emit] */
    int cap_emit;
    /* spec_verify's: each planned sequence's positions whose hidden state is the model's (its
     * computed ones, up to the last accepted draft), when valid_set; else out->n_new */
    int *valid, cap_valid;
    bool valid_set;
    mtp_pass_t mtp; /* spec_mtp's batches (spec_mtp.c) */
};

spec_t *spec_create(void) {
    return calloc(1, sizeof(spec_t));
}

void spec_destroy(spec_t *sp) {
    if (!sp) return;
    free(sp->drafted);
    free(sp->emit);
    free(sp->valid);
    mtp_pass_free(&sp->mtp);
    free(sp);
}

/* Takes n of q's drafts (the last ones) back out of its tokens. */
static void trim(eng_choice_t *q, int n) {
    q->b.s.n_tokens -= n;
    q->b.n_draft -= n;
}

static void free_snap(core_t *e, eng_choice_t *q) {
    if (q->spec_snap >= 0) kv_state_free(e->kv, q->spec_snap);
    q->spec_snap = -1;
}

int spec_room(const core_t *e, const eng_choice_t *q, int k) {
    const sched_seq_t *s = &q->b.s;
    int room = k, n_out = s->n_tokens - s->n_prompt;
    if (q->req->max_tokens - n_out - 1 < room) room = q->req->max_tokens - n_out - 1;
    if (e->mml - 1 - s->n_tokens < room) room = e->mml - 1 - s->n_tokens;
    return room > 0 ? room : 0;
}

void spec_draft(core_t *e) {
    spec_t *sp = e->spec;
    sp->n_drafted = 0;
    sp->valid_set = false;
    e->batch.n_drafts = 0;
    spec_method_t method = (spec_method_t)e->f.speculative_method;
    const spec_drafter_t *d = spec_drafter(method); /* NULL for mtp: the head drafted already */
    int k = e->f.num_speculative_tokens;
    if ((!d && method != SPEC_MTP) || k <= 0) return;
    int n, bs = kv_block_size(e->kv), off_at = e->f.speculative_disable_by_batch_size;
    sched_seq_t *const *run = sched_running(e->sched, &n);
    /* vLLM's disable_by_batch_size: at high concurrency a step is compute-bound and drafts cost
     * more than they save (the seeds' MTP runs) */
    if (off_at > 0 && sched_num_running(e->sched) >= off_at) return;
    /* Blocks drafts may take: what is free beyond one for each running sequence (the most its
     * own next token needs), so that drafts do not preempt anything; and tokens: the step's
     * budget beyond what the running sequences need without drafts, so that every sequence that
     * would run without drafts still runs (the scheduler plans them in admission order, and the
     * first ones' drafts must not use up the budget of the last ones). */
    int spare = kv_available(e->kv) - n, budget = e->f.max_num_batched_tokens;
    for (int i = 0; i < n; i++)
        if (run[i]) budget -= run[i]->n_tokens - run[i]->n_computed;
    for (int i = 0; i < n && budget > 0; i++) {
        sched_seq_t *s = run[i];
        if (!s) continue;
        eng_choice_t *q = choice_of(s);
        /* decoding (one token to compute: a rolled-back verify leaves more, which this step
         * computes without drafts, so that its state moves on; drafts on top of them, rejected
         * again, would roll them back again, and a run of rejections would recompute an ever
         * longer tail every step), and no scripted reply replaces what is sampled */
        if (q->finished || q->req->scripted || s->n_computed < s->n_prompt ||
            s->n_tokens <= s->n_prompt || s->n_tokens - s->n_computed > 1)
            continue;
        int room = spec_room(e, q, k);
        int held = (s->n_blocks + (spare > 0 ? spare : 0)) * bs - s->n_tokens;
        if (held < room) room = held;
        if (budget < room) room = budget;
        if (room <= 0 || sched_seq_reserve(s, s->n_tokens + room) < 0 ||
            GROW(sp->drafted, sp->cap, sp->n_drafted + 1) < 0)
            continue;
        int got = d ? d->propose(&e->f, s->tokens, s->n_tokens, room, s->tokens + s->n_tokens)
                    : mtp_take(q, room, s->tokens + s->n_tokens);
        if (got <= 0) continue;
        int beyond = s->n_tokens + got - s->n_blocks * bs; /* tokens past its blocks */
        if (beyond > 0) spare -= (beyond + bs - 1) / bs;
        budget -= got;
        s->n_tokens += got;
        q->b.n_draft = got;
        q->spec_planned = false;
        q->spec_snap = -1;
        sp->drafted[sp->n_drafted++] = q;
    }
}

void spec_plan(core_t *e, sched_out_t *out) {
    spec_t *sp = e->spec;
    if (sp->n_drafted == 0) return;
    int total = 0, most = out->n;
    for (int j = 0; j < sp->n_drafted; j++)
        most += sp->drafted[j]->b.n_draft;
    bool room = GROW(sp->emit, sp->cap_emit, most) == 0; /* else no drafts this step */
    /* logit rows: one per sequence, and the drafts' as far as the backend takes them */
    int rows_left = INT_MAX;
    if (e->be->ops->max_logit_rows) rows_left = e->be->ops->max_logit_rows(e->be) - out->n;
    for (int i = 0; i < out->n; i++) {
        eng_choice_t *q = choice_of(out->seqs[i]);
        int d = q->b.n_draft;
        if (d == 0) continue;
        q->spec_planned = true;
        sched_seq_t *s = &q->b.s;
        int real = s->n_tokens - d - s->n_computed; /* sampled tokens still to compute */
        int keep = room ? out->n_new[i] - real : 0;
        if (keep < 0) keep = 0;
        if (keep > d) keep = d;
        if (keep > rows_left) keep = rows_left > 0 ? rows_left : 0;
        if (keep > 0 && e->has_state) {
            /* the state before the verify, to put back if a draft is rejected */
            err_t err;
            int32_t slot = kv_state_alloc(e->kv);
            if (slot >= 0 && e->be->ops->state_copy(e->be, s->state_slot, slot, &err) < 0) {
                fprintf(stderr, "tachyon: engine: speculative state copy: %s\n", err.msg);
                kv_state_free(e->kv, slot);
                slot = -1;
            }
            if (slot < 0) keep = 0;
            q->spec_snap = slot;
        }
        trim(q, d - keep);
        if (out->n_new[i] > real + keep) {
            out->n_tokens -= out->n_new[i] - (real + keep);
            out->n_new[i] = real + keep;
        }
        total += keep;
        rows_left -= keep;
    }
    for (int j = 0; j < sp->n_drafted; j++) {
        eng_choice_t *q = sp->drafted[j];
        if (!q->spec_planned) trim(q, q->b.n_draft); /* not planned, or preempted */
    }
    e->batch.n_drafts = total;
}

const bool *spec_verify(core_t *e, sched_out_t *out, const be_batch_t *b) {
    spec_t *sp = e->spec;
    if (sp->n_drafted == 0) return NULL; /* spec_plan made room for every row in emit */
    uint64_t per_pos[SPEC_MAX_TOKENS] = {0}, drafts = 0, drafted = 0, accepted = 0;
    int k_max = 0;
    sp->valid_set = GROW(sp->valid, sp->cap_valid, out->n) == 0;
    for (int i = 0; sp->valid_set && i < out->n; i++)
        sp->valid[i] = out->n_new[i];
    const sampler_result_t *res = e->batch.results;
    for (int l = 0; l < b->n_logits;) {
        int i = e->batch.logit_seq[l];
        eng_choice_t *q = choice_of(out->seqs[i]);
        int d = q->b.n_draft;
        sp->emit[l] = true;
        if (d == 0) {
            l++;
            continue;
        }
        sched_seq_t *s = &q->b.s;
        const int32_t *draft = s->tokens + s->n_tokens - d;
        int a = 0;
        while (a < d && res[l + a].token == draft[a])
            a++;
        for (int j = 1; j <= d; j++)
            sp->emit[l + j] = j <= a;
        for (int j = 0; j < a; j++)
            per_pos[j]++;
        if (sp->valid_set) sp->valid[i] = out->n_new[i] - (d - a);
        drafts++;
        drafted += (uint64_t)d;
        accepted += (uint64_t)a;
        if (d > k_max) k_max = d;
        trim(q, d);
        if (a < d && q->spec_snap >= 0) {
            /* the state went past the rejected drafts: back to where the step began, and the
             * step's tokens count as not computed */
            err_t err;
            if (e->be->ops->state_copy(e->be, q->spec_snap, s->state_slot, &err) < 0)
                fprintf(stderr, "tachyon: engine: speculative state restore: %s\n", err.msg);
            out->n_tokens -= out->n_new[i];
            out->n_new[i] = 0;
        } else {
            out->n_tokens -= d - a;
            out->n_new[i] -= d - a;
        }
        free_snap(e, q);
        l += d + 1;
    }
    sp->n_drafted = 0;
    e->batch.n_drafts = 0;
    if (drafts > 0) stats_add_spec(e->stats, drafts, drafted, accepted, per_pos, k_max);
    e->spec_step_accepted = (int)accepted;
    return sp->emit;
}

void spec_mtp(core_t *e, const sched_out_t *out, const be_batch_t *b) {
    spec_t *sp = e->spec;
    int off_at = e->f.speculative_disable_by_batch_size;
    if (e->f.speculative_method != SPEC_MTP || e->f.num_speculative_tokens <= 0 ||
        (off_at > 0 && sched_num_running(e->sched) >= off_at))
        return;
    /* with recurrent state a draft needs a spare state slot for its snapshot (spec_plan): with
     * none free (max-num-seqs sequences running) the next step drafts nothing, so the head's
     * passes would be spent for no draft */
    if (e->has_state && kv_state_available(e->kv) == 0) return;
    err_t err;
    if (mtp_run(e, &sp->mtp, out, b, sp->valid_set ? sp->valid : NULL, &err) < 0)
        fprintf(stderr, "tachyon: engine: the MTP head: %s (no drafts this step)\n", err.msg);
}

void spec_drop(core_t *e) {
    spec_t *sp = e->spec;
    for (int j = 0; j < sp->n_drafted; j++) {
        eng_choice_t *q = sp->drafted[j];
        trim(q, q->b.n_draft);
        free_snap(e, q);
    }
    sp->n_drafted = 0;
    e->batch.n_drafts = 0;
}
