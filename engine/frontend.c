/*
 * frontend: conversations from OpenAI JSON, prompts, and replies with the reasoning split
 * (frontend.h).
 */
#include "frontend.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

// ---------------------------------------------------------------------------------------------
// Conversations from OpenAI JSON

struct fe_conv_store {
    chat_tool_call_t *calls;
    const char **parts;
    size_t *part_lens;
    char **flat;  /* [n_msgs] joined parts (FE_JSON_FLATTEN_PARTS) */
    cJSON **args; /* [n_calls] parsed arguments (FE_JSON_PARSE_ARGS) */
    size_t n_flat, n_args;
};

void fe_conv_free(fe_conv_t *conv) {
    if (!conv) return;
    struct fe_conv_store *s = conv->store;
    if (s) {
        for (size_t i = 0; i < s->n_flat; i++)
            free(s->flat[i]);
        for (size_t i = 0; i < s->n_args; i++)
            cJSON_Delete(s->args[i]);
        free(s->flat);
        free(s->args);
        free(s->calls);
        free(s->parts);
        free(s->part_lens);
        free(s);
    }
    free(conv->msgs);
    free(conv);
}

static const char *string_item(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_content(fe_conv_t *conv, size_t i, const cJSON *c, unsigned flags,
                         size_t *part_used, err_t *err) {
    chat_msg_t *m = &conv->msgs[i];
    struct fe_conv_store *s = conv->store;
    if (!c || cJSON_IsNull(c)) {
        m->content_kind = CHAT_CONTENT_NONE;
        return 0;
    }
    if (cJSON_IsString(c)) {
        m->content_kind = CHAT_CONTENT_TEXT;
        m->content = c->valuestring;
        m->content_len = json_strlen(c);
        return 0;
    }
    if (!cJSON_IsArray(c))
        return err_set(err,
                       "chat: message %zu: content must be a string, null or an array of "
                       "text parts",
                       i);
    m->content_kind = CHAT_CONTENT_PARTS;
    m->parts = s->parts + *part_used;
    m->part_lens = s->part_lens + *part_used;
    for (const cJSON *p = c->child; p; p = p->next) {
        const char *type = string_item(p, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!type || strcmp(type, "text") != 0)
            return err_set(err,
                           "chat: message %zu: content part type \"%s\" is not supported "
                           "(text only)",
                           i, type ? type : "(none)");
        if (!cJSON_IsString(text))
            return err_set(err, "chat: message %zu: a text content part has no \"text\" string", i);
        s->part_lens[*part_used] = json_strlen(text);
        s->parts[(*part_used)++] = text->valuestring;
        m->n_parts++;
    }
    if (flags & FE_JSON_FLATTEN_PARTS) {
        jbuf_t b = {0};
        jb_lit(&b, "");
        for (size_t k = 0; k < m->n_parts; k++) {
            if (k) jb_lit(&b, "\n");
            jb_raw(&b, m->parts[k], m->part_lens[k]);
        }
        if (b.oom) {
            free(b.p);
            return err_set(err, "out of memory");
        }
        s->flat[s->n_flat++] = b.p;
        m->content_kind = CHAT_CONTENT_TEXT;
        m->content = b.p;
        m->content_len = b.len;
    }
    return 0;
}

static int parse_tool_call(fe_conv_t *conv, size_t i, const cJSON *item, unsigned flags,
                           chat_tool_call_t *tc, err_t *err) {
    struct fe_conv_store *s = conv->store;
    if (!cJSON_IsObject(item))
        return err_set(err, "chat: message %zu: each tool call must be an object", i);
    tc->id = string_item(item, "id");
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
    if (cJSON_IsObject(fn) && fn->child) item = fn;
    tc->name = string_item(item, "name");
    if (!tc->name) return err_set(err, "chat: message %zu: a tool call has no function name", i);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(item, "arguments");
    if (cJSON_IsString(args)) {
        tc->arguments_text = args->valuestring;
        tc->arguments_len = json_strlen(args);
    } else
        tc->arguments_json = args;
    if (!(flags & FE_JSON_PARSE_ARGS)) return 0;
    if (tc->arguments_json && !cJSON_IsNull(tc->arguments_json)) return 0;
    const char *text = tc->arguments_text ? tc->arguments_text : "";
    size_t len = tc->arguments_text ? tc->arguments_len : 0;
    if (!len) text = "{}", len = 2;
    cJSON *parsed = json_parse(text, len, err);
    if (!parsed)
        return err_prefix(err, "chat: message %zu: arguments of tool call \"%s\"", i, tc->name);
    s->args[s->n_args++] = parsed;
    tc->arguments_text = NULL;
    tc->arguments_json = parsed;
    return 0;
}

int fe_conv_from_json(const cJSON *messages, const cJSON *tools, unsigned flags, fe_conv_t **out,
                      err_t *err) {
    *out = NULL;
    if (!cJSON_IsArray(messages)) return err_set(err, "chat: \"messages\" must be an array");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return err_set(err, "chat: \"tools\" must be an array");
    size_t n = (size_t)cJSON_GetArraySize(messages), n_calls = 0, n_parts = 0;
    for (const cJSON *m = messages->child; m; m = m->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (cJSON_IsArray(c)) n_parts += (size_t)cJSON_GetArraySize(c);
        if (cJSON_IsArray(calls)) n_calls += (size_t)cJSON_GetArraySize(calls);
    }
    fe_conv_t *conv = calloc(1, sizeof *conv);
    struct fe_conv_store *s = calloc(1, sizeof *s);
    if (conv) conv->store = s;
    if (!conv || !s || !(conv->msgs = calloc(n + 1, sizeof *conv->msgs)) ||
        !(s->calls = calloc(n_calls + 1, sizeof *s->calls)) ||
        !(s->parts = calloc(n_parts + 1, sizeof *s->parts)) ||
        !(s->part_lens = calloc(n_parts + 1, sizeof *s->part_lens)) ||
        !(s->flat = calloc(n + 1, sizeof *s->flat)) ||
        !(s->args = calloc(n_calls + 1, sizeof *s->args))) {
        if (!conv) free(s);
        fe_conv_free(conv);
        return err_set(err, "out of memory");
    }
    conv->n_msgs = n;
    conv->tools = cJSON_IsArray(tools) ? tools : NULL;
    size_t i = 0, part_used = 0, call_used = 0;
    for (const cJSON *j = messages->child; j; j = j->next, i++) {
        chat_msg_t *m = &conv->msgs[i];
        if (!cJSON_IsObject(j)) {
            err_set(err, "chat: message %zu must be an object", i);
            goto fail;
        }
        m->role_name = string_item(j, "role");
        if (!m->role_name) {
            err_set(err, "chat: message %zu has no \"role\" string", i);
            goto fail;
        }
        static const char *const roles[] = {"system", "user", "assistant", "tool"};
        m->role = CHAT_OTHER;
        for (int r = 0; r < 4; r++)
            if (strcmp(m->role_name, roles[r]) == 0) m->role = (chat_role_t)r;
        if (parse_content(conv, i, cJSON_GetObjectItemCaseSensitive(j, "content"), flags,
                          &part_used, err) < 0)
            goto fail;
        /* transformers fills reasoning_content from the first of these that is not null. */
        static const char *const reasoning_keys[] = {"reasoning_content", "thinking", "reasoning"};
        for (int r = 0; r < 3; r++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, reasoning_keys[r]);
            if (v && !cJSON_IsNull(v)) {
                m->reasoning = cJSON_IsString(v) ? v->valuestring : NULL;
                m->reasoning_len = json_strlen(v);
                break;
            }
        }
        m->tool_call_id = string_item(j, "tool_call_id");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(j, "tool_calls");
        if (calls && !cJSON_IsNull(calls) && !cJSON_IsArray(calls)) {
            err_set(err, "chat: message %zu: \"tool_calls\" must be an array", i);
            goto fail;
        }
        m->tool_calls = s->calls + call_used;
        for (const cJSON *c = calls ? calls->child : NULL; c; c = c->next) {
            if (parse_tool_call(conv, i, c, flags, &s->calls[call_used], err) < 0) goto fail;
            call_used++;
            m->n_tool_calls++;
        }
    }
    *out = conv;
    return 0;
fail:
    fe_conv_free(conv);
    return -1;
}

