/*
 * server_int: what the server's files share (server-internal): the server and connection
 * structs, the response helpers, the live list, and the endpoints that live in endpoints.c
 * (server.c has the plumbing, routing and the suspend/resume protocol: see its top).
 */
#ifndef TACHYON_SERVER_INT_H
#define TACHYON_SERVER_INT_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "json.h"
#include "metrics.h"
#include "openai.h"
#include "server.h"

#define PUMP_MAX       (64 * 1024)  /* bytes of SSE made ready per reader call */
#define MEMORY_LIMIT   (128 * 1024) /* per connection: headers and the write buffer */
#define LISTEN_BACKLOG 4096
#define DEFAULT_BODY   (32u << 20)
#define MAX_FLAG_VALUE 256
/* bodies above this are parsed, tokenized and rendered by a worker, not the HTTP thread: a
 * 9 MiB prompt takes seconds, during which nothing else on that thread would be answered */
#define WORK_OFFLOAD_BODY (64 * 1024)

typedef enum route {
    R_NONE,
    R_CHAT,
    R_COMPLETIONS,
    R_MODELS,
    R_HEALTH,
    R_PING,
    R_LOAD,
    R_VERSION,
    R_METRICS,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_FLAGS,
    R_FLAG,
} route_t;

typedef struct req req_t;
typedef struct srv_workers srv_workers_t;

struct http_server {
    engine_t *eng;
    struct MHD_Daemon *d;
    int listen_fd, port;
    MHD_socket quiesced_fd; /* handed back by MHD_quiesce_daemon, closed by http_drain */
    /* options, owned copies */
    char *host, *root, *version;
    char **keys;
    int n_keys;
    char **names;
    int n_names;
    size_t max_body;
    double keepalive_s, watch_s;
    long long started;
    oai_config_t oai;
    metrics_t *metrics;
    srv_workers_t *workers;
    atomic_bool draining, stopping, shut;
    /* live generation requests, for the watcher and shutdown */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    req_t *live;
    int n_live;
    bool watch_stop;
    pthread_t watcher;
    bool watcher_started;
};

struct req {
    http_server_t *srv;
    struct MHD_Connection *conn;
    route_t route;
    char flag[64];
    int fd;
    jbuf_t body;
    bool too_big, responded, dispatched, answered;
    oai_req_t *gen;
    bool streaming;
    /* under mu (see the top of this file) */
    pthread_mutex_t mu;
    bool suspended, news, ping, gone;
    double idle_since; /* when a suspended stream last sent data */
    /* HTTP thread */
    jbuf_t out;
    size_t out_pos;
    bool complete;
    double last_send;
    /* a rebuild-flag change waiting for the engine thread's answer (under mu) */
    bool flag_running, flag_done;
    int flag_rc;
    err_t flag_err;
    pthread_cond_t flag_cv;
    char flag_value[MAX_FLAG_VALUE];
    /* work off the HTTP thread (workers.c): `working` under mu while a worker has the request
     * (its connection suspended); the results are the worker's until it clears it */
    bool working, worked;
    int work_rc;
    oai_error_t work_err;
    jbuf_t work_out;
    req_t *work_next; /* the pool's queue */
    /* the live list, under srv->mu */
    req_t *prev, *next;
    bool listed;
};

// ---------------------------------------------------------------------------------------------
// Responses (server.c)

/* Queues a response with the body (copied) and content type, closing the connection after it
 * when `close`; the request counts as answered. */
enum MHD_Result srv_reply(req_t *r, unsigned status, const char *type, const char *body, size_t len,
                          bool close);
enum MHD_Result srv_reply_json(req_t *r, unsigned status, jbuf_t *b);
/* An error in vLLM's envelope. */
enum MHD_Result srv_fail(req_t *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The live list (the watcher and shutdown walk it), under srv->mu. */
void srv_list_add(http_server_t *s, req_t *r);
void srv_list_remove(http_server_t *s, req_t *r);

/* Resumes a suspended connection (the caller holds r->mu and has set its reason). */
void srv_resume_locked(req_t *r);

// ---------------------------------------------------------------------------------------------
// Workers (workers.c): a pool that runs srv_work_run(r) for queued requests, in order

srv_workers_t *srv_workers_create(int n_threads);
void srv_workers_push(srv_workers_t *w, req_t *r);
/* Runs what is queued, then joins the threads. NULL is a no-op. */
void srv_workers_destroy(srv_workers_t *w);
/* The job (server.c): parses or tokenizes the body, then resumes the connection. */
void srv_work_run(req_t *r);

// ---------------------------------------------------------------------------------------------
// The request head (request_head.c)

/* libmicrohttpd's unescape callback: %HH decoded as it does, except %00, left as written so that
 * a path never ends early ("/admin/flags%00.json" is no route). */
size_t srv_unescape(void *cls, struct MHD_Connection *c, char *s);

/* Checks the head of a request on its first call (method and version as the access handler got
 * them): 0 when it is well formed, else the status to answer (400, 501; the connection is then
 * closed) with *why saying what was wrong: a line not ending in CR LF, a folded header line, a
 * header name that is not a token, two different Content-Length values or a list of them,
 * Content-Length with Transfer-Encoding, a transfer coding other than chunked. */
int srv_head_check(struct MHD_Connection *c, const char *method, const char *version,
                   const char **why);

/* Loopback addresses: 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104. */
bool srv_addr_is_loopback(const struct sockaddr *sa);
bool srv_peer_is_loopback(struct MHD_Connection *c);

// ---------------------------------------------------------------------------------------------
// Endpoints (endpoints.c)

enum MHD_Result srv_models(req_t *r);     /* GET /v1/models */
enum MHD_Result srv_metrics(req_t *r);    /* GET /metrics */
enum MHD_Result srv_flags_list(req_t *r); /* GET /admin/flags */
enum MHD_Result srv_flag_get(req_t *r);   /* GET /admin/flags/NAME */
/* POST|PUT /admin/flags/NAME: live flags answer at once; a rebuild flag leaves the connection
 * suspended until the engine answers, then srv_flag_set_wait writes the answer. */
enum MHD_Result srv_flag_set(req_t *r);
enum MHD_Result srv_flag_set_wait(req_t *r);

#endif
