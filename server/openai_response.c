/*
 * openai_response: a parsed request submitted through the engine's front door, and its answer
 * written as vLLM writes it (the result half of openai.h): SSE chunks while streaming, the whole
 * JSON otherwise, logprobs, usage, finish and stop reasons.
 */
#include "openai_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---------------------------------------------------------------------------------------------
// Submitting

/* The engine's refusals: the queue limit and closing are the server's state, not the request's
 * fault (503); out of memory is the server's failure (500); the rest are the request's (400). */
static int submit_error(int rc, const char *msg, oai_error_t *e) {
    if (rc == ENGINE_E_BUSY) return oai_error_set(e, 503, NULL, "%s", msg);
    if (rc == ENGINE_E_NOMEM) return oai_error_set(e, 500, NULL, "%s", msg);
    return oai_error_set(e, 400, NULL, "%s", msg);
}

int oai_submit(oai_req_t *r, void (*wake)(void *ctx), void *ctx, oai_error_t *e) {
    int n_choices = r->n_prompts * r->n;
    r->replies = calloc((size_t)r->n_prompts, sizeof *r->replies);
    r->over = calloc((size_t)r->n_prompts, sizeof *r->over);
    r->choices = calloc((size_t)n_choices, sizeof *r->choices);
    if (!r->replies || !r->over || !r->choices) return oai_error_set(e, 500, NULL, "out of memory");
    for (int k = 0; k < n_choices; k++)
        r->choices[k].stop_token = -1;
    fe_reply_opts_t ro = {.split_reasoning = r->reasoning,
                          .prompt_ends_reasoning = r->thinking_disabled,
                          .tool_calls = r->tool_parser,
                          .tools = r->tools,
                          .call_prefix = r->call_prefix};
    int mml = oai_max_model_len(r->cfg->eng);
    for (int p = 0; p < r->n_prompts; p++) {
        engine_request_t q = {.prompt = r->prompts[p],
                              .n_prompt = r->prompt_len[p],
                              .sampling = r->sp,
                              .priority = r->priority,
                              .request_id = r->id,
                              .wake = wake,
                              .wake_ctx = ctx};
        if (r->max_tokens_default) {
            int room = mml - r->prompt_len[p];
            q.sampling.max_tokens = room <= 0
                                        ? SAMPLING_UNSET_I
                                        : (room < COMPLETIONS_DEF_N ? room : COMPLETIONS_DEF_N);
        }
        err_t err;
        int rc = fe_reply_submit(r->cfg->eng, &q, &ro, &r->replies[p], &err);
        if (rc < 0) {
            for (int k = 0; k < p; k++) {
                fe_reply_release(r->replies[k]);
                r->replies[k] = NULL;
            }
            return submit_error(rc, err.msg, e);
        }
    }
    return 0;
}

void oai_cancel(oai_req_t *r) {
    for (int p = 0; r->replies && p < r->n_prompts; p++)
        fe_reply_cancel(r->replies[p]);
}

// ---------------------------------------------------------------------------------------------
// Writing events

/* The token as vLLM shows it in logprobs: its bytes decoded with errors="replace". */
static void token_text(const oai_req_t *r, int32_t id, const char **s, size_t *n) {
    const char *b = r->tok ? tok_id_to_bytes(r->tok, id, n) : NULL;
    if (!b) {
        *s = "";
        *n = 0;
        return;
    }
    *s = b;
}

