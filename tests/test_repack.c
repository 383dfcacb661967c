/*
 * Repacking at load (src/model/repack.c): the repacked matrices are the
 * same bytes whichever path made them (one thread or two, fresh, written
 * to a repack cache, mapped from it), a corrupt, truncated, stale or
 * foreign cache file is rebuilt with a notice saying why, an unwritable
 * cache directory falls back to memory with a notice, and the progress
 * callback counts up to the weights' bytes and ends with "ready".
 *
 * Models come from $BUILD/tools/mkmodel (through system()) in a mkdtemp
 * directory removed at the end: llama Q8_0, Q4_K_M and MXFP4 with FFN
 * matrices of several 1 MiB chunks, so chunking and folding are
 * exercised. And the newer types (Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, MXFP4)
 * run under each kernel table through IFL_KERNELS (this program re-run as
 * a child): repacked where the table's x16 kernel pays, close to the
 * scalar table.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "t.h"

static char g_dir[256], g_cache[300], g_mk[512], g_vocab[512];

/* What the progress callback saw. */
struct seen {
    int calls, ready_calls, backwards;
    int64_t last_done, total;
    char stage[64];
    char notice[1024];
    int n_notices;
};

static void on_progress(void *user, const struct ifl_load_progress *p)
{
    struct seen *s = user;
    if (s->calls && p->done < s->last_done && s->stage[0] && p->stage &&
        !strcmp(s->stage, p->stage))
        s->backwards++;
    s->calls++;
    s->last_done = p->done;
    s->total = p->total;
    snprintf(s->stage, sizeof s->stage, "%s", p->stage ? p->stage : "");
    if (p->stage && !strcmp(p->stage, "ready"))
        s->ready_calls++;
    if (p->notice) {
        snprintf(s->notice, sizeof s->notice, "%s", p->notice);
        s->n_notices++;
    }
}

static struct ifl_model *load(const char *path, const char *cache, int nth, struct seen *s)
{
    memset(s, 0, sizeof(*s));
    struct ifl_model_load_opts o = {
        .n_threads = nth, .repack_cache_dir = cache, .progress = on_progress, .progress_user = s};
    struct ifl_model *m = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_model_load_with(&m, path, &o, err);
    CHECK_MSG(rc == 0, "load %s: %s", path, err);
    if (m) {
        CHECK_EQ(s->ready_calls, 1);
        CHECK_EQ(s->backwards, 0);
        CHECK(!strcmp(s->stage, "ready"));
        CHECK_EQ(s->last_done, (int64_t)m->weight_bytes);
        CHECK_EQ(s->total, (int64_t)m->weight_bytes);
    }
    return m;
}

static int n_mats(struct ifl_model *m, struct ifl_mat **out)
{
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct ifl_layer_weights *w = &m->layers[il];
        struct ifl_mat *lm[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < 7; i++)
            out[n++] = lm[i];
    }
    out[n++] = &m->output;
    out[n++] = &m->tok_embd;
    return n;
}

/* Every matrix: the same layout flag and the same bytes. Returns how many
 * are repacked. */
static int same_weights(struct ifl_model *a, struct ifl_model *b, const char *what)
{
    struct ifl_mat *ma[64], *mb[64];
    int n = n_mats(a, ma), x16 = 0;
    CHECK_EQ(n, n_mats(b, mb));
    for (int i = 0; i < n; i++) {
        CHECK_MSG(ma[i]->x16 == mb[i]->x16, "%s: matrix %d: x16 %d vs %d", what, i, ma[i]->x16,
                  mb[i]->x16);
        size_t bytes = (size_t)ma[i]->n_out * ma[i]->row_bytes;
        CHECK_MSG(memcmp(ma[i]->data, mb[i]->data, bytes) == 0, "%s: matrix %d differs", what, i);
        x16 += ma[i]->x16;
    }
    return x16;
}

static char *cache_file(void)
{
    static char path[600];
    path[0] = 0;
    DIR *d = opendir(g_cache);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".x16")) {
            snprintf(path, sizeof path, "%s/%s", g_cache, e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    CHECK_MSG(n == 1, "%d cache files in %s", n, g_cache);
    return path;
}

/* The cache file of bound.gguf in g_cache, or "" */
static const char *cache_path_of_new(void)
{
    static char path[600];
    path[0] = 0;
    DIR *d = opendir(g_cache);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "bound.gguf.", 11) && strstr(e->d_name, ".x16"))
            snprintf(path, sizeof path, "%s/%s", g_cache, e->d_name);
    if (d)
        closedir(d);
    return path;
}

