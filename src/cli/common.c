/* Argument parsing helpers and the one-sequence session of the CLI. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/err.h"
#include "core/sysmem.h"
#include "core/timeutil.h"
#include "runtime/decoding.h"

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inflight %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_f64(const char *s, double lo, double hi, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_ids(const char *s, int32_t **ids, int64_t *n)
{
    size_t cap = 16, cnt = 0;
    int32_t *a = malloc(cap * sizeof(int32_t));
    if (!a)
        return -1;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && *end != ' ' && *end != ',' && *end != '\n' && *end != '\t' && *end != '\r')) {
            free(a);
            return -1;
        }
        if (cnt == cap) {
            int32_t *b = realloc(a, 2 * cap * sizeof(int32_t));
            if (!b) {
                free(a);
                return -1;
            }
            a = b;
            cap *= 2;
        }
        a[cnt++] = (int32_t)v;
        p = end;
    }
    *ids = a;
    *n = (int64_t)cnt;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_percentile(double *v, int64_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int64_t i = (int64_t)ceil(p * (double)n) - 1;
    return v[i < 0 ? 0 : (i >= n ? n - 1 : i)];
}

int cli_parse_int_list(const char *s, int64_t lo, int64_t hi, int *out, int max)
{
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf)
        return -1;
    int n = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int64_t v;
        if (n == max || cli_parse_i64(t, lo, hi, &v))
            return -1;
        out[n++] = (int)v;
    }
    return n ? n : -1;
}

int cli_parse_kv_type(const char *s)
{
    if (!strcmp(s, "f16"))
        return IFL_KV_F16;
    if (!strcmp(s, "f32"))
        return IFL_KV_F32;
    if (!strcmp(s, "q8_0"))
        return IFL_KV_Q8_0;
    return -1;
}

int cli_parse_vision_precision(const char *s)
{
    if (!strcmp(s, "f32"))
        return IFL_VISION_PREC_F32;
    if (!strcmp(s, "bf16"))
        return IFL_VISION_PREC_BF16;
    return -1;
}

int cli_parse_cache_max(const char *s, int64_t *out)
{
    if (!strcmp(s, "off")) {
        *out = -1;
        return 0;
    }
    int64_t bytes = 0;
    double share = 0;
    if (ifl_sysmem_parse_amount(s, &bytes, &share) || share > 0 || bytes <= 0)
        return -1;
    *out = bytes;
    return 0;
}

enum ifl_type cli_kv_store_type(int kv_type)
{
    return kv_type == IFL_KV_F32    ? IFL_TYPE_F32
           : kv_type == IFL_KV_Q8_0 ? IFL_TYPE_Q8_0
                                    : IFL_TYPE_F16;
}

int cli_check_cache_dir(const char *cmd, const char *path)
{
    struct stat st;
    if (!strcmp(path, "off"))
        return 0;
    if (!*path)
        return cli_usage_error(cmd, "--repack-cache wants a directory, not ''");
    if (stat(path, &st) != 0)
        return cli_usage_error(cmd, "--repack-cache '%s': %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return cli_usage_error(cmd, "--repack-cache '%s' is not a directory", path);
    if (access(path, W_OK | X_OK) != 0)
        return cli_usage_error(cmd, "--repack-cache '%s' is not writable: %s", path,
                               strerror(errno));
    return 0;
}

/* mkdir -p for the default cache directory (owner only: other users have
 * no business mapping our files) */
