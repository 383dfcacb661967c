/*
 * mkmodel: writes a synthetic GGUF model (llama, qwen2, qwen3, gemma2,
 * gemma3 or phi3) of a chosen shape and weight type, with seeded random
 * weights and the tokenizer of another GGUF copied key for key. Tests and
 * benchmarks use it to get models of real shapes without downloading any.
 * For gemma2, gemma3 and phi3 see docs/cli.md (sliding windows,
 * soft-caps, LongRoPE).
 *
 * Metadata and tensor names follow what llama.cpp's converter writes (see
 * the GGUFs in /work/shared/models/ref for examples). Weights are N(0, 0.02) like a
 * fresh transformer init, norm weights 1 + N(0, 0.1), qwen2 biases
 * N(0, 0.1); 1-D tensors are always F32.
 *
 * Determinism: every tensor has its own seed (from --seed and its name), and
 * every chunk of rows its own stream, so the file is the same bytes whatever
 * the thread count. Tensors are generated and quantised one at a time on the
 * thread pool; only the writer holds the whole model.
 *
 * Type mixes (llama-quantize's defaults, approximated):
 *   f32 f16 bf16 q8_0 q4_k q5_k q6_k   every 2-D tensor in that type
 *   q4_0 q5_0 q5_1 iq4_nl iq4_xs        likewise, but output.weight in Q6_K
 *   q2_k q3_k
 *   mxfp4                               every 2-D tensor MXFP4 (llama-quantize
 *                                       --pure MXFP4_MOE)
 *   mxfp4_moe                           expert matrices MXFP4, the rest Q8_0
 *                                       (llama-quantize MXFP4_MOE, gpt-oss's files)
 *   q4_k_m / q5_k_m                     Q4_K / Q5_K, but Q6_K for output.weight
 *                                       and for attn_v and ffn_down of the
 *                                       layers where use_more_bits(i, n) holds:
 *                                       i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2
 *   q3_k_m q3_k_l iq4_xs_mix           exactly the types llama-quantize's Q3_K_M,
 *                                       Q3_K_L and IQ4_XS presets choose, shape
 *                                       fallbacks included (tools/mkmodel_mix.h)
 * With --tied there is no output.weight and token_embd.weight plays its part,
 * so it takes the output's type (as llama-quantize does). A matrix whose row
 * length is not a multiple of its type's block falls back to Q8_0 when 32
 * divides the row, else F16, and says so on stderr.
 *
 * Draft models for speculative decoding (tests): the same --seed and shape
 * with another --type gives the same weights quantised differently, a
 * smaller shape gives a cheaper model over the same vocabulary, and
 * --swap-tokens A,B exchanges the texts of two tokens of the copied
 * vocabulary, so that a draft's vocabulary check must fail at id min(A, B).
 * --add-control T1,T2,... appends control tokens to the copied vocabulary
 * (a vocabulary with a chat format's tags, e.g. Mistral's [TOOL_CALLS]).
 *
 * Mixtures of experts (--n-expert N --n-expert-used K, with --arch
 * qwen3moe, or llama for Mixtral's layout): each layer's FFN becomes
 * llama.cpp's ffn_gate_inp [n_embd, N] (always F32, as llama-quantize
 * leaves it; N(0, 0.1), so the router's logits are spread enough that
 * the top K rarely ties) and ffn_gate_exps, ffn_up_exps [n_embd, n_ff, N]
 * and ffn_down_exps [n_ff, n_embd, N] in the mix's types (--n-ff is each
 * expert's width; qwen3moe also gets expert_feed_forward_length).
 *
 * LoRA adapters (--lora-of BASE): llama.cpp's GGUF adapter layout (see
 * src/model/lora.c) over the chosen projections of every layer (all seven
 * unless --lora-targets says), and token_embd / output when named. Random
 * A ~ N(0, 1/sqrt(n_in)) (token_embd's transposed lora_a: N(0, 1/sqrt(r)),
 * its input being one-hot), so each entry of A x is about N(0, 1) for an
 * input of unit rms, and B ~ N(0, 0.02), never all zero: the adapter
 * always changes the output. Rows whose length the chosen --lora-type's
 * block does not divide (a q8_0 lora_b of a rank that is not a multiple
 * of 32) fall back to F16, with a notice.
 *
 * Vision projectors (--mmproj): a LLaVA-1.5 style mmproj file, written by
 * tools/mkmodel_mmproj.h (included below).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/pool.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "model/model.h"

#define W_STD 0.02f   /* matrices */
#define NORM_STD 0.1f /* norm weights around 1 */
#define BIAS_STD 0.1f /* qwen2 q/k/v biases */
#define CHUNK_ELEMS 65536

enum arch {
    ARCH_LLAMA,
    ARCH_QWEN2,
    ARCH_QWEN3,
    ARCH_QWEN3MOE,
    ARCH_GEMMA2, /* write_arch_tensors */
    ARCH_GEMMA3,
    ARCH_PHI3,
    ARCH_GPT_OSS, /* write_oss_layer */
    N_ARCH
};
static const char *const arch_names[N_ARCH] = {"llama",  "qwen2",  "qwen3", "qwen3moe",
                                               "gemma2", "gemma3", "phi3",  "gpt-oss"};
/* gpt-oss's expert gate and up biases: wide enough that llama.cpp's clamp
 * of the gate at 7 and of up at +-7 binds on a few elements */
#define OSS_EXP_BIAS_STD 3.0f
#define ROUTER_STD 0.1f /* ffn_gate_inp: logits of std ~1.6, so routes are rarely near-ties */

/* One --type choice: the main type, the special types of the mix and the
 * llama_ftype value llama.cpp stores in general.file_type. */
struct mix {
    const char *name;
    enum ifl_type main;
    enum ifl_type output; /* output.weight (and a tied token_embd) */
    enum ifl_type more;   /* attn_v / ffn_down where use_more_bits holds */
    uint32_t file_type;
    int preset; /* enum preset (mkmodel_mix.h): llama-quantize's rules; 0: the fields above */
};

static const struct mix mixes[] = {
    {"f32", IFL_TYPE_F32, IFL_TYPE_F32, IFL_TYPE_F32, 0, 0},
    {"f16", IFL_TYPE_F16, IFL_TYPE_F16, IFL_TYPE_F16, 1, 0},
    {"bf16", IFL_TYPE_BF16, IFL_TYPE_BF16, IFL_TYPE_BF16, 32, 0},
    {"q8_0", IFL_TYPE_Q8_0, IFL_TYPE_Q8_0, IFL_TYPE_Q8_0, 7, 0},
    {"q4_0", IFL_TYPE_Q4_0, IFL_TYPE_Q6_K, IFL_TYPE_Q4_0, 2, 0},
    {"q5_0", IFL_TYPE_Q5_0, IFL_TYPE_Q6_K, IFL_TYPE_Q5_0, 8, 0},
    {"q5_1", IFL_TYPE_Q5_1, IFL_TYPE_Q6_K, IFL_TYPE_Q5_1, 9, 0},
    {"iq4_nl", IFL_TYPE_IQ4_NL, IFL_TYPE_Q6_K, IFL_TYPE_IQ4_NL, 25, 0},
    {"iq4_xs", IFL_TYPE_IQ4_XS, IFL_TYPE_Q6_K, IFL_TYPE_IQ4_XS, 30, 0},
    {"q2_k", IFL_TYPE_Q2_K, IFL_TYPE_Q6_K, IFL_TYPE_Q2_K, 10, 0},
    {"q3_k", IFL_TYPE_Q3_K, IFL_TYPE_Q6_K, IFL_TYPE_Q3_K, 11, 0},
    {"q4_k", IFL_TYPE_Q4_K, IFL_TYPE_Q4_K, IFL_TYPE_Q4_K, 14, 0},
    {"q5_k", IFL_TYPE_Q5_K, IFL_TYPE_Q5_K, IFL_TYPE_Q5_K, 16, 0},
    {"q6_k", IFL_TYPE_Q6_K, IFL_TYPE_Q6_K, IFL_TYPE_Q6_K, 18, 0},
    {"q4_k_m", IFL_TYPE_Q4_K, IFL_TYPE_Q6_K, IFL_TYPE_Q6_K, 15, 0},
    {"q5_k_m", IFL_TYPE_Q5_K, IFL_TYPE_Q6_K, IFL_TYPE_Q6_K, 17, 0},
    {"q3_k_m", IFL_TYPE_Q3_K, IFL_TYPE_Q6_K, IFL_TYPE_Q3_K, 12, 1 /* PRESET_Q3_K_M */},
    {"q3_k_l", IFL_TYPE_Q3_K, IFL_TYPE_Q6_K, IFL_TYPE_Q3_K, 13, 2 /* PRESET_Q3_K_L */},
    {"iq4_xs_mix", IFL_TYPE_IQ4_XS, IFL_TYPE_Q6_K, IFL_TYPE_IQ4_XS, 30, 3 /* PRESET_IQ4_XS */},
    {"mxfp4", IFL_TYPE_MXFP4, IFL_TYPE_MXFP4, IFL_TYPE_MXFP4, 38, 0},
    {"mxfp4_moe", IFL_TYPE_Q8_0, IFL_TYPE_Q8_0, IFL_TYPE_Q8_0, 38, 0},
};
#define N_MIXES (sizeof(mixes) / sizeof(mixes[0]))

/* The type of the expert matrices: MXFP4 in llama-quantize's MXFP4_MOE
 * mix (everything else Q8_0), else the type the dense FFN would take. */