static void patch(const char *path, long off, const char *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, bytes, n, off) == (ssize_t)n);
    close(fd);
}

static int has(const char *hay, const char *needle)
{
    int ok = strstr(hay, needle) != NULL;
    if (!ok)
        fprintf(stderr, "  '%s' not in '%s'\n", needle, hay);
    return ok;
}

/* The same logits from both models (one forward of 4 tokens). */
static void same_logits(struct ifl_model *a, struct ifl_model *b)
{
    struct ifl_model *ms[2] = {a, b};
    float *lg[2] = {0};
    int32_t nv = a->hp.n_vocab;
    for (int k = 0; k < 2; k++) {
        struct ifl_kv_store *kv = NULL;
        struct ifl_fwd *f = NULL;
        char err[IFL_ERR_LEN] = "";
        CHECK(ifl_kv_store_create(&kv, &ms[k]->hp, IFL_TYPE_F16, 1, 16, err) == 0);
        struct ifl_fwd_config fc = {.max_rows = 8, .max_ctx = 16, .n_threads = 2};
        CHECK(ifl_fwd_create(&f, ms[k], kv, &fc, err) == 0);
        int32_t tok[4] = {1, 7, 42, 300}, pos[4] = {0, 1, 2, 3}, seq[4] = {0}, table[1] = {0},
                nb = 1;
        uint8_t want[4] = {0, 0, 0, 1};
        const int32_t *tables[1] = {table};
        struct ifl_batch bt = {.n_rows = 4,
                               .tokens = tok,
                               .pos = pos,
                               .seq = seq,
                               .logits = want,
                               .n_seqs = 1,
                               .block_tables = tables,
                               .n_blocks = &nb};
        lg[k] = calloc((size_t)nv, sizeof(float));
        CHECK(ifl_forward(f, &bt, lg[k], err) == 0);
        ifl_fwd_free(f);
        ifl_kv_store_free(kv);
    }
    int ndiff = 0;
    for (int32_t i = 0; i < nv; i++)
        if (memcmp(&lg[0][i], &lg[1][i], sizeof(float)) && ndiff++ < 3)
            fprintf(stderr, "  logit %d: %.9g vs %.9g\n", i, lg[0][i], lg[1][i]);
    CHECK_EQ(ndiff, 0);
    free(lg[0]);
    free(lg[1]);
}

