/* bench: bench_run and the options' defaults; the HTTP tokenizer over a server's /tokenize and
 * /detokenize (see bench.h and README.md for how it finds the vocabulary and special ids). */
#include "bench.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "arrival.h"
#include "client.h"
#include "dataset.h"

#define DEFAULT_TIMEOUT_S (6 * 3600.0) /* vLLM's aiohttp total timeout */
#define SPECIAL_SCAN_MAX  1024         /* ids scanned down from the top for special tokens */
#define SPECIAL_SCAN_GAP  64           /* ... until this many in a row are not special */

void bench_options_default(bench_options_t *o) {
    memset(o, 0, sizeof *o);
    snprintf(o->base_url, sizeof o->base_url, "http://127.0.0.1:8000");
    o->backend = BENCH_BACKEND_OPENAI;
    o->dataset = BENCH_DATASET_RANDOM;
    o->num_prompts = 1000;
    o->input_len = 1024;
    o->output_len = 128;
    o->request_rate = INFINITY;
    o->burstiness = 1.0;
    o->percentile_metrics = BENCH_METRIC_TTFT | BENCH_METRIC_TPOT | BENCH_METRIC_ITL;
    o->metric_percentiles[0] = 99;
    o->n_metric_percentiles = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Blocking HTTP calls for everything outside the timed run (one keep-alive handle).            */

typedef struct http {
    CURL *easy;
    char *buf; /* the last response body, NUL-terminated */
    size_t len, cap;
    char auth[320];
} http_t;

static size_t http_write(char *p, size_t size, size_t nmemb, void *user) {
    http_t *h = user;
    size_t n = size * nmemb;
    if (h->len + n + 1 > h->cap) {
        size_t c = h->cap ? h->cap : 4096;
        while (c < h->len + n + 1)
            c *= 2;
        char *b = realloc(h->buf, c);
        if (!b) return 0;
        h->buf = b;
        h->cap = c;
    }
    memcpy(h->buf + h->len, p, n);
    h->len += n;
    h->buf[h->len] = '\0';
    return n;
}

static int http_init(http_t *h, const char *api_key, bench_err_t *err) {
    memset(h, 0, sizeof *h);
    if (!(h->easy = curl_easy_init())) return bench_err_set(err, "cannot initialize libcurl");
    if (api_key && api_key[0])
        snprintf(h->auth, sizeof h->auth, "Authorization: Bearer %s", api_key);
    return 0;
}

static void http_free(http_t *h) {
    if (h->easy) curl_easy_cleanup(h->easy);
    free(h->buf);
    memset(h, 0, sizeof *h);
}

/* GET (body NULL) or POST a JSON body; *status is the HTTP status. -1 only when no response came
 * (connection refused, timeout). */
static int http_do(http_t *h, const char *url, const char *body, long *status, bench_err_t *err) {
    char errbuf[CURL_ERROR_SIZE] = "";
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (hd) hd = curl_slist_append(hd, "Expect:");
    if (hd && h->auth[0]) hd = curl_slist_append(hd, h->auth);
    if (!hd) return bench_err_set(err, "out of memory");
    h->len = 0;
    if (h->buf) h->buf[0] = '\0';
    CURL *e = h->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 600L);
    if (body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    CURLcode rc = curl_easy_perform(e);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hd);
    if (rc != CURLE_OK)
        return bench_err_set(err, "%s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    if (!h->buf) http_write("", 0, 0, h);
    return 0;
}

/* The "message" of an OpenAI-style error body, or the start of the body. */
static void error_text(const http_t *h, char *out, size_t cap) {
    cJSON *j = h->buf ? cJSON_Parse(h->buf) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    snprintf(out, cap, "%.200s", cJSON_IsString(m) ? m->valuestring : h->buf ? h->buf : "");
    cJSON_Delete(j);
}

/* ------------------------------------------------------------------------------------------ */
/* The HTTP tokenizer                                                                          */

typedef struct http_tok {
    bench_tokenizer_t tok;
    http_t h;
    char url_tokenize[320], url_detokenize[320];
    const char *model;
    int32_t *specials;
} http_tok_t;

static int ht_encode(void *ctx, const char *text, bool add_special, int32_t **ids, int *n,
                     bench_err_t *err) {
    http_tok_t *t = ctx;
    *ids = NULL;
    *n = 0;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", t->model);
    cJSON_AddStringToObject(req, "prompt", text);
    cJSON_AddBoolToObject(req, "add_special_tokens", add_special);
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    if (!body) return bench_err_set(err, "out of memory");
    long status = 0;
    int rc = http_do(&t->h, t->url_tokenize, body, &status, err);
    free(body);
    if (rc < 0) return -1;
    if (status != 200) {
        char msg[256];
        error_text(&t->h, msg, sizeof msg);
        return bench_err_set(err, "%s: HTTP %ld: %s", t->url_tokenize, status, msg);
    }
    cJSON *j = cJSON_Parse(t->h.buf);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(toks)) {
        cJSON_Delete(j);
        return bench_err_set(err, "%s: no \"tokens\" list in the answer", t->url_tokenize);
    }
    int k = cJSON_GetArraySize(toks);
    *ids = malloc((size_t)(k ? k : 1) * sizeof **ids);
    if (!*ids) {
        cJSON_Delete(j);
        return bench_err_set(err, "out of memory");
    }
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, toks)(*ids)[i++] = (int32_t)it->valuedouble;
    *n = k;
    cJSON_Delete(j);
    return 0;
}