/* A member that is present and not JSON null. */
static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

int fe_tools_check(const cJSON *tools, err_t *err) {
    if (!cJSON_IsArray(tools)) return err_set(err, "tools: Input should be a valid list");
    if (!tools->child) return err_set(err, "tools must not be an empty list");
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        if (!cJSON_IsObject(t)) return err_set(err, "tools[%d]: Input should be an object", i);
        const cJSON *type = field(t, "type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function")))
            return err_set(err, "tools[%d].type: Input should be 'function'", i);
        const cJSON *fn = field(t, "function");
        if (!fn) return err_set(err, "tools[%d].function: Field required", i);
        if (!cJSON_IsObject(fn))
            return err_set(err, "tools[%d].function: Input should be an object", i);
        const cJSON *name = field(fn, "name");
        if (!name) return err_set(err, "tools[%d].function.name: Field required", i);
        if (!cJSON_IsString(name) || json_has_nul(name))
            return err_set(err, "tools[%d].function.name: Input should be a valid string", i);
        const cJSON *v;
        if ((v = field(fn, "description")) && !cJSON_IsString(v))
            return err_set(err, "tools[%d].function.description: Input should be a valid string",
                           i);
        if ((v = field(fn, "parameters")) && !cJSON_IsObject(v))
            return err_set(err, "tools[%d].function.parameters: Input should be an object", i);
        if ((v = field(fn, "strict")) && !cJSON_IsBool(v))
            return err_set(err, "tools[%d].function.strict: Input should be a valid boolean", i);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Prompts

