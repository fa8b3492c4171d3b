/*
 * toolcall: vLLM's hermes and qwen3_coder tool-call parsers (toolcall.h). One streaming parser
 * serves both the streamed and the whole reply (tc_extract feeds it the whole text), so the two
 * always agree.
 */
#include "toolcall.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jnorm.h"
#include "json.h"
#include "rng.h"
#include "utf8.h"

static const char CALL_OPEN[] = "<tool_call>";
static const char CALL_CLOSE[] = "</tool_call>";
static const char FN_OPEN[] = "<function=";
static const char FN_CLOSE[] = "</function>";
static const char PARAM_OPEN[] = "<parameter=";
static const char PARAM_CLOSE[] = "</parameter>";
#define LIT_LEN(s) (sizeof(s) - 1)

// ---------------------------------------------------------------------------------------------
// Formats, prefixes and ids

const char *tc_format_name(tc_format_t fmt) {
    switch (fmt) {
        case TC_HERMES:
            return "hermes";
        case TC_QWEN3_CODER:
            return "qwen3_coder";
        default:
            return "none";
    }
}

int tc_format_parse(const char *name, tc_format_t *out) {
    if (!strcmp(name, "hermes"))
        *out = TC_HERMES;
    else if (!strcmp(name, "qwen3_coder"))
        *out = TC_QWEN3_CODER;
    else
        return -1;
    return 0;
}

tc_format_t tc_format_for_chat(chat_format_t fmt) {
    return fmt == CHAT_QWEN3_5 || fmt == CHAT_QWEN3_5_THINK_OFF ? TC_QWEN3_CODER : TC_HERMES;
}

int tc_call_prefix(tc_format_t fmt, const char *name, char *buf, size_t size) {
    jbuf_t b;
    jb_init(&b);
    if (fmt == TC_HERMES) {
        jb_lit(&b, "<tool_call>\n");
        if (name) {
            jb_lit(&b, "{\"name\": ");
            jb_py_string(&b, name, strlen(name));
            jb_lit(&b, ", \"arguments\": ");
        }
    } else {
        jb_lit(&b, "<tool_call>\n<function=");
        if (name) {
            jb_lit(&b, name);
            jb_lit(&b, ">\n");
        }
    }
    int rc = !b.oom && b.len < size ? 0 : -1;
    if (rc == 0) memcpy(buf, b.p, b.len + 1);
    jb_free(&b);
    return rc;
}

void tc_new_id(tc_format_t fmt, char *buf, size_t size) {
    static atomic_uint_least64_t counter;
    static uint64_t seed;
    if (!seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = rng_mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) | 1;
    }
    uint64_t k = atomic_fetch_add(&counter, 1);
    uint64_t a = rng_bits(seed, 0x7001, k), b = rng_bits(seed, 0x7002, k);
    if (fmt == TC_QWEN3_CODER)
        snprintf(buf, size, "call_%016llx%08llx", (unsigned long long)a,
                 (unsigned long long)(b >> 32));
    else
        snprintf(buf, size, "chatcmpl-tool-%016llx%016llx", (unsigned long long)a,
                 (unsigned long long)b);
}

// ---------------------------------------------------------------------------------------------
// The request's tools

/* The function object of the tool called `name`, through *fn (NULL without tools). False when
 * the request has tools and none is called so, and for a name holding a NUL byte, which the
 * whole reply's calls (C strings) would cut where the streamed header does not. */
static bool known_function(const cJSON *tools, const char *name, size_t n, const cJSON **fn) {
    *fn = NULL;
    if (memchr(name, '\0', n)) return false;
    if (!tools) return true;
    for (const cJSON *t = tools->child; t; t = t->next) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (cJSON_IsString(nm) && json_strlen(nm) == n && memcmp(nm->valuestring, name, n) == 0) {
            *fn = f;
            return true;
        }
    }
    return false;
}

/* vLLM's _get_arguments_config: the parameters' "properties", or the parameters object. */
static const cJSON *param_config(const cJSON *fn) {
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    if (!cJSON_IsObject(params)) return NULL;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    return props ? props : params;
}

