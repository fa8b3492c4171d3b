/* commands: see commands.h. */
#include "commands.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ui_experts.h"
#include "ui_reqs.h"

static const repl_command_t COMMANDS[] = {
    {"/help", NULL, "/help [COMMAND]", "list the commands, or explain one", REPL_HELP, true},
    {"/quit", "/exit", "/quit [--drain]",
     "leave the console (also /exit); --drain lets other clients' requests finish first", REPL_QUIT,
     false},
    {"/new", NULL, "/new", "start a new conversation", REPL_NEW, false},
    {"/system", NULL, "/system [TEXT]", "set the conversation's system prompt (no text clears it)",
     REPL_SYSTEM, true},
    {"/think", NULL, "/think on|off", "turn the model's reasoning on or off", REPL_THINK, true},
    {"/set", NULL, "/set FLAG VALUE", "change an engine flag", REPL_SET, true},
    {"/get", NULL, "/get FLAG", "show an engine flag's value, default and range", REPL_GET, true},
    {"/flags", NULL, "/flags [PREFIX|diff]",
     "list the engine flags and their values (diff: the tachyon serve line that reproduces them)",
     REPL_FLAGS, true},
    {"/bench", NULL, "/bench PROFILE [OPTIONS]",
     "run a benchmark profile against the embedded server (/bench stop ends it)", REPL_BENCH, true},
    {"/sweep", NULL, "/sweep FLAG V1,V2,... PROFILE [OPTIONS]",
     "run a profile once per value of a live flag: table and throughput/latency plot", REPL_SWEEP,
     true},
    {"/results", NULL, "/results", "list the benchmark runs and their flag sets", REPL_RESULTS,
     false},
    {"/compare", NULL, "/compare [A B...]",
     "compare runs (numbers or files) with base A (default: the last two of a profile)",
     REPL_COMPARE, true},
    {"/tools", NULL, "/tools [FILE|off]",
     "chat with the tools of an OpenAI tools JSON file (none: list them; off: no tools)",
     REPL_TOOLS, true},
    {"/experts", NULL, "/experts [on|off|print]",
     "live expert-load heat map of an MoE model in the chat pane's place (toggles; print: a copy)",
     REPL_EXPERTS, true},
    {"/requests", "/reqs", "/requests [sort KEY [asc|desc] | filter [WHAT]]",
     "sort or filter the requests table (F6 focuses it: select, sort, filter, cancel)",
     REPL_REQUESTS, true},
    {"/cancel", NULL, "/cancel [ID]",
     "cancel a request (none: the one selected in the requests table); it ends with abort",
     REPL_CANCEL, true},
    {"/clear", NULL, "/clear", "clear the chat pane", REPL_CLEAR, false},
};
enum { N_COMMANDS = sizeof COMMANDS / sizeof COMMANDS[0] };

const repl_command_t *repl_commands(int *n) {
    *n = N_COMMANDS;
    return COMMANDS;
}

const repl_command_t *repl_command_find(const char *name) {
    if (!name || !*name) return NULL;
    for (int i = 0; i < N_COMMANDS; i++) {
        const repl_command_t *c = &COMMANDS[i];
        const char *names[2] = {c->name, c->alias};
        for (int k = 0; k < 2; k++)
            if (names[k] && (strcmp(names[k], name) == 0 || strcmp(names[k] + 1, name) == 0))
                return c;
    }
    return NULL;
}

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* ------------------------------------------------------------------------------------------ */
/* Parsing                                                                                     */

/* Splits s into unquoted arguments stored from out->buf + at. */
static int split_args(const char *s, repl_cmd_t *out, size_t at, err_t *err) {
    char *w = out->buf + at;
    out->argc = 0;
    for (;;) {
        while (is_blank(*s))
            s++;
        if (!*s) return 0;
        if (out->argc == REPL_MAX_ARGS)
            return err_set(err, "too many arguments (at most %d)", REPL_MAX_ARGS);
        out->argv[out->argc++] = w;
        bool quoted = false;
        while (*s && (quoted || !is_blank(*s))) {
            if (*s == '\\') {
                if (!s[1]) return err_set(err, "a backslash ends the line; write \\\\ for one");
                *w++ = s[1];
                s += 2;
            } else if (*s == '"') {
                quoted = !quoted;
                s++;
            } else {
                *w++ = *s++;
            }
        }
        if (quoted) return err_set(err, "unterminated quote");
        *w++ = '\0';
    }
}

