/*
 * tools/mkmodel's llama-quantize presets (--type q3_k_m, q3_k_l,
 * iq4_xs_mix; tools/mkmodel_mix.h) against llama.cpp:
 *
 * - types: for every model of tests/data/mixes/models.txt (llama, qwen2,
 *   qwen3 tied, qwen3moe with 8 experts, Mixtral-style llama with 4,
 *   gemma2, gemma3, phi3; shapes chosen so that the shape fallbacks, the
 *   8-expert rules and the first-layers rules all fire), each tensor of
 *   mkmodel's file has the type llama-quantize's Q3_K_M, Q3_K_L and IQ4_XS
 *   gave the F32 file of the same arguments (NAME.types, made by gen.sh
 *   there: llama-quantize is not in CI), and the files hold the same
 *   tensors.
 * - logits: for the models of logits.txt, our forward pass over mkmodel's
 *   mixed file within the tolerance derived as ../shared/models/ref's
 *   README derives it (the Q8_K-activation class, max 0.3 and mean 0.05, or
 *   twice llama.cpp's own distance with an F16 KV cache when larger) of
 *   what llama.cpp computed on the same file, and llama.cpp's greedy id
 *   picked at every step whose margin is clear of twice that distance.
 *
 * mkmodel runs through system(): $BUILD/tools/mkmodel, into a mkdtemp
 * directory removed at the end.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/err.h"
#include "kernels/types.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/model.h"
#include "t.h"

#define DATA "tests/data/mixes"
#define N_PRESETS 3
#define BS 16
#define BLOCKS 8 /* 128 positions */

static const char *const presets[N_PRESETS] = {"q3_k_m", "q3_k_l", "iq4_xs_mix"};
static char g_dir[256], g_mk[512], g_vocab[512];

/* models.txt's arguments for NAME, or NULL. */
static const char *model_args(const char *name, char *buf, size_t cap)
{
    FILE *f = fopen(DATA "/models.txt", "r");
    const char *found = NULL;
    size_t n = strlen(name);
    while (f && !found && fgets(buf, (int)cap, f))
        if (!strncmp(buf, name, n) && buf[n] == ':') {
            buf[strcspn(buf, "\n")] = 0;
            found = buf + n + 1;
        }
    if (f)
        fclose(f);
    return found;
}

/* Writes g_dir/NAME-TYPE.gguf with mkmodel; 0 on success. */
static int make_model(const char *name, const char *type, char *path, size_t cap)
{
    char line[1024], cmd[2048];
    const char *args = model_args(name, line, sizeof line);
    CHECK_MSG(args != NULL, "%s: not in " DATA "/models.txt", name);
    if (!args)
        return -1;
    snprintf(path, cap, "%s/%.100s-%.20s.gguf", g_dir, name, type);
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --vocab '%s' %s --type %s 2>/dev/null", g_mk, path,
             g_vocab, args, type);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

/* ---- the types ---- */

/* Compares the tensor types of mkmodel's file for preset p with column p
 * of NAME.types; returns the number of differences. */
static int check_types(const char *name, int p)
{
    char path[512], tpath[256], line[512];
    if (make_model(name, presets[p], path, sizeof path))
        return 1;
    struct ifl_gguf *g = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_gguf_open(&g, path, err);
    CHECK_MSG(rc == 0, "%s: %s", path, err);
    snprintf(tpath, sizeof tpath, DATA "/%.100s.types", name);
    FILE *f = fopen(tpath, "r");
    CHECK_MSG(f != NULL, "cannot read %s", tpath);
    int n_lines = 0, bad = 0;
    while (!rc && f && fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        char tname[256], col[N_PRESETS][32];
        if (sscanf(line, "%255s %31s %31s %31s", tname, col[0], col[1], col[2]) != 4) {
            CHECK_MSG(0, "%s: bad line '%s'", tpath, line);
            bad++;
            continue;
        }
        n_lines++;
        const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, tname);
        const struct ifl_type_info *ti = t ? ifl_type_info((enum ifl_type)t->type) : NULL;
        const char *ours = !t ? "(missing)" : ti && ti->name ? ti->name : "(unknown)";
        if (strcasecmp(ours, col[p])) {
            CHECK_MSG(0, "%s %s: %s is %s, llama-quantize's %s", name, presets[p], tname, ours,
                      col[p]);
            bad++;
        }
    }
    if (!rc) {
        CHECK_MSG(ifl_gguf_n_tensors(g) == n_lines, "%s %s: %lld tensors, llama-quantize's %d",
                  name, presets[p], (long long)ifl_gguf_n_tensors(g), n_lines);
        bad += ifl_gguf_n_tensors(g) != n_lines;
    }
    fprintf(stderr, "  %-11s %-10s %3d tensors, %d types differ from llama-quantize's\n", name,
            presets[p], n_lines, bad);
    if (f)
        fclose(f);
    ifl_gguf_free(g);
    unlink(path);
    return bad;
}

