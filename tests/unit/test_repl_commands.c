/* commands: parsing of every REPL command (arguments, arity, quoting, escapes, errors), chat
 * lines and the "//" escape, help text, and completion of command names, flag names, flag
 * values and bench profiles, alone and through the line editor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bench.h"
#include "commands.h"
#include "lineedit.h"

static repl_cmd_t cmd;
static err_t err;

static void ok(const char *line, repl_kind_t kind, int argc) {
    memset(&err, 0, sizeof err);
    if (repl_parse(line, &cmd, &err) < 0) fail_msg("%s: %s", line, err.msg);
    assert_int_equal(cmd.kind, kind);
    assert_int_equal(cmd.argc, argc);
}

/* Expects an error containing want; the command comes back empty. */
static void bad(const char *line, const char *want) {
    memset(&err, 0, sizeof err);
    if (repl_parse(line, &cmd, &err) == 0) fail_msg("accepted \"%s\"", line);
    if (!strstr(err.msg, want)) fail_msg("%s: \"%s\" lacks \"%s\"", line, err.msg, want);
    assert_int_equal(cmd.kind, REPL_EMPTY);
    assert_int_equal(cmd.argc, 0);
    assert_null(cmd.flag);
}

static void test_chat_and_empty(void **state) {
    (void)state;
    ok("", REPL_EMPTY, 0);
    ok("  \t ", REPL_EMPTY, 0);
    ok("hello world", REPL_CHAT, 0);
    assert_string_equal(cmd.text, "hello world");
    ok("  indented /not a command ", REPL_CHAT, 0);
    assert_string_equal(cmd.text, "  indented /not a command ");
    ok("//etc/passwd is a path", REPL_CHAT, 0);
    assert_string_equal(cmd.text, "/etc/passwd is a path");
    ok("  //help", REPL_CHAT, 0);
    assert_string_equal(cmd.text, "/help");
    ok("h\xC3\xA9llo \xE4\xB8\xAD", REPL_CHAT, 0);
    assert_string_equal(cmd.text, "h\xC3\xA9llo \xE4\xB8\xAD");
}

