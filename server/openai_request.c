/*
 * openai_request: an OpenAI request body to prompts (the task half of openai.h): errors in
 * vLLM's envelope, field access with pydantic's types, sampling fields, prompts from text, ids
 * or chat messages (through the engine's front door), and /tokenize, /detokenize.
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
// Errors

static const char *error_type(int status) {
    switch (status) {
        case 400:
            return "BadRequestError";
        case 401:
            return "AuthenticationError";
        case 404:
            return "NotFoundError";
        case 405:
            return "MethodNotAllowedError";
        case 413:
            return "RequestEntityTooLargeError";
        case 501:
            return "NotImplementedError";
        case 503:
            return "ServiceUnavailableError";
        default:
            return "InternalServerError";
    }
}

int oai_error_set(oai_error_t *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", error_type(status));
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void oai_error_json(const oai_error_t *e, jbuf_t *out) {
    jb_lit(out, "{\"error\":{\"message\":");
    jb_cstr(out, e->msg);
    jb_lit(out, ",\"type\":");
    jb_cstr(out, e->type);
    jb_lit(out, ",\"param\":");
    jb_cstr(out, e->param[0] ? e->param : NULL);
    jb_printf(out, ",\"code\":%d}}", e->status);
}

// ---------------------------------------------------------------------------------------------
// Field access: absent and null are the same ("take the default") unless said otherwise

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* 1 = got a number, 0 = absent or null, -1 = wrong type. */
static int get_num(const cJSON *o, const char *key, double *out, oai_error_t *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v))
        return oai_error_set(e, 400, key, "%s: Input should be a valid number", key);
    *out = v->valuedouble;
    return 1;
}

/* An integer in [min, max]: a JSON number without a fractional part (pydantic's lax mode takes
 * 5.0), read from its spelling so that big values stay exact. */
static int get_int(const cJSON *o, const char *key, long long min, long long max, long long *out,
                   oai_error_t *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return oai_error_set(e, 400, key, "%s: Input should be a valid integer", key);
    long long x;
    bool overflow = false;
    const char *sp = v->valuestring;
    if (sp && !strpbrk(sp, ".eE")) {
        char *end;
        errno = 0;
        x = strtoll(sp, &end, 10);
        overflow = errno || *end;
    } else {
        overflow = !(fabs(v->valuedouble) < 9.2e18);
        x = overflow ? 0 : (long long)v->valuedouble;
    }
    if (overflow)
        return oai_error_set(e, 400, key, "%s: %s is out of the range of a 64-bit integer", key,
                             sp ? sp : "the value");
    if (x < min || x > max) {
        if (max == LLONG_MAX)
            return oai_error_set(e, 400, key, "%s must be at least %lld, got %s", key, min,
                                 sp ? sp : "a larger value");
        return oai_error_set(e, 400, key, "%s must be in [%lld, %lld], got %s", key, min, max,
                             sp ? sp : "a value out of range");
    }
    *out = x;
    return 1;
}

