/*
 * The cuda backend's steps: a batch checked, cut into pieces that fit the workspace, each
 * piece's metadata staged and copied to the device, then run by the layer stack (cb_layers.cu)
 * kernel by kernel or, for uniform batches with graphs on, replayed from a CUDA graph.
 *
 * Every step's metadata goes through pinned staging with one asynchronous copy into fixed device
 * buffers, so captured CUDA graphs replay against the same addresses. A batch runs from a graph
 * when every sequence has the same number q of new tokens and every token a logit row: pure
 * decode steps (q = 1) and speculative verify steps at a fixed number of drafts (q = k + 1), as
 * vLLM's uniform-decode graphs; padded to vLLM's capture sizes in sequences. Batches larger than
 * the workspace run as consecutive pieces of whole or split sequences: a sequence cut between
 * pieces sees its earlier tokens through the KV cache, as chunked prefill.
 */
#include "cb_backend.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "cuda_check.h"

/* One piece of a step: tokens [t0, t1) of the batch, the sequences overlapping them, their logit
 * rows (global indices [l0, l1)). */
typedef struct piece {
    int t0, t1, s0, s1, l0, l1;
    int max_q, max_ctx;
    int n_dec, dec_max_ctx; /* sequences with exactly one new token, their largest context */
    bool decode;            /* every sequence has exactly one new token */
    int uniform_q;          /* every sequence has exactly this many new tokens; 0: they differ */
} piece_t;

// ---------------------------------------------------------------------------------------------
// Graphs and buffers

static const int32_t *seq_row(const be_batch_t *b, int s) {
    return b->block_tables + (int64_t)s * b->block_table_stride;
}

/* vLLM's capture sizes: 1, 2, 4, 8..248 step 8, 256..512 step 16. */
static int capture_sizes(int max_size, int *out, int cap) {
    int n = 0;
    for (int s = 1; n < cap; s = s < 4 ? s * 2 : s < 256 ? s + 8 : s + 16) {
        if (s > MAX_GRAPH_SIZE) break;
        out[n++] = s;
        if (s >= max_size) break;
    }
    return n;
}

static void drop_set(cb_graph_t *set, int n) {
    for (int i = 0; i < n; i++)
        if (set[i].stride) {
            cudaGraphExecDestroy(set[i].exec);
            set[i].stride = 0;
        }
}

void cb_drop_graphs(cuda_backend_t *be) {
    for (int q = 0; q < MAX_GRAPH_Q; q++) {
        drop_set(be->graph[q], be->n_graphs);
        drop_set(be->chain_graph[q], be->n_graphs);
    }
    for (int m = 0; m < 2; m++)
        drop_set(be->mtp_graph[m], be->n_graphs);
}

bool cb_graphs_possible(const cuda_backend_t *be) {
    return be->shard.tp == 1 || (be->shard.comm && be->shard.comm->ops->graph_safe);
}

void cb_plan_graphs(cuda_backend_t *be) {
    cb_drop_graphs(be);
    int max_size = be->max_seqs_live;
    if (max_size > be->cap_s) max_size = be->cap_s;
    if (max_size > be->cap_l) max_size = be->cap_l;
    if (max_size > be->cap_t) max_size = be->cap_t;
    int sizes[MAX_GRAPHS];
    be->n_graphs = capture_sizes(max_size, sizes, MAX_GRAPHS);
    /* the largest size may exceed a capacity: keep only sizes that fit (at q = 1; a larger q
     * uses the sizes whose tokens fit too: graph_size) */
    while (be->n_graphs > 0 &&
           (sizes[be->n_graphs - 1] > be->cap_s || sizes[be->n_graphs - 1] > be->cap_l ||
            sizes[be->n_graphs - 1] > be->cap_t))
        be->n_graphs--;
    for (int i = 0; i < be->n_graphs; i++) {
        for (int q = 0; q < MAX_GRAPH_Q; q++) {
            be->graph[q][i] = cb_graph_t{sizes[i], 0, NULL};
            be->chain_graph[q][i] = cb_graph_t{sizes[i], 0, NULL};
        }
        for (int m = 0; m < 2; m++)
            be->mtp_graph[m][i] = cb_graph_t{sizes[i], 0, NULL};
    }
}

/* The graph slot for n sequences of q tokens each (mtp: an MTP pass of the kind, one token a
 * sequence, else -1): the smallest size >= n whose tokens and logit rows fit the buffers; NULL
 * when none does (the step runs eagerly). */
