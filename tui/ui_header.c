/* ui_header: see ui_header.h. */
#include "ui_header.h"

#include <stdio.h>
#include <string.h>

#include "lineedit.h"

#define MAX_FIELDS 16

static bool present(const ui_header_field_t *f) {
    return f->text && f->text[0];
}

static int width_of(const char *s) {
    return le_text_width(s, strlen(s));
}

/* Columns of the shown fields joined. */
static int total(const ui_header_field_t *f, int n, const bool *shown) {
    int w = 0, k = 0;
    for (int i = 0; i < n; i++) {
        if (!shown[i]) continue;
        w += (k++ ? (f[i].joined ? 1 : 3) : 0) + width_of(f[i].text);
    }
    return w;
}

/* Appends s to out[*used, size), cut at a character boundary. */
static void add(char *out, size_t size, size_t *used, const char *s) {
    size_t n = strlen(s);
    if (*used + n + 1 > size) {
        n = size - *used - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(out + *used, s, n);
    *used += n;
    out[*used] = '\0';
}

int ui_header_fit(const ui_header_field_t *f, int n, int width, bool ascii, char *out,
                  size_t size) {
    if (size == 0) return 0;
    out[0] = '\0';
    if (n > MAX_FIELDS) n = MAX_FIELDS;
    /* rank 0 always; then, lowest rank first, every field that still fits (a wide field left out
     * does not keep a narrower, less important one out) */
    bool shown[MAX_FIELDS] = {0}, tried[MAX_FIELDS] = {0};
    for (int i = 0; i < n; i++) {
        shown[i] = present(&f[i]) && f[i].rank == 0;
        tried[i] = shown[i] || !present(&f[i]);
    }
    for (;;) {
        int next = -1;
        for (int i = 0; i < n; i++)
            if (!tried[i] && (next < 0 || f[i].rank < f[next].rank)) next = i;
        if (next < 0) break;
        shown[next] = true;
        if (total(f, n, shown) > width) shown[next] = false;
        tried[next] = true;
    }
    int over = total(f, n, shown) - width;
    /* The rank-0 fields alone are too wide: the shortened field keeps its end. */
    const char *cut = NULL;
    int cut_at = -1;
    for (int i = 0; i < n && over > 0 && cut_at < 0; i++) {
        if (!shown[i] || !f[i].shorten) continue;
        const char *s = f[i].text;
        int keep = width_of(s) - over - 1; /* one column for the ellipsis */
        while (*s && width_of(s) > keep) {
            s++;
            while (((unsigned char)*s & 0xC0) == 0x80)
                s++;
        }
        if (*s) cut = s, cut_at = i;
    }
    size_t used = 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!shown[i]) continue;
        if (k++) add(out, size, &used, f[i].joined ? " " : " | ");
        if (i == cut_at) {
            add(out, size, &used, ascii ? "~" : "\xe2\x80\xa6");
            add(out, size, &used, cut);
        } else {
            add(out, size, &used, f[i].text);
        }
    }
    return width_of(out);
}