/* POST /detokenize; *ok is false (and no error) when the server refuses the ids. */
static int ht_detok(http_tok_t *t, const int32_t *ids, int n, char **text, bool *ok,
                    bench_err_t *err) {
    *text = NULL;
    *ok = false;
    size_t cap = 64 + strlen(t->model) * 2 + (size_t)n * 12;
    char *body = malloc(cap);
    if (!body) return bench_err_set(err, "out of memory");
    cJSON *m = cJSON_CreateString(t->model);
    char *ms = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    if (!ms) {
        free(body);
        return bench_err_set(err, "out of memory");
    }
    size_t k = (size_t)snprintf(body, cap, "{\"model\":%s,\"tokens\":[", ms);
    free(ms);
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(body + k, cap - k, i ? ",%d" : "%d", ids[i]);
    snprintf(body + k, cap - k, "]}");
    long status = 0;
    int rc = http_do(&t->h, t->url_detokenize, body, &status, err);
    free(body);
    if (rc < 0) return -1;
    if (status != 200) return 0;
    cJSON *j = cJSON_Parse(t->h.buf);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    if (cJSON_IsString(p)) {
        *text = strdup(p->valuestring);
        *ok = true;
    }
    cJSON_Delete(j);
    if (*ok && !*text) return bench_err_set(err, "out of memory");
    return 0;
}

static int ht_decode(void *ctx, const int32_t *ids, int n, char **text, bench_err_t *err) {
    http_tok_t *t = ctx;
    bool ok;
    if (ht_detok(t, ids, n, text, &ok, err) < 0) return -1;
    if (!ok) {
        char msg[256];
        error_text(&t->h, msg, sizeof msg);
        return bench_err_set(err, "%s: the server refused the ids: %s", t->url_detokenize, msg);
    }
    return 0;
}

/* Whether the server decodes id (a valid id decodes to a non-empty string with status 200);
 * *text receives the decoding when text is not NULL. */
static int ht_valid(http_tok_t *t, int32_t id, bool *valid, char **text, bench_err_t *err) {
    char *s;
    bool ok;
    if (ht_detok(t, &id, 1, &s, &ok, err) < 0) return -1;
    *valid = ok && s[0];
    if (text && *valid) {
        *text = s;
    } else {
        free(s);
    }
    return 0;
}

