/* `tachyon tokenize`: encode text with a model's tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "mdir.h"

static const char tokenize_usage[] =
    "usage: tachyon tokenize [--model DIR] [--ids-only] [--stats] [--repeat N] TEXT\n"
    "\n"
    "Encodes TEXT (or standard input when TEXT is -) with the model's tokenizer.json and\n"
    "prints one line per token: id and token, or with --ids-only the ids as a JSON list.\n"
    "\n"
    "  --model DIR   model directory (default: the embedded model)\n"
    "  --ids-only    print only the ids, as [1, 2, 3]\n"
    "  --stats       print to standard error the encoding time (encoding only: not loading,\n"
    "                reading or printing), bytes, tokens, MB/s (10^6 bytes) and tokens/s\n"
    "  --repeat N    encode N times (default 1); --stats reports the fastest and the first\n";

static char *read_stdin(size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += got;
        if (n == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) free(buf);
            buf = grown;
        }
    }
    *len = n;
    return buf;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cmd_tokenize(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"ids-only", no_argument, 0, 'i'},
        {"stats", no_argument, 0, 's'},       {"repeat", required_argument, 0, 'r'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0},
    };
    const char *model = MDIR_EMBEDDED;
    bool ids_only = false, stats = false;
    long repeat = 1;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
            case 'm':
                model = optarg;
                break;
            case 'i':
                ids_only = true;
                break;
            case 's':
                stats = true;
                break;
            case 'r':
                if (cli_parse_long(optarg, 1, 1000000, &repeat) < 0) {
                    fprintf(stderr, "tachyon: --repeat must be a positive integer\n");
                    return 2;
                }
                break;
            case 'h':
                fputs(tokenize_usage, stdout);
                return 0;
            default:
                fputs(tokenize_usage, stderr);
                return 2;
        }
    }
    if (optind != argc - 1) {
        fputs(tokenize_usage, stderr);
        return 2;
    }
    err_t err = {{0}};
    mdir_t *dir = NULL;
    tokenizer_t *tok = NULL;
    char *owned = NULL;
    int32_t *ids = NULL;
    int rc = 1;
    if (mdir_open(model, &dir, &err) < 0 || tok_load(dir, &tok, &err) < 0) goto fail;
    const char *text = argv[optind];
    size_t len = strlen(text);
    if (!strcmp(text, "-")) {
        if (!(text = owned = read_stdin(&len))) {
            err_set(&err, "out of memory reading standard input");
            goto fail;
        }
    }
    size_t n = 0;
    double best = 0, first = 0;
    for (long r = 0; r < repeat; r++) {
        free(ids);
        ids = NULL;
        double t0 = now();
        if (tok_encode(tok, text, len, &ids, &n, &err) < 0) goto fail;
        double dt = now() - t0;
        if (r == 0) first = best = dt;
        if (dt < best) best = dt;
    }
    if (ids_only) {
        printf("[");
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? ", " : "", ids[i]);
        printf("]\n");
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%d\t%s\n", ids[i], tok_id_to_token(tok, ids[i]));
    }
    if (stats) {
        fflush(stdout); /* the ids, then the stats, on a terminal */
        /* A zero interval (empty text) would print inf. */
        double secs = best > 0 ? best : 1e-9;
        fprintf(stderr,
                "encode: %zu bytes, %zu tokens in %.4g ms (best of %ld, first %.4g ms): %.3f MB/s, "
                "%.0f tokens/s\n",
                len, n, best * 1e3, repeat, first * 1e3, (double)len / secs / 1e6,
                (double)n / secs);
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "tachyon: %s\n", err.msg);
    free(ids);
    free(owned);
    tok_destroy(tok);
    mdir_close(dir);
    return rc;
}