static int get_bool(const cJSON *o, const char *key, bool *out, oai_error_t *e) {
    const cJSON *v = field(o, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v))
        return oai_error_set(e, 400, key, "%s: Input should be a valid boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

static int expect(const cJSON *o, const char *key, int (*is)(const cJSON *), const char *what,
                  oai_error_t *e) {
    const cJSON *v = field(o, key);
    if (v && !is(v)) return oai_error_set(e, 400, key, "%s: Input should be %s", key, what);
    return 0;
}

static int is_string(const cJSON *v) {
    return cJSON_IsString(v);
}

/* Fields of vLLM's request schemas that change nothing here (Qwen's tokenizer adds no special
 * tokens, its fast tokenizer has no spaces between special tokens to add, ids and salts only name
 * a request) still get vLLM's type check: a wrong type is a 400, as pydantic makes it. */
typedef enum { F_BOOL, F_NUM, F_STR, F_OBJ, F_LIST_OF_OBJ } ftype_t;
enum { EP_CHAT = 1, EP_COMPLETIONS = 2, EP_TOKENIZE_CHAT = 4, EP_TOKENIZE = 8 };
static const struct {
    const char *key;
    ftype_t type;
    unsigned eps; /* the EP_* bits of the requests whose schema has the field */
} checked_fields[] = {
    {"add_special_tokens", F_BOOL, EP_CHAT | EP_COMPLETIONS | EP_TOKENIZE | EP_TOKENIZE_CHAT},
    {"spaces_between_special_tokens", F_BOOL, EP_CHAT | EP_COMPLETIONS},
    {"return_tokens_as_token_ids", F_BOOL, EP_CHAT | EP_COMPLETIONS},
    {"return_token_ids", F_BOOL, EP_CHAT | EP_COMPLETIONS},
    {"length_penalty", F_NUM, EP_CHAT | EP_COMPLETIONS},
    {"request_id", F_STR, EP_CHAT | EP_COMPLETIONS},
    {"cache_salt", F_STR, EP_CHAT | EP_COMPLETIONS},
    {"kv_transfer_params", F_OBJ, EP_CHAT | EP_COMPLETIONS},
    {"vllm_xargs", F_OBJ, EP_CHAT | EP_COMPLETIONS},
    {"structured_outputs", F_OBJ, EP_CHAT | EP_COMPLETIONS},
    {"mm_processor_kwargs", F_OBJ, EP_CHAT | EP_TOKENIZE_CHAT},
    {"parallel_tool_calls", F_BOOL, EP_CHAT},
    {"documents", F_LIST_OF_OBJ, EP_CHAT | EP_TOKENIZE_CHAT},
};

static int check_typed_fields(const cJSON *o, unsigned ep_bit, oai_error_t *e) {
    static const char *const what[] = {"a valid boolean", "a valid number", "a valid string",
                                       "an object", "a list of objects"};
    for (size_t k = 0; k < sizeof checked_fields / sizeof checked_fields[0]; k++) {
        if (!(checked_fields[k].eps & ep_bit)) continue;
        const cJSON *v = field(o, checked_fields[k].key);
        if (!v) continue;
        bool ok;
        switch (checked_fields[k].type) {
            case F_BOOL:
                ok = cJSON_IsBool(v);
                break;
            case F_NUM:
                ok = cJSON_IsNumber(v);
                break;
            case F_STR:
                ok = cJSON_IsString(v);
                break;
            case F_OBJ:
                ok = cJSON_IsObject(v);
                break;
            default:
                ok = cJSON_IsArray(v);
                for (const cJSON *d = ok ? v->child : NULL; d; d = d->next)
                    ok &= cJSON_IsObject(d);
        }
        if (!ok)
            return oai_error_set(e, 400, checked_fields[k].key, "%s: Input should be %s",
                                 checked_fields[k].key, what[checked_fields[k].type]);
    }
    const cJSON *v = field(o, "cache_salt");
    if (v && (ep_bit & (EP_CHAT | EP_COMPLETIONS)) && !v->valuestring[0])
        return oai_error_set(e, 400, "cache_salt",
                             "Parameter 'cache_salt' must be a non-empty string if provided.");
    if ((ep_bit & EP_CHAT) && (v = field(o, "reasoning_effort")) &&
        !(cJSON_IsString(v) &&
          (!strcmp(v->valuestring, "low") || !strcmp(v->valuestring, "medium") ||
           !strcmp(v->valuestring, "high"))))
        return oai_error_set(e, 400, "reasoning_effort",
                             "reasoning_effort: Input should be 'low', 'medium' or 'high'");
    /* vLLM takes a template from the request only with --trust-request-chat-template */
    if ((ep_bit & (EP_CHAT | EP_TOKENIZE_CHAT)) && field(o, "chat_template"))
        return oai_error_set(e, 400, "chat_template",
                             "Chat template is passed with request, but "
                             "--trust-request-chat-template is not set. Refused request with "
                             "untrusted chat template.");
    return 0;
}

/* Fields vLLM defines but Tachyon cannot honour: accepted when they ask for nothing. */
static int unsupported(const cJSON *o, oai_error_t *e) {
    const cJSON *v;
    if ((v = field(o, "logit_bias"))) {
        if (!cJSON_IsObject(v))
            return oai_error_set(e, 400, "logit_bias",
                                 "logit_bias: Input should be a valid dictionary");
        if (v->child) return oai_error_set(e, 400, "logit_bias", "logit_bias is not supported");
    }
    static const char *const lists[] = {"allowed_token_ids", "bad_words"};
    for (int i = 0; i < 2; i++)
        if ((v = field(o, lists[i]))) {
            if (!cJSON_IsArray(v))
                return oai_error_set(e, 400, lists[i], "%s: Input should be a valid list",
                                     lists[i]);
            if (v->child) return oai_error_set(e, 400, lists[i], "%s is not supported", lists[i]);
        }
    bool b = false;
    if (get_bool(o, "use_beam_search", &b, e) < 0) return -1;
    if (b) return oai_error_set(e, 400, "use_beam_search", "beam search is not supported");
    if (field(o, "prompt_logprobs"))
        return oai_error_set(e, 400, "prompt_logprobs", "prompt_logprobs is not supported");
    if ((v = field(o, "response_format"))) {
        if (!cJSON_IsObject(v))
            return oai_error_set(e, 400, "response_format",
                                 "response_format: Input should be an object");
        const cJSON *t = field(v, "type");
        if (!t || !cJSON_IsString(t))
            return oai_error_set(e, 400, "response_format", "response_format.type is required");
        if (!strcmp(t->valuestring, "json_schema") && !cJSON_IsObject(field(v, "json_schema")))
            return oai_error_set(e, 400, "response_format",
                                 "When response_format type is 'json_schema', the 'json_schema' "
                                 "field must be provided.");
        if (strcmp(t->valuestring, "text"))
            return oai_error_set(e, 400, "response_format",
                                 "response_format type '%s' is not supported (structured output)",
                                 t->valuestring);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Sampling fields (both endpoints)

static int parse_sampling(oai_req_t *r, const cJSON *o, oai_error_t *e) {
    sampling_params_t *p = &r->sp;
    double d = 0;
    long long i = 0;
    int rc;
    static const struct {
        const char *key;
        size_t off;
    } floats[] = {
        {"temperature", offsetof(sampling_params_t, temperature)},
        {"top_p", offsetof(sampling_params_t, top_p)},
        {"min_p", offsetof(sampling_params_t, min_p)},
        {"presence_penalty", offsetof(sampling_params_t, presence_penalty)},
        {"frequency_penalty", offsetof(sampling_params_t, frequency_penalty)},
        {"repetition_penalty", offsetof(sampling_params_t, repetition_penalty)},
    };
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        if ((rc = get_num(o, floats[k].key, &d, e)) < 0) return -1;
        /* a double beyond float range becomes inf, which resolve rejects with the field name */
        if (rc) *(float *)((char *)p + floats[k].off) = (float)d;
    }
    if ((rc = get_int(o, "top_k", -1, INT_MAX, &i, e)) < 0) return -1;
    if (rc) p->top_k = i == -1 ? 0 : (int)i; /* vLLM's -1 means disabled */
    if ((rc = get_int(o, "n", 1, SAMPLING_MAX_N, &i, e)) < 0) return -1;
    if (rc) p->n = (int)i;
    if ((rc = get_int(o, "min_tokens", 0, INT_MAX, &i, e)) < 0) return -1;
    if (rc) p->min_tokens = (int)i;
    if ((rc = get_int(o, "seed", LLONG_MIN, LLONG_MAX, &i, e)) < 0) return -1;
    if (rc) {
        p->has_seed = true;
        p->seed = (uint64_t)i;
    }
    bool b = false;
    if ((rc = get_bool(o, "ignore_eos", &b, e)) < 0) return -1;
    if (rc) p->ignore_eos = b;
    if ((rc = get_bool(o, "skip_special_tokens", &b, e)) < 0) return -1;
    if (rc) p->skip_special_tokens = b;
    if ((rc = get_bool(o, "include_stop_str_in_output", &b, e)) < 0) return -1;
    if (rc) p->include_stop_str_in_output = b;
    if ((rc = get_int(o, "priority", INT_MIN, INT_MAX, &i, e)) < 0) return -1;
    if (rc) r->priority = (int)i;

    const cJSON *stop = field(o, "stop");
    err_t err;
    /* the engine matches stop strings as C strings */
    bool stop_nul = json_has_nul(stop);
    for (const cJSON *s = cJSON_IsArray(stop) ? stop->child : NULL; s; s = s->next)
        stop_nul |= json_has_nul(s);
    if (stop_nul) return oai_error_set(e, 400, "stop", "stop strings must not contain U+0000");
    if (stop && cJSON_IsString(stop)) {
        if (stop->valuestring[0] && sampling_params_add_stop(p, stop->valuestring, &err) < 0)
            return oai_error_set(e, 400, "stop", "%s", err.msg);
    } else if (stop && cJSON_IsArray(stop)) {
        for (const cJSON *s = stop->child; s; s = s->next) {
            if (!cJSON_IsString(s))
                return oai_error_set(e, 400, "stop", "stop: Input should be a valid string");
            if (s->valuestring[0] && sampling_params_add_stop(p, s->valuestring, &err) < 0)
                return oai_error_set(e, 400, "stop", "%s", err.msg);
        }
    } else if (stop) {
        return oai_error_set(e, 400, "stop", "stop: Input should be a string or a list of strings");
    }
    const cJSON *ids = field(o, "stop_token_ids");
    if (ids) {
        if (!cJSON_IsArray(ids))
            return oai_error_set(e, 400, "stop_token_ids",
                                 "stop_token_ids: Input should be a valid list");
        for (const cJSON *t = ids->child; t; t = t->next) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
                t->valuedouble < 0 || t->valuedouble > INT32_MAX)
                return oai_error_set(e, 400, "stop_token_ids",
                                     "stop_token_ids must be non-negative token ids");
            if (p->n_stop_token_ids == SAMPLING_MAX_STOP_IDS)
                return oai_error_set(e, 400, "stop_token_ids",
                                     "at most %d stop_token_ids are allowed",
                                     SAMPLING_MAX_STOP_IDS);
            p->stop_token_ids[p->n_stop_token_ids++] = (int32_t)t->valuedouble;
        }
    }

    /* the output limit: max_completion_tokens, else max_tokens */
    const char *mkey = field(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((rc = get_int(o, mkey, 1, INT_MAX, &i, e)) < 0) return -1;
    r->max_tokens_param = rc ? (int)i : -1;
    if (rc) p->max_tokens = (int)i;
    /* /v1/completions' schema default is 16; only an explicit null means "up to the context" */
    r->max_tokens_default =
        r->ep == OAI_COMPLETIONS && !rc && !cJSON_GetObjectItemCaseSensitive(o, "max_tokens");
    return 0;
}

static int parse_stream_options(oai_req_t *r, const cJSON *o, oai_error_t *e) {
    bool b = false;
    if (get_bool(o, "stream", &b, e) < 0) return -1;
    r->stream = b;
    const cJSON *so = field(o, "stream_options");
    if (!so) return 0;
    if (!cJSON_IsObject(so))
        return oai_error_set(e, 400, "stream_options", "stream_options: Input should be an object");
    if (!r->stream)
        return oai_error_set(e, 400, "stream_options",
                             "Stream options can only be defined when `stream=True`.");
    /* vLLM: include_usage defaults to true once the object says anything; {} asks for nothing */
    r->include_usage = so->child != NULL;
    if (get_bool(so, "include_usage", &b, e) < 0) return -1;
    if (field(so, "include_usage")) r->include_usage = b;
    if (get_bool(so, "continuous_usage_stats", &b, e) < 0) return -1;
    r->continuous_usage = field(so, "continuous_usage_stats") && b && r->include_usage;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Prompts

/* Takes ownership of ids and text (freed here on failure). */
static int add_prompt(oai_req_t *r, int32_t *ids, int n, char *text, size_t text_len,
                      oai_error_t *e) {
    if (n <= 0) {
        free(ids);
        free(text);
        return oai_error_set(e, 400, "prompt", "Prompt cannot be empty");
    }
    int k = r->n_prompts;
    r->prompts[k] = ids;
    r->prompt_len[k] = n;
    r->prompt_text[k] = text;
    r->prompt_text_len[k] = text_len;
    r->n_prompts++;
    r->prompt_tokens += n;
    return 0;
}

static int alloc_prompts(oai_req_t *r, int n, oai_error_t *e) {
    r->prompts = calloc((size_t)n, sizeof *r->prompts);
    r->prompt_len = calloc((size_t)n, sizeof *r->prompt_len);
    r->prompt_text = calloc((size_t)n, sizeof *r->prompt_text);
    r->prompt_text_len = calloc((size_t)n, sizeof *r->prompt_text_len);
    if (!r->prompts || !r->prompt_len || !r->prompt_text || !r->prompt_text_len)
        return oai_error_set(e, 500, NULL, "out of memory");
    return 0;
}

/* A front-door failure as vLLM answers it: the request's fault (400, naming `param`), or the
 * server's (500). */
static int prompt_error(int rc, const char *param, const err_t *err, oai_error_t *e) {
    if (rc == FE_E_ENCODE) return oai_error_set(e, 500, NULL, "%s", err->msg);
    return oai_error_set(e, 400, rc == FE_E_UNSUPPORTED ? NULL : param, "%s", err->msg);
}

static int encode(oai_req_t *r, const char *text, size_t len, int32_t **ids, int *n,
                  oai_error_t *e) {
    fe_prompt_t p;
    err_t err;
    int rc = fe_prompt_text(r->cfg->eng, text, len, &p, &err);
    if (rc < 0) return prompt_error(rc, "prompt", &err, e);
    *ids = p.ids;
    *n = p.n_ids;
    return 0;
}

static int ids_of(const cJSON *arr, int vocab, int32_t **out, int *n, oai_error_t *e) {
    int count = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)(count > 0 ? count : 1) * sizeof *ids);
    if (!ids) return oai_error_set(e, 500, NULL, "out of memory");
    int k = 0;
    for (const cJSON *t = arr->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= vocab) {
            free(ids);
            return oai_error_set(e, 400, "prompt", "prompt token ids must be integers in [0, %d)",
                                 vocab);
        }
        ids[k++] = (int32_t)t->valuedouble;
    }
    *out = ids;
    *n = k;
    return 0;
}

