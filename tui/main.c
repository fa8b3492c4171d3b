/* tachyon: one binary for the console, the server, the benchmark and the command-line tools. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "model.h"
#ifdef TACHYON_HAVE_CUDA
#include "cuda_backend.h"
#include "cuda_probe.h"
#endif

#ifndef TACHYON_VERSION
#define TACHYON_VERSION "dev"
#endif

static const char usage[] =
    "usage: tachyon <command> [options]\n"
    "\n"
    "commands:\n"
    "  console    the operator's console: charts, chat, live flags, benchmarks (the default)\n"
    "  serve      OpenAI-compatible HTTP server (tachyon serve --help)\n"
    "  bench      benchmark any OpenAI-compatible server (tachyon bench --help)\n"
    "  chat       line-mode chat with the model (default: the embedded model)\n"
    "  complete   generate a completion of a prompt (tachyon complete --help)\n"
    "  tokenize   encode text with a model's tokenizer\n"
    "  flags      list the engine flags (live, rebuild, reload)\n"
    "  version    print the version and the backends built in\n"
    "\n"
    "Run `tachyon <command> --help` for a command's options.\n";

static int cmd_version(void) {
    printf("tachyon %s\nbackends:", TACHYON_VERSION);
    for (const char *const *n = backend_names(); *n; n++)
        printf(" %s", *n);
    printf("\n");
#ifdef TACHYON_HAVE_CUDA
    char devices[512];
    cuda_probe_devices(devices, sizeof devices);
    printf("cuda: %s\n", devices);
#else
    printf("cuda: not built\n");
#endif
    return 0;
}

int main(int argc, char **argv) {
#ifdef TACHYON_HAVE_CUDA
    backend_register(&cuda_backend_ops);
#endif
    if (argc < 2 ||
        (!strncmp(argv[1], "--", 2) && strcmp(argv[1], "--help") && strcmp(argv[1], "--version")))
        return cmd_console(argc, argv);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "console")) return cmd_console(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "complete")) return cmd_complete(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "flags")) return cmd_flags(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) return cmd_version();
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        fputs(usage, stdout);
        return 0;
    }
    fprintf(stderr, "tachyon: unknown command \"%s\"\n\n%s", cmd, usage);
    return 2;
}
