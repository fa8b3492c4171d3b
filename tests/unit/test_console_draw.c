/* The console's drawing (console_draw.h) on a real curses SCREEN: newterm() writes to a pipe, a
 * made-up snapshot is drawn, and the cells are read back from curses (text, attributes, colour
 * pairs, the cursor) and the bytes from the pipe. Covers every panel at 120x40, the chat pane's
 * styles (tool calls apart from the reply) and scrolling, the numbers band (GPUs or the process,
 * the engine's numbers, errors in the alarm colour) and the charts' legends and time axes,
 * reasoning shown and folded, the REPL line's break marks, ASCII and monochrome, the help overlay's
 * scrolling, the expert-load panel and the "too small" screen. TEST_DUMP_SCREEN=1 prints every
 * frame drawn to stderr. */
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

#include <cmocka.h>
#include <curses.h>

#include "console_draw.h"
#include "flags.h"

typedef struct fixture {
    SCREEN *screen;
    FILE *out, *in;
    int rd;      /* the pipe's read end */
    char *bytes; /* what the last frame wrote to the terminal */
    size_t n_bytes, cap_bytes;
    int cur_y, cur_x; /* the cursor after the last frame */
    con_drawer_t *d;
    ui_series_t series[N_METRICS];
    ui_text_t *text, *help;
    le_t *le;
    stats_snapshot_t stats;
    ui_reqs_t reqs;
    bench_progress_t bench;
    ui_gpu_sample_t gpu;
    ui_ops_t ops;
    char flag_text[CON_MAX_FLAGS][CON_FLAG_VALUE];
    bool flag_changed[CON_MAX_FLAGS];
    con_view_t v;
} fixture_t;

static void open_screen(fixture_t *f, int cols, int rows) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fcntl(fds[1], F_SETPIPE_SZ, 1 << 20); /* a frame never blocks on a full pipe */
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    f->rd = fds[0];
    f->out = fdopen(fds[1], "w");
    f->in = fopen("/dev/null", "r");
    assert_non_null(f->out);
    assert_non_null(f->in);
    f->screen = newterm("xterm-256color", f->out, f->in);
    assert_non_null(f->screen);
    resizeterm(rows, cols);
}

/* A new SCREEN of another size, the layout recomputed. */
static void reopen(fixture_t *f, int cols, int rows) {
    endwin();
    delscreen(f->screen);
    fclose(f->out);
    fclose(f->in);
    close(f->rd);
    open_screen(f, cols, rows);
    layout_compute(COLS, LINES, 0, &f->v.lay);
    f->v.color = con_draw_colors(true);
}

/* The view the console would draw: a model, two requests and the console's reply, a changed
 * flag, a conversation with reasoning, a two-line message in the REPL line. */
static int setup(void **state) {
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_non_null(setlocale(LC_ALL, "C.UTF-8"));
    open_screen(f, 120, 40);
    err_t err;
    f->d = con_drawer_create(&err);
    f->text = ui_text_create(1000, &err);
    f->help = ui_text_create(100, &err);
    f->le = le_create(4096, 10, &err);
    assert_true(f->d && f->text && f->help && f->le);
    for (int i = 0; i < N_METRICS; i++) {
        ui_series_init(&f->series[i]);
        for (int k = 0; k < 240; k++)
            ui_series_push(&f->series[i], k % 40);
    }
    ui_text_add(f->text, UI_TXT_INFO, "Serving tiny at http://127.0.0.1:8000");
    ui_text_add(f->text, UI_TXT_USER, "> what is 2+2?");
    ui_text_add(f->text, UI_TXT_FOLD, "(reasoning hidden: F2 shows it)");
    ui_text_add(f->text, UI_TXT_REASONING, "the user adds two and two");
    ui_text_add(f->text, UI_TXT_REPLY, "It is 4.");
    ui_text_add(f->text, UI_TXT_ERROR, "something failed");
    for (int i = 0; i < 40; i++)
        ui_text_addf(f->help, UI_TXT_NORMAL, "help row %d", i);
    le_insert(f->le, "hello\nworld");
    f->stats.running = 2;
    f->stats.waiting = 1;
    f->stats.n_active = f->stats.n_active_total = 3;
    const char *ids[] = {"req-a", "chat-1", "chatcmpl-0123456789abcdef0123456789abcdef"};
    for (int i = 0; i < 3; i++) {
        stats_active_t *a = &f->stats.active[i];
        snprintf(a->id, sizeof a->id, "%s", ids[i]);
        a->prompt_tokens = 10 + i;
        a->generated = 5;
        a->state = i == 0 ? STATS_REQ_DECODE : STATS_REQ_PREFILL;
    }
    f->stats.requests_submitted = 7;
    ui_reqs_init(&f->reqs); /* the console's reply, with its own numbers */
    ui_req_row_t own = {
        .id = "chat-1", .state = UI_REQ_DECODE, .prompt = 11, .gen = 4, .age_s = 1.5};
    ui_reqs_build(&f->reqs, &f->stats, 100, &own);
    int n_flags = flags_count() < CON_MAX_FLAGS ? flags_count() : CON_MAX_FLAGS;
    for (int i = 0; i < n_flags; i++)
        snprintf(f->flag_text[i], CON_FLAG_VALUE, "%s", flags_at(i)->def);
    f->flag_changed[3] = true;
    snprintf(f->flag_text[3], CON_FLAG_VALUE, "777");
    con_view_t *v = &f->v;
    *v = (con_view_t){
        .now = 100,
        .color = con_draw_colors(true),
        .model_name = "tiny-model",
        .model_note = "(demo model, toy weights)",
        .url = "http://127.0.0.1:8000",
        .layout_desc = "TP 1",
        .backend = "cpu (2 threads)",
        .model_desc = "Qwen3 2 layers",
        .uptime = 3725,
        .series = f->series,
        .window = 60,
        .last_ttft = 120,
        .last_tpot = 15,
        .n_flags = n_flags,
        .flag_text = (const char(*)[CON_FLAG_VALUE])f->flag_text,
        .flag_changed = f->flag_changed,
        .stats = &f->stats,
        .reqs = &f->reqs,
        .text = f->text,
        .busy = true,
        .status = "generating (Esc stops)",
        .help_text = f->help,
        .zoom = -1,
    };
    layout_compute(COLS, LINES, 0, &v->lay);
    le_render(f->le, con_draw_line_width(&v->lay, v->busy), &v->line);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture_t *f = *state;
    endwin();
    delscreen(f->screen);
    fclose(f->out);
    fclose(f->in);
    close(f->rd);
    con_drawer_destroy(f->d);
    ui_text_destroy(f->text);
    ui_text_destroy(f->help);
    le_destroy(f->le);
    free(f->bytes);
    free(f);
    return 0;
}

