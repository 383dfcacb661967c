/*
 * `inflight run`: generate from a prompt on one sequence, streaming the
 * completion, through the executor like every other client (so guided
 * decoding, and whatever the engine learns next, work here too); and
 * `inflight eval`: teacher-forced logits of a whole sequence, written as
 * little-endian float32 rows [n_pos][n_vocab].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/syscpu.h"
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
    int kv_type;           /* enum ifl_kv_type, for the executor */
    int guide_type;        /* enum ifl_guide_type */
    const char *guide_arg; /* --grammar / --json-schema FILE, or --regex RE */
    const char *guide_flag;
    struct ifl_speculative_config spec;
    const char *prediction;                         /* --prediction FILE: client drafts */
    struct cli_lora lora;                           /* --lora, --lora-scaled */
    struct cli_tp tp;                               /* --tp, --tp-timeout */
    const char *mmproj;                             /* --mmproj FILE */
    int vision_prec;                                /* --vision-precision */
    const char *images[IFL_MAX_IMAGES_PER_REQUEST]; /* --image FILE, in order */
    int n_images;
};

static const char RUN_HELP[] =
    "usage: inflight run -m FILE -p TEXT [options]\n"
    "  -m, --model FILE     GGUF model\n"
    "  -p, --prompt TEXT    prompt (BOS is added as the model's metadata says)\n"
    "  -n, --n-predict N    tokens to generate (default 128; 0: the prompt only)\n"
    "  --temp T             temperature; 0 is greedy (default 1, as the server)\n"
    "  --top-k K            keep the K most likely tokens; 0 is off (default 0)\n"
    "  --top-p P            nucleus sampling mass; 1 is off (default 1)\n"
    "  --min-p P            drop tokens below P x the top probability (default 0)\n"
    "  --grammar FILE       constrain the output to a GBNF grammar\n"
    "  --json-schema FILE   constrain the output to JSON valid against a JSON Schema\n"
    "  --regex RE           constrain the output to a regular expression\n"
    "  --seed S             random seed (default: from the clock)\n"
    "  -t, --threads N      threads (default: the CPUs this process may use)\n"
    "  -c, --ctx-size N     context positions (default: the model's, at most 4096)\n"
    "  --kv-type f16|f32|q8_0  KV cache precision (default f16)\n"
    "  --repack-cache DIR   keep the weights repacked for this CPU's kernels in a file in\n"
    "                       DIR, which later starts map instead of repacking (default,\n"
    "                       for models of 64 MiB or more: ~/.cache/inflight; off: none)\n"
    "  --repack-cache-max SIZE  the cache files there may take SIZE in all (20G, 512M;\n"
    "                       default 32G; off: no bound): a new file makes the least\n"
    "                       recently used others go\n"
    "  --ids                print generated token ids instead of text\n"
    "  --ignore-eos         keep generating past end-of-sequence\n"
    "  --prediction FILE    text the output is expected to resemble (an edited file):\n"
    "                       proposed as drafts, checked by the model (speculation)\n"
    "  --mmproj FILE        a vision encoder (llama.cpp's mmproj GGUF) for the model\n"
    "  --vision-precision f32|bf16  the encoder's products: f32 (default), or bf16\n"
    "                       (F16 matrices and activations rounded to BF16: faster on\n"
    "                       CPUs with AVX-512 BF16, embeddings ~1e-2 off)\n"
    "  --image FILE         a PNG or JPEG image (repeat for more, with --mmproj); each\n"
    "                       <__media__> in the prompt marks the next one's place, and\n"
    "                       without markers the images go before the text\n" CLI_SPEC_HELP
        CLI_LORA_HELP CLI_TP_HELP;

static const char EVAL_HELP[] =
    "usage: inflight eval -m FILE (-p TEXT | --ids \"1 2 3\") --logits OUT.f32 [options]\n"
    "  evaluates the whole sequence and writes the logits of every position as\n"
    "  little-endian float32 rows [n_pos][n_vocab]\n"
    "  -t, --threads N, -c, --ctx-size N, --kv-type f16|f32|q8_0, --repack-cache DIR,\n"
    "  --repack-cache-max SIZE  as for run\n";