static void test_simple_commands(void **state) {
    (void)state;
    ok("/help", REPL_HELP, 0);
    ok("/help set", REPL_HELP, 1);
    assert_string_equal(cmd.argv[0], "set");
    ok("/help /bench", REPL_HELP, 1);
    bad("/help nope", "unknown command /nope");
    bad("/help set get", "usage: /help [COMMAND]");
    ok("/quit", REPL_QUIT, 0);
    ok("/exit", REPL_QUIT, 0);
    ok("  /quit  ", REPL_QUIT, 0);
    assert_false(cmd.on);
    ok("/quit --drain", REPL_QUIT, 1);
    assert_true(cmd.on);
    bad("/quit now", "usage: /quit [--drain]");
    bad("/quit --drain now", "usage: /quit [--drain]");
    ok("/new", REPL_NEW, 0);
    bad("/new x", "/new takes no arguments");
    ok("/clear", REPL_CLEAR, 0);
    ok("/results", REPL_RESULTS, 0);
    ok("/experts", REPL_EXPERTS, 0);
    ok("/experts off", REPL_EXPERTS, 1);
    assert_string_equal(cmd.argv[0], "off");
    ok("/experts on", REPL_EXPERTS, 1);
    ok("/experts print", REPL_EXPERTS, 1);
    bad("/experts 3", "usage: /experts [on|off|print]");
    bad("/experts on off", "usage: /experts [on|off|print]");
    ok("/flags", REPL_FLAGS, 0);
    ok("/flags max", REPL_FLAGS, 1);
    ok("/flags diff", REPL_FLAGS, 1);
    bad("/flags a b", "usage: /flags [PREFIX|diff]");
    ok("/sweep max-num-seqs 64,128 short --num-prompts 20", REPL_SWEEP, 5);
    assert_string_equal(cmd.flag->name, "max-num-seqs");
    assert_string_equal(cmd.argv[1], "64,128");
    assert_string_equal(cmd.argv[2], "short");
    bad("/sweep max-num-seqs 64,128", "usage: /sweep FLAG V1,V2,... PROFILE [OPTIONS]");
    bad("/sweep nope 1,2 short", "unknown flag nope");
    bad("/sweep block-size 16,32 short", "/sweep takes a live flag (block-size needs a rebuild");
    bad("/sweep max-num-seqs 0,4 short", "max-num-seqs must be an integer in [1");
    bad("/sweep max-num-seqs 4,,8 short", "is not a list of values like 64,128,256");
    bad("/sweep max-num-seqs 4,8 nosuch", "unknown profile nosuch");
    ok("/tools", REPL_TOOLS, 0);
    ok("/tools \"my tools.json\"", REPL_TOOLS, 1);
    assert_string_equal(cmd.argv[0], "my tools.json");
    ok("/tools off", REPL_TOOLS_OFF, 0);
    ok("/requests", REPL_REQUESTS, 0);
    ok("/reqs sort ttft", REPL_REQUESTS, 2);
    ok("/requests sort tokens asc", REPL_REQUESTS, 3);
    ok("/requests filter errors", REPL_REQUESTS, 2);
    ok("/requests filter cmpl-12ab", REPL_REQUESTS, 2); /* an id's part */
    ok("/requests filter", REPL_REQUESTS, 1);
    bad("/requests sort speed", "unknown sort key speed; keys: age ttft prompt gen state id");
    bad("/requests sort age up", "usage: /requests [sort KEY [asc|desc] | filter [WHAT]]");
    bad("/requests shuffle", "usage: /requests");
    bad("/requests filter a b", "usage: /requests");
    ok("/cancel", REPL_CANCEL, 0);
    ok("/cancel cmpl-12ab", REPL_CANCEL, 1);
    bad("/cancel a b", "usage: /cancel [ID]");
    ok("/tools ./off", REPL_TOOLS, 1); /* a file named off */
    bad("/tools a b", "usage: /tools [FILE|off]");
    bad("/foo", "unknown command /foo; /help lists them");
    bad("/foo bar", "unknown command /foo; /help lists them");
    bad("/", "unknown command /;");
    bad("/HELP", "unknown command /HELP");
    bad("/helpme", "unknown command /helpme");
}

static void test_system_and_think(void **state) {
    (void)state;
    ok("/system You are a \"terse\" assistant.  ", REPL_SYSTEM, 1);
    assert_string_equal(cmd.text, "You are a \"terse\" assistant.");
    ok("/system \"  be brief \"", REPL_SYSTEM, 1);
    assert_string_equal(cmd.text, "  be brief ");
    ok("/system", REPL_SYSTEM, 0);
    assert_string_equal(cmd.text, "");
    ok("/system   ", REPL_SYSTEM, 0);
    assert_string_equal(cmd.text, "");
    bad("/system \"a\" \"b\"", "usage: /system");
    bad("/system \"open", "unterminated quote");

    ok("/think on", REPL_THINK, 1);
    assert_true(cmd.on);
    ok("/think off", REPL_THINK, 1);
    assert_false(cmd.on);
    ok("/think true", REPL_THINK, 1);
    assert_true(cmd.on);
    ok("/think false", REPL_THINK, 1);
    assert_false(cmd.on);
    bad("/think maybe", "usage: /think on|off");
    bad("/think", "usage: /think on|off");
    bad("/think on off", "usage: /think on|off");
}