/* Row y as UTF-8 (trailing spaces kept). */
static const char *row(int y) {
    static char buf[4096];
    wchar_t w[1024];
    int n = mvinnwstr(y, 0, w, COLS < 1023 ? COLS : 1023);
    w[n > 0 ? n : 0] = L'\0';
    size_t k = wcstombs(buf, w, sizeof buf - 1);
    buf[k == (size_t)-1 ? 0 : k] = '\0';
    return buf;
}

/* Draws the view; f->bytes gets what went to the terminal. */
static con_drawn_t draw(fixture_t *f) {
    con_drawn_t out;
    con_draw(f->d, &f->v, &out);
    f->cur_y = getcury(stdscr);
    f->cur_x = getcurx(stdscr);
    fflush(f->out);
    f->n_bytes = 0;
    for (;;) {
        if (f->n_bytes + 4096 + 1 > f->cap_bytes) {
            f->cap_bytes = 2 * (f->n_bytes + 4096 + 1);
            f->bytes = realloc(f->bytes, f->cap_bytes);
            assert_non_null(f->bytes);
        }
        ssize_t n = read(f->rd, f->bytes + f->n_bytes, 4096);
        if (n <= 0) break;
        f->n_bytes += (size_t)n;
    }
    f->bytes[f->n_bytes] = '\0';
    if (getenv("TEST_DUMP_SCREEN"))
        for (int y = 0; y < LINES; y++)
            fprintf(stderr, "%2d|%s|\n", y, row(y));
    return out;
}

/* The first row holding s, -1 when none does. */
static int find_row(const char *s) {
    for (int y = 0; y < LINES; y++)
        if (strstr(row(y), s)) return y;
    return -1;
}

/* The column (in cells) where s starts in row y. */
static int find_col(int y, const char *s) {
    const char *r = row(y), *at = strstr(r, s);
    assert_non_null(at);
    return (int)mbstowcs(NULL, r, 0) - (int)mbstowcs(NULL, at, 0);
}

static attr_t attrs_at(int y, int x, short *pair) {
    cchar_t cc;
    wchar_t wc[CCHARW_MAX];
    attr_t a;
    short p;
    assert_int_equal(mvin_wch(y, x, &cc), OK);
    getcchar(&cc, wc, &a, pair ? pair : &p, NULL);
    return a;
}