static int make_dirs(char *path)
{
    for (char *q = path + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = 0;
        int rc = mkdir(path, 0700);
        *q = '/';
        if (rc && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0700) && errno != EEXIST ? -1 : 0;
}

const char *cli_repack_cache(const char *flag, const char *model_path, char *buf, size_t cap,
                             int *is_default)
{
    *is_default = 0;
    if (flag)
        return strcmp(flag, "off") ? flag : NULL;
    struct stat st;
    if (!model_path || stat(model_path, &st) || (int64_t)st.st_size < CLI_CACHE_MIN_BYTES)
        return NULL;
    const char *env = getenv("INFLIGHT_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int n;
    if (env && *env)
        n = snprintf(buf, cap, "%s", env);
    else if (xdg && *xdg == '/')
        n = snprintf(buf, cap, "%s/inflight", xdg);
    else if (home && *home == '/')
        n = snprintf(buf, cap, "%s/.cache/inflight", home);
    else
        return NULL;
    if (n <= 0 || (size_t)n >= cap || make_dirs(buf) || access(buf, W_OK | X_OK))
        return NULL;
    *is_default = 1;
    return buf;
}

void cli_cache_note(const struct cli_progress *p, const char *dir, int is_default)
{
    if (is_default && p->wrote_cache)
        fprintf(stderr,
                "inflight %s: saved the weights repacked for this CPU (%.0f MiB) in %s: later "
                "starts map them (--repack-cache off: keep them in memory only)\n",
                p->cmd, (double)p->total / 1048576.0, dir);
}

void cli_progress_init(struct cli_progress *p, const char *cmd, double show_after_s)
{
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    p->show_after_s = show_after_s;
    p->tty = isatty(STDERR_FILENO);
    p->t0_us = ifl_now_us();
    p->first_done = -1;
}

void cli_progress_fn(void *user, const struct ifl_load_progress *lp)
{
    struct cli_progress *p = user;
    if (lp->stage && !strcmp(lp->stage, "repacking into the cache"))
        p->wrote_cache = 1;
    p->total = lp->total;
    int64_t now = ifl_now_us();
    double el = (double)(now - p->t0_us) / 1e6, mib = 1024.0 * 1024.0;
    if (p->first_done < 0)
        p->first_done = lp->done;
    if (lp->notice) {
        p->wrote_cache = 0; /* after the cache was written: it could not be kept */
        fprintf(stderr, "%sinflight %s: %s\n", p->drawn ? "\n" : "", p->cmd, lp->notice);
        p->drawn = 0;
    }
    int ready = lp->done >= lp->total && lp->stage && !strcmp(lp->stage, "ready");
    if (el < p->show_after_s && !p->drawn)
        return;
    double rate = el > 0 ? (double)(lp->done - p->first_done) / mib / el : 0;
    double pct = lp->total > 0 ? 100.0 * (double)lp->done / (double)lp->total : 100.0;
    if (ready) {
        fprintf(stderr, "%sinflight %s: loaded %.0f MiB of weights in %.2f s (%.0f MiB/s)\n",
                p->drawn ? "\r\033[K" : "", p->cmd, (double)lp->total / mib, el, rate);
        p->drawn = 0;
        return;
    }
    if (!p->tty || now - p->t_last_us < 100000)
        return;
    p->t_last_us = now;
    fprintf(stderr, "\r\033[Kinflight %s: loading %.0f / %.0f MiB (%.0f %%), %.0f MiB/s, %s",
            p->cmd, (double)lp->done / mib, (double)lp->total / mib, pct, rate,
            lp->stage ? lp->stage : "");
    p->drawn = 1;
}

int cli_session_open(struct cli_session *s, const struct cli_session_opts *o, const char *cmd)
{
    memset(s, 0, sizeof(*s));
    char err[IFL_ERR_LEN] = "";
    struct cli_progress pr;
    cli_progress_init(&pr, cmd, 1.0);
    char cache_buf[4096];
    int cache_default;
    const char *cache = cli_repack_cache(o->repack_cache_dir, o->model_path, cache_buf,
                                         sizeof cache_buf, &cache_default);
    struct ifl_model_load_opts lo = {.n_threads = o->n_threads,
                                     .repack_cache_dir = cache,
                                     .repack_cache_max = o->repack_cache_max,
                                     .progress = cli_progress_fn,
                                     .progress_user = &pr};
    int rc = ifl_model_load_with(&s->model, o->model_path, &lo, err);
    if (rc) {
        fprintf(stderr, "inflight %s: %s\n", cmd, err);
        return CLI_EXIT_USAGE;
    }
    cli_cache_note(&pr, cache, cache_default);
    rc = ifl_vocab_load(&s->vocab, s->model->gguf, err);
    if (rc) {
        fprintf(stderr, "inflight %s: %s\n", cmd, err);
        cli_session_close(s);
        return CLI_EXIT_USAGE;
    }
    int32_t n_ctx = o->n_ctx;
    if (n_ctx <= 0)
        n_ctx = s->model->hp.n_ctx_train < 4096 ? s->model->hp.n_ctx_train : 4096;
    const int32_t bs = 16;
    s->n_ctx = n_ctx;
    s->n_blocks = (n_ctx + bs - 1) / bs;
    s->max_rows = o->max_rows > 0 ? o->max_rows : 512;
    rc = ifl_kv_store_create(&s->kv, &s->model->hp, o->kv_type, s->n_blocks, bs, err);
    struct ifl_fwd_config fc = {
        .max_rows = s->max_rows, .max_ctx = n_ctx, .n_threads = o->n_threads};
    if (!rc)
        rc = ifl_fwd_create(&s->fwd, s->model, s->kv, &fc, err);
    s->table = malloc(sizeof(int32_t) * (size_t)s->n_blocks);
    s->rows = malloc(sizeof(int32_t) * 3 * (size_t)s->max_rows);
    s->want = malloc((size_t)s->max_rows);
    if (!rc && (!s->table || !s->rows || !s->want))
        rc = ifl_err(err, IFL_ENOMEM, "out of memory");
    if (rc) {
        fprintf(stderr, "inflight %s: %s\n", cmd, err);
        cli_session_close(s);
        return 1;
    }
    for (int32_t i = 0; i < s->n_blocks; i++)
        s->table[i] = i;
    return 0;
}

void cli_session_close(struct cli_session *s)
{
    ifl_fwd_free(s->fwd);
    ifl_kv_store_free(s->kv);
    ifl_vocab_free(s->vocab);
    ifl_model_free(s->model);
    free(s->table);
    free(s->rows);
    free(s->want);
    memset(s, 0, sizeof(*s));
}

int cli_session_eval(struct cli_session *s, const int32_t *tokens, int64_t n, int32_t start,
                     float *logits_all, float *last, char *err)
{
    if (start + n > s->n_ctx)
        return ifl_err(err, IFL_EINVAL, "%lld tokens from position %d exceed the context of %d",
                       (long long)n, start, s->n_ctx);
    int32_t n_vocab = s->model->hp.n_vocab;
    const int32_t *tables[1] = {s->table};
    for (int64_t done = 0; done < n;) {
        int32_t nr = (int32_t)(n - done < s->max_rows ? n - done : s->max_rows);
        int32_t *tok = s->rows, *pos = s->rows + s->max_rows, *seq = s->rows + 2 * s->max_rows;
        for (int32_t i = 0; i < nr; i++) {
            tok[i] = tokens[done + i];
            pos[i] = start + (int32_t)(done + i);
            seq[i] = 0;
            s->want[i] = logits_all != NULL || done + i == n - 1;
        }
        struct ifl_batch b = {.n_rows = nr,
                              .tokens = tok,
                              .pos = pos,
                              .seq = seq,
                              .logits = s->want,
                              .n_seqs = 1,
                              .block_tables = tables,
                              .n_blocks = &s->n_blocks};
        float *out = logits_all ? logits_all + (size_t)done * (size_t)n_vocab : last;
        int rc = ifl_forward(s->fwd, &b, out, err);
        if (rc)
            return rc;
        done += nr;
    }
    return 0;
}

/* Reads a whole small file into a NUL-terminated malloc'd string. */
char *cli_read_file(const char *path, size_t max, const char **why)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = strerror(errno);
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        *why = buf ? "read error" : "out of memory";
        return NULL;
    }
    if (n > max) {
        free(buf);
        *why = "too large";
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

char *cli_read_file_n(const char *path, size_t max, size_t *n_out, const char **why)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *why = strerror(errno);
        return NULL;
    }
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        *why = "not a regular file";
        return NULL;
    }
    if ((size_t)size > max) {
        fclose(f);
        *why = "too large";
        return NULL;
    }
    char *buf = malloc((size_t)size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)size, f) : 0;
    int bad = ferror(f) || n != (size_t)size;
    fclose(f);
    if (!buf || bad) {
        free(buf);
        *why = buf ? "read error" : "out of memory";
        return NULL;
    }
    buf[n] = 0;
    *n_out = n;
    return buf;
}

