/* console_bench: the console's benchmarks (see console_int.h). /bench runs bench_run on its own
 * thread against the embedded server's loopback URL, exactly as an outside client would, so it
 * measures what users get; progress and the result come back as UI events; a finished run is
 * reported in the output pane and kept in the results store (results.h), which /results and
 * /compare read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "console_int.h"
#include "ui_compare.h"
#include "sweep.h"

static void on_progress(const bench_progress_t *p, void *user) {
    console_t *c = user;
    ui_event_t ev = {.type = UI_EV_BENCH_PROGRESS, .progress = *p};
    ui_queue_push(c->q, &ev); /* a full queue drops a progress report: the next one follows */
}

/* The server notices a stopped run's aborted requests a moment after the client closed their
 * connections (a suspended connection is looked at every 0.2 s); until then they count as in
 * flight, and the console would take them for other clients' requests when deciding whether it
 * may quit. Waits until the server's count has held still for 0.3 s (at most 2 s). */
static void settle(console_t *c) {
    double t0 = engine_now(), still = t0;
    int last = http_in_flight(c->srv);
    while (engine_now() - still < 0.3 && engine_now() - t0 < 2.0) {
        usleep(20000);
        int n = http_in_flight(c->srv);
        if (n != last) last = n, still = engine_now();
    }
}

static void *bench_main(void *arg) {
    console_t *c = arg;
    bench_result_t *r = NULL;
    bench_err_t err = {{0}};
    ui_event_t ev = {.type = UI_EV_BENCH_DONE};
    if (bench_run(&c->bopts, on_progress, c, &r, &err) < 0) {
        r = NULL;
        snprintf(ev.text, sizeof ev.text, "%.500s", err.msg);
    }
    if (atomic_load(&c->bench_stop)) settle(c);
    ev.ptr = r;
    while (ui_queue_push(c->q, &ev) < 0)
        usleep(10000); /* the result must reach the UI */
    return NULL;
}

/* The workload of /bench and /sweep (argv[0] the profile) in c->bopts, aimed at the embedded
 * server; false after saying why not. */
static bool workload(console_t *c, int argc, char **argv) {
    if (c->bench_running) {
        con_out_error(c, "a benchmark is running: /bench stop ends it");
        return false;
    }
    bench_options_t *o = &c->bopts;
    bench_options_default(o);
    bench_err_t berr = {{0}};
    if (bench_profile_apply(argv[0], o, &berr) < 0) {
        con_out_error(c, berr.msg);
        return false;
    }
    char msg[512];
    if (cmd_bench_parse_workload(o, argc, argv, msg, sizeof msg) < 0) { /* argv[0]: the profile */
        con_out_error(c, msg);
        return false;
    }
    snprintf(o->base_url, sizeof o->base_url, "%s", c->url);
    if (c->api_key) snprintf(o->api_key, sizeof o->api_key, "%s", c->api_key);
    atomic_store(&c->bench_stop, false);
    o->stop = &c->bench_stop;
    c->prog = (bench_progress_t){.total = o->num_prompts};
    return true;
}

void con_bench_start(console_t *c, int argc, char **argv) {
    if (!workload(c, argc, argv)) return;
    bench_options_t *o = &c->bopts;
    if (con_spawn(&c->bench_thread, bench_main, c) != 0) {
        con_out_error(c, "cannot start the benchmark thread");
        return;
    }
    c->bench_running = true;
    ui_text_addf(c->text, UI_TXT_INFO, "benchmark %s: %d prompts against %s (/bench stop ends it)",
                 argv[0], o->num_prompts, c->url);
    c->scroll = 0;
    con_set_status(c, false, "benchmark %s started", argv[0]);
}

/* What fn prints to a memory FILE goes into the pane as table lines; when fn returns -1, its
 * message instead. */
static void pane_print(console_t *c, int (*fn)(console_t *, FILE *, const void *, err_t *),
                       const void *arg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        con_out_error(c, "out of memory");
        return;
    }
    err_t err = {{0}};
    int rc = fn(c, f, arg, &err);
    fclose(f);
    if (rc < 0)
        con_out_error(c, err.msg);
    else
        ui_text_add(c->text, UI_TXT_PRE, buf ? buf : "");
    free(buf);
    c->scroll = 0;
}

