/* console_chat: the console's chat (see console_int.h), through the engine's front door
 * (engine/frontend.h) as the server and `tachyon chat` go: a line that is not a command is a
 * user message; fe_prompt_chat renders the conversation with the model's chat format and encodes
 * it, fe_reply_submit submits it with a wake hook that posts to the UI queue, and the reply's
 * deltas stream into the pane with the reasoning split off, dimmed (F2 hides it).
 *
 * Tools: /tools FILE gives the chat an OpenAI tools array. The prompt then offers them (the chat
 * template renders them) and the front door's tool-call parser takes the calls out of the reply's
 * content, as the server does for tool_choice "auto"; each call shows on a line of its own,
 * "⚙ name(arguments)" ("[tool] ..." in ASCII), its arguments as they stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console_int.h"

#define CALL_MARK       "\xe2\x9a\x99 " /* ⚙ */
#define CALL_MARK_ASCII "[tool] "

void con_chat_reset(console_t *c) {
    conversation_reset(&c->conv, c->system);
}

/* The engine thread's wake hook: one queued event per burst (the UI clears the flag before it
 * reads the reply). */
static void chat_wake(void *ctx) {
    console_t *c = ctx;
    if (!atomic_exchange(&c->wake_pending, true)) {
        ui_event_t ev = {.type = UI_EV_WAKE};
        if (ui_queue_push(c->q, &ev) < 0) ui_queue_kick(c->q);
    }
}

/* The user's message was not answered: it leaves the conversation, and the pane says why. */
static void chat_failed(console_t *c, const char *msg) {
    conversation_forget_last(&c->conv);
    con_out_error(c, msg);
}

void con_chat_send(console_t *c, const char *text) {
    if (c->format < 0) {
        con_out_error(c, "this model has no tokenizer or chat template: chat is not available "
                         "(benchmarks and flags still work)");
        return;
    }
    if (conversation_add(&c->conv, CHAT_USER, text) < 0) {
        con_out_error(c, "out of memory");
        return;
    }
    ui_text_addf(c->text, UI_TXT_USER, "> %s", text);
    c->scroll = 0;
    err_t err = {{0}};
    chat_opts_t copts = {.add_generation_prompt = true,
                         .enable_thinking = c->think ? CHAT_THINK_DEFAULT : CHAT_THINK_OFF};
    fe_prompt_t prompt;
    if (fe_prompt_chat(c->eng, c->conv.msgs, c->conv.n, c->tools, &copts, NULL, &prompt, &err) <
        0) {
        chat_failed(c, err.msg);
        return;
    }
    snprintf(c->chat_rid, sizeof c->chat_rid, "chat-%d", ++c->chat_id);
    engine_request_t req = {.prompt = prompt.ids,
                            .n_prompt = prompt.n_ids,
                            .request_id = c->chat_rid,
                            .wake = chat_wake,
                            .wake_ctx = c};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = c->max_tokens;
    fe_reply_opts_t ro = {.split_reasoning = true,
                          .prompt_ends_reasoning = prompt.ends_reasoning,
                          .tool_calls = c->tools ? c->tool_format : TC_NONE,
                          .tools = c->tools};
    int rc = fe_reply_submit(c->eng, &req, &ro, &c->reply, &err);
    sampling_params_free(&req.sampling);
    c->req_prompt = prompt.n_ids;
    fe_prompt_free(&prompt);
    if (rc < 0) { /* too long for the context, most likely */
        char msg[1100];
        snprintf(msg, sizeof msg, "%s (/new starts over)", err.msg);
        chat_failed(c, msg);
        return;
    }
    jb_reset(&c->reply_text);
    c->req_gen = 0;
    c->req_t0 = engine_now();
    c->req_started = c->reasoning_started = c->content_started = c->reply_stopping = false;
    c->tool_calls = 0;
    c->call_open = false;
    con_set_status(c, false, "generating (Esc stops)");
}

