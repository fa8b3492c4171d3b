/*
 * commands: the console's REPL commands: the command table with help text, the parser that
 * turns a submitted line into a tagged repl_cmd_t, and the completion callback that lineedit
 * calls for Tab and the inline suggestion. Pure: no curses, no engine calls (flag names and
 * values come from engine/flags.h's table, profile names from bench/bench.h's).
 *
 *     repl_cmd_t cmd;
 *     err_t err = {{0}};
 *     if (repl_parse(le_submitted(le), &cmd, &err) < 0) show_error(err.msg);
 *     else switch (cmd.kind) {
 *         case REPL_CHAT:  send(cmd.text); break;
 *         case REPL_SET:   engine_set_flag(cmd.flag, cmd.argv[1]); break;
 *         case REPL_BENCH: run(cmd.argv[0], cmd.argc - 1, cmd.argv + 1); break;  // profile, opts
 *         ...
 *     }
 *
 *     repl_complete_ctx_t cc = {.values = &current_flags};   // must outlive the editor's use
 *     le_set_completer(le, repl_complete, &cc);
 *
 * Lines: a line whose first non-blank character is '/' is a command; "//text" sends the chat
 * message "/text"; any other line is a chat message, sent as typed; a blank line is REPL_EMPTY.
 * Arguments are separated by blanks; double quotes group ("a b" is one argument, "" an empty
 * one) and a backslash takes the next character literally, inside quotes or out (\" \\ \ ).
 * /system takes the rest of the line as its text: verbatim (outer blanks trimmed), or unquoted
 * when it is one quoted argument.
 *
 * Commands (arguments in the order argv holds them):
 *     /help [COMMAND]        /quit, /exit [--drain] (cmd.on: --drain)     /new     /clear
 *     /system [TEXT]         (no text clears the system prompt)
 *     /think on|off          (also true/false; cmd.on)
 *     /set FLAG VALUE        (FLAG checked against the table, VALUE against its type and range;
 *                             cmd.flag points to the table entry)
 *     /get FLAG              /flags [PREFIX]
 *     /bench PROFILE [OPTIONS...]   (PROFILE checked against bench_profiles())
 *     /bench stop            /results
 *     /experts [on|off|print] (none: toggles the live panel; argv[0] as typed)
 *     /sweep FLAG V1,V2,... PROFILE [OPTIONS...]   (a live flag; each value checked)
 *     /tools [FILE]          (none: list the tools; FILE: an OpenAI tools array to chat with)
 *     /tools off             (REPL_TOOLS_OFF: chat without tools again)
 *     /compare [A B [C...]]  (none: the last two complete runs of a profile; otherwise a base and
 *                             the runs to compare: numbers or result files)
 *     /requests [sort KEY [asc|desc] | filter [WHAT]]   (KEY and the states checked: ui_reqs.h)
 *     /cancel [ID]           (none: the requests table's selected request)
 */
#ifndef TACHYON_COMMANDS_H
#define TACHYON_COMMANDS_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "flags.h"
#include "lineedit.h"

#define REPL_LINE_MAX 16384 /* bytes of one line, NUL included (create the editor no larger) */
#define REPL_MAX_ARGS 32

typedef enum repl_kind {
    REPL_EMPTY, /* blank line: nothing to do */
    REPL_CHAT,  /* text: the message */
    REPL_HELP,  /* argc 0, or 1: the command to explain (without or with its '/') */
    REPL_QUIT,  /* on: --drain */
    REPL_NEW,
    REPL_SYSTEM, /* text: the system prompt ("" clears it) */
    REPL_THINK,  /* on */
    REPL_SET,    /* flag; argv[0] flag name as typed, argv[1] value */
    REPL_GET,    /* flag; argv[0] */
    REPL_FLAGS,  /* argc 0, or 1: a name prefix */
    REPL_BENCH,  /* argv[0] profile, argv[1..argc) options as typed ("--num-prompts", "20") */
    REPL_BENCH_STOP,
    REPL_SWEEP, /* flag; argv[0] flag, argv[1] values "a,b,c", argv[2] profile, argv[3..) options */
    REPL_RESULTS,
    REPL_COMPARE, /* argc 0, or >= 2: argv[0] the base run, the others compared with it */
    REPL_CLEAR,
    REPL_EXPERTS,   /* the expert-load heat map: argc 0 (toggle), or argv[0] on, off or print */
    REPL_TOOLS,     /* argc 0: list the tools; 1: argv[0] the file to load */
    REPL_TOOLS_OFF, /* /tools off */
    REPL_REQUESTS,  /* argc 0; or argv[0] "sort", argv[1] the key (ui_reqs.h), argv[2] asc|desc
                       (optional); or argv[0] "filter", argv[1] a state or an id's part (none:
                       live, no text) */
    REPL_CANCEL,    /* argc 0: the selected request; 1: argv[0] its id */
} repl_kind_t;

