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

void con_bench_start(console_t *c, int argc, char **argv) {
    if (c->bench_running) {
        con_out_error(c, "a benchmark is running: /bench stop ends it");
        return;
    }
    bench_options_t *o = &c->bopts;
    bench_options_default(o);
    bench_err_t berr = {{0}};
    if (bench_profile_apply(argv[0], o, &berr) < 0) {
        con_out_error(c, berr.msg);
        return;
    }
    char msg[512];
    if (cmd_bench_parse_workload(o, argc, argv, msg, sizeof msg) < 0) { /* argv[0]: the profile */
        con_out_error(c, msg);
        return;
    }
    snprintf(o->base_url, sizeof o->base_url, "%s", c->url);
    if (c->api_key) snprintf(o->api_key, sizeof o->api_key, "%s", c->api_key);
    atomic_store(&c->bench_stop, false);
    o->stop = &c->bench_stop;
    c->prog = (bench_progress_t){.total = o->num_prompts};
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

static int print_compare(console_t *c, FILE *f, const void *cmd, err_t *err) {
    const repl_cmd_t *k = cmd;
    return results_compare(c->results, k->argc, k->argv, f, err);
}

void con_bench_done(console_t *c, const ui_event_t *ev) {
    pthread_join(c->bench_thread, NULL);
    c->bench_running = false;
    bench_result_t *r = ev->ptr;
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

void con_compare(console_t *c, const repl_cmd_t *cmd) {
    pane_print(c, print_compare, cmd);
}
