/*
 * server: the OpenAI-compatible HTTP server (libmicrohttpd) in front of an engine.
 *
 * Endpoints, as vLLM's OpenAI server has them: POST /v1/chat/completions and /v1/completions
 * (streaming and not), GET /v1/models, /health, /ping, /load, /version, /metrics (Prometheus),
 * POST /tokenize and /detokenize, and the admin flags endpoint: GET /admin/flags, GET
 * /admin/flags/NAME, POST or PUT /admin/flags/NAME with {"value": ...}.
 *
 * libmicrohttpd runs its own epoll thread(s). A generation request is submitted to the engine
 * from the request's HTTP thread; its connection is then suspended whenever nothing is ready, and
 * the engine's wake hook resumes it (reference/server-and-bench.md section 6). A watcher thread
 * notices clients that went away while their connection is suspended (a non-streaming request, a
 * stream in its prefill) and cancels their sequences, and sends SSE keep-alive comments on quiet
 * streams.
 *
 *     http_opts_t o;
 *     http_opts_init(&o);
 *     o.port = 8000;
 *     http_server_t *srv;
 *     if (http_start(eng, &o, &srv, &err) < 0) ...
 *     printf("listening on %d\n", http_port(srv));
 *     ... on SIGTERM (see http_drain for the sequence that shows progress):
 *     http_shutdown(srv, 30);     // stop accepting, finish or abort in-flight requests
 *     http_destroy(srv);
 *     engine_close(eng);
 */
#ifndef TACHYON_SERVER_H
#define TACHYON_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "engine.h"
#include "err.h"

typedef struct http_server http_server_t;

typedef struct http_opts {
    const char *host; /* address to listen on (default 127.0.0.1; "0.0.0.0" or "::" for all) */
    int port;         /* default 8000; 0 = a free port (http_port tells which) */
    /* Bearer keys; none = no authentication. Public paths (/health, /ping, /load, /version,
     * /metrics) never need one. */
    const char *const *api_keys;
    int n_api_keys;
    /* Accepted "model" names; the first is the id /v1/models reports. None: model_root. */
    const char *const *model_names;
    int n_model_names;
    const char *model_root;   /* the model path (/v1/models "root") */
    const char *version;      /* GET /version */
    bool reasoning_qwen3;     /* --reasoning-parser qwen3 */
    bool auto_tool_choice;    /* --enable-auto-tool-choice: tool_choice "auto" parses calls */
    const char *tool_parser;  /* --tool-call-parser hermes|qwen3_coder; NULL: the one the
                                 model's chat template teaches it */
    unsigned threads;         /* HTTP threads; 0 = one per 4 cores, at least 1, at most 8 */
    unsigned max_connections; /* 0 = 4096 */
    size_t max_body;          /* request body limit in bytes, 413 beyond; 0 = 32 MiB */
    unsigned timeout_s;       /* idle connection timeout (slow clients, keep-alive); 0 = 60 */
    double keepalive_s;       /* SSE ": keep-alive" comment after this long without data;
                                 0 = 5 */
    double watch_s;           /* how often suspended connections are checked; 0 = 0.2 */
} http_opts_t;

void http_opts_init(http_opts_t *o);

/* True for a listen address only this machine can reach (127.0.0.0/8, ::1, "localhost"). Without
 * an API key the server answers /admin only to loopback clients (403 otherwise); a caller binding
 * another address without a key should warn that the API is open. */
bool http_host_is_loopback(const char *host);

/* Binds the address and starts serving. The engine must outlive the server. Strings in o are
 * copied. Fails with a message naming the address when it cannot listen, or naming a
 * --tool-call-parser it does not know. */
int http_start(engine_t *eng, const http_opts_t *o, http_server_t **out, err_t *err);

/* The port the server listens on (the chosen one when started with port 0). */
int http_port(const http_server_t *s);

/* Requests being answered: generation requests and flag changes in progress. */
int http_in_flight(http_server_t *s);

/* Begins a graceful stop: the listening socket is closed (connections the kernel had already
 * queued are answered 503 and closed; later ones are refused), requests arriving on open
 * connections get 503 with Connection: close, /health says 503; in-flight requests go on.
 * Returns at once. Idempotent.
 *
 * The one drain sequence (tachyon serve on SIGTERM; the console's quit, which redraws between
 * waits and lets a second quit cut it short):
 *     http_drain(srv);
 *     double end = now + grace_s;                      // --shutdown-timeout
 *     while (http_wait_idle(srv, 0.1) > 0 && now < end && !asked_again)
 *         ... show http_in_flight(srv) requests left ...
 *     http_shutdown(srv, 0);                           // aborts what is left
 *     http_destroy(srv);
 */
void http_drain(http_server_t *s);

/* Waits up to `seconds` for the in-flight requests to finish; returns how many are left. */
int http_wait_idle(http_server_t *s, double seconds);

/* Drains (http_drain), waits up to grace_s seconds for in-flight requests to finish, then
 * aborts the rest (streams end with finish_reason "abort", waiting requests get their partial
 * answer), and stops the HTTP threads. Safe to call once; http_destroy calls it with no grace
 * when it was not called. */
void http_shutdown(http_server_t *s, double grace_s);

void http_destroy(http_server_t *s);

#endif