int cli_spec_option(const char *cmd, const char *a, const char *v, struct ifl_speculative_config *c)
{
    int64_t iv;
    double fv;
    if (!strcmp(a, "--spec-type")) {
        for (int32_t t = 0; ifl_decoding_type_name(t); t++)
            if (!strcmp(v, ifl_decoding_type_name(t))) {
                c->type = t;
                return 0;
            }
        return cli_usage_error(cmd, "--spec-type wants none, draft, ngram or eagle3, not '%s'", v);
    }
    if (!strcmp(a, "--draft-model") || !strcmp(a, "-md")) {
        c->draft_model = v;
        return 0;
    }
    if (!strcmp(a, "--spec-accept")) {
        if (!strcmp(v, "exact"))
            c->accept = IFL_SPEC_ACCEPT_EXACT;
        else if (!strcmp(v, "rejection"))
            c->accept = IFL_SPEC_ACCEPT_REJECTION;
        else
            return cli_usage_error(cmd, "--spec-accept wants exact or rejection, not '%s'", v);
        return 0;
    }
    if (!strcmp(a, "--spec-adaptive")) {
        if (strcmp(v, "on") && strcmp(v, "off"))
            return cli_usage_error(cmd, "--spec-adaptive wants on or off, not '%s'", v);
        c->adaptive = !strcmp(v, "on");
        return 0;
    }
    if (!strcmp(a, "--draft-p-min")) {
        if (cli_parse_f64(v, 0, 1, &fv))
            return cli_usage_error(cmd, "--draft-p-min wants a probability from 0 to 1, not '%s'",
                                   v);
        c->p_min = (float)fv;
        return 0;
    }
    static const struct {
        const char *flag;
        int64_t lo, hi;
        size_t off;
    } nums[] = {
        {"--draft-max", 1, 32, offsetof(struct ifl_speculative_config, n_max)},
        {"--draft-min", 0, 32, offsetof(struct ifl_speculative_config, n_min)},
        {"--spec-ngram", 1, 8, offsetof(struct ifl_speculative_config, ngram_size)},
        {"--spec-ngram-min-hits", 1, 1000, offsetof(struct ifl_speculative_config, ngram_min_hits)},
        {"--spec-tree-budget", 1, 64, offsetof(struct ifl_speculative_config, tree_budget)},
        {"--spec-tree-top-n", 1, 8, offsetof(struct ifl_speculative_config, tree_top_n)},
    };
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++)
        if (!strcmp(a, nums[k].flag)) {
            if (cli_parse_i64(v, nums[k].lo, nums[k].hi, &iv))
                return cli_usage_error(cmd, "%s wants %lld to %lld, not '%s'", a,
                                       (long long)nums[k].lo, (long long)nums[k].hi, v);
            *(int32_t *)((char *)c + nums[k].off) = (int32_t)iv;
            return 0;
        }
    return -1;
}