static void test_panels(void **state) {
    fixture_t *f = *state;
    con_drawn_t out = draw(f);
    const layout_t *l = &f->v.lay;
    /* header: the name clients send, the URL, the uptime */
    const char *h = row(l->header.y);
    assert_non_null(strstr(h, "Tachyon"));
    assert_non_null(strstr(h, "tiny-model"));
    assert_non_null(strstr(h, "http://127.0.0.1:8000"));
    assert_non_null(strstr(h, "up 01:02:05"));
    /* the charts' titles: the window, each series named with its value; TTFT and TPOT apart;
     * a time axis under the plots */
    int sy = find_row("seqs");
    assert_true(sy >= 0);
    assert_non_null(strstr(row(sy), "running 39 waiting 39"));
    assert_true(find_row("KV cache") >= 0);
    assert_true(find_row("TTFT 60 s mean 120 ms") >= 0);
    assert_true(find_row("TPOT  last 60 s  mean 15 ms") >= 0);
    assert_true(find_row("CPU/RSS") >= 0); /* no GPU sampled: the process */
    assert_true(find_row("-60 s") > sy);
    assert_non_null(strstr(row(find_row("-60 s")), "-30 s"));
    assert_non_null(strstr(row(find_row("-60 s")), "now"));
    /* the flags panel: the changed flag first, marked */
    int fy = find_row("Flags (* changed)");
    assert_true(fy >= 0);
    char want[128];
    snprintf(want, sizeof want, "*%s", flags_at(3)->name);
    assert_int_equal(find_row(want), fy + 1);
    assert_non_null(strstr(row(fy + 1), "777"));
    /* the requests table: the console's reply first, a long id by its end, the totals */
    int ry = find_row("engine: 2 running, 1 waiting");
    assert_true(ry >= 0);
    int chat = find_row("chat-1"), other = find_row("req-a");
    assert_true(chat > ry && other > chat);
    assert_non_null(strstr(row(chat), "decode"));
    assert_true(find_row("~bcdef ") > other); /* a long id by its end */
    assert_true(find_row("7 submitted, 0 done, 0 preempted") > other);
    /* the chat pane: bottom-aligned, reasoning folded */
    int cy = find_row("Chat and output");
    assert_true(cy > 0);
    assert_true(find_row("> what is 2+2?") > cy);
    assert_true(find_row("(reasoning hidden: F2 shows it)") > cy);
    assert_int_equal(find_row("the user adds"), -1);
    assert_int_equal(find_row("something failed"), l->chat.y + l->chat.h - 1);
    assert_int_equal(out.scroll, 0);
    /* the status line */
    const char *st = row(l->status.y);
    assert_non_null(strstr(st, "ready | F1Help F2Think F3Log F4Zoom F5Rerun F6Reqs F10Quit | "));
    assert_non_null(strstr(st, "generating (Esc stops)"));
    assert_true(find_row("Chat and output (reasoning hidden: F2)") == l->chat.y);
    /* the REPL line: the busy prompt, the line break as a mark, the cursor after the text */
    assert_non_null(strstr(row(l->repl.y), "... hello\xe2\x8f\x8eworld"));
    assert_int_equal(f->cur_y, l->repl.y);
    assert_int_equal(f->cur_x, 4 + 11);
    /* and it all went to the terminal */
    assert_true(f->n_bytes > 1000);
    assert_non_null(strstr(f->bytes, "tiny-model"));
}

static void test_styles(void **state) {
    fixture_t *f = *state;
    f->v.show_reasoning = true;
    ui_text_add(f->text, UI_TXT_TOOL, "\xe2\x9a\x99 get_weather({\"city\": \"Paris\"})");
    draw(f);
    short pair;
    int tool = find_row("\xe2\x9a\x99 get_weather({\"city\": \"Paris\"})");
    assert_int_equal(tool, f->v.lay.chat.y + f->v.lay.chat.h - 1);
    attrs_at(tool, 2, &pair);
    short reply_pair;
    attrs_at(find_row("It is 4."), 0, &reply_pair);
    assert_true(pair != 0 && pair != reply_pair); /* a colour of its own */
    int y = find_row("the user adds");
    assert_true(y >= 0);
    assert_true(attrs_at(y, 0, &pair) & A_DIM);
    assert_int_equal(find_row("(reasoning hidden"), -1);
    y = find_row("> what is 2+2?");
    assert_true(attrs_at(y, 0, &pair) & A_BOLD);
    assert_true(pair != 0);
    y = find_row("something failed");
    attrs_at(y, 0, &pair);
    assert_true(pair != 0);
    y = find_row("It is 4.");
    assert_int_equal(attrs_at(y, 0, &pair) & (A_BOLD | A_DIM), 0);
    assert_true(find_row("Chat and output (reasoning hidden") < 0);
    assert_true(find_row("Chat and output") == f->v.lay.chat.y);
}

/* Braille in a UTF-8 terminal; only ASCII and no colour pair with ascii and no colour. */
static void test_ascii_mono(void **state) {
    fixture_t *f = *state;
    draw(f);
    layout_rect_t c = f->v.lay.charts[0];
    bool braille = false;
    for (int y = c.y + 1; y < c.y + c.h; y++)
        braille |= strstr(row(y), "\xe2\xa0") || strstr(row(y), "\xe2\xa1") ||
                   strstr(row(y), "\xe2\xa2") || strstr(row(y), "\xe2\xa3");
    assert_true(braille);

    f->v.ascii = true;
    f->v.color = false;
    ui_text_add(f->text, UI_TXT_TOOL, "[tool] get_weather({})");
    draw(f);
    for (int y = 0; y < LINES; y++) {
        for (const unsigned char *p = (const unsigned char *)row(y); *p; p++)
            assert_true(*p < 0x80);
        for (int x = 0; x < COLS; x++) {
            short pair;
            attrs_at(y, x, &pair);
            assert_int_equal(pair, 0);
        }
    }
    assert_non_null(strstr(row(f->v.lay.repl.y), "... hello|world"));
    assert_non_null(strstr(row(f->v.lay.chat.y), "- Chat and output (reasoning hidden: F2) ---"));
    bool glyphs = false;
    for (int y = c.y + 1; y < c.y + c.h; y++)
        glyphs |= strpbrk(row(y) + 6, ".:|#") != NULL;
    assert_true(glyphs);
    short pair;
    assert_true(attrs_at(find_row("something failed"), 0, &pair) & A_BOLD);
    assert_true(attrs_at(find_row("[tool] get_weather({})"), 0, &pair) & A_BOLD);
    assert_false(attrs_at(find_row("It is 4."), 0, &pair) & A_BOLD);
}