/* Shows a piece of the split reply; leading newlines of each part are dropped so that the
 * template's "<think>\n" layout does not leave empty rows. */
static void chat_show(console_t *c, const char *s, size_t n, bool reasoning) {
    if (!s || !n) return;
    bool *started = reasoning ? &c->reasoning_started : &c->content_started;
    if (!*started) {
        while (n && (*s == '\n' || *s == ' '))
            s++, n--;
        if (!n) return;
        if (reasoning) ui_text_add(c->text, UI_TXT_FOLD, "(reasoning hidden: F2 shows it)");
        *started = true;
    }
    ui_text_append(c->text, reasoning ? UI_TXT_REASONING : UI_TXT_REPLY, s, n);
}

/* Ends the line of the call being shown. */
static void close_call(console_t *c) {
    if (!c->call_open) return;
    ui_text_append(c->text, UI_TXT_TOOL, ")", 1);
    ui_text_end(c->text);
    c->call_open = false;
}

/* The calls' pieces in a delta: a call begins on a line of its own with its name, its arguments'
 * JSON text follows as it streams, and the next call or the finish closes it. */
static void chat_show_calls(console_t *c, const fe_delta_t *d) {
    for (int i = 0; i < d->n_tool_events; i++) {
        const tc_event_t *e = &d->tool_events[i];
        if (e->kind == TC_EV_BEGIN) {
            close_call(c);
            ui_text_end(c->text);
            const char *mark = c->ascii ? CALL_MARK_ASCII : CALL_MARK;
            ui_text_append(c->text, UI_TXT_TOOL, mark, strlen(mark));
            ui_text_append(c->text, UI_TXT_TOOL, e->text, e->len);
            ui_text_append(c->text, UI_TXT_TOOL, "(", 1);
            c->call_open = true;
        } else if (e->kind == TC_EV_ARGS) {
            ui_text_append(c->text, UI_TXT_TOOL, e->text, e->len);
        }
    }
    c->tool_calls = d->tool_calls;
}

static void chat_release(console_t *c) {
    fe_reply_release(c->reply);
    c->reply = NULL;
}

/* The reply's last delta: the stats line, and the reply joins the conversation. */
static void chat_finish(console_t *c, const engine_event_t *ev) {
    close_call(c);
    ui_text_end(c->text);
    double dt = engine_now() - c->req_t0;
    if (ev->reason == ENGINE_FINISH_ERROR) {
        char msg[600];
        snprintf(msg, sizeof msg, "generation failed: %s", ev->error ? ev->error : "?");
        chat_failed(c, msg);
    } else {
        conversation_add(&c->conv, CHAT_ASSISTANT,
                         c->reply_text.oom ? ""
                         : c->reply_text.p ? c->reply_text.p
                                           : "");
        /* as the API names it: a reply that made calls and stopped by itself ends in them */
        const char *reason = c->tool_calls && ev->reason == ENGINE_FINISH_STOP
                                 ? "tool_calls"
                                 : engine_finish_reason_name(ev->reason);
        ui_text_addf(c->text, UI_TXT_INFO, "[%s: %d prompt + %d generated tokens, %.2f s%s]",
                     reason, ev->prompt_tokens, ev->completion_tokens, dt,
                     ev->reason == ENGINE_FINISH_ABORT ? ", stopped" : "");
        con_set_status(c, false, "reply done (%s)", reason);
    }
    chat_release(c);
}

void con_chat_pump(console_t *c) {
    if (!c->reply) return;
    atomic_store(&c->wake_pending, false);
    fe_delta_t d;
    int rc = 0;
    while (c->reply && (rc = fe_reply_poll(c->reply, &d)) > 0) {
        c->dirty = true;
        jb_raw(&c->reply_text, d.text, d.text_len);
        chat_show(c, d.reasoning, d.reasoning_len, true);
        chat_show(c, d.content, d.content_len, false);
        chat_show_calls(c, &d);
        c->req_gen += d.ev->n_tokens;
        c->req_started = true;
        if (d.finished) chat_finish(c, d.ev);
    }
    if (rc == -2) { /* the reply cannot go on */
        chat_release(c);
        ui_text_end(c->text);
        chat_failed(c, "out of memory reading the reply");
    }
}