static cb_graph_t *graph_slot(cuda_backend_t *be, int n, int q, int mtp) {
    if (q < 1 || q > MAX_GRAPH_Q || (mtp >= 0 && q != 1)) return NULL;
    for (int i = 0; i < be->n_graphs; i++) {
        cb_graph_t *g = mtp >= 0 ? &be->mtp_graph[mtp][i] : &be->graph[q - 1][i];
        if (g->size < n) continue;
        if ((int64_t)g->size * q > be->cap_t || (int64_t)g->size * q > be->cap_l) return NULL;
        return g;
    }
    return NULL;
}

size_t cb_layout_meta(cuda_backend_t *be, char *base, bool host) {
    wlayout_t a = {base, 0};
    size_t T = (size_t)be->cap_t, S = (size_t)be->cap_s, Lr = (size_t)be->cap_l;
    int32_t *ids = (int32_t *)take(&a, T * 4), *pos = (int32_t *)take(&a, T * 4);
    int64_t *slots = (int64_t *)take(&a, T * 8);
    int32_t *qs = (int32_t *)take(&a, (S + 1) * 4), *ctx = (int32_t *)take(&a, S * 4);
    int32_t *lrows = (int32_t *)take(&a, Lr * 4), *sslots = (int32_t *)take(&a, S * 4);
    int32_t *mrows = (int32_t *)take(&a, T * 4), *last = (int32_t *)take(&a, S * 4);
    int32_t *chain = (int32_t *)take(&a, MAX_CHAIN_STEPS * S * 4);
    if (host) {
        be->ids_h = ids, be->pos_h = pos, be->slots_h = slots, be->qs_h = qs, be->ctx_h = ctx;
        be->lrows_h = lrows, be->sslots_h = sslots, be->mrows_h = mrows;
        be->last_h = last, be->chain_h = chain;
    } else {
        be->ids_d = ids, be->pos_d = pos, be->slots_d = slots, be->qs_d = qs, be->ctx_d = ctx;
        be->lrows_d = lrows, be->sslots_d = sslots, be->mrows_d = mrows;
        be->last_d = last, be->chain_d = chain;
    }
    return a.off;
}

/* Grows a device buffer and its pinned host staging copy (int32 elements, contents dropped) to at
 * least need, doubling; captured graphs are dropped first when they read the old device address. */
static int grow_mirrored(cuda_backend_t *be, int32_t **d, int32_t **h, size_t *cap_io, size_t need,
                         bool in_graphs, const char *what, err_t *err) {
    if (need <= *cap_io) return 0;
    size_t cap = *cap_io ? *cap_io : 1 << 16;
    while (cap < need)
        cap *= 2;
    CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
    if (in_graphs) cb_drop_graphs(be);
    cudaFree(*d);
    cudaFreeHost(*h);
    *d = *h = NULL;
    *cap_io = 0;
    if (cb_alloc_dev(be, (void **)d, cap * 4, what, err) < 0) return -1;
    CUDA_CHECK(cudaMallocHost((void **)h, cap * 4), err);
    *cap_io = cap;
    return 0;
}

int cb_grow_tables(cuda_backend_t *be, size_t need, err_t *err) {
    return grow_mirrored(be, &be->tables_d, &be->tables_h, &be->cap_tables, need, true,
                         "block tables", err);
}

int cb_grow_arena(cuda_backend_t *be, size_t need, err_t *err) {
    return grow_mirrored(be, &be->arena_d, &be->arena_h, &be->cap_arena, need, false,
                         "sampler token lists", err);
}

// ---------------------------------------------------------------------------------------------
// Batches

/* What forward() must hold not to read or write out of bounds: backend_check_bounds, then what
 * pieces and the kernels need besides (positions >= 0, logit rows ascending; a model with state:
 * a state slot per sequence, unless `stateless`: an MTP pass, which reads none). */
