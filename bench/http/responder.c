/* A trivial HTTP responder for the server overhead benchmark (http_overhead.py): the same
 * libmicrohttpd setup as the server (epoll thread), answering every POST with a fixed SSE body of
 * the shape and size of an 8-token /v1/completions stream, and nothing else. Usage:
 * responder PORT (0: any free port; the chosen one is printed) */
#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char body[8192];
static size_t body_len;

static void build_body(void) {
    static const char chunk[] =
        "data: {\"id\":\"cmpl-0123456789abcdef0123456789abcdef\",\"object\":\"text_completion\","
        "\"created\":1700000000,\"model\":\"tiny-qwen3\",\"choices\":[{\"index\":0,\"text\":\" "
        "word\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n";
    for (int i = 0; i < 9; i++) {
        memcpy(body + body_len, chunk, sizeof chunk - 1);
        body_len += sizeof chunk - 1;
    }
    memcpy(body + body_len, "data: [DONE]\n\n", 14);
    body_len += 14;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req_cls) {
    if (!*req_cls) {
        *req_cls = c;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body_len, body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: responder PORT\n");
        return 2;
    }
    build_body();
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
