/*
 * `inflight run`: generate from a prompt on one sequence, streaming the
 * completion; and `inflight eval`: teacher-forced logits of a whole
 * sequence, written as little-endian float32 rows [n_pos][n_vocab].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/timeutil.h"
#include "kernels/kernels.h"
#include "runtime/sampler.h"

struct run_opts {
    struct cli_session_opts so;
    const char *prompt;
    const char *ids_text;
    const char *logits_path;
    int64_t n_predict;
    struct ifl_sampling_config samp;
    int print_ids;
    int ignore_eos;
    int seed_given;
};

static const char RUN_HELP[] =
    "usage: inflight run -m FILE -p TEXT [options]\n"
    "  -m, --model FILE     GGUF model\n"
    "  -p, --prompt TEXT    prompt (BOS is added as the model's metadata says)\n"
    "  -n, --n-predict N    tokens to generate (default 128)\n"
    "  --temp T             temperature; 0 is greedy (default 0.8)\n"
    "  --top-k K            keep the K most likely tokens; 0 is off (default 40)\n"
    "  --top-p P            nucleus sampling mass; 1 is off (default 0.95)\n"
    "  --min-p P            drop tokens below P x the top probability (default 0.05)\n"
    "  --seed S             random seed (default: from the clock)\n"
    "  -t, --threads N      threads (default: the CPUs this process may use)\n"
    "  -c, --ctx-size N     context positions (default: the model's, at most 4096)\n"
    "  --kv-type f16|f32|q8_0  KV cache precision (default f16)\n"
    "  --repack-cache DIR   keep the weights repacked for this CPU's kernels in a file in\n"
    "                       DIR, which later starts map instead of repacking\n"
    "  --ids                print generated token ids instead of text\n"
    "  --ignore-eos         keep generating past end-of-sequence\n";

static const char EVAL_HELP[] =
    "usage: inflight eval -m FILE (-p TEXT | --ids \"1 2 3\") --logits OUT.f32 [options]\n"
    "  evaluates the whole sequence and writes the logits of every position as\n"
    "  little-endian float32 rows [n_pos][n_vocab]\n"
    "  -t, --threads N, -c, --ctx-size N, --kv-type f16|f32|q8_0, --repack-cache DIR\n"
    "  as for run\n";

/* Parses the options run and eval share; returns 0, or an exit status. */
static int parse(int argc, char **argv, const char *cmd, struct run_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->so.kv_type = IFL_TYPE_F16;
    o->n_predict = 128;
    ifl_sampling_default(&o->samp);
    o->samp.temperature = 0.8f;
    o->samp.top_k = 40;
    o->samp.top_p = 0.95f;
    o->samp.min_p = 0.05f;
    int is_run = !strcmp(cmd, "run");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(is_run ? RUN_HELP : EVAL_HELP, stdout);
            return -1;
        }
        if (is_run && !strcmp(a, "--ignore-eos")) {
            o->ignore_eos = 1;
            continue;
        }
        if (is_run && !strcmp(a, "--ids")) {
            o->print_ids = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error(cmd, "option '%s' needs a value (or is unknown)", a);
        const char *v = argv[++i];
        int64_t iv;
        double fv;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->so.model_path = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            o->prompt = v;
        } else if (!is_run && !strcmp(a, "--ids")) {
            o->ids_text = v;
        } else if (!is_run && !strcmp(a, "--logits")) {
            o->logits_path = v;
        } else if (!strcmp(a, "--repack-cache")) {
            int rc = cli_check_cache_dir(cmd, v);
            if (rc)
                return rc;
            o->so.repack_cache_dir = v;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_i64(v, 1, 256, &iv))
                return cli_usage_error(cmd, "-t wants a thread count from 1 to 256, not '%s'", v);
            o->so.n_threads = (int)iv;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (cli_parse_i64(v, 1, 1 << 20, &iv))
                return cli_usage_error(cmd, "-c wants a context size from 1 to 1048576, not '%s'", v);
            o->so.n_ctx = (int32_t)iv;
        } else if (!strcmp(a, "--kv-type")) {
            int kt = cli_parse_kv_type(v);
            if (kt < 0)
                return cli_usage_error(cmd, "--kv-type wants f16, f32 or q8_0, not '%s'", v);
            o->so.kv_type = cli_kv_store_type(kt);
        } else if (is_run && (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))) {
            if (cli_parse_i64(v, 0, 1 << 20, &iv))
                return cli_usage_error(cmd, "-n wants a token count from 0 to 1048576, not '%s'", v);
            o->n_predict = iv;
        } else if (is_run && !strcmp(a, "--temp")) {
            if (cli_parse_f64(v, 0, 100, &fv))
                return cli_usage_error(cmd, "--temp wants a number from 0 to 100, not '%s'", v);
            o->samp.temperature = (float)fv;
        } else if (is_run && !strcmp(a, "--top-k")) {
            if (cli_parse_i64(v, 0, 1 << 24, &iv))
                return cli_usage_error(cmd, "--top-k wants a count >= 0, not '%s'", v);
            o->samp.top_k = (int32_t)iv;
        } else if (is_run && !strcmp(a, "--top-p")) {
            if (cli_parse_f64(v, 0, 1, &fv) || fv <= 0)
                return cli_usage_error(cmd, "--top-p wants a number in (0, 1], not '%s'", v);
            o->samp.top_p = (float)fv;
        } else if (is_run && !strcmp(a, "--min-p")) {
            if (cli_parse_f64(v, 0, 1, &fv))
                return cli_usage_error(cmd, "--min-p wants a number in [0, 1], not '%s'", v);
            o->samp.min_p = (float)fv;
        } else if (is_run && !strcmp(a, "--seed")) {
            if (cli_parse_i64(v, 0, INT64_MAX, &iv))
                return cli_usage_error(cmd, "--seed wants a non-negative integer, not '%s'", v);
            o->samp.seed = (uint64_t)iv;
            o->seed_given = 1;
        } else {
            return cli_usage_error(cmd, "unknown option '%s' (see --help)", a);
        }
    }
    if (!o->so.model_path)
        return cli_usage_error(cmd, "a model is required (-m FILE)");
    if (is_run && !o->prompt)
        return cli_usage_error(cmd, "a prompt is required (-p TEXT)");
    if (!is_run && !!o->prompt == !!o->ids_text)
        return cli_usage_error(cmd, "give exactly one of -p TEXT or --ids \"1 2 3\"");
    if (!is_run && !o->logits_path)
        return cli_usage_error(cmd, "an output file is required (--logits OUT.f32)");
    return 0;
}

