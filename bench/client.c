/* client: libcurl multi over epoll, streaming requests timed as vLLM times them (see client.h). */
#include "client.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "sse.h"

#define ERRBODY_CAP     1024
#define PROGRESS_PERIOD 0.25 /* s */
#define STOP_POLL       0.1  /* s: how soon a raised stop flag is seen */

typedef struct client client_t;

/* One transfer slot: its easy handle, parser and buffers are reused by successive requests. */
typedef struct xfer {
    client_t *c;
    CURL *easy;
    struct curl_slist *headers;
    bench_sse_t sse;
    int idx; /* request index, -1 when idle */
    bench_record_t *rec;
    double st;         /* absolute start (bench_client_now) */
    double now;        /* arrival time of the bytes being parsed */
    double last_event; /* absolute time of the last token event */
    int events;
    int itl_cap;
    long long usage_out, usage_prompt;
    bool has_usage_out, has_usage_prompt, oom;
    long status;
    char reason[64];
    char stream_error[128]; /* "error" object received inside the stream */
    char bad_finish[16];    /* "abort" or "error": the server gave up on the request */
    char errbody[ERRBODY_CAP];
    size_t errbody_len;
    char curl_err[CURL_ERROR_SIZE];
    char id_header[96];
} xfer_t;

struct client {
    const bench_client_config_t *cfg;
    CURLM *multi;
    int ep;
    double timer_deadline; /* absolute; < 0 when libcurl wants no timeout */
    int64_t tokens;        /* token events (then usage-corrected counts) so far */
    char auth[320];        /* "Authorization: Bearer ..." header, "" without an API key */
};

double bench_client_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int on_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp) {
    (void)easy;
    (void)socketp;
    client_t *c = userp;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(c->ep, EPOLL_CTL_DEL, s, NULL);
        return 0;
    }
    struct epoll_event ev = {0};
    ev.data.fd = s;
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    if (epoll_ctl(c->ep, EPOLL_CTL_MOD, s, &ev) < 0 && errno == ENOENT)
        epoll_ctl(c->ep, EPOLL_CTL_ADD, s, &ev);
    return 0;
}

static int on_timer(CURLM *multi, long timeout_ms, void *userp) {
    (void)multi;
    client_t *c = userp;
    c->timer_deadline = timeout_ms < 0 ? -1 : bench_client_now() + (double)timeout_ms * 1e-3;
    return 0;
}

/* The status line of every response ("HTTP/1.1 404 Not Found"); a later one (after a 100
 * Continue) replaces the earlier. */
static size_t on_header(char *p, size_t size, size_t nmemb, void *user) {
    xfer_t *x = user;
    size_t n = size * nmemb;
    const char *sp = n > 9 && !memcmp(p, "HTTP/", 5) ? memchr(p, ' ', n) : NULL;
    if (!sp) return n;
    x->status = strtol(sp + 1, NULL, 10);
    const char *r = memchr(sp + 1, ' ', n - (size_t)(sp + 1 - p));
    size_t rl = 0;
    if (r) {
        r++;
        rl = n - (size_t)(r - p);
        while (rl && (r[rl - 1] == '\r' || r[rl - 1] == '\n'))
            rl--;
        if (rl >= sizeof x->reason) rl = sizeof x->reason - 1;
        memcpy(x->reason, r, rl);
    }
    x->reason[rl] = '\0';
    return n;
}

/* The text of the JSON string value v (quotes included), cut to cap: cJSON undoes every escape
 * (\n, \", \uXXXX). Error paths only, where an allocation does not matter. */
static void copy_json_string(char *dst, size_t cap, const char *v, size_t vlen) {
    cJSON *str = cJSON_ParseWithLength(v, vlen);
    snprintf(dst, cap, "%s", cJSON_IsString(str) ? str->valuestring : "");
    cJSON_Delete(str);
}

/* Remembers a finish_reason that means the server did not complete the request: a stream that
 * the server aborted (a shutdown, a cancel) or ended in an engine error has tokens and a 200, but
 * is no success. choices: the message's non-empty array. */
static void check_finish(xfer_t *x, const char *choices, size_t len) {
    size_t el, fl;
    const char *c = bench_sse_json_first(choices, len, &el);
    const char *f = c ? bench_sse_json_get(c, el, "finish_reason", &fl) : NULL;
    if (!f) return;
    if (fl == 7 && !memcmp(f, "\"abort\"", 7))
        snprintf(x->bad_finish, sizeof x->bad_finish, "abort");
    if (fl == 7 && !memcmp(f, "\"error\"", 7))
        snprintf(x->bad_finish, sizeof x->bad_finish, "error");
}