/* Parses the options run and eval share; returns 0, or an exit status. */
static int parse(int argc, char **argv, const char *cmd, struct run_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->so.kv_type = IFL_TYPE_F16;
    o->n_predict = 128;
    o->kv_type = IFL_KV_F16;
    ifl_sampling_default(&o->samp); /* the executor's defaults, which the server keeps */
    struct ifl_executor_config dc;
    ifl_executor_config_default(&dc);
    o->spec = dc.speculative;
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
        int sp = is_run ? cli_spec_option(cmd, a, v, &o->spec) : -1;
        if (sp < 0 && is_run)
            sp = cli_lora_option(cmd, a, v, &o->lora);
        if (sp < 0 && is_run)
            sp = cli_tp_option(cmd, a, v, &o->tp);
        if (sp >= 0) {
            if (sp)
                return sp;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->so.model_path = v;
        } else if (is_run && !strcmp(a, "--prediction")) {
            o->prediction = v;
        } else if (is_run && !strcmp(a, "--mmproj")) {
            o->mmproj = v;
        } else if (is_run && !strcmp(a, "--vision-precision")) {
            if ((o->vision_prec = cli_parse_vision_precision(v)) < 0)
                return cli_usage_error(cmd, "--vision-precision wants f32 or bf16, not '%s'", v);
        } else if (is_run && !strcmp(a, "--image")) {
            if (o->n_images == IFL_MAX_IMAGES_PER_REQUEST)
                return cli_usage_error(cmd, "--image: at most %d images",
                                       IFL_MAX_IMAGES_PER_REQUEST);
            o->images[o->n_images++] = v;
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
        } else if (!strcmp(a, "--repack-cache-max")) {
            if (cli_parse_cache_max(v, &o->so.repack_cache_max))
                return cli_usage_error(cmd,
                                       "--repack-cache-max wants a size (20G, 512M) or off, "
                                       "not '%s'",
                                       v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_i64(v, 1, 256, &iv))
                return cli_usage_error(cmd, "-t wants a thread count from 1 to 256, not '%s'", v);
            o->so.n_threads = (int)iv;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (cli_parse_i64(v, 1, 1 << 20, &iv))
                return cli_usage_error(cmd, "-c wants a context size from 1 to 1048576, not '%s'",
                                       v);
            o->so.n_ctx = (int32_t)iv;
        } else if (!strcmp(a, "--kv-type")) {
            int kt = cli_parse_kv_type(v);
            if (kt < 0)
                return cli_usage_error(cmd, "--kv-type wants f16, f32 or q8_0, not '%s'", v);
            o->so.kv_type = cli_kv_store_type(kt);
            o->kv_type = kt;
        } else if (is_run && (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))) {
            if (cli_parse_i64(v, 0, 1 << 20, &iv))
                return cli_usage_error(cmd, "-n wants a token count from 0 to 1048576, not '%s'",
                                       v);
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
        } else if (is_run && (!strcmp(a, "--grammar") || !strcmp(a, "--json-schema") ||
                              !strcmp(a, "--regex"))) {
            if (o->guide_arg)
                return cli_usage_error(cmd, "%s and %s: give one constraint", o->guide_flag, a);
            o->guide_type = !strcmp(a, "--grammar")       ? IFL_GUIDE_EBNF
                            : !strcmp(a, "--json-schema") ? IFL_GUIDE_JSON_SCHEMA
                                                          : IFL_GUIDE_REGEX;
            o->guide_arg = v;
            o->guide_flag = a;
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
    if (o->n_images && !o->mmproj)
        return cli_usage_error(cmd, "--image needs a vision encoder (--mmproj FILE)");
    if (!is_run && !!o->prompt == !!o->ids_text)
        return cli_usage_error(cmd, "give exactly one of -p TEXT or --ids \"1 2 3\"");
    if (!is_run && !o->logits_path)
        return cli_usage_error(cmd, "an output file is required (--logits OUT.f32)");
    return is_run ? cli_spec_finish(cmd, &o->spec) : 0;
}

