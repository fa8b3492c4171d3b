/*
 * server: libmicrohttpd plumbing, routing, authentication, the small endpoints, and the
 * suspend/resume protocol between HTTP threads and the engine thread.
 *
 * Suspend/resume (reference/server-and-bench.md 6.3): a request's `mu` guards `suspended`,
 * `news`, `ping` and `gone`. The HTTP thread clears `news`, reads the streams, and suspends only
 * if, under the lock, nothing new arrived meanwhile; whoever else (the engine's wake hook, the
 * watcher, shutdown) wants it running sets its flag and resumes it only when `suspended` is set,
 * clearing it. So a wake-up is never lost and a connection is never resumed twice or resumed
 * when not suspended.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server_int.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void http_opts_init(http_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
}

// ---------------------------------------------------------------------------------------------
// Responses

static int methods_of(route_t rt);

static void count_status(http_server_t *s, unsigned status) {
    metric_counter_t c = status < 400   ? METRIC_HTTP_2XX
                         : status < 500 ? METRIC_HTTP_4XX
                                        : METRIC_HTTP_5XX;
    metrics_add(s->metrics, c, 1);
}

/* Queues a complete response; the request then only waits for it to be sent. */
enum MHD_Result srv_reply(req_t *r, unsigned status, const char *type, const char *body, size_t len,
                          bool close) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    if (type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 405) {
        int m = methods_of(r->route);
        char allow[32];
        snprintf(allow, sizeof allow, "%s%s%s", m & 1 ? "GET, " : "", m & 2 ? "POST, " : "",
                 m & 4 ? "PUT, " : "");
        allow[strlen(allow) - 2] = '\0';
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (close) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    count_status(r->srv, status);
    return rc;
}

enum MHD_Result srv_reply_json(req_t *r, unsigned status, jbuf_t *b) {
    if (b->oom) return MHD_NO;
    return srv_reply(r, status, "application/json", b->p ? b->p : "", b->len, false);
}

/* An error in vLLM's envelope; the connection is closed after it when `close` or draining. */
static enum MHD_Result reply_error_close(req_t *r, const oai_error_t *e, bool close) {
    jbuf_t b;
    jb_init(&b);
    oai_error_json(e, &b);
    if (e->status == 503 && !strncmp(e->msg, "too many requests", 17))
        metrics_add(r->srv->metrics, METRIC_REJECTED_QUEUE, 1);
    enum MHD_Result rc = b.oom ? MHD_NO
                               : srv_reply(r, (unsigned)e->status, "application/json", b.p, b.len,
                                           close || atomic_load(&r->srv->draining));
    jb_free(&b);
    return rc;
}

static enum MHD_Result reply_error(req_t *r, const oai_error_t *e) {
    return reply_error_close(r, e, false);
}

/* A malformed head: the connection's later bytes cannot be trusted, so it closes. */
static enum MHD_Result reply_bad_head(req_t *r, int status, const char *why) {
    oai_error_t e;
    oai_error_set(&e, status, NULL, "%s", why);
    return reply_error_close(r, &e, true);
}

enum MHD_Result srv_fail(req_t *r, int status, const char *param, const char *fmt, ...) {
    oai_error_t e;
    char msg[sizeof e.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oai_error_set(&e, status, param, "%s", msg);
    return reply_error(r, &e);
}

// ---------------------------------------------------------------------------------------------
// Requests

static req_t *req_create(http_server_t *s, struct MHD_Connection *c) {
    req_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->srv = s;
    r->conn = c;
    r->fd = -1;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) r->fd = ci->connect_fd;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->flag_cv, NULL);
    jb_init(&r->body);
    jb_init(&r->out);
    jb_init(&r->work_out);
    return r;
}

void srv_list_add(http_server_t *s, req_t *r) {
    pthread_mutex_lock(&s->mu);
    if (r->listed) { /* a worker's request, listed while it waited */
        pthread_mutex_unlock(&s->mu);
        return;
    }
    r->next = s->live;
    r->prev = NULL;
    if (s->live) s->live->prev = r;
    s->live = r;
    r->listed = true;
    s->n_live++;
    pthread_mutex_unlock(&s->mu);
}