static bool special_text(const char *s) {
    size_t n = strlen(s);
    return n >= 5 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

static void ht_destroy(http_tok_t *t) {
    if (!t) return;
    http_free(&t->h);
    free(t->specials);
    free(t);
}

/* Makes a tokenizer over the server. *absent (and no error) when the server has no /tokenize. */
static int ht_create(const char *base, const char *model, const char *api_key, http_tok_t **out,
                     bool *absent, bench_err_t *err) {
    *out = NULL;
    *absent = false;
    http_tok_t *t = calloc(1, sizeof *t);
    if (!t) return bench_err_set(err, "out of memory");
    if (http_init(&t->h, api_key, err) < 0) {
        free(t);
        return -1;
    }
    snprintf(t->url_tokenize, sizeof t->url_tokenize, "%s/tokenize", base);
    snprintf(t->url_detokenize, sizeof t->url_detokenize, "%s/detokenize", base);
    t->model = model;
    t->tok.ctx = t;
    t->tok.encode = ht_encode;
    t->tok.decode = ht_decode;

    int32_t *a = NULL, *b = NULL;
    int na, nb;
    if (ht_encode(t, "a", true, &a, &na, err) < 0) {
        long status = 0;
        curl_easy_getinfo(t->h.easy, CURLINFO_RESPONSE_CODE, &status);
        *absent = status == 404 || status == 405;
        ht_destroy(t);
        return *absent ? 0 : -1;
    }
    if (ht_encode(t, "a", false, &b, &nb, err) < 0) {
        free(a);
        ht_destroy(t);
        return -1;
    }
    t->tok.num_special_tokens_to_add = na > nb ? na - nb : 0;
    free(a);
    free(b);

    /* vocab_size: the first id the server refuses, by doubling then bisection. */
    bool v;
    int32_t lo = 0, hi = 1024;
    if (ht_valid(t, 0, &v, NULL, err) < 0) goto fail;
    if (!v) {
        bench_err_set(err, "%s: the server does not decode token id 0", t->url_detokenize);
        goto fail;
    }
    for (;;) {
        if (ht_valid(t, hi, &v, NULL, err) < 0) goto fail;
        if (!v) break;
        lo = hi;
        if (hi >= (1 << 24)) {
            bench_err_set(err, "%s: the server decodes every id up to %d", t->url_detokenize, hi);
            goto fail;
        }
        hi *= 2;
    }
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (ht_valid(t, mid, &v, NULL, err) < 0) goto fail;
        if (v) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    t->tok.vocab_size = hi;

    /* Special ids: added tokens sit at the top of the vocabulary; those that decode to "<|...|>"
     * are the specials a random prompt must not contain. */
    t->specials = malloc(SPECIAL_SCAN_MAX * sizeof *t->specials);
    if (!t->specials) {
        bench_err_set(err, "out of memory");
        goto fail;
    }
    int gap = 0;
    for (int32_t id = hi - 1; id >= 0 && hi - id <= SPECIAL_SCAN_MAX && gap < SPECIAL_SCAN_GAP;
         id--) {
        char *s = NULL;
        if (ht_valid(t, id, &v, &s, err) < 0) goto fail;
        if (v && special_text(s)) {
            t->specials[t->tok.n_special++] = id;
            gap = 0;
        } else {
            gap++;
        }
        free(s);
    }
    t->tok.special_ids = t->specials;
    *out = t;
    return 0;
fail:
    ht_destroy(t);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Run                                                                                         */

/* The server's flags from Tachyon's GET /admin/flags ({"data":[{"name","value",...}]}) as one
 * {"name": "value", ...} object; "" when the server has no such endpoint. */
static void fetch_server_flags(http_t *h, const char *base, char *out, size_t cap) {
    char url[320];
    long status = 0;
    out[0] = '\0';
    snprintf(url, sizeof url, "%s/admin/flags", base);
    if (http_do(h, url, NULL, &status, NULL) < 0 || status != 200) return;
    cJSON *j = cJSON_Parse(h->buf);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data"), *f;
    cJSON *flags = cJSON_CreateObject();
    cJSON_ArrayForEach(f, data) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, "value");
        if (cJSON_IsString(n) && cJSON_IsString(v))
            cJSON_AddStringToObject(flags, n->valuestring, v->valuestring);
    }
    char *s = cJSON_GetArraySize(flags) > 0 ? cJSON_PrintUnformatted(flags) : NULL;
    if (s && strlen(s) < cap) memcpy(out, s, strlen(s) + 1);
    free(s);
    cJSON_Delete(flags);
    cJSON_Delete(j);
}