static void check_model(const char *type)
{
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/llama-%s.gguf", g_dir, type);
    snprintf(cmd, sizeof cmd,
             "'%s' -o '%s' --vocab '%s' --arch llama --type %s --n-embd 512 --n-layer 2 "
             "--n-head 8 --n-head-kv 4 --n-ff 4096 --seed 5 >/dev/null 2>&1",
             g_mk, path, g_vocab, type);
    int sys = system(cmd);
    CHECK_MSG(sys == 0, "mkmodel failed (%d): %s", sys, cmd);
    if (sys)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_cache);
    CHECK(system(cmd) == 0);
    CHECK(mkdir(g_cache, 0755) == 0);

    struct seen s;
    struct ifl_model *fresh1 = load(path, NULL, 1, &s), *fresh2 = load(path, NULL, 2, &s);
    CHECK_EQ(s.n_notices, 0);
    if (!fresh1 || !fresh2)
        return;
    int x16 = same_weights(fresh1, fresh2, "1 vs 2 threads");
    int avx512 = !strncmp(ifl_kernels_best()->name, "avx512", 6);
    if (avx512)
        CHECK_MSG(x16 >= 10, "%s: only %d matrices repacked", type, x16);
    else
        fprintf(stderr, "  note: kernels %s repack %d matrices of %s\n", ifl_kernels_best()->name,
                x16, type);

    /* built, then mapped: no notice either time */
    struct ifl_model *built = load(path, g_cache, 2, &s);
    CHECK_EQ(s.n_notices, 0);
    struct ifl_model *mapped = load(path, g_cache, 2, &s);
    CHECK_EQ(s.n_notices, 0);
    if (!built || !mapped)
        return;
    same_weights(fresh1, built, "fresh vs cache built");
    same_weights(fresh1, mapped, "fresh vs cache mapped");
    same_logits(fresh1, mapped);
    if (!x16) {
        ifl_model_free(built);
        ifl_model_free(mapped);
        ifl_model_free(fresh1);
        ifl_model_free(fresh2);
        return;
    }
    /* the mapped model reads the cache file, not memory of its own */
    const char *cf = cache_file();
    struct stat st;
    CHECK(stat(cf, &st) == 0);
    CHECK_EQ((size_t)st.st_size, mapped->x16_bytes);

    /* what a crashed build left ("<cache>.tmp.<pid>", its process gone)
     * is removed by the next build; a live writer's file is not */
    char dead[700], live[700];
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0); /* a pid that no process has now */
    snprintf(dead, sizeof dead, "%s.tmp.%ld", cf, (long)child);
    snprintf(live, sizeof live, "%s.tmp.%ld", cf, (long)getppid());
    FILE *f1 = fopen(dead, "w"), *f2 = fopen(live, "w");
    CHECK(f1 && f2);
    if (f1)
        fclose(f1);
    if (f2)
        fclose(f2);

    /* one byte of the data flipped: corrupt, rebuilt, equal, then clean */
    long off = (long)st.st_size - 1000;
    char b;
    int fd = open(cf, O_RDONLY);
    CHECK(pread(fd, &b, 1, off) == 1);
    close(fd);
    b ^= 0x10;
    patch(cf, off, &b, 1);
    struct ifl_model *m = load(path, g_cache, 2, &s);
    CHECK(has(s.notice, "is corrupt: matrix"));
    CHECK(has(s.notice, "fails its checksum; rebuilding it"));
    if (m)
        same_weights(fresh1, m, "rebuilt after a flipped byte");
    ifl_model_free(m);
    m = load(path, g_cache, 1, &s);
    CHECK_EQ(s.n_notices, 0);
    ifl_model_free(m);
    CHECK_MSG(access(dead, F_OK) != 0, "a dead writer's %s is still there", dead);
    CHECK_MSG(access(live, F_OK) == 0, "a live writer's %s was removed", live);
    unlink(live);

    /* a damaged header */
    patch(cf, 0, "NOTACACHE", 8);
    m = load(path, g_cache, 2, &s);
    CHECK(has(s.notice, "not an inflight repack cache"));
    if (m)
        same_weights(fresh1, m, "rebuilt after a bad magic");
    ifl_model_free(m);
    patch(cf, 200, "\xff\xff", 2); /* within the matrix table: header checksum */
    m = load(path, g_cache, 2, &s);
    CHECK(has(s.notice, "header fails its checksum"));
    ifl_model_free(m);

    /* truncated */
    CHECK(truncate(cf, st.st_size - 4096) == 0);
    m = load(path, g_cache, 2, &s);
    CHECK(has(s.notice, "truncated"));
    if (m)
        same_weights(fresh1, m, "rebuilt after truncation");
    ifl_model_free(m);

    /* the model file changed (its modification time): stale */
    struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0}, {.tv_sec = 1000000000}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
    m = load(path, g_cache, 2, &s);
    CHECK(has(s.notice, "is stale: it was made"));
    CHECK(has(s.notice, "another version of the model file"));
    if (m)
        same_weights(fresh1, m, "rebuilt when stale");
    ifl_model_free(m);
    m = load(path, g_cache, 2, &s);
    CHECK_EQ(s.n_notices, 0);
    ifl_model_free(m);

    /* a directory that cannot hold the cache: in memory, with a notice */
    char nodir[400];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir", g_dir);
    m = load(path, nodir, 2, &s);
    CHECK(has(s.notice, "cannot create"));
    CHECK(has(s.notice, "repacking in memory only"));
    if (m)
        same_weights(fresh1, m, "in memory after a failed create");
    ifl_model_free(m);

    ifl_model_free(built);
    ifl_model_free(mapped);
    ifl_model_free(fresh1);
    ifl_model_free(fresh2);
}

static void test_q8_0(void)
{
    check_model("q8_0");
}
static void test_q4_k_m(void)
{
    check_model("q4_k_m");
}
/* MXFP4: one scale byte a block, the x16 layout's 1-byte field */
static void test_mxfp4(void)
{
    check_model("mxfp4");
}