static const char *profile_list(char *buf, size_t size) {
    size_t n = 0;
    buf[0] = '\0';
    for (const bench_profile_t *p = bench_profiles(); p && p->name; p++) {
        int k = snprintf(buf + n, size - n, "%s%s", n ? ", " : "", p->name);
        if (k < 0 || (size_t)k >= size - n) break;
        n += (size_t)k;
    }
    return buf;
}

static bool known_profile(const char *name) {
    for (const bench_profile_t *p = bench_profiles(); p && p->name; p++)
        if (strcmp(p->name, name) == 0) return true;
    return false;
}

static int usage(const repl_command_t *c, err_t *err) {
    if (c->kind == REPL_BENCH) {
        char list[512];
        return err_set(err, "usage: %s, or /bench stop; profiles: %s", c->usage,
                       profile_list(list, sizeof list));
    }
    if (!c->takes_args) return err_set(err, "%s takes no arguments", c->name);
    return err_set(err, "usage: %s", c->usage);
}

/* The command's arguments, checked. */
static int parse_args(const repl_command_t *c, const char *rest, repl_cmd_t *out, err_t *err) {
    if (c->kind == REPL_SYSTEM) {
        while (is_blank(*rest))
            rest++;
        if (*rest == '"') {
            if (split_args(rest, out, 0, err) < 0) return -1;
            if (out->argc != 1) return err_set(err, "usage: /system TEXT (or one quoted text)");
            out->text = out->argv[0];
            return 0;
        }
        size_t n = strlen(rest);
        while (n > 0 && is_blank(rest[n - 1]))
            n--;
        memcpy(out->buf, rest, n);
        out->buf[n] = '\0';
        out->text = out->buf;
        out->argc = n > 0;
        out->argv[0] = out->buf;
        return 0;
    }
    if (split_args(rest, out, 0, err) < 0) return -1;
    int argc = out->argc;
    char **argv = out->argv;
    switch (c->kind) {
        case REPL_HELP:
            if (argc > 1) return usage(c, err);
            if (argc == 1 && !repl_command_find(argv[0]))
                return err_set(err, "unknown command %s%s; /help lists them",
                               argv[0][0] == '/' ? "" : "/", argv[0]);
            return 0;
        case REPL_THINK: {
            static const char *const on[] = {"on", "true", "yes", "1"};
            static const char *const off[] = {"off", "false", "no", "0"};
            if (argc != 1) return usage(c, err);
            for (int i = 0; i < 4; i++) {
                if (strcmp(argv[0], on[i]) == 0) {
                    out->on = true;
                    return 0;
                }
                if (strcmp(argv[0], off[i]) == 0) {
                    out->on = false;
                    return 0;
                }
            }
            return usage(c, err);
        }
        case REPL_SET:
        case REPL_GET: {
            if (argc != (c->kind == REPL_SET ? 2 : 1)) return usage(c, err);
            out->flag = flags_find(argv[0]);
            if (!out->flag) return err_set(err, "unknown flag %s; /flags lists them", argv[0]);
            if (c->kind == REPL_SET) {
                /* Check type and range on a scratch copy: the engine applies it for real. */
                flag_values_t scratch;
                flags_init(&scratch);
                if (flags_set(out->flag, argv[1], &scratch, err) < 0) return -1;
            }
            return 0;
        }
        case REPL_FLAGS:
            return argc > 1 ? usage(c, err) : 0;
        case REPL_BENCH:
            if (argc == 0) return usage(c, err);
            if (strcmp(argv[0], "stop") == 0) {
                if (argc != 1) return err_set(err, "usage: /bench stop");
                out->kind = REPL_BENCH_STOP;
                out->argc = 0;
                return 0;
            }
            if (!known_profile(argv[0])) {
                char list[512];
                return err_set(err, "unknown profile %s; profiles: %s", argv[0],
                               profile_list(list, sizeof list));
            }
            return 0;
        case REPL_SWEEP: {
            if (argc < 3) return usage(c, err);
            out->flag = flags_find(argv[0]);
            if (!out->flag) return err_set(err, "unknown flag %s; /flags lists them", argv[0]);
            if (out->flag->apply != FLAG_LIVE)
                return err_set(err, "/sweep takes a live flag (%s needs a rebuild or a reload)",
                               out->flag->name);
            if (!known_profile(argv[2])) {
                char list[512];
                return err_set(err, "unknown profile %s; profiles: %s", argv[2],
                               profile_list(list, sizeof list));
            }
            char value[64];
            for (const char *p = argv[1];;) { /* each value checked as /set checks it */
                size_t n = strcspn(p, ",");
                if (n == 0 || n >= sizeof value)
                    return err_set(err, "/sweep: \"%s\" is not a list of values like 64,128,256",
                                   argv[1]);
                memcpy(value, p, n);
                value[n] = '\0';
                flag_values_t scratch;
                flags_init(&scratch);
                if (flags_set(out->flag, value, &scratch, err) < 0) return -1;
                if (!p[n]) break;
                p += n + 1;
            }
            return 0;
        }
        case REPL_COMPARE:
            return argc == 1 ? usage(c, err) : 0;
        case REPL_TOOLS:
            if (argc > 1) return usage(c, err);
            if (argc == 1 && strcmp(argv[0], "off") == 0) {
                out->kind = REPL_TOOLS_OFF;
                out->argc = 0;
            }
            return 0;
        case REPL_QUIT:
            out->on = argc == 1 && strcmp(argv[0], "--drain") == 0;
            return argc > 1 || (argc == 1 && !out->on) ? err_set(err, "usage: %s", c->usage) : 0;
        case REPL_REQUESTS:
            if (argc == 0) return 0;
            if (!strcmp(argv[0], "sort")) {
                if (argc < 2 || argc > 3) return usage(c, err);
                if (ui_req_sort_parse(argv[1]) < 0)
                    return err_set(err, "unknown sort key %s; keys: age ttft prompt gen state id",
                                   argv[1]);
                if (argc == 3 && strcmp(argv[2], "asc") && strcmp(argv[2], "desc"))
                    return usage(c, err);
                return 0;
            }
            if (!strcmp(argv[0], "filter")) return argc > 2 ? usage(c, err) : 0;
            return usage(c, err);
        case REPL_CANCEL:
            return argc > 1 ? usage(c, err) : 0;
        case REPL_EXPERTS:
            if (argc > 1 || (argc == 1 && strcmp(argv[0], "on") && strcmp(argv[0], "off") &&
                             strcmp(argv[0], "print")))
                return usage(c, err);
            return 0;
        default:
            return argc > 0 ? usage(c, err) : 0;
    }
}