static void test_types(void)
{
    FILE *mf = fopen(DATA "/models.txt", "r");
    CHECK_MSG(mf != NULL, "cannot read " DATA "/models.txt");
    char line[1024];
    int n_models = 0;
    while (mf && fgets(line, sizeof line, mf)) {
        char *colon = strchr(line, ':');
        if (line[0] == '#' || !colon)
            continue;
        *colon = 0;
        n_models++;
        for (int p = 0; p < N_PRESETS; p++)
            check_types(line, p);
    }
    if (mf)
        fclose(mf);
    CHECK_MSG(n_models >= 8, "only %d models in " DATA "/models.txt", n_models);
}

/* ---- the logits ---- */

struct lref {
    int32_t seq[128];
    int n_prompt, n_gen, n_vocab;
    double margins[64];
    double kv_f16_max, kv_f16_mean;
    float *logits;
};

static int load_lref(struct lref *r, const char *stem)
{
    memset(r, 0, sizeof *r);
    char path[512];
    snprintf(path, sizeof path, DATA "/%.200s.json", stem);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        return -1;
    json_t *p = json_object_get(j, "prompt_ids"), *g = json_object_get(j, "greedy_ids");
    json_t *dv = json_object_get(j, "diff_vs_logits_file");
    r->n_prompt = (int)json_array_size(p);
    r->n_gen = (int)json_array_size(g);
    r->n_vocab = (int)json_integer_value(json_object_get(j, "n_vocab"));
    int ok = r->n_prompt > 0 && r->n_gen > 0 && r->n_prompt + r->n_gen <= 128 && r->n_gen <= 64 &&
             r->n_vocab > 0;
    for (int i = 0; ok && i < r->n_prompt; i++)
        r->seq[i] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
    for (int i = 0; ok && i < r->n_gen; i++) {
        r->seq[r->n_prompt + i] = (int32_t)json_integer_value(json_array_get(g, (size_t)i));
        r->margins[i] =
            json_number_value(json_array_get(json_object_get(j, "greedy_margins"), (size_t)i));
    }
    r->kv_f16_max = json_number_value(json_object_get(dv, "kv_f16_max"));
    r->kv_f16_mean = json_number_value(json_object_get(dv, "kv_f16_mean"));
    json_decref(j);
    if (!ok)
        return -1;
    size_t n = (size_t)(r->n_prompt + r->n_gen) * (size_t)r->n_vocab;
    snprintf(path, sizeof path, DATA "/%.200s.logits.f32", stem);
    FILE *f = fopen(path, "rb");
    r->logits = malloc(n * sizeof(float));
    size_t got = f && r->logits ? fread(r->logits, sizeof(float), n, f) : 0;
    if (f)
        fclose(f);
    return got == n ? 0 : -1;
}