/* The prompt text kept for echo: NULL without echo (or when it cannot be made). */
static char *echo_text(const oai_req_t *r, const int32_t *ids, int n, size_t *len) {
    char *text = NULL;
    err_t err;
    *len = 0;
    if (!r->echo || !r->tok || tok_decode(r->tok, ids, (size_t)n, false, &text, len, &err) < 0)
        return NULL;
    return text;
}

static char *echo_copy(const oai_req_t *r, const cJSON *s, size_t *len) {
    *len = r->echo ? json_strlen(s) : 0;
    char *text = r->echo ? malloc(*len + 1) : NULL;
    if (text) {
        memcpy(text, s->valuestring, *len);
        text[*len] = '\0';
    }
    return text;
}

/* A string prompt, U+0000 included: encoded, and kept for echo. */
static int add_string_prompt(oai_req_t *r, const cJSON *s, oai_error_t *e) {
    int32_t *ids;
    int n;
    if (encode(r, s->valuestring, json_strlen(s), &ids, &n, e) < 0) return -1;
    size_t len;
    char *text = echo_copy(r, s, &len);
    if (r->echo && !text) {
        free(ids);
        return oai_error_set(e, 500, NULL, "out of memory");
    }
    return add_prompt(r, ids, n, text, len, e);
}