static int check_batch(const cuda_backend_t *be, const be_batch_t *b, bool stateless, err_t *err) {
    if (!b) return err_set(err, "cuda backend: NULL batch");
    if (!be->kv_mem) return err_set(err, "cuda backend: forward before kv_reserve");
    if (backend_check_bounds(b, be->num_blocks, be->block_size, be->V, err) < 0)
        return err_prefix(err, "cuda backend");
    if (b->n_placeholder_rows > be->sample_pending)
        return err_set(err,
                       "cuda backend: placeholders for %d sampled rows, but %d are pending "
                       "(sample_begin)",
                       b->n_placeholder_rows, be->sample_pending);
    for (int t = 0; t < b->n_tokens; t++)
        if (b->positions[t] < 0)
            return err_set(err, "cuda backend: token %d: position %d", t, b->positions[t]);
    for (int i = 1; i < b->n_logits; i++)
        if (b->logit_rows[i] <= b->logit_rows[i - 1])
            return err_set(err, "cuda backend: logit rows must ascend (row %d after %d)",
                           b->logit_rows[i], b->logit_rows[i - 1]);
    if (stateless) return 0;
    if (be->n_linear && b->n_seqs > 0 && !b->state_slots)
        return err_set(err, "cuda backend: a model with recurrent state needs state_slots");
    for (int s = 0; be->n_linear && s < b->n_seqs; s++)
        if (b->state_slots[s] < 0 || b->state_slots[s] >= be->n_slots)
            return err_set(err, "cuda backend: sequence %d has state slot %d (%d slots)", s,
                           b->state_slots[s], be->n_slots);
    return 0;
}

/* Tensor parallel: the ranks agree on their outcome so far once a piece, after its staging and
 * before its first collective (comm_agree), so that no rank waits in a collective for a rank that
 * failed (a grown buffer that did not fit, a copy refused); rc at one rank. The meetings are one a
 * piece, whatever the graphs: a rank whose capture failed re-stages eagerly without meeting again
 * (that re-staging is the one failure not agreed on). */
static int agreed(cuda_backend_t *be, int rc, err_t *err) {
    return be->shard.tp > 1 ? comm_agree(be->shard.comm, rc, err) : rc;
}

/* A rank that fails before a step's first meeting still goes to it (the other ranks meet there,
 * at their first piece's staging), so that they learn of the failure instead of waiting; -1 with
 * this rank's message kept. A batch without tokens has no pieces, so no meeting. */
static int fail_before_staging(cuda_backend_t *be, const be_batch_t *b) {
    if (be->shard.tp > 1 && b && b->n_tokens > 0) {
        err_t ignored;
        comm_agree(be->shard.comm, -1, &ignored);
    }
    return -1;
}

/* The next piece starting at token t0 (sequence *s containing it, logit index l). */
static piece_t next_piece(const cuda_backend_t *be, const be_batch_t *b, int t0, int s, int l) {
    piece_t p = {};
    p.t0 = t0;
    p.s0 = s;
    p.l0 = l;
    int t1 = b->n_tokens - t0 > be->cap_t ? t0 + be->cap_t : b->n_tokens;
    if (b->n_seqs - s > be->cap_s && b->query_start[s + be->cap_s] < t1)
        t1 = b->query_start[s + be->cap_s];
    int l1 = l;
    while (l1 < b->n_logits && b->logit_rows[l1] < t1)
        l1++;
    if (l1 - l > be->cap_l) {
        l1 = l + be->cap_l;
        t1 = b->logit_rows[l1];
    }
    p.t1 = t1;
    p.l1 = l1;
    /* Sequences with no new tokens at a piece boundary are left out: they attend nothing and
     * own no logit row. */
    int s1 = s;
    while (s1 < b->n_seqs && b->query_start[s1] < t1)
        s1++;
    p.s1 = s1;
    p.decode = true;
    p.uniform_q = -1;
    for (int j = p.s0; j < p.s1; j++) {
        int q0 = b->query_start[j] > t0 ? b->query_start[j] : t0;
        int q1 = b->query_start[j + 1] < t1 ? b->query_start[j + 1] : t1;
        int ctx = b->context_len[j] - (b->query_start[j + 1] - q1);
        if (q1 - q0 > p.max_q) p.max_q = q1 - q0;
        p.uniform_q = p.uniform_q < 0 || p.uniform_q == q1 - q0 ? q1 - q0 : 0;
        if (ctx > p.max_ctx) p.max_ctx = ctx;
        if (q1 - q0 != 1) {
            p.decode = false;
        } else {
            p.n_dec++;
            if (ctx > p.dec_max_ctx) p.dec_max_ctx = ctx;
        }
    }
    if (p.uniform_q < 0) p.uniform_q = 0;
    return p;
}

/* Fills the staging with the piece's metadata (padded to `pad_seqs` sequences of the piece's
 * uniform q tokens when larger; an MTP pass's hidden rows when mtp_rows is not NULL, a draft
 * chain's last positions when last_pos is not NULL) and copies it to the device. */