static enum ifl_type exps_type(const struct mix *m, enum ifl_type dense)
{
    return strcmp(m->name, "mxfp4_moe") == 0 ? IFL_TYPE_MXFP4 : dense;
}

struct opts {
    const char *out;
    const char *vocab;
    enum arch arch;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, head_dim, ctx;
    int64_t n_expert, n_expert_used; /* 0: a dense FFN */
    const struct mix *mix;
    int tied;
    int rope_freqs;
    double rope_base; /* 0: default */
    /* gemma2 / gemma3 / phi3 (write_arch_tensors) */
    int64_t n_swa;           /* sliding window; 0: the architecture's default */
    const char *swa_pattern; /* --swa-pattern: P (a uint32) or 0/1 per layer; NULL: none */
    double attn_softcap, final_softcap; /* --softcap; < 0: the architecture's default */
    int64_t ctx_orig;                   /* phi3 LongRoPE's original context; 0: ctx / 32 */
    double yarn_factor;                 /* --yarn (gpt-oss); < 0: the default, 32 */
    int64_t yarn_orig;                  /* its original context; 0: ctx / factor */
    uint64_t seed;
    int64_t swap_a, swap_b;  /* --swap-tokens; -1: none */
    const char *add_control; /* --add-control: texts separated by ',', or NULL */
    /* --eagle3 TARGET: an EAGLE-3 head for that model instead */
    const char *eagle3;
    int64_t extract[3];
    int n_extract;      /* given with --extract, else 0 */
    int32_t *draft_map; /* --draft-map: the target id of each draft id */
    int64_t n_draft;    /* --draft-vocab or the map's length; 0: the target's vocabulary */
    /* --lora-of BASE: an adapter for that model instead */
    const char *lora_of;
    int64_t rank;
    double alpha;
    unsigned lora_targets; /* bit i: LORA_T_* */
    enum ifl_type lora_type;
};

/* --lora-targets names, in bit order: the seven per-layer projections (in
 * enum ifl_lora_target's order), then token_embd and output. */
static const char *const lora_target_flags[] = {"q",  "k",    "v",    "o",     "gate",
                                                "up", "down", "embd", "output"};
static const char *const lora_layer_names[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                               "ffn_gate", "ffn_up", "ffn_down"};
#define LORA_T_EMBD 7
#define LORA_T_OUTPUT 8
#define LORA_T_DEFAULT 0x7fu

static const char usage[] =
    "usage: mkmodel -o OUT.gguf --vocab FROM.gguf [--preset small-110m|tinyllama-1.1b]\n"
    "               [--arch llama|qwen2|qwen3|qwen3moe|gemma2|gemma3|phi3|gpt-oss]\n"
    "               [--n-embd N] [--yarn FACTOR[,ORIG_CTX]]   (YaRN: gpt-oss)\n"
    "               [--n-layer N] [--n-head N] [--n-swa N] [--softcap ATTN,FINAL]\n"
    "               [--swa-pattern P|B0,B1,...]\n"
    "               [--ctx-orig N] [--n-head-kv N] [--n-ff N] [--head-dim N] [--ctx N]\n"
    "               [--n-expert N --n-expert-used K]   (experts: qwen3moe, gpt-oss, llama)\n"
    "               [--type f32|f16|bf16|q8_0|q4_0|q5_0|q5_1|iq4_nl|iq4_xs|\n"
    "                      q2_k|q3_k|q4_k|q5_k|q6_k|q4_k_m|q5_k_m|q3_k_m|q3_k_l|iq4_xs_mix|\n"
    "                      mxfp4|mxfp4_moe]\n"
    "               [--tied] [--rope-freqs] [--rope-base F] [--seed S]\n"
    "               [--swap-tokens A,B] [--add-control T1,T2,...]\n"
    "       mkmodel -o HEAD.gguf --eagle3 TARGET.gguf [--extract L0,L1,L2]\n"
    "               [--draft-vocab N | --draft-map T0,T1,...] [--n-head N] [--n-head-kv N]\n"
    "               [--n-ff N] [--type f32|f16|bf16|q8_0] [--seed S]\n"
    "       mkmodel -o ADAPTER.gguf --lora-of BASE.gguf [--rank R] [--alpha A]\n"
    "               [--lora-targets q,k,v,o,gate,up,down,embd,output]\n"
    "               [--lora-type f32|f16|bf16|q8_0] [--seed S]\n"
    "               (a LoRA adapter: rank 8, alpha 8, the seven projections, f32 by default)\n"
    "       mkmodel -o MMPROJ.gguf --mmproj [...]   (a vision projector: mkmodel --mmproj "
    "--help)\n";

static int bad_arg(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "mkmodel: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see mkmodel --help)\n");
    return 2;
}