static int add_ids_prompt(oai_req_t *r, const cJSON *arr, int vocab, oai_error_t *e) {
    int32_t *ids;
    int n;
    if (ids_of(arr, vocab, &ids, &n, e) < 0) return -1;
    size_t len;
    char *text = echo_text(r, ids, n, &len);
    return add_prompt(r, ids, n, text, len, e);
}

/* The completions "prompt": a string, a list of strings, a list of ids or a list of lists. */
static int parse_prompt(oai_req_t *r, const cJSON *o, int vocab, oai_error_t *e) {
    const cJSON *p = field(o, "prompt");
    if (!p) return oai_error_set(e, 400, "prompt", "prompt: Field required");
    if (cJSON_IsString(p)) {
        if (alloc_prompts(r, 1, e) < 0) return -1;
        return add_string_prompt(r, p, e);
    }
    if (!cJSON_IsArray(p) || !p->child)
        return oai_error_set(e, 400, "prompt",
                             "prompt must be a non-empty string, list of strings, list of token "
                             "ids or list of lists of token ids");
    int count = cJSON_GetArraySize(p);
    if (cJSON_IsNumber(p->child)) {
        if (alloc_prompts(r, 1, e) < 0) return -1;
        return add_ids_prompt(r, p, vocab, e);
    }
    if (count > MAX_PROMPTS)
        return oai_error_set(e, 400, "prompt", "at most %d prompts per request", MAX_PROMPTS);
    if (alloc_prompts(r, count, e) < 0) return -1;
    bool strings = cJSON_IsString(p->child);
    for (const cJSON *q = p->child; q; q = q->next) {
        if (strings && cJSON_IsString(q)) {
            if (add_string_prompt(r, q, e) < 0) return -1;
        } else if (!strings && cJSON_IsArray(q)) {
            if (q->child && !cJSON_IsNumber(q->child))
                return oai_error_set(e, 400, "prompt", "prompt: a list of token ids was expected");
            if (add_ids_prompt(r, q, vocab, e) < 0) return -1;
        } else {
            return oai_error_set(e, 400, "prompt",
                                 "prompt: every element must have the same type (strings, or "
                                 "lists of token ids)");
        }
    }
    return 0;
}

