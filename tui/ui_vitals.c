/* ui_vitals: the numbers band's fields placed on rows (see ui_vitals.h). */
#include "ui_vitals.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define GAP        2 /* columns between fields */
#define FIELD_SEGS 6

void ui_ops_from_stats(const stats_snapshot_t *s, double now, double window_s, ui_ops_t *o) {
    memset(o, 0, sizeof *o);
    o->kv_used = s->kv_used;
    o->kv_total = s->kv_total;
    o->prefix_hit_pct =
        s->prefix_queries ? 100.0 * (double)s->prefix_hits / (double)s->prefix_queries : NAN;
    for (int i = 0; i < 4; i++)
        o->finished[i] = s->requests_finished[i];
    o->queue_ms = NAN;
    double step = 0, fwd = 0, tokens = 0;
    int n = 0, preempted = 0, drafted = 0, accepted = 0;
    for (int i = s->n_steps - 1; i >= 0; i--) {
        const stats_step_t *st = &s->steps_ring[i];
        if (st->t <= now - window_s) break;
        preempted += st->preempted;
        drafted += st->draft_tokens;
        accepted += st->accepted;
        if (st->prefill_tokens + st->decode_tokens == 0) continue; /* the engine went idle */
        step += st->step_ms;
        fwd += st->forward_ms;
        tokens += st->prefill_tokens + st->decode_tokens;
        n++;
    }
    o->step_ms = n ? step / n : NAN;
    o->forward_ms = n ? fwd / n : NAN;
    o->tokens_per_step = n ? tokens / n : NAN;
    o->preempt_per_s = window_s > 0 ? preempted / window_s : 0;
    o->spec_accept_pct = drafted ? 100.0 * accepted / drafted : NAN;
    o->spec_mean_len = s->spec_drafts ? stats_spec_mean_length(s) : 0;
}

void ui_ops_replica(ui_ops_t *o, int i, const stats_snapshot_t *s, double now, double window_s) {
    if (i < 0 || i >= UI_VITALS_MAX_REPLICAS) return;
    struct ui_replica *r = &o->replica[i];
    *r = (struct ui_replica){.running = s->running,
                             .waiting = s->waiting,
                             .kv_used = s->kv_used,
                             .kv_total = s->kv_total};
    double step = 0, gen = 0;
    int n = 0;
    for (int k = s->n_steps - 1; k >= 0; k--) {
        const stats_step_t *st = &s->steps_ring[k];
        if (st->t <= now - window_s) break;
        gen += st->decode_tokens + st->accepted;
        if (st->prefill_tokens + st->decode_tokens == 0) continue;
        step += st->step_ms;
        n++;
    }
    r->gen_tps = window_s > 0 ? gen / window_s : 0;
    r->step_ms = n ? step / n : NAN;
    for (int k = 0; k < 4; k++)
        r->done += s->requests_finished[k];
    if (o->n_replicas < i + 1) o->n_replicas = i + 1;
}

ui_vstyle_t ui_vitals_grade(double pct) {
    return isnan(pct) ? UI_VS_VALUE : pct < 70 ? UI_VS_GOOD : pct < 90 ? UI_VS_WARN : UI_VS_BAD;
}

/* A field: a few segments that stay together on one row. */
typedef struct field {
    int n, w;
    ui_vseg_t seg[FIELD_SEGS];
} field_t;

typedef struct placer {
    ui_vseg_t *segs;
    int n, max, width, max_rows;
    int row, col; /* where the next field goes */
} placer_t;