/* Parses a decimal integer in [lo, hi]; 0 on success. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
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

/* Option ids for "given on the command line" bookkeeping. */
enum {
    O_EMBD,
    O_LAYER,
    O_HEAD,
    O_HEAD_KV,
    O_FF,
    O_HEAD_DIM,
    O_CTX,
    O_EXP,
    O_EXP_USED,
    O_SWA,
    O_CTX_ORIG,
    O_COUNT
};

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct {
        const char *flag;
        int id;
        int64_t lo, hi;
    } ints[] = {
        {"--n-embd", O_EMBD, 1, 1 << 16},
        {"--n-layer", O_LAYER, 1, 1024},
        {"--n-head", O_HEAD, 1, 1024},
        {"--n-head-kv", O_HEAD_KV, 1, 1024},
        {"--n-ff", O_FF, 1, 1 << 18},
        {"--head-dim", O_HEAD_DIM, 2, 4096},
        {"--ctx", O_CTX, 1, 1 << 24},
        {"--n-swa", O_SWA, 1, 1 << 24},
        {"--ctx-orig", O_CTX_ORIG, 1, 1 << 24},
        {"--n-expert", O_EXP, 1, 1024},
        {"--n-expert-used", O_EXP_USED, 1, 1024},
    };
    int64_t val[O_COUNT];
    int given[O_COUNT] = {0};
    const char *preset = NULL, *arch = NULL, *type = NULL;
    memset(o, 0, sizeof *o);
    o->seed = 1234;
    o->swap_a = o->swap_b = -1;
    o->rank = 8;
    o->alpha = -1; /* the rank unless given */
    o->lora_targets = LORA_T_DEFAULT;
    o->lora_type = IFL_TYPE_F32;
    o->attn_softcap = o->final_softcap = -1;
    o->yarn_factor = -1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            exit(0);
        }
        if (!strcmp(a, "--tied")) {
            o->tied = 1;
            continue;
        }
        if (!strcmp(a, "--rope-freqs")) {
            o->rope_freqs = 1;
            continue;
        }
        static const char *const value_flags[] = {
            "-o",          "--vocab",         "--preset",      "--arch",
            "--type",      "--rope-base",     "--seed",        "--n-embd",
            "--n-layer",   "--n-head",        "--n-head-kv",   "--n-ff",
            "--head-dim",  "--ctx",           "--swap-tokens", "--add-control",
            "--eagle3",    "--extract",       "--draft-vocab", "--draft-map",
            "--lora-of",   "--rank",          "--alpha",       "--lora-targets",
            "--lora-type", "--n-swa",         "--softcap",     "--ctx-orig",
            "--n-expert",  "--n-expert-used", "--swa-pattern", "--yarn"};
        int known = 0;
        for (size_t k = 0; k < sizeof value_flags / sizeof value_flags[0]; k++)
            known |= !strcmp(a, value_flags[k]);
        if (!known)
            return bad_arg("unknown option '%s'%s", a, "");
        if (i + 1 >= argc)
            return bad_arg("%s needs a value%s", a, "");
        const char *v = argv[++i];
        int found = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
            if (strcmp(a, ints[k].flag))
                continue;
            found = 1;
            if (given[ints[k].id])
                return bad_arg("%s given twice%s", a, "");
            if (parse_int(v, ints[k].lo, ints[k].hi, &val[ints[k].id])) {
                char range[64];
                snprintf(range, sizeof range, " (want an integer in %lld..%lld)",
                         (long long)ints[k].lo, (long long)ints[k].hi);
                fprintf(stderr, "mkmodel: %s: bad value '%s'%s (see mkmodel --help)\n", a, v,
                        range);
                return 2;
            }
            given[ints[k].id] = 1;
        }
        if (found)
            continue;
        if (!strcmp(a, "-o")) {
            o->out = v;
        } else if (!strcmp(a, "--vocab")) {
            o->vocab = v;
        } else if (!strcmp(a, "--preset")) {
            preset = v;
        } else if (!strcmp(a, "--arch")) {
            arch = v;
        } else if (!strcmp(a, "--type")) {
            type = v;
        } else if (!strcmp(a, "--rope-base")) {
            char *end;
            errno = 0;
            o->rope_base = strtod(v, &end);
            if (errno || *end || !*v || !(o->rope_base > 1.0) || !isfinite(o->rope_base) ||
                o->rope_base > 1e12)
                return bad_arg("--rope-base: bad value '%s' (want a number > 1)%s", v, "");
        } else if (!strcmp(a, "--swap-tokens")) {
            char ab[64];
            const char *comma = strchr(v, ',');
            if (!comma || strlen(v) >= sizeof ab)
                return bad_arg("--swap-tokens: bad value '%s' (want A,B: two token ids)%s", v, "");
            memcpy(ab, v, (size_t)(comma - v));
            ab[comma - v] = 0;
            if (parse_int(ab, 0, (1 << 24) - 1, &o->swap_a) ||
                parse_int(comma + 1, 0, (1 << 24) - 1, &o->swap_b) || o->swap_a == o->swap_b)
                return bad_arg("--swap-tokens: bad value '%s' (want A,B: two token ids)%s", v, "");
        } else if (!strcmp(a, "--add-control")) {
            if (!*v || strstr(v, ",,") || *v == ',' || v[strlen(v) - 1] == ',' || strlen(v) > 4096)
                return bad_arg("--add-control: bad value '%s' (want T1,T2,...: texts)%s", v, "");
            o->add_control = v;
        } else if (!strcmp(a, "--softcap")) {
            char *end;
            errno = 0;
            o->attn_softcap = strtod(v, &end);
            int ok = !errno && end != v && *end == ',';
            if (ok) {
                const char *f = end + 1;
                o->final_softcap = strtod(f, &end);
                ok = !errno && end != f && !*end;
            }
            if (!ok || !(o->attn_softcap >= 0 && o->attn_softcap <= 1e6) ||
                !(o->final_softcap >= 0 && o->final_softcap <= 1e6))
                return bad_arg("--softcap: bad value '%s' (want ATTN,FINAL: two numbers in 0..1e6, "
                               "0 for none)%s",
                               v, "");
        } else if (!strcmp(a, "--swa-pattern")) {
            int64_t p;
            int ok = parse_int(v, 0, UINT32_MAX, &p) == 0;
            if (!ok && strchr(v, ',')) { /* a per-layer list of 0 and 1 */
                ok = 1;
                for (const char *c = v; *c; c++)
                    ok &=
                        c == v || c[-1] == ',' ? (*c == '0' || *c == '1') : *c == ',' && c[1] != 0;
            }
            if (!ok)
                return bad_arg("--swa-pattern: bad value '%s' (want a period in 0..4294967295 or "
                               "a list of 0 and 1 per layer)%s",
                               v, "");
            o->swa_pattern = v;
        } else if (!strcmp(a, "--yarn")) {
            char *end;
            errno = 0;
            o->yarn_factor = strtod(v, &end);
            int ok = !errno && end != v && (*end == ',' || !*end);
            if (ok && *end == ',') {
                const char *c = end + 1;
                ok = !parse_int(c, 1, 1 << 24, &o->yarn_orig);
            }
            if (!ok || !(o->yarn_factor == 0 || (o->yarn_factor >= 1 && o->yarn_factor <= 1e6)))
                return bad_arg("--yarn: bad value '%s' (want FACTOR[,ORIG_CTX]: FACTOR 0 for none "
                               "or 1..1e6)%s",
                               v, "");
        } else if (!strcmp(a, "--eagle3")) {
            o->eagle3 = v;
        } else if (!strcmp(a, "--lora-of")) {
            o->lora_of = v;
        } else if (!strcmp(a, "--rank")) {
            if (parse_int(v, 1, 4096, &o->rank))
                return bad_arg("--rank: bad value '%s' (want 1..4096)%s", v, "");
        } else if (!strcmp(a, "--alpha")) {
            char *end;
            errno = 0;
            o->alpha = strtod(v, &end);
            if (errno || *end || !*v || !isfinite(o->alpha) || o->alpha < 0 || o->alpha > 1e6)
                return bad_arg("--alpha: bad value '%s' (want a number in 0..1e6)%s", v, "");
        } else if (!strcmp(a, "--lora-targets")) {
            o->lora_targets = 0;
            for (const char *p = v; *p;) {
                size_t n = strcspn(p, ",");
                int hit = 0;
                for (unsigned k = 0; k < sizeof lora_target_flags / sizeof *lora_target_flags; k++)
                    if (strlen(lora_target_flags[k]) == n && !memcmp(p, lora_target_flags[k], n)) {
                        o->lora_targets |= 1u << k;
                        hit = 1;
                    }
                if (!hit)
                    return bad_arg("--lora-targets: bad value '%s' (want a comma-separated list "
                                   "of q,k,v,o,gate,up,down,embd,output)%s",
                                   v, "");
                p += n + (p[n] == ',');
            }
            if (!o->lora_targets)
                return bad_arg("--lora-targets: bad value '%s' (empty)%s", v, "");
        } else if (!strcmp(a, "--lora-type")) {
            static const enum ifl_type lt[] = {IFL_TYPE_F32, IFL_TYPE_F16, IFL_TYPE_BF16,
                                               IFL_TYPE_Q8_0};
            int hit = 0;
            for (size_t k = 0; k < 4; k++)
                if (!strcmp(v, ifl_type_info(lt[k])->name)) {
                    o->lora_type = lt[k];
                    hit = 1;
                }
            if (!hit)
                return bad_arg("--lora-type: unknown type '%s' (want f32, f16, bf16 or q8_0)%s", v,
                               "");
        } else if (!strcmp(a, "--extract")) {
            char *end = NULL;
            const char *p = v;
            for (o->n_extract = 0; o->n_extract < 3; o->n_extract++) {
                errno = 0;
                o->extract[o->n_extract] = strtoll(p, &end, 10);
                if (errno || end == p || (o->n_extract < 2 ? *end != ',' : *end != 0))
                    return bad_arg("--extract: bad value '%s' (want three layers, L0,L1,L2)%s", v,
                                   "");
                p = end + 1;
            }
        } else if (!strcmp(a, "--draft-vocab")) {
            if (parse_int(v, 1, 1 << 24, &o->n_draft))
                return bad_arg("--draft-vocab: bad value '%s' (want 1..16777216)%s", v, "");
        } else if (!strcmp(a, "--draft-map")) {
            int64_t n = 1;
            for (const char *c = v; *c; c++)
                n += *c == ',';
            free(o->draft_map);
            o->draft_map = malloc(sizeof(int32_t) * (size_t)n);
            if (!o->draft_map)
                return bad_arg("out of memory%s%s", "", "");
            const char *p = v;
            for (int64_t k = 0; k < n; k++) {
                char *end;
                errno = 0;
                long long t = strtoll(p, &end, 10);
                if (errno || end == p || t < 0 || t > INT32_MAX || (*end && *end != ','))
                    return bad_arg("--draft-map: bad value '%s' (want token ids, T0,T1,...)%s", v,
                                   "");
                o->draft_map[k] = (int32_t)t;
                p = end + 1;
            }
            o->n_draft = n;
        } else if (!strcmp(a, "--seed")) {
            int64_t s;
            if (parse_int(v, 0, INT64_MAX, &s))
                return bad_arg("--seed: bad value '%s' (want a non-negative integer)%s", v, "");
            o->seed = (uint64_t)s;
        }
    }
    if (!o->out || !*o->out)
        return bad_arg("missing -o OUT.gguf%s%s", "", "");
    if ((!o->vocab || !*o->vocab) && !o->eagle3 && !o->lora_of)
        return bad_arg("missing --vocab FROM.gguf%s%s", "", "");
    if (o->lora_of) {
        if (o->eagle3 || o->vocab || preset || arch || type)
            return bad_arg("--lora-of takes no --vocab, --eagle3, --preset, --arch or --type (the "
                           "base fixes them)%s%s",
                           "", "");
        if (o->alpha < 0)
            o->alpha = (double)o->rank;
        return 0;
    }
    if (o->eagle3) { /* the rest is the target's */
        o->mix = &mixes[1];
        for (size_t k = 0; type && k < N_MIXES; k++)
            if (!strcmp(type, mixes[k].name))
                o->mix = &mixes[k];
        if (type && strcmp(o->mix->name, type))
            return bad_arg("--type: unknown type '%s'%s", type, "");
        o->n_head = given[O_HEAD] ? val[O_HEAD] : 0;
        o->n_head_kv = given[O_HEAD_KV] ? val[O_HEAD_KV] : 0;
        o->n_ff = given[O_FF] ? val[O_FF] : 0;
        return 0;
    }

    /* Defaults, then the preset, then explicit options. */
    int64_t d[O_COUNT] = {256, 2, 4, 2, 512, 0, 512, 0, 0};
    if (preset) {
        if (!strcmp(preset, "small-110m")) {
            int64_t p[O_COUNT] = {768, 12, 12, 12, 2048, 0, 2048, 0, 0};
            memcpy(d, p, sizeof d);
        } else if (!strcmp(preset, "tinyllama-1.1b")) {
            int64_t p[O_COUNT] = {2048, 22, 32, 4, 5632, 0, 2048, 0, 0};
            memcpy(d, p, sizeof d);
        } else {
            return bad_arg("--preset: unknown preset '%s' (want small-110m or tinyllama-1.1b)%s",
                           preset, "");
        }
    }
    for (int k = 0; k < O_COUNT; k++)
        if (!given[k])
            val[k] = d[k];
    o->n_embd = val[O_EMBD];
    o->n_layer = val[O_LAYER];
    o->n_head = val[O_HEAD];
    o->n_head_kv = val[O_HEAD_KV];
    o->n_ff = val[O_FF];
    o->ctx = val[O_CTX];
    o->n_expert = val[O_EXP];
    o->n_expert_used = val[O_EXP_USED];
    o->n_swa = val[O_SWA];
    o->ctx_orig = val[O_CTX_ORIG];

    o->arch = ARCH_LLAMA;
    if (arch) {
        int ok = 0;
        for (int k = 0; k < N_ARCH; k++)
            if (!strcmp(arch, arch_names[k])) {
                o->arch = (enum arch)k;
                ok = 1;
            }
        if (!ok)
            return bad_arg("--arch: unknown architecture '%s' (want llama, qwen2, qwen3, "
                           "qwen3moe, gemma2, gemma3, phi3 or gpt-oss)%s",
                           arch, "");
    }
    const int oss = o->arch == ARCH_GPT_OSS;
    if ((o->arch == ARCH_QWEN3MOE || oss) && !o->n_expert)
        return bad_arg("--arch %s needs --n-expert N and --n-expert-used K%s", arch_names[o->arch],
                       "");
    if (o->n_expert && o->arch != ARCH_LLAMA && o->arch != ARCH_QWEN3MOE && !oss)
        return bad_arg("--n-expert needs --arch qwen3moe, gpt-oss or llama (Mixtral)%s%s", "", "");
    if (o->yarn_factor >= 0 && !oss)
        return bad_arg("--yarn needs --arch gpt-oss%s%s", "", "");
    if (oss && o->tied)
        return bad_arg("--arch gpt-oss takes no --tied (llama.cpp's gpt-oss has output.weight)%s%s",
                       "", "");
    if (!o->n_expert != !o->n_expert_used || o->n_expert_used > o->n_expert)
        return bad_arg("--n-expert N and --n-expert-used K go together, with K <= N%s%s", "", "");
    o->mix = &mixes[1]; /* f16 */
    if (type) {
        o->mix = NULL;
        for (size_t k = 0; k < N_MIXES; k++)
            if (!strcmp(type, mixes[k].name))
                o->mix = &mixes[k];
        if (!o->mix)
            return bad_arg("--type: unknown type '%s'%s", type, "");
    }

    if (o->n_head % o->n_head_kv)
        return bad_arg("--n-head must be a multiple of --n-head-kv%s%s", "", "");
    if (given[O_HEAD_DIM]) {
        o->head_dim = val[O_HEAD_DIM];
        if (o->arch != ARCH_QWEN3 && o->arch != ARCH_QWEN3MOE && o->arch != ARCH_GEMMA2 &&
            o->arch != ARCH_GEMMA3 && !oss && o->head_dim * o->n_head != o->n_embd)
            return bad_arg("--head-dim other than n_embd/n_head needs --arch qwen3, qwen3moe, "
                           "gemma2, gemma3 or gpt-oss%s%s",
                           "", "");
    } else {
        if (o->n_embd % o->n_head)
            return bad_arg("--n-embd must be a multiple of --n-head (or give --head-dim with "
                           "--arch qwen3)%s%s",
                           "", "");
        o->head_dim = o->n_embd / o->n_head;
    }
    if (o->head_dim % 2)
        return bad_arg("head_dim must be even for RoPE%s%s", "", "");
    if (o->n_head * o->head_dim > (1 << 18))
        return bad_arg("n_head * head_dim is too large%s%s", "", "");
    if (o->rope_base == 0)
        o->rope_base = o->rope_freqs            ? 500000.0
                       : o->arch == ARCH_GEMMA3 ? 1000000.0
                       : oss                    ? 150000.0
                                                : 10000.0;
    int gemma = o->arch == ARCH_GEMMA2 || o->arch == ARCH_GEMMA3;
    if (given[O_SWA] && !gemma && !oss)
        return bad_arg("--n-swa needs --arch gemma2, gemma3 or gpt-oss%s%s", "", "");
    if ((o->attn_softcap >= 0 || o->swa_pattern) && !gemma)
        return bad_arg("--swa-pattern and --softcap need --arch gemma2 or gemma3%s%s", "", "");
    if (oss) { /* gpt-oss's window 128, YaRN factor 32 over ctx / 32 */
        if (!o->n_swa)
            o->n_swa = 128;
        if (o->yarn_factor < 0)
            o->yarn_factor = 32;
        if (o->yarn_factor > 0 && !o->yarn_orig)
            o->yarn_orig =
                (int64_t)(o->ctx / o->yarn_factor) > 0 ? (int64_t)(o->ctx / o->yarn_factor) : 1;
    }
    if (given[O_CTX_ORIG] && o->arch != ARCH_PHI3)
        return bad_arg("--ctx-orig needs --arch phi3%s%s", "", "");
    if (o->arch == ARCH_PHI3 && (o->tied || o->rope_freqs))
        return bad_arg("--arch phi3 takes neither --tied nor --rope-freqs (it has LongRoPE "
                       "factors)%s%s",
                       "", "");
    if (o->arch == ARCH_GEMMA2) /* llama.cpp's gemma2 has no output.weight */
        o->tied = 1;
    if (!o->n_swa) /* Gemma 2's window, and Gemma 3's from 4B up */
        o->n_swa = o->arch == ARCH_GEMMA2 ? 4096 : 1024;
    if (o->attn_softcap < 0) /* Gemma 2's; Gemma 3 has none */
        o->attn_softcap = o->arch == ARCH_GEMMA2 ? 50.0 : 0.0;
    if (o->final_softcap < 0)
        o->final_softcap = o->arch == ARCH_GEMMA2 ? 30.0 : 0.0;
    if (!o->ctx_orig)
        o->ctx_orig = o->ctx / 32 > 0 ? o->ctx / 32 : 1;
    return 0;
}