/* Tokenizes text with the model's special-token rules into a malloc'd array. */
static int tokenize_prompt(struct cli_session *s, const char *text, int32_t **ids, int64_t *n)
{
    return ifl_tokenize_alloc(s->vocab, text, strlen(text), 1, 1, ids, n);
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o;
    int rc = parse(argc, argv, "run", &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (!o.seed_given)
        o.samp.seed = (uint64_t)ifl_now_us();
    struct cli_session s;
    if ((rc = cli_session_open(&s, &o.so, "run")))
        return rc;
    char err[IFL_ERR_LEN] = "";
    int32_t *prompt = NULL;
    int64_t n_prompt = 0;
    float *logits = NULL;
    char *piece = NULL;
    struct ifl_sampler_state smp = {0};
    int status = 0;
    int32_t n_vocab = s.model->hp.n_vocab;
    if (tokenize_prompt(&s, o.prompt, &prompt, &n_prompt) || n_prompt == 0) {
        status = cli_usage_error("run", "the prompt gives no tokens");
        goto done;
    }
    if (n_prompt > s.n_ctx) {
        status = cli_usage_error("run", "the prompt has %lld tokens; the context holds %d (-c)",
                                 (long long)n_prompt, s.n_ctx);
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)n_vocab);
    piece = malloc(IFL_DETOK_ROOM(s.vocab));
    if (ifl_sampling_validate(&o.samp, n_vocab, err)) {
        status = cli_usage_error("run", "%s", err);
        goto done;
    }
    if (!logits || !piece || ifl_sampler_state_init(&smp, n_vocab)) {
        fprintf(stderr, "inflight run: out of memory\n");
        status = 1;
        goto done;
    }
    ifl_sampler_reset(&smp, &o.samp, prompt, (int32_t)n_prompt);
    double t0 = ifl_now_s();
    if (cli_session_eval(&s, prompt, n_prompt, 0, NULL, logits, err)) {
        fprintf(stderr, "inflight run: %s\n", err);
        status = 1;
        goto done;
    }
    double t1 = ifl_now_s();
    struct ifl_detok dt;
    ifl_detok_init(&dt, s.vocab, 0);
    int64_t n_gen = 0;
    int32_t pos = (int32_t)n_prompt;
    int hit_ctx = 0;
    while (n_gen < o.n_predict) {
        int32_t tok = ifl_sampler_pick(&o.samp, &smp, logits, NULL, NULL, 0);
        ifl_sampler_accept(&o.samp, &smp, tok);
        n_gen++;
        int eog = ifl_vocab_is_eog(s.vocab, tok) && !o.ignore_eos;
        if (o.print_ids) {
            printf(n_gen > 1 ? " %d" : "%d", tok);
        } else if (!eog) {
            size_t k = ifl_detok_push(&dt, tok, piece);
            fwrite(piece, 1, k, stdout);
        }
        fflush(stdout);
        if (eog || n_gen == o.n_predict)
            break;
        if (pos >= s.n_ctx) {
            hit_ctx = 1;
            break;
        }
        if (cli_session_eval(&s, &tok, 1, pos, NULL, logits, err)) {
            fprintf(stderr, "\ninflight run: %s\n", err);
            status = 1;
            goto done;
        }
        pos++;
    }
    if (!o.print_ids) {
        size_t k = ifl_detok_flush(&dt, piece);
        fwrite(piece, 1, k, stdout);
    }
    putchar('\n');
    fflush(stdout);
    double t2 = ifl_now_s();
    if (hit_ctx)
        fprintf(stderr, "inflight run: stopped at the end of the context (%d positions)\n", s.n_ctx);
    fprintf(stderr, "prompt: %lld tokens in %.1f ms (%.1f tokens/s)\n", (long long)n_prompt,
            (t1 - t0) * 1e3, n_prompt / (t1 - t0));
    if (n_gen > 1)
        fprintf(stderr, "decode: %lld tokens in %.1f ms (%.1f tokens/s), %d threads, kernels %s\n",
                (long long)(n_gen - 1), (t2 - t1) * 1e3, (n_gen - 1) / (t2 - t1),
                ifl_fwd_n_threads(s.fwd), ifl_kernels_best()->name);
done:
    ifl_sampler_state_deinit(&smp);
    free(piece);
    free(logits);
    free(prompt);
    cli_session_close(&s);
    return status;
}