static int stage_piece(cuda_backend_t *be, const be_batch_t *b, const piece_t *p, int pad_seqs,
                       const int32_t *mtp_rows, const int32_t *last_pos, err_t *err) {
    int nt = p->t1 - p->t0, ns = p->s1 - p->s0, nl = p->l1 - p->l0, stride = b->block_table_stride;
    int rows = pad_seqs > ns ? pad_seqs : ns, q = p->uniform_q;
    if (cb_grow_tables(be, (size_t)rows * (size_t)stride, err) < 0) return -1;
    if (be->staging_busy) {
        CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
        be->sampler_busy = false;
    }
    memcpy(be->ids_h, b->token_ids + p->t0, (size_t)nt * 4);
    bool placeholders = false; /* the pending sample_begin's tokens, read on the device */
    for (int i = 0; i < nt && b->n_placeholder_rows > 0 && !placeholders; i++)
        placeholders = be->ids_h[i] < 0;
    memcpy(be->pos_h, b->positions + p->t0, (size_t)nt * 4);
    memcpy(be->slots_h, b->slot_mapping + p->t0, (size_t)nt * 8);
    for (int j = 0; j < ns; j++) {
        int s = p->s0 + j;
        int q0 = b->query_start[s] > p->t0 ? b->query_start[s] : p->t0;
        int q1 = b->query_start[s + 1] < p->t1 ? b->query_start[s + 1] : p->t1;
        be->qs_h[j] = q0 - p->t0;
        be->ctx_h[j] = b->context_len[s] - (b->query_start[s + 1] - q1);
        be->sslots_h[j] = b->state_slots ? b->state_slots[s] : -1;
    }
    be->qs_h[ns] = nt;
    if (mtp_rows) memcpy(be->mrows_h, mtp_rows + p->t0, (size_t)nt * 4);
    if (last_pos) /* padding: at position 0 for good */
        for (int j = 0; j < rows; j++)
            be->last_h[j] = j < ns ? last_pos[p->s0 + j] : 0;
    memcpy(be->tables_h, seq_row(b, p->s0), (size_t)ns * (size_t)stride * 4);
    for (int i = 0; i < nl; i++)
        be->lrows_h[i] = b->logit_rows[p->l0 + i] - p->t0;
    /* graph padding (a uniform piece: nt = ns q, every token a logit row): q tokens each at
     * positions 0..q-1, never written, reading block 0's first slots */
    for (int j = ns; j < rows; j++) {
        for (int i = 0; i < q; i++) {
            be->ids_h[j * q + i] = 0;
            be->pos_h[j * q + i] = i;
            be->slots_h[j * q + i] = -1;
            be->lrows_h[j * q + i] = j * q + i;
        }
        be->qs_h[j + 1] = (j + 1) * q;
        be->ctx_h[j] = q;
        be->sslots_h[j] = -1; /* no state: the Gated DeltaNet writes zeros */
        memset(be->tables_h + (size_t)j * stride, 0, (size_t)stride * 4);
        if (mtp_rows) /* an MTP pass's padding reads hidden row 0 */
            for (int i = 0; i < q; i++)
                be->mrows_h[j * q + i] = 0;
    }
    CUDA_CHECK(
        cudaMemcpyAsync(be->meta_d, be->meta_h, be->meta_bytes, cudaMemcpyHostToDevice, be->stream),
        err);
    CUDA_CHECK(cudaMemcpyAsync(be->tables_d, be->tables_h, (size_t)rows * (size_t)stride * 4,
                               cudaMemcpyHostToDevice, be->stream),
               err);
    be->staging_busy = true;
    if (placeholders && ops_resolve_placeholders(be->ids_d, nt, be->sres_d, be->stream, err) < 0)
        return -1;
    return 0;
}

/* Captures body() (the stream's work for one batch shape) into g, replacing what g held; false
 * with the message in err when capture or instantiation fails. */