// ---------------------------------------------------------------------------------------------
// qwen3_coder parameter values (vLLM's _convert_param_value)

static bool starts(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Python's str.strip() of value[0..n). */
static void py_strip(const char **s, size_t *n) {
    for (size_t k; (k = utf8_py_space(*s, *n));)
        *s += k, *n -= k;
    for (size_t k; (k = utf8_py_space_before(*s, *n));)
        *n -= k;
}

/* int(value): an optional sign and decimal digits (underscores between them), whitespace around.
 * Writes the integer as Python prints it. */
static bool py_int(jbuf_t *out, const char *s, size_t n) {
    py_strip(&s, &n);
    bool neg = n && s[0] == '-';
    if (n && (s[0] == '-' || s[0] == '+')) s++, n--;
    jbuf_t d;
    jb_init(&d);
    bool ok = n > 0;
    for (size_t i = 0; i < n && ok; i++) {
        if (s[i] >= '0' && s[i] <= '9')
            jb_raw(&d, s + i, 1);
        else
            ok = s[i] == '_' && i > 0 && i + 1 < n && s[i - 1] != '_';
    }
    size_t z = 0;
    while (ok && z + 1 < d.len && d.p[z] == '0')
        z++;
    if (ok) {
        if (neg && !(d.len - z == 1 && d.p[z] == '0')) jb_raw(out, "-", 1);
        jb_raw(out, d.p + z, d.len - z);
    }
    jb_free(&d);
    return ok && !d.oom;
}

/* float(value), then an int when integral (vLLM): digits, a point, an exponent, whitespace
 * around; inf and nan fail there (int() of them raises), so they stay strings. */
static bool py_float_or_int(jbuf_t *out, const char *s, size_t n) {
    py_strip(&s, &n);
    char buf[128];
    if (n == 0 || n >= sizeof buf) return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] != '_') buf[k++] = s[i];
    buf[k] = '\0';
    for (size_t i = 0; i < k; i++)
        if (!strchr("0123456789+-.eE", buf[i])) return false;
    char *end;
    double v = strtod(buf, &end);
    if (*end || end == buf || v != v || v - v != 0) return false;
    /* beyond long long's range first: converting such a double to it is undefined (and every
     * double that large is integral) */
    bool huge = v >= 9.2e18 || v <= -9.2e18;
    if (huge || v == (double)(long long)v) {
        if (!huge) {
            char t[32];
            snprintf(t, sizeof t, "%lld", (long long)v);
            jb_lit(out, t);
        } else {
            char t[400];
            snprintf(t, sizeof t, "%.0f", v); /* exact digits of an integral double */
            jb_lit(out, t);
        }
        return true;
    }
    jb_py_float(out, v, true);
    return true;
}

/* Normalizes JSON text (json.loads then json.dumps); false when it is not one JSON value. */
static bool json_value(jbuf_t *out, const char *s, size_t n) {
    jnorm_t j;
    jnorm_init(&j);
    jbuf_t tmp;
    jb_init(&tmp);
    j.out = &tmp;
    for (size_t i = 0; i < n && j.state != JN_ERROR; i++)
        jnorm_push(&j, s[i]);
    bool ok = jnorm_end(&j) == JN_DONE && !tmp.oom;
    if (ok) jb_raw(out, tmp.p ? tmp.p : "", tmp.len);
    jb_free(&tmp);
    jnorm_free(&j);
    return ok;
}

/* ast.literal_eval for the literals a model writes: Python's True, False, None and quoted
 * strings ('...' or "..."), numbers, lists and dicts. The Python is turned into JSON (JSON's own
 * true/false/null are not Python, so they fail) and normalized. */