/* A scroll past the text is clamped and given back; a scrolled pane says so. */
static void test_scroll(void **state) {
    fixture_t *f = *state;
    f->v.scroll = 1000;
    con_drawn_t out = draw(f);
    assert_int_equal(out.scroll, 0);
    for (int i = 0; i < 200; i++)
        ui_text_addf(f->text, UI_TXT_NORMAL, "line %d", i);
    out = draw(f);
    int rows = f->v.lay.chat.h - 1;
    assert_true(out.scroll > 0 && out.scroll < 1000);
    assert_true(find_row("scrolled up: PgDn goes back") >= 0);
    assert_true(find_row("Serving tiny") > 0); /* the oldest rows, at the top */
    f->v.scroll = out.scroll - rows;
    draw(f);
    assert_int_equal(find_row("Serving tiny"), -1);
}

/* The help over the charts: from the top, scrolled to its end, and the cursor hidden. */
static void test_help(void **state) {
    fixture_t *f = *state;
    reopen(f, 80, 12);
    assert_true(f->v.lay.too_small);
    draw(f);
    assert_true(find_row("terminal too small: need 60x16") >= 0);
    assert_true(find_row("(now 80x12)") >= 0);
    assert_int_equal(find_row("Tachyon"), -1);

    resizeterm(24, 80);
    layout_compute(COLS, LINES, 0, &f->v.lay);
    f->v.help = true;
    f->v.help_scroll = 1 << 20; /* the top, clamped */
    con_drawn_t out = draw(f);
    assert_true(out.help_scroll > 0 && out.help_scroll < 1 << 20);
    assert_true(find_row("Help (Up/Down, PgUp/PgDn scroll; any other key closes)") >= 0);
    assert_true(find_row("help row 0") >= 0);
    assert_true(find_row("-- PgDn: more below --") >= 0);
    assert_int_equal(find_row("Chat and output"), -1);
    f->v.help_scroll = 0;
    out = draw(f);
    assert_int_equal(out.help_scroll, 0);
    assert_int_equal(find_row("help row 0"), -1);
    assert_true(find_row("help row 39") >= 0);
    assert_true(find_row("-- end (PgUp: more above) --") >= 0);
    assert_int_equal(find_row("tiny-model"), 0); /* the header stays */
}

/* A benchmark and a flag change show on the status line and in the requests table. */
static void test_bench_and_flag(void **state) {
    fixture_t *f = *state;
    /* no layout gives the table the rows it needs for the benchmark's lines yet: a made-up one */
    f->v.lay.requests = (layout_rect_t){0, 17, 60, 20};
    f->v.lay.chat = (layout_rect_t){60, 17, 60, 21};
    f->bench = (bench_progress_t){.total = 40,
                                  .done = 10,
                                  .failed = 2,
                                  .in_flight = 3,
                                  .elapsed = 12,
                                  .request_rate_observed = 0.8};
    f->v.bench = &f->bench;
    draw(f);
    const char *st = row(f->v.lay.status.y);
    assert_non_null(
        strstr(st, "ready | bench [##........] 10/40 25% 00:12<00:36 0.8 req/s fail 2 |"));
    int y = find_row("bench   3 in flight, 10/40 done, 2 failed");
    assert_true(y > 17);
    short pair;
    attrs_at(y, find_col(y, "2 failed"), &pair);
    assert_true(pair != 0); /* failures in the error colour */
    assert_int_equal(find_col(y + 1, "[####"), 1);
    assert_non_null(strstr(row(y + 2), "25% 00:12<00:36 0.8 req/s ok 8 fail 2"));
    assert_true(find_row("~3456789abcdef0123456789abcdef ") > y); /* a long id by its end */
    f->bench = (bench_progress_t){.total = 400};
    draw(f);
    assert_non_null(strstr(row(f->v.lay.status.y), "0/400 preparing 400 prompts |"));
    reopen(f, 200, 50); /* wide: ok and fail on the status line too */
    f->bench = (bench_progress_t){.total = 40, .done = 10, .in_flight = 3, .elapsed = 12};
    f->v.bench = &f->bench;
    draw(f);
    assert_non_null(strstr(row(LINES - 1), "ready | bench [#####...............] 10/40 25% "
                                           "00:12<00:36 0.0 req/s ok 10 fail 0 |"));
    f->v.bench = NULL;
    f->v.applying = flags_at(0)->name;
    f->v.applying_secs = 2.5;
    draw(f);
    char want[80];
    snprintf(want, sizeof want, ">%s", flags_at(0)->name);
    int ay = find_row(want); /* the flags panel marks the flag being applied */
    assert_true(ay > 0);
    assert_non_null(strstr(row(ay), "applying..."));
    assert_true(find_row("Flags (* changed, > applying)") >= 0);
    snprintf(want, sizeof want, "ready | applying %s ", flags_at(0)->name);
    assert_true(strstr(row(f->v.lay.status.y), want) != NULL);
    assert_true(strstr(row(f->v.lay.status.y), " 2.5 s |") != NULL);
    assert_int_equal(find_col(f->v.lay.status.y, "ready"), 0);
}

/* The numbers band: a row per GPU (the fake's numbers), the engine's numbers wrapped on the
 * rows under it, an error count in the error colour (bold and underlined without colours);
 * without a GPU the reason and the process's numbers; the GPU chart named after the GPUs. */
/* Speculative decoding in the numbers band: acceptance over the window, mean length since start;
 * absent while no draft has run. */