/* ---- tensor generation -------------------------------------------- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* One matrix (or vector) to draw and convert: rows of row_len values
 * mean + std * N(0, 1), converted to `type`. Chunks of whole rows are handed
 * out round-robin to the pool's threads. */
struct gen_job {
    int64_t rows, row_len, chunk_rows, n_chunks;
    enum ifl_type type;
    size_t row_size;
    float mean, std;
    uint64_t seed;
    uint8_t *out;
    float **scratch; /* [nth] -> chunk_rows * row_len floats */
    ifl_quant_fn quant;
};

/* Two standard normals from one Box-Muller step. ifl_rng_normal spends a
 * log and a cos on each draw; for the 1.1G draws of a 1.1B model, using both
 * halves of the pair in float is three times faster. */
static void normal_pair(struct ifl_rng *r, float z[2])
{
    float u1 = ((float)(ifl_rng_next(r) >> 40) + 1.0f) * (1.0f / 16777216.0f); /* (0, 1] */
    float u2 = (float)(ifl_rng_next(r) >> 40) * (1.0f / 16777216.0f);          /* [0, 1) */
    float rad = sqrtf(-2.0f * logf(u1));
    float ang = 6.2831853f * u2;
    z[0] = rad * cosf(ang);
    z[1] = rad * sinf(ang);
}

static void gen_worker(void *arg, int ith, int nth)
{
    struct gen_job *j = arg;
    float *buf = j->scratch[ith];
    for (int64_t c = ith; c < j->n_chunks; c += nth) {
        int64_t r0 = c * j->chunk_rows;
        int64_t r1 = r0 + j->chunk_rows < j->rows ? r0 + j->chunk_rows : j->rows;
        int64_t n = (r1 - r0) * j->row_len;
        uint64_t s = j->seed ^ ((uint64_t)c * 0x9e3779b97f4a7c15ull);
        struct ifl_rng rng;
        ifl_rng_seed(&rng, s);
        for (int64_t i = 0; i < n; i += 2) {
            float z[2];
            normal_pair(&rng, z);
            buf[i] = j->mean + j->std * z[0];
            if (i + 1 < n)
                buf[i + 1] = j->mean + j->std * z[1];
        }
        for (int64_t r = r0; r < r1; r++)
            j->quant(buf + (r - r0) * j->row_len, j->out + (size_t)r * j->row_size, j->row_len);
    }
}

struct gen {
    struct ifl_gguf_writer *w;
    struct ifl_pool *pool;
    float **scratch;
    int nth;
    uint64_t seed;
    uint64_t bytes;
};

/* Picks a type the row length fits, warning when it is not the wanted one. */
static enum ifl_type fit_type(const char *name, enum ifl_type t, int64_t row_len)
{
    const struct ifl_type_info *ti = ifl_type_info(t);
    if (row_len % ti->blck == 0)
        return t;
    enum ifl_type f = row_len % 32 == 0 ? IFL_TYPE_Q8_0 : IFL_TYPE_F16;
    fprintf(stderr,
            "mkmodel: %s: row length %lld is not a multiple of %s's block of %lld; using %s\n",
            name, (long long)row_len, ti->name, (long long)ti->blck, ifl_type_info(f)->name);
    return f;
}

/* Draws a tensor of shape [ne0, ne1, ne2] (ne1 = 1 for vectors, ne2 = 1
 * but for experts) and adds it. */
static int add_random3(struct gen *g, const char *name, enum ifl_type type, int n_dims, int64_t ne0,
                       int64_t ne1, int64_t ne2, float mean, float std)
{
    struct gen_job j = {0};
    ne1 *= ne2; /* drawn as rows; written with its three dimensions */
    j.rows = ne1;
    j.row_len = ne0;
    j.type = type;
    j.row_size = ifl_type_row_size(type, ne0);
    j.mean = mean;
    j.std = std;
    j.seed = g->seed ^ name_hash(name);
    j.chunk_rows = CHUNK_ELEMS / ne0 > 0 ? CHUNK_ELEMS / ne0 : 1;
    j.n_chunks = (ne1 + j.chunk_rows - 1) / j.chunk_rows;
    j.quant = ifl_kernels_ref()->quant[type];
    if (!j.quant) {
        fprintf(stderr, "mkmodel: %s: no quantiser for type %s\n", name, ifl_type_info(type)->name);
        return -1;
    }
    size_t nbytes = j.row_size * (size_t)ne1;
    j.out = malloc(nbytes);
    if (!j.out) {
        fprintf(stderr, "mkmodel: %s: out of memory (%zu bytes)\n", name, nbytes);
        return -1;
    }
    /* Scratch sized for the widest chunk so far. */
    for (int t = 0; t < g->nth; t++) {
        float *p = realloc(g->scratch[t], (size_t)(j.chunk_rows * ne0) * sizeof(float));
        if (!p) {
            free(j.out);
            fprintf(stderr, "mkmodel: out of memory\n");
            return -1;
        }
        g->scratch[t] = p;
    }
    j.scratch = g->scratch;
    ifl_pool_run(g->pool, gen_worker, &j);
    int64_t ne[3] = {ne0, ne1 / ne2, ne2};
    int rc = ifl_gguf_writer_add_tensor(g->w, name, type, n_dims, ne, j.out, nbytes);
    free(j.out);
    if (rc) {
        fprintf(stderr, "mkmodel: %s: cannot add tensor: %s\n", name, ifl_strerror(rc));
        return -1;
    }
    g->bytes += nbytes;
    return 0;
}