static void add(field_t *f, ui_vstyle_t style, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add(field_t *f, ui_vstyle_t style, const char *fmt, ...) {
    if (f->n == FIELD_SEGS) return;
    ui_vseg_t *s = &f->seg[f->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->text, sizeof s->text, fmt, ap);
    va_end(ap);
    s->len = (int)strlen(s->text);
    s->style = style;
    s->col = f->w; /* relative until placed; the texts are ASCII: a byte is a column */
    f->w += s->len;
}

/* Places f at the current position, or on the next row when wrap and it does not fit (not at
 * all when no row is left). */
static bool place(placer_t *p, field_t *f, bool wrap) {
    int col = p->col ? p->col + GAP : 0;
    if (col + f->w > p->width) {
        if (!wrap || !p->col || p->row + 1 >= p->max_rows) return false;
        p->row++;
        col = 0;
        if (f->w > p->width) return false;
    }
    if (p->row >= p->max_rows || p->n + f->n > p->max) return false;
    for (int i = 0; i < f->n; i++) {
        ui_vseg_t *s = &p->segs[p->n++];
        *s = f->seg[i];
        s->row = p->row;
        s->col = col + f->seg[i].col;
    }
    p->col = col + f->w;
    return true;
}

static void new_row(placer_t *p) {
    if (p->col) p->row++;
    p->col = 0;
}

/* A field "LABEL VALUE": v printed with fmt (one double conversion), "-" when NaN. */
static void num(placer_t *p, bool wrap, const char *label, ui_vstyle_t st, const char *fmt,
                double v) {
    field_t f = {0};
    char text[64];
    add(&f, UI_VS_LABEL, "%s", label);
    if (isnan(v)) {
        add(&f, UI_VS_VALUE, "-");
    } else {
        snprintf(text, sizeof text, fmt, v);
        add(&f, st, "%s", text);
    }
    place(p, &f, wrap);
}

/* 1234 -> "1234", 12345 -> "12.3k", 1234567 -> "1.23M" */
static void count_text(double v, char *buf, size_t size) {
    if (v < 10000)
        snprintf(buf, size, "%.0f", v);
    else if (v < 1e6)
        snprintf(buf, size, "%.1fk", v / 1e3);
    else
        snprintf(buf, size, "%.2fM", v / 1e6);
}

static double gib(double bytes) {
    return bytes / (1024.0 * 1024 * 1024);
}

/* One GPU: "TP0 GPU2" for the engine's rank 0, "GPU1" for the machine's (dimmed beside the
 * engine's own). */
static void gpu_row(placer_t *p, const ui_gpu_dev_t *d, bool engine_has) {
    field_t f = {0};
    if (engine_has && d->rank >= 0)
        add(&f, UI_VS_TITLE, "TP%d GPU%d", d->rank, d->index);
    else
        add(&f, engine_has ? UI_VS_LABEL : UI_VS_TITLE, "GPU%d", d->index);
    place(p, &f, false);
    num(p, false, "util ", ui_vitals_grade(d->util), "%3.0f%%", d->util);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "mem ");
    if (isnan(d->mem_total))
        add(&f, UI_VS_VALUE, "-");
    else
        add(&f, ui_vitals_grade(100.0 * d->mem_used / d->mem_total), "%.1f/%.1f GiB",
            gib(d->mem_used), gib(d->mem_total));
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "pwr ");
    if (isnan(d->power_w))
        add(&f, UI_VS_VALUE, "-");
    else if (isnan(d->power_cap_w))
        add(&f, UI_VS_VALUE, "%.0f W", d->power_w);
    else
        add(&f, ui_vitals_grade(100.0 * d->power_w / d->power_cap_w), "%.0f/%.0f W", d->power_w,
            d->power_cap_w);
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "temp ");
    if (isnan(d->temp_c))
        add(&f, UI_VS_VALUE, "-");
    else
        add(&f,
            d->temp_c >= 85   ? UI_VS_BAD
            : d->temp_c >= 75 ? UI_VS_WARN
                              : UI_VS_VALUE,
            "%.0f C", d->temp_c);
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "clk ");
    if (isnan(d->sm_mhz))
        add(&f, UI_VS_VALUE, "-");
    else if (isnan(d->mem_mhz))
        add(&f, UI_VS_VALUE, "%.0f MHz", d->sm_mhz);
    else
        add(&f, UI_VS_VALUE, "%.0f/%.0f MHz", d->sm_mhz, d->mem_mhz);
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "%s", d->name);
    place(p, &f, false);
    new_row(p);
}