/* tool_choice as vLLM reads it: absent with tools is "auto"; "none", "auto", "required" or
 * {"type": "function", "function": {"name": NAME}} naming one of the tools. */
static int parse_tool_choice(const cJSON *o, const cJSON *tools, tool_choice_t *tc,
                             const char **name, oai_error_t *e) {
    static const char usage[] =
        "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
    const cJSON *choice = field(o, "tool_choice");
    *name = NULL;
    *tc = tools ? TOOL_CHOICE_AUTO : TOOL_CHOICE_NONE;
    if (!choice) return 0;
    if (cJSON_IsString(choice) && !json_has_nul(choice) && !strcmp(choice->valuestring, "none")) {
        *tc = TOOL_CHOICE_NONE;
        return 0;
    }
    if (!tools)
        return oai_error_set(e, 400, "tool_choice",
                             "When using `tool_choice`, `tools` must be set.");
    if (cJSON_IsString(choice) && !json_has_nul(choice) &&
        (!strcmp(choice->valuestring, "auto") || !strcmp(choice->valuestring, "required"))) {
        *tc = choice->valuestring[0] == 'a' ? TOOL_CHOICE_AUTO : TOOL_CHOICE_REQUIRED;
        return 0;
    }
    if (!cJSON_IsObject(choice))
        return oai_error_set(e, 400, "tool_choice",
                             "Invalid value for `tool_choice`! Only named tools, \"none\", "
                             "\"auto\" or \"required\" are supported.");
    const cJSON *fn = field(choice, "function");
    if (!cJSON_IsObject(fn))
        return oai_error_set(e, 400, "tool_choice",
                             "Invalid value for `function` in `tool_choice`! %s", usage);
    const cJSON *nm = field(fn, "name");
    if (!nm)
        return oai_error_set(e, 400, "tool_choice",
                             "Expected field `name` in `function` in `tool_choice`! %s", usage);
    if (!cJSON_IsString(nm) || !nm->valuestring[0] || json_has_nul(nm))
        return oai_error_set(e, 400, "tool_choice",
                             "Invalid `name` in `function` in `tool_choice`! %s", usage);
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *tn = field(field(t, "function"), "name");
        if (cJSON_IsString(tn) && !strcmp(tn->valuestring, nm->valuestring)) {
            *tc = TOOL_CHOICE_NAMED;
            *name = nm->valuestring;
            return 0;
        }
    }
    return oai_error_set(e, 400, "tool_choice",
                         "The tool specified in `tool_choice` does not match any of the "
                         "specified `tools`");
}

/* A chat request's prompt (shared by /v1/chat/completions and the chat form of /tokenize): the
 * OpenAI fields checked, the messages rendered with the model's chat format and encoded. With r
 * (chat completions), what tool_choice asks for is set up: the calls to parse, and for
 * "required" or a named tool the call's opening written into the prompt (thinking skipped). */