/* One SSE message: a token event when choices is non-empty, else usage, else maybe an error. */
static int on_message(void *user, const char *data, size_t len) {
    xfer_t *x = user;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) return 0;
    size_t vl;
    const char *v = bench_sse_json_get(data, len, "choices", &vl);
    if (v && bench_sse_json_nonempty_array(v, vl)) {
        if (x->events == 0) {
            x->rec->ttft = x->now - x->st;
        } else {
            if (x->rec->n_itl == x->itl_cap) {
                int cap = x->itl_cap ? 2 * x->itl_cap : 64;
                double *p = realloc(x->rec->itl, (size_t)cap * sizeof *p);
                if (!p) {
                    x->oom = true;
                    return 0;
                }
                x->rec->itl = p;
                x->itl_cap = cap;
            }
            x->rec->itl[x->rec->n_itl++] = x->now - x->last_event;
        }
        x->last_event = x->now;
        x->events++;
        x->c->tokens++;
        /* Only a chunk with a finish_reason string can end the request badly; the others carry
         * null, so most token events skip the parse. */
        if (memmem(data, len, "\"finish_reason\":\"", 17)) check_finish(x, v, vl);
        return 0;
    }
    const char *u = bench_sse_json_get(data, len, "usage", &vl);
    if (u && *u == '{') {
        size_t l;
        const char *t = bench_sse_json_get(u, vl, "completion_tokens", &l);
        if (t && bench_sse_json_int(t, l, &x->usage_out)) x->has_usage_out = true;
        t = bench_sse_json_get(u, vl, "prompt_tokens", &l);
        if (t && bench_sse_json_int(t, l, &x->usage_prompt)) x->has_usage_prompt = true;
        return 0;
    }
    const char *e = bench_sse_json_get(data, len, "error", &vl);
    if (e && *e == '{') {
        size_t l;
        const char *m = bench_sse_json_get(e, vl, "message", &l);
        if (m && *m == '"') copy_json_string(x->stream_error, sizeof x->stream_error, m, l);
    }
    return 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *user) {
    xfer_t *x = user;
    size_t n = size * nmemb;
    if (x->status != 200) {
        size_t k = ERRBODY_CAP - 1 - x->errbody_len;
        if (k > n) k = n;
        memcpy(x->errbody + x->errbody_len, p, k);
        x->errbody_len += k;
        x->errbody[x->errbody_len] = '\0';
        return n;
    }
    x->now = bench_client_now();
    if (bench_sse_feed(&x->sse, p, n, on_message, x) < 0) x->oom = true;
    return n;
}

static int xfer_init(client_t *c, xfer_t *x) {
    x->c = c;
    x->idx = -1;
    if (bench_sse_init(&x->sse, 2048) < 0) return -1;
    if (!(x->easy = curl_easy_init())) return -1;
    const bench_client_config_t *cfg = c->cfg;
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_URL, cfg->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(cfg->timeout_s * 1000));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    return 0;
}

static void xfer_destroy(xfer_t *x) {
    if (x->easy) curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->headers);
    bench_sse_free(&x->sse);
}

static int xfer_start(client_t *c, xfer_t *x, int idx, const bench_client_request_t *req,
                      bench_record_t *rec, double t0, double arrival) {
    const bench_client_config_t *cfg = c->cfg;
    memset(rec, 0, sizeof *rec);
    x->idx = idx;
    x->rec = rec;
    x->events = 0;
    x->usage_out = x->usage_prompt = 0;
    x->has_usage_out = x->has_usage_prompt = x->oom = false;
    x->status = 0;
    x->reason[0] = x->stream_error[0] = x->errbody[0] = x->curl_err[0] = x->bad_finish[0] = '\0';
    x->errbody_len = 0;
    bench_sse_reset(&x->sse);
    x->itl_cap = req->output_len > 1 ? req->output_len : 16;
    rec->itl = malloc((size_t)x->itl_cap * sizeof *rec->itl);
    if (!rec->itl) x->itl_cap = 0;
    rec->prompt_len = req->prompt_len;

    curl_slist_free_all(x->headers);
    x->headers = NULL;
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    /* A body over 1 KiB would otherwise wait for a 100 Continue round trip. */
    if (h) h = curl_slist_append(h, "Expect:");
    snprintf(x->id_header, sizeof x->id_header, "x-request-id: %s%d",
             cfg->request_id_prefix ? cfg->request_id_prefix : "bench-", idx);
    if (h) h = curl_slist_append(h, x->id_header);
    if (h && c->auth[0]) h = curl_slist_append(h, c->auth);
    if (!h) return -1;
    x->headers = h;
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, req->body);
    x->st = bench_client_now();
    rec->start_time = x->st - t0;
    rec->client_queue_time = x->st > arrival ? x->st - arrival : 0;
    return curl_multi_add_handle(c->multi, x->easy) == CURLM_OK ? 0 : -1;
}

