#include "textstream.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIM   "\033[2m"
#define UNDIM "\033[22m"

int textstream_init(textstream_t *ts, FILE *out, textstream_mode_t mode) {
    memset(ts, 0, sizeof *ts);
    ts->out = out;
    ts->mode = mode;
    const char *no_color = getenv("NO_COLOR");
    ts->styled = isatty(fileno(out)) && !(no_color && *no_color);
    ts->reply_cap = 256;
    ts->reply = malloc(ts->reply_cap);
    if (!ts->reply) return -1;
    ts->reply[0] = '\0';
    return 0;
}

void textstream_free(textstream_t *ts) {
    free(ts->reply);
    memset(ts, 0, sizeof *ts);
}

static int keep(textstream_t *ts, const char *text, size_t len) {
    if (ts->reply_len + len + 1 > ts->reply_cap) {
        size_t cap = 2 * (ts->reply_len + len + 1);
        char *grown = realloc(ts->reply, cap);
        if (!grown) return -1;
        ts->reply = grown;
        ts->reply_cap = cap;
    }
    memcpy(ts->reply + ts->reply_len, text, len);
    ts->reply_len += len;
    ts->reply[ts->reply_len] = '\0';
    return 0;
}

static void print_part(textstream_t *ts, const char *text, size_t len, bool reasoning) {
    if (!text || !len) return;
    if (reasoning && ts->mode == TEXTSTREAM_HIDE_REASONING) return;
    if (ts->styled && reasoning != ts->dimmed) {
        fputs(reasoning ? DIM : UNDIM, ts->out);
        ts->dimmed = reasoning;
    }
    fwrite(text, 1, len, ts->out);
}

int textstream_push(textstream_t *ts, const fe_delta_t *d) {
    if (d->text_len && keep(ts, d->text, d->text_len) < 0) return -1;
    if (ts->mode == TEXTSTREAM_RAW) {
        fwrite(d->text, 1, d->text_len, ts->out);
    } else {
        print_part(ts, d->reasoning, d->reasoning_len, true);
        print_part(ts, d->content, d->content_len, false);
    }
    fflush(ts->out);
    return 0;
}

int textstream_finish(textstream_t *ts) {
    if (ts->dimmed) fputs(UNDIM, ts->out);
    ts->dimmed = false;
    fflush(ts->out);
    return 0;
}