template <typename Body>
static bool capture_into(cuda_backend_t *be, cb_graph_t *g, int stride, Body body, err_t *err) {
    if (g->stride) {
        cudaGraphExecDestroy(g->exec);
        g->stride = 0;
    }
    cudaGraph_t graph;
    cudaError_t e = cudaStreamBeginCapture(be->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        err_set(err, "%s:%d: cudaStreamBeginCapture: %s", __FILE__, __LINE__,
                cudaGetErrorString(e));
        return false;
    }
    int rc = body();
    e = cudaStreamEndCapture(be->stream, &graph);
    if (rc < 0 || e != cudaSuccess) {
        if (rc == 0)
            err_set(err, "%s:%d: cudaStreamEndCapture: %s", __FILE__, __LINE__,
                    cudaGetErrorString(e));
        if (e == cudaSuccess) cudaGraphDestroy(graph);
        cudaGetLastError();
        return false;
    }
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        err_set(err, "%s:%d: cudaGraphInstantiate (batch of %d sequences): %s", __FILE__, __LINE__,
                g->size, cudaGetErrorString(e));
        return false;
    }
    g->stride = stride;
    be->captured++;
    return true;
}

/* A capture problem must not fail a step: the message is printed, graphs go off for good and the
 * step runs eagerly. */
static void graphs_off(cuda_backend_t *be, err_t *err) {
    fprintf(stderr, "tachyon: cuda: CUDA graph capture failed (%s); graphs off\n", err->msg);
    be->graphs = false;
    err->msg[0] = 0;
}

/* The run of S sequences of q tokens each, every token a logit row in order (what a graph runs). */
static run_args_t uniform_run(const cuda_backend_t *be, int S, int q, int stride) {
    run_args_t r = {};
    r.T = S * q;
    r.n_seqs = S;
    r.n_logits = S * q;
    r.max_q = q;
    r.decode = q == 1;
    r.n_dec = q == 1 ? S : 0;
    r.splits = q == 1 && S <= SPLIT_MAX_SEQS
                   ? ops_attention_decode_splits(S, be->nKV, be->cfg->max_position_embeddings,
                                                 be->num_sms, MAX_SPLITS)
                   : 1;
    r.rows = NULL;
    r.logits = be->logits;
    r.stride = stride;
    return r;
}

/* Whether slot g holds a graph for block-table stride `stride`, capturing body() into it when it
 * does not; a failed capture turns graphs off (graphs_off) and the caller runs eagerly. */
template <typename Body>
static bool ready_graph(cuda_backend_t *be, cb_graph_t *g, int stride, Body body, err_t *err) {
    if (g->stride == stride) return true;
    bool ok = capture_into(be, g, stride, body, err);
    /* tensor parallel: the ranks capture together (one step plan) and use their graphs together
     * or not at all (NCCL: whether a collective is graph-captured must be the same on every
     * rank), so a capture that failed on one rank turns graphs off on all */
    if (be->shard.tp > 1 && comm_agree(be->shard.comm, ok ? 0 : -1, err) < 0 && ok) {
        err_prefix(err, "another rank's");
        ok = false;
    }
    if (ok) return true;
    graphs_off(be, err);
    return false;
}

static int forward_piece(cuda_backend_t *be, const be_batch_t *b, const piece_t *p, float *host,
                         bool resident, err_t *err) {
    int ns = p->s1 - p->s0, nl = p->l1 - p->l0, q = p->uniform_q;
    float *dst = be->logits + (resident ? (size_t)p->l0 * (size_t)be->V : 0);
    /* the whole batch, every sequence q tokens, every token a logit row in order */
    bool whole_uniform = q > 0 && nl == ns * q && p->t1 - p->t0 == ns * q && p->l0 == 0 &&
                         p->t0 == 0 && p->t1 == b->n_tokens;
    for (int i = 0; whole_uniform && i < nl; i++)
        if (b->logit_rows[i] != i) whole_uniform = false;
    bool staged = false;                                 /* and agreed on */
    if (be->graphs && whole_uniform && !be->moe.trace) { /* a traced step runs eagerly */
        cb_graph_t *g = graph_slot(be, ns, q, -1);
        if (g) {
            staged = true;
            if (agreed(be, stage_piece(be, b, p, g->size, NULL, NULL, err), err) < 0) return -1;
            const run_args_t r = uniform_run(be, g->size, q, b->block_table_stride);
            if (ready_graph(
                    be, g, b->block_table_stride, [&]() { return cb_run_stack(be, &r, err); },
                    err)) {
                CUDA_CHECK(cudaGraphLaunch(g->exec, be->stream), err);
                be->replays++;
                be->verify_replays += q > 1;
                goto logits;
            }
        }
    }
    {
        int rc = stage_piece(be, b, p, 0, NULL, NULL, err);
        if ((staged ? rc : agreed(be, rc, err)) < 0) return -1;
        run_args_t r = {};
        r.T = p->t1 - p->t0;
        r.n_seqs = ns;
        r.n_logits = nl;
        r.max_q = p->max_q;
        r.max_ctx = p->max_ctx;
        r.decode = p->decode;
        r.n_dec = p->n_dec;
        /* the decode rows' splits (a mixed piece's decodes run in one split-KV launch; its
         * workspace is indexed by the piece's sequences, decodes or not) */
        r.splits = p->n_dec > 0 && ns <= SPLIT_MAX_SEQS
                       ? ops_attention_decode_splits(p->n_dec, be->nKV, p->dec_max_ctx, be->num_sms,
                                                     MAX_SPLITS)
                       : 1;
        r.rows = be->lrows_d;
        r.logits = dst;
        r.stride = b->block_table_stride;
        if (cb_run_stack(be, &r, err) < 0) return -1;
    }
logits:
    if (host && nl > 0)
        CUDA_CHECK(cudaMemcpyAsync(host + (size_t)p->l0 * (size_t)be->V, dst,
                                   (size_t)nl * (size_t)be->V * 4, cudaMemcpyDeviceToHost,
                                   be->stream),
                   err);
    return 0;
}