/* Fills the record of a finished (res) or aborted (aborted = true) transfer. */
static void xfer_finish(client_t *c, xfer_t *x, CURLcode res, bool aborted) {
    bench_record_t *r = x->rec;
    if (!aborted && res == CURLE_OK && x->status == 200) bench_sse_finish(&x->sse, on_message, x);
    r->success = false;
    if (aborted) {
        snprintf(r->error, sizeof r->error, "aborted: benchmark stopped");
    } else if (res != CURLE_OK) {
        snprintf(r->error, sizeof r->error, "%.60s%s%.90s", curl_easy_strerror(res),
                 x->curl_err[0] ? ": " : "", x->curl_err);
    } else if (x->status != 200) {
        char msg[128] = "";
        size_t vl, ml;
        const char *e = bench_sse_json_get(x->errbody, x->errbody_len, "error", &vl);
        const char *m = e && *e == '{' ? bench_sse_json_get(e, vl, "message", &ml) : NULL;
        if (m && *m == '"') copy_json_string(msg, sizeof msg, m, ml);
        snprintf(r->error, sizeof r->error, "HTTP %ld %.40s%s%.100s", x->status,
                 x->reason[0] ? x->reason : "(no reason)", msg[0] ? ": " : "", msg);
    } else if (x->oom) {
        snprintf(r->error, sizeof r->error, "out of memory while reading the stream");
    } else if (x->events == 0) {
        snprintf(r->error, sizeof r->error,
                 "Never received a valid chunk to calculate TTFT.%s%.90s",
                 x->stream_error[0] ? " Server error: " : "", x->stream_error);
    } else if (x->bad_finish[0]) {
        snprintf(r->error, sizeof r->error, "the server ended the stream with finish_reason \"%s\"",
                 x->bad_finish);
    } else {
        r->success = true;
        r->latency = x->last_event - x->st;
        int out = x->has_usage_out ? (int)x->usage_out : x->events;
        c->tokens += out - x->events;
        r->output_len = out;
        if (x->has_usage_prompt) r->prompt_len = (int)x->usage_prompt;
    }
    if (!r->success) {
        free(r->itl);
        r->itl = NULL;
        r->n_itl = 0;
    }
    curl_multi_remove_handle(c->multi, x->easy);
    x->idx = -1;
}

/* Enough file descriptors for every connection the run may hold. */
static void raise_fd_limit(int conns) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
    rlim_t want = (rlim_t)conns + 256;
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static void report(bench_progress_fn fn, void *user, client_t *c, int n, int done, int failed,
                   int in_flight, double elapsed) {
    if (!fn) return;
    bench_progress_t p = {.total = n,
                          .done = done,
                          .failed = failed,
                          .in_flight = in_flight,
                          .elapsed = elapsed,
                          .request_rate_observed = elapsed > 0 ? done / elapsed : 0,
                          .output_tokens = c->tokens};
    fn(&p, user);
}

static int ms_until(double deadline, double now) {
    double ms = ceil((deadline - now) * 1e3);
    return ms < 0 ? 0 : ms > 1e6 ? 1000000 : (int)ms;
}