typedef struct repl_cmd {
    repl_kind_t kind;
    const char *text;          /* REPL_CHAT, REPL_SYSTEM: points into buf; "" otherwise */
    bool on;                   /* REPL_THINK */
    const flag_def_t *flag;    /* REPL_SET, REPL_GET, REPL_SWEEP: the table entry; else NULL */
    int argc;                  /* arguments after the command name */
    char *argv[REPL_MAX_ARGS]; /* unquoted, pointing into buf */
    char buf[REPL_LINE_MAX];   /* storage */
} repl_cmd_t;

/* Parses one submitted line (NUL-terminated) into out. Returns 0, or -1 with err set to a
 * message for the user and out->kind = REPL_EMPTY: an unknown command ("unknown command /foo;
 * /help lists them"), a wrong number of arguments ("usage: /set FLAG VALUE"), an unknown flag
 * or profile, a bad flag value (flags_set's message: what the flag accepts), an unterminated
 * quote, a trailing backslash, a line longer than REPL_LINE_MAX - 1 bytes. */
int repl_parse(const char *line, repl_cmd_t *out, err_t *err);

/* One entry of the command table. */
typedef struct repl_command {
    const char *name;  /* "/set" */
    const char *alias; /* "/exit" for /quit, else NULL */
    const char *usage; /* "/set FLAG VALUE" */
    const char *help;  /* one line */
    repl_kind_t kind;  /* what it parses to (/bench also gives REPL_BENCH_STOP) */
    bool takes_args;
} repl_command_t;

/* The table, in /help order (static storage). */
const repl_command_t *repl_commands(int *n);

/* The entry for a name, with or without the leading '/', aliases included; NULL if unknown. */
const repl_command_t *repl_command_find(const char *name);

/* Help text: for name == NULL or "", one line per command ("/set FLAG VALUE    change an
 * engine flag..."), the usage padded to one column; otherwise that command's usage, help and
 * details (for /set: how changes apply; for /bench: the profiles). Always NUL-terminated
 * (truncated to size). Returns the length it needed (like snprintf), or -1 with err set for an
 * unknown command. */
int repl_help(const char *name, char *buf, size_t size, err_t *err);

/* Completion context: the flag values to offer for "/set NAME " (numbers complete to the
 * current value and the default). values NULL means the table's defaults. */
typedef struct repl_complete_ctx {
    const flag_values_t *values;
} repl_complete_ctx_t;

/* The le_complete_fn for the REPL line (user: a repl_complete_ctx_t, or NULL for defaults).
 * Completes, for the text before the cursor:
 *     "/xx"              command names and aliases ("/set", ...); space after when it takes args
 *     "/help xx"         command names without '/'
 *     "/set xx", "/get xx"   flag names (space after for /set)
 *     "/set NAME xx"     values: true/false for booleans, the choices of enums, "unset" where the
 *                        flag takes it, and for numbers the current value and the default
 *     "/think xx"        on, off
 *     "/quit xx"         --drain
 *     "/bench xx"        profile names and "stop"
 *     "/tools xx"        off
 *     "/requests xx"     sort, filter; then the sort keys, asc/desc, or the filters
 * Candidates are sorted; best is the first, except for values, where it is the current value
 * when that is a candidate. Returns the number of candidates. */
int repl_complete(void *user, const char *line, size_t cursor, le_completion_t *out);

#endif