static bool py_literal(jbuf_t *out, const char *s, size_t n) {
    py_strip(&s, &n);
    jbuf_t j;
    jb_init(&j);
    bool ok = n > 0;
    for (size_t i = 0; i < n && ok;) {
        char c = s[i];
        if (c == '\'' || c == '"') {
            size_t k = i + 1;
            jb_raw(&j, "\"", 1);
            while (k < n && s[k] != c) {
                if (s[k] == '\\' && k + 1 < n) {
                    if (s[k + 1] == '\'') {
                        jb_raw(&j, "'", 1);
                    } else {
                        jb_raw(&j, s + k, 2);
                    }
                    k += 2;
                    continue;
                }
                if (s[k] == '"') jb_raw(&j, "\\", 1);
                jb_raw(&j, s + k, 1);
                k++;
            }
            ok = k < n;
            jb_raw(&j, "\"", 1);
            i = k + 1;
        } else if (!strncmp(s + i, "True", 4) || !strncmp(s + i, "None", 4)) {
            jb_lit(&j, s[i] == 'T' ? "true" : "null");
            i += 4;
        } else if (!strncmp(s + i, "False", 5)) {
            jb_lit(&j, "false");
            i += 5;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            ok = false; /* a name: not a literal (JSON's true/false/null included) */
        } else {
            jb_raw(&j, &c, 1);
            i++;
        }
    }
    ok = ok && !j.oom && json_value(out, j.p ? j.p : "", j.len);
    jb_free(&j);
    return ok;
}

/* Writes json.dumps of the parameter's value converted as vLLM converts it by the tool's schema
 * (strings as they are when the schema does not know the parameter). */