int cli_lora_option(const char *cmd, const char *a, const char *v, struct cli_lora *l)
{
    int64_t iv;
    double fv;
    if (!strcmp(a, "--lora-type")) {
        if (strcmp(v, "f32") && strcmp(v, "f16") && strcmp(v, "q8_0"))
            return cli_usage_error(cmd, "--lora-type wants f32, f16 or q8_0, not '%s'", v);
        l->type = !strcmp(v, "f16")    ? IFL_LORA_TYPE_F16
                  : !strcmp(v, "q8_0") ? IFL_LORA_TYPE_Q8_0
                                       : IFL_LORA_TYPE_F32;
        return 0;
    }
    if (!strcmp(a, "--lora-cache-bytes")) {
        if (cli_parse_i64(v, 0, INT64_MAX, &iv))
            return cli_usage_error(cmd, "--lora-cache-bytes wants a byte count, not '%s'", v);
        l->cache_bytes = iv;
        return 0;
    }
    int plain = !strcmp(a, "--lora"), scaled = !strcmp(a, "--lora-scaled"),
        module = !strcmp(a, "--lora-modules");
    if (!plain && !scaled && !module)
        return -1;
    if (l->n == CLI_MAX_LORA)
        return cli_usage_error(cmd, "at most %d LoRA adapters", CLI_MAX_LORA);
    int i = l->n;
    l->name[i][0] = 0;
    l->scale[i] = module ? 0.0f : 1.0f;
    l->path[i] = v;
    if (scaled) {
        /* FILE:SCALE, split at the last colon (a path may hold colons) */
        const char *c = strrchr(v, ':');
        if (!c || c == v || cli_parse_f64(c + 1, -1e6, 1e6, &fv))
            return cli_usage_error(cmd, "--lora-scaled wants FILE:SCALE, not '%s'", v);
        l->scale[i] = (float)fv;
        if ((size_t)(c - v) >= sizeof l->pbuf[i])
            return cli_usage_error(cmd, "--lora-scaled: the path is too long");
        snprintf(l->pbuf[i], sizeof l->pbuf[i], "%.*s", (int)(c - v), v);
        l->path[i] = l->pbuf[i];
    } else if (module) {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1] || (size_t)(eq - v) >= sizeof l->name[i])
            return cli_usage_error(cmd, "--lora-modules wants NAME=FILE, not '%s'", v);
        snprintf(l->name[i], sizeof l->name[i], "%.*s", (int)(eq - v), v);
        l->path[i] = eq + 1;
    }
    if (!l->path[i][0])
        return cli_usage_error(cmd, "%s wants a file", a);
    l->n++;
    return 0;
}