void con_chat_stop(console_t *c) {
    if (c->reply) {
        fe_reply_cancel(c->reply);
        c->reply_stopping = true;
        con_set_status(c, false, "stopping the reply");
    }
}

// ---------------------------------------------------------------------------------------------
// Tools

/* The tools' names and parameters, one a line: "  get_weather(city, days)  The weather in a
 * city." */
static void list_tools(console_t *c) {
    if (!c->tools) {
        ui_text_add(c->text, UI_TXT_INFO,
                    "no tools: /tools FILE gives the chat an OpenAI tools array");
        c->scroll = 0;
        return;
    }
    ui_text_addf(c->text, UI_TXT_INFO,
                 "tools from %s (calls found as %s; /tools off drops them):", c->tools_file,
                 tc_format_name(c->tool_format));
    for (const cJSON *t = c->tools->child; t; t = t->next) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
        char args[512] = "";
        size_t n = 0;
        for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p && n < sizeof args;
             p = p->next)
            n += (size_t)snprintf(args + n, sizeof args - n, "%s%s", n ? ", " : "", p->string);
        ui_text_addf(c->text, UI_TXT_PRE, "  %s(%s)%s%s",
                     cJSON_GetObjectItemCaseSensitive(fn, "name")->valuestring, args,
                     cJSON_IsString(desc) ? "  " : "",
                     cJSON_IsString(desc) ? desc->valuestring : "");
    }
    c->scroll = 0;
}

/* The tools of a file: an OpenAI tools array, or a request body holding one. NULL with a message
 * naming the file. */
static cJSON *load_tools(const char *path, err_t *err) {
    cJSON *j = json_parse_file(path, err);
    if (!j) {
        err_prefix(err, "%s", path);
        return NULL;
    }
    cJSON *tools = j;
    if (cJSON_IsObject(j)) {
        tools = cJSON_DetachItemFromObjectCaseSensitive(j, "tools");
        cJSON_Delete(j);
        if (!tools) {
            err_set(err, "%s: neither a tools array nor an object with \"tools\"", path);
            return NULL;
        }
    }
    if (fe_tools_check(tools, err) < 0) {
        cJSON_Delete(tools);
        err_prefix(err, "%s", path);
        return NULL;
    }
    return tools;
}

void con_chat_tools(console_t *c, const repl_cmd_t *cmd) {
    if (cmd->kind == REPL_TOOLS && cmd->argc == 0) {
        list_tools(c);
        return;
    }
    if (c->format < 0) {
        con_out_error(c, "this model has no tokenizer or chat template: chat is not available");
        return;
    }
    if (c->reply) { /* its parser reads the tools */
        con_out_error(c, "a reply is streaming: change the tools once it has ended (Esc stops it)");
        return;
    }
    cJSON *tools = NULL;
    if (cmd->kind == REPL_TOOLS) {
        err_t err = {{0}};
        if (!(tools = load_tools(cmd->argv[0], &err))) {
            con_out_error(c, err.msg);
            return;
        }
        snprintf(c->tools_file, sizeof c->tools_file, "%s", cmd->argv[0]);
    }
    cJSON_Delete(c->tools);
    c->tools = tools;
    if (tools) {
        list_tools(c);
        con_set_status(c, false, "%d tool%s for the chat", cJSON_GetArraySize(tools),
                       cJSON_GetArraySize(tools) == 1 ? "" : "s");
    } else {
        ui_text_add(c->text, UI_TXT_INFO, "(no tools: the chat goes on without them)");
        c->scroll = 0;
    }
}

void con_chat_free(console_t *c) {
    chat_release(c);
    cJSON_Delete(c->tools);
    c->tools = NULL;
}