void srv_list_remove(http_server_t *s, req_t *r) {
    pthread_mutex_lock(&s->mu);
    if (r->listed) {
        if (r->prev)
            r->prev->next = r->next;
        else
            s->live = r->next;
        if (r->next) r->next->prev = r->prev;
        r->listed = false;
        s->n_live--;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static void req_free(req_t *r) {
    if (r->flag_running) { /* the client left during a rebuild: the answer still comes here */
        pthread_mutex_lock(&r->mu);
        while (!r->flag_done)
            pthread_cond_wait(&r->flag_cv, &r->mu);
        pthread_mutex_unlock(&r->mu);
        srv_list_remove(r->srv, r);
    }
    pthread_cond_destroy(&r->flag_cv);
    pthread_mutex_destroy(&r->mu);
    bool big = r->body.cap > (8u << 20) || r->work_out.cap > (8u << 20);
    jb_free(&r->body);
    jb_free(&r->out);
    jb_free(&r->work_out);
    free(r);
    /* a 32 MB body parsed into millions of JSON nodes leaves the heap grown; give it back so
     * one hostile request does not keep the RSS at gigabytes */
    if (big) malloc_trim(0);
}

/* Makes a suspended request run again for a reason set by the caller. Under r->mu. */
void srv_resume_locked(req_t *r) {
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

/* The engine thread: a stream of this request has news. */
static void on_wake(void *ctx) {
    req_t *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->news = true;
    srv_resume_locked(r);
    pthread_mutex_unlock(&r->mu);
}

/* Suspends the connection unless something arrived since `news` was cleared. Returns true when
 * it suspended. HTTP thread. */
static bool park(req_t *r) {
    pthread_mutex_lock(&r->mu);
    bool stay = !r->news && !r->ping && !r->gone && !atomic_load(&r->srv->stopping);
    if (stay) {
        r->suspended = true;
        r->idle_since = r->last_send;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
    return stay;
}

/* Clears `news` and `ping`; returns the reasons to stop (client gone, server stopping). */
static bool take_flags(req_t *r, bool *ping) {
    pthread_mutex_lock(&r->mu);
    r->news = false;
    *ping = r->ping;
    r->ping = false;
    bool stop = r->gone || atomic_load(&r->srv->stopping);
    pthread_mutex_unlock(&r->mu);
    return stop;
}

// ---------------------------------------------------------------------------------------------
// Streaming

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    req_t *r = cls;
    for (;;) {
        if (r->out_pos < r->out.len) {
            size_t n = r->out.len - r->out_pos;
            if (n > max) n = max;
            memcpy(buf, r->out.p + r->out_pos, n);
            r->out_pos += n;
            if (r->out_pos == r->out.len) {
                jb_reset(&r->out);
                r->out_pos = 0;
            }
            r->last_send = now_s();
            return (ssize_t)n;
        }
        if (r->complete) {
            r->answered = true;
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        bool ping;
        if (take_flags(r, &ping)) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (oai_pump(r->gen, &r->out, PUMP_MAX)) r->complete = true;
        if (r->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (r->out.len > 0 || r->complete) continue;
        if (ping) {
            jb_lit(&r->out, ": keep-alive\n\n");
            continue;
        }
        if (park(r)) return 0;
    }
}

static enum MHD_Result start_stream(req_t *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, r, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    r->last_send = now_s();
    enum MHD_Result rc = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    count_status(r->srv, 200);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Not streaming: the connection stays suspended until every choice finished

static enum MHD_Result wait_answer(req_t *r) {
    for (;;) {
        bool ping;
        if (take_flags(r, &ping)) return MHD_NO; /* closes the connection */
        if (oai_collect(r->gen)) {
            jbuf_t b;
            jb_init(&b);
            int status;
            oai_response(r->gen, &b, &status);
            enum MHD_Result rc = srv_reply_json(r, (unsigned)status, &b);
            jb_free(&b);
            r->answered = true;
            return rc;
        }
        if (park(r)) return MHD_YES;
    }
}

/* Submits a parsed request (r->gen) and answers it as it runs. */
static enum MHD_Result generate_submit(req_t *r) {
    http_server_t *s = r->srv;
    oai_error_t e;
    r->streaming = oai_is_stream(r->gen);
    if (oai_submit(r->gen, on_wake, r, &e) < 0) {
        oai_destroy(r->gen);
        r->gen = NULL;
        srv_list_remove(s, r);
        return reply_error(r, &e);
    }
    /* listed before it can suspend: the watcher and shutdown look after listed requests */
    srv_list_add(s, r);
    if (r->streaming) return start_stream(r);
    return wait_answer(r);
}

/* A 200 JSON response that takes b's buffer instead of copying it: /tokenize of a 32 MiB prompt
 * answers some 60 MB, and copying that on the HTTP thread holds up every other connection. */
static enum MHD_Result reply_json_owned(req_t *r, jbuf_t *b) {
    if (b->oom || !b->p) return srv_reply_json(r, 200, b);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(b->len, b->p, MHD_RESPMEM_MUST_FREE);
    if (!resp) return MHD_NO;
    jb_init(b); /* the response frees it */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->responded = true;
    count_status(r->srv, 200);
    return rc;
}

static oai_endpoint_t endpoint_of(route_t rt) {
    return rt == R_CHAT ? OAI_CHAT : OAI_COMPLETIONS;
}

/* The work of a request's body: parse a generation request (prompt rendering and tokenizing
 * included), or answer /tokenize and /detokenize into work_out. */
static int do_work(req_t *r) {
    http_server_t *s = r->srv;
    const char *body = r->body.p ? r->body.p : "";
    if (r->route == R_CHAT || r->route == R_COMPLETIONS)
        return oai_parse(&s->oai, endpoint_of(r->route), body, r->body.len, &r->gen, &r->work_err);
    return (r->route == R_TOKENIZE ? oai_tokenize : oai_detokenize)(&s->oai, body, r->body.len,
                                                                    &r->work_out, &r->work_err);
}

void srv_work_run(req_t *r) {
    r->work_rc = do_work(r);
    pthread_mutex_lock(&r->mu);
    r->working = false;
    r->worked = true;
    srv_resume_locked(r);
    pthread_mutex_unlock(&r->mu);
}

/* Hands the body's work to the pool; the connection waits suspended (and listed, so that it
 * counts as in flight and shutdown waits for it) until srv_work_run resumes it. */
static enum MHD_Result start_work(req_t *r) {
    srv_list_add(r->srv, r);
    pthread_mutex_lock(&r->mu);
    r->working = true;
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&r->mu);
    srv_workers_push(r->srv->workers, r);
    return MHD_YES;
}

/* Answers with what the work gave (the HTTP thread again). */
static enum MHD_Result finish_work(req_t *r) {
    r->worked = false;
    bool generation = r->route == R_CHAT || r->route == R_COMPLETIONS;
    if (r->work_rc == 0 && generation) return generate_submit(r);
    srv_list_remove(r->srv, r);
    if (r->work_rc < 0) return reply_error(r, &r->work_err);
    return reply_json_owned(r, &r->work_out);
}

/* Runs the body's work here when it is small, else on a worker. */
static enum MHD_Result work(req_t *r) {
    if (r->body.len > WORK_OFFLOAD_BODY && r->srv->workers) return start_work(r);
    r->work_rc = do_work(r);
    r->worked = true;
    return finish_work(r);
}

// ---------------------------------------------------------------------------------------------
// Routing and authentication

static route_t route_of(const char *url, req_t *r) {
    static const struct {
        const char *path;
        route_t route;
    } table[] = {
        {"/v1/chat/completions", R_CHAT},
        {"/v1/completions", R_COMPLETIONS},
        {"/v1/models", R_MODELS},
        {"/health", R_HEALTH},
        {"/ping", R_PING},
        {"/load", R_LOAD},
        {"/version", R_VERSION},
        {"/metrics", R_METRICS},
        {"/tokenize", R_TOKENIZE},
        {"/detokenize", R_DETOKENIZE},
        {"/admin/flags", R_FLAGS},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) return table[i].route;
    static const char flag_prefix[] = "/admin/flags/";
    size_t k = sizeof flag_prefix - 1;
    if (!strncmp(url, flag_prefix, k) && url[k] && strlen(url + k) < sizeof r->flag &&
        !strchr(url + k, '/')) {
        snprintf(r->flag, sizeof r->flag, "%s", url + k);
        return R_FLAG;
    }
    return R_NONE;
}

static bool is_public(route_t rt) {
    return rt == R_HEALTH || rt == R_PING || rt == R_LOAD || rt == R_VERSION || rt == R_METRICS;
}

/* Which methods a route takes: 1 GET, 2 POST, 4 PUT. */
static int methods_of(route_t rt) {
    switch (rt) {
        case R_CHAT:
        case R_COMPLETIONS:
        case R_TOKENIZE:
        case R_DETOKENIZE:
            return 2;
        case R_PING:
            return 1 | 2;
        case R_FLAG:
            return 1 | 2 | 4;
        default:
            return 1;
    }
}

/* Compares without an early exit, so the time does not tell how much of a key matched. */
static bool key_equal(const char *given, size_t n, const char *key) {
    size_t k = strlen(key);
    unsigned char diff = (unsigned char)(n != k);
    for (size_t i = 0; i < k; i++)
        diff |= (unsigned char)((i < n ? (unsigned char)given[i] : 0) ^ (unsigned char)key[i]);
    return diff == 0;
}

static bool authorized(http_server_t *s, struct MHD_Connection *c) {
    if (s->n_keys == 0) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    const char *key = h + 7;
    size_t n = strlen(key);
    bool ok = false;
    for (int i = 0; i < s->n_keys; i++)
        ok |= key_equal(key, n, s->keys[i]);
    return ok;
}

static enum MHD_Result not_found(req_t *r) {
    static const char body[] = "{\"detail\":\"Not Found\"}";
    return srv_reply(r, 404, "application/json", body, sizeof body - 1, false);
}

/* The first call, with the headers: everything that can be refused before the body is. */
static enum MHD_Result first_call(req_t *r, const char *url, const char *method,
                                  const char *version) {
    http_server_t *s = r->srv;
    const char *why;
    int bad = srv_head_check(r->conn, method, version, &why);
    if (bad) return reply_bad_head(r, bad, why);
    r->route = route_of(url, r);
    bool options = !strcmp(method, MHD_HTTP_METHOD_OPTIONS);
    if (r->route != R_NONE && !is_public(r->route) && !options && !authorized(s, r->conn)) {
        static const char body[] = "{\"error\":\"Unauthorized\"}";
        return srv_reply(r, 401, "application/json", body, sizeof body - 1, false);
    }
    if (r->route == R_NONE) return not_found(r);
    /* without keys the API is open, but flags that can stop the engine only to this machine */
    if ((r->route == R_FLAGS || r->route == R_FLAG) && s->n_keys == 0 &&
        !srv_peer_is_loopback(r->conn)) {
        static const char body[] = "{\"error\":\"Forbidden: /admin needs --api-key for clients "
                                   "other than this machine\"}";
        return srv_reply(r, 403, "application/json", body, sizeof body - 1, false);
    }
    int m = !strcmp(method, MHD_HTTP_METHOD_GET)    ? 1
            : !strcmp(method, MHD_HTTP_METHOD_POST) ? 2
            : !strcmp(method, MHD_HTTP_METHOD_PUT)  ? 4
                                                    : 0;
    if (!(methods_of(r->route) & m)) {
        static const char body[] = "{\"detail\":\"Method Not Allowed\"}";
        return srv_reply(r, 405, "application/json", body, sizeof body - 1, false);
    }
    if (atomic_load(&s->draining) && r->route != R_HEALTH && r->route != R_PING &&
        r->route != R_METRICS)
        return srv_fail(r, 503, NULL, "the server is shutting down");
    const char *cl =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->max_body)
        return srv_fail(r, 413, NULL, "the request body is larger than %zu bytes", s->max_body);
    return MHD_YES;
}

/* The last call: the whole body is here. */
static enum MHD_Result dispatch(req_t *r, bool get) {
    http_server_t *s = r->srv;
    if (r->too_big)
        return srv_fail(r, 413, NULL, "the request body is larger than %zu bytes", s->max_body);
    jbuf_t b;
    jb_init(&b);
    enum MHD_Result rc;
    switch (r->route) {
        case R_CHAT:
        case R_COMPLETIONS:
        case R_TOKENIZE:
        case R_DETOKENIZE:
            return work(r);
        case R_MODELS:
            return srv_models(r);
        case R_HEALTH:
        case R_PING:
            if (atomic_load(&s->draining) || !engine_alive(s->eng))
                return srv_reply(r, 503, NULL, "", 0, true);
            return srv_reply(r, 200, NULL, "", 0, false);
        case R_LOAD:
            jb_printf(&b, "{\"server_load\":%d}", http_in_flight(s));
            break;
        case R_VERSION:
            jb_lit(&b, "{\"version\":");
            jb_cstr(&b, s->version);
            jb_raw(&b, "}", 1);
            break;
        case R_METRICS:
            return srv_metrics(r);
        case R_FLAGS:
            return srv_flags_list(r);
        case R_FLAG:
            return get ? srv_flag_get(r) : srv_flag_set(r);
        case R_NONE:
            return not_found(r);
    }
    rc = srv_reply_json(r, 200, &b);
    jb_free(&b);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
    http_server_t *s = cls;
    req_t *r = *req_cls;
    if (!r) {
        if (!(r = req_create(s, c))) return MHD_NO;
        *req_cls = r;
        return first_call(r, url, method, version);
    }
    if (r->responded && !r->gen && !r->flag_running) {
        *upload_size = 0; /* refused early: the rest of the body is dropped */
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->body.len + *upload_size > s->max_body)
            r->too_big = true;
        else
            jb_raw(&r->body, upload, *upload_size);
        if (r->body.oom) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (!r->dispatched) {
        r->dispatched = true;
        return dispatch(r, !strcmp(method, MHD_HTTP_METHOD_GET));
    }
    if (r->worked) return finish_work(r);
    if (r->flag_running) return srv_flag_set_wait(r);
    if (r->gen && !r->streaming) return wait_answer(r);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    http_server_t *s = cls;
    req_t *r = *req_cls;
    if (!r) return;
    *req_cls = NULL;
    if (r->gen) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && !r->answered)
            metrics_add(s->metrics, METRIC_DISCONNECTS, 1);
        srv_list_remove(s, r);
        /* cancels unfinished choices and waits out a wake call in progress */
        oai_destroy(r->gen);
        r->gen = NULL;
    }
    req_free(r);
}

// ---------------------------------------------------------------------------------------------
// The watcher: clients gone while suspended, keep-alive comments

static bool peer_gone(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static void watch_once(http_server_t *s) {
    double now = now_s();
    for (req_t *r = s->live; r; r = r->next) {
        bool gone = false;
        pthread_mutex_lock(&r->mu);
        /* a worker's request is the worker's; a flag change ends when the engine applied it */
        if (!r->working && r->gen && r->suspended && !r->gone) {
            gone = peer_gone(r->fd);
            if (gone) {
                r->gone = true;
                srv_resume_locked(r);
            } else if (r->streaming && now - r->idle_since >= s->keepalive_s) {
                r->ping = true;
                srv_resume_locked(r);
            }
        }
        pthread_mutex_unlock(&r->mu);
        if (gone) oai_cancel(r->gen);
    }
}

static void *watch_main(void *arg) {
    http_server_t *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->watch_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long ns = (long)(s->watch_s * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec += ns % 1000000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (!s->watch_stop) watch_once(s);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Start and stop

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    /* the reader ends a stream whose client went away with an error: that is no news */
    if (strstr(msg, "application error generating response")) return;
    fprintf(stderr, "tachyon: http: %s\n", msg);
}

static int listen_on(const char *host, int port, int *fd_out, int *port_out, bool *v6, err_t *err) {
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai;
    int rc = getaddrinfo(host, ports, &hints, &ai);
    if (rc) return err_set(err, "cannot listen on %s:%d: %s", host, port, gai_strerror(rc));
    int fd = -1, e = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
            e = errno;
            close(fd);
            fd = -1;
            continue;
        }
        *v6 = a->ai_family == AF_INET6;
    }
    freeaddrinfo(ai);
    if (fd < 0) return err_set(err, "cannot listen on %s:%d: %s", host, port, strerror(e));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port_out = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return 0;
}

static char *dup_or(const char *s, const char *def) {
    return strdup(s ? s : def);
}

static uint64_t random_seed(void) {
    uint64_t v = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&v, sizeof v, 1, f) != 1) v = 0;
        fclose(f);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return v ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
}