static int print_report(console_t *c, FILE *f, const void *r, err_t *err) {
    (void)c, (void)err;
    bench_report_print(f, r, BENCH_REPORT_VLLM);
    return 0;
}

static int print_results(console_t *c, FILE *f, const void *arg, err_t *err) {
    (void)arg, (void)err;
    results_list(c->results, &c->def_flags, f);
    return 0;
}

void con_bench_done(console_t *c, const ui_event_t *ev) {
    pthread_join(c->bench_thread, NULL);
    c->bench_running = false;
    con_chat_touch(c); /* the report is in the pane */
    bench_result_t *r = ev->ptr;
    if (!r && atomic_load(&c->bench_stop)) { /* /bench stop before the first request */
        ui_text_addf(c->text, UI_TXT_INFO, "benchmark stopped (%s)", ev->text);
        con_set_status(c, false, "benchmark stopped");
        c->scroll = 0;
        return;
    }
    if (!r) {
        char msg[600];
        snprintf(msg, sizeof msg, "benchmark failed: %s", ev->text);
        con_out_error(c, msg);
        return;
    }
    pane_print(c, print_report, r);
    char flags[256];
    results_flags_text(r, &c->def_flags, flags, sizeof flags);
    bool stopped = r->stopped;
    int ok = r->metrics.completed, failed = r->metrics.failed;
    double tps = r->metrics.output_throughput;
    err_t err = {{0}};
    int k = results_add(c->results, r, &err); /* takes r */
    if (k == 0) {
        con_out_error(c, "no request of this run succeeded: it is not kept as a result (there is "
                         "nothing to compare)");
        return;
    }
    if (err.msg[0]) con_out_error(c, err.msg);
    const char *path = results_path(c->results, k);
    ui_text_addf(c->text, UI_TXT_INFO, "run #%d%s: %d ok, %d failed, flags: %s%s%s", k,
                 stopped ? " (stopped: partial)" : "", ok, failed, flags,
                 path[0] ? ", saved to " : "", path);
    con_set_status(c, false, "benchmark done: run #%d (%.1f output tok/s)", k, tps);
}

void con_results(console_t *c) {
    if (!results_count(c->results)) {
        ui_text_add(c->text, UI_TXT_INFO, "no benchmark runs yet: /bench PROFILE runs one");
        c->scroll = 0;
        return;
    }
    pane_print(c, print_results, NULL);
}

bool con_bench_stop(console_t *c) {
    if (!c->bench_running) return false;
    atomic_store(&c->bench_stop, true);
    con_set_status(c, false, "stopping the benchmark");
    return true;
}

static void add_compare_line(void *user, ui_txt_style_t style, const char *line) {
    ui_text_add(((console_t *)user)->text, style, line);
}

/* /compare: the console's own view (ui_compare.h), its noise from the repeats among the runs. */
void con_compare(console_t *c, const repl_cmd_t *cmd) {
    results_set_t set;
    err_t err = {{0}};
    if (results_pick(c->results, cmd->argc, cmd->argv, &set, &err) < 0) {
        con_out_error(c, err.msg);
        return;
    }
    int n = results_count(c->results);
    const bench_result_t **store = calloc((size_t)(n ? n : 1), sizeof *store);
    for (int i = 0; store && i < n; i++)
        store[i] = results_get(c->results, i + 1);
    ui_compare_lines(&set, store, store ? n : 0, c->ascii, add_compare_line, c);
    free(store);
    results_set_free(&set);
    c->scroll = 0;
}

// ---------------------------------------------------------------------------------------------
// /sweep

typedef struct sweep_job {
    console_t *c;
    bench_sweep_t sw;
    char before[CON_FLAG_VALUE]; /* the flag's value before: set again at the end */
} sweep_job_t;

static int sweep_set(void *user, const char *flag, const char *value, bench_err_t *berr) {
    sweep_job_t *j = user;
    err_t err = {{0}};
    if (engine_flag_set(j->c->eng, flag, value, &err) < 0)
        return bench_err_set(berr, "%s=%s: %s", flag, value, err.msg);
    return 0;
}