/* IFL_REPACK=0: nothing repacked, one "ready" call with everything done. */
static void test_repack_off(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/llama-q8_0.gguf", g_dir);
    setenv("IFL_REPACK", "0", 1);
    struct seen s;
    struct ifl_model *m = load(path, g_cache, 2, &s);
    unsetenv("IFL_REPACK");
    CHECK_EQ(s.calls, 1);
    CHECK(m && !m->x16);
    ifl_model_free(m);
}

/* ---- the newer types under each kernel table (IFL_KERNELS) ---- */

#define NT_TOK 24

/* The child's half (test_repack --child MODEL OUT, IFL_KERNELS set by the
 * parent): loads MODEL with this table, and writes to OUT how many of its
 * matrices in the model's type were repacked, whether the 24-token prompt's logits came out
 * the same bits whole and in chunks of 5, and the whole pass's logits. */
static int child(const char *path, const char *out)
{
    struct seen s;
    struct ifl_model *m = load(path, NULL, 2, &s);
    if (!m)
        return 1;
    struct ifl_mat *ms[64];
    int n = n_mats(m, ms), x16 = 0, nv = m->hp.n_vocab, same = 1;
    for (int i = 0; i < n; i++) /* of the model's type (output.weight is Q6_K) */
        x16 += ms[i]->x16 && ms[i]->type == m->layers[0].wq.type;
    float *lg[2] = {calloc((size_t)nv * NT_TOK, sizeof(float)),
                    calloc((size_t)nv * NT_TOK, sizeof(float))};
    int32_t tok[NT_TOK], pos[NT_TOK], seq[NT_TOK] = {0}, table[2] = {1, 0}, nb = 2;
    uint8_t want[NT_TOK];
    const int32_t *tables[1] = {table};
    for (int i = 0; i < NT_TOK; i++) {
        tok[i] = i ? 3 + (i * 37) % 500 : 1;
        pos[i] = i;
        want[i] = 1;
    }
    for (int k = 0; k < 2 && lg[0] && lg[1]; k++) {
        struct ifl_kv_store *kv = NULL;
        struct ifl_fwd *f = NULL;
        char err[IFL_ERR_LEN] = "";
        struct ifl_fwd_config fc = {.max_rows = NT_TOK, .max_ctx = 32, .n_threads = 2};
        if (ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F32, 2, 16, err) ||
            ifl_fwd_create(&f, m, kv, &fc, err))
            return 1;
        for (int r0 = 0, step = k ? 5 : NT_TOK; r0 < NT_TOK; r0 += step) {
            int nr = NT_TOK - r0 < step ? NT_TOK - r0 : step;
            struct ifl_batch bt = {.n_rows = nr,
                                   .tokens = tok + r0,
                                   .pos = pos + r0,
                                   .seq = seq,
                                   .logits = want,
                                   .n_seqs = 1,
                                   .block_tables = tables,
                                   .n_blocks = &nb};
            if (ifl_forward(f, &bt, lg[k] + (size_t)r0 * nv, err))
                return 1;
        }
        ifl_fwd_free(f);
        ifl_kv_store_free(kv);
    }
    same = !memcmp(lg[0], lg[1], sizeof(float) * (size_t)nv * NT_TOK);
    FILE *fo = fopen(out, "wb");
    int ok = fo && fwrite(&x16, sizeof x16, 1, fo) == 1 && fwrite(&same, sizeof same, 1, fo) == 1 &&
             fwrite(&nv, sizeof nv, 1, fo) == 1 &&
             fwrite(lg[0], sizeof(float), (size_t)nv * NT_TOK, fo) == (size_t)nv * NT_TOK;
    if (fo)
        fclose(fo);
    free(lg[0]);
    free(lg[1]);
    ifl_model_free(m);
    return ok ? 0 : 1;
}

/* Runs the child under table `kt`; fills *x16, *same and logits (malloc'd). */
static int run_child(const char *kt, const char *path, int *x16, int *same, int *nv, float **lg)
{
    char out[400], cmd[1400];
    snprintf(out, sizeof out, "%s/child-%s.bin", g_dir, kt);
    snprintf(cmd, sizeof cmd, "IFL_KERNELS=%s /proc/%ld/exe --child '%s' '%s'", kt, (long)getpid(),
             path, out);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "child failed (%d): %s", rc, cmd);
    FILE *f = rc ? NULL : fopen(out, "rb");
    int ok = f && fread(x16, sizeof *x16, 1, f) == 1 && fread(same, sizeof *same, 1, f) == 1 &&
             fread(nv, sizeof *nv, 1, f) == 1 && *nv > 0 && *nv < (1 << 20);
    *lg = ok ? malloc(sizeof(float) * (size_t)*nv * NT_TOK) : NULL;
    ok = ok && *lg && fread(*lg, sizeof(float), (size_t)*nv * NT_TOK, f) == (size_t)*nv * NT_TOK;
    if (f)
        fclose(f);
    unlink(out);
    return ok ? 0 : -1;
}

