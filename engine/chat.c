#include "chat.h"

#include "json.h"
#include "utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------
// String slices with the Python str methods the templates call.

typedef struct sv {
    const char *p;
    size_t n;
} sv_t;

static sv_t sv_of(const char *s) {
    return (sv_t){s ? s : "", s ? strlen(s) : 0};
}

/* n bytes at s, or up to its NUL when n is 0 (the chat_msg_t convention for lengths). */
static sv_t sv_n(const char *s, size_t n) {
    return n ? (sv_t){s, n} : sv_of(s);
}

static void put_sv(jbuf_t *b, sv_t s) {
    jb_raw(b, s.p, s.n);
}

static const char *sv_find(sv_t h, const char *needle) {
    return memmem(h.p, h.n, needle, strlen(needle));
}

static const char *sv_rfind(sv_t h, const char *needle) {
    size_t k = strlen(needle);
    if (k > h.n) return NULL;
    for (size_t i = h.n - k + 1; i-- > 0;)
        if (memcmp(h.p + i, needle, k) == 0) return h.p + i;
    return NULL;
}

static bool sv_starts(sv_t s, const char *prefix) {
    size_t k = strlen(prefix);
    return s.n >= k && memcmp(s.p, prefix, k) == 0;
}

static bool sv_ends(sv_t s, const char *suffix) {
    size_t k = strlen(suffix);
    return s.n >= k && memcmp(s.p + s.n - k, suffix, k) == 0;
}

static sv_t sv_lstrip_nl(sv_t s) {
    while (s.n && s.p[0] == '\n')
        s.p++, s.n--;
    return s;
}