/* GET /v1/models: the endpoint is up, and the model when none was given. *tok_model is the model
 * named in tokenizer calls: the given one when the server lists it, else the first listed (so
 * that a run with a wrong model name still builds its prompts, and its requests fail). */
static int find_model(http_t *h, const char *base, char *model, size_t cap, char *tok_model,
                      bench_err_t *err) {
    char url[320];
    long status = 0;
    snprintf(url, sizeof url, "%s/v1/models", base);
    snprintf(tok_model, cap, "%s", model);
    if (http_do(h, url, NULL, &status, err) < 0) return -1;
    cJSON *j = status == 200 ? cJSON_Parse(h->buf) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data"), *m;
    const cJSON *first = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(data, 0), "id");
    bool listed = false;
    cJSON_ArrayForEach(m, data) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
        listed |= cJSON_IsString(id) && !strcmp(id->valuestring, model);
    }
    int rc = 0;
    if (!model[0] && !cJSON_IsString(first)) {
        char msg[256] = "no model listed";
        if (status != 200) error_text(h, msg, sizeof msg);
        rc = bench_err_set(err, "%s: HTTP %ld: %s (pass --model)", url, status, msg);
    } else if (!model[0]) {
        snprintf(model, cap, "%s", first->valuestring);
        snprintf(tok_model, cap, "%s", first->valuestring);
    } else if (!listed && cJSON_IsString(first)) {
        snprintf(tok_model, cap, "%s", first->valuestring);
    }
    cJSON_Delete(j);
    return rc;
}

/* vLLM's _align_prompts_to_server_tokenizer: when the server counts prompt 0 differently from
 * the local tokenizer, every prompt the server sees as longer is cut to its length there. */
static int align_to_server(http_tok_t *srv, bench_prompt_t *p, int n, bench_err_t *err) {
    int32_t *ids;
    int k;
    if (ht_encode(srv, p[0].text, true, &ids, &k, err) < 0) return -1;
    free(ids);
    if (k == p[0].prompt_len) return 0;
    for (int i = 0; i < n; i++) {
        if (ht_encode(srv, p[i].text, true, &ids, &k, err) < 0) return -1;
        if (k > p[i].prompt_len) {
            char *text;
            if (ht_decode(srv, ids, p[i].prompt_len, &text, err) < 0) {
                free(ids);
                return -1;
            }
            free(p[i].text);
            p[i].text = text;
        }
        free(ids);
    }
    return 0;
}

/* The request body of one prompt, exactly as vLLM's request functions build it. */
static char *make_body(const bench_options_t *o, const cJSON *extra, const char *prompt,
                       int output_len) {
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "model", o->model);
    if (o->backend == BENCH_BACKEND_OPENAI) {
        cJSON_AddStringToObject(b, "prompt", prompt);
        cJSON_AddNumberToObject(b, "repetition_penalty", 1.0);
        cJSON_AddNumberToObject(b, "max_tokens", output_len);
        cJSON_AddNullToObject(b, "logprobs");
    } else {
        cJSON *msgs = cJSON_AddArrayToObject(b, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, m);
        cJSON_AddStringToObject(m, "role", "user");
        cJSON *content = cJSON_AddArrayToObject(m, "content");
        cJSON *part = cJSON_CreateObject();
        cJSON_AddItemToArray(content, part);
        cJSON_AddStringToObject(part, "type", "text");
        cJSON_AddStringToObject(part, "text", prompt);
        cJSON_AddNumberToObject(b, "max_completion_tokens", output_len);
    }
    cJSON_AddBoolToObject(b, "stream", true);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(b, "stream_options"), "include_usage", true);
    if (o->ignore_eos) cJSON_AddBoolToObject(b, "ignore_eos", true);
    const cJSON *x;
    cJSON_ArrayForEach(x, extra) {
        cJSON_DeleteItemFromObjectCaseSensitive(b, x->string);
        cJSON_AddItemToObject(b, x->string, cJSON_Duplicate(x, true));
    }
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