/* Each newer type under the scalar table (no repacking: the reference),
 * AVX2 and AVX-512 (when this CPU has them): the tables whose x16 kernel
 * pays repack the model's matrices, and the others do not; their logits
 * are the same bits whole and chunked, and within max 0.05, mean 1e-3 of
 * the scalar table's. Not closer: the tables' sums differ by roundings
 * (test_kernels holds each kernel to ref), and one such rounding can move
 * an activation across a quantisation step, which moves the logits by
 * about 1e-2 (Q3_K on AVX-512, 24 positions: 1.5e-2 at 3 of them, 1e-7
 * elsewhere). */
static void test_newer_types(void)
{
    static const struct {
        const char *type;
        int avx2; /* AVX2 repacks it */
    } types[] = {{"q5_0", 1}, {"q5_1", 1}, {"iq4_nl", 1}, {"iq4_xs", 1},
                 {"q2_k", 1}, {"q3_k", 1}, {"mxfp4", 1}};
    static const char *const tables[] = {"scalar", "avx2", "avx512"};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        char path[512], cmd[2048];
        snprintf(path, sizeof path, "%s/llama-%s.gguf", g_dir, types[ti].type);
        snprintf(cmd, sizeof cmd,
                 "'%s' -o '%s' --vocab '%s' --arch llama --type %s --n-embd 256 --n-layer 2 "
                 "--n-head 8 --n-head-kv 4 --n-ff 1024 --seed 6 >/dev/null 2>&1",
                 g_mk, path, g_vocab, types[ti].type);
        int sys = system(cmd);
        CHECK_MSG(sys == 0, "mkmodel failed (%d): %s", sys, cmd);
        if (sys)
            continue;
        float *ref = NULL;
        int ref_nv = 0;
        for (int k = 0; k < 3; k++) {
            if (!ifl_kernels_by_name(tables[k]))
                continue;
            int x16 = -1, same = 0, nv = 0;
            float *lg = NULL;
            if (run_child(tables[k], path, &x16, &same, &nv, &lg)) {
                free(lg);
                continue;
            }
            int want_x16 = k == 2 || (k == 1 && types[ti].avx2);
            double mx = 0, sum = 0;
            if (k == 0) {
                ref = lg;
                ref_nv = nv;
                lg = NULL;
            } else if (ref && nv == ref_nv) {
                for (size_t i = 0; i < (size_t)nv * NT_TOK; i++) {
                    double d = fabs((double)lg[i] - (double)ref[i]);
                    mx = d > mx || d != d ? d : mx;
                    sum += d;
                }
                CHECK_MSG(mx <= 0.05 && sum / ((double)nv * NT_TOK) <= 1e-3,
                          "%s under %s: logits max %g mean %g from the scalar table's",
                          types[ti].type, tables[k], mx, sum / ((double)nv * NT_TOK));
            }
            fprintf(stderr,
                    "  %-7s %-7s %2d matrices repacked, whole = chunked: %s, vs scalar max "
                    "%.2e mean %.2e\n",
                    types[ti].type, tables[k], x16, same ? "bitwise" : "DIFFER", mx,
                    sum / ((double)nv * NT_TOK));
            CHECK_MSG(want_x16 ? x16 > 0 : x16 == 0, "%s under %s: %d matrices repacked",
                      types[ti].type, tables[k], x16);
            CHECK_MSG(same, "%s under %s: whole and chunked differ", types[ti].type, tables[k]);
            free(lg);
        }
        free(ref);
        unlink(path);
    }
}

/* A file of n bytes at dir/name, last modified age_s seconds ago. */
static void fake_file(const char *name, long n, long age_s)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", g_cache, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, n) == 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    CHECK(futimens(fd, t) == 0);
    close(fd);
}

static int exists(const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", g_cache, name);
    return access(p, F_OK) == 0;
}