static void test_vitals_spec(void **state) {
    (void)state;
    stats_snapshot_t *s = calloc(1, sizeof *s);
    s->n_steps = 2;
    s->steps_ring[0] =
        (stats_step_t){.t = 9.0, .decode_tokens = 2, .draft_tokens = 6, .accepted = 3};
    s->steps_ring[1] =
        (stats_step_t){.t = 9.5, .decode_tokens = 2, .draft_tokens = 2, .accepted = 1};
    ui_ops_t ops;
    ui_ops_from_stats(s, 10.0, 5.0, &ops);
    assert_true(ops.spec_mean_len == 0); /* the counters say no draft ran yet */
    static ui_vseg_t segs[UI_VITALS_MAX_SEGS];
    int rows, n = ui_vitals_lay(NULL, &ops, 400, 4, segs, UI_VITALS_MAX_SEGS, &rows);
    for (int i = 0; i < n; i++)
        assert_null(strstr(segs[i].text, "spec"));
    s->spec_drafts = 4;
    s->spec_draft_tokens = 8;
    s->spec_accepted_tokens = 4;
    ui_ops_from_stats(s, 10.0, 5.0, &ops);
    assert_true(ops.spec_accept_pct == 50.0 && ops.spec_mean_len == 2.0);
    n = ui_vitals_lay(NULL, &ops, 400, 4, segs, UI_VITALS_MAX_SEGS, &rows);
    char line[512] = "";
    for (int i = 0; i < n; i++)
        strncat(line, segs[i].text, sizeof line - strlen(line) - 1);
    assert_non_null(strstr(line, "spec acc 50% len 2.00"));
    assert_null(strstr(line, "KV fp8"));
    /* an fp8 KV cache says so where the band gives the cache's size */
    ops.kv_fp8 = true;
    n = ui_vitals_lay(NULL, &ops, 400, 4, segs, UI_VITALS_MAX_SEGS, &rows);
    line[0] = '\0';
    for (int i = 0; i < n; i++)
        strncat(line, segs[i].text, sizeof line - strlen(line) - 1);
    assert_non_null(strstr(line, "KV fp8 0/0 blk"));
    free(s);
}

static void test_vitals(void **state) {
    fixture_t *f = *state;
    ui_gpu_sample_t *g = &f->gpu;
    g->n = g->n_total = 2;
    for (int i = 0; i < 2; i++)
        g->dev[i] = (ui_gpu_dev_t){.util = 45 + 50 * i,
                                   .mem_used = 30.0 * (1 << 30),
                                   .mem_total = 80.0 * (1 << 30),
                                   .power_w = 350,
                                   .power_cap_w = 700,
                                   .temp_c = 61,
                                   .sm_mhz = 1980,
                                   .mem_mhz = 2619,
                                   .index = i,
                                   .rank = -1};
    snprintf(g->dev[0].name, sizeof g->dev[0].name, "Fake H100 0");
    g->cpu_pct = 150;
    g->n_cpus = 2;
    g->rss = 1 << 30;
    g->mem_total = 8.0 * (1 << 30);
    f->ops = (ui_ops_t){.kv_used = 77,
                        .kv_total = 355,
                        .block_size = 16,
                        .max_model_len = 2048,
                        .prefix_hit_pct = 45.25,
                        .step_ms = 12.3,
                        .forward_ms = 10.1,
                        .tokens_per_step = 128,
                        .preempt_per_s = 0.5,
                        .queue_ms = 12,
                        .finished = {120, 30, 2, 1}};
    f->v.gpu = g;
    f->v.ops = &f->ops;
    layout_compute(COLS, LINES, 4, &f->v.lay);
    assert_int_equal(f->v.lay.vitals.h, 4);
    draw(f);
    int y = f->v.lay.vitals.y;
    assert_non_null(strstr(row(y), "GPU0  util  45%  mem 30.0/80.0 GiB  pwr 350/700 W  temp 61 C  "
                                   "clk 1980/2619 MHz  Fake H100 0"));
    assert_non_null(strstr(row(y + 1), "GPU1  util  95%"));
    int ky = find_row("KV 1232/5680 tok (77/355 blk)");
    assert_true(ky >= y + 2 && ky < y + 4);
    assert_true(find_row("max conc 2.8x @2048") >= y + 2);
    assert_true(find_row("prefix hit 45.2%") >= y + 2);
    assert_true(find_row("step 12.3 ms fwd 10.1") >= y + 2);
    assert_true(find_row("tok/step 128.0") >= y + 2);
    assert_true(find_row("preempt 0.5/s") >= y + 2);
    assert_true(find_row("queue 12 ms") >= y + 2);
    int dy = find_row("done stop 120 len 30 abort 2 error 1");
    assert_true(dy >= y + 2 && dy < y + 4);
    short pair, ok_pair, hot_pair;
    attrs_at(dy, find_col(dy, "error 1") + 1, &pair);
    attrs_at(y, find_col(y, " 45%") + 1, &ok_pair);
    attrs_at(y + 1, find_col(y + 1, " 95%") + 1, &hot_pair);
    assert_true(pair != 0 && ok_pair != 0 && hot_pair != 0 && ok_pair != hot_pair);
    assert_int_equal(hot_pair, pair); /* 95 % and errors: the same alarm colour */
    int cy = find_row("GPU 60 s util 39% mem 39%");
    assert_true(cy > y + 3);
    /* the legend: each series' name in its own colour */
    short p1, p2;
    attrs_at(cy, find_col(cy, "util 39%"), &p1);
    attrs_at(cy, find_col(cy, "mem 39%"), &p2);
    assert_true(p1 != 0 && p2 != 0 && p1 != p2);

    f->v.color = false;
    draw(f);
    attr_t a = attrs_at(dy, find_col(dy, "error 1") + 1, &pair);
    assert_true((a & A_BOLD) && (a & A_UNDERLINE) && pair == 0);

    g->n = g->n_total = 0;
    snprintf(g->why, sizeof g->why, "no NVML (libnvidia-ml.so.1 not found: no NVIDIA driver)");
    draw(f);
    assert_non_null(strstr(row(y), "no NVML (libnvidia-ml.so.1 not found: no NVIDIA driver)  "
                                   "CPU 150% of 2 cores"));
    assert_true(find_row("RSS 1.00/8.0 GiB") >= y);
    assert_true(find_row("CPU/RSS") > y);

    reopen(f, 80, 24); /* the smallest usual terminal: still there, fields dropped or wrapped */
    layout_compute(COLS, LINES, 4, &f->v.lay);
    g->n = g->n_total = 1;
    draw(f);
    assert_non_null(strstr(row(1), "GPU0  util  45%  mem 30.0/80.0 GiB  pwr 350/700 W  temp 61 C"));
    assert_true(find_row("KV 1232/5680 tok") > 1);
    assert_true(find_row("error 1") > 1);

    /* the engine on GPU1 as its rank 0: that row first, named by its rank; GPU0 the machine's,
     * dimmed */
    g->n = g->n_total = 2;
    g->n_engine = 1;
    ui_gpu_dev_t d0 = g->dev[0];
    g->dev[0] = g->dev[1];
    g->dev[0].rank = 0;
    g->dev[1] = d0;
    draw(f);
    assert_non_null(strstr(row(1), "TP0 GPU1  util  95%"));
    int oy = find_row("GPU0  util  45%");
    assert_true(oy == 2);
    assert_true(attrs_at(oy, find_col(oy, "GPU0"), NULL) & A_DIM);
    assert_true(attrs_at(1, find_col(1, "TP0"), NULL) & A_BOLD);
}