/* Tokenizes text with the model's special-token rules into a malloc'd array. */
static int tokenize_prompt(struct cli_session *s, const char *text, int32_t **ids, int64_t *n)
{
    return ifl_tokenize_alloc(s->vocab, text, strlen(text), 1, 1, ids, n);
}

/* Prints one response's new tokens (ids, or their text) and returns how
 * many it carried. */
static int32_t show(const struct run_opts *o, const struct ifl_sequence_result *r, int64_t shown)
{
    if (o->n_predict == 0)
        return r->n_tokens; /* the prompt only: the token the executor made is not shown */
    if (o->print_ids)
        for (int32_t i = 0; i < r->n_tokens; i++)
            printf(shown + i > 0 ? " %d" : "%d", r->tokens[i]);
    else if (r->n_text > 0)
        fwrite(r->text, 1, (size_t)r->n_text, stdout);
    fflush(stdout);
    return r->n_tokens;
}

static int run_leader(struct run_opts *op);

int cmd_run(int argc, char **argv)
{
    static struct run_opts o; /* large (the LoRA paths): not on the stack */
    int rc = parse(argc, argv, "run", &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    /* a worker rank of --tp runs its loop here and returns */
    if ((rc = cli_tp_start("run", &o.tp, o.so.model_path, o.so.n_threads)) >= 0)
        return rc;
    return cli_tp_end(&o.tp, run_leader(&o));
}

static int run_leader(struct run_opts *op)
{
    struct run_opts o = *op;
    int rc;
    if (!o.seed_given)
        o.samp.seed = (uint64_t)ifl_now_us();
    o.samp.ignore_eos = o.ignore_eos;
    char *guide = NULL;
    if (o.guide_type == IFL_GUIDE_REGEX) {
        guide = strdup(o.guide_arg);
    } else if (o.guide_arg) {
        const char *why = "";
        if (!(guide = cli_read_file(o.guide_arg, (size_t)1 << 24, &why)))
            return cli_usage_error("run", "%s: cannot read '%s': %s", o.guide_flag, o.guide_arg,
                                   why);
    }
    struct ifl_executor_config cfg;
    ifl_executor_config_default(&cfg);
    cfg.n_threads = o.so.n_threads;
    cfg.max_batch_size = 1;
    cfg.n_ctx = o.so.n_ctx;
    cfg.kv_type = o.kv_type;
    cfg.enable_prefix_caching = 0;
    cfg.speculative = o.spec;
    cfg.lora_cache_bytes = o.lora.cache_bytes;
    cfg.lora_type = o.lora.type;
    cfg.tp_comm = o.tp.comm;
    cfg.tp_emulate = o.tp.emulate;
    cfg.tp_timeout_s = o.tp.timeout_s;
    cfg.mmproj_path = o.mmproj;
    cfg.vision_precision = o.vision_prec;
    cfg.repack_cache_max_bytes = o.so.repack_cache_max;
    char cache_buf[4096];
    int cache_default;
    cfg.repack_cache_dir = cli_repack_cache(o.so.repack_cache_dir, o.so.model_path, cache_buf,
                                            sizeof cache_buf, &cache_default);
    struct cli_progress progress;
    cli_progress_init(&progress, "run", 1.0);
    cfg.load_progress = cli_progress_fn;
    cfg.load_progress_user = &progress;
    char err[IFL_ERR_LEN] = "";
    ifl_executor *ex = NULL;
    if ((rc = ifl_executor_create(&ex, o.so.model_path, &cfg, err))) {
        fprintf(stderr, "inflight run: %s\n", err);
        free(guide);
        return rc == IFL_ENOMEM ? 1 : CLI_EXIT_USAGE; /* the model file or an argument */
    }
    cli_cache_note(&progress, cfg.repack_cache_dir, cache_default);
    if ((rc = cli_lora_load("run", ex, &o.lora))) { /* applied to the request at their scales */
        ifl_executor_destroy(ex, 1);
        free(guide);
        return rc;
    }
    struct ifl_model_info mi;
    ifl_executor_model_info(ex, &mi);
    int status = 0;
    int64_t n_prompt = 0, n_gen = 0;
    int32_t *prompt = NULL, *drafts = NULL;
    size_t len = strlen(o.prompt);
    /* images: their files read, their places marked among the tokens */
    struct ifl_image_input imgs[IFL_MAX_IMAGES_PER_REQUEST];
    int32_t img_pos[IFL_MAX_IMAGES_PER_REQUEST];
    char *img_data[IFL_MAX_IMAGES_PER_REQUEST] = {0};
    memset(imgs, 0, sizeof imgs);
    for (int k = 0; k < o.n_images; k++) {
        const char *why = "";
        size_t sz = 0;
        if (!(img_data[k] = cli_read_file_n(o.images[k], (size_t)64 << 20, &sz, &why))) {
            status = cli_usage_error("run", "--image: cannot read '%s': %s", o.images[k], why);
            goto done;
        }
        imgs[k].data = img_data[k];
        imgs[k].size = (int64_t)sz;
    }
    /* each image's rows from its header (InternVL's tiles depend on its
     * size); one that does not read fails at enqueue, naming it */
    int32_t img_rows[IFL_MAX_IMAGES_PER_REQUEST];
    struct ifl_vision_info vi;
    int have_vi = ifl_executor_vision_info(ex, &vi) == 0;
    for (int k = 0; k < o.n_images; k++)
        if (!have_vi || ifl_executor_image_rows(ex, imgs[k].data, imgs[k].size, &img_rows[k], NULL))
            img_rows[k] = have_vi ? vi.n_tokens : 1;
    rc = ifl_executor_tokenize_images(ex, o.prompt, (int64_t)len, NULL, 1, 1, o.n_images, img_rows,
                                      NULL, 0, &n_prompt, img_pos, err);
    if (rc == IFL_EINVAL) {
        status = cli_usage_error("run", "%s", err);
        goto done;
    }
    if ((rc && rc != IFL_EFULL) || n_prompt == 0) {
        status = cli_usage_error("run", "the prompt gives no tokens");
        goto done;
    }
    if (n_prompt > mi.n_ctx) {
        status = cli_usage_error("run", "the prompt has %lld tokens; the context holds %d (-c)",
                                 (long long)n_prompt, mi.n_ctx);
        goto done;
    }
    if (!(prompt = malloc(sizeof(int32_t) * (size_t)n_prompt)) ||
        ifl_executor_tokenize_images(ex, o.prompt, (int64_t)len, NULL, 1, 1, o.n_images, img_rows,
                                     prompt, n_prompt, &n_prompt, img_pos, err)) {
        fprintf(stderr, "inflight run: out of memory\n");
        status = 1;
        goto done;
    }
    struct ifl_request req;
    ifl_request_init(&req);
    req.input_ids = prompt;
    req.n_input = (int32_t)n_prompt;
    for (int k = 0; k < o.n_images; k++)
        imgs[k].pos = img_pos[k];
    req.images = imgs;
    req.n_images = o.n_images;
    /* as on the server, prompt and generated tokens share the context */
    int64_t room = mi.n_ctx - n_prompt;
    if (room < 1 && o.n_predict > 0) {
        status = cli_usage_error("run",
                                 "the prompt has %lld tokens and fills the context of %d "
                                 "(-c): no room to generate",
                                 (long long)n_prompt, mi.n_ctx);
        goto done;
    }
    req.max_tokens = o.n_predict < 1 ? 1 : (int32_t)(o.n_predict < room ? o.n_predict : room);
    req.streaming = 1;
    req.sampling = o.samp;
    req.output.return_perf_metrics = 1;
    req.guide_type = o.guide_type;
    req.guide_text = guide;
    if (o.prediction) {
        const char *why = "";
        char *text = cli_read_file(o.prediction, (size_t)1 << 24, &why);
        int64_t nd = 0;
        if (!text) {
            status =
                cli_usage_error("run", "--prediction: cannot read '%s': %s", o.prediction, why);
            goto done;
        }
        /* the predicted continuation: no BOS, special tokens as text */
        size_t tl = strlen(text);
        rc = ifl_executor_tokenize(ex, text, (int64_t)tl, 0, 0, NULL, 0, &nd);
        if (nd > 65536)
            nd = 65536;
        if (nd > 0 && (drafts = malloc(sizeof(int32_t) * (size_t)nd)))
            ifl_executor_tokenize(ex, text, (int64_t)tl, 0, 0, drafts, nd, &nd);
        free(text);
        req.speculative.draft_tokens = drafts;
        req.speculative.n_draft_tokens = drafts ? (int32_t)(nd > 65536 ? 65536 : nd) : 0;
    }
    ifl_id id;
    if ((rc = ifl_enqueue(ex, &req, &id, err))) {
        if (rc != IFL_ENOMEM) { /* a sampling value or a constraint: the user's */
            status = cli_usage_error("run", "%s", err);
        } else {
            fprintf(stderr, "inflight run: %s\n", err);
            status = 1;
        }
        goto done;
    }
    struct ifl_perf_metrics perf = {0};
    int32_t finish = IFL_FINISH_NOT_FINISHED;
    for (int final = 0; !final;) {
        struct ifl_response *resp[16];
        int32_t got = 0;
        if ((rc = ifl_await(ex, &id, 1, -1, resp, 16, &got))) {
            fprintf(stderr, "\ninflight run: %s\n", ifl_strerror(rc));
            status = 1;
            goto done;
        }
        for (int32_t k = 0; k < got; k++) {
            struct ifl_response *r = resp[k];
            if (r->status) {
                fprintf(stderr, "\ninflight run: %s\n",
                        r->error_msg ? r->error_msg : ifl_strerror(r->status));
                status = 1;
            } else if (r->n_results > 0) {
                n_gen += show(&o, &r->results[0], n_gen);
                if (r->is_final) {
                    finish = r->results[0].finish_reason;
                    /* --ids shows the end token as well, as it always has */
                    if (o.print_ids && o.n_predict > 0 && r->results[0].end_token >= 0) {
                        printf(n_gen > 0 ? " %d" : "%d", r->results[0].end_token);
                        n_gen++;
                    }
                }
            }
            if (r->is_final) {
                final = 1;
                perf = r->perf;
            }
            ifl_response_free(r);
        }
    }
    if (status)
        goto done;
    putchar('\n');
    fflush(stdout);
    if (o.n_predict == 0)
        n_gen = 0;
    if (finish == IFL_FINISH_LENGTH && o.guide_type != IFL_GUIDE_NONE && o.n_predict > 0)
        fprintf(stderr,
                "inflight run: stopped after %lld tokens, before the %s constraint was "
                "complete: the output is cut (raise -n)\n",
                (long long)n_gen, o.guide_flag);
    if (finish == IFL_FINISH_LENGTH && n_gen < o.n_predict && n_gen == room)
        fprintf(stderr, "inflight run: stopped at the end of the context (%d positions)\n",
                mi.n_ctx);
    double t_prompt = (double)(perf.first_token_us - perf.first_scheduled_us) * 1e-6;
    double t_decode = (double)(perf.last_token_us - perf.first_token_us) * 1e-6;
    fprintf(stderr, "prompt: %lld tokens in %.1f ms (%.1f tokens/s)\n", (long long)n_prompt,
            t_prompt * 1e3, t_prompt > 0 ? (double)n_prompt / t_prompt : 0.0);
    if (n_gen > 1)
        fprintf(stderr, "decode: %lld tokens in %.1f ms (%.1f tokens/s), %d threads, kernels %s\n",
                (long long)(n_gen - 1), t_decode * 1e3,
                t_decode > 0 ? (double)(n_gen - 1) / t_decode : 0.0,
                o.so.n_threads ? o.so.n_threads : ifl_syscpu_count(256), ifl_kernels_best()->name);
    if (perf.draft_tokens)
        fprintf(stderr, "speculation: %d of %d drafts kept (%.0f %%)\n", perf.accepted_draft_tokens,
                perf.draft_tokens, 100.0 * perf.accepted_draft_tokens / perf.draft_tokens);
done:
    for (int k = 0; k < o.n_images; k++)
        free(img_data[k]);
    free(drafts);
    free(prompt);
    free(guide);
    ifl_executor_destroy(ex, 1);
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