int http_start(engine_t *eng, const http_opts_t *o, http_server_t **out, err_t *err) {
    *out = NULL;
    http_server_t *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, "out of memory");
    s->eng = eng;
    s->listen_fd = -1;
    s->quiesced_fd = MHD_INVALID_SOCKET;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&s->draining, false);
    atomic_init(&s->stopping, false);
    atomic_init(&s->shut, false);
    s->host = dup_or(o->host, "127.0.0.1");
    s->root = dup_or(o->model_root, "model");
    s->version = dup_or(o->version, "dev");
    s->max_body = o->max_body ? o->max_body : DEFAULT_BODY;
    s->keepalive_s = o->keepalive_s > 0 ? o->keepalive_s : 5.0;
    s->watch_s = o->watch_s > 0 ? o->watch_s : 0.2;
    s->started = (long long)time(NULL);
    s->n_keys = o->n_api_keys;
    s->keys = calloc((size_t)s->n_keys + 1, sizeof *s->keys);
    s->n_names = o->n_model_names > 0 ? o->n_model_names : 1;
    s->names = calloc((size_t)s->n_names + 1, sizeof *s->names);
    if (!s->host || !s->root || !s->version || !s->keys || !s->names) goto oom;
    for (int i = 0; i < s->n_keys; i++)
        if (!(s->keys[i] = strdup(o->api_keys[i]))) goto oom;
    for (int i = 0; i < s->n_names; i++)
        if (!(s->names[i] = strdup(o->n_model_names > 0 ? o->model_names[i] : s->root))) goto oom;
    if (!(s->metrics = metrics_create(oai_max_model_len(eng)))) goto oom;
    s->oai.eng = eng;
    s->oai.model_names = (const char *const *)s->names;
    s->oai.n_model_names = s->n_names;
    s->oai.reasoning_qwen3 = o->reasoning_qwen3;
    s->oai.auto_tool_choice = o->auto_tool_choice;
    int fmt = engine_chat_format(eng);
    s->oai.tool_parser = fmt < 0 ? TC_NONE : tc_format_for_chat((chat_format_t)fmt);
    if (o->tool_parser && tc_format_parse(o->tool_parser, &s->oai.tool_parser) < 0) {
        err_set(err, "--tool-call-parser %s: unknown (hermes or qwen3_coder)", o->tool_parser);
        goto fail;
    }
    s->oai.metrics = s->metrics;
    s->oai.id_seed = random_seed();
    atomic_init(&s->oai.n_ids, 0);

    bool v6 = false;
    if (listen_on(s->host, o->port, &s->listen_fd, &s->port, &v6, err) < 0) goto fail;
    unsigned threads = o->threads;
    if (!threads) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores >= 8 ? (unsigned)(cores / 4) : 1;
        if (threads > 8) threads = 8;
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (v6) flags |= MHD_USE_IPv6;
    struct MHD_OptionItem opts[] = {
        /* the logger first, so that even option warnings go through it */
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, NULL},
        {MHD_OPTION_LISTEN_SOCKET, s->listen_fd, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, o->max_connections ? o->max_connections : 4096, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, o->timeout_s ? o->timeout_s : 60, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, MEMORY_LIMIT, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, s},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)srv_unescape, NULL},
