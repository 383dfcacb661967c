/* Replays a fuzz target's checked-in corpus through its entry point,
 * built by the ordinary compiler without libFuzzer (test_fuzz_replay*.c),
 * so CI re-checks every input the fuzzer kept. Run from the repository
 * root (as tests/run.sh does); IFL_FUZZ_CORPUS names another directory. */
#ifndef IFL_TESTS_FUZZ_REPLAY_H
#define IFL_TESTS_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../t.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every file of dir (or $IFL_FUZZ_CORPUS), in name order; fails when
 * fewer than min_inputs ran, so an empty or missing corpus cannot pass. */
static void replay_corpus(const char *dir, size_t min_inputs)
{
    const char *env = getenv("IFL_FUZZ_CORPUS");
    if (env)
        dir = env;
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            names = realloc(names, cap * sizeof *names);
            CHECK(names != NULL);
            if (!names)
                break;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (names)
        qsort(names, n, sizeof *names, replay_by_name);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t ran = 0, bytes = 0;
    static uint8_t buf[1 << 20];
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        CHECK_MSG(f != NULL, "cannot open %s", path);
        if (f) {
            size_t k = fread(buf, 1, sizeof buf, f);
            fclose(f);
            /* an abort here is a finding: the message above it names it */
            LLVMFuzzerTestOneInput(buf, k);
            ran++;
            bytes += k;
        }
        free(names[i]);
    }
    free(names);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "  %zu corpus inputs (%zu bytes) from %s replayed in %.2f s\n", ran, bytes, dir,
            (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    CHECK_MSG(ran >= min_inputs, "only %zu corpus inputs in %s", ran, dir);
}

#endif