static int chat_prompt(engine_t *eng, const cJSON *o, oai_req_t *r, fe_prompt_t *prompt,
                       oai_error_t *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!msgs) return oai_error_set(e, 400, "messages", "messages: Field required");
    if (!cJSON_IsArray(msgs))
        return oai_error_set(e, 400, "messages", "messages: Input should be a valid list");
    if (!msgs->child) return oai_error_set(e, 400, "messages", "messages must not be empty");
    if (engine_chat_format(eng) < 0)
        return oai_error_set(e, 400, NULL, "this model has no chat template; use /v1/completions");
    const cJSON *tools = field(o, "tools");
    err_t err = {{0}};
    if (tools && fe_tools_check(tools, &err) < 0)
        return oai_error_set(e, 400, "tools", "%s", err.msg);
    tool_choice_t tc;
    const char *named;
    if (parse_tool_choice(o, tools, &tc, &named, e) < 0) return -1;
    char prefix[256] = "";
    if (r) {
        const oai_config_t *c = r->cfg;
        if (tc == TOOL_CHOICE_AUTO && !(c->auto_tool_choice && c->tool_parser != TC_NONE))
            return oai_error_set(e, 400, "tool_choice",
                                 "\"auto\" tool choice requires --enable-auto-tool-choice and "
                                 "--tool-call-parser to be set");
        r->tool_choice = tc;
        r->tool_parser = tc == TOOL_CHOICE_NONE ? TC_NONE : c->tool_parser;
        if ((tc == TOOL_CHOICE_REQUIRED || tc == TOOL_CHOICE_NAMED) &&
            (tc_call_prefix(c->tool_parser, named, prefix, sizeof prefix) < 0 ||
             !(r->call_prefix = strdup(prefix))))
            return oai_error_set(e, 400, "tool_choice", "the tool's name is too long");
        if (tools && !(r->tools = cJSON_Duplicate(tools, true)))
            return oai_error_set(e, 500, NULL, "out of memory");
    }

    chat_opts_t opts = {.add_generation_prompt = true};
    bool cont = false;
    if (get_bool(o, "add_generation_prompt", &opts.add_generation_prompt, e) < 0) return -1;
    if (get_bool(o, "continue_final_message", &cont, e) < 0) return -1;
    if (cont && opts.add_generation_prompt && field(o, "add_generation_prompt"))
        return oai_error_set(e, 400, "continue_final_message",
                             "Cannot set both `continue_final_message` and "
                             "`add_generation_prompt` to True.");
    /* vLLM's default add_generation_prompt=True gives way to an explicit continue */
    if (cont) opts.add_generation_prompt = false;
    opts.continue_final_message = cont;
    const cJSON *kw = field(o, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw))
        return oai_error_set(e, 400, "chat_template_kwargs",
                             "chat_template_kwargs: Input should be an object");
    bool think = false;
    if (kw && get_bool(kw, "enable_thinking", &think, e) < 0) return -1;
    if (kw && field(kw, "enable_thinking"))
        opts.enable_thinking = think ? CHAT_THINK_ON : CHAT_THINK_OFF;
    /* the call comes first: no think block is left open before it */
    if (prefix[0]) opts.enable_thinking = CHAT_THINK_OFF;

    fe_conv_t *conv;
    if (fe_conv_from_json(msgs, tools, FE_JSON_VLLM, &conv, &err) < 0)
        return oai_error_set(e, 400, "messages", "%s", err.msg);
    /* a template skips roles it does not know: refuse rather than drop a message silently */
    for (size_t i = 0; i < conv->n_msgs; i++)
        if (conv->msgs[i].role == CHAT_OTHER) {
            oai_error_set(e, 400, "messages",
                          "messages[%zu]: unknown role \"%s\" (system, user, assistant or tool)", i,
                          conv->msgs[i].role_name);
            fe_conv_free(conv);
            return -1;
        }
    int rc = fe_prompt_chat(eng, conv->msgs, conv->n_msgs, conv->tools, &opts,
                            prefix[0] ? prefix : NULL, prompt, &err);
    fe_conv_free(conv);
    if (rc < 0)
        return prompt_error(
            rc,
            strncmp(err.msg, "continue_final_message", 22) ? "messages" : "continue_final_message",
            &err, e);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Parsing a request

int oai_max_model_len(engine_t *eng) {
    char buf[32];
    err_t err;
    if (engine_flag_get(eng, "max-model-len", buf, sizeof buf, &err) < 0) return INT_MAX;
    long v = strtol(buf, NULL, 10);
    return v > 0 && v < INT_MAX ? (int)v : INT_MAX;
}