int fe_prompt_text(engine_t *eng, const char *text, size_t len, fe_prompt_t *out, err_t *err) {
    memset(out, 0, sizeof *out);
    const tokenizer_t *tok = engine_tokenizer(eng);
    if (!tok) {
        err_set(err, "this model has no tokenizer: send token ids");
        return FE_E_UNSUPPORTED;
    }
    size_t n;
    if (tok_encode(tok, text, len, &out->ids, &n, err) < 0) return FE_E_ENCODE;
    if (n > INT_MAX / 2) {
        fe_prompt_free(out);
        err_set(err, "the prompt is too long");
        return FE_E_INPUT;
    }
    out->n_ids = (int)n;
    return 0;
}

int fe_prompt_chat(engine_t *eng, const chat_msg_t *msgs, size_t n_msgs, const cJSON *tools,
                   const chat_opts_t *opts, const char *then, fe_prompt_t *out, err_t *err) {
    memset(out, 0, sizeof *out);
    int fmt = engine_chat_format(eng);
    if (fmt < 0) {
        err_set(err, "this model has no chat template; use /v1/completions");
        return FE_E_UNSUPPORTED;
    }
    char *text;
    size_t len;
    if (chat_render((chat_format_t)fmt, msgs, n_msgs, tools, opts, &text, &len, err) < 0)
        return FE_E_INPUT;
    if (then) {
        size_t k = strlen(then);
        char *t = realloc(text, len + k + 1);
        if (!t) {
            free(text);
            err_set(err, "out of memory");
            return FE_E_ENCODE;
        }
        memcpy(t + len, then, k + 1);
        text = t;
        len += k;
    }
    int rc = fe_prompt_text(eng, text, len, out, err);
    free(text);
    out->ends_reasoning = chat_prompt_ends_reasoning((chat_format_t)fmt, opts);
    return rc;
}

void fe_prompt_free(fe_prompt_t *p) {
    free(p->ids);
    p->ids = NULL;
    p->n_ids = 0;
}

// ---------------------------------------------------------------------------------------------
// Replies

typedef struct fe_choice {
    chat_reasoning_t *rs; /* with split_reasoning */
    bool think_started, think_ended;
    int reasoning_tokens;
    tc_parser_t *tools; /* with a tool-call parser */
    bool primed;        /* the call prefix went into the parser */
} fe_choice_t;

struct fe_reply {
    engine_stream_t *stream;
    fe_reply_opts_t opts;
    int n_choices;
    fe_choice_t *choices;           /* [n_choices] */
    engine_event_t ev;              /* the last delta's event, cleared at the next poll */
    int32_t think_start, think_end; /* <think> and </think> ids (-1 when the vocab has none) */
    bool have_ev;
    jbuf_t reasoning; /* a finish's reasoning: what the splitter returned and its held tail */
    char *call_prefix;
    jbuf_t content;  /* with tool calls: the delta's content that is not a call */
    jbuf_t scratch;  /* the call prefix and the first content, read together */
    tc_event_t *evs; /* with tool calls: the delta's calls (a feed's and the finish's) */
    int cap_evs;
    jbuf_t ev_text; /* their texts */
};