static int add_random(struct gen *g, const char *name, enum ifl_type type, int n_dims, int64_t ne0,
                      int64_t ne1, float mean, float std)
{
    return add_random3(g, name, type, n_dims, ne0, ne1, 1, mean, std);
}

static int add_matrix(struct gen *g, const char *name, enum ifl_type type, int64_t n_in,
                      int64_t n_out)
{
    return add_random(g, name, fit_type(name, type, n_in), 2, n_in, n_out, 0.0f, W_STD);
}

static int add_vector(struct gen *g, const char *name, int64_t n, float mean, float std)
{
    return add_random(g, name, IFL_TYPE_F32, 1, n, 1, mean, std);
}

/* llama-quantize's use_more_bits: the first and last eighth of the layers
 * and every third layer in between. */
static int use_more_bits(int64_t i, int64_t n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Llama 3.1 rope factors as convert_hf_to_gguf computes them for rope_type
 * "llama3" (factor 8, low_freq_factor 1, high_freq_factor 4, original
 * context 8192): pair i's frequency is divided by factors[i]. */
static void llama3_factors(float *f, int64_t n_pairs, int64_t n_rot, double base)
{
    const double factor = 8.0, lo = 1.0, hi = 4.0, old_ctx = 8192.0;
    const double lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (int64_t i = 0; i < n_pairs; i++) {
        double freq = 1.0 / pow(base, (double)(2 * i) / (double)n_rot);
        double wavelen = 2.0 * M_PI / freq;
        if (wavelen < hi_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > lo_wavelen) {
            f[i] = (float)factor;
        } else {
            double smooth = (old_ctx / wavelen - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
        }
    }
}

/* phi3's LongRoPE factors, F32 like the converter's: short ones near 1,
 * long ones growing from 1 at the fastest pair to 16 at the slowest (the
 * shape of Phi-3's: low frequencies stretched most). */
static int add_longrope(struct gen *g, int64_t hd)
{
    int64_t half = hd / 2, ne[1] = {half};
    float *f = malloc((size_t)half * 2 * sizeof(float));
    if (!f)
        return -1;
    for (int64_t i = 0; i < half; i++) {
        double t = half > 1 ? (double)i / (double)(half - 1) : 0.0;
        f[i] = (float)(1.0 + 0.1 * t);             /* short */
        f[half + i] = (float)(1.0 + 15.0 * t * t); /* long */
    }
    int rc = ifl_gguf_writer_add_tensor(g->w, "rope_factors_short.weight", IFL_TYPE_F32, 1, ne, f,
                                        (size_t)half * sizeof(float));
    if (!rc)
        rc = ifl_gguf_writer_add_tensor(g->w, "rope_factors_long.weight", IFL_TYPE_F32, 1, ne,
                                        f + half, (size_t)half * sizeof(float));
    free(f);
    return rc ? -1 : 0;
}

/* tokenizer.ggml.tokens with the texts of ids a and b exchanged. */
/* `attention.sliding_window_pattern`: a uint32 period, or (a list) one
 * bool per entry, as llama.cpp's gguf_writer writes either form. */
static int write_swa_pattern(struct ifl_gguf_writer *w, const char *an, const char *v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", an);
    if (!strchr(v, ','))
        return ifl_gguf_writer_set_u32(w, key, (uint32_t)strtoul(v, NULL, 10));
    uint8_t b[1024];
    uint64_t n = 0;
    for (const char *c = v; *c && n < sizeof b; c++)
        if (*c != ',')
            b[n++] = *c == '1';
    return ifl_gguf_writer_set_arr(w, key, IFL_GGUF_BOOL, b, n);
}

/* How many tokens --add-control appends. */
static uint64_t n_added(const struct opts *o)
{
    uint64_t n = o->add_control ? 1 : 0;
    for (const char *c = o->add_control; c && *c; c++)
        n += *c == ',';
    return n;
}

/* tokenizer.ggml.tokens with the texts of ids swap_a and swap_b exchanged,
 * and the --add-control texts appended. */
static int write_tokens(struct ifl_gguf_writer *w, const struct ifl_gguf_value *arr,
                        const struct opts *o)
{
    int64_t a = o->swap_a, b = o->swap_b;
    if (a >= 0 && ((uint64_t)a >= arr->n || (uint64_t)b >= arr->n)) {
        fprintf(stderr, "mkmodel: --swap-tokens %lld,%lld: the vocabulary has %llu tokens\n",
                (long long)a, (long long)b, (unsigned long long)arr->n);
        return IFL_EINVAL;
    }
    uint64_t n = arr->n + n_added(o);
    const char **strs = malloc(sizeof(char *) * n);
    size_t *lens = malloc(sizeof(size_t) * n);
    int rc = strs && lens ? 0 : IFL_ENOMEM;
    for (uint64_t i = 0; !rc && i < arr->n; i++)
        rc = ifl_gguf_arr_str(arr, i, &strs[i], &lens[i]);
    if (!rc && a >= 0) {
        const char *ts = strs[a];
        size_t tl = lens[a];
        strs[a] = strs[b], lens[a] = lens[b];
        strs[b] = ts, lens[b] = tl;
    }
    const char *c = o->add_control;
    for (uint64_t i = arr->n; !rc && i < n; i++) {
        strs[i] = c;
        lens[i] = strcspn(c, ",");
        c += lens[i] + 1;
    }
    if (!rc)
        rc = ifl_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, lens, n);
    free(strs);
    free(lens);
    return rc;
}

/* A per-token array (scores, token types) with one element per added
 * token: score 0, type control (3). */
static int write_extended(struct ifl_gguf_writer *w, const struct ifl_gguf_value *arr,
                          const char *key, const struct opts *o)
{
    int is_f32 = arr->elem_type == IFL_GGUF_FLOAT32;
    if (!is_f32 && arr->elem_type != IFL_GGUF_INT32)
        return IFL_EFORMAT;
    uint64_t n = arr->n + n_added(o);
    uint32_t *d = malloc(sizeof(uint32_t) * n);
    int rc = d ? 0 : IFL_ENOMEM;
    for (uint64_t i = 0; !rc && i < n; i++) {
        double f = 0;
        int64_t v = 3;
        if (i < arr->n)
            rc = is_f32 ? ifl_gguf_arr_float(arr, i, &f) : ifl_gguf_arr_int(arr, i, &v);
        float ff = (float)f;
        int32_t vv = (int32_t)v;
        if (is_f32)
            memcpy(&d[i], &ff, 4);
        else
            memcpy(&d[i], &vv, 4);
    }
    if (!rc)
        rc = ifl_gguf_writer_set_arr(w, key, arr->elem_type, d, n);
    free(d);
    return rc;
}

static int copy_tokenizer(struct ifl_gguf_writer *w, const struct ifl_gguf *v, const struct opts *o)
{
    int64_t n = ifl_gguf_n_kv(v);
    for (int64_t i = 0; i < n; i++) {
        if (strncmp(ifl_gguf_key(v, i), "tokenizer.", 10))
            continue;
        const char *key = ifl_gguf_key(v, i);
        int tok = !strcmp(key, "tokenizer.ggml.tokens");
        int per_token =
            !strcmp(key, "tokenizer.ggml.scores") || !strcmp(key, "tokenizer.ggml.token_type");
        struct ifl_gguf_value arr;
        int rc = 0;
        if ((tok && (o->swap_a >= 0 || o->add_control)) || (per_token && o->add_control)) {
            rc = ifl_gguf_get_arr(v, key, &arr, NULL);
            if (!rc && (tok ? arr.elem_type != IFL_GGUF_STRING : 0))
                rc = IFL_EFORMAT;
            if (!rc)
                rc = tok ? write_tokens(w, &arr, o) : write_extended(w, &arr, key, o);
        } else {
            rc = ifl_gguf_writer_copy_kv(w, v, i);
        }
        if (rc) {
            fprintf(stderr, "mkmodel: copying %s: %s\n", ifl_gguf_key(v, i), ifl_strerror(rc));
            return -1;
        }
    }
    return 0;
}

static int set_key_u32(struct ifl_gguf_writer *w, const char *arch, const char *suffix, uint32_t v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return ifl_gguf_writer_set_u32(w, key, v);
}

static int set_key_f32(struct ifl_gguf_writer *w, const char *arch, const char *suffix, float v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return ifl_gguf_writer_set_f32(w, key, v);
}

static int write_metadata(struct ifl_gguf_writer *w, const struct opts *o, int64_t n_vocab)
{
    const char *an = arch_names[o->arch];
    char name[128];
    /* llama.cpp's vocabulary loader marks tokens of Phi-3's own vocabulary
     * for a model named like "phi3" (and fails on one without them): the
     * name of a phi3 over a copied vocabulary must not say so */
    snprintf(name, sizeof name, "mkmodel-%s-%lldx%lld-%s", o->arch == ARCH_PHI3 ? "p-3" : an,
             (long long)o->n_embd, (long long)o->n_layer, o->mix->name);
    int rc = 0;
    rc |= ifl_gguf_writer_set_str(w, "general.architecture", an, strlen(an));
    rc |= ifl_gguf_writer_set_str(w, "general.name", name, strlen(name));
    rc |= set_key_u32(w, an, "context_length", (uint32_t)o->ctx);
    rc |= set_key_u32(w, an, "embedding_length", (uint32_t)o->n_embd);
    rc |= set_key_u32(w, an, "block_count", (uint32_t)o->n_layer);
    rc |= set_key_u32(w, an, "feed_forward_length", (uint32_t)o->n_ff);
    rc |= set_key_u32(w, an, "attention.head_count", (uint32_t)o->n_head);
    rc |= set_key_u32(w, an, "attention.head_count_kv", (uint32_t)o->n_head_kv);
    if (o->head_dim * o->n_head != o->n_embd) {
        rc |= set_key_u32(w, an, "attention.key_length", (uint32_t)o->head_dim);
        rc |= set_key_u32(w, an, "attention.value_length", (uint32_t)o->head_dim);
    }
    rc |= set_key_f32(w, an, "rope.freq_base", (float)o->rope_base);
    rc |= set_key_f32(
        w, an, "attention.layer_norm_rms_epsilon",
        o->arch == ARCH_LLAMA || o->arch == ARCH_PHI3 || o->arch == ARCH_GPT_OSS ? 1e-5f : 1e-6f);
    if (o->arch == ARCH_GPT_OSS) { /* as conversion/gpt_oss.py writes it */
        rc |= set_key_u32(w, an, "attention.sliding_window", (uint32_t)o->n_swa);
        if (o->yarn_factor > 0) {
            const char *y = "yarn";
            char key[128];
            snprintf(key, sizeof key, "%s.rope.scaling.type", an);
            rc |= ifl_gguf_writer_set_str(w, key, y, strlen(y));
            rc |= set_key_f32(w, an, "rope.scaling.factor", (float)o->yarn_factor);
            rc |=
                set_key_u32(w, an, "rope.scaling.original_context_length", (uint32_t)o->yarn_orig);
        }
    }
    if (o->arch == ARCH_GEMMA2 || o->arch == ARCH_GEMMA3) {
        rc |= set_key_u32(w, an, "attention.sliding_window", (uint32_t)o->n_swa);
        if (o->swa_pattern)
            rc |= write_swa_pattern(w, an, o->swa_pattern);
        if (o->arch == ARCH_GEMMA3)
            rc |= set_key_f32(w, an, "rope.freq_base_swa", 10000.0f);
        if (o->attn_softcap > 0)
            rc |= set_key_f32(w, an, "attn_logit_softcapping", (float)o->attn_softcap);
        /* gemma2 without the key would take llama.cpp's default, 30 */
        if (o->final_softcap > 0 || o->arch == ARCH_GEMMA2)
            rc |= set_key_f32(w, an, "final_logit_softcapping", (float)o->final_softcap);
    }
    if (o->arch == ARCH_PHI3) { /* as convert_hf_to_gguf writes LongRoPE */
        double scale = (double)o->ctx / (double)o->ctx_orig;
        rc |= set_key_u32(w, an, "rope.scaling.original_context_length", (uint32_t)o->ctx_orig);
        rc |=
            set_key_f32(w, an, "rope.scaling.attn_factor",
                        scale > 1 ? (float)sqrt(1 + log(scale) / log((double)o->ctx_orig)) : 1.0f);
    }
    rc |= set_key_u32(w, an, "rope.dimension_count", (uint32_t)o->head_dim);
    rc |= set_key_u32(w, an, "vocab_size", (uint32_t)n_vocab);
    if (o->n_expert) {
        rc |= set_key_u32(w, an, "expert_count", (uint32_t)o->n_expert);
        rc |= set_key_u32(w, an, "expert_used_count", (uint32_t)o->n_expert_used);
        if (o->arch == ARCH_QWEN3MOE || o->arch == ARCH_GPT_OSS)
            rc |= set_key_u32(w, an, "expert_feed_forward_length", (uint32_t)o->n_ff);
    }
    rc |= ifl_gguf_writer_set_u32(w, "general.quantization_version", 2);
    rc |= ifl_gguf_writer_set_u32(w, "general.file_type", o->mix->file_type);
    return rc ? -1 : 0;
}

#include "mkmodel_mix.h"

/* One gpt-oss layer in llama.cpp's names: Q/K/V and output with biases,
 * the sinks (N(0, 1): logits of the scores' size, so they matter), the
 * pre-FFN norm as post_attention_norm, the router and experts with biases
 * (the experts' in the mix's type, MXFP4 for mxfp4_moe). */
static int write_oss_layer(struct gen *g, const struct opts *o, int64_t l, enum ifl_type more)
{
    const struct mix *m = o->mix;
    const int64_t E = o->n_embd, hd = o->head_dim, X = o->n_expert, F = o->n_ff;
    const int64_t q_dim = o->n_head * hd, kv_dim = o->n_head_kv * hd;
    char nm[96];
#define NM(suffix) (snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l), nm)
    if (add_vector(g, NM("attn_norm.weight"), E, 1.0f, NORM_STD) ||
        add_matrix(g, NM("attn_q.weight"), m->main, E, q_dim) ||
        add_vector(g, NM("attn_q.bias"), q_dim, 0.0f, BIAS_STD) ||
        add_matrix(g, NM("attn_k.weight"), m->main, E, kv_dim) ||
        add_vector(g, NM("attn_k.bias"), kv_dim, 0.0f, BIAS_STD) ||
        add_matrix(g, NM("attn_v.weight"), more, E, kv_dim) ||
        add_vector(g, NM("attn_v.bias"), kv_dim, 0.0f, BIAS_STD) ||
        add_matrix(g, NM("attn_output.weight"), m->main, q_dim, E) ||
        add_vector(g, NM("attn_output.bias"), E, 0.0f, BIAS_STD) ||
        add_vector(g, NM("attn_sinks.weight"), o->n_head, 0.0f, 1.0f) ||
        add_vector(g, NM("post_attention_norm.weight"), E, 1.0f, NORM_STD) ||
        add_random(g, NM("ffn_gate_inp.weight"), IFL_TYPE_F32, 2, E, X, 0.0f, ROUTER_STD) ||
        add_vector(g, NM("ffn_gate_inp.bias"), X, 0.0f, ROUTER_STD) ||
        add_random3(g, NM("ffn_gate_exps.weight"),
                    fit_type("ffn_gate_exps", exps_type(m, m->main), E), 3, E, F, X, 0.0f, W_STD) ||
        add_random(g, NM("ffn_gate_exps.bias"), IFL_TYPE_F32, 2, F, X, 0.0f, OSS_EXP_BIAS_STD) ||
        add_random3(g, NM("ffn_up_exps.weight"), fit_type("ffn_up_exps", exps_type(m, m->main), E),
                    3, E, F, X, 0.0f, W_STD) ||
        add_random(g, NM("ffn_up_exps.bias"), IFL_TYPE_F32, 2, F, X, 0.0f, OSS_EXP_BIAS_STD) ||
        add_random3(g, NM("ffn_down_exps.weight"), fit_type("ffn_down_exps", exps_type(m, more), F),
                    3, F, E, X, 0.0f, W_STD) ||
        add_random(g, NM("ffn_down_exps.bias"), IFL_TYPE_F32, 2, E, X, 0.0f, BIAS_STD))
        return -1;
#undef NM
    return 0;
}

static int write_tensors(struct gen *g, const struct opts *o, int64_t n_vocab)
{
    const struct mix *m = o->mix;
    const int64_t E = o->n_embd, hd = o->head_dim;
    const int64_t q_dim = o->n_head * hd, kv_dim = o->n_head_kv * hd;
    char nm[96];

    if (add_matrix(g, "token_embd.weight", mix_type(o, C_EMBD, 0, E, o->tied ? m->output : m->main),
                   E, n_vocab))
        return -1;
    if (o->rope_freqs) {
        int64_t n_pairs = hd / 2;
        float *f = malloc((size_t)n_pairs * sizeof(float));
        if (!f)
            return -1;
        llama3_factors(f, n_pairs, hd, o->rope_base);
        int64_t ne[1] = {n_pairs};
        int rc = ifl_gguf_writer_add_tensor(g->w, "rope_freqs.weight", IFL_TYPE_F32, 1, ne, f,
                                            (size_t)n_pairs * sizeof(float));
        free(f);
        if (rc)
            return -1;
    }
    if (o->arch == ARCH_PHI3 && add_longrope(g, hd))
        return -1;
    const int gemma = o->arch == ARCH_GEMMA2 || o->arch == ARCH_GEMMA3;
    for (int64_t l = 0; l < o->n_layer; l++) {
        enum ifl_type more = use_more_bits(l, o->n_layer) ? m->more : m->main;
#define NM(suffix) (snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l), nm)
        if (o->arch == ARCH_GPT_OSS) {
            if (write_oss_layer(g, o, l, more))
                return -1;
            continue;
        }
        if (o->arch == ARCH_PHI3) { /* fused: q, k, v rows; gate, up rows */
            if (add_vector(g, NM("attn_norm.weight"), E, 1.0f, NORM_STD) ||
                add_matrix(g, NM("attn_qkv.weight"), mix_type(o, C_V, l, E, m->main), E,
                           q_dim + 2 * kv_dim) ||
                add_matrix(g, NM("attn_output.weight"), mix_type(o, C_ATTN_OUT, l, q_dim, m->main),
                           q_dim, E) ||
                add_vector(g, NM("ffn_norm.weight"), E, 1.0f, NORM_STD) ||
                add_matrix(g, NM("ffn_up.weight"), mix_type(o, C_UP, l, E, m->main), E,
                           2 * o->n_ff) ||
                add_matrix(g, NM("ffn_down.weight"), mix_type(o, C_DOWN, l, o->n_ff, more), o->n_ff,
                           E))
                return -1;
            continue;
        }
        if (add_vector(g, NM("attn_norm.weight"), E, 1.0f, NORM_STD) ||
            add_matrix(g, NM("attn_q.weight"), mix_type(o, C_Q, l, E, m->main), E, q_dim) ||
            add_matrix(g, NM("attn_k.weight"), mix_type(o, C_K, l, E, m->main), E, kv_dim) ||
            add_matrix(g, NM("attn_v.weight"), mix_type(o, C_V, l, E, more), E, kv_dim))
            return -1;
        if (o->arch == ARCH_QWEN2 && (add_vector(g, NM("attn_q.bias"), q_dim, 0.0f, BIAS_STD) ||
                                      add_vector(g, NM("attn_k.bias"), kv_dim, 0.0f, BIAS_STD) ||
                                      add_vector(g, NM("attn_v.bias"), kv_dim, 0.0f, BIAS_STD)))
            return -1;
        if ((o->arch == ARCH_QWEN3 || o->arch == ARCH_QWEN3MOE || o->arch == ARCH_GEMMA3) &&
            (add_vector(g, NM("attn_q_norm.weight"), hd, 1.0f, NORM_STD) ||
             add_vector(g, NM("attn_k_norm.weight"), hd, 1.0f, NORM_STD)))
            return -1;
        if (gemma && (add_vector(g, NM("post_attention_norm.weight"), E, 1.0f, NORM_STD) ||
                      add_vector(g, NM("post_ffw_norm.weight"), E, 1.0f, NORM_STD)))
            return -1;
        if (add_matrix(g, NM("attn_output.weight"), mix_type(o, C_ATTN_OUT, l, q_dim, m->main),
                       q_dim, E) ||
            add_vector(g, NM("ffn_norm.weight"), E, 1.0f, NORM_STD))
            return -1;
        const int64_t X = o->n_expert;
        if (X &&
            (add_random(g, NM("ffn_gate_inp.weight"), IFL_TYPE_F32, 2, E, X, 0.0f, ROUTER_STD) ||
             add_random3(
                 g, NM("ffn_gate_exps.weight"),
                 fit_type("ffn_gate_exps", exps_type(m, mix_type(o, C_GATE, l, E, m->main)), E), 3,
                 E, o->n_ff, X, 0.0f, W_STD) ||
             add_random3(g, NM("ffn_up_exps.weight"),
                         fit_type("ffn_up_exps", exps_type(m, mix_type(o, C_UP, l, E, m->main)), E),
                         3, E, o->n_ff, X, 0.0f, W_STD) ||
             add_random3(g, NM("ffn_down_exps.weight"),
                         fit_type("ffn_down_exps",
                                  exps_type(m, mix_type(o, C_DOWN, l, o->n_ff, more)), o->n_ff),
                         3, o->n_ff, E, X, 0.0f, W_STD)))
            return -1;
        if (!X &&
            (add_matrix(g, NM("ffn_gate.weight"), mix_type(o, C_GATE, l, E, m->main), E, o->n_ff) ||
             add_matrix(g, NM("ffn_up.weight"), mix_type(o, C_UP, l, E, m->main), E, o->n_ff) ||
             add_matrix(g, NM("ffn_down.weight"), mix_type(o, C_DOWN, l, o->n_ff, more), o->n_ff,
                        E)))
            return -1;
#undef NM
    }
    if (add_vector(g, "output_norm.weight", E, 1.0f, NORM_STD))
        return -1;
    if (!o->tied &&
        add_matrix(g, "output.weight", mix_type(o, C_OUTPUT, 0, E, m->output), E, n_vocab))
        return -1;
    return 0;
}

/* ---- EAGLE-3 heads ------------------------------------------------ */

/* An EAGLE-3 head in llama.cpp's layout (src/model/eagle3.h) for target t:
 * its widths are the target's (heads and FFN unless given), random
 * weights as above, extract layers 2, n/2 and n-3 (clamped into the
 * target's, as the EAGLE-3 reference picks them) unless given, and d2t
 * the identity over the first n_draft ids, or --draft-map's ids. */
static int write_eagle3(struct gen *g, const struct opts *o, const struct ifl_model *t)
{
    const struct ifl_hparams *hp = &t->hp;
    const int64_t E = hp->n_embd, nl = hp->n_layer;
    const int64_t n_head = o->n_head ? o->n_head : hp->n_head;
    const int64_t n_kv = o->n_head_kv           ? o->n_head_kv
                         : n_head == hp->n_head ? hp->n_head_kv
                                                : n_head;
    const int64_t n_ff = o->n_ff ? o->n_ff : hp->n_ff;
    const int64_t hd = E / n_head;
    const int64_t n_draft = o->n_draft ? o->n_draft : hp->n_vocab;
    if (E % n_head || hd % 2 || n_head % n_kv || n_draft > hp->n_vocab) {
        fprintf(stderr,
                "mkmodel: --eagle3: %lld heads (%lld KV) and %lld draft tokens do not fit "
                "the target (n_embd %lld, vocabulary %d)\n",
                (long long)n_head, (long long)n_kv, (long long)n_draft, (long long)E, hp->n_vocab);
        return -1;
    }
    int32_t ex[3];
    for (int i = 0; i < 3; i++) {
        int64_t d = i == 0 ? 2 : i == 1 ? nl / 2 : nl - 3;
        ex[i] = (int32_t)(o->n_extract ? o->extract[i] : d < 0 ? 0 : d >= nl ? nl - 1 : d);
    }
    struct ifl_gguf_writer *w = g->w;
    const char *an = "eagle3";
    int rc = 0;
    rc |= ifl_gguf_writer_set_str(w, "general.architecture", an, strlen(an));
    rc |= ifl_gguf_writer_set_str(w, "general.name", "mkmodel-eagle3", 14);
    rc |= ifl_gguf_writer_set_arr(w, "eagle3.extract_layers", IFL_GGUF_INT32, ex, 3);
    rc |= set_key_u32(w, an, "context_length", (uint32_t)hp->n_ctx_train);
    rc |= set_key_u32(w, an, "embedding_length", (uint32_t)E);
    rc |= set_key_u32(w, an, "block_count", 1);
    rc |= set_key_u32(w, an, "feed_forward_length", (uint32_t)n_ff);
    rc |= set_key_u32(w, an, "attention.head_count", (uint32_t)n_head);
    rc |= set_key_u32(w, an, "attention.head_count_kv", (uint32_t)n_kv);
    rc |= set_key_f32(w, an, "rope.freq_base", hp->rope_base);
    rc |= set_key_f32(w, an, "attention.layer_norm_rms_epsilon", hp->rms_eps);
    rc |= set_key_u32(w, an, "vocab_size", (uint32_t)n_draft);
    if (rc)
        return -1;
    const enum ifl_type T = o->mix->main;
    if (add_matrix(g, "fc.weight", T, 3 * E, E) ||
        add_vector(g, "blk.0.attn_norm.weight", E, 1.0f, NORM_STD) ||
        add_vector(g, "blk.0.hidden_norm.weight", E, 1.0f, NORM_STD) ||
        add_matrix(g, "blk.0.attn_q.weight", T, 2 * E, n_head * hd) ||
        add_matrix(g, "blk.0.attn_k.weight", T, 2 * E, n_kv * hd) ||
        add_matrix(g, "blk.0.attn_v.weight", T, 2 * E, n_kv * hd) ||
        add_matrix(g, "blk.0.attn_output.weight", T, n_head * hd, E) ||
        add_vector(g, "blk.0.ffn_norm.weight", E, 1.0f, NORM_STD) ||
        add_matrix(g, "blk.0.ffn_gate.weight", T, E, n_ff) ||
        add_matrix(g, "blk.0.ffn_up.weight", T, E, n_ff) ||
        add_matrix(g, "blk.0.ffn_down.weight", T, n_ff, E) ||
        add_vector(g, "output_norm.weight", E, 1.0f, NORM_STD) ||
        add_matrix(g, "output.weight", T, E, n_draft))
        return -1;
    int64_t *d2t = malloc(sizeof(int64_t) * (size_t)n_draft);
    if (!d2t)
        return -1;
    for (int64_t d = 0; d < n_draft; d++)
        d2t[d] = o->draft_map ? o->draft_map[d] - d : 0;
    int64_t ne[1] = {n_draft};
    rc = ifl_gguf_writer_add_tensor(w, "d2t", IFL_TYPE_I64, 1, ne, d2t,
                                    sizeof(int64_t) * (size_t)n_draft);
    free(d2t);
    return rc ? -1 : 0;
}

/* ---- LoRA adapters ----------------------------------------------- */

/* The adapter's type for a row of row_len values: --lora-type, or F16
 * when its block does not divide the row (said once per file). */
static enum ifl_type lora_fit(const struct opts *o, int64_t row_len, int *warned)
{
    if (row_len % ifl_type_info(o->lora_type)->blck == 0)
        return o->lora_type;
    if (!*warned)
        fprintf(stderr,
                "mkmodel: rows of %lld values are not a multiple of %s's block of %lld; those "
                "tensors are f16\n",
                (long long)row_len, ifl_type_info(o->lora_type)->name,
                (long long)ifl_type_info(o->lora_type)->blck);
    *warned = 1;
    return IFL_TYPE_F16;
}

/* One adapted matrix of base shape [n_in, n_out] (ggml order): lora_a
 * [n_in, r] (token_embd: [r, n_vocab], transposed) and lora_b [r, n_out]. */
static int add_lora_pair(struct gen *g, const struct opts *o, const char *base_name, int64_t n_in,
                         int64_t n_out, int embd, int *warned)
{
    char na[128], nb[128];
    snprintf(na, sizeof na, "%s.lora_a", base_name);
    snprintf(nb, sizeof nb, "%s.lora_b", base_name);
    const int64_t r = o->rank;
    if (embd) /* n_in is n_embd, n_out n_vocab: a row of r per token */
        return add_random(g, na, lora_fit(o, r, warned), 2, r, n_out, 0.0f,
                          1.0f / sqrtf((float)r)) ||
               add_random(g, nb, lora_fit(o, r, warned), 2, r, n_in, 0.0f, W_STD);
    return add_random(g, na, lora_fit(o, n_in, warned), 2, n_in, r, 0.0f,
                      1.0f / sqrtf((float)n_in)) ||
           add_random(g, nb, lora_fit(o, r, warned), 2, r, n_out, 0.0f, W_STD);
}

static int write_lora(struct gen *g, const struct opts *o, const struct ifl_model *b)
{
    const struct ifl_hparams *hp = &b->hp;
    struct ifl_gguf_writer *w = g->w;
    int warned = 0;
    char name[128];
    snprintf(name, sizeof name, "mkmodel-lora-r%lld", (long long)o->rank);
    int rc = 0;
    rc |= ifl_gguf_writer_set_str(w, "general.architecture", hp->arch_name, strlen(hp->arch_name));
    rc |= ifl_gguf_writer_set_str(w, "general.type", "adapter", 7);
    rc |= ifl_gguf_writer_set_str(w, "general.name", name, strlen(name));
    rc |= ifl_gguf_writer_set_str(w, "adapter.type", "lora", 4);
    rc |= ifl_gguf_writer_set_f32(w, "adapter.lora.alpha", (float)o->alpha);
    if (rc)
        return -1;
    if ((o->lora_targets & (1u << LORA_T_EMBD)) &&
        add_lora_pair(g, o, "token_embd.weight", b->tok_embd.n_in, b->tok_embd.n_out, 1, &warned))
        return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_layer_weights *L = &b->layers[il];
        const struct ifl_mat *mats[] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                        &L->w_gate, &L->w_up, &L->w_down};
        for (int t = 0; t < 7; t++) {
            if (!(o->lora_targets & (1u << t)) || !mats[t]->data)
                continue; /* not chosen, or experts in place of the FFN */
            char bn[96];
            snprintf(bn, sizeof bn, "blk.%d.%s.weight", il, lora_layer_names[t]);
            if (add_lora_pair(g, o, bn, mats[t]->n_in, mats[t]->n_out, 0, &warned))
                return -1;
        }
    }
    if ((o->lora_targets & (1u << LORA_T_OUTPUT)) &&
        add_lora_pair(g, o, "output.weight", b->output.n_in, b->output.n_out, 0, &warned))
        return -1;
    return 0;
}