static cJSON *parse_body(const char *body, size_t len, oai_error_t *e) {
    if (!jb_utf8_valid(body, len)) {
        oai_error_set(e, 400, NULL, "the request body is not valid UTF-8");
        return NULL;
    }
    err_t err;
    cJSON *j = json_parse(body, len, &err);
    if (!j) {
        oai_error_set(e, 400, NULL, "JSON decode error: %s", err.msg);
        return NULL;
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        oai_error_set(e, 400, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

static const char *check_model(oai_config_t *c, const cJSON *o, oai_error_t *e) {
    const cJSON *m = field(o, "model");
    if (!m) return c->model_names[0];
    if (!cJSON_IsString(m)) {
        oai_error_set(e, 400, "model", "model: Input should be a valid string");
        return NULL;
    }
    for (int i = 0; i < c->n_model_names && !json_has_nul(m); i++)
        if (!strcmp(m->valuestring, c->model_names[i])) return c->model_names[i];
    oai_error_set(e, 404, "model", "The model `%s` does not exist.", m->valuestring);
    return NULL;
}

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static void make_prefix(oai_req_t *r) {
    uint64_t k = atomic_fetch_add(&r->cfg->n_ids, 1);
    uint64_t a = mix64(r->cfg->id_seed ^ k), b = mix64(a ^ 0x5851F42D4C957F2Dull);
    snprintf(r->id, sizeof r->id, "%s-%016llx%016llx", r->ep == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)a, (unsigned long long)b);
    r->created = (long long)time(NULL);
    jb_printf(&r->prefix,
              "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", r->id,
              r->ep == OAI_CHAT ? "chat.completion.chunk" : "text_completion", r->created);
    jb_cstr(&r->prefix, r->model);
    jb_lit(&r->prefix, ",\"choices\":[");
}

int oai_parse(oai_config_t *c, oai_endpoint_t ep, const char *body, size_t len, oai_req_t **out,
              oai_error_t *e) {
    *out = NULL;
    cJSON *o = parse_body(body, len, e);
    if (!o) return -1;
    oai_req_t *r = calloc(1, sizeof *r);
    if (!r) {
        cJSON_Delete(o);
        return oai_error_set(e, 500, NULL, "out of memory");
    }
    r->cfg = c;
    r->ep = ep;
    r->tok = engine_tokenizer(c->eng);
    r->logprobs = -1;
    r->include_reasoning = true;
    sampling_params_init(&r->sp);
    jb_init(&r->prefix);
    int vocab = engine_model_config(c->eng)->vocab_size;
    long long i;
    int rc;

    if (!(r->model = check_model(c, o, e))) goto fail;
    if (parse_stream_options(r, o, e) < 0 ||
        check_typed_fields(o, ep == OAI_CHAT ? EP_CHAT : EP_COMPLETIONS, e) < 0 ||
        unsupported(o, e) < 0 || parse_sampling(r, o, e) < 0)
        goto fail;
    if (expect(o, "user", is_string, "a valid string", e) < 0) goto fail;
    if (ep == OAI_CHAT) {
        bool lp = false;
        if (get_bool(o, "logprobs", &lp, e) < 0) goto fail;
        long long top = 0;
        if ((rc = get_int(o, "top_logprobs", LLONG_MIN, LLONG_MAX, &top, e)) < 0) goto fail;
        if (rc && (top < 0 || top > SAMPLING_MAX_LOGPROBS)) {
            oai_error_set(e, 400, "top_logprobs", "top_logprobs must be in [0, %d], got %lld",
                          SAMPLING_MAX_LOGPROBS, top);
            goto fail;
        }
        if (top > 0 && !lp) {
            oai_error_set(e, 400, "top_logprobs",
                          "when using `top_logprobs`, `logprobs` must be set to true.");
            goto fail;
        }
        r->chat_logprobs = lp;
        r->logprobs = lp ? (int)top : -1;
        bool echo = false;
        if (get_bool(o, "echo", &echo, e) < 0) goto fail;
        if (echo) {
            oai_error_set(e, 400, "echo", "echo is not supported for chat completions");
            goto fail;
        }
        if (get_bool(o, "include_reasoning", &r->include_reasoning, e) < 0) goto fail;
        r->reasoning = c->reasoning_qwen3;
        fe_prompt_t prompt;
        if (chat_prompt(c->eng, o, r, &prompt, e) < 0) goto fail;
        r->thinking_disabled = prompt.ends_reasoning;
        if (alloc_prompts(r, 1, e) < 0) {
            fe_prompt_free(&prompt);
            goto fail;
        }
        if (add_prompt(r, prompt.ids, prompt.n_ids, NULL, 0, e) < 0) goto fail;
    } else {
        if ((rc = get_int(o, "logprobs", 0, LLONG_MAX, &i, e)) < 0) goto fail;
        if (rc && i > SAMPLING_MAX_LOGPROBS) {
            oai_error_set(
                e, 400, "logprobs",
                "Requested sample logprobs of %lld, which is greater than max allowed: %d", i,
                SAMPLING_MAX_LOGPROBS);
            goto fail;
        }
        if (rc) r->logprobs = (int)i;
        if (get_bool(o, "echo", &r->echo, e) < 0) goto fail;
        if (field(o, "suffix")) {
            oai_error_set(e, 400, "suffix", "suffix is not currently supported");
            goto fail;
        }
        bool special;
        if (get_bool(o, "add_special_tokens", &special, e) < 0) goto fail;
        if (parse_prompt(r, o, vocab, e) < 0) goto fail;
    }
    if ((rc = get_int(o, "truncate_prompt_tokens", -1, INT_MAX, &i, e)) < 0) goto fail;
    if (rc && i != 0) {
        int keep = i < 0 ? oai_max_model_len(c->eng) : (int)i;
        r->prompt_tokens = 0;
        for (int k = 0; k < r->n_prompts; k++) {
            if (r->prompt_len[k] > keep) {
                memmove(r->prompts[k], r->prompts[k] + r->prompt_len[k] - keep,
                        (size_t)keep * sizeof(int32_t));
                r->prompt_len[k] = keep;
            }
            r->prompt_tokens += r->prompt_len[k];
        }
    }
    r->sp.logprobs = r->logprobs;
    r->n = r->sp.n;
    if (r->tool_choice == TOOL_CHOICE_NAMED) { /* one call, then the reply is over */
        err_t err;
        if (sampling_params_add_stop(&r->sp, TOOL_CALL_CLOSE, &err) < 0) {
            oai_error_set(e, 400, "stop", "%s", err.msg);
            goto fail;
        }
    }
    make_prefix(r);
    if (r->prefix.oom) {
        oai_error_set(e, 500, NULL, "out of memory");
        goto fail;
    }
    cJSON_Delete(o);
    *out = r;
    return 0;
fail:
    cJSON_Delete(o);
    oai_destroy(r);
    return -1;
}

bool oai_is_stream(const oai_req_t *r) {
    return r->stream;
}

// ---------------------------------------------------------------------------------------------
// /tokenize and /detokenize

int oai_tokenize(oai_config_t *c, const char *body, size_t len, jbuf_t *out, oai_error_t *e) {
    cJSON *o = parse_body(body, len, e);
    if (!o) return -1;
    const tokenizer_t *tok = engine_tokenizer(c->eng);
    fe_prompt_t prompt = {0};
    int rc = -1;
    bool strs = false;
    if (!check_model(c, o, e) || get_bool(o, "return_token_strs", &strs, e) < 0 ||
        check_typed_fields(o, field(o, "prompt") ? EP_TOKENIZE : EP_TOKENIZE_CHAT, e) < 0)
        goto out;
    if (!tok) {
        oai_error_set(e, 400, NULL, "this model has no tokenizer");
        goto out;
    }
    const cJSON *p = field(o, "prompt");
    if (p) {
        if (!cJSON_IsString(p)) {
            oai_error_set(e, 400, "prompt", "prompt: Input should be a valid string");
            goto out;
        }
    } else if (!cJSON_GetObjectItemCaseSensitive(o, "messages")) {
        oai_error_set(e, 400, "prompt", "prompt or messages: Field required");
        goto out;
    } else if (chat_prompt(c->eng, o, NULL, &prompt, e) < 0) {
        goto out;
    }
    err_t err;
    if (p && (rc = fe_prompt_text(c->eng, p->valuestring, json_strlen(p), &prompt, &err)) < 0) {
        rc = prompt_error(rc, "prompt", &err, e);
        goto out;
    }
    const int32_t *ids = prompt.ids;
    size_t n = (size_t)prompt.n_ids;
    jb_printf(out, "{\"count\":%zu,\"max_model_len\":%d,\"tokens\":[", n,
              oai_max_model_len(c->eng));
    for (size_t i = 0; i < n; i++) {
        if (i) jb_raw(out, ",", 1);
        jb_int(out, ids[i]);
    }
    jb_lit(out, "],\"token_strs\":");
    if (strs) {
        jb_raw(out, "[", 1);
        for (size_t i = 0; i < n; i++) {
            if (i) jb_raw(out, ",", 1);
            jb_cstr(out, tok_id_to_token(tok, ids[i]) ? tok_id_to_token(tok, ids[i]) : "");
        }
        jb_raw(out, "]", 1);
    } else {
        jb_lit(out, "null");
    }
    jb_raw(out, "}", 1);
    rc = 0;
out:
    fe_prompt_free(&prompt);
    cJSON_Delete(o);
    return rc;
}

int oai_detokenize(oai_config_t *c, const char *body, size_t len, jbuf_t *out, oai_error_t *e) {
    cJSON *o = parse_body(body, len, e);
    if (!o) return -1;
    const tokenizer_t *tok = engine_tokenizer(c->eng);
    int32_t *ids = NULL;
    int n = 0, rc = -1;
    if (!check_model(c, o, e)) goto out;
    if (!tok) {
        oai_error_set(e, 400, NULL, "this model has no tokenizer");
        goto out;
    }
    const cJSON *t = field(o, "tokens");
    if (!t || !cJSON_IsArray(t)) {
        oai_error_set(e, 400, "tokens", "tokens: Input should be a valid list");
        goto out;
    }
    if (ids_of(t, tok_vocab_size(tok), &ids, &n, e) < 0) {
        snprintf(e->param, sizeof e->param, "tokens");
        goto out;
    }
    char *text;
    size_t tlen;
    err_t err;
    if (tok_decode(tok, ids, (size_t)n, false, &text, &tlen, &err) < 0) {
        oai_error_set(e, 500, NULL, "%s", err.msg);
        goto out;
    }
    jb_lit(out, "{\"prompt\":");
    jb_str(out, text, tlen);
    jb_raw(out, "}", 1);
    free(text);
    rc = 0;
out:
    free(ids);
    cJSON_Delete(o);
    return rc;
}