/* F4's zoom: one chart over the whole chart area, found there by a click; F3's log in the pane;
 * the F-key bar's keys found by column, only help and quit below 100 columns. */
static void test_zoom_log_fkeys(void **state) {
    fixture_t *f = *state;
    const layout_t *l = &f->v.lay;
    layout_rect_t c0 = l->charts[0], c5 = l->charts[5];
    assert_int_equal(con_draw_chart_at(&f->v, c5.y + 1, c5.x + 1), 5);
    assert_int_equal(con_draw_chart_at(&f->v, l->chat.y + 1, 0), -1);
    f->v.zoom = 3;
    draw(f);
    assert_true(find_row("TTFT  last 60 s  mean 120 ms") == c0.y);
    assert_int_equal(find_row("TPOT"), -1);
    assert_int_equal(find_row("running 39"), -1);
    assert_int_equal(con_draw_chart_at(&f->v, c5.y + 1, c5.x + 1), 3);
    assert_non_null(strstr(row(c5.y + c5.h - 1), "now")); /* the axis at the area's bottom */
    assert_non_null(strstr(row(l->status.y), "F4Grid"));

    ui_text_t *log = ui_text_create(100, &(err_t){{0}});
    ui_text_add(log, UI_TXT_NORMAL, "[00:00:05] Avg prompt throughput: 1.0 tokens/s");
    f->v.text = log;
    f->v.log = true;
    draw(f);
    assert_true(find_row("Log (F3: back to the chat)") == l->chat.y);
    assert_true(find_row("[00:00:05] Avg prompt throughput") > l->chat.y);
    assert_int_equal(find_row("It is 4."), -1);
    assert_non_null(strstr(row(l->status.y), "F3Chat"));
    const char *st = row(l->status.y);
    int x = find_col(l->status.y, "F5Rerun");
    assert_true(strstr(st, "F5Rerun") != NULL);
    assert_int_equal(con_draw_fkey_at(&f->v, x), 5);
    assert_int_equal(con_draw_fkey_at(&f->v, x + 6), 5);
    assert_int_equal(con_draw_fkey_at(&f->v, find_col(l->status.y, "F10Quit") + 1), 10);
    assert_int_equal(con_draw_fkey_at(&f->v, 2), 0);
    ui_text_destroy(log);

    reopen(f, 80, 24);
    f->v.text = f->text;
    f->v.log = false;
    draw(f);
    st = row(f->v.lay.status.y);
    assert_non_null(strstr(st, "ready | F1Help F10Quit | generating"));
    assert_int_equal(con_draw_fkey_at(&f->v, find_col(f->v.lay.status.y, "F10Quit")), 10);
}

/* F6: the requests table over the charts and the chat pane (80x24 too, where it is hidden
 * otherwise), with the TTFT column where wide, the sort key's head marked, the selected row in
 * reverse, an error in the alarm colour, a click's row; scrolled to keep the selection in view. */