/* The process: CPU % of one core (top's way) and the resident set. */
static void proc_fields(placer_t *p, const ui_gpu_sample_t *g) {
    field_t f = {0};
    add(&f, UI_VS_LABEL, "CPU ");
    if (isnan(g->cpu_pct))
        add(&f, UI_VS_VALUE, "-");
    else
        add(&f, ui_vitals_grade(g->cpu_pct / g->n_cpus), "%.0f%%", g->cpu_pct);
    add(&f, UI_VS_LABEL, " of %d cores", g->n_cpus);
    place(p, &f, true);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "RSS ");
    if (isnan(g->rss))
        add(&f, UI_VS_VALUE, "-");
    else if (g->mem_total > 0)
        add(&f, ui_vitals_grade(100.0 * g->rss / g->mem_total), "%.2f/%.1f GiB", gib(g->rss),
            gib(g->mem_total));
    else
        add(&f, UI_VS_VALUE, "%.2f GiB", gib(g->rss));
    place(p, &f, true);
}

static void ops_fields(placer_t *p, const ui_ops_t *o) {
    char a[24], b[24];
    field_t f = {0};
    double pct = o->kv_total ? 100.0 * o->kv_used / o->kv_total : NAN;
    add(&f, UI_VS_LABEL, o->kv_fp8 ? "KV fp8 " : "KV ");
    if (o->block_size > 0) {
        count_text((double)o->kv_used * o->block_size, a, sizeof a);
        count_text((double)o->kv_total * o->block_size, b, sizeof b);
        add(&f, ui_vitals_grade(pct), "%s/%s tok", a, b);
        add(&f, UI_VS_LABEL, " (%d/%d blk)", o->kv_used, o->kv_total);
    } else {
        add(&f, ui_vitals_grade(pct), "%d/%d blk", o->kv_used, o->kv_total);
    }
    place(p, &f, true);
    if (o->block_size > 0 && o->max_model_len > 0 && o->kv_total > 0) {
        f = (field_t){0};
        add(&f, UI_VS_LABEL, "max conc ");
        double conc = (double)o->kv_total * o->block_size / o->max_model_len;
        add(&f, conc < 1 ? UI_VS_BAD : UI_VS_VALUE, "%.1fx", conc);
        add(&f, UI_VS_LABEL, " @%d", o->max_model_len);
        place(p, &f, true);
    }
    num(p, true, "prefix hit ", UI_VS_VALUE, "%.1f%%", o->prefix_hit_pct);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "step ");
    if (isnan(o->step_ms)) {
        add(&f, UI_VS_VALUE, "idle");
    } else {
        add(&f, UI_VS_VALUE, "%.1f ms", o->step_ms);
        add(&f, UI_VS_LABEL, " fwd ");
        add(&f, UI_VS_VALUE, "%.1f", o->forward_ms);
    }
    place(p, &f, true);
    num(p, true, "tok/step ", UI_VS_VALUE, "%.1f", o->tokens_per_step);
    num(p, true, "preempt ", o->preempt_per_s > 0 ? UI_VS_WARN : UI_VS_VALUE, "%.1f/s",
        o->preempt_per_s);
    num(p, true, "queue ", UI_VS_VALUE, "%.0f ms", o->queue_ms);
    if (o->spec_mean_len >= 1) { /* speculative decoding has run */
        f = (field_t){0};
        add(&f, UI_VS_LABEL, "spec acc ");
        if (isnan(o->spec_accept_pct))
            add(&f, UI_VS_VALUE, "-");
        else
            add(&f, UI_VS_VALUE, "%.0f%%", o->spec_accept_pct);
        add(&f, UI_VS_LABEL, " len ");
        add(&f, UI_VS_VALUE, "%.2f", o->spec_mean_len);
        place(p, &f, true);
    }
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "done ");
    add(&f, UI_VS_VALUE, "stop %llu len %llu abort %llu", (unsigned long long)o->finished[0],
        (unsigned long long)o->finished[1], (unsigned long long)o->finished[2]);
    add(&f, o->finished[3] ? UI_VS_BAD : UI_VS_LABEL, " error %llu",
        (unsigned long long)o->finished[3]);
    place(p, &f, true);
}