int cmd_eval(int argc, char **argv)
{
    struct run_opts o;
    int rc = parse(argc, argv, "eval", &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (o.ids_text && (cli_parse_ids(o.ids_text, &ids, &n) || n == 0)) {
        free(ids);
        return cli_usage_error("eval", "--ids wants token ids separated by spaces, like \"1 2 3\"");
    }
    struct cli_session s;
    if ((rc = cli_session_open(&s, &o.so, "eval"))) {
        free(ids);
        return rc;
    }
    int status = 0;
    float *logits = NULL;
    FILE *out = NULL;
    char err[IFL_ERR_LEN] = "";
    int32_t n_vocab = s.model->hp.n_vocab;
    if (o.prompt && (tokenize_prompt(&s, o.prompt, &ids, &n) || n == 0)) {
        status = cli_usage_error("eval", "the prompt gives no tokens");
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= n_vocab) {
            status = cli_usage_error("eval", "token id %d is outside the vocabulary (%d tokens)",
                                     ids[i], n_vocab);
            goto done;
        }
    if (n > s.n_ctx) {
        status = cli_usage_error("eval", "%lld tokens exceed the context of %d (-c)", (long long)n,
                                 s.n_ctx);
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)n * (size_t)n_vocab);
    if (!logits) {
        fprintf(stderr, "inflight eval: out of memory\n");
        status = 1;
        goto done;
    }
    if (cli_session_eval(&s, ids, n, 0, logits, NULL, err)) {
        fprintf(stderr, "inflight eval: %s\n", err);
        status = 1;
        goto done;
    }
    out = fopen(o.logits_path, "wb");
    if (!out || fwrite(logits, sizeof(float), (size_t)n * (size_t)n_vocab, out) !=
                    (size_t)n * (size_t)n_vocab) {
        status = cli_usage_error("eval", "cannot write '%s'", o.logits_path);
        goto done;
    }
    fprintf(stderr, "eval: %lld positions x %d logits written to %s\n", (long long)n, n_vocab,
            o.logits_path);
done:
    if (out && fclose(out) && !status)
        status = cli_usage_error("eval", "cannot write '%s'", o.logits_path);
    free(logits);
    free(ids);
    cli_session_close(&s);
    return status;
}