static void test_set_get(void **state) {
    (void)state;
    ok("/set max-num-seqs 512", REPL_SET, 2);
    assert_non_null(cmd.flag);
    assert_string_equal(cmd.flag->name, "max-num-seqs");
    assert_string_equal(cmd.argv[0], "max-num-seqs");
    assert_string_equal(cmd.argv[1], "512");
    ok("/set max_num_seqs \"4\"", REPL_SET, 2); /* vLLM's underscores; quotes removed */
    assert_string_equal(cmd.flag->name, "max-num-seqs");
    assert_string_equal(cmd.argv[1], "4");
    ok("/set enable-prefix-caching off", REPL_SET, 2);
    ok("/set scheduling-policy priority", REPL_SET, 2);
    ok("/set kv-cache-memory 1.5GiB", REPL_SET, 2);
    bad("/set max-num-seqs abc", "max-num-seqs"); /* the table says what it takes */
    bad("/set max-num-seqs 0", "max-num-seqs");
    bad("/set scheduling-policy lifo", "scheduling-policy");
    bad("/set nope 1", "unknown flag nope; /flags lists them");
    bad("/set max-num-seqs", "usage: /set FLAG VALUE");
    bad("/set", "usage: /set FLAG VALUE");
    bad("/set max-num-seqs 4 5", "usage: /set FLAG VALUE");
    ok("/get max-num-batched-tokens", REPL_GET, 1);
    assert_string_equal(cmd.flag->name, "max-num-batched-tokens");
    bad("/get", "usage: /get FLAG");
    bad("/get a b", "usage: /get FLAG");
    bad("/get nope", "unknown flag nope");
}

static void test_bench_and_compare(void **state) {
    (void)state;
    ok("/bench short --num-prompts 20", REPL_BENCH, 3);
    assert_string_equal(cmd.argv[0], "short");
    assert_string_equal(cmd.argv[1], "--num-prompts");
    assert_string_equal(cmd.argv[2], "20");
    for (const bench_profile_t *p = bench_profiles(); p->name; p++) {
        char line[128];
        snprintf(line, sizeof line, "/bench %s", p->name);
        ok(line, REPL_BENCH, 1);
    }
    ok("/bench stop", REPL_BENCH_STOP, 0);
    bad("/bench stop now", "usage: /bench stop");
    bad("/bench", "profiles: ");
    bad("/bench", "short");
    bad("/bench nope", "unknown profile nope; profiles: ");
    ok("/compare", REPL_COMPARE, 0);
    ok("/compare 1 2", REPL_COMPARE, 2);
    ok("/compare base a b", REPL_COMPARE, 3);
    bad("/compare 1", "usage: /compare [A B...]");
}

static void test_quoting(void **state) {
    (void)state;
    ok("/compare \"run one\" b\\ c", REPL_COMPARE, 2);
    assert_string_equal(cmd.argv[0], "run one");
    assert_string_equal(cmd.argv[1], "b c");
    ok("/compare \"\" x", REPL_COMPARE, 2);
    assert_string_equal(cmd.argv[0], "");
    ok("/compare a\"b c\"d \\\"q\\\\", REPL_COMPARE, 2);
    assert_string_equal(cmd.argv[0], "ab cd");
    assert_string_equal(cmd.argv[1], "\"q\\");
    ok("/bench short --extra-body \"{\\\"temperature\\\": 0}\"", REPL_BENCH, 3);
    assert_string_equal(cmd.argv[2], "{\"temperature\": 0}");
    ok("/compare\t\"x\"\t  y", REPL_COMPARE, 2);
    assert_string_equal(cmd.argv[0], "x");
    bad("/compare \"a b", "unterminated quote");
    bad("/compare a b\\", "backslash");

    char line[REPL_LINE_MAX + 8];
    memset(line, 'a', sizeof line);
    line[sizeof line - 1] = '\0';
    bad(line, "line too long");
    char many[512] = "/compare";
    for (int i = 0; i < REPL_MAX_ARGS + 1; i++)
        strcat(many, " x");
    bad(many, "too many arguments");
}