int fe_reply_submit(engine_t *eng, const engine_request_t *req, const fe_reply_opts_t *opts,
                    fe_reply_t **out, err_t *err) {
    *out = NULL;
    fe_reply_t *r = calloc(1, sizeof *r);
    int n = req->sampling.n > 0 ? req->sampling.n : 1;
    if (!r || !(r->choices = calloc((size_t)n, sizeof *r->choices))) {
        free(r);
        err_set(err, "out of memory");
        return ENGINE_E_NOMEM;
    }
    r->opts = *opts;
    r->n_choices = n;
    jb_init(&r->reasoning);
    if (opts->call_prefix && !(r->call_prefix = strdup(opts->call_prefix))) {
        fe_reply_release(r);
        err_set(err, "out of memory");
        return ENGINE_E_NOMEM;
    }
    r->opts.call_prefix = NULL;
    const tokenizer_t *tok = engine_tokenizer(eng);
    r->think_start = tok ? tok_token_to_id(tok, "<think>") : -1;
    r->think_end = tok ? tok_token_to_id(tok, "</think>") : -1;
    for (int c = 0; c < n; c++)
        if ((opts->split_reasoning &&
             chat_reasoning_create(opts->prompt_ends_reasoning, &r->choices[c].rs, err) < 0) ||
            (opts->tool_calls != TC_NONE &&
             tc_parser_create(opts->tool_calls, opts->tools, &r->choices[c].tools, err) < 0)) {
            fe_reply_release(r);
            return ENGINE_E_NOMEM;
        }
    int rc = engine_submit(eng, req, &r->stream, err);
    if (rc < 0) {
        fe_reply_release(r);
        return rc;
    }
    *out = r;
    return 0;
}

/* Appends tool-call events (their texts copied: a parser's events live until its next call). */
static int keep_events(fe_reply_t *r, int *n, const tc_event_t *evs, int k) {
    if (*n + k > r->cap_evs) {
        int cap = (*n + k) * 2;
        tc_event_t *e = realloc(r->evs, (size_t)cap * sizeof *e);
        if (!e) return -1;
        r->evs = e;
        r->cap_evs = cap;
    }
    for (int i = 0; i < k; i++) {
        tc_event_t *e = &r->evs[(*n)++];
        *e = evs[i];
        /* offsets now, pointers once every text is in (ev_text may move) */
        e->text = (const char *)(uintptr_t)r->ev_text.len;
        jb_raw(&r->ev_text, evs[i].text, evs[i].len);
        if (evs[i].kind == TC_EV_BEGIN) {
            e->id = (const char *)(uintptr_t)r->ev_text.len;
            jb_raw(&r->ev_text, evs[i].id, strlen(evs[i].id) + 1);
        }
    }
    return r->ev_text.oom ? -1 : 0;
}

/* The content of a delta through the choice's tool-call parser: what is not a call stays
 * content; the calls' pieces become the delta's tool events. */
static int parse_tools(fe_reply_t *r, fe_choice_t *c, fe_delta_t *d) {
    const char *text = d->content ? d->content : "";
    size_t len = d->content_len;
    if (!c->primed) { /* the prompt's call prefix is the start of this output */
        c->primed = true;
        if (r->call_prefix) {
            jb_reset(&r->scratch);
            jb_lit(&r->scratch, r->call_prefix);
            jb_raw(&r->scratch, text, len);
            if (r->scratch.oom) return -2;
            text = r->scratch.p;
            len = r->scratch.len;
        }
    }
    const tc_event_t *evs;
    int k, n = 0;
    jb_reset(&r->ev_text);
    if (tc_parser_feed(c->tools, text, len, &evs, &k) < 0 || keep_events(r, &n, evs, k) < 0)
        return -2;
    if (d->finished && (tc_parser_finish(c->tools, &evs, &k) < 0 || keep_events(r, &n, evs, k) < 0))
        return -2;
    jb_reset(&r->content);
    int n_tools = 0;
    for (int i = 0; i < n; i++) {
        tc_event_t *e = &r->evs[i];
        e->text = r->ev_text.p + (uintptr_t)e->text;
        if (e->kind == TC_EV_BEGIN) e->id = r->ev_text.p + (uintptr_t)e->id;
        if (e->kind == TC_EV_CONTENT)
            jb_raw(&r->content, e->text, e->len);
        else
            r->evs[n_tools++] = *e;
    }
    if (r->content.oom) return -2;
    d->content = r->content.len ? r->content.p : NULL;
    d->content_len = r->content.len;
    d->tool_events = r->evs;
    d->n_tool_events = n_tools;
    d->tool_calls = tc_parser_calls(c->tools);
    return 1;
}