static void convert_param(jbuf_t *out, const char *v, size_t n, const char *name,
                          const cJSON *config) {
    if (n == 4 && !strncasecmp(v, "null", 4)) {
        jb_lit(out, "null");
        return;
    }
    const cJSON *p = config ? cJSON_GetObjectItemCaseSensitive(config, name) : NULL;
    if (!p) {
        jb_py_string(out, v, n);
        return;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    char type[32] = "string";
    if (cJSON_IsObject(p) && t) {
        const char *ts = cJSON_IsString(t) ? t->valuestring : "[other]";
        size_t tn = strlen(ts);
        py_strip(&ts, &tn);
        size_t k = 0;
        for (; k < tn && k + 1 < sizeof type; k++)
            type[k] = (char)(ts[k] >= 'A' && ts[k] <= 'Z' ? ts[k] + 32 : ts[k]);
        type[k] = '\0';
    }
    static const char *const strings[] = {"string", "str", "text", "varchar", "char", "enum"};
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (!strcmp(type, strings[i])) {
            jb_py_string(out, v, n);
            return;
        }
    size_t mark = out->len;
    bool ok;
    if (starts(type, "int") || starts(type, "uint") || starts(type, "long") ||
        starts(type, "short") || starts(type, "unsigned")) {
        ok = py_int(out, v, n);
    } else if (starts(type, "num") || starts(type, "float")) {
        ok = py_float_or_int(out, v, n);
    } else if (!strcmp(type, "boolean") || !strcmp(type, "bool") || !strcmp(type, "binary")) {
        jb_lit(out, n == 4 && !strncasecmp(v, "true", 4) ? "true" : "false");
        return;
    } else {
        bool structured = !strcmp(type, "object") || !strcmp(type, "array") ||
                          !strcmp(type, "arr") || starts(type, "dict") || starts(type, "list");
        ok = (structured && json_value(out, v, n)) || py_literal(out, v, n);
    }
    if (!ok) {
        out->len = mark;
        if (out->p) out->p[mark] = '\0';
        jb_py_string(out, v, n);
    }
}

// ---------------------------------------------------------------------------------------------
// The streaming parser

typedef struct ev_rec {
    tc_ev_kind_t kind;
    int index;
    size_t off, len; /* text in the arena */
    size_t id_off;   /* BEGIN: its id, NUL-terminated, in the arena */
} ev_rec_t;

struct tc_parser {
    tc_format_t fmt;
    const cJSON *tools;
    bool in_call;
    bool malformed; /* a call did not parse (tc_extract then gives the whole text as content) */
    int n_calls;    /* calls whose header went out */
    jbuf_t hold;    /* outside calls: text not given out yet (it may start a tag) */
    jbuf_t raw;     /* inside a call: its text after <tool_call>, as it came */
    /* the call being read */
    size_t pos;  /* bytes of raw read */
    bool begun;  /* its header went out */
    bool broken; /* it does not parse */
    bool closed; /* hermes: its JSON object is complete; qwen3_coder: </function> seen */
    char id[48];
    jbuf_t name;
    jbuf_t args; /* argument text not given out yet */
    const cJSON *fn;
    /* hermes */
    jnorm_t jn;
    bool in_name, in_args, name_is_string, has_args;
    /* qwen3_coder */
    int n_params;
    /* this call's events: records pointing into the arena, then tc_event_t */
    jbuf_t arena;
    ev_rec_t *recs;
    int n_recs, cap_recs;
    tc_event_t *evs;
    int cap_evs;
    bool oom;
};

static void emit(tc_parser_t *p, tc_ev_kind_t kind, const char *text, size_t len) {
    if (kind == TC_EV_CONTENT && (p->n_calls > 0 || len == 0)) return;
    if (kind == TC_EV_ARGS && len == 0) return;
    if (p->n_recs == p->cap_recs) {
        int cap = p->cap_recs ? 2 * p->cap_recs : 8;
        ev_rec_t *r = realloc(p->recs, (size_t)cap * sizeof *r);
        if (!r) {
            p->oom = true;
            return;
        }
        p->recs = r;
        p->cap_recs = cap;
    }
    ev_rec_t *r = &p->recs[p->n_recs++];
    *r = (ev_rec_t){.kind = kind, .index = p->n_calls - 1};
    if (kind == TC_EV_BEGIN) {
        r->id_off = p->arena.len;
        jb_raw(&p->arena, p->id, strlen(p->id) + 1);
    }
    r->off = p->arena.len;
    r->len = len;
    jb_raw(&p->arena, text, len);
}

/* The call's arguments produced so far go out (once its header has). */
static void flush_args(tc_parser_t *p) {
    if (!p->begun || !p->args.len) return;
    emit(p, TC_EV_ARGS, p->args.p, p->args.len);
    jb_reset(&p->args);
}

static void begin(tc_parser_t *p) {
    tc_new_id(p->fmt, p->id, sizeof p->id);
    p->begun = true;
    p->n_calls++;
    emit(p, TC_EV_BEGIN, p->name.p ? p->name.p : "", p->name.len);
    flush_args(p);
}

static void start_call(tc_parser_t *p) {
    p->in_call = true;
    p->pos = 0;
    p->begun = p->broken = p->closed = false;
    p->in_name = p->in_args = p->name_is_string = p->has_args = false;
    p->n_params = 0;
    p->fn = NULL;
    jb_reset(&p->raw);
    jb_reset(&p->name);
    jb_reset(&p->args);
    jnorm_free(&p->jn);
    jnorm_init(&p->jn);
}

/* Bytes at the end of s[0..n) that could be the start of `tag`. */
static size_t partial(const char *s, size_t n, const char *tag, size_t tn) {
    size_t k = tn - 1 < n ? tn - 1 : n;
    for (; k > 0; k--)
        if (memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *tag, size_t tn) {
    return memmem(s, n, tag, tn);
}

/* hermes: the call's JSON object through the normalizer, the name and the arguments picked out
 * at depth 1, up to `end` bytes of raw. */
static void hermes_read(tc_parser_t *p, size_t end) {
    jnorm_t *j = &p->jn;
    for (; p->pos < end && !p->broken; p->pos++) {
        char c = p->raw.p[p->pos];
        if (j->depth == 1 && j->state == JN_VALUE && c != ' ' && c != '\n' && c != '\t' &&
            c != '\r') {
            const jbuf_t *k = &j->key;
            if (k->len == 9 && !memcmp(k->p, "arguments", 9)) {
                if (p->has_args) { /* a second "arguments": json.loads keeps one, we cannot */
                    p->broken = true;
                    break;
                }
                p->in_args = p->has_args = true;
                j->out = &p->args;
            } else if (k->len == 4 && !memcmp(k->p, "name", 4)) {
                p->in_name = true;
                p->name_is_string = c == '"';
                jb_reset(&p->name);
                j->decoded = &p->name;
            }
        }
        if (jnorm_push(j, c) == JN_ERROR) {
            p->broken = true;
            break;
        }
        if ((p->in_args || p->in_name) && (j->state == JN_AFTER || j->state == JN_DONE) &&
            j->depth <= 1) {
            if (p->in_name && !p->begun) {
                const cJSON *fn;
                if (!p->name_is_string || !p->name.len ||
                    !known_function(p->tools, p->name.p, p->name.len, &fn)) {
                    p->broken = true;
                    break;
                }
                p->fn = fn;
                begin(p);
            }
            p->in_args = p->in_name = false;
            j->out = j->decoded = NULL;
        }
        if (j->state == JN_DONE) p->closed = p->has_args && p->begun;
    }
    flush_args(p);
}

/* qwen3_coder: the function's name, then each parameter once it is whole. `final`: the call was
 * closed by </tool_call> at `end`, so a value may run to it. */
static void coder_read(tc_parser_t *p, size_t end, bool final) {
    const char *s = p->raw.p ? p->raw.p : "";
    if (!p->begun) {
        const char *f = find(s, end, FN_OPEN, LIT_LEN(FN_OPEN));
        const char *gt = f ? memchr(f, '>', (size_t)(s + end - f)) : NULL;
        if (!gt) {
            if (final) p->broken = true;
            return;
        }
        const char *name = f + LIT_LEN(FN_OPEN);
        jb_raw(&p->name, name, (size_t)(gt - name));
        const cJSON *fn;
        if (!p->name.len || !known_function(p->tools, p->name.p, p->name.len, &fn)) {
            p->broken = true;
            return;
        }
        p->fn = fn;
        jb_lit(&p->args, "{");
        begin(p);
        p->pos = (size_t)(gt + 1 - s);
    }
    const cJSON *config = param_config(p->fn);
    while (!p->closed) {
        const char *rest = s + p->pos;
        size_t rn = end - p->pos;
        const char *param = find(rest, rn, PARAM_OPEN, LIT_LEN(PARAM_OPEN));
        const char *fclose = find(rest, rn, FN_CLOSE, LIT_LEN(FN_CLOSE));
        if (fclose && (!param || fclose < param)) {
            jb_lit(&p->args, "}");
            p->closed = true;
            p->pos = (size_t)(fclose + LIT_LEN(FN_CLOSE) - s);
            break;
        }
        if (!param) {
            if (final) { /* the tool call closes the function */
                jb_lit(&p->args, "}");
                p->closed = true;
            }
            break;
        }
        const char *pname = param + LIT_LEN(PARAM_OPEN);
        const char *gt = memchr(pname, '>', (size_t)(s + end - pname));
        if (!gt) break;
        const char *v = gt + 1;
        size_t vn_max = (size_t)(s + end - v);
        const char *vend = find(v, vn_max, PARAM_CLOSE, LIT_LEN(PARAM_CLOSE));
        const char *next = find(v, vn_max, PARAM_OPEN, LIT_LEN(PARAM_OPEN));
        const char *fend = find(v, vn_max, FN_CLOSE, LIT_LEN(FN_CLOSE));
        size_t after;
        if (!vend || (next && next < vend) || (fend && fend < vend)) {
            vend = next && (!fend || next < fend) ? next : fend;
            if (!vend && !final) break; /* the value may go on */
            if (!vend) vend = s + end;
            after = (size_t)(vend - s);
        } else {
            after = (size_t)(vend + LIT_LEN(PARAM_CLOSE) - s);
        }
        size_t vn = (size_t)(vend - v);
        if (vn && v[0] == '\n') v++, vn--;
        if (vn && v[vn - 1] == '\n') vn--;
        char *key = strndup(pname, (size_t)(gt - pname));
        if (!key) {
            p->oom = true;
            return;
        }
        if (p->n_params++) jb_lit(&p->args, ", ");
        jb_py_string(&p->args, key, strlen(key));
        jb_lit(&p->args, ": ");
        convert_param(&p->args, v, vn, key, config);
        free(key);
        p->pos = after;
    }
    flush_args(p);
}

/* The call ended: at raw[end] by </tool_call>, or with the reply when `eof`. */
static void end_call(tc_parser_t *p, size_t end, bool eof) {
    if (p->fmt == TC_HERMES && p->jn.state == JN_DONE && p->has_args && p->begun) p->closed = true;
    if (p->broken || !p->closed) {
        p->malformed = true;
        if (!p->begun) { /* nothing of it went out as a call: it is text */
            emit(p, TC_EV_CONTENT, CALL_OPEN, LIT_LEN(CALL_OPEN));
            emit(p, TC_EV_CONTENT, p->raw.p ? p->raw.p : "", end);
            if (!eof) emit(p, TC_EV_CONTENT, CALL_CLOSE, LIT_LEN(CALL_CLOSE));
        }
    }
    p->in_call = false;
}

/* Reads what the call's raw text allows; true when the call ended, with the bytes after its
 * closing tag left in raw from `*rest`. */
static bool read_call(tc_parser_t *p, size_t *rest) {
    const char *s = p->raw.p ? p->raw.p : "";
    const char *close = find(s, p->raw.len, CALL_CLOSE, LIT_LEN(CALL_CLOSE));
    size_t end = close ? (size_t)(close - s)
                       : p->raw.len - partial(s, p->raw.len, CALL_CLOSE, LIT_LEN(CALL_CLOSE));
    if (!p->broken) {
        if (p->fmt == TC_HERMES)
            hermes_read(p, end);
        else
            coder_read(p, end, close != NULL);
    }
    if (!close) return false;
    end_call(p, (size_t)(close - s), false);
    *rest = (size_t)(close - s) + LIT_LEN(CALL_CLOSE);
    return true;
}

/* Outside calls: content up to the next <tool_call>, which starts one. */
static void read_outside(tc_parser_t *p, const char *text, size_t len) {
    jb_raw(&p->hold, text, len);
    for (;;) {
        const char *s = p->hold.p ? p->hold.p : "";
        size_t n = p->hold.len;
        if (!p->in_call) {
            const char *open = find(s, n, CALL_OPEN, LIT_LEN(CALL_OPEN));
            if (!open) {
                size_t keep = partial(s, n, CALL_OPEN, LIT_LEN(CALL_OPEN));
                emit(p, TC_EV_CONTENT, s, n - keep);
                memmove(p->hold.p, s + n - keep, keep);
                p->hold.len = keep;
                return;
            }
            emit(p, TC_EV_CONTENT, s, (size_t)(open - s));
            start_call(p);
            size_t after = (size_t)(open - s) + LIT_LEN(CALL_OPEN);
            jb_raw(&p->raw, s + after, n - after);
            p->hold.len = 0;
        } else {
            jb_raw(&p->raw, s, n);
            p->hold.len = 0;
        }
        size_t rest;
        if (!read_call(p, &rest)) return;
        /* what followed the call is read again from the start */
        jb_raw(&p->hold, p->raw.p + rest, p->raw.len - rest);
    }
}

static int events_out(tc_parser_t *p, const tc_event_t **evs, int *n) {
    if (p->n_recs > p->cap_evs) {
        tc_event_t *e = realloc(p->evs, (size_t)p->n_recs * sizeof *e);
        if (!e)
            p->oom = true;
        else {
            p->evs = e;
            p->cap_evs = p->n_recs;
        }
    }
    if (p->oom || p->arena.oom || p->hold.oom || p->raw.oom || p->args.oom || p->name.oom) {
        *evs = NULL;
        *n = 0;
        return -1;
    }
    for (int i = 0; i < p->n_recs; i++) {
        const ev_rec_t *r = &p->recs[i];
        p->evs[i] = (tc_event_t){.kind = r->kind,
                                 .index = r->index,
                                 .text = p->arena.p + r->off,
                                 .len = r->len,
                                 .id = r->kind == TC_EV_BEGIN ? p->arena.p + r->id_off : NULL};
    }
    *evs = p->evs;
    *n = p->n_recs;
    return 0;
}

int tc_parser_create(tc_format_t fmt, const cJSON *tools, tc_parser_t **out, err_t *err) {
    tc_parser_t *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, "out of memory");
    p->fmt = fmt;
    p->tools = cJSON_IsArray(tools) ? tools : NULL;
    jnorm_init(&p->jn);
    *out = p;
    return 0;
}

void tc_parser_destroy(tc_parser_t *p) {
    if (!p) return;
    jb_free(&p->hold);
    jb_free(&p->raw);
    jb_free(&p->name);
    jb_free(&p->args);
    jb_free(&p->arena);
    jnorm_free(&p->jn);
    free(p->recs);
    free(p->evs);
    free(p);
}

int tc_parser_feed(tc_parser_t *p, const char *text, size_t len, const tc_event_t **evs, int *n) {
    p->n_recs = 0;
    jb_reset(&p->arena);
    read_outside(p, text, len);
    return events_out(p, evs, n);
}

int tc_parser_finish(tc_parser_t *p, const tc_event_t **evs, int *n) {
    p->n_recs = 0;
    jb_reset(&p->arena);
    if (p->in_call) {
        jb_raw(&p->raw, p->hold.p ? p->hold.p : "", p->hold.len);
        p->hold.len = 0;
        if (!p->broken && p->fmt == TC_HERMES) {
            hermes_read(p, p->raw.len);
            jnorm_end(&p->jn);
        }
        end_call(p, p->raw.len, true);
    } else {
        emit(p, TC_EV_CONTENT, p->hold.p ? p->hold.p : "", p->hold.len);
        p->hold.len = 0;
    }
    return events_out(p, evs, n);
}

int tc_parser_calls(const tc_parser_t *p) {
    return p->n_calls;
}

// ---------------------------------------------------------------------------------------------
// Whole replies

static int collect(tc_result_t *r, jbuf_t *content, const tc_event_t *evs, int n, bool *oom) {
    for (int i = 0; i < n; i++) {
        const tc_event_t *e = &evs[i];
        if (e->kind == TC_EV_CONTENT) {
            jb_raw(content, e->text, e->len);
        } else if (e->kind == TC_EV_BEGIN) {
            tc_call_t *c = realloc(r->calls, (size_t)(r->n_calls + 1) * sizeof *c);
            if (!c) return *oom = true, -1;
            r->calls = c;
            c = &r->calls[r->n_calls++];
            memset(c, 0, sizeof *c);
            snprintf(c->id, sizeof c->id, "%s", e->id);
            if (!(c->name = strndup(e->text, e->len)) || !(c->arguments = strdup("")))
                return *oom = true, -1;
        } else if (r->n_calls > 0) {
            tc_call_t *c = &r->calls[r->n_calls - 1];
            size_t have = strlen(c->arguments);
            char *a = realloc(c->arguments, have + e->len + 1);
            if (!a) return *oom = true, -1;
            memcpy(a + have, e->text, e->len);
            a[have + e->len] = '\0';
            c->arguments = a;
        }
    }
    return 0;
}

int tc_extract(tc_format_t fmt, const char *text, size_t len, const cJSON *tools, tc_result_t *out,
               err_t *err) {
    memset(out, 0, sizeof *out);
    tc_parser_t *p = NULL;
    if (tc_parser_create(fmt, tools, &p, err) < 0) return -1;
    jbuf_t content;
    jb_init(&content);
    const tc_event_t *evs;
    int n;
    bool oom = false;
    if (tc_parser_feed(p, text, len, &evs, &n) < 0 || collect(out, &content, evs, n, &oom) < 0 ||
        tc_parser_finish(p, &evs, &n) < 0 || collect(out, &content, evs, n, &oom) < 0)
        oom = true;
    bool malformed = p->malformed;
    tc_parser_destroy(p);
    if (oom || content.oom) {
        jb_free(&content);
        tc_result_free(out);
        return err_set(err, "out of memory");
    }
    if (malformed) { /* vLLM's fallback: the whole reply is content */
        tc_result_free(out);
        memset(out, 0, sizeof *out);
    } else if (out->n_calls) {
        out->content_len = content.len;
    }
    jb_free(&content);
    return 0;
}

void tc_result_free(tc_result_t *r) {
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    memset(r, 0, sizeof *r);
}