int bench_client_run(const bench_client_config_t *cfg, const bench_client_request_t *reqs, int n,
                     const double *delays, double t0, bench_record_t *records, int *n_started,
                     double *t_end, bench_progress_fn progress, void *user, bench_err_t *err) {
    *n_started = 0;
    *t_end = t0;
    if (n <= 0) return 0;
    int limit = cfg->max_concurrency > 0 && cfg->max_concurrency < n ? cfg->max_concurrency : n;
    raise_fd_limit(limit);
    client_t c = {.cfg = cfg, .timer_deadline = -1};
    if (cfg->api_key && cfg->api_key[0])
        snprintf(c.auth, sizeof c.auth, "Authorization: Bearer %s", cfg->api_key);
    xfer_t *xs = calloc((size_t)limit, sizeof *xs);
    int *idle = malloc((size_t)limit * sizeof *idle);
    c.ep = epoll_create1(EPOLL_CLOEXEC);
    c.multi = curl_multi_init();
    int rc = -1, n_idle = 0, n_inited = 0;
    int started = 0, arrived = 0, done = 0, failed = 0, in_flight = 0;
    if (!xs || !idle || c.ep < 0 || !c.multi) {
        bench_err_set(err, "bench client: cannot set up (out of memory or file descriptors)");
        goto out;
    }
    curl_multi_setopt(c.multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(c.multi, CURLMOPT_SOCKETDATA, &c);
    curl_multi_setopt(c.multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(c.multi, CURLMOPT_TIMERDATA, &c);
    curl_multi_setopt(c.multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)limit);
    curl_multi_setopt(c.multi, CURLMOPT_MAXCONNECTS, (long)limit);
    double next_progress = t0;
    struct epoll_event evs[256];
    while (done < started || started < n) {
        double now = bench_client_now();
        if (cfg->stop && atomic_load(cfg->stop)) {
            for (int i = 0; i < n_inited; i++)
                if (xs[i].idx >= 0) {
                    xfer_finish(&c, &xs[i], CURLE_OK, true);
                    failed++;
                    done++;
                }
            break;
        }
        while (arrived < n && (!delays || t0 + delays[arrived] <= now))
            arrived++;
        while (started < arrived && in_flight < limit) {
            xfer_t *x;
            if (n_idle > 0) {
                x = &xs[idle[--n_idle]];
            } else {
                x = &xs[n_inited++];
                if (xfer_init(&c, x) < 0) {
                    bench_err_set(err, "bench client: cannot create a transfer");
                    goto out;
                }
            }
            double arrival = t0 + (delays ? delays[started] : 0);
            if (xfer_start(&c, x, started, &reqs[started], &records[started], t0, arrival) < 0) {
                bench_err_set(err, "bench client: cannot start request %d", started);
                goto out;
            }
            started++;
            in_flight++;
        }
        if (progress && now >= next_progress) {
            report(progress, user, &c, n, done, failed, in_flight, now - t0);
            next_progress = now + PROGRESS_PERIOD;
        }
        double wake = now + STOP_POLL;
        if (progress && next_progress < wake) wake = next_progress;
        if (arrived < n && in_flight < limit && t0 + delays[arrived] < wake)
            wake = t0 + delays[arrived];
        if (c.timer_deadline >= 0 && c.timer_deadline < wake) wake = c.timer_deadline;
        int nev = epoll_wait(c.ep, evs, 256, ms_until(wake, now));
        int running;
        for (int i = 0; i < nev; i++) {
            int flags = ((evs[i].events & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                        ((evs[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                        ((evs[i].events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
            curl_multi_socket_action(c.multi, evs[i].data.fd, flags, &running);
        }
        if (c.timer_deadline >= 0 && bench_client_now() >= c.timer_deadline) {
            c.timer_deadline = -1;
            curl_multi_socket_action(c.multi, CURL_SOCKET_TIMEOUT, 0, &running);
        }
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(c.multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            xfer_t *x;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode res = m->data.result;
            xfer_finish(&c, x, res, false);
            if (!x->rec->success) failed++;
            done++;
            in_flight--;
            idle[n_idle++] = (int)(x - xs);
        }
    }
    *t_end = bench_client_now();
    *n_started = started;
    report(progress, user, &c, n, done, failed, 0, *t_end - t0);
    rc = 0;
out:
    if (rc < 0) {
        *n_started = started;
        for (int i = 0; i < n_inited; i++)
            if (xs[i].idx >= 0) xfer_finish(&c, &xs[i], CURLE_OK, true);
    }
    for (int i = 0; xs && i < n_inited; i++)
        xfer_destroy(&xs[i]);
    if (c.multi) curl_multi_cleanup(c.multi);
    if (c.ep >= 0) close(c.ep);
    free(xs);
    free(idle);
    return rc;
}
