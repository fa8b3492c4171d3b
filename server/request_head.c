/*
 * request_head: what the server refuses in a request's head before routing it, where
 * libmicrohttpd 0.9.75 (Debian 12) is lenient: framing that a proxy in front could read another
 * way (two Content-Length values, Content-Length with Transfer-Encoding, a transfer coding other
 * than chunked, bare LF line ends, folded header lines), %00 in the path, and the peer's address
 * for the admin endpoints. See server_int.h.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server_int.h"

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t srv_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hex_value(r[1]) : -1, lo = hi >= 0 ? hex_value(r[2]) : -1;
        /* %00 stays as written: decoded, it would end the C string the router compares, so
         * "/admin/flags%00.json" would route as /admin/flags */
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

typedef struct head_walk {
    uintptr_t expect; /* where the next header line must start (MHD < 0.9.77) */
    bool layout_ok, name_ok;
    int n_length, n_coding;
    const char *length; /* the first Content-Length value */
    size_t length_len;
    bool length_differs, length_list, chunked;
} head_walk_t;

static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size) {
    (void)kind;
    head_walk_t *w = cls;
    for (size_t i = 0; i < key_size; i++)
        w->name_ok &= is_tchar((unsigned char)key[i]);
#if MHD_VERSION < 0x00097701
    /* libmicrohttpd 0.9.75 parses the head in place, zeroing each CR LF pair and the colon, and
     * hands out pointers into that buffer: a line that is "name: value" CR LF puts the next name
     * two bytes after this value. A bare LF leaves one byte, a folded line leaves its text (or
     * moves the name elsewhere), a NUL inside a line cuts the value short: all refused. */
    uintptr_t k = (uintptr_t)key, v = (uintptr_t)value;
    if (k != w->expect || key[key_size] != '\0' || v < k + key_size + 1) {
        w->layout_ok = false;
    } else {
        for (uintptr_t p = k + key_size + 1; p < v; p++)
            if (*(const char *)p != ' ' && *(const char *)p != '\t') w->layout_ok = false;
        if (value[value_size] != '\0' || value[value_size + 1] != '\0') w->layout_ok = false;
    }
    w->expect = (uintptr_t)value + value_size + 2;
#endif
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
        if (w->n_length++ == 0) {
            w->length = value;
            w->length_len = value_size;
        } else if (value_size != w->length_len || memcmp(value, w->length, value_size)) {
            w->length_differs = true;
        }
        if (memchr(value, ',', value_size)) w->length_list = true;
    } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        w->n_coding++;
        w->chunked = !strcasecmp(value, "chunked");
    }
    return MHD_YES;
}

int srv_head_check(struct MHD_Connection *c, const char *method, const char *version,
                   const char **why) {
    head_walk_t w = {.layout_ok = true, .name_ok = true};
#if MHD_VERSION < 0x00097701
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    /* the request line ends where the version does, with its CR LF zeroed */
    size_t vlen = strlen(version);
    w.expect = (uintptr_t)version + vlen + 2;
    if (!ci || version[vlen + 1] != '\0') w.layout_ok = false;
#else
    (void)method;
    (void)version;
#endif
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, walk_header, &w);
#if MHD_VERSION < 0x00097701
    /* after the last line, the empty one: two more zeroed bytes end the head */
    if (ci && w.expect + 2 != (uintptr_t)method + ci->header_size) w.layout_ok = false;
#endif
    if (!w.layout_ok) {
        *why = "malformed request head: every line must end with CR LF, and folded header "
               "lines are not accepted";
        return 400;
    }
    if (!w.name_ok) {
        *why = "malformed header name";
        return 400;
    }
    if (w.length_differs || w.length_list) {
        *why = "conflicting Content-Length headers";
        return 400;
    }
    if (w.n_coding && w.n_length) {
        *why = "both Content-Length and Transfer-Encoding";
        return 400;
    }
    if (w.n_coding > 1 || (w.n_coding && !w.chunked)) {
        *why = "only Transfer-Encoding: chunked is supported";
        return 501;
    }
    return 0;
}

bool srv_addr_is_loopback(const struct sockaddr *sa) {
    if (!sa) return false;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

bool srv_peer_is_loopback(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return ci && srv_addr_is_loopback(ci->client_addr);
}

bool http_host_is_loopback(const char *host) {
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &in->sin_addr) == 1)
        in->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1)
        in6->sin6_family = AF_INET6;
    else
        return !strcasecmp(host, "localhost");
    return srv_addr_is_loopback((struct sockaddr *)&ss);
}