int cli_lora_load(const char *cmd, ifl_executor *ex, struct cli_lora *l)
{
    for (int i = 0; i < l->n; i++) {
        char err[IFL_ERR_LEN] = "";
        int rc = ifl_executor_load_lora(ex, l->path[i], l->name[i][0] ? l->name[i] : NULL,
                                        l->scale[i], &l->id[i], err);
        if (rc) {
            fprintf(stderr, "inflight %s: LoRA adapter '%s': %s\n", cmd, l->path[i], err);
            return rc == IFL_ENOMEM ? 1 : CLI_EXIT_USAGE;
        }
    }
    return 0;
}

int cli_spec_finish(const char *cmd, struct ifl_speculative_config *c)
{
    if (c->draft_model && c->type == IFL_SPEC_NONE)
        c->type = IFL_SPEC_DRAFT; /* --draft-model alone means a draft model */
    if (c->n_min > c->n_max)
        return cli_usage_error(cmd, "--draft-min %d exceeds --draft-max %d", c->n_min, c->n_max);
    if ((c->type == IFL_SPEC_DRAFT || c->type == IFL_SPEC_EAGLE3) && !c->draft_model)
        return cli_usage_error(cmd, "--spec-type %s needs --draft-model FILE",
                               c->type == IFL_SPEC_DRAFT ? "draft" : "eagle3");
    if (c->draft_model && c->type != IFL_SPEC_DRAFT && c->type != IFL_SPEC_EAGLE3)
        return cli_usage_error(cmd, "--draft-model is for --spec-type draft or eagle3");
    return 0;
}