static size_t code_points(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

/* Chat logprobs entries of an event's tokens: {"token","logprob","bytes","top_logprobs"}. */
static void chat_logprob_entries(const oai_req_t *r, const engine_event_t *ev, jbuf_t *b,
                                 bool first) {
    int per = 1 + ev->n_top;
    for (int t = 0; t < ev->n_tokens && ev->logprobs; t++) {
        const engine_token_logprob_t *lp = ev->logprobs + (size_t)t * per;
        const char *s;
        size_t n;
        if (!first || t > 0) jb_raw(b, ",", 1);
        token_text(r, lp[0].id, &s, &n);
        jb_lit(b, "{\"token\":");
        jb_str(b, s, n);
        jb_lit(b, ",\"logprob\":");
        jb_double(b, lp[0].logprob);
        jb_lit(b, ",\"bytes\":");
        jb_bytes_array(b, s, n);
        jb_lit(b, ",\"top_logprobs\":[");
        for (int k = 1; k < per; k++) {
            token_text(r, lp[k].id, &s, &n);
            jb_lit(b, k > 1 ? ",{\"token\":" : "{\"token\":");
            jb_str(b, s, n);
            jb_lit(b, ",\"logprob\":");
            jb_double(b, lp[k].logprob);
            jb_lit(b, ",\"bytes\":");
            jb_bytes_array(b, s, n);
            jb_lit(b, "}");
        }
        jb_lit(b, "]}");
    }
}

/* Completions logprobs: the contents of one of the four arrays for an event's tokens
 * (0 tokens, 1 token_logprobs, 2 top_logprobs, 3 text_offset, which also advances the choice's
 * offset). Each array is written in a pass of its own, straight into its buffer. */
static void completion_logprobs(const oai_req_t *r, choice_t *ch, const engine_event_t *ev,
                                int which, jbuf_t *b) {
    int per = 1 + ev->n_top;
    for (int t = 0; t < ev->n_tokens && ev->logprobs; t++) {
        const engine_token_logprob_t *lp = ev->logprobs + (size_t)t * per;
        const char *s;
        size_t n;
        if (b->len && b->p[b->len - 1] != '[') jb_raw(b, ",", 1);
        token_text(r, lp[0].id, &s, &n);
        if (which == 0) {
            jb_str(b, s, n);
        } else if (which == 1) {
            jb_double(b, lp[0].logprob);
        } else if (which == 3) {
            jb_u64(b, ch->text_off);
            ch->text_off += code_points(s, n);
        } else {
            /* a dict: the sampled token and the top alternatives, each token once */
            jb_raw(b, "{", 1);
            for (int k = 0; k < per; k++) {
                bool dup = false;
                for (int j = 0; j < k && !dup; j++)
                    dup = lp[j].id == lp[k].id;
                if (dup) continue;
                const char *ks;
                size_t kn;
                token_text(r, lp[k].id, &ks, &kn);
                if (k > 0) jb_raw(b, ",", 1);
                jb_str(b, ks, kn);
                jb_raw(b, ":", 1);
                jb_double(b, lp[k].logprob);
            }
            jb_raw(b, "}", 1);
        }
    }
}

/* Whether choice ch's text starts here with prompt p, echoed (once per choice): the choice is
 * marked echoed and its completion's text_offset count on from the prompt's end (the prompt's own
 * tokens get no logprobs: prompt logprobs are not computed). */
static bool take_echo(const oai_req_t *r, choice_t *ch, int p) {
    if (!r->echo || ch->echoed || !r->prompt_text[p]) return false;
    ch->echoed = true;
    ch->text_off += code_points(r->prompt_text[p], r->prompt_text_len[p]);
    return true;
}

static const char *finish_name(engine_finish_reason_t reason) {
    return engine_finish_reason_name(reason);
}

/* stop_reason: the stop string, or a stop token other than the tokenizer's own EOS (vLLM adds
 * generation_config's extra EOS ids to stop_token_ids, so those report their id), else null. */
/* The finish as the API names it: "tool_calls" when a reply that chose its tools (auto or
 * required) made calls and stopped by itself; a named tool choice reports "stop" (vLLM). */
static const char *finish_of(const oai_req_t *r, const choice_t *ch) {
    if (ch->tool_calls > 0 && ch->reason == ENGINE_FINISH_STOP &&
        (r->tool_choice == TOOL_CHOICE_AUTO || r->tool_choice == TOOL_CHOICE_REQUIRED))
        return "tool_calls";
    return finish_name(ch->reason);
}

static void stop_reason(const oai_req_t *r, const choice_t *ch, jbuf_t *b) {
    if (ch->stop_str && r->tool_choice == TOOL_CHOICE_NAMED &&
        !strcmp(ch->stop_str, TOOL_CALL_CLOSE))
        jb_lit(b, "null"); /* the stop a named tool choice adds is not the client's */
    else if (ch->stop_str)
        jb_cstr(b, ch->stop_str);
    else if (ch->stop_token >= 0 && (!r->tok || ch->stop_token != tok_eos_id(r->tok)))
        jb_int(b, ch->stop_token);
    else
        jb_lit(b, "null");
}

static void usage_json(const oai_req_t *r, int completion, int reasoning, jbuf_t *b) {
    jb_printf(b, "{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d",
              r->prompt_tokens, r->prompt_tokens + completion, completion);
    if (r->reasoning && reasoning >= 0)
        jb_printf(b, ",\"completion_tokens_details\":{\"reasoning_tokens\":%d}", reasoning);
    jb_raw(b, "}", 1);
}

static void totals(const oai_req_t *r, int *completion, int *reasoning) {
    *completion = *reasoning = 0;
    for (int k = 0; k < r->n_prompts * r->n; k++) {
        *completion += r->choices[k].tokens;
        *reasoning += r->choices[k].reasoning_tokens;
    }
}

static void record(oai_req_t *r) {
    if (r->recorded || !r->cfg->metrics) return;
    r->recorded = true;
    metrics_request_t m = {
        .prompt_tokens = r->prompt_tokens, .n = r->n, .max_tokens = r->max_tokens_param};
    for (int k = 0; k < r->n_prompts * r->n; k++) {
        m.generation_tokens += r->choices[k].tokens;
        if (r->choices[k].tokens > m.max_generation) m.max_generation = r->choices[k].tokens;
    }
    metrics_request_done(r->cfg->metrics, &m);
}

static void begin_chunk(oai_req_t *r, jbuf_t *out, int index) {
    jb_raw(out, r->prefix.p, r->prefix.len);
    jb_printf(out, "{\"index\":%d,", index);
}

static void end_chunk(oai_req_t *r, choice_t *ch, jbuf_t *out) {
    jb_raw(out, "]", 1);
    if (r->continuous_usage) {
        jb_lit(out, ",\"usage\":");
        usage_json(r, ch->tokens, -1, out);
    }
    jb_raw(out, "}\n\n", 3);
}

static void finish_fields(oai_req_t *r, choice_t *ch, bool fin, jbuf_t *out) {
    if (!fin) {
        jb_lit(out, ",\"finish_reason\":null");
        if (r->ep == OAI_COMPLETIONS) jb_lit(out, ",\"stop_reason\":null");
        return;
    }
    jb_printf(out, ",\"finish_reason\":\"%s\",\"stop_reason\":", finish_of(r, ch));
    stop_reason(r, ch, out);
}

/* A delta's tool-call pieces as vLLM's delta.tool_calls: a call's first piece carries its index,
 * id, type and name (and the arguments known by then), the next ones the arguments' next text. */
static void tool_call_deltas(const fe_delta_t *d, jbuf_t *out) {
    jb_lit(out, "\"tool_calls\":[");
    for (int i = 0; i < d->n_tool_events;) {
        const tc_event_t *e = &d->tool_events[i];
        if (i) jb_raw(out, ",", 1);
        if (e->kind == TC_EV_BEGIN) {
            jb_lit(out, "{\"id\":");
            jb_cstr(out, e->id);
            jb_printf(out, ",\"type\":\"function\",\"index\":%d,\"function\":{\"name\":", e->index);
            jb_str(out, e->text, e->len);
            jb_lit(out, ",\"arguments\":\"");
            i++;
        } else {
            jb_printf(out, "{\"index\":%d,\"function\":{\"arguments\":\"", e->index);
        }
        for (; i < d->n_tool_events && d->tool_events[i].kind == TC_EV_ARGS &&
               d->tool_events[i].index == e->index;
             i++)
            jb_esc(out, d->tool_events[i].text, d->tool_events[i].len);
        jb_lit(out, "\"}}");
    }
    jb_raw(out, "]", 1);
}

static void write_error_chunk(oai_req_t *r, const char *msg, jbuf_t *out) {
    oai_error_t e;
    oai_error_set(&e, 500, NULL, "%s", msg);
    jb_lit(out, "data: ");
    oai_error_json(&e, out);
    jb_lit(out, "\n\ndata: [DONE]\n\n");
    r->done_sent = true;
    r->failed = true;
    oai_cancel(r);
}

static void take_finish(choice_t *ch, const engine_event_t *ev) {
    ch->finished = true;
    ch->reason = ev->reason;
    ch->stop_token = ev->stop_token;
    if (ev->stop_str) ch->stop_str = strdup(ev->stop_str);
    if (ev->reason == ENGINE_FINISH_ERROR) ch->error = strdup(ev->error ? ev->error : "error");
    if (ev->completion_tokens > ch->tokens) ch->tokens = ev->completion_tokens;
}

/* One delta as SSE chunks. */
static void stream_delta(oai_req_t *r, int p, const fe_delta_t *d, jbuf_t *out) {
    const engine_event_t *ev = d->ev;
    int index = p * r->n + ev->choice;
    choice_t *ch = &r->choices[index];
    bool fin = ev->type == ENGINE_EV_FINISH;
    ch->tokens += ev->n_tokens;
    if (fin) {
        take_finish(ch, ev);
        if (ev->reason == ENGINE_FINISH_ERROR) {
            write_error_chunk(r, ch->error ? ch->error : "error", out);
            return;
        }
    }
    bool lp = r->logprobs >= 0 && ev->n_tokens > 0 && ev->logprobs;
    if (r->ep == OAI_CHAT) {
        if (!ch->role_sent) {
            ch->role_sent = true;
            begin_chunk(r, out, index);
            jb_lit(out, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null");
            jb_lit(out, ",\"finish_reason\":null");
            jb_raw(out, "}", 1);
            int saved = ch->tokens;
            ch->tokens = 0; /* the role chunk's running usage counts no output yet */
            end_chunk(r, ch, out);
            ch->tokens = saved;
        }
        ch->reasoning_tokens = d->reasoning_tokens;
        ch->tool_calls = d->tool_calls;
        bool has_r = r->include_reasoning && d->reasoning_len > 0;
        bool has_t = d->n_tool_events > 0;
        if (!fin && !has_r && !d->content_len && !lp && !has_t) return;
        begin_chunk(r, out, index);
        jb_lit(out, "\"delta\":{");
        if (has_r) {
            for (int k = 0; k < 2; k++) {
                jb_lit(out, k ? ",\"reasoning_content\":" : "\"reasoning\":");
                jb_str(out, d->reasoning, d->reasoning_len);
            }
        }
        if (d->content_len || (!has_r && !fin && !has_t)) {
            jb_lit(out, has_r ? ",\"content\":" : "\"content\":");
            jb_str(out, d->content, d->content_len);
        }
        if (has_t) {
            if (has_r || d->content_len) jb_raw(out, ",", 1);
            tool_call_deltas(d, out);
        }
        jb_lit(out, "},\"logprobs\":");
        if (lp) {
            jb_lit(out, "{\"content\":[");
            chat_logprob_entries(r, ev, out, true);
            jb_lit(out, "]}");
        } else {
            jb_lit(out, "null");
        }
    } else {
        bool echo = take_echo(r, ch, p);
        if (!fin && !ev->text_len && !lp && !echo) return;
        begin_chunk(r, out, index);
        jb_lit(out, "\"text\":\"");
        if (echo) jb_esc(out, r->prompt_text[p], r->prompt_text_len[p]);
        jb_esc(out, ev->text, ev->text_len);
        jb_lit(out, "\",\"logprobs\":");
        if (lp) {
            static const char *const keys[4] = {"{\"text_offset\":[", "],\"token_logprobs\":[",
                                                "],\"tokens\":[", "],\"top_logprobs\":["};
            static const int order[4] = {3, 1, 0, 2};
            for (int k = 0; k < 4; k++) {
                jb_lit(out, keys[k]);
                completion_logprobs(r, ch, ev, order[k], out);
            }
            jb_lit(out, "]}");
        } else {
            jb_lit(out, "null");
        }
    }
    finish_fields(r, ch, fin, out);
    jb_raw(out, "}", 1);
    end_chunk(r, ch, out);
}

int oai_pump(oai_req_t *r, jbuf_t *out, size_t max) {
    fe_delta_t d;
    for (int p = 0; p < r->n_prompts && !r->done_sent; p++) {
        while (!r->over[p] && !r->done_sent && out->len < max) {
            int rc = fe_reply_poll(r->replies[p], &d);
            if (rc == 0) break;
            if (rc == -2) {
                write_error_chunk(r, "out of memory", out);
                break;
            }
            if (rc < 0) {
                r->over[p] = true;
                r->n_over++;
                break;
            }
            stream_delta(r, p, &d, out);
        }
    }
    if (r->done_sent) return 1;
    if (r->n_over < r->n_prompts) return 0;
    record(r);
    if (r->include_usage) {
        int completion, reasoning;
        totals(r, &completion, &reasoning);
        jb_raw(out, r->prefix.p, r->prefix.len);
        jb_lit(out, "],\"usage\":");
        usage_json(r, completion, reasoning, out);
        jb_lit(out, "}\n\n");
    }
    jb_lit(out, "data: [DONE]\n\n");
    r->done_sent = true;
    return 1;
}

// ---------------------------------------------------------------------------------------------
// Not streaming

static void collect_delta(oai_req_t *r, int p, const fe_delta_t *d) {
    const engine_event_t *ev = d->ev;
    int index = p * r->n + ev->choice;
    choice_t *ch = &r->choices[index];
    ch->tokens += ev->n_tokens;
    if (ev->type == ENGINE_EV_FINISH) take_finish(ch, ev);
    if (take_echo(r, ch, p)) jb_raw(&ch->text, r->prompt_text[p], r->prompt_text_len[p]);
    jb_raw(&ch->text, ev->text, ev->text_len);
    /* the whole text is split at the end; the reply's split only counts reasoning tokens */
    ch->reasoning_tokens = d->reasoning_tokens;
    if (r->logprobs < 0 || !ev->logprobs || !ev->n_tokens) return;
    if (r->ep == OAI_CHAT)
        chat_logprob_entries(r, ev, &ch->lp, ch->lp.len == 0);
    else {
        completion_logprobs(r, ch, ev, 0, &ch->lp);
        completion_logprobs(r, ch, ev, 1, &ch->lp_vals);
        completion_logprobs(r, ch, ev, 2, &ch->lp_top);
        completion_logprobs(r, ch, ev, 3, &ch->lp_off);
    }
}

int oai_collect(oai_req_t *r) {
    fe_delta_t d;
    for (int p = 0; p < r->n_prompts; p++) {
        while (!r->over[p]) {
            int rc = fe_reply_poll(r->replies[p], &d);
            if (rc == 0) break;
            if (rc < 0) {
                if (rc == -2) r->oom = true;
                r->over[p] = true;
                r->n_over++;
                break;
            }
            collect_delta(r, p, &d);
        }
    }
    if (r->n_over < r->n_prompts) return 0;
    record(r);
    return 1;
}

/* The tool calls of a whole reply's content (the call prefix the prompt gave it first): the
 * message's "tool_calls" go into ch->calls, and the content is cut to what precedes the first
 * call (null when nothing does). A reply whose calls do not parse stays content. */
static int message_tool_calls(oai_req_t *r, choice_t *ch, chat_split_t *s, jbuf_t *out) {
    jbuf_t text;
    jb_init(&text);
    if (r->call_prefix) jb_lit(&text, r->call_prefix);
    jb_raw(&text, s->content ? s->content : "", s->content ? s->content_len : 0);
    tc_result_t tr;
    err_t err;
    int rc = text.oom
                 ? -1
                 : tc_extract(r->tool_parser, text.p ? text.p : "", text.len, r->tools, &tr, &err);
    if (rc < 0) {
        jb_free(&text);
        oai_error_t e;
        oai_error_set(&e, 500, NULL, "out of memory");
        out->len = 0;
        oai_error_json(&e, out);
        return -1;
    }
    if (tr.n_calls) {
        /* content before the first call (none when the prompt opened the call) */
        s->content_len = tr.content_len;
        if (!s->content_len) s->content = NULL;
        ch->tool_calls = tr.n_calls;
        jb_lit(&ch->calls, ",\"tool_calls\":[");
        for (int i = 0; i < tr.n_calls; i++) {
            jb_lit(&ch->calls, i ? ",{\"id\":" : "{\"id\":");
            jb_cstr(&ch->calls, tr.calls[i].id);
            jb_lit(&ch->calls, ",\"type\":\"function\",\"function\":{\"name\":");
            jb_cstr(&ch->calls, tr.calls[i].name);
            jb_lit(&ch->calls, ",\"arguments\":");
            jb_cstr(&ch->calls, tr.calls[i].arguments);
            jb_lit(&ch->calls, "}}");
        }
        jb_raw(&ch->calls, "]", 1);
    }
    tc_result_free(&tr);
    jb_free(&text);
    return 0;
}

static void raw_or_empty(jbuf_t *out, const jbuf_t *b) {
    if (b->len) jb_raw(out, b->p, b->len);
    if (b->oom) out->oom = true;
}

void oai_response(oai_req_t *r, jbuf_t *out, int *status) {
    int n_choices = r->n_prompts * r->n;
    for (int k = 0; k < n_choices; k++)
        if (r->choices[k].error || r->choices[k].text.oom || r->oom) {
            oai_error_t e;
            oai_error_set(&e, 500, NULL, "%s",
                          r->choices[k].error ? r->choices[k].error : "out of memory");
            oai_error_json(&e, out);
            *status = 500;
            return;
        }
    *status = 200;
    jb_printf(out, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", r->id,
              r->ep == OAI_CHAT ? "chat.completion" : "text_completion", r->created);
    jb_cstr(out, r->model);
    jb_lit(out, ",\"choices\":[");
    for (int k = 0; k < n_choices; k++) {
        choice_t *ch = &r->choices[k];
        const char *text = ch->text.p ? ch->text.p : "";
        jb_printf(out, "%s{\"index\":%d,", k ? "," : "", k);
        if (r->ep == OAI_CHAT) {
            jb_lit(out, "\"message\":{\"role\":\"assistant\",\"content\":");
            chat_split_t s = {.content = text, .content_len = ch->text.len};
            if (r->reasoning) chat_reasoning_split(text, ch->text.len, r->thinking_disabled, &s);
            if (r->tool_parser != TC_NONE && message_tool_calls(r, ch, &s, out) < 0) {
                *status = 500;
                return;
            }
            if (s.content)
                jb_str(out, s.content, s.content_len);
            else
                jb_lit(out, "null");
            for (int j = 0; j < 2 && r->reasoning && r->include_reasoning; j++) {
                jb_lit(out, j ? ",\"reasoning_content\":" : ",\"reasoning\":");
                if (s.reasoning)
                    jb_str(out, s.reasoning, s.reasoning_len);
                else
                    jb_lit(out, "null");
            }
            if (ch->calls.len) jb_raw(out, ch->calls.p, ch->calls.len);
            jb_lit(out, "},\"logprobs\":");
            if (r->chat_logprobs) {
                jb_lit(out, "{\"content\":[");
                raw_or_empty(out, &ch->lp);
                jb_lit(out, "]}");
            } else {
                jb_lit(out, "null");
            }
        } else {
            jb_lit(out, "\"text\":");
            jb_str(out, text, ch->text.len);
            jb_lit(out, ",\"logprobs\":");
            if (r->logprobs >= 0) {
                jb_lit(out, "{\"text_offset\":[");
                raw_or_empty(out, &ch->lp_off);
                jb_lit(out, "],\"token_logprobs\":[");
                raw_or_empty(out, &ch->lp_vals);
                jb_lit(out, "],\"tokens\":[");
                raw_or_empty(out, &ch->lp);
                jb_lit(out, "],\"top_logprobs\":[");
                raw_or_empty(out, &ch->lp_top);
                jb_lit(out, "]}");
            } else {
                jb_lit(out, "null");
            }
        }
        jb_printf(out, ",\"finish_reason\":\"%s\",\"stop_reason\":", finish_of(r, ch));
        stop_reason(r, ch, out);
        jb_raw(out, "}", 1);
    }
    int completion, reasoning;
    totals(r, &completion, &reasoning);
    jb_lit(out, "],\"usage\":");
    usage_json(r, completion, reasoning, out);
    jb_raw(out, "}", 1);
}

void oai_destroy(oai_req_t *r) {
    if (!r) return;
    for (int p = 0; r->replies && p < r->n_prompts; p++)
        fe_reply_release(r->replies[p]);
    for (int p = 0; p < r->n_prompts; p++) {
        free(r->prompts[p]);
        free(r->prompt_text[p]);
    }
    if (r->choices)
        for (int k = 0; k < r->n_prompts * r->n; k++) {
            choice_t *ch = &r->choices[k];
            jb_free(&ch->text);
            jb_free(&ch->lp);
            jb_free(&ch->lp_vals);
            jb_free(&ch->lp_top);
            jb_free(&ch->lp_off);
            jb_free(&ch->calls);
            free(ch->stop_str);
            free(ch->error);
        }
    free(r->choices);
    free(r->replies);
    free(r->over);
    free(r->prompts);
    free(r->prompt_len);
    free(r->prompt_text);
    free(r->prompt_text_len);
    cJSON_Delete(r->tools);
    free(r->call_prefix);
    sampling_params_free(&r->sp);
    jb_free(&r->prefix);
    free(r);
}