static int main_lora(const struct opts *o)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *b = NULL;
    struct gen g = {0};
    int status = 1;
    if (ifl_model_load(&b, o->lora_of, err)) {
        fprintf(stderr, "mkmodel: --lora-of: %s\n", err);
        return 2;
    }
    if (b->hp.n_expert && (o->lora_targets & 0x70u))
        fprintf(stderr,
                "mkmodel: %s has experts in place of ffn_gate/up/down: those are not "
                "adapted\n",
                o->lora_of);
    if ((o->lora_targets & (1u << LORA_T_OUTPUT)) && b->tied_output) {
        fprintf(stderr,
                "mkmodel: --lora-targets output: %s has no output.weight (its output is tied to "
                "token_embd.weight)\n",
                o->lora_of);
        ifl_model_free(b);
        return 2;
    }
    uint64_t seed = o->seed;
    if (ifl_gguf_writer_create(&g.w) || ifl_pool_create(&g.pool, 0))
        goto out;
    g.nth = ifl_pool_size(g.pool);
    g.seed = ifl_splitmix64(&seed);
    g.scratch = calloc((size_t)g.nth, sizeof(float *));
    if (!g.scratch || write_lora(&g, o, b))
        goto out;
    if (ifl_gguf_writer_write(g.w, o->out, err)) {
        fprintf(stderr, "mkmodel: %s\n", err);
        goto out;
    }
    fprintf(stderr, "mkmodel: wrote %s: LoRA adapter for %s, rank %lld, alpha %g, %.1f MiB\n",
            o->out, o->lora_of, (long long)o->rank, o->alpha, (double)g.bytes / (1024.0 * 1024.0));
    status = 0;