/* The cache directory's bound: a start that writes a cache file removes
 * the least recently used other cache files until the rest fits, keeps
 * its own file and every file not named as a cache file, and says so; a
 * start that maps its file marks it used; -1 is no bound. */
static void test_cache_bound(void)
{
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/bound.gguf", g_dir);
    snprintf(cmd, sizeof cmd,
             "'%s' -o '%s' --vocab '%s' --arch llama --type q8_0 --n-embd 256 --n-layer 1 "
             "--n-head 4 --n-head-kv 4 --n-ff 1024 --seed 9 >/dev/null 2>&1",
             g_mk, path, g_vocab);
    int sys = system(cmd);
    CHECK_MSG(sys == 0, "mkmodel failed (%d): %s", sys, cmd);
    if (sys)
        return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_cache);
    CHECK(system(cmd) == 0);
    CHECK(mkdir(g_cache, 0755) == 0);
    const long MiB = 1 << 20;
    fake_file("old.gguf.0123456789abcdef.x16", MiB, 3 * 86400);
    fake_file("mid.gguf.fedcba9876543210.x16", MiB, 86400);
    fake_file("notes.txt", 8 * MiB, 5 * 86400);
    fake_file("other.x16", MiB, 5 * 86400);
    struct seen s;
    struct ifl_model_load_opts o = {
        .n_threads = 2, .repack_cache_dir = g_cache, .progress = on_progress, .progress_user = &s};
    struct ifl_model *m = NULL;
    char err[IFL_ERR_LEN] = "";
    struct stat st;
    /* first a size: the model's own cache file, written with no bound */
    o.repack_cache_max = -1;
    memset(&s, 0, sizeof s);
    CHECK_MSG(ifl_model_load_with(&m, path, &o, err) == 0, "%s", err);
    ifl_model_free(m);
    m = NULL;
    char own[700];
    snprintf(own, sizeof own, "%s", cache_path_of_new());
    CHECK(own[0] && stat(own, &st) == 0);
    const long own_bytes = (long)st.st_size;
    CHECK(exists("old.gguf.0123456789abcdef.x16") && exists("mid.gguf.fedcba9876543210.x16"));
    CHECK_EQ(s.n_notices, 0);
    /* room for the new file and one more: the older one goes */
    unlink(own);
    o.repack_cache_max = own_bytes + MiB + MiB / 2;
    memset(&s, 0, sizeof s);
    CHECK_MSG(ifl_model_load_with(&m, path, &o, err) == 0, "%s", err);
    ifl_model_free(m);
    m = NULL;
    CHECK(access(own, F_OK) == 0);
    CHECK(!exists("old.gguf.0123456789abcdef.x16"));
    CHECK(exists("mid.gguf.fedcba9876543210.x16"));
    CHECK(exists("notes.txt") && exists("other.x16"));
    CHECK_MSG(has(s.notice, "removed 1 least recently used file") && has(s.notice, "1.0 MiB"),
              "notice: %s", s.notice);
    /* a warm start maps its file and marks it used: nothing removed */
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    CHECK(utimensat(AT_FDCWD, own, old, 0) == 0);
    o.repack_cache_max = 1;
    memset(&s, 0, sizeof s);
    CHECK_MSG(ifl_model_load_with(&m, path, &o, err) == 0, "%s", err);
    ifl_model_free(m);
    m = NULL;
    CHECK(stat(own, &st) == 0 && st.st_mtim.tv_sec > 1000000000);
    CHECK(exists("mid.gguf.fedcba9876543210.x16"));
    CHECK_EQ(s.n_notices, 0);
    /* a bound under the new file itself: it stays, every other cache file goes */
    unlink(own);
    memset(&s, 0, sizeof s);
    CHECK_MSG(ifl_model_load_with(&m, path, &o, err) == 0, "%s", err);
    ifl_model_free(m);
    CHECK(access(own, F_OK) == 0);
    CHECK(!exists("mid.gguf.fedcba9876543210.x16"));
    CHECK(exists("notes.txt") && exists("other.x16"));
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--child"))
        return child(argv[2], argv[3]);
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_vocab, sizeof g_vocab, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_repack_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_dir);
    T_RUN(test_q8_0);
    T_RUN(test_q4_k_m);
    T_RUN(test_mxfp4);
    T_RUN(test_repack_off);
    T_RUN(test_newer_types);
    T_RUN(test_cache_bound);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done();
}