static void free_records(bench_record_t *r, int n) {
    for (int i = 0; r && i < n; i++)
        free(r[i].itl);
    free(r);
}

void bench_result_destroy(bench_result_t *r) {
    if (!r) return;
    free_records(r->records, r->n_records);
    free(r);
}

int bench_run(const bench_options_t *opts, bench_progress_fn progress, void *user,
              bench_result_t **out, bench_err_t *err) {
    *out = NULL;
    bench_options_t o = *opts;
    if (o.num_prompts < 1) return bench_err_set(err, "num-prompts must be at least 1");
    if (o.num_warmups < 0) return bench_err_set(err, "num-warmups must be >= 0");
    if (o.max_concurrency < 0) return bench_err_set(err, "max-concurrency must be >= 0");
    if (!o.base_url[0]) return bench_err_set(err, "no base URL");
    size_t bl = strlen(o.base_url);
    while (bl > 0 && o.base_url[bl - 1] == '/')
        o.base_url[--bl] = '\0';
    if (!o.endpoint[0])
        snprintf(o.endpoint, sizeof o.endpoint, "%s",
                 o.backend == BENCH_BACKEND_OPENAI ? "/v1/completions" : "/v1/chat/completions");
    if (!o.api_key[0] && getenv("OPENAI_API_KEY"))
        snprintf(o.api_key, sizeof o.api_key, "%s", getenv("OPENAI_API_KEY"));
    if (o.timeout_s <= 0) o.timeout_s = DEFAULT_TIMEOUT_S;
    if (o.dataset == BENCH_DATASET_RANDOM) o.ignore_eos = true;

    cJSON *extra = NULL;
    if (o.extra_body[0]) {
        extra = cJSON_Parse(o.extra_body);
        if (!cJSON_IsObject(extra)) {
            cJSON_Delete(extra);
            return bench_err_set(err, "extra body is not a JSON object: %s", o.extra_body);
        }
    }
    double *delays = malloc((size_t)o.num_prompts * sizeof *delays);
    if (!delays) {
        cJSON_Delete(extra);
        return bench_err_set(err, "out of memory");
    }
    if (bench_arrival_delays(o.request_rate, o.burstiness, o.seed, o.num_prompts, delays, err) <
        0) {
        free(delays);
        cJSON_Delete(extra);
        return -1;
    }

    int rc = -1, n = o.num_prompts;
    http_t h = {0};
    http_tok_t *srv_tok = NULL;
    bench_prompt_t *prompts = NULL;
    char **bodies = NULL;
    bench_client_request_t *reqs = NULL;
    bench_result_t *r = NULL;
    bool synthetic = false, srv_absent = false;
    char tok_model[sizeof o.model];
    time_t wall = time(NULL);

    /* Thread-safe in this libcurl (CURL_VERSION_THREADSAFE), reference-counted. */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (http_init(&h, o.api_key, err) < 0) goto out;
    if (find_model(&h, o.base_url, o.model, sizeof o.model, tok_model, err) < 0) goto out;
    /* With a local tokenizer the server's is only needed for the alignment: a server without a
     * usable one is no error then. */
    if (ht_create(o.base_url, tok_model, o.api_key, &srv_tok, &srv_absent, err) < 0 && !o.tokenizer)
        goto out;
    const bench_tokenizer_t *tok = o.tokenizer ? o.tokenizer : srv_tok ? &srv_tok->tok : NULL;
    if (!tok) {
        bench_err_set(err,
                      "%s has no /tokenize endpoint and no tokenizer was given: the %s dataset "
                      "needs one to measure prompts (pass --tokenizer DIR)",
                      o.base_url,
                      o.dataset == BENCH_DATASET_RANDOM     ? "random"
                      : o.dataset == BENCH_DATASET_SHAREGPT ? "sharegpt"
                                                            : "sharegpt-synthetic");
        goto out;
    }
    if (bench_dataset_build(&o, tok, n, &prompts, &synthetic, err) < 0) goto out;
    if (o.tokenizer && srv_tok && o.dataset == BENCH_DATASET_RANDOM &&
        align_to_server(srv_tok, prompts, n, err) < 0)
        goto out;

    bodies = calloc((size_t)n, sizeof *bodies);
    reqs = calloc((size_t)n, sizeof *reqs);
    r = calloc(1, sizeof *r);
    if (!bodies || !reqs || !r || !(r->records = calloc((size_t)n, sizeof *r->records))) {
        bench_err_set(err, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (!(bodies[i] = make_body(&o, extra, prompts[i].text, prompts[i].output_len))) {
            bench_err_set(err, "out of memory");
            goto out;
        }
        reqs[i] = (bench_client_request_t){bodies[i], strlen(bodies[i]), prompts[i].prompt_len,
                                           prompts[i].output_len};
    }

    char url[sizeof o.base_url + sizeof o.endpoint], prefix[32];
    snprintf(url, sizeof url, "%s%s", o.base_url, o.endpoint);
    bench_rng_t rng;
    bench_rng_seed(&rng,
                   (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(size_t)&rng);
    snprintf(prefix, sizeof prefix, "bench-%08x-", (unsigned)(bench_rng_next(&rng) >> 32));
    bench_client_config_t cfg = {.url = url,
                                 .api_key = o.api_key,
                                 .request_id_prefix = prefix,
                                 .max_concurrency = o.max_concurrency,
                                 .timeout_s = o.timeout_s,
                                 .stop = o.stop};
    int started;
    double t_end;
    if (o.num_warmups > 0) {
        bench_client_request_t *w = malloc((size_t)o.num_warmups * sizeof *w);
        bench_record_t *wr = calloc((size_t)o.num_warmups, sizeof *wr);
        char wprefix[48];
        snprintf(wprefix, sizeof wprefix, "%swarmup-", prefix);
        bench_client_config_t wcfg = cfg;
        wcfg.request_id_prefix = wprefix;
        int wrc = -1;
        if (w && wr) {
            for (int i = 0; i < o.num_warmups; i++)
                w[i] = reqs[0];
            wrc = bench_client_run(&wcfg, w, o.num_warmups, NULL, bench_client_now(), wr, &started,
                                   &t_end, NULL, NULL, err);
        } else {
            bench_err_set(err, "out of memory");
        }
        free(w);
        free_records(wr, o.num_warmups);
        if (wrc < 0) goto out;
    }

    struct tm tm;
    localtime_r(&wall, &tm);
    strftime(r->date, sizeof r->date, "%Y%m%d-%H%M%S", &tm);
    r->synthetic_dataset = synthetic;
    started = 0;
    double t0 = bench_client_now();
    t_end = t0;
    if (!(o.stop && atomic_load(o.stop)) &&
        bench_client_run(&cfg, reqs, n, delays, t0, r->records, &started, &t_end, progress, user,
                         err) < 0) {
        r->n_records = started;
        goto out;
    }
    r->n_records = started;
    r->stopped = o.stop && atomic_load(o.stop);
    fetch_server_flags(&h, o.base_url, r->server_flags_json, sizeof r->server_flags_json);
    o.stop = NULL;
    o.tokenizer = NULL;
    r->options = o;
    if (bench_metrics_compute(r->records, r->n_records, t_end - t0, &r->options, &r->metrics, err) <
        0)
        goto out;
    *out = r;
    r = NULL;
    rc = 0;
out:
    bench_result_destroy(r);
    for (int i = 0; bodies && i < n; i++)
        free(bodies[i]);
    free(bodies);
    free(reqs);
    bench_dataset_free(prompts, n);
    ht_destroy(srv_tok);
    http_free(&h);
    free(delays);
    cJSON_Delete(extra);
    curl_global_cleanup();
    return rc;
}