static sv_t sv_rstrip_nl(sv_t s) {
    while (s.n && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

static sv_t sv_lstrip_py(sv_t s) {
    for (size_t k; (k = utf8_py_space(s.p, s.n));)
        s.p += k, s.n -= k;
    return s;
}

static sv_t sv_trim(sv_t s) {
    s = sv_lstrip_py(s);
    for (size_t k; (k = utf8_py_space_before(s.p, s.n));)
        s.n -= k;
    return s;
}

// ---------------------------------------------------------------------------------------------
// Rendering

#define TPL_ERR "chat template: "

static const char QWEN3_TOOLS_HEAD[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char QWEN3_TOOLS_TAIL[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
static const char QWEN3_5_TOOLS_HEAD[] =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char QWEN3_5_TOOLS_TAIL[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is no "
    "function call available, answer the question like normal with your current knowledge and "
    "do not tell the user about function calls\n</IMPORTANT>";

static bool has_tools(const cJSON *tools) {
    return tools && cJSON_GetArraySize(tools) > 0;
}

static void put_tools(jbuf_t *b, const cJSON *tools) {
    for (const cJSON *t = tools->child; t; t = t->next) {
        jb_lit(b, "\n");
        jb_py_dumps(b, t);
    }
}

/* Splits reasoning written inline in content ("<think>r</think>c"), as both templates do:
 * reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'),
 * content = content.split('</think>')[-1].lstrip('\n'). */
static void split_inline_reasoning(sv_t *content, sv_t *reasoning) {
    const char *first = sv_find(*content, "</think>");
    const char *last = sv_rfind(*content, "</think>");
    sv_t before = sv_rstrip_nl((sv_t){content->p, (size_t)(first - content->p)});
    const char *open = sv_rfind(before, "<think>");
    if (open) before = (sv_t){open + 7, before.n - (size_t)(open + 7 - before.p)};
    *reasoning = sv_lstrip_nl(before);
    const char *rest = last + 8;
    *content = sv_lstrip_nl((sv_t){rest, content->n - (size_t)(rest - content->p)});
}

/* An assistant message's reasoning: reasoning_content when given, else the think block inside its
 * content (which is then cut to what follows </think>); empty when neither. */
static sv_t message_reasoning(const chat_msg_t *m, sv_t *content) {
    sv_t reasoning = sv_of("");
    if (m->reasoning)
        reasoning = sv_n(m->reasoning, m->reasoning_len);
    else if (sv_find(*content, "</think>"))
        split_inline_reasoning(content, &reasoning);
    return reasoning;
}

/* Qwen3 reads a non-string content as ''. */
static sv_t qwen3_content(const chat_msg_t *m) {
    return m->content_kind == CHAT_CONTENT_TEXT ? sv_n(m->content, m->content_len) : sv_of("");
}

static int qwen3_tool_calls(jbuf_t *b, const chat_msg_t *m, sv_t content, err_t *err) {
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        const chat_tool_call_t *tc = &m->tool_calls[k];
        if (k > 0 || content.n) jb_lit(b, "\n");
        jb_lit(b, "<tool_call>\n{\"name\": \"");
        jb_lit(b, tc->name);
        jb_lit(b, "\", \"arguments\": ");
        if (tc->arguments_text)
            put_sv(b, sv_n(tc->arguments_text, tc->arguments_len));
        else if (tc->arguments_json)
            jb_py_dumps(b, tc->arguments_json);
        else
            return err_set(err, TPL_ERR "tool call \"%s\" has no arguments", tc->name);
        jb_lit(b, "}\n</tool_call>");
    }
    return 0;
}

static int render_qwen3(jbuf_t *b, chat_format_t fmt, const chat_msg_t *msgs, size_t n,
                        const cJSON *tools, const chat_opts_t *opts, err_t *err) {
    if (n == 0) return err_set(err, TPL_ERR "no messages (the template reads messages[0])");
    bool sys0 = msgs[0].role == CHAT_SYSTEM;
    if (sys0 && msgs[0].content_kind != CHAT_CONTENT_TEXT)
        return err_set(err, TPL_ERR "the system message's content must be a string");
    if (has_tools(tools)) {
        jb_lit(b, "<|im_start|>system\n");
        if (sys0) {
            put_sv(b, sv_n(msgs[0].content, msgs[0].content_len));
            jb_lit(b, "\n\n");
        }
        jb_lit(b, QWEN3_TOOLS_HEAD);
        put_tools(b, tools);
        jb_lit(b, QWEN3_TOOLS_TAIL);
    } else if (sys0) {
        jb_lit(b, "<|im_start|>system\n");
        put_sv(b, sv_n(msgs[0].content, msgs[0].content_len));
        jb_lit(b, "<|im_end|>\n");
    }
    /* The last user message that is a real query, not tool output wrapped by the client. */
    size_t last_query = n - 1;
    for (size_t i = n; i-- > 0;) {
        sv_t c = sv_n(msgs[i].content, msgs[i].content_len);
        if (msgs[i].role == CHAT_USER && msgs[i].content_kind == CHAT_CONTENT_TEXT &&
            !(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const chat_msg_t *m = &msgs[i];
        sv_t content = qwen3_content(m);
        if (m->role == CHAT_USER || (m->role == CHAT_SYSTEM && i > 0)) {
            jb_lit(b, m->role == CHAT_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
            put_sv(b, content);
            jb_lit(b, "<|im_end|>\n");
        } else if (m->role == CHAT_ASSISTANT) {
            sv_t reasoning = message_reasoning(m, &content);
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                jb_lit(b, "<|im_start|>assistant\n<think>\n");
                put_sv(b, sv_lstrip_nl(sv_rstrip_nl(reasoning)));
                jb_lit(b, "\n</think>\n\n");
                put_sv(b, sv_lstrip_nl(content));
            } else {
                jb_lit(b, "<|im_start|>assistant\n");
                put_sv(b, content);
            }
            if (qwen3_tool_calls(b, m, content, err) < 0) return -1;
            jb_lit(b, "<|im_end|>\n");
        } else if (m->role == CHAT_TOOL) {
            if (i == 0 || msgs[i - 1].role != CHAT_TOOL) jb_lit(b, "<|im_start|>user");
            jb_lit(b, "\n<tool_response>\n");
            put_sv(b, content);
            jb_lit(b, "\n</tool_response>");
            if (i == n - 1 || msgs[i + 1].role != CHAT_TOOL) jb_lit(b, "<|im_end|>\n");
        }
        /* The first system message was rendered above; other roles render nothing. */
    }
    if (opts->add_generation_prompt) {
        if (fmt == CHAT_QWEN3_THINKING_2507)
            jb_lit(b, "<|im_start|>assistant\n<think>\n");
        else
            jb_lit(b, "<|im_start|>assistant\n");
        if (fmt == CHAT_QWEN3 && opts->enable_thinking == CHAT_THINK_OFF)
            jb_lit(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}

/* Qwen3.5's render_content macro followed by |trim. Parts are concatenated into `scratch`, so
 * the result is valid until the next call. */
static sv_t qwen3_5_content(const chat_msg_t *m, jbuf_t *scratch) {
    if (m->content_kind == CHAT_CONTENT_TEXT) return sv_trim(sv_n(m->content, m->content_len));
    if (m->content_kind == CHAT_CONTENT_NONE) return sv_of("");
    scratch->len = 0;
    jb_lit(scratch, "");
    for (size_t k = 0; k < m->n_parts; k++)
        put_sv(scratch, sv_n(m->parts[k], m->part_lens ? m->part_lens[k] : 0));
    return sv_trim((sv_t){scratch->p ? scratch->p : "", scratch->len});
}

static int qwen3_5_tool_calls(jbuf_t *b, const chat_msg_t *m, sv_t content, err_t *err) {
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        const chat_tool_call_t *tc = &m->tool_calls[k];
        if (k > 0)
            jb_lit(b, "\n<tool_call>\n<function=");
        else if (sv_trim(content).n)
            jb_lit(b, "\n\n<tool_call>\n<function=");
        else
            jb_lit(b, "<tool_call>\n<function=");
        jb_lit(b, tc->name);
        jb_lit(b, ">\n");
        if (tc->arguments_text || (tc->arguments_json && !cJSON_IsObject(tc->arguments_json)))
            return err_set(err,
                           TPL_ERR "Can only get item pairs from a mapping. (the arguments "
                                   "of tool call \"%s\" must be a JSON object)",
                           tc->name);
        const cJSON *args = tc->arguments_json;
        for (const cJSON *a = args ? args->child : NULL; a; a = a->next) {
            if (json_key_seen_before(args, a)) continue;
            const cJSON *v = json_key_last_value(a);
            jb_lit(b, "<parameter=");
            jb_lit(b, a->string);
            jb_lit(b, ">\n");
            if (cJSON_IsObject(v) || cJSON_IsArray(v))
                jb_py_dumps(b, v);
            else
                jb_py_str(b, v);
            jb_lit(b, "\n</parameter>\n");
        }
        jb_lit(b, "</function>\n</tool_call>");
    }
    return 0;
}

static int render_qwen3_5(jbuf_t *b, chat_format_t fmt, const chat_msg_t *msgs, size_t n,
                          const cJSON *tools, const chat_opts_t *opts, err_t *err) {
    if (n == 0) return err_set(err, TPL_ERR "No messages provided.");
    jbuf_t scratch = {0};
    int rc = -1;
    if (has_tools(tools)) {
        jb_lit(b, QWEN3_5_TOOLS_HEAD);
        put_tools(b, tools);
        jb_lit(b, QWEN3_5_TOOLS_TAIL);
        if (msgs[0].role == CHAT_SYSTEM) {
            sv_t c = qwen3_5_content(&msgs[0], &scratch);
            if (c.n) {
                jb_lit(b, "\n\n");
                put_sv(b, c);
            }
        }
        jb_lit(b, "<|im_end|>\n");
    } else if (msgs[0].role == CHAT_SYSTEM) {
        jb_lit(b, "<|im_start|>system\n");
        put_sv(b, qwen3_5_content(&msgs[0], &scratch));
        jb_lit(b, "<|im_end|>\n");
    }
    size_t last_query = n;
    for (size_t i = n; i-- > 0 && last_query == n;) {
        if (msgs[i].role != CHAT_USER) continue;
        sv_t c = qwen3_5_content(&msgs[i], &scratch);
        if (!(sv_starts(c, "<tool_response>") && sv_ends(c, "</tool_response>"))) last_query = i;
    }
    if (last_query == n) {
        err_set(err, TPL_ERR "No user query found in messages.");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const chat_msg_t *m = &msgs[i];
        sv_t content = qwen3_5_content(m, &scratch);
        if (m->role == CHAT_SYSTEM) {
            if (i > 0) {
                err_set(err, TPL_ERR "System message must be at the beginning.");
                goto out;
            }
        } else if (m->role == CHAT_USER) {
            jb_lit(b, "<|im_start|>user\n");
            put_sv(b, content);
            jb_lit(b, "<|im_end|>\n");
        } else if (m->role == CHAT_ASSISTANT) {
            sv_t reasoning = sv_trim(message_reasoning(m, &content));
            if (i > last_query) {
                jb_lit(b, "<|im_start|>assistant\n<think>\n");
                put_sv(b, reasoning);
                jb_lit(b, "\n</think>\n\n");
            } else {
                jb_lit(b, "<|im_start|>assistant\n");
            }
            put_sv(b, content);
            if (qwen3_5_tool_calls(b, m, content, err) < 0) goto out;
            jb_lit(b, "<|im_end|>\n");
        } else if (m->role == CHAT_TOOL) {
            if (i > 0 && msgs[i - 1].role != CHAT_TOOL) jb_lit(b, "<|im_start|>user");
            jb_lit(b, "\n<tool_response>\n");
            put_sv(b, content);
            jb_lit(b, "\n</tool_response>");
            if (i == n - 1 || msgs[i + 1].role != CHAT_TOOL) jb_lit(b, "<|im_end|>\n");
        } else {
            err_set(err, TPL_ERR "Unexpected message role. (\"%s\")",
                    m->role_name ? m->role_name : "?");
            goto out;
        }
    }
    if (opts->add_generation_prompt) {
        bool think = fmt == CHAT_QWEN3_5 ? opts->enable_thinking != CHAT_THINK_OFF
                                         : opts->enable_thinking == CHAT_THINK_ON;
        jb_lit(b, think ? "<|im_start|>assistant\n<think>\n"
                        : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    }
    rc = 0;
out:
    if (scratch.oom) rc = err_set(err, "out of memory rendering the chat template");
    free(scratch.p);
    return rc;
}

static int render(chat_format_t fmt, const chat_msg_t *msgs, size_t n_msgs, const cJSON *tools,
                  const chat_opts_t *opts, jbuf_t *b, err_t *err) {
    switch (fmt) {
        case CHAT_QWEN3:
        case CHAT_QWEN3_INSTRUCT_2507:
        case CHAT_QWEN3_THINKING_2507:
            return render_qwen3(b, fmt, msgs, n_msgs, tools, opts, err);
        case CHAT_QWEN3_5:
        case CHAT_QWEN3_5_THINK_OFF:
            return render_qwen3_5(b, fmt, msgs, n_msgs, tools, opts, err);
        default:
            return err_set(err, "chat: unknown chat format %d", (int)fmt);
    }
}

// ---------------------------------------------------------------------------------------------
// continue_final_message, as transformers' render_jinja_template does it: the final message's
// text gets a marker appended, the conversation is rendered, and the prompt is cut where the
// marker starts. When the template kept the space that ends the marker, the message was rendered
// as given and the cut is exact; when it trimmed it (Qwen3.5's |trim), trailing whitespace of the
// message was trimmed too, so the prompt is right-stripped at the cut.

static const char CONTINUE_TAG[] = "CONTINUE_FINAL_MESSAGE_TAG ";
#define CONTINUE_TAG_STRIPPED_LEN (sizeof CONTINUE_TAG - 2)

typedef struct continued {
    chat_msg_t *msgs;   /* a copy of the conversation whose final text has the marker */
    const char **parts; /* the final message's parts, the last one marked */
    size_t *part_lens;
    jbuf_t text; /* the marked text */
    sv_t final;  /* the final text as given */
} continued_t;

static void continued_free(continued_t *c) {
    free(c->msgs);
    free(c->parts);
    free(c->part_lens);
    free(c->text.p);
}

static int continue_mark(const chat_msg_t *msgs, size_t n, continued_t *c, err_t *err) {
    if (n == 0) return err_set(err, "continue_final_message is set but the conversation is empty!");
    const chat_msg_t *last = &msgs[n - 1];
    if (last->content_kind == CHAT_CONTENT_NONE)
        return err_set(err, "continue_final_message is set but the final message has no "
                            "\"content\" to continue!");
    if (last->content_kind == CHAT_CONTENT_PARTS && last->n_parts == 0)
        return err_set(err, "continue_final_message is set but we could not find any text to "
                            "continue in the final message!");
    if (!(c->msgs = malloc(n * sizeof *c->msgs))) return err_set(err, "out of memory");
    memcpy(c->msgs, msgs, n * sizeof *msgs);
    chat_msg_t *m = &c->msgs[n - 1];
    size_t k = m->n_parts - 1;
    if (m->content_kind == CHAT_CONTENT_TEXT)
        c->final = sv_n(m->content, m->content_len);
    else
        c->final = sv_n(m->parts[k], m->part_lens ? m->part_lens[k] : 0);
    jb_init(&c->text);
    put_sv(&c->text, c->final);
    jb_lit(&c->text, CONTINUE_TAG);
    if (c->text.oom) return err_set(err, "out of memory");
    if (m->content_kind == CHAT_CONTENT_TEXT) {
        m->content = c->text.p;
        m->content_len = c->text.len;
        return 0;
    }
    c->parts = malloc(m->n_parts * sizeof *c->parts);
    c->part_lens = malloc(m->n_parts * sizeof *c->part_lens);
    if (!c->parts || !c->part_lens) return err_set(err, "out of memory");
    for (size_t i = 0; i < m->n_parts; i++) {
        c->parts[i] = m->parts[i];
        c->part_lens[i] = sv_n(m->parts[i], m->part_lens ? m->part_lens[i] : 0).n;
    }
    c->parts[k] = c->text.p;
    c->part_lens[k] = c->text.len;
    m->parts = c->parts;
    m->part_lens = c->part_lens;
    return 0;
}

/* Cuts the rendered prompt at the marker; fails as transformers does when the template dropped
 * the final message or the marker. */
static int continue_cut(jbuf_t *b, sv_t final, err_t *err) {
    sv_t out = {b->p, b->len};
    sv_t stripped = sv_trim(final);
    const char *tag = sv_rfind(out, "CONTINUE_FINAL_MESSAGE_TAG");
    if (!tag || (stripped.n && !memmem(out.p, out.n, stripped.p, stripped.n)))
        return err_set(err, "continue_final_message is set but the final message does not appear "
                            "in the chat after applying the chat template! This can happen if the "
                            "chat template deletes portions of the final message.");
    size_t at = (size_t)(tag - out.p);
    bool kept_space =
        out.n - at > CONTINUE_TAG_STRIPPED_LEN && out.p[at + CONTINUE_TAG_STRIPPED_LEN] == ' ';
    if (!kept_space)
        for (size_t k; (k = utf8_py_space_before(out.p, at));)
            at -= k;
    b->len = at;
    return 0;
}

int chat_render(chat_format_t fmt, const chat_msg_t *msgs, size_t n_msgs, const cJSON *tools,
                const chat_opts_t *opts, char **out, size_t *out_len, err_t *err) {
    static const chat_opts_t defaults = {0};
    if (!opts) opts = &defaults;
    *out = NULL;
    if (out_len) *out_len = 0;
    if (tools && !cJSON_IsArray(tools) && !cJSON_IsNull(tools))
        return err_set(err, "chat: tools must be a JSON array");
    if (tools && cJSON_IsNull(tools)) tools = NULL;
    for (size_t i = 0; i < n_msgs; i++)
        for (size_t k = 0; k < msgs[i].n_tool_calls; k++)
            if (!msgs[i].tool_calls[k].name)
                return err_set(err, "chat: message %zu: tool call %zu has no function name", i, k);
    if (opts->continue_final_message && opts->add_generation_prompt)
        return err_set(err, "continue_final_message and add_generation_prompt are not compatible: "
                            "the first continues the final message, the second starts a new "
                            "assistant message");
    continued_t cont = {0};
    jbuf_t b = {0};
    int rc;
    if (opts->continue_final_message && continue_mark(msgs, n_msgs, &cont, err) < 0)
        rc = -1;
    else
        rc = render(fmt, cont.msgs ? cont.msgs : msgs, n_msgs, tools, opts, &b, err);
    if (rc == 0 && !b.oom && cont.msgs) rc = continue_cut(&b, cont.final, err);
    jb_lit(&b, ""); /* allocated and NUL-terminated, also when empty or cut */
    if (rc == 0 && b.oom) rc = err_set(err, "out of memory rendering the chat template");
    continued_free(&cont);
    if (rc < 0) {
        free(b.p);
        return -1;
    }
    *out = b.p;
    if (out_len) *out_len = b.len;
    return 0;
}

bool chat_prompt_ends_reasoning(chat_format_t fmt, const chat_opts_t *opts) {
    chat_think_t think = opts ? opts->enable_thinking : CHAT_THINK_DEFAULT;
    switch (fmt) {
        case CHAT_QWEN3_INSTRUCT_2507:
            return true;
        case CHAT_QWEN3_THINKING_2507:
            return false;
        case CHAT_QWEN3_5_THINK_OFF:
            return think != CHAT_THINK_ON;
        default:
            return think == CHAT_THINK_OFF;
    }
}

// ---------------------------------------------------------------------------------------------
// Formats and detection

const char *chat_format_name(chat_format_t fmt) {
    switch (fmt) {
        case CHAT_QWEN3:
            return "qwen3";
        case CHAT_QWEN3_INSTRUCT_2507:
            return "qwen3-instruct-2507";
        case CHAT_QWEN3_THINKING_2507:
            return "qwen3-thinking-2507";
        case CHAT_QWEN3_5:
            return "qwen3.5";
        case CHAT_QWEN3_5_THINK_OFF:
            return "qwen3.5-think-off";
    }
    return "unknown";
}

/* The family is recognised by what its templates render (ChatML turns, the multi-step tool
 * bookkeeping, and the tool-call syntax); the variant by its generation prompt. A template
 * string literal spells a newline as the two characters backslash and n. */
int chat_detect(const char *text, const char *file, chat_format_t *fmt, err_t *err) {
    bool chatml = strstr(text, "<|im_start|>") && strstr(text, "last_query_index");
    if (chatml && strstr(text, "<function=") && strstr(text, "<parameter=")) {
        *fmt = strstr(text, "enable_thinking is true") ? CHAT_QWEN3_5_THINK_OFF : CHAT_QWEN3_5;
        return 0;
    }
    if (chatml && strstr(text, "reasoning_content") &&
        (strstr(text, "<tool_call>\\n{\"name\": \"") ||
         strstr(text, "<tool_call>\n{\"name\": \""))) {
        if (strstr(text, "enable_thinking"))
            *fmt = CHAT_QWEN3;
        else if (strstr(text, "'<|im_start|>assistant\\n<think>\\n'"))
            *fmt = CHAT_QWEN3_THINKING_2507;
        else
            *fmt = CHAT_QWEN3_INSTRUCT_2507;
        return 0;
    }
    return err_set(err,
                   "%s: unknown chat template (supported: the Qwen3, Qwen3-2507 and Qwen3.5 "
                   "templates)",
                   file);
}

int chat_detect_dir(mdir_t *dir, chat_format_t *fmt, err_t *err) {
    char file[4200];
    char *text = NULL;
    int rc = -1;
    if (mdir_has(dir, "chat_template.jinja")) {
        snprintf(file, sizeof file, "%s/chat_template.jinja", mdir_path(dir));
        if (mdir_read_text(dir, "chat_template.jinja", &text, NULL, err) < 0) return -1;
        rc = chat_detect(text, file, fmt, err);
        free(text);
        return rc;
    }
    snprintf(file, sizeof file, "%s/tokenizer_config.json", mdir_path(dir));
    if (!mdir_has(dir, "tokenizer_config.json"))
        return err_set(err, "%s: missing (the model has no chat template)", file);
    size_t len;
    if (mdir_read_text(dir, "tokenizer_config.json", &text, &len, err) < 0) return -1;
    cJSON *json = cJSON_ParseWithLength(text, len);
    if (!json) {
        err_set(err, "%s: invalid JSON", file);
        goto out;
    }
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(json, "chat_template");
    if (cJSON_IsArray(tpl)) {
        const cJSON *found = NULL;
        for (const cJSON *t = tpl->child; t; t = t->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
                found = cJSON_GetObjectItemCaseSensitive(t, "template");
        }
        tpl = found;
    }
    if (!cJSON_IsString(tpl))
        err_set(err, "%s: no \"chat_template\" (the model has no chat template)", file);
    else
        rc = chat_detect(tpl->valuestring, file, fmt, err);
    cJSON_Delete(json);
out:
    free(text);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Reasoning split

static const char THINK_OPEN[] = "<think>";
static const char THINK_CLOSE[] = "</think>";
static const char TOOL_CALL[] = "<tool_call>";
static const char FUNCTION_OPEN[] = "<function";

typedef enum { TC_GENUINE, TC_NOT, TC_UNDECIDED } tc_verdict_t;

/* Whether the text after a <tool_call> makes it the start of a real call: vLLM requires
 * after.lstrip() to match <function[\s=]. TC_UNDECIDED: the text so far is a prefix of that. */
static tc_verdict_t tool_call_verdict(const char *after, size_t n) {
    sv_t rest = sv_lstrip_py((sv_t){after, n});
    size_t k = sizeof FUNCTION_OPEN - 1;
    if (rest.n <= k) return memcmp(rest.p, FUNCTION_OPEN, rest.n) == 0 ? TC_UNDECIDED : TC_NOT;
    if (memcmp(rest.p, FUNCTION_OPEN, k) != 0) return TC_NOT;
    return rest.p[k] == '=' || utf8_py_space(rest.p + k, rest.n - k) ? TC_GENUINE : TC_NOT;
}

void chat_reasoning_split(const char *text, size_t len, bool thinking_disabled, chat_split_t *out) {
    sv_t s = {text, len};
    const char *open = sv_find(s, THINK_OPEN);
    if (open) s = (sv_t){open + 7, len - (size_t)(open + 7 - text)};
    *out = (chat_split_t){0};
    const char *close = sv_find(s, THINK_CLOSE);
    if (close) {
        out->reasoning = s.p;
        out->reasoning_len = (size_t)(close - s.p);
        size_t after = s.n - out->reasoning_len - 8;
        if (after) {
            out->content = close + 8;
            out->content_len = after;
        }
        return;
    }
    if (thinking_disabled) {
        out->content = s.p;
        out->content_len = s.n;
        return;
    }
    const char *tc = sv_find(s, TOOL_CALL);
    if (tc && tool_call_verdict(tc + 11, s.n - (size_t)(tc + 11 - s.p)) == TC_GENUINE) {
        if (tc > s.p) {
            out->reasoning = s.p;
            out->reasoning_len = (size_t)(tc - s.p);
        }
        out->content = tc;
        out->content_len = s.n - (size_t)(tc - s.p);
        return;
    }
    out->reasoning = s.p;
    out->reasoning_len = s.n;
}

struct chat_reasoning {
    bool passthrough;   /* the prompt ended the reasoning: everything is content */
    bool ended;         /* </think> or a genuine tool call seen: everything is content */
    bool think_dropped; /* the first <think> was dropped */
    bool tc_checked;    /* the first <tool_call> was not a call: no later one ends reasoning */
    jbuf_t held;        /* text not returned yet, waiting for the next delta to decide */
    jbuf_t work, r, c;  /* held + delta, and this call's reasoning and content */
};

int chat_reasoning_create(bool prompt_is_reasoning_end, chat_reasoning_t **out, err_t *err) {
    chat_reasoning_t *rs = calloc(1, sizeof *rs);
    if (!rs) return err_set(err, "out of memory");
    rs->passthrough = prompt_is_reasoning_end;
    *out = rs;
    return 0;
}

void chat_reasoning_destroy(chat_reasoning_t *rs) {
    if (!rs) return;
    free(rs->held.p);
    free(rs->work.p);
    free(rs->r.p);
    free(rs->c.p);
    free(rs);
}

/* Length of the longest suffix of s that is a proper prefix of tag. */
static size_t partial_tag(sv_t s, const char *tag) {
    size_t k = strlen(tag) - 1;
    if (k > s.n) k = s.n;
    for (; k > 0; k--)
        if (memcmp(s.p + s.n - k, tag, k) == 0) return k;
    return 0;
}

/* The earliest of the tags still able to change the state, at or after s.p. */
static const char *next_tag(const chat_reasoning_t *rs, sv_t s, const char **tag) {
    const char *best = NULL;
    const char *tags[3] = {THINK_CLOSE, rs->think_dropped ? NULL : THINK_OPEN,
                           rs->tc_checked ? NULL : TOOL_CALL};
    for (int i = 0; i < 3; i++) {
        const char *p = tags[i] ? sv_find(s, tags[i]) : NULL;
        if (p && (!best || p < best)) {
            best = p;
            *tag = tags[i];
        }
    }
    return best;
}

static void set_out(chat_split_t *out, const jbuf_t *r, const jbuf_t *c) {
    *out = (chat_split_t){0};
    if (r->len) {
        out->reasoning = r->p;
        out->reasoning_len = r->len;
    }
    if (c->len) {
        out->content = c->p;
        out->content_len = c->len;
    }
}

int chat_reasoning_feed(chat_reasoning_t *rs, const char *delta, size_t len, chat_split_t *out,
                        err_t *err) {
    *out = (chat_split_t){0};
    if (rs->passthrough || rs->ended) {
        if (len) {
            out->content = delta;
            out->content_len = len;
        }
        return 0;
    }
    rs->work.len = rs->r.len = rs->c.len = 0;
    jb_raw(&rs->work, rs->held.p, rs->held.len);
    jb_raw(&rs->work, delta, len);
    rs->held.len = 0;
    sv_t s = {rs->work.p, rs->work.len};
    while (s.n) {
        const char *tag = NULL;
        const char *at = next_tag(rs, s, &tag);
        if (!at) {
            size_t keep = partial_tag(s, THINK_CLOSE);
            if (!rs->think_dropped && partial_tag(s, THINK_OPEN) > keep)
                keep = partial_tag(s, THINK_OPEN);
            if (!rs->tc_checked && partial_tag(s, TOOL_CALL) > keep)
                keep = partial_tag(s, TOOL_CALL);
            jb_raw(&rs->r, s.p, s.n - keep);
            jb_raw(&rs->held, s.p + s.n - keep, keep);
            break;
        }
        size_t before = (size_t)(at - s.p), taglen = strlen(tag);
        jb_raw(&rs->r, s.p, before);
        sv_t after = {at + taglen, s.n - before - taglen};
        if (tag == THINK_OPEN) {
            rs->think_dropped = true;
            s = after;
        } else if (tag == THINK_CLOSE) {
            rs->ended = true;
            put_sv(&rs->c, after);
            break;
        } else {
            tc_verdict_t v = tool_call_verdict(after.p, after.n);
            if (v == TC_GENUINE) {
                rs->ended = true;
                jb_raw(&rs->c, at, s.n - before);
                break;
            }
            if (v == TC_UNDECIDED) {
                jb_raw(&rs->held, at, s.n - before);
                break;
            }
            rs->tc_checked = true;
            jb_raw(&rs->r, at, taglen);
            s = after;
        }
    }
    if (rs->work.oom || rs->held.oom || rs->r.oom || rs->c.oom)
        return err_set(err, "out of memory splitting reasoning");
    set_out(out, &rs->r, &rs->c);
    return 0;
}

void chat_reasoning_finish(chat_reasoning_t *rs, chat_split_t *out) {
    *out = (chat_split_t){0};
    if (!rs->held.len) return;
    rs->r.len = rs->c.len = 0;
    jb_raw(&rs->r, rs->held.p, rs->held.len);
    rs->held.len = 0;
    set_out(out, &rs->r, &rs->c);
}