static void test_help(void **state) {
    (void)state;
    char buf[4096];
    err_t e = {{0}};
    int n = repl_help(NULL, buf, sizeof buf, &e);
    assert_int_equal(n, (int)strlen(buf));
    int nc;
    const repl_command_t *cs = repl_commands(&nc);
    assert_int_equal(nc, 17); /* 13, /sweep (main), /experts (MoE), /requests and /cancel */
    for (int i = 0; i < nc; i++) {
        assert_non_null(strstr(buf, cs[i].usage));
        assert_non_null(strstr(buf, cs[i].help));
        assert_ptr_equal(repl_command_find(cs[i].name), &cs[i]);
        assert_ptr_equal(repl_command_find(cs[i].name + 1), &cs[i]);
    }
    assert_ptr_equal(repl_command_find("exit"), repl_command_find("/quit"));
    assert_null(repl_command_find("nope"));
    assert_null(repl_command_find(""));
    assert_non_null(strstr(buf, "/set FLAG VALUE"));
    assert_true(repl_help("set", buf, sizeof buf, &e) > 0);
    assert_non_null(strstr(buf, "usage: /set FLAG VALUE"));
    assert_non_null(strstr(buf, "rebuild"));
    assert_true(repl_help("/bench", buf, sizeof buf, &e) > 0);
    for (const bench_profile_t *p = bench_profiles(); p->name; p++)
        assert_non_null(strstr(buf, p->name));
    assert_true(repl_help("quit", buf, sizeof buf, &e) > 0);
    assert_non_null(strstr(buf, "also /exit"));
    assert_true(repl_help("tools", buf, sizeof buf, &e) > 0);
    assert_non_null(strstr(buf, "OpenAI \"tools\" array"));
    assert_int_equal(repl_help("nope", buf, sizeof buf, &e), -1);
    assert_non_null(strstr(e.msg, "unknown command /nope"));
    /* Truncation: NUL-terminated, and the return says how much was needed. */
    char small[10];
    n = repl_help(NULL, small, sizeof small, &e);
    assert_true(n > 100);
    assert_int_equal(strlen(small), 9);
}

static le_completion_t comp;

static int complete(const char *line, const flag_values_t *values) {
    repl_complete_ctx_t ctx = {.values = values};
    memset(&comp, 0, sizeof comp);
    comp.best = -1;
    int n = repl_complete(&ctx, line, strlen(line), &comp);
    assert_int_equal(n, comp.n);
    for (int i = 1; i < comp.n; i++)
        assert_true(strcmp(comp.cand[i - 1], comp.cand[i]) < 0); /* sorted */
    return n;
}

/* /sweep completes its flag and its profile; /flags offers diff. */
static void test_complete_sweep(void **state) {
    (void)state;
    assert_int_equal(complete("/sweep max-num-s", NULL), 1);
    assert_string_equal(comp.cand[0], "max-num-seqs");
    assert_true(comp.space_after);
    assert_int_equal(complete("/sweep max-num-seqs 1,2 sho", NULL), 1);
    assert_string_equal(comp.cand[0], "short");
    assert_int_equal(complete("/sweep max-num-seqs 1", NULL), 0);
    assert_int_equal(complete("/flags di", NULL), 1);
    assert_string_equal(comp.cand[0], "diff");
    assert_int_equal(complete("/requests ", NULL), 2);
    assert_string_equal(comp.cand[0], "filter");
    assert_int_equal(complete("/requests sort t", NULL), 1);
    assert_string_equal(comp.cand[0], "ttft");
    assert_int_equal(complete("/requests sort ttft a", NULL), 1);
    assert_string_equal(comp.cand[0], "asc");
    assert_int_equal(complete("/requests filter e", NULL), 1);
    assert_string_equal(comp.cand[0], "errors");
}