/* Reasoning tokens as vLLM's BaseThinkingReasoningParser.count_reasoning_tokens counts the output
 * ids: those after the first generated <think> (from the first token when thinking is on and the
 * model opens no <think>: the prompt did) up to the first </think>, the tags themselves not
 * included; none with thinking off and no <think> generated. Counted as ids arrive, so a stream's
 * usage is right at every chunk. */
static void count_reasoning(fe_reply_t *r, fe_choice_t *c, const engine_event_t *ev) {
    bool thinking = !r->opts.prompt_ends_reasoning;
    for (int i = 0; i < ev->n_tokens && !c->think_ended; i++) {
        int32_t id = ev->token_ids[i];
        if (id == r->think_end) {
            c->think_ended = true;
        } else if (id == r->think_start && !c->think_started) {
            c->think_started = true;
            c->reasoning_tokens = 0; /* what came before the tag is not reasoning */
        } else if (c->think_started || thinking) {
            c->reasoning_tokens++;
        }
    }
}

/* The delta of the event just taken. -2 when out of memory. */
static int make_delta(fe_reply_t *r, fe_delta_t *d) {
    const engine_event_t *ev = &r->ev;
    bool fin = ev->type == ENGINE_EV_FINISH;
    *d = (fe_delta_t){.choice = ev->choice,
                      .ev = ev,
                      .finished = fin,
                      .text = ev->text,
                      .text_len = ev->text_len,
                      .content = ev->text,
                      .content_len = ev->text_len};
    if (ev->choice < 0 || ev->choice >= r->n_choices) return 1;
    fe_choice_t *c = &r->choices[ev->choice];
    if (!r->opts.split_reasoning) return c->tools ? parse_tools(r, c, d) : 1;
    chat_split_t s;
    err_t err;
    if (chat_reasoning_feed(c->rs, ev->text, ev->text_len, &s, &err) < 0) return -2;
    d->reasoning = s.reasoning;
    d->reasoning_len = s.reasoning ? s.reasoning_len : 0;
    d->content = s.content;
    d->content_len = s.content ? s.content_len : 0;
    if (fin) {
        chat_split_t tail;
        chat_reasoning_finish(c->rs, &tail);
        if (tail.reasoning && tail.reasoning_len) {
            jb_reset(&r->reasoning);
            jb_raw(&r->reasoning, d->reasoning, d->reasoning_len);
            jb_raw(&r->reasoning, tail.reasoning, tail.reasoning_len);
            if (r->reasoning.oom) return -2;
            d->reasoning = r->reasoning.p;
            d->reasoning_len = r->reasoning.len;
        }
    }
    count_reasoning(r, c, ev);
    d->reasoning_tokens = c->reasoning_tokens;
    return c->tools ? parse_tools(r, c, d) : 1;
}

static void clear_event(fe_reply_t *r) {
    if (r->have_ev) engine_event_clear(&r->ev);
    r->have_ev = false;
}

int fe_reply_poll(fe_reply_t *r, fe_delta_t *d) {
    return fe_reply_wait(r, d, 0);
}

int fe_reply_wait(fe_reply_t *r, fe_delta_t *d, int timeout_ms) {
    clear_event(r);
    int rc = timeout_ms == 0 ? engine_stream_poll(r->stream, &r->ev)
                             : engine_stream_wait(r->stream, &r->ev, timeout_ms);
    if (rc <= 0) return rc;
    r->have_ev = true;
    return make_delta(r, d);
}

void fe_reply_cancel(fe_reply_t *r) {
    if (r && r->stream) engine_stream_cancel(r->stream);
}

void fe_reply_release(fe_reply_t *r) {
    if (!r) return;
    clear_event(r);
    if (r->stream) engine_stream_release(r->stream);
    for (int c = 0; c < r->n_choices; c++) {
        chat_reasoning_destroy(r->choices[c].rs);
        tc_parser_destroy(r->choices[c].tools);
    }
    free(r->choices);
    jb_free(&r->reasoning);
    jb_free(&r->content);
    jb_free(&r->scratch);
    jb_free(&r->ev_text);
    free(r->evs);
    free(r->call_prefix);
    free(r);
}