int cb_forward(backend_t *base, const be_batch_t *b, float *logits, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    be->logits_rows = -1;
    be->hid_rows = 0;
    if (check_batch(be, b, false, err) < 0) return fail_before_staging(be, b);
    if (b->n_tokens == 0) return 0;
    cudaError_t e = cudaSetDevice(be->device);
    if (e != cudaSuccess) {
        err_set(err, "cuda backend: cudaSetDevice(%d): %s", be->device, cudaGetErrorString(e));
        return fail_before_staging(be, b);
    }
    bool resident = b->n_logits <= be->cap_l;
    if (!logits && !resident) {
        err_set(err,
                "cuda backend: %d logit rows in one step; device sampling takes at most %d "
                "(max-num-seqs)",
                b->n_logits, be->cap_l);
        return fail_before_staging(be, b);
    }
    int t0 = 0, s = 0, l = 0, pieces = 0;
    while (t0 < b->n_tokens) {
        pieces++;
        while (b->query_start[s + 1] <= t0)
            s++;
        piece_t p = next_piece(be, b, t0, s, l);
        /* tensor parallel: rank 0 alone holds the whole vocabulary's logits (cb_tp.cu) */
        float *host = be->shard.rank == 0 ? logits : NULL;
        if (forward_piece(be, b, &p, host, resident, err) < 0) {
            cudaStreamSynchronize(be->stream);
            be->staging_busy = false;
            return -1;
        }
        t0 = p.t1;
        l = p.l1;
    }
    if (logits || !be->base.ops->sample) {
        CUDA_CHECK(cudaStreamSynchronize(be->stream), err);
        be->staging_busy = false;
    }
    be->logits_rows = resident ? b->n_logits : -1;
    /* the MTP head reads the final-norm rows of a batch that ran whole (a later piece's rows
     * overwrite an earlier one's) */
    be->hid_rows = be->mtp && pieces == 1 ? b->n_tokens : 0;
    return 0;
}

/* A batch of one token a sequence, each its logit row in order (an MTP draft pass). */
static bool one_token_each(const be_batch_t *b, const piece_t *p) {
    if (p->uniform_q != 1 || b->n_logits != b->n_tokens) return false;
    for (int i = 0; i < b->n_logits; i++)
        if (b->logit_rows[i] != i) return false;
    return true;
}

/* What an MTP pass of a checked batch b needs besides (one piece, an output, hidden rows the
 * last forward or MTP step left), and the device set. */
static int mtp_pass_check(cuda_backend_t *be, const be_batch_t *b, const int32_t *hidden_rows,
                          int step, const float *logits, const int32_t *argmax, err_t *err) {
    if (b->n_tokens > be->cap_t || b->n_seqs > be->cap_s || b->n_logits > be->cap_l)
        return err_set(err,
                       "cuda backend: an MTP pass of %d tokens, %d sequences, %d logit rows is "
                       "more than one piece (%d, %d, %d)",
                       b->n_tokens, b->n_seqs, b->n_logits, be->cap_t, be->cap_s, be->cap_l);
    if (b->n_logits > 0 && !logits && !argmax)
        return err_set(err, "cuda backend: mtp_forward: neither logits nor drafts asked for");
    int src_rows = step == 0 ? be->hid_rows : be->hid_mtp_rows;
    for (int t = 0; t < b->n_tokens; t++)
        if (hidden_rows[t] < 0 || hidden_rows[t] >= src_rows)
            return err_set(
                err, "cuda backend: mtp_forward: hidden row %d of token %d (the %s has %d)",
                hidden_rows[t], t, step == 0 ? "last forward" : "last MTP step", src_rows);
    CUDA_CHECK(cudaSetDevice(be->device), err);
    return 0;
}