static void test_complete_commands(void **state) {
    (void)state;
    int nc;
    repl_commands(&nc);
    assert_int_equal(complete("/", NULL), nc + 2); /* and the /exit and /reqs aliases */
    assert_int_equal(comp.start, 0);
    assert_int_equal(complete("/s", NULL), 3);
    assert_string_equal(comp.cand[0], "/set");
    assert_string_equal(comp.cand[1], "/sweep");
    assert_string_equal(comp.cand[2], "/system");
    assert_int_equal(comp.best, 0);
    assert_int_equal(complete("  /se", NULL), 1);
    assert_int_equal(comp.start, 2);
    assert_true(comp.space_after); /* /set takes arguments */
    assert_int_equal(complete("/q", NULL), 1);
    assert_string_equal(comp.cand[0], "/quit");
    assert_false(comp.space_after);
    assert_int_equal(complete("/e", NULL), 2);
    assert_string_equal(comp.cand[0], "/exit");
    assert_string_equal(comp.cand[1], "/experts");
    assert_int_equal(complete("/exi", NULL), 1);
    assert_int_equal(complete("/experts ", NULL), 3);
    assert_string_equal(comp.cand[0], "off");
    assert_string_equal(comp.cand[1], "on");
    assert_string_equal(comp.cand[2], "print");
    assert_int_equal(complete("/experts p", NULL), 1);
    assert_string_equal(comp.cand[0], "print");
    assert_int_equal(complete("/help se", NULL), 1);
    assert_string_equal(comp.cand[0], "set");
    assert_int_equal(comp.start, 6);
    assert_int_equal(complete("/think o", NULL), 2);
    assert_string_equal(comp.cand[0], "off");
    assert_string_equal(comp.cand[1], "on");
    assert_int_equal(complete("/think of", NULL), 1);
    assert_int_equal(complete("/quit --d", NULL), 1);
    assert_string_equal(comp.cand[0], "--drain");
    assert_int_equal(complete("/tools o", NULL), 1);
    assert_string_equal(comp.cand[0], "off");
    assert_int_equal(complete("/tools x", NULL), 0);
    /* Nothing to complete. */
    assert_int_equal(complete("hello", NULL), 0);
    assert_int_equal(complete("//se", NULL), 0);
    assert_int_equal(complete("/zz", NULL), 0);
    assert_int_equal(complete("/nope x", NULL), 0);
    assert_int_equal(complete("/system hel", NULL), 0);
    assert_int_equal(complete("/set max-num-seqs 4 x", NULL), 0);
    assert_int_equal(complete("", NULL), 0);
}