static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* Teacher-forced logits of tok[0..n) as one sequence in one pass. */
static int eval_model(const char *path, const int32_t *tok, int n, float *logits)
{
    struct ifl_model *m = NULL;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_model_load(&m, path, err);
    if (!rc)
        rc = ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F32, BLOCKS, BS, err);
    struct ifl_fwd_config fc = {.max_rows = 128, .max_ctx = 512, .n_threads = 2};
    if (!rc)
        rc = ifl_fwd_create(&f, m, kv, &fc, err);
    int32_t table[BLOCKS], n_blocks = BLOCKS, pos[128], seq[128] = {0};
    uint8_t want[128];
    const int32_t *tptr = table;
    for (int i = 0; i < BLOCKS; i++)
        table[i] = BLOCKS - 1 - i;
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    struct ifl_batch b = {.n_rows = n,
                          .tokens = tok,
                          .pos = pos,
                          .seq = seq,
                          .logits = want,
                          .n_seqs = 1,
                          .block_tables = &tptr,
                          .n_blocks = &n_blocks};
    if (!rc)
        rc = ifl_forward(f, &b, logits, err);
    CHECK_MSG(rc == 0, "%s: %s", path, err);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return rc;
}

static void test_logits(void)
{
    FILE *lf = fopen(DATA "/logits.txt", "r");
    CHECK_MSG(lf != NULL, "cannot read " DATA "/logits.txt");
    char line[256];
    int n_checked = 0;
    while (lf && fgets(line, sizeof line, lf)) {
        char name[64], type[32], stem[128], path[512];
        if (line[0] == '#' || sscanf(line, "%63s %31s", name, type) != 2)
            continue;
        snprintf(stem, sizeof stem, "%s-%s", name, type);
        struct lref r;
        int lrc = load_lref(&r, stem);
        CHECK_MSG(lrc == 0, "cannot read " DATA "/%s.json or its logits", stem);
        if (lrc || make_model(name, type, path, sizeof path)) {
            free(r.logits);
            continue;
        }
        const int n = r.n_prompt + r.n_gen;
        const size_t nl = (size_t)n * (size_t)r.n_vocab;
        float *ours = malloc(nl * sizeof(float));
        if (ours && eval_model(path, r.seq, n, ours) == 0) {
            n_checked++;
            double tmax = 2 * r.kv_f16_max > 0.3 ? 2 * r.kv_f16_max : 0.3;
            double tmean = 2 * r.kv_f16_mean > 0.05 ? 2 * r.kv_f16_mean : 0.05;
            double mx = 0, sum = 0;
            for (size_t i = 0; i < nl; i++) {
                double d = fabs((double)ours[i] - (double)r.logits[i]);
                mx = d > mx || isnan(d) ? (isnan(d) ? INFINITY : d) : mx;
                sum += d;
            }
            double mean = sum / (double)nl;
            /* greedy: at every step whose llama.cpp margin is clear of
             * twice our distance, our teacher-forced row picks its token */
            int clear = 0, agree = 0;
            for (int k = 0; k < r.n_gen; k++) {
                if (r.margins[k] < 2 * mx)
                    continue;
                clear++;
                agree += argmax(ours + (size_t)(r.n_prompt - 1 + k) * r.n_vocab, r.n_vocab) ==
                         r.seq[r.n_prompt + k];
            }
            fprintf(stderr,
                    "  %-22s vs llama.cpp max %.2e mean %.2e (tolerance %.2g / %.2g); greedy "
                    "ids equal at %d of %d steps clear of the noise\n",
                    stem, mx, mean, tmax, tmean, agree, clear);
            CHECK_MSG(mx <= tmax && mean <= tmean, "%s: logits differ from llama.cpp by %g / %g",
                      stem, mx, mean);
            CHECK_MSG(agree == clear && clear >= r.n_gen / 2,
                      "%s: greedy ids equal at %d of %d clear steps", stem, agree, clear);
        }
        free(ours);
        free(r.logits);
        unlink(path);
    }
    if (lf)
        fclose(lf);
    CHECK_MSG(n_checked >= 4, "only %d mixed models checked against llama.cpp", n_checked);
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_vocab, sizeof g_vocab, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_mix_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_types);
    T_RUN(test_logits);
    rmdir(g_dir);
    return t_done();
}