int repl_parse(const char *line, repl_cmd_t *out, err_t *err) {
    out->kind = REPL_EMPTY;
    out->text = "";
    out->on = false;
    out->flag = NULL;
    out->argc = 0;
    out->buf[0] = '\0';
    size_t len = strlen(line);
    if (len >= REPL_LINE_MAX)
        return err_set(err, "line too long (at most %d bytes)", REPL_LINE_MAX - 1);
    const char *p = line;
    while (is_blank(*p))
        p++;
    if (!*p) return 0;
    if (p[0] != '/' || p[1] == '/') {
        /* "//text" escapes a message that starts with '/'. */
        const char *msg = p[0] == '/' ? p + 1 : line;
        memcpy(out->buf, msg, strlen(msg) + 1);
        out->kind = REPL_CHAT;
        out->text = out->buf;
        return 0;
    }
    size_t n = 0;
    while (p[n] && !is_blank(p[n]))
        n++;
    char name[64];
    const repl_command_t *c = NULL;
    if (n < sizeof name) {
        memcpy(name, p, n);
        name[n] = '\0';
        c = repl_command_find(name);
    }
    if (!c)
        return err_set(err, "unknown command %.*s; /help lists them", (int)(n > 40 ? 40 : n), p);
    out->kind = c->kind;
    if (parse_args(c, p + n, out, err) < 0) {
        out->kind = REPL_EMPTY;
        out->text = "";
        out->flag = NULL;
        out->argc = 0;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Help                                                                                        */

typedef struct {
    char *buf;
    size_t size, n; /* n: bytes needed so far */
} outbuf_t;

static void put(outbuf_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(outbuf_t *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->n < o->size ? o->size - o->n : 0;
    int k = vsnprintf(room ? o->buf + o->n : NULL, room, fmt, ap);
    va_end(ap);
    if (k > 0) o->n += (size_t)k;
}

int repl_help(const char *name, char *buf, size_t size, err_t *err) {
    outbuf_t o = {buf, size, 0};
    if (size > 0) buf[0] = '\0';
    if (!name || !*name) {
        int w = 0;
        for (int i = 0; i < N_COMMANDS; i++) {
            int k = (int)strlen(COMMANDS[i].usage);
            if (k > w) w = k;
        }
        for (int i = 0; i < N_COMMANDS; i++)
            put(&o, "%-*s  %s\n", w, COMMANDS[i].usage, COMMANDS[i].help);
        put(&o, "Other text is a chat message (//text sends /text). Tab completes.\n");
        return (int)o.n;
    }
    const repl_command_t *c = repl_command_find(name);
    if (!c)
        return err_set(err, "unknown command %s%s; /help lists them", name[0] == '/' ? "" : "/",
                       name);
    put(&o, "usage: %s\n%s\n", c->usage, c->help);
    if (c->alias) put(&o, "also %s\n", c->alias);
    switch (c->kind) {
        case REPL_SET:
        case REPL_GET:
        case REPL_FLAGS:
            put(&o, "A change applies live (from the next engine step), after a rebuild of the KV "
                    "cache (in-flight requests are recomputed, none lost) or at a reload (the "
                    "engine reopened in place: requests in flight finish, new ones get 503 until "
                    "it serves again); /flags shows which. A bad value changes nothing and says "
                    "what the flag takes.\n");
            break;
        case REPL_SWEEP:
            put(&o, "For each value: the flag is set (live), warm-up requests run, then the "
                    "profile; then a table of the points and a plot of output throughput against "
                    "mean TPOT, the Pareto front and the best point marked. Each point is saved "
                    "as a run (/results, /compare); the flag gets its value back at the end. "
                    "/bench stop ends it. Example: /sweep max-num-seqs 64,128,256 short\n");
            break;
        case REPL_BENCH:
            put(&o, "Options are tachyon bench's (--num-prompts N, --request-rate R, "
                    "--max-concurrency N, ...). Profiles:\n");
            for (const bench_profile_t *p = bench_profiles(); p && p->name; p++)
                put(&o, "  %-16s %s\n", p->name, p->description ? p->description : "");
            break;
        case REPL_QUIT:
            put(&o, "Requests of other clients in flight are not cut off unasked: /quit and Ctrl-C "
                    "say how many, and a second one aborts them. --drain refuses new requests and "
                    "quits once those in flight have finished (at most --shutdown-timeout "
                    "seconds), as tachyon serve does on SIGTERM; so does a SIGTERM here. Ctrl-C "
                    "first stops the console's own reply and benchmark.\n");
            break;
        case REPL_TOOLS:
            put(&o, "FILE holds an OpenAI \"tools\" array (or a request body with one): "
                    "[{\"type\": \"function\", \"function\": {\"name\": ..., \"description\": ..., "
                    "\"parameters\": {JSON schema}}}, ...]. The chat's prompt then offers them "
                    "to the model (its chat template renders them) and the calls in its replies "
                    "are shown apart from the text, name and arguments, as the server's "
                    "tool_choice \"auto\" finds them (--tool-call-parser, or the parser the chat "
                    "template teaches). The console does not run the tools.\n");
            break;
        case REPL_REQUESTS:
            put(&o, "Keys: age (secs), ttft, prompt, gen (or tokens), state, id; desc is largest "
                    "(oldest) first. Filters: live (the default), running, waiting, finished, "
                    "errors (abort or error), all; any other word keeps the ids holding it. The "
                    "table lists the engine's live requests and its last 64 finished ones. F6 "
                    "focuses it (over the charts and the chat): Up/Down/PgUp/PgDn select, s the "
                    "next sort key, r reverses, f the next filter, c cancels the selected request "
                    "(y confirms), Esc or F6 goes back; a click selects a row.\n");
            break;
        case REPL_CANCEL:
            put(&o, "The engine cancels it as when its client does: each unfinished choice ends "
                    "with finish reason abort, which the client sees on its stream.\n");
            break;
        case REPL_EXPERTS:
            put(&o,
                "The panel takes the chat pane's place and redraws from each engine_stats() "
                "sample (4 a second): one row per MoE layer, its experts left to right in cells "
                "(several a cell when they do not fit), each a glyph \"%s\" by its tokens "
                "against the row's busiest cell and a colour by its load against the layer's "
                "mean expert: blue under half, green fair, yellow up to 3x, red above (bold "
                "without colours); then the layer's busiest / mean expert and its tokens. The "
                "counts are the engine's last ~10 s, or those since start when nothing was "
                "routed in them. The summary names the busiest expert and the most unbalanced "
                "layer. PgUp/PgDn (or the wheel) page through layers that do not fit; /experts, "
                "/experts off or Esc gives the chat pane back (chat and commands work "
                "meanwhile; a command that prints closes the panel). print: the map as text in "
                "the chat pane, as of now. A dense model has no experts, and the panel says "
                "so.\n",
                UI_EXPERTS_RAMP);
            break;
        case REPL_COMPARE:
            put(&o, "Runs are named by their number in /results or by a result file (a path, or a "
                    "name in the results directory). Without arguments: the newest complete run "
                    "against the complete run of its profile before it. Runs in which no request "
                    "succeeded are not kept; a metric one side lacks shows n/a.\n");
            break;
        default:
            break;
    }
    return (int)o.n;
}

/* ------------------------------------------------------------------------------------------ */
/* Completion                                                                                  */

static void add_cand(le_completion_t *out, const char *s) {
    for (int i = 0; i < out->n; i++)
        if (strcmp(out->cand[i], s) == 0) return;
    if (out->n < LE_MAX_CANDIDATES) out->cand[out->n++] = s;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Copies s into out->buf (after the used part); NULL when it does not fit. */
static const char *keep(le_completion_t *out, size_t *used, const char *s) {
    size_t n = strlen(s) + 1;
    if (*used + n > sizeof out->buf) return NULL;
    char *d = out->buf + *used;
    memcpy(d, s, n);
    *used += n;
    return d;
}

/* Sorts the candidates; best becomes the index of prefer (when it is one), else 0. */
static int finish(le_completion_t *out, const char *prefer) {
    qsort(out->cand, (size_t)out->n, sizeof out->cand[0], cmp_str);
    out->best = out->n > 0 ? 0 : -1;
    for (int i = 0; prefer && i < out->n; i++)
        if (strcmp(out->cand[i], prefer) == 0) out->best = i;
    return out->n;
}

static void complete_flag_names(const char *prefix, le_completion_t *out) {
    const char *names[LE_MAX_CANDIDATES];
    int k = flags_complete_name(prefix, names, LE_MAX_CANDIDATES);
    for (int i = 0; i < k; i++)
        add_cand(out, names[i]);
}

static int complete_values(const repl_complete_ctx_t *ctx, const char *flag, const char *prefix,
                           le_completion_t *out) {
    const flag_def_t *f = flags_find(flag);
    if (!f) return 0;
    flag_values_t defaults;
    const flag_values_t *v = ctx && ctx->values ? ctx->values : NULL;
    if (!v) {
        flags_init(&defaults);
        v = &defaults;
    }
    size_t used = 0;
    char cur[128];
    flags_format(f, v, cur, sizeof cur);
    const char *vals[LE_MAX_CANDIDATES];
    int k = flags_complete_value(f, prefix, vals, LE_MAX_CANDIDATES);
    for (int i = 0; i < k; i++)
        add_cand(out, vals[i]);
    size_t pl = strlen(prefix);
    if (f->type == FLAG_INT || f->type == FLAG_FLOAT || f->type == FLAG_SIZE) {
        const char *c = strncmp(cur, prefix, pl) == 0 ? keep(out, &used, cur) : NULL;
        if (c) add_cand(out, c);
        if (f->def && strncmp(f->def, prefix, pl) == 0) add_cand(out, f->def);
    }
    return finish(out, cur);
}

int repl_complete(void *user, const char *line, size_t cursor, le_completion_t *out) {
    const repl_complete_ctx_t *ctx = user;
    out->n = 0;
    out->best = -1;
    out->space_after = false;
    size_t p = 0;
    while (p < cursor && is_blank(line[p]))
        p++;
    if (p >= cursor || line[p] != '/' || (p + 1 < cursor && line[p + 1] == '/')) return 0;
    size_t e = p;
    while (e < cursor && !is_blank(line[e]))
        e++;
    if (e == cursor) {
        /* The command name itself. */
        size_t wl = cursor - p;
        for (int i = 0; i < N_COMMANDS; i++) {
            const char *names[2] = {COMMANDS[i].name, COMMANDS[i].alias};
            for (int k = 0; k < 2; k++)
                if (names[k] && strncmp(names[k], line + p, wl) == 0) add_cand(out, names[k]);
        }
        out->start = p;
        finish(out, NULL);
        if (out->n == 1) out->space_after = repl_command_find(out->cand[0])->takes_args;
        return out->n;
    }
    char cmd[32];
    if (e - p >= sizeof cmd) return 0;
    memcpy(cmd, line + p, e - p);
    cmd[e - p] = '\0';
    const repl_command_t *c = repl_command_find(cmd);
    if (!c) return 0;

    /* Words between the command and the cursor; the last one (maybe empty) is completed. */
    char words[4][128];
    int nw = 0;
    size_t q = e, start = cursor;
    for (;;) {
        while (q < cursor && is_blank(line[q]))
            q++;
        size_t ws = q;
        while (q < cursor && !is_blank(line[q]))
            q++;
        if (q == cursor) {
            start = ws;
            break;
        }
        if (nw == 4 || q - ws >= sizeof words[0]) return 0;
        memcpy(words[nw], line + ws, q - ws);
        words[nw++][q - ws] = '\0';
    }
    char prefix[128];
    if (cursor - start >= sizeof prefix) return 0;
    memcpy(prefix, line + start, cursor - start);
    prefix[cursor - start] = '\0';
    size_t pl = strlen(prefix);
    out->start = start;

    switch (c->kind) {
        case REPL_HELP:
            if (nw != 0) return 0;
            for (int i = 0; i < N_COMMANDS; i++) {
                const char *names[2] = {COMMANDS[i].name, COMMANDS[i].alias};
                for (int k = 0; k < 2; k++)
                    if (names[k] && strncmp(names[k] + 1, prefix, pl) == 0)
                        add_cand(out, names[k] + 1);
            }
            return finish(out, NULL);
        case REPL_SET:
            if (nw == 0) {
                complete_flag_names(prefix, out);
                finish(out, NULL);
                out->space_after = true;
                return out->n;
            }
            return nw == 1 ? complete_values(ctx, words[0], prefix, out) : 0;
        case REPL_GET:
        case REPL_FLAGS:
            if (nw != 0) return 0;
            complete_flag_names(prefix, out);
            if (c->kind == REPL_FLAGS && strncmp("diff", prefix, pl) == 0) add_cand(out, "diff");
            return finish(out, NULL);
        case REPL_SWEEP: /* FLAG, the values (none offered), PROFILE */
            if (nw == 0) {
                complete_flag_names(prefix, out);
                finish(out, NULL);
                out->space_after = true;
                return out->n;
            }
            if (nw != 2) return 0;
            for (const bench_profile_t *b = bench_profiles(); b && b->name; b++)
                if (strncmp(b->name, prefix, pl) == 0) add_cand(out, b->name);
            return finish(out, NULL);
        case REPL_QUIT:
            if (nw == 0 && strncmp("--drain", prefix, pl) == 0) add_cand(out, "--drain");
            return finish(out, NULL);
        case REPL_THINK:
            if (nw != 0) return 0;
            if (strncmp("on", prefix, pl) == 0) add_cand(out, "on");
            if (strncmp("off", prefix, pl) == 0) add_cand(out, "off");
            return finish(out, NULL);
        case REPL_TOOLS:
            if (nw == 0 && strncmp("off", prefix, pl) == 0) add_cand(out, "off");
            return finish(out, NULL);
        case REPL_EXPERTS:
            if (nw == 0) {
                static const char *const subs[] = {"off", "on", "print"};
                for (int i = 0; i < 3; i++)
                    if (strncmp(subs[i], prefix, pl) == 0) add_cand(out, subs[i]);
            }
            return finish(out, NULL);
        case REPL_REQUESTS:
            if (nw == 0) {
                static const char *const subs[] = {"filter", "sort"};
                for (int i = 0; i < 2; i++)
                    if (strncmp(subs[i], prefix, pl) == 0) add_cand(out, subs[i]);
            } else if (nw == 1 && !strcmp(words[0], "sort")) {
                for (int k = 0; k < UI_REQ_N_SORTS; k++)
                    if (strncmp(ui_req_sort_name(k), prefix, pl) == 0)
                        add_cand(out, ui_req_sort_name(k));
            } else if (nw == 1 && !strcmp(words[0], "filter")) {
                for (int k = 0; k < UI_REQ_N_FILTERS; k++)
                    if (strncmp(ui_req_filter_name(k), prefix, pl) == 0)
                        add_cand(out, ui_req_filter_name(k));
            } else if (nw == 2 && !strcmp(words[0], "sort")) {
                if (strncmp("asc", prefix, pl) == 0) add_cand(out, "asc");
                if (strncmp("desc", prefix, pl) == 0) add_cand(out, "desc");
            }
            return finish(out, NULL);
        case REPL_BENCH:
            if (nw != 0) return 0;
            for (const bench_profile_t *b = bench_profiles(); b && b->name; b++)
                if (strncmp(b->name, prefix, pl) == 0) add_cand(out, b->name);
            if (strncmp("stop", prefix, pl) == 0) add_cand(out, "stop");
            return finish(out, NULL);
        default:
            return 0;
    }
}