static void *sweep_main(void *arg) {
    sweep_job_t *j = arg;
    console_t *c = j->c;
    bench_err_t err = {{0}};
    ui_event_t ev = {.type = UI_EV_SWEEP_DONE};
    if (bench_sweep_run(&j->sw, &c->bopts, sweep_set, j, on_progress, c, &err) < 0)
        snprintf(ev.text, sizeof ev.text, "%.500s", err.msg);
    err_t e2;
    engine_flag_set(c->eng, j->sw.flag, j->before, &e2);
    if (atomic_load(&c->bench_stop)) settle(c);
    bench_sweep_t *sw = malloc(sizeof *sw);
    if (sw)
        *sw = j->sw;
    else
        bench_sweep_free(&j->sw);
    free(j);
    ev.ptr = sw;
    while (ui_queue_push(c->q, &ev) < 0)
        usleep(10000);
    return NULL;
}

void con_sweep_start(console_t *c, repl_cmd_t *cmd) {
    sweep_job_t *j = calloc(1, sizeof *j);
    bench_err_t berr = {{0}};
    if (!j) {
        con_out_error(c, "out of memory");
        return;
    }
    j->c = c;
    err_t err = {{0}};
    if (bench_sweep_parse(cmd->flag->name, cmd->argv[1], &j->sw, &berr) < 0 ||
        engine_flag_get(c->eng, cmd->flag->name, j->before, sizeof j->before, &err) < 0 ||
        !workload(c, cmd->argc - 2, cmd->argv + 2)) {
        if (berr.msg[0] || err.msg[0]) con_out_error(c, berr.msg[0] ? berr.msg : err.msg);
        free(j);
        return;
    }
    if (con_spawn(&c->bench_thread, sweep_main, j) != 0) {
        con_out_error(c, "cannot start the benchmark thread");
        free(j);
        return;
    }
    c->bench_running = true;
    ui_text_addf(c->text, UI_TXT_INFO,
                 "sweep of %s over %s: profile %s, %d prompts per point after %d warm-up "
                 "requests (/bench stop ends it)",
                 j->sw.flag, cmd->argv[1], cmd->argv[2], c->bopts.num_prompts,
                 c->bopts.num_warmups > BENCH_SWEEP_WARMUPS ? c->bopts.num_warmups
                                                            : BENCH_SWEEP_WARMUPS);
    c->scroll = 0;
    con_log(c, "/sweep %s %s %s started", j->sw.flag, cmd->argv[1], cmd->argv[2]);
    con_set_status(c, false, "sweep of %s started", j->sw.flag);
}

static int print_sweep(console_t *c, FILE *f, const void *sw, err_t *err) {
    (void)err;
    bench_sweep_print(f, sw, c->lay.chat.w - 1);
    return 0;
}

void con_sweep_done(console_t *c, const ui_event_t *ev) {
    pthread_join(c->bench_thread, NULL);
    c->bench_running = false;
    con_chat_touch(c);
    bench_sweep_t *sw = ev->ptr;
    if (!sw) {
        con_out_error(c, "sweep: out of memory");
        return;
    }
    pane_print(c, print_sweep, sw);
    const bench_sweep_point_t *best = NULL;
    for (int i = 0; i < sw->n; i++) {
        bench_sweep_point_t *p = &sw->pts[i];
        if (p->best) best = p;
        if (!p->result || !p->ok) continue;
        err_t err = {{0}};
        int k = results_add(c->results, p->result, &err); /* takes the result */
        p->result = NULL;
        if (k > 0)
            ui_text_addf(c->text, UI_TXT_INFO, "run #%d: %s=%s%s%s", k, sw->flag, p->value,
                         results_path(c->results, k)[0] ? ", saved to " : "",
                         results_path(c->results, k));
    }
    if (ev->text[0]) con_out_error(c, ev->text);
    if (best)
        con_set_status(c, false, "sweep done: best %s=%s (%.1f output tok/s)", sw->flag,
                       best->value, best->out_tps);
    con_log(c, "/sweep %s done%s", sw->flag, sw->stopped ? " (stopped)" : "");
    bench_sweep_free(sw);
    free(sw);
}