/* A data-parallel replica: "DP1 run 3 wait 0 KV 45% gen 120 tok/s step 12.3 ms done 57". */
static void replica_row(placer_t *p, int i, const struct ui_replica *r) {
    field_t f = {0};
    add(&f, UI_VS_TITLE, "DP%d", i);
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "run ");
    add(&f, UI_VS_VALUE, "%d", r->running);
    add(&f, UI_VS_LABEL, " wait ");
    add(&f, r->waiting ? UI_VS_WARN : UI_VS_VALUE, "%d", r->waiting);
    place(p, &f, false);
    double pct = r->kv_total ? 100.0 * r->kv_used / r->kv_total : NAN;
    num(p, false, "KV ", ui_vitals_grade(pct), "%.0f%%", pct);
    num(p, false, "gen ", UI_VS_VALUE, "%.1f tok/s", r->gen_tps);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "step ");
    if (isnan(r->step_ms))
        add(&f, UI_VS_VALUE, "idle");
    else
        add(&f, UI_VS_VALUE, "%.1f ms", r->step_ms);
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "done ");
    add(&f, UI_VS_VALUE, "%llu", (unsigned long long)r->done);
    place(p, &f, false);
    new_row(p);
}

/* A tensor-parallel rank: "DP1 TP0 fwd 12.3 ms/step coll 1.2 ms (10%)". */
static void rank_row(placer_t *p, const struct ui_rank *r) {
    field_t f = {0};
    if (r->replica >= 0)
        add(&f, UI_VS_TITLE, "DP%d TP%d", r->replica, r->rank);
    else
        add(&f, UI_VS_TITLE, "TP%d", r->rank);
    place(p, &f, false);
    f = (field_t){0};
    add(&f, UI_VS_LABEL, "fwd ");
    if (isnan(r->fwd_ms)) {
        add(&f, UI_VS_VALUE, "idle");
        place(p, &f, false);
    } else {
        add(&f, UI_VS_VALUE, "%.1f ms/step", r->fwd_ms);
        place(p, &f, false);
        double pct = r->fwd_ms > 0 ? 100.0 * r->coll_ms / r->fwd_ms : 0;
        f = (field_t){0};
        add(&f, UI_VS_LABEL, "coll ");
        add(&f, UI_VS_VALUE, "%.1f ms", r->coll_ms);
        add(&f, pct >= 50 ? UI_VS_WARN : UI_VS_LABEL, " (%.0f%%)", pct);
        place(p, &f, false);
    }
    new_row(p);
}

int ui_vitals_lay(const ui_gpu_sample_t *gpu, const ui_ops_t *ops, int width, int max_rows,
                  ui_vseg_t *segs, int max_segs, int *rows) {
    placer_t p = {.segs = segs, .max = max_segs, .width = width, .max_rows = max_rows};
    if (gpu) {
        for (int i = 0; i < gpu->n && p.row < max_rows; i++)
            gpu_row(&p, &gpu->dev[i], gpu->n_engine > 0);
        if (gpu->n_total > gpu->n && p.row < max_rows) {
            field_t f = {0};
            add(&f, UI_VS_LABEL, "(+%d GPUs not shown)", gpu->n_total - gpu->n);
            place(&p, &f, false);
            new_row(&p);
        }
        if (gpu->n == 0 && p.row < max_rows) {
            field_t f = {0};
            add(&f, UI_VS_LABEL, "%s", gpu->why[0] ? gpu->why : "no GPU");
            place(&p, &f, true);
        }
        proc_fields(&p, gpu);
        if (gpu->n == 0) new_row(&p);
    }
    if (ops && p.row < max_rows) ops_fields(&p, ops);
    if (ops && ops->n_replicas > 1) {
        if (p.col) new_row(&p);
        for (int i = 0; i < ops->n_replicas && i < UI_VITALS_MAX_REPLICAS && p.row < max_rows; i++)
            replica_row(&p, i, &ops->replica[i]);
    }
    if (ops && ops->n_ranks > 0) {
        if (p.col) new_row(&p);
        for (int i = 0; i < ops->n_ranks && i < UI_VITALS_MAX_RANKS && p.row < max_rows; i++)
            rank_row(&p, &ops->rank[i]);
    }
    *rows = p.row + (p.col ? 1 : 0);
    if (*rows > max_rows) *rows = max_rows;
    return p.n;
}