out:
    if (status && !*err)
        fprintf(stderr, "mkmodel: failed to build %s\n", o->out);
    if (g.scratch)
        for (int i = 0; i < g.nth; i++)
            free(g.scratch[i]);
    free(g.scratch);
    ifl_pool_free(g.pool);
    ifl_gguf_writer_free(g.w);
    ifl_model_free(b);
    return status;
}

static int main_eagle3(const struct opts *o)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *t = NULL;
    struct gen g = {0};
    int status = 1;
    if (ifl_model_load(&t, o->eagle3, err)) {
        fprintf(stderr, "mkmodel: --eagle3: %s\n", err);
        return 2;
    }
    uint64_t seed = o->seed;
    if (ifl_gguf_writer_create(&g.w) || ifl_pool_create(&g.pool, 0))
        goto out;
    g.nth = ifl_pool_size(g.pool);
    g.seed = ifl_splitmix64(&seed);
    g.scratch = calloc((size_t)g.nth, sizeof(float *));
    if (!g.scratch || write_eagle3(&g, o, t))
        goto out;
    if (ifl_gguf_writer_write(g.w, o->out, err)) {
        fprintf(stderr, "mkmodel: %s\n", err);
        goto out;
    }
    fprintf(stderr, "mkmodel: wrote %s: eagle3 head for %s, %.1f MiB\n", o->out, o->eagle3,
            (double)g.bytes / (1024.0 * 1024.0));
    status = 0;