#if MHD_VERSION < 0x00097701
        /* HTTP/1.1 without Host refused; request_head.c checks line ends and folding */
        {MHD_OPTION_STRICT_FOR_CLIENT, 1, NULL},
#else
        /* no bare LF, no folded lines, Host required */
        {MHD_OPTION_CLIENT_DISCIPLINE_LVL, 1, NULL},
#endif
        {threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts,
                            MHD_OPTION_END);
    s->listen_fd = -1; /* libmicrohttpd's now: it closes it, or quiesce hands it back */
    if (!s->d) {
        err_set(err, "cannot start the HTTP server on %s:%d", s->host, s->port);
        goto fail;
    }
    /* two: one long prompt never waits behind another (the HTTP threads stay free either way) */
    if (!(s->workers = srv_workers_create(2))) {
        err_set(err, "cannot start the HTTP worker threads");
        goto fail;
    }
    if (pthread_create(&s->watcher, NULL, watch_main, s) != 0) {
        err_set(err, "cannot start the HTTP watcher thread");
        goto fail;
    }
    s->watcher_started = true;
    *out = s;
    return 0;
oom:
    err_set(err, "out of memory");
fail:
    http_destroy(s);
    return -1;
}

int http_port(const http_server_t *s) {
    return s->port;
}