static void test_complete_flags(void **state) {
    (void)state;
    assert_int_equal(complete("/set max-num", NULL), 2);
    assert_string_equal(comp.cand[0], "max-num-batched-tokens");
    assert_string_equal(comp.cand[1], "max-num-seqs");
    assert_int_equal(comp.start, 5);
    assert_int_equal(complete("/set ", NULL), flags_count());
    assert_int_equal(complete("/get enable-p", NULL), 1);
    assert_string_equal(comp.cand[0], "enable-prefix-caching");
    assert_false(comp.space_after); /* /get takes nothing after the flag */
    assert_int_equal(complete("/set enable-p", NULL), 1);
    assert_true(comp.space_after);
    assert_int_equal(complete("/flags sched", NULL), 1);
    assert_string_equal(comp.cand[0], "scheduling-policy");

    /* Values: booleans, enum choices, numbers' current value and default. */
    assert_int_equal(complete("/set enable-prefix-caching ", NULL), 2);
    assert_string_equal(comp.cand[0], "false");
    assert_string_equal(comp.cand[1], "true");
    assert_int_equal(comp.best, 1); /* the current value (default true) */
    assert_int_equal(comp.start, strlen("/set enable-prefix-caching "));
    flag_values_t v;
    flags_init(&v);
    v.enable_prefix_caching = false;
    complete("/set enable-prefix-caching ", &v);
    assert_int_equal(comp.best, 0);
    assert_int_equal(complete("/set scheduling-policy p", NULL), 1);
    assert_string_equal(comp.cand[0], "priority");
    assert_int_equal(complete("/set scheduling-policy ", NULL), 2);
    assert_string_equal(comp.cand[comp.best], "fcfs");
    assert_int_equal(complete("/set max-num-seqs ", NULL), 1); /* current == default */
    assert_string_equal(comp.cand[0], "256");
    v.max_num_seqs = 4;
    assert_int_equal(complete("/set max-num-seqs ", &v), 2);
    assert_string_equal(comp.cand[0], "256");
    assert_string_equal(comp.cand[1], "4");
    assert_int_equal(comp.best, 1);
    assert_int_equal(complete("/set max_num_seqs 4", &v), 1);
    assert_string_equal(comp.cand[0], "4");
    assert_int_equal(complete("/set max-num-seqs 9", &v), 0);
    assert_int_equal(complete("/set nope ", NULL), 0);
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_complete_profiles(void **state) {
    (void)state;
    const char *want[64];
    int n = 0;
    for (const bench_profile_t *p = bench_profiles(); p->name; p++)
        want[n++] = p->name;
    want[n++] = "stop";
    qsort(want, (size_t)n, sizeof want[0], cmp);
    assert_int_equal(complete("/bench ", NULL), n);
    for (int i = 0; i < n; i++)
        assert_string_equal(comp.cand[i], want[i]);
    assert_int_equal(comp.start, 7);
    assert_int_equal(complete("/bench sho", NULL), 1);
    assert_string_equal(comp.cand[0], "short");
    assert_int_equal(complete("/bench st", NULL), 1);
    assert_string_equal(comp.cand[0], "stop");
    assert_int_equal(complete("/bench short --num", NULL), 0);
}

/* Through the editor: what a user sees typing and pressing Tab. */
static void test_with_lineedit(void **state) {
    (void)state;
    err_t e = {{0}};
    le_t *le = le_create(REPL_LINE_MAX - 1, 10, &e);
    assert_non_null(le);
    repl_complete_ctx_t ctx = {.values = NULL};
    le_set_completer(le, repl_complete, &ctx);
    le_insert(le, "/se");
    assert_string_equal(le_suggestion(le), "t");
    assert_int_equal(le_key(le, LE_KEY_TAB), LE_CHANGED);
    assert_string_equal(le_text(le), "/set ");
    le_insert(le, "max-num-s");
    assert_string_equal(le_suggestion(le), "eqs");
    assert_int_equal(le_key(le, LE_KEY_TAB), LE_CHANGED);
    assert_string_equal(le_text(le), "/set max-num-seqs ");
    assert_string_equal(le_suggestion(le), "256");
    assert_int_equal(le_key(le, LE_KEY_RIGHT), LE_CHANGED);
    assert_string_equal(le_text(le), "/set max-num-seqs 256");
    assert_int_equal(le_key(le, LE_KEY_ENTER), LE_SUBMIT);
    repl_cmd_t *c = malloc(sizeof *c);
    assert_int_equal(repl_parse(le_submitted(le), c, &e), 0);
    assert_int_equal(c->kind, REPL_SET);
    assert_string_equal(c->argv[1], "256");
    free(c);
    le_insert(le, "/set enable-");
    assert_int_equal(le_key(le, LE_KEY_TAB), LE_CANDIDATES);
    int n;
    const char *const *cands = le_candidates(le, &n);
    assert_int_equal(n, 3);
    assert_string_equal(cands[0], "enable-chunked-prefill");
    assert_string_equal(cands[1], "enable-expert-parallel");
    assert_string_equal(cands[2], "enable-prefix-caching");
    le_destroy(le);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_and_empty),
        cmocka_unit_test(test_simple_commands),
        cmocka_unit_test(test_system_and_think),
        cmocka_unit_test(test_set_get),
        cmocka_unit_test(test_bench_and_compare),
        cmocka_unit_test(test_quoting),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_complete_commands),
        cmocka_unit_test(test_complete_sweep),
        cmocka_unit_test(test_complete_flags),
        cmocka_unit_test(test_complete_profiles),
        cmocka_unit_test(test_with_lineedit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