int cb_mtp_forward(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int step,
                   float *logits, int32_t *argmax, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (be->n_mtp == 0)
        return err_set(err, "cuda backend: no MTP head here (none in the model, or an MoE MTP "
                            "layer)");
    if (!b) return 0; /* the probe: the head runs here */
    if (!be->mtp)
        return err_set(err, "cuda backend: mtp_forward on a KV pool reserved without the MTP "
                            "layers (backend_options_t.mtp)");
    if (step < 0 || !hidden_rows) return err_set(err, "cuda backend: mtp_forward step %d", step);
    if (check_batch(be, b, true, err) < 0) return fail_before_staging(be, b);
    if (b->n_tokens == 0) return 0;
    if (mtp_pass_check(be, b, hidden_rows, step, logits, argmax, err) < 0)
        return fail_before_staging(be, b);
    be->logits_rows = -1; /* the device logits become the head's */
    piece_t p = next_piece(be, b, 0, 0, 0);
    /* a pass of one token a sequence, each its logit row (the drafts after step 0, and step 0
     * when each sequence accepted nothing): from a graph when graphs are on */
    const bool uniform = be->graphs && be->n_mtp == 1 && !be->moe.trace && one_token_each(b, &p);
    cb_graph_t *g = uniform ? graph_slot(be, b->n_seqs, 1, step > 0) : NULL;
    int rc = agreed(be, stage_piece(be, b, &p, g ? g->size : 0, hidden_rows, NULL, err), err);
    if (rc == 0 && g) {
        const run_args_t gr = uniform_run(be, g->size, 1, b->block_table_stride);
        const uint16_t *src = step == 0 ? be->hid : be->hid_mtp;
        if (!ready_graph(
                be, g, b->block_table_stride, [&]() { return cb_run_mtp(be, &gr, step, src, err); },
                err))
            g = NULL;
    }
    if (rc == 0 && g) {
        rc = cudaGraphLaunch(g->exec, be->stream) == cudaSuccess
                 ? 0
                 : err_set(err, "cuda backend: an MTP graph launch failed");
        be->mtp_replays++;
    }
    run_args_t r = {};
    r.T = b->n_tokens;
    r.n_seqs = b->n_seqs;
    r.n_logits = b->n_logits;
    r.max_q = p.max_q;
    r.max_ctx = p.max_ctx;
    r.decode = p.decode;
    r.n_dec = p.n_dec;
    r.splits =
        p.n_dec > 0 && b->n_seqs <= SPLIT_MAX_SEQS
            ? ops_attention_decode_splits(p.n_dec, be->nKV, p.dec_max_ctx, be->num_sms, MAX_SPLITS)
            : 1;
    r.rows = be->lrows_d;
    r.logits = be->logits;
    r.stride = b->block_table_stride;
    if (rc == 0 && !g) rc = cb_run_mtp(be, &r, step, step == 0 ? be->hid : be->hid_mtp, err);
    if (rc == 0 && logits && b->n_logits > 0 && be->shard.rank == 0) /* rank 0: every logit */
        rc = cudaMemcpyAsync(logits, be->logits, (size_t)b->n_logits * (size_t)be->V * 4,
                             cudaMemcpyDeviceToHost, be->stream) == cudaSuccess
                 ? 0
                 : err_set(err, "cuda backend: copying the MTP logits failed");
    if (rc == 0 && argmax && be->shard.rank == 0) /* the drafts, on the device (it syncs) */
        rc = cb_greedy_ids(be, b->n_logits, argmax, err);
    cudaError_t e = cudaStreamSynchronize(be->stream);
    be->staging_busy = false;
    if (rc < 0) return -1;
    if (e != cudaSuccess)
        return err_set(err, "cuda backend: an MTP pass failed: %s", cudaGetErrorString(e));
    be->hid_mtp_rows = b->n_tokens;
    return 0;
}