static void test_requests_focus(void **state) {
    fixture_t *f = *state;
    reopen(f, 80, 24);
    assert_true(layout_rect_empty(f->v.lay.requests)); /* hidden at 80x24 */
    stats_snapshot_t *s = &f->stats;
    s->n_active = s->n_active_total = 40;
    for (int i = 0; i < 40; i++) {
        stats_active_t *a = &s->active[i];
        snprintf(a->id, sizeof a->id, "req-%02d", i);
        a->state = STATS_REQ_DECODE;
        a->prompt_tokens = 10;
        a->arrival = i; /* req-00 the oldest */
        a->first_token = i + 0.25;
    }
    s->n_recent = 1;
    snprintf(s->recent[0].id, sizeof s->recent[0].id, "req-bad");
    s->recent[0].finish_reason = 3; /* error */
    s->recent[0].ttft_s = -1;
    ui_reqs_t *t = &f->reqs;
    ui_reqs_init(t);
    t->filter = UI_REQ_ALL;
    ui_reqs_set_sort(t, UI_REQ_SORT_TTFT, true);
    ui_reqs_build(t, s, 100, NULL);
    ui_reqs_select(t, 0);
    f->v.reqs_focus = true;
    con_drawn_t out = draw(f);
    layout_rect_t r = con_draw_reqs_rect(&f->v);
    assert_int_equal(r.w, 80);
    int ty = find_row("Requests (all, by ttft ");
    assert_int_equal(ty, r.y);
    assert_int_equal(find_row("Chat and output"), -1);
    int hy = find_row("ttft ms state");
    assert_true(hy > ty);
    assert_true(attrs_at(hy, find_col(hy, "ttft ms"), NULL) & A_UNDERLINE);
    /* the error first (no TTFT: the slowest), in the alarm colour */
    assert_true(strstr(row(hy + 1), "req-bad") && strstr(row(hy + 1), " error"));
    short pair;
    attrs_at(hy + 1, 2, &pair);
    assert_true(pair != 0);
    assert_true(attrs_at(hy + 1, 2, NULL) & A_REVERSE); /* selected */
    assert_int_equal(out.reqs_top, 0);
    /* the selection (row 30) scrolled into view, in reverse */
    ui_reqs_select(t, 30);
    out = draw(f);
    int sy = find_row(t->rows[30].id);
    assert_true(sy > hy && sy < r.y + r.h - 1);
    assert_true(attrs_at(sy, 2, NULL) & A_REVERSE);
    assert_true(out.reqs_top > 0);
    assert_int_equal(con_draw_req_at(&f->v, out.reqs_top, sy, 5), 30);
    assert_int_equal(con_draw_req_at(&f->v, out.reqs_top, hy, 5), -1);
    assert_non_null(strstr(row(f->v.lay.status.y), "F6Back"));
    /* unfocused at 200x50: its place beside the chat pane, the selection not shown (rows that
     * share screen lines with braille charts do not read back whole here) */
    reopen(f, 200, 50);
    f->v.reqs_focus = false;
    ui_reqs_select(t, 0);
    draw(f);
    assert_int_equal(con_draw_reqs_rect(&f->v).x, f->v.lay.requests.x);
    assert_true(find_row("Chat and output") >= 0);
    int y = find_row("req-bad");
    assert_true(y > f->v.lay.requests.y);
    assert_false(attrs_at(y, f->v.lay.requests.x + 2, NULL) & A_REVERSE);
}

/* /experts: the live expert-load panel in the chat pane's place, redrawn from the snapshot it
 * is given: its title and summary, one row per MoE layer, cells coloured by their heat (bold
 * without colours); 94 layers x 128 experts at 80x24 clipped with what is left said and paged;
 * a dense model says it has none; off again, the chat pane is back. */
