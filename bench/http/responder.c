/* A trivial HTTP responder for the server overhead benchmark (http_overhead.py) and the client
 * cost benchmark (client-cost.sh): the same libmicrohttpd setup as the server (epoll thread),
 * answering POST /v1/completions and /v1/chat/completions with a fixed SSE body of the shape and
 * size of a /v1/completions stream, GET /v1/models with one model ("responder"), and anything
 * else with 404. Usage:
 *   responder PORT [TOKENS]
 * PORT 0 picks a free port (the chosen one is printed). Without TOKENS the body is the 8-token
 * stream of http_overhead.py (9 chunks, no usage); with it, TOKENS chunks, a usage chunk
 * (prompt_tokens 32, completion_tokens TOKENS) and [DONE]. */
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TOKENS 256

static char body[MAX_TOKENS * 256 + 512];
static size_t body_len;
static const char models[] = "{\"object\":\"list\",\"data\":[{\"id\":\"responder\","
                             "\"object\":\"model\",\"owned_by\":\"tachyon\"}]}";
static const char not_found[] = "{\"error\":{\"message\":\"not found\",\"type\":"
                                "\"NotFoundError\",\"code\":404}}";

static void build_body(int tokens) {
    static const char chunk[] =
        "data: {\"id\":\"cmpl-0123456789abcdef0123456789abcdef\",\"object\":\"text_completion\","
        "\"created\":1700000000,\"model\":\"tiny-qwen3\",\"choices\":[{\"index\":0,\"text\":\" "
        "word\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n";
    for (int i = 0; i < (tokens > 0 ? tokens : 9); i++) {
        memcpy(body + body_len, chunk, sizeof chunk - 1);
        body_len += sizeof chunk - 1;
    }
    if (tokens > 0)
        body_len += (size_t)snprintf(
            body + body_len, sizeof body - body_len,
            "data: {\"id\":\"cmpl-0123456789abcdef0123456789abcdef\",\"object\":"
            "\"text_completion\",\"created\":1700000000,\"model\":\"tiny-qwen3\",\"choices\":[],"
            "\"usage\":{\"prompt_tokens\":32,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n",
            32 + tokens, tokens);
    memcpy(body + body_len, "data: [DONE]\n\n", 14);
    body_len += 14;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             const char *data, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
    (void)cls;
    (void)version;
    (void)upload;
    if (!*req_cls) {
        *req_cls = c;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(method, "GET") && !strcmp(url, "/v1/models"))
        return reply(c, 200, "application/json", models, sizeof models - 1);
    if (!strcmp(method, "POST") &&
        (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")))
        return reply(c, 200, "text/event-stream", body, body_len);
    return reply(c, 404, "application/json", not_found, sizeof not_found - 1);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && (atoi(argv[2]) < 1 || atoi(argv[2]) > MAX_TOKENS))) {
        fprintf(stderr, "usage: responder PORT [TOKENS (1..%d)]\n", MAX_TOKENS);
        return 2;
    }
    build_body(argc == 3 ? atoi(argv[2]) : 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD, (uint16_t)atoi(argv[1]), NULL, NULL, on_request, NULL,
        MHD_OPTION_CONNECTION_LIMIT, 4096u, MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "responder: cannot listen on %s\n", argv[1]);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "responder on http://127.0.0.1:%u\n", info ? info->port : 0u);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGINT);
    sigaddset(&s, SIGTERM);
    sigprocmask(SIG_BLOCK, &s, NULL);
    int sig;
    sigwait(&s, &sig);
    MHD_stop_daemon(d);
    return 0;
}