int cb_mtp_chain(backend_t *base, const be_batch_t *b, const int32_t *hidden_rows, int first_step,
                 int n_steps, const int32_t *last_pos, int32_t *drafts, err_t *err) {
    cuda_backend_t *be = (cuda_backend_t *)base;
    if (be->n_mtp == 0 || !be->mtp)
        return err_set(err, "cuda backend: mtp_chain without the MTP head's layers in the pool");
    if (first_step < 1 || n_steps < 1 || n_steps > MAX_CHAIN_STEPS || !hidden_rows || !last_pos ||
        !drafts)
        return err_set(err, "cuda backend: mtp_chain of %d passes from step %d (1..%d from 1)",
                       n_steps, first_step, MAX_CHAIN_STEPS);
    if (check_batch(be, b, true, err) < 0) return -1;
    if (b->n_tokens == 0) return 0;
    piece_t p = next_piece(be, b, 0, 0, 0);
    if (b->n_seqs > be->cap_s || b->n_seqs > be->cap_l || p.t1 != b->n_tokens ||
        !one_token_each(b, &p))
        return err_set(err, "cuda backend: mtp_chain takes one token a sequence, each its logit "
                            "row, at most max-num-seqs sequences");
    for (int t = 0; t < b->n_tokens; t++)
        if (hidden_rows[t] < 0 || hidden_rows[t] >= be->hid_mtp_rows)
            return err_set(err,
                           "cuda backend: mtp_chain: hidden row %d of token %d (the last MTP "
                           "step has %d)",
                           hidden_rows[t], t, be->hid_mtp_rows);
    CUDA_CHECK(cudaSetDevice(be->device), err);
    be->logits_rows = -1;
    const int ns = b->n_seqs, stride = b->block_table_stride;
    cb_graph_t *slot = NULL;
    if (be->graphs && be->n_mtp == 1 && !be->moe.trace && n_steps <= MAX_GRAPH_Q)
        for (int i = 0; i < be->n_graphs && !slot; i++)
            if (be->chain_graph[n_steps - 1][i].size >= ns &&
                be->chain_graph[n_steps - 1][i].size <= be->cap_l)
                slot = &be->chain_graph[n_steps - 1][i];
    const int S = slot ? slot->size : ns;
    int rc = stage_piece(be, b, &p, S, hidden_rows, last_pos, err);
    if (rc == 0) rc = cb_greedy_rows(be, S, err);
    if (rc < 0) {
        cudaStreamSynchronize(be->stream);
        be->staging_busy = false;
        return -1;
    }
    /* every pass: the head, its argmax, the next pass's metadata from it (the last pass keeps
     * only its drafts) */
    const run_args_t r = uniform_run(be, S, 1, stride);
    auto passes = [&]() {
        for (int j = 0; j < n_steps; j++) {
            if (cb_run_mtp(be, &r, first_step + j, be->hid_mtp, err) < 0 ||
                ops_sample(be->logits, be->V, S, be->V, be->srows_d, be->arena_d, be->counts,
                           be->sres_d, be->stream, err) < 0 ||
                ops_mtp_advance(S, be->sres_d, be->chain_d + (size_t)j * S, j + 1 < n_steps,
                                be->ids_d, be->pos_d, be->slots_d, be->ctx_d, be->tables_d, stride,
                                be->block_size, be->last_d, be->mrows_d, be->stream, err) < 0)
                return -1;
        }
        return 0;
    };
    if (slot && !ready_graph(be, slot, stride, passes, err)) slot = NULL;
    if (slot) {
        rc = cudaGraphLaunch(slot->exec, be->stream) == cudaSuccess
                 ? 0
                 : err_set(err, "cuda backend: a draft chain's graph launch failed");
        be->chain_replays++;
    } else {
        rc = passes();
    }
    if (rc == 0)
        rc = cudaMemcpyAsync(be->chain_h, be->chain_d, (size_t)n_steps * S * 4,
                             cudaMemcpyDeviceToHost, be->stream) == cudaSuccess
                 ? 0
                 : err_set(err, "cuda backend: copying the drafts back failed");
    cudaError_t e = cudaStreamSynchronize(be->stream);
    be->staging_busy = false;
    if (rc < 0) return -1;
    if (e != cudaSuccess)
        return err_set(err, "cuda backend: a draft chain failed: %s", cudaGetErrorString(e));
    for (int j = 0; j < n_steps; j++)
        for (int s = 0; s < ns; s++)
            drafts[(size_t)j * ns + s] = be->chain_h[(size_t)j * S + s];
    be->hid_mtp_rows = ns;
    return 0;
}