static void test_experts_panel(void **state) {
    fixture_t *f = *state;
    stats_experts_t *x = &f->stats.experts;
    x->n_layers = 2;
    x->n_experts = 8;
    x->layer[0] = 0;
    x->layer[1] = 2;
    x->window_s = 9.5;
    x->t = 99.9; /* refreshed just before the frame's time (100) */
    for (int e = 0; e < 8; e++)
        x->window[e] = 10;
    x->window[8 + 5] = 72;
    x->window[8 + 0] = 2; /* cold: under half the mean of 9.25 */
    f->v.experts = true;
    con_drawn_t out = draw(f);
    const layout_t *l = &f->v.lay;
    assert_int_equal(find_row("Expert load, live: 2 MoE layers (/experts or Esc: chat)"),
                     l->chat.y);
    assert_int_equal(find_row("Chat and output"), -1);
    assert_int_equal(find_row("It is 4."), -1);
    assert_int_equal(find_row("last 9.5 s: 2 MoE layers x 8 experts | 0 routed since start"),
                     l->chat.y + 1);
    int busiest = find_row("busiest L2 e5 72 tok"); /* beside it, or folded under it */
    assert_true(busiest == l->chat.y + 1 || busiest == l->chat.y + 2);
    int y0 = find_row("L0    |@@@@@@@@| x 1.00 80"), y2 = find_row("L2    |.    @  | x 7.78 74");
    assert_true(y0 > l->chat.y + 1 && y2 == y0 + 1);
    assert_int_equal(out.experts_top, 0);
    short hot, fair, cold;
    int x0 = l->chat.x + 7;
    attr_t ha = attrs_at(y2, x0 + 5, &hot);
    attrs_at(y0, x0, &fair);
    attrs_at(y2, x0, &cold);
    assert_true(hot != 0 && fair != 0 && cold != 0);
    assert_true(hot != fair && hot != cold && fair != cold);
    assert_true(ha & A_BOLD);
    /* live: a new snapshot, a new frame */
    x->window[8 + 5] = 2;
    x->window[8 + 1] = 72;
    draw(f);
    assert_true(find_row("L2    |.@   .  | x 7.58 76") > l->chat.y);
    assert_true(find_row("busiest L2 e1 72 tok") > 0);
    /* without colours: the glyphs, hot cells bold, cold ones dim */
    f->v.color = false;
    draw(f);
    y2 = find_row("L2    |.@   .  |");
    ha = attrs_at(y2, x0 + 1, &hot);
    assert_true((ha & A_BOLD) && hot == 0);
    assert_true(attrs_at(y2, x0, NULL) & A_DIM);
    f->v.color = con_draw_colors(true);

    /* Qwen3-235B-A22B's shape at 80x24: the rows that fit, how many more, paged */
    reopen(f, 80, 24);
    x->n_layers = 94;
    x->n_experts = 128;
    for (int r = 0; r < 94; r++) {
        x->layer[r] = (int16_t)r;
        for (int e = 0; e < 128; e++)
            x->window[r * 128 + e] = (uint32_t)(1 + (r + e) % 5);
    }
    out = draw(f);
    l = &f->v.lay;
    int last = l->chat.y + l->chat.h - 1;
    int shown = 0;
    for (int y = l->chat.y; y <= last; y++)
        shown += strncmp(row(y), "L", 1) == 0 && strstr(row(y), " |") != NULL;
    assert_true(shown >= 3);
    char want[128];
    snprintf(want, sizeof want, "Expert load, live: layers 1-%d of 94 (PgUp/PgDn", shown);
    assert_int_equal(find_row(want), l->chat.y);
    snprintf(want, sizeof want, "-- %d more MoE layers below (PgDn) --", 94 - shown);
    assert_int_equal(find_row(want), last);
    assert_int_equal(find_row("L0    |"), last - shown); /* under the title and summary */
    assert_true(find_row("L0    |") >= l->chat.y + 2);
    assert_non_null(strstr(row(find_row("L0    |")), "| x ")); /* the tail within the width */
    assert_int_equal(out.experts_rows, shown);
    f->v.experts_top = 40;
    out = draw(f);
    assert_int_equal(out.experts_top, 40);
    snprintf(want, sizeof want, "L40   |");
    assert_true(find_row(want) > l->chat.y);
    assert_true(find_row("more MoE layers below (PgDn), more above (PgUp) --") == last);
    f->v.experts_top = 1000; /* clamped to the last page */
    out = draw(f);
    assert_int_equal(out.experts_top, 94 - shown);
    assert_true(find_row("L93   |") > l->chat.y);
    snprintf(want, sizeof want, "-- %d more MoE layers above (PgUp) --", 94 - shown);
    assert_int_equal(find_row(want), last);

    /* a dense model */
    x->n_layers = 0;
    f->v.experts_top = 0;
    draw(f);
    assert_int_equal(find_row("Expert load (/experts or Esc: back to the chat)"), l->chat.y);
    assert_int_equal(find_row("no expert load: the model has no MoE layers"), l->chat.y + 1);
    /* off: the chat pane again */
    f->v.experts = false;
    draw(f);
    assert_true(find_row("Chat and output") == l->chat.y);
    assert_int_equal(find_row("Expert load"), -1);
}

/* The loading screen: the model, its shape and shards, the weights' bar as the backend takes
 * them, the KV cache once sized, the log under it; ASCII where asked. */
static void test_loading(void **state) {
    fixture_t *f = *state;
    engine_load_t l = {.phase = ENGINE_LOAD_OPEN, .t = 0.25};
    con_loading_t v = {.color = true, .model = "/models/Qwen3-8B", .load = &l, .log = f->help};
    con_draw_loading(f->d, &v);
    assert_int_equal(find_row("Tachyon: loading /models/Qwen3-8B"), 0);
    assert_true(find_row("model     reading its config") > 0);
    assert_int_equal(find_row("weights "), -1);
    l = (engine_load_t){.phase = ENGINE_LOAD_WEIGHTS,
                        .t = 2.5,
                        .model_type = "qwen3",
                        .n_layers = 36,
                        .shards = 5,
                        .bytes = 8ull << 30,
                        .bytes_total = 16ull << 30};
    con_draw_loading(f->d, &v);
    assert_true(find_row("model     qwen3, 36 layers") > 0);
    assert_true(find_row("shards    5 safetensors files mapped, 16.00 GiB") > 0);
    int y = find_row("weights   [");
    assert_true(y > 0 && strstr(row(y), "]  50%  8.00 GiB of 16.00 GiB"));
    assert_true(find_row("elapsed   2.5 s") > y);
    assert_true(find_row("help row 39") > y); /* the log's last lines */
    l.phase = ENGINE_LOAD_READY;
    l.bytes = l.bytes_total;
    l.kv_blocks = 1000;
    l.block_size = 16;
    l.kv_bytes = 3ull << 30;
    v.ascii = true;
    con_draw_loading(f->d, &v);
    assert_true(strstr(row(find_row("weights   [")), "100%") != NULL);
    assert_true(find_row("KV cache  1000 blocks x 16 tokens = 16000 tokens, 3.00 GiB") > 0);
    assert_true(find_row("- Log ---") >= 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_panels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_styles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ascii_mono, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scroll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench_and_flag, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vitals, setup, teardown),
        cmocka_unit_test(test_vitals_spec),
        cmocka_unit_test_setup_teardown(test_zoom_log_fkeys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requests_focus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_experts_panel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loading, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