int http_in_flight(http_server_t *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_live;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits until no generation request is live, up to `seconds`; true when none is. */
static bool wait_idle(http_server_t *s, double seconds) {
    double end = now_s() + seconds;
    pthread_mutex_lock(&s->mu);
    while (s->n_live > 0 && now_s() < end) {
        pthread_mutex_unlock(&s->mu);
        usleep(10000);
        pthread_mutex_lock(&s->mu);
    }
    bool idle = s->n_live == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

/* Connections the kernel accepted before the listening socket is closed would otherwise wait,
 * unanswered, until the process exits: each is handed to libmicrohttpd, whose first call answers
 * it 503 (draining) and closes it. Then the socket is closed, so later ones are refused at once
 * and a load balancer moves on. */
static void close_listener(http_server_t *s) {
    int fd = s->quiesced_fd;
    if (fd == MHD_INVALID_SOCKET) return;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int c = accept4(fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            break; /* EAGAIN: the backlog is empty */
        }
        if (MHD_add_connection(s->d, c, (struct sockaddr *)&ss, sl) != MHD_YES) close(c);
    }
    close(fd);
    s->quiesced_fd = MHD_INVALID_SOCKET;
}

void http_drain(http_server_t *s) {
    if (!s->d || atomic_exchange(&s->draining, true)) return;
    s->quiesced_fd = MHD_quiesce_daemon(s->d);
    if (s->quiesced_fd != MHD_INVALID_SOCKET) {
        /* quiesce leaves it blocking; the backlog is taken without waiting */
        int fl = fcntl(s->quiesced_fd, F_GETFL);
        if (fl >= 0) fcntl(s->quiesced_fd, F_SETFL, fl | O_NONBLOCK);
    }
    close_listener(s);
}

int http_wait_idle(http_server_t *s, double seconds) {
    wait_idle(s, seconds);
    return http_in_flight(s);
}

void http_shutdown(http_server_t *s, double grace_s) {
    if (!s || atomic_exchange(&s->shut, true)) return;
    if (!s->d) return;
    http_drain(s);
    if (!wait_idle(s, grace_s)) {
        pthread_mutex_lock(&s->mu);
        for (req_t *r = s->live; r; r = r->next) {
            pthread_mutex_lock(&r->mu);
            if (!r->working && r->gen) oai_cancel(r->gen);
            pthread_mutex_unlock(&r->mu);
        }
        pthread_mutex_unlock(&s->mu);
        wait_idle(s, 5.0);
    }
    pthread_mutex_lock(&s->mu);
    s->watch_stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->watcher_started) pthread_join(s->watcher, NULL);
    s->watcher_started = false;
    /* libmicrohttpd must not be stopped with suspended connections */
    atomic_store(&s->stopping, true);
    pthread_mutex_lock(&s->mu);
    for (req_t *r = s->live; r; r = r->next) {
        pthread_mutex_lock(&r->mu);
        if (!r->working) srv_resume_locked(r);
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->mu);
    /* the jobs left finish and resume their connections before the daemon stops */
    srv_workers_destroy(s->workers);
    s->workers = NULL;
    MHD_stop_daemon(s->d);
    s->d = NULL;
}

void http_destroy(http_server_t *s) {
    if (!s) return;
    if (s->d) {
        http_shutdown(s, 0);
    } else if (s->watcher_started) {
        pthread_mutex_lock(&s->mu);
        s->watch_stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->watcher, NULL);
    }
    srv_workers_destroy(s->workers);
    if (s->listen_fd >= 0) close(s->listen_fd);
    for (int i = 0; s->keys && i < s->n_keys; i++)
        free(s->keys[i]);
    for (int i = 0; s->names && i < s->n_names; i++)
        free(s->names[i]);
    free(s->keys);
    free(s->names);
    free(s->host);
    free(s->root);
    free(s->version);
    metrics_destroy(s->metrics);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
