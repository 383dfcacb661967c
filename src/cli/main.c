/*
 * inflight command line: dispatches to the subcommands.
 *   run       generate from a prompt, streamed to stdout
 *   eval      teacher-forced logits of a whole sequence, to a file
 *   tokenize  stdin -> token ids
 *   info      what a GGUF model holds
 *   lora      LoRA adapter tools (merge)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/syscpu.h"
#include "inflight.h"
#include "kernels/kernels.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "inflight %s: LLM inference on the CPU\n\n"
        "usage: inflight COMMAND [options]\n\n"
        "commands:\n"
        "  run       -m FILE -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
        "            [--seed S] [-t THREADS] [-c CTX] [--ids] [--ignore-eos] [--kv-type T]\n"
        "  eval      -m FILE (-p TEXT | --ids \"1 2 3\") --logits OUT.f32 [-t THREADS] [--kv-type "
        "T]\n"
        "  tokenize  -m FILE [--add-special] [--parse-special]   (reads stdin)\n"
        "  info      -m FILE\n"
        "  bench     -m FILE [--pp N] [--tg N] [-c 1,4,8,16 [-p N] [-n N]] [-r N] [-t N] [--json]\n"
        "            --bandwidth [-t N]   |   --url URL (HTTP load generator)\n"
        "  serve     -m FILE [--host H] [--port N] [--parallel N] [--api-key KEY] ...\n"
        "  lora merge -m FILE --lora ADAPTER[:SCALE] ... -o OUT   (an adapter merged in)\n"
        "  version\n\n"
        "Run 'inflight COMMAND --help' for a command's options.\n",
        ifl_version());
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "inflight: a command is required (run, eval, tokenize, info; "
                        "'inflight help' lists them)\n");
        return CLI_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval"))
        return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "info"))
        return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "lora"))
        return cmd_lora(argc - 1, argv + 1);
    if (!strcmp(cmd, "tp-worker")) /* started by --tp N (orchestrator mode), not listed */
        return cmd_tp_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("inflight %s\n", ifl_version());
        /* the default thread count, and what it was taken from */
        struct ifl_syscpu c;
        ifl_syscpu_read(NULL, &c);
        printf("cpus: %d usable (%d online, %d in the affinity mask, ", c.n_usable, c.n_online,
               c.n_affinity);
        if (c.quota > 0)
            printf("cgroup quota %.2f)\n", c.quota);
        else
            printf("no cgroup quota)\n");
        /* the kernel table this CPU (or IFL_KERNELS) chose, as bench/compare
         * prints it beside its figures */
        const char *env = getenv("IFL_KERNELS");
        printf("kernels: %s (%s)\n", ifl_kernels_best()->name,
               env && *env ? "IFL_KERNELS" : "chosen by cpuid");
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "inflight: unknown command '%s' ('inflight help' lists the commands)\n", cmd);
    return CLI_EXIT_USAGE;
}

int main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);
    /* output lost on the way (a full disk, a closed pipe) is a failure */
    int flushed = fflush(stdout) == 0;
    if (!flushed || ferror(stdout)) {
        fprintf(stderr, "inflight: writing to standard output failed%s%s\n", flushed ? "" : ": ",
                flushed ? "" : strerror(errno));
        return rc ? rc : 1;
    }
    return rc;
}