out:
    if (status && !*err)
        fprintf(stderr, "mkmodel: failed to build %s\n", o->out);
    if (g.scratch)
        for (int i = 0; i < g.nth; i++)
            free(g.scratch[i]);
    free(g.scratch);
    ifl_pool_free(g.pool);
    ifl_gguf_writer_free(g.w);
    ifl_model_free(t);
    return status;
}

#include "mkmodel_mmproj.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--mmproj"))
            return main_mmproj(argc, argv);
    struct opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    if (o.lora_of)
        return main_lora(&o);
    if (o.eagle3) {
        rc = main_eagle3(&o);
        free(o.draft_map);
        return rc;
    }

    char err[IFL_ERR_LEN] = "";
    struct ifl_gguf *voc = NULL;
    struct ifl_gguf_writer *w = NULL;
    struct gen g = {0};
    int status = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    if (ifl_gguf_open(&voc, o.vocab, err)) {
        fprintf(stderr, "mkmodel: --vocab: %s\n", err);
        return 2;
    }
    /* The copied vocabulary fixes n_vocab; metadata comes first in the file. */
    struct ifl_gguf_value tokens;
    if (ifl_gguf_get_arr(voc, "tokenizer.ggml.tokens", &tokens, err) ||
        tokens.elem_type != IFL_GGUF_STRING || tokens.n == 0 || tokens.n > (1u << 24)) {
        fprintf(stderr, "mkmodel: --vocab %s: no usable tokenizer.ggml.tokens array%s%s\n", o.vocab,
                *err ? ": " : "", err);
        ifl_gguf_free(voc);
        return 2;
    }
    int64_t n_vocab = (int64_t)(tokens.n + n_added(&o));
    if (ifl_gguf_writer_create(&w) || write_metadata(w, &o, n_vocab) || copy_tokenizer(w, voc, &o))
        goto out;

    if (ifl_pool_create(&g.pool, 0))
        goto out;
    g.w = w;
    g.nth = ifl_pool_size(g.pool);
    g.seed = ifl_splitmix64(&o.seed);
    g.scratch = calloc((size_t)g.nth, sizeof(float *));
    if (!g.scratch || write_tensors(&g, &o, n_vocab))
        goto out;
    if (ifl_gguf_writer_write(w, o.out, err)) {
        fprintf(stderr, "mkmodel: %s\n", err);
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr,
            "mkmodel: wrote %s: %s %s, n_embd %lld, %lld layers, vocab %lld, %.1f MiB in %.1f s\n",
            o.out, arch_names[o.arch], o.mix->name, (long long)o.n_embd, (long long)o.n_layer,
            (long long)n_vocab, (double)g.bytes / (1024.0 * 1024.0),
            (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    status = 0;
out:
    if (status && !*err)
        fprintf(stderr, "mkmodel: failed to build %s\n", o.out);
    if (g.scratch)
        for (int t = 0; t < g.nth; t++)
            free(g.scratch[t]);
    free(g.scratch);
    ifl_pool_free(g.pool);
    ifl_gguf_writer_free(w);
    ifl_gguf_free(voc);
    return status;
}
