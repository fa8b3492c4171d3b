/* console_chat: the console's chat (see console_int.h). A line that is not a command is a user
 * message: the conversation is rendered with the model's chat format, submitted to the engine
 * with a wake hook that posts to the UI queue, and the reply streams into the pane, its reasoning
 * split off and dimmed (F2 hides it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "console_int.h"

void con_chat_reset(console_t *c) {
    conversation_reset(&c->conv, c->system);
}

/* The engine thread's wake hook: one queued event per burst (the UI clears the flag before it
 * reads the stream). */
static void chat_wake(void *ctx) {
    console_t *c = ctx;
    if (!atomic_exchange(&c->wake_pending, true)) {
        ui_event_t ev = {.type = UI_EV_WAKE};
        if (ui_queue_push(c->q, &ev) < 0) ui_queue_kick(c->q);
    }
}

void con_chat_send(console_t *c, const char *text) {
    if (c->format < 0) {
        con_out_error(c, "this model has no tokenizer or chat template: chat is not available "
                         "(benchmarks and flags still work)");
        return;
    }
    err_t err = {{0}};
    if (conversation_add(&c->conv, CHAT_USER, text) < 0) {
        con_out_error(c, "out of memory");
        return;
    }
    ui_text_addf(c->text, UI_TXT_USER, "> %s", text);
    c->scroll = 0;
    chat_opts_t copts = {.add_generation_prompt = true,
                         .enable_thinking = c->think ? CHAT_THINK_DEFAULT : CHAT_THINK_OFF};
    char *prompt = NULL;
    size_t len;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (chat_render((chat_format_t)c->format, c->conv.msgs, c->conv.n, NULL, &copts, &prompt, &len,
                    &err) < 0 ||
        tok_encode(engine_tokenizer(c->eng), prompt, len, &ids, &n_ids, &err) < 0) {
        free(prompt);
        conversation_forget_last(&c->conv);
        con_out_error(c, err.msg);
        return;
    }
    free(prompt);
    snprintf(c->chat_rid, sizeof c->chat_rid, "chat-%d", ++c->chat_id);
    engine_request_t req = {.prompt = ids,
                            .n_prompt = (int)n_ids,
                            .request_id = c->chat_rid,
                            .wake = chat_wake,
                            .wake_ctx = c};
    sampling_params_init(&req.sampling);
    req.sampling.max_tokens = c->max_tokens;
    int rc = chat_reasoning_create(chat_prompt_ends_reasoning((chat_format_t)c->format, &copts),
                                   &c->rs, &err);
    if (rc == 0) rc = engine_submit(c->eng, &req, &c->stream, &err);
    free(ids);
    sampling_params_free(&req.sampling);
    if (rc < 0) {
        chat_reasoning_destroy(c->rs);
        c->rs = NULL;
        c->stream = NULL;
        conversation_forget_last(&c->conv);
        char msg[1100];
        snprintf(msg, sizeof msg, "%s (/new starts over)", err.msg);
        con_out_error(c, msg);
        return;
    }
    jb_reset(&c->reply);
    c->req_prompt = (int)n_ids;
    c->req_gen = 0;
    c->req_t0 = engine_now();
    c->req_started = c->reasoning_started = c->content_started = c->reply_stopping = false;
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

static void chat_finish(console_t *c, const engine_event_t *ev) {
    chat_split_t sp;
    chat_reasoning_finish(c->rs, &sp);
    chat_show(c, sp.reasoning, sp.reasoning_len, true);
    chat_show(c, sp.content, sp.content_len, false);
    ui_text_end(c->text);
    double dt = engine_now() - c->req_t0;
    if (ev->reason == ENGINE_FINISH_ERROR) {
        conversation_forget_last(&c->conv);
        char msg[600];
        snprintf(msg, sizeof msg, "generation failed: %s", ev->error ? ev->error : "?");
        con_out_error(c, msg);
    } else {
        conversation_add(&c->conv, CHAT_ASSISTANT,
                         c->reply.oom ? ""
                         : c->reply.p ? c->reply.p
                                      : "");
        ui_text_addf(c->text, UI_TXT_INFO, "[%s: %d prompt + %d generated tokens, %.2f s%s]",
                     engine_finish_reason_name(ev->reason), ev->prompt_tokens,
                     ev->completion_tokens, dt,
                     ev->reason == ENGINE_FINISH_ABORT ? ", stopped" : "");
        con_set_status(c, false, "reply done (%s)", engine_finish_reason_name(ev->reason));
    }
    engine_stream_release(c->stream);
    c->stream = NULL;
    chat_reasoning_destroy(c->rs);
    c->rs = NULL;
}

void con_chat_pump(console_t *c) {
    if (!c->stream) return;
    atomic_store(&c->wake_pending, false);
    engine_event_t ev;
    while (c->stream && engine_stream_poll(c->stream, &ev) > 0) {
        c->dirty = true;
        if (ev.text_len) {
            jb_raw(&c->reply, ev.text, ev.text_len);
            chat_split_t sp;
            err_t err;
            if (chat_reasoning_feed(c->rs, ev.text, ev.text_len, &sp, &err) == 0) {
                chat_show(c, sp.reasoning, sp.reasoning_len, true);
                chat_show(c, sp.content, sp.content_len, false);
            }
        }
        c->req_gen += ev.n_tokens;
        c->req_started = true;
        if (ev.type == ENGINE_EV_FINISH) chat_finish(c, &ev);
        engine_event_clear(&ev);
    }
}

void con_chat_stop(console_t *c) {
    if (c->stream) {
        engine_stream_cancel(c->stream);
        c->reply_stopping = true;
        con_set_status(c, false, "stopping the reply");
    }
}

void con_chat_free(console_t *c) {
    if (c->stream) engine_stream_release(c->stream);
    c->stream = NULL;
    chat_reasoning_destroy(c->rs);
    c->rs = NULL;
}
