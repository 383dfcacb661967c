/*
 * Guided decoding through the executor's public API, as proof that a guide
 * holds whatever the model wants: batches of seeded generations at
 * temperature 1.0 on stories260K and on a synthetic model with the 128K
 * Llama 3 BPE vocabulary (made by tools/mkmodel with tiny dimensions), and
 * every output is checked by something other than the grammar that made it:
 *   - ten JSON Schemas of increasing difficulty: jansson parses the text and
 *     ifl_guide_validate_json (its own code) validates it;
 *   - regexes: PCRE2 full match;
 *   - grammars (arithmetic, CSV rows, a statement language): a hand-written
 *     recursive-descent checker per grammar, and the guide's own automaton;
 *   - invalid guides fail enqueue with a message naming the problem;
 *   - beams, num_return_sequences, max_tokens, min_tokens, stop strings and
 *     preemption keep the output inside the grammar.
 * Each finish reason is counted: a generation cut by max_tokens is a
 * failure of the schema suites (their schemas bound every string, number
 * and array so the model always finishes).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "guide/guide.h"
#include "inflight.h"
#include "runtime/exec.h"
#include "t.h"

static char stories_path[600], l3_path[700], l3_dir[64];
static const int32_t ONCE[] = {1, 403, 407, 261, 378};
static const int32_t L3_PROMPT[] = {128000, 791, 4320, 374}; /* BOS "The answer is" */

struct gen {
    char *text;
    int32_t finish;
    int32_t status;
    int32_t n_tokens;
    int32_t preemptions;
};

static ifl_executor *open_ex(const char *path, int32_t max_batch, int64_t kv_tokens, int policy)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = max_batch;
    c.max_num_tokens = 512;
    c.kv_cache_tokens = kv_tokens;
    c.sched_policy = policy;
    c.n_threads = 2;
    c.kv_type = IFL_KV_F32;
    c.n_ctx = 512;
    ifl_executor *ex = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_executor_create(&ex, path, &c, err);
    CHECK_MSG(rc == 0, "create %s: %s", path, err);
    return ex;
}

static void base_req(struct ifl_request *r, int l3, int type, const char *text, int32_t max_tokens)
{
    ifl_request_init(r);
    r->input_ids = l3 ? L3_PROMPT : ONCE;
    r->n_input = l3 ? 4 : 5;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 1.0f;
    r->guide_type = type;
    r->guide_text = text;
}

static void gens_free(struct gen *g, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        free(g[i].text);
    memset(g, 0, sizeof *g * (size_t)n);
}

/* Enqueues n copies of proto at once (seed seed0 + i) and collects each
 * request's whole text and finish reason into out[i] (sequence 0 only). */
static int run_batch(ifl_executor *ex, const struct ifl_request *proto, int32_t n, uint64_t seed0,
                     struct gen *out)
{
    struct ifl_request *rs = calloc((size_t)n, sizeof *rs);
    ifl_id *ids = calloc((size_t)n, sizeof *ids);
    char err[IFL_ERR_LEN] = "";
    int rc = rs && ids ? 0 : IFL_ENOMEM;
    for (int32_t i = 0; !rc && i < n; i++) {
        rs[i] = *proto;
        rs[i].sampling.seed = seed0 + (uint64_t)i;
        rs[i].output.return_perf_metrics = 1;
    }
    if (!rc)
        rc = ifl_enqueue_many(ex, rs, n, ids, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    memset(out, 0, sizeof *out * (size_t)n);
    int32_t finals = 0;
    while (!rc && finals < n) {
        struct ifl_response *r[64];
        int32_t got = 0;
        rc = ifl_await(ex, ids, n, 120000, r, 64, &got);
        CHECK_MSG(rc == 0, "await: %s", ifl_strerror(rc));
        for (int32_t k = 0; k < got; k++) {
            int64_t i = (int64_t)(r[k]->request_id - ids[0]);
            if (i >= 0 && i < n && r[k]->sequence_index == 0 && r[k]->n_results >= 1) {
                struct gen *g = &out[i];
                struct ifl_sequence_result *s = &r[k]->results[0];
                size_t old = g->text ? strlen(g->text) : 0;
                char *t = realloc(g->text, old + (size_t)s->n_text + 1);
                if (t) {
                    memcpy(t + old, s->text ? s->text : "", (size_t)s->n_text);
                    t[old + (size_t)s->n_text] = 0;
                    g->text = t;
                }
                g->n_tokens += s->n_tokens;
                g->status = r[k]->status;
                if (r[k]->is_sequence_final)
                    g->finish = s->finish_reason;
            }
            if (r[k]->is_final) {
                finals++;
                if (i >= 0 && i < n)
                    out[i].preemptions = r[k]->perf.preemptions;
            }
            ifl_response_free(r[k]);
        }
    }
    free(rs);
    free(ids);
    return rc;
}

/* Whether text is a complete sentence of the guide (type, src), by the
 * guide's own automaton. */
static int guide_accepts(int type, const char *src, const char *text)
{
    struct ifl_guide *g = NULL;
    int rc = type == IFL_GUIDE_JSON_SCHEMA
                 ? ifl_guide_compile_json_schema(&g, src, strlen(src), NULL)
             : type == IFL_GUIDE_REGEX ? ifl_guide_compile_regex(&g, src, strlen(src), NULL)
                                       : ifl_guide_compile_gbnf(&g, src, strlen(src), NULL);
    if (rc)
        return 0;
    struct ifl_guide_state st;
    int ok = ifl_guide_state_init(&st, g) == 0 &&
             ifl_guide_accept_bytes(&st, text, strlen(text)) == 0 && ifl_guide_is_accepting(&st);
    ifl_guide_state_deinit(&st);
    ifl_guide_free(g);
    return ok;
}

/* ------------------------------------------------------------ JSON Schemas */

/* Ten schemas, easy to hard. Every string, number and array is bounded so
 * that a model sampling at temperature 1 finishes well inside max_tokens. */
static const char *const SCHEMAS[10] = {
    /* 1 flat object */
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},\"active\":{\"type\":"
    "\"boolean\"}},\"required\":[\"name\",\"age\",\"active\"]}",
    /* 2 enums and nullable */
    "{\"type\":\"object\",\"properties\":{\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
    "\"size\":{\"type\":\"string\",\"enum\":[\"S\",\"M\",\"L\",\"XL\"]},\"note\":{\"type\":"
    "\"string\",\"maxLength\":10,\"nullable\":true}},\"required\":[\"color\",\"size\",\"note\"]}",
    /* 3 nested objects */
    "{\"type\":\"object\",\"properties\":{\"user\":{\"type\":\"object\",\"properties\":{\"id\":"
    "{\"type\":\"integer\",\"minimum\":1,\"maximum\":2000},\"profile\":{\"type\":\"object\","
    "\"properties\":{\"first\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},\"last\":"
    "{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"first\",\"last\"]}},\"required\":"
    "[\"id\",\"profile\"]},\"ok\":{\"type\":\"boolean\"}},\"required\":[\"user\",\"ok\"]}",
    /* 4 arrays of strings, min/max items and lengths */
    "{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
    "\"string\",\"minLength\":2,\"maxLength\":6},\"minItems\":1,\"maxItems\":4},\"scores\":{"
    "\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":10},"
    "\"maxItems\":3}},\"required\":[\"tags\",\"scores\"]}",
    /* 5 arrays of objects with number ranges */
    "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"minItems\":1,"
    "\"maxItems\":3,\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\","
    "\"minLength\":3,\"maxLength\":8},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":"
    "100},\"price\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1000}},\"required\":[\"sku\","
    "\"qty\",\"price\"]}}},\"required\":[\"items\"]}",
    /* 6 formats */
    "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"born\":{\"type\":\"string\",\"format\":\"date\"},\"email\":{\"type\":\"string\","
    "\"format\":\"email\"},\"seen\":{\"type\":\"string\",\"format\":\"date-time\"}},"
    "\"required\":[\"id\",\"born\",\"email\",\"seen\"]}",
    /* 7 $ref / $defs and signed number ranges */
    "{\"$defs\":{\"point\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\","
    "\"minimum\":-90,\"maximum\":90},\"lon\":{\"type\":\"number\",\"minimum\":-180,\"maximum\":"
    "180}},\"required\":[\"lat\",\"lon\"]}},\"type\":\"object\",\"properties\":{\"from\":{\"$ref\":"
    "\"#/$defs/point\"},\"to\":{\"$ref\":\"#/$defs/point\"},\"via\":{\"type\":\"array\",\"items\":"
    "{\"$ref\":\"#/$defs/point\"},\"maxItems\":2}},\"required\":[\"from\",\"to\",\"via\"]}",
    /* 8 anyOf, const and nullable */
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"event\"},\"value\":{\"anyOf\":["
    "{\"type\":\"integer\",\"minimum\":0,\"maximum\":50},{\"type\":\"string\",\"maxLength\":5},"
    "{\"type\":\"boolean\"}]},\"when\":{\"type\":\"string\",\"format\":\"time\",\"nullable\":"
    "true}},\"required\":[\"kind\",\"value\",\"when\"]}",
    /* 9 tuples (prefixItems) and optional properties */
    "{\"type\":\"object\",\"properties\":{\"pair\":{\"type\":\"array\",\"prefixItems\":[{\"type\":"
    "\"string\",\"maxLength\":4},{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}],\"items\":"
    "false,\"minItems\":2},\"code\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3},"
    "\"extra\":{\"type\":[\"integer\",\"null\"],\"minimum\":0,\"maximum\":9}},\"required\":["
    "\"pair\",\"code\"]}",
    /* 10 everything: an order with a customer, lines, a shipping choice */
    "{\"$defs\":{\"line\":{\"type\":\"object\",\"properties\":{\"product\":{\"enum\":[\"tea\","
    "\"cake\",\"jam\"]},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9},\"opts\":{"
    "\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"maxItems\":1}},"
    "\"required\":[\"product\",\"qty\",\"opts\"]},\"addr\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":10},\"zip\":{\"type\":\"integer\","
    "\"minimum\":1000,\"maximum\":2999}},\"required\":[\"city\",\"zip\"]}},\"type\":\"object\","
    "\"properties\":{\"order\":{\"type\":\"string\",\"format\":\"uuid\"},\"date\":{\"type\":"
    "\"string\",\"format\":\"date\"},\"customer\":{\"type\":\"object\",\"properties\":{\"name\":{"
    "\"type\":\"string\",\"maxLength\":8},\"vip\":{\"type\":\"boolean\"}},\"required\":["
    "\"name\",\"vip\"]},\"lines\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/line\"},"
    "\"minItems\":1,\"maxItems\":2},\"ship\":{\"anyOf\":[{\"type\":\"object\",\"properties\":{"
    "\"how\":{\"const\":\"pickup\"}},\"required\":[\"how\"]},{\"type\":\"object\",\"properties\":{"
    "\"how\":{\"const\":\"post\"},\"to\":{\"$ref\":\"#/$defs/addr\"}},\"required\":[\"how\","
    "\"to\"]}]},\"notes\":{\"type\":\"string\",\"maxLength\":12,\"nullable\":true}},\"required\":["
    "\"order\",\"date\",\"customer\",\"lines\",\"ship\",\"notes\"]}",
};

#define N_SCHEMA_GENS 200

/* Generations per schema (regex, grammar) on a model: 200 (100) on
 * stories260K; the 128K-vocabulary model samples from 128K logits per
 * token, so by default it runs 60 (40) to keep the suite quick, and
 * IFL_GUIDED_FULL=1 runs the full counts there too. */
static int n_gens(int l3, int full)
{
    if (!l3 || getenv("IFL_GUIDED_FULL"))
        return full;
    return full == N_SCHEMA_GENS ? 60 : 40;
}

/* Counts outputs that parse and validate; prints the first failures. */
static int check_schema_outputs(const char *model, int si, const struct gen *g, int32_t n,
                                int *n_length)
{
    int ok = 0, shown = 0;
    *n_length = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *t = g[i].text ? g[i].text : "";
        char err[IFL_ERR_LEN] = "";
        json_error_t je;
        json_t *j = json_loads(t, JSON_ALLOW_NUL, &je);
        int good =
            g[i].status == 0 && g[i].finish == IFL_FINISH_END_ID && j &&
            ifl_guide_validate_json(SCHEMAS[si], strlen(SCHEMAS[si]), t, strlen(t), err) == 0;
        *n_length += g[i].finish == IFL_FINISH_LENGTH;
        json_decref(j);
        if (good) {
            ok++;
        } else if (shown++ < 3) {
            fprintf(stderr, "  %s schema %d gen %d: finish %d status %d json %s: %s\n    %.300s\n",
                    model, si + 1, i, g[i].finish, g[i].status, j ? "ok" : je.text, err, t);
        }
    }
    return ok;
}

static void schema_suite(const char *model, const char *path, int l3)
{
    ifl_executor *ex = open_ex(path, 64, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    const int N = n_gens(l3, N_SCHEMA_GENS);
    struct gen *g = calloc((size_t)N, sizeof *g);
    int total = 0, total_len = 0;
    const char *one = getenv("GUIDED_SCHEMA"); /* 1..10: only that schema */
    for (int si = 0; si < 10 && g; si++) {
        if (one && atoi(one) != si + 1)
            continue;
        struct ifl_request r;
        base_req(&r, l3, IFL_GUIDE_JSON_SCHEMA, SCHEMAS[si], 500);
        double t0 = (double)clock() / CLOCKS_PER_SEC;
        if (run_batch(ex, &r, N, 1000u * (uint64_t)si, g))
            break;
        int n_len = 0;
        int ok = check_schema_outputs(model, si, g, N, &n_len);
        long toks = 0;
        for (int i = 0; i < N; i++)
            toks += g[i].n_tokens;
        fprintf(stderr,
                "  %s schema %2d: %d/%d valid, %d cut by max_tokens, %.1f tokens avg, "
                "%.1f s cpu; e.g. %.160s\n",
                model, si + 1, ok, N, n_len, (double)toks / N,
                (double)clock() / CLOCKS_PER_SEC - t0, g[0].text ? g[0].text : "");
        CHECK_EQ(ok, N);
        if (getenv("GUIDED_VERBOSE"))
            for (int i = 0; i < N; i++)
                fprintf(stderr, "    [%d] %d tokens: %s\n", i, g[i].n_tokens, g[i].text);
        total += ok;
        total_len += n_len;
        gens_free(g, N);
    }
    struct ifl_xguide_stats st;
    ifl_exec_guide_stats(ex, &st);
    fprintf(stderr,
            "  %s: %d/%d schema generations valid (%d cut by max_tokens); mask p50 %.3f "
            "ms, p99 %.3f ms, max %.2f ms over %llu masks (cache %llu hits, %llu misses)\n",
            model, total, 10 * N, total_len, ifl_xguide_stats_quantile(&st, 0.5),
            ifl_xguide_stats_quantile(&st, 0.99), st.max_ms, (unsigned long long)st.n_masks,
            (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses);
    free(g);
    ifl_executor_destroy(ex, 0);
}

static void test_schemas_stories(void)
{
    schema_suite("stories260K", stories_path, 0);
}
static void test_schemas_llama3_vocab(void)
{
    schema_suite("llama3-vocab", l3_path, 1);
}

/* ------------------------------------------------------------------ regex */

static const char *const REGEXES[] = {
    "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])",
    "\\+1 \\(\\d{3}\\) \\d{3}-\\d{4}",
    "[A-Za-z_][A-Za-z0-9_]{0,15}",
    "(cat|dog|bird)s?( and (cat|dog|bird)s?){0,2}",
    "(\\d{1,3}\\.){3}\\d{1,3}",
    "#[0-9a-fA-F]{6}|rgb\\(\\d{1,3}, \\d{1,3}, \\d{1,3}\\)",
};

static int full_match(const char *re, const char *text)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                  PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &ec, &eo, NULL);
    if (!c)
        return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = md ? pcre2_match(c, (PCRE2_SPTR)text, strlen(text), 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static void regex_suite(const char *model, const char *path, int l3)
{
    ifl_executor *ex = open_ex(path, 64, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    const int N = n_gens(l3, 100);
    struct gen g[100];
    int n_re = (int)(sizeof REGEXES / sizeof *REGEXES);
    for (int k = 0; k < n_re; k++) {
        struct ifl_request r;
        base_req(&r, l3, IFL_GUIDE_REGEX, REGEXES[k], 64);
        if (run_batch(ex, &r, N, 77u * (uint64_t)k, g))
            break;
        int ok = 0, shown = 0;
        for (int i = 0; i < N; i++) {
            const char *t = g[i].text ? g[i].text : "";
            int good = g[i].finish == IFL_FINISH_END_ID && full_match(REGEXES[k], t) &&
                       guide_accepts(IFL_GUIDE_REGEX, REGEXES[k], t);
            ok += good;
            if (!good && shown++ < 3)
                fprintf(stderr, "  %s regex %s: finish %d '%s'\n", model, REGEXES[k], g[i].finish,
                        t);
        }
        fprintf(stderr, "  %s regex %d: %d/%d full matches (e.g. '%s')\n", model, k + 1, ok, N,
                g[0].text ? g[0].text : "");
        CHECK_EQ(ok, N);
        gens_free(g, N);
    }
    ifl_executor_destroy(ex, 0);
}

static void test_regex_stories(void)
{
    regex_suite("stories260K", stories_path, 0);
}
static void test_regex_llama3_vocab(void)
{
    regex_suite("llama3-vocab", l3_path, 1);
}

/* --------------------------------------------------------------- grammars */

/* nesting is bounded (a model that rarely picks the end token fills every
 * repetition, so the grammar itself must be finite) */
static const char ARITH[] = "root ::= expr\n"
                            "expr ::= term ( ws [-+] ws term ){0,2}\n"
                            "term ::= factor ( ws [*/] ws factor )?\n"
                            "factor ::= num | \"(\" ws num ( ws [-+*/] ws num ){0,2} ws \")\"\n"
                            "num ::= [0-9]{1,3}\n"
                            "ws ::= \" \"?\n";
static const char CSV[] = "root ::= row ( \"\\n\" row ){0,2} \"\\n\"?\n"
                          "row ::= field \",\" field \",\" field\n"
                          "field ::= [a-z0-9]{1,8} | \"\\\"\" [a-z ,]{0,8} \"\\\"\"\n";
static const char STMT[] = "root ::= stmt\n"
                           "stmt ::= simple | \"if (\" id \" < \" num \") { \" simple \" }\"\n"
                           "simple ::= \"let \" id \" = \" expr \";\" | \"print(\" expr \");\"\n"
                           "expr ::= id | num | id \" + \" num\n"
                           "id ::= [a-z]{1,6}\n"
                           "num ::= [0-9]{1,4}\n";

/* Tiny recursive-descent checkers, independent of the guide. */
struct cur {
    const char *s;
    size_t p;
};

static int eat(struct cur *c, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(c->s + c->p, lit, n))
        return 0;
    c->p += n;
    return 1;
}

static int run_of(struct cur *c, const char *set, int lo, int hi)
{
    int k = 0;
    while (k < hi && c->s[c->p] && strchr(set, c->s[c->p])) {
        c->p++;
        k++;
    }
    return k >= lo;
}

static int arith_num(struct cur *c)
{
    return run_of(c, "0123456789", 1, 3);
}

/* an optional space, an operator from ops, an optional space */
static int arith_op(struct cur *c, const char *ops)
{
    size_t save = c->p;
    eat(c, " ");
    if (c->s[c->p] && strchr(ops, c->s[c->p])) {
        c->p++;
        eat(c, " ");
        return 1;
    }
    c->p = save;
    return 0;
}

static int arith_factor(struct cur *c)
{
    if (!eat(c, "("))
        return arith_num(c);
    eat(c, " ");
    if (!arith_num(c))
        return 0;
    for (int k = 0; k < 2 && arith_op(c, "+-*/"); k++)
        if (!arith_num(c))
            return 0;
    eat(c, " ");
    return eat(c, ")");
}

static int arith_term(struct cur *c)
{
    if (!arith_factor(c))
        return 0;
    return !arith_op(c, "*/") || arith_factor(c);
}

static int check_arith(const char *t)
{
    struct cur c = {t, 0};
    if (!arith_term(&c))
        return 0;
    for (int k = 0; k < 2 && arith_op(&c, "+-"); k++)
        if (!arith_term(&c))
            return 0;
    return !t[c.p];
}

static int check_csv(const char *t)
{
    int rows = 0;
    struct cur c = {t, 0};
    while (t[c.p]) {
        for (int f = 0; f < 3; f++) {
            if (f && !eat(&c, ","))
                return 0;
            if (eat(&c, "\"")) {
                if (!run_of(&c, "abcdefghijklmnopqrstuvwxyz ,", 0, 8) || !eat(&c, "\""))
                    return 0;
            } else if (!run_of(&c, "abcdefghijklmnopqrstuvwxyz0123456789", 1, 8)) {
                return 0;
            }
        }
        rows++;
        if (!eat(&c, "\n"))
            break;
    }
    return !t[c.p] && rows >= 1 && rows <= 3;
}

static int stmt(struct cur *c, int depth)
{
    const char *az = "abcdefghijklmnopqrstuvwxyz", *dg = "0123456789";
    if (eat(c, "let ")) {
        if (!run_of(c, az, 1, 6) || !eat(c, " = "))
            return 0;
    } else if (eat(c, "print(")) {
    } else if (eat(c, "if (")) {
        return depth < 1 && run_of(c, az, 1, 6) && eat(c, " < ") && run_of(c, dg, 1, 4) &&
               eat(c, ") { ") && stmt(c, depth + 1) && eat(c, " }");
    } else {
        return 0;
    }
    /* expr: id, num, or id " + " num */
    int is_print = c->s[c->p - 1] == '(';
    if (run_of(c, az, 1, 6)) {
        if (eat(c, " + ") && !run_of(c, dg, 1, 4))
            return 0;
    } else if (!run_of(c, dg, 1, 4)) {
        return 0;
    }
    return eat(c, is_print ? ");" : ";");
}

static int check_stmt(const char *t)
{
    struct cur c = {t, 0};
    return stmt(&c, 0) && !t[c.p];
}

static void grammar_suite(const char *model, const char *path, int l3)
{
    ifl_executor *ex = open_ex(path, 64, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    const int N = n_gens(l3, 100);
    struct gen g[100];
    const char *gr[3] = {ARITH, CSV, STMT}, *names[3] = {"arithmetic", "csv", "statement"};
    int (*chk[3])(const char *) = {check_arith, check_csv, check_stmt};
    for (int k = 0; k < 3; k++) {
        struct ifl_request r;
        base_req(&r, l3, IFL_GUIDE_EBNF, gr[k], 128);
        if (run_batch(ex, &r, N, 991u * (uint64_t)k, g))
            break;
        int ok = 0, shown = 0, n_len = 0;
        for (int i = 0; i < N; i++) {
            const char *t = g[i].text ? g[i].text : "";
            int good = g[i].finish == IFL_FINISH_END_ID && chk[k](t) &&
                       guide_accepts(IFL_GUIDE_EBNF, gr[k], t);
            n_len += g[i].finish == IFL_FINISH_LENGTH;
            ok += good;
            if (!good && shown++ < 3)
                fprintf(stderr, "  %s %s: finish %d '%s'\n", model, names[k], g[i].finish, t);
        }
        fprintf(stderr, "  %s %s: %d/%d parse (%d cut by max_tokens; e.g. '%s')\n", model, names[k],
                ok, N, n_len, g[0].text ? g[0].text : "");
        CHECK_EQ(ok, N);
        gens_free(g, N);
    }
    ifl_executor_destroy(ex, 0);
}

static void test_grammars_stories(void)
{
    grammar_suite("stories260K", stories_path, 0);
}
static void test_grammars_llama3_vocab(void)
{
    grammar_suite("llama3-vocab", l3_path, 1);
}

/* ------------------------------------------------------ invalid and modes */

static void expect_enqueue_error(ifl_executor *ex, int type, const char *text, int want_rc,
                                 const char *part)
{
    struct ifl_request r;
    base_req(&r, 0, type, text, 16);
    ifl_id id = 0;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_enqueue(ex, &r, &id, err);
    CHECK_MSG(rc == want_rc && strstr(err, part),
              "guide %d '%s': rc %d, want %d; err '%s' "
              "should contain '%s'",
              type, text ? text : "(null)", rc, want_rc, err, part);
}

static void test_invalid_guides(void)
{
    ifl_executor *ex = open_ex(stories_path, 8, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    expect_enqueue_error(ex, IFL_GUIDE_JSON_SCHEMA, "{\"type\": \"object\", \"properties\": {",
                         IFL_EFORMAT, "json schema");
    expect_enqueue_error(ex, IFL_GUIDE_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"a+\"}",
                         IFL_EUNSUPPORTED, "'pattern' is not supported");
    expect_enqueue_error(ex, IFL_GUIDE_REGEX, "(ab|cd", IFL_EFORMAT, "unbalanced");
    expect_enqueue_error(ex, IFL_GUIDE_REGEX, "(a)\\1", IFL_EUNSUPPORTED, "regex");
    expect_enqueue_error(ex, IFL_GUIDE_EBNF, "root ::= value \",\"\n", IFL_EFORMAT,
                         "undefined rule 'value'");
    expect_enqueue_error(ex, IFL_GUIDE_EBNF, "root ::= \"a\"\nroot2 ::= \"b", IFL_EFORMAT,
                         "gbnf: 2:");
    expect_enqueue_error(ex, IFL_GUIDE_EBNF, "", IFL_EINVAL, "guide_text: required");
    expect_enqueue_error(ex, 9, "x", IFL_EINVAL, "guide_type: 9");
    struct ifl_request r;
    base_req(&r, 0, IFL_GUIDE_JSON, NULL, 16);
    r.sampling.ignore_eos = 1;
    char err[IFL_ERR_LEN] = "";
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EUNSUPPORTED);
    CHECK(strstr(err, "ignore_eos") != NULL);
    /* a bad request in a batch names its index, and nothing is enqueued */
    struct ifl_request two[2];
    base_req(&two[0], 0, IFL_GUIDE_JSON, NULL, 16);
    base_req(&two[1], 0, IFL_GUIDE_REGEX, "[a-", 16);
    ifl_id ids[2];
    CHECK_EQ(ifl_enqueue_many(ex, two, 2, ids, err), IFL_EFORMAT);
    CHECK_MSG(strstr(err, "request 1: guide_text: regex") != NULL, "err: %s", err);
    ifl_executor_destroy(ex, 0);
}

/* Beams, samples, max_tokens, min_tokens and stop strings. */
static void test_modes(void)
{
    ifl_executor *ex = open_ex(stories_path, 16, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    char err[IFL_ERR_LEN] = "";
    ifl_id id;
    /* beam search: every hypothesis parses and validates */
    struct ifl_request r;
    base_req(&r, 0, IFL_GUIDE_JSON_SCHEMA, SCHEMAS[0], 200);
    r.sampling.beam_width = 3;
    r.num_return_sequences = 3;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    struct ifl_response *resp = NULL;
    int32_t got = 0;
    CHECK_EQ(ifl_await(ex, &id, 1, 60000, &resp, 1, &got), 0);
    if (got == 1) {
        CHECK_EQ(resp->n_results, 3);
        for (int32_t i = 0; i < resp->n_results; i++) {
            const char *t = resp->results[i].text ? resp->results[i].text : "";
            CHECK_EQ(resp->results[i].finish_reason, IFL_FINISH_END_ID);
            CHECK_MSG(ifl_guide_validate_json(SCHEMAS[0], strlen(SCHEMAS[0]), t, strlen(t), err) ==
                          0,
                      "beam %d: %s: %s", i, t, err);
            if (i == 0)
                fprintf(stderr, "  beam: '%s'\n", t);
        }
        ifl_response_free(resp);
    }
    /* num_return_sequences = 3: three valid samples */
    base_req(&r, 0, IFL_GUIDE_JSON_SCHEMA, SCHEMAS[2], 300);
    r.num_return_sequences = 3;
    r.sampling.seed = 5;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    char *texts[3] = {0};
    int finals = 0, seq_done = 0;
    while (!finals) {
        struct ifl_response *rr[8];
        if (ifl_await(ex, &id, 1, 60000, rr, 8, &got))
            break;
        for (int32_t k = 0; k < got; k++) {
            int32_t si = rr[k]->sequence_index;
            if (si >= 0 && si < 3 && rr[k]->n_results == 1) {
                struct ifl_sequence_result *s = &rr[k]->results[0];
                size_t old = texts[si] ? strlen(texts[si]) : 0;
                char *t = realloc(texts[si], old + (size_t)s->n_text + 1);
                memcpy(t + old, s->text ? s->text : "", (size_t)s->n_text);
                t[old + (size_t)s->n_text] = 0;
                texts[si] = t;
                if (rr[k]->is_sequence_final) {
                    seq_done++;
                    CHECK_EQ(s->finish_reason, IFL_FINISH_END_ID);
                }
            }
            finals |= rr[k]->is_final;
            ifl_response_free(rr[k]);
        }
    }
    CHECK_EQ(seq_done, 3);
    for (int i = 0; i < 3; i++) {
        const char *t = texts[i] ? texts[i] : "";
        CHECK_MSG(ifl_guide_validate_json(SCHEMAS[2], strlen(SCHEMAS[2]), t, strlen(t), err) == 0,
                  "sample %d: %s: %s", i, t, err);
        free(texts[i]);
    }
    /* max_tokens too small: length, and the text is a prefix of the grammar */
    struct gen g[16];
    base_req(&r, 0, IFL_GUIDE_JSON_SCHEMA, SCHEMAS[5], 6);
    if (run_batch(ex, &r, 8, 3, g) == 0) {
        for (int i = 0; i < 8; i++) {
            CHECK_EQ(g[i].finish, IFL_FINISH_LENGTH);
            CHECK_EQ(g[i].n_tokens, 6);
            struct ifl_guide *gd = NULL;
            struct ifl_guide_state st;
            CHECK_EQ(ifl_guide_compile_json_schema(&gd, SCHEMAS[5], strlen(SCHEMAS[5]), NULL), 0);
            CHECK_EQ(ifl_guide_state_init(&st, gd), 0);
            CHECK_EQ(ifl_guide_accept_bytes(&st, g[i].text, strlen(g[i].text)), 0);
            CHECK(!ifl_guide_is_accepting(&st));
            ifl_guide_state_deinit(&st);
            ifl_guide_free(gd);
        }
        gens_free(g, 8);
    }
    /* min_tokens does not push past a grammar that is complete */
    base_req(&r, 0, IFL_GUIDE_EBNF, "root ::= \"yes\" | \"no\"", 32);
    r.sampling.min_tokens = 20;
    if (run_batch(ex, &r, 8, 11, g) == 0) {
        for (int i = 0; i < 8; i++) {
            CHECK_EQ(g[i].finish, IFL_FINISH_END_ID);
            CHECK_MSG(!strcmp(g[i].text, "yes") || !strcmp(g[i].text, "no"), "'%s'", g[i].text);
        }
        gens_free(g, 8);
    }
    /* a grammar that may go on: min_tokens keeps it going, inside the grammar */
    base_req(&r, 0, IFL_GUIDE_REGEX, "[a-z]{1,40}", 48);
    r.sampling.min_tokens = 5;
    if (run_batch(ex, &r, 8, 13, g) == 0) {
        for (int i = 0; i < 8; i++) {
            CHECK(g[i].n_tokens >= 5 || g[i].finish == IFL_FINISH_END_ID);
            CHECK_MSG(full_match("[a-z]{1,40}", g[i].text), "'%s'", g[i].text);
        }
        gens_free(g, 8);
    }
    /* a stop string ends it where it matches, mid-grammar */
    const char *stops[1] = {"e"};
    base_req(&r, 0, IFL_GUIDE_EBNF, "root ::= \"abc\" \"e\" \"xyz\"", 32);
    r.stop_strings = stops;
    r.n_stop_strings = 1;
    if (run_batch(ex, &r, 4, 17, g) == 0) {
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(g[i].finish, IFL_FINISH_STOP_WORDS);
            CHECK_STR(g[i].text, "abc");
        }
        gens_free(g, 4);
    }
    /* JSON mode: any object */
    base_req(&r, 0, IFL_GUIDE_JSON, "object", 200);
    if (run_batch(ex, &r, 16, 19, g) == 0) {
        int ok = 0;
        for (int i = 0; i < 16; i++) {
            json_t *j = json_loads(g[i].text, JSON_ALLOW_NUL, NULL);
            ok += (j && json_is_object(j)) || g[i].finish == IFL_FINISH_LENGTH;
            json_decref(j);
        }
        CHECK_EQ(ok, 16);
        gens_free(g, 16);
    }
    ifl_executor_destroy(ex, 0);
}

/* Preempted and recomputed, a guided sequence continues where it was:
 * the same seeds give the same texts as in a roomy executor. */
static void test_preemption(void)
{
    enum { N = 12 };
    struct gen a[N], b[N];
    struct ifl_request r;
    base_req(&r, 0, IFL_GUIDE_JSON_SCHEMA, SCHEMAS[4], 120);
    ifl_executor *roomy = open_ex(stories_path, 16, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    ifl_executor *tight = open_ex(stories_path, 16, 512, IFL_SCHED_MAX_UTILIZATION);
    if (!roomy || !tight) {
        ifl_executor_destroy(roomy, 1);
        ifl_executor_destroy(tight, 1);
        return;
    }
    int rc1 = run_batch(roomy, &r, N, 40, a), rc2 = run_batch(tight, &r, N, 40, b);
    if (!rc1 && !rc2) {
        int pre = 0;
        for (int i = 0; i < N; i++) {
            pre += b[i].preemptions;
            CHECK_MSG(a[i].text && b[i].text && !strcmp(a[i].text, b[i].text),
                      "request %d: '%s' vs '%s'", i, a[i].text, b[i].text);
        }
        fprintf(stderr, "  preemptions in the tight executor: %d\n", pre);
        CHECK(pre > 0);
    }
    gens_free(a, N);
    gens_free(b, N);
    ifl_executor_destroy(roomy, 0);
    ifl_executor_destroy(tight, 0);
}

/* Client threads enqueue guided requests at once (same and different
 * texts): the guide cache is shared under its lock, references are dropped
 * on the engine thread, and every output still validates. For TSan. */
struct cc_arg {
    ifl_executor *ex;
    int k;
    int ok;
};

static void *cc_thread(void *p)
{
    struct cc_arg *a = p;
    static const char *const regs[2] = {"[a-z]{2,6}", "(yes|no)-[0-9]{1,3}"};
    for (int i = 0; i < 6; i++) {
        struct ifl_request r;
        const char *re = regs[(a->k + i) % 2];
        base_req(&r, 0, i % 3 == 2 ? IFL_GUIDE_JSON_SCHEMA : IFL_GUIDE_REGEX,
                 i % 3 == 2 ? SCHEMAS[0] : re, 80);
        r.sampling.seed = (uint64_t)(a->k * 100 + i);
        struct gen g;
        if (run_batch(a->ex, &r, 1, r.sampling.seed, &g))
            continue;
        const char *t = g.text ? g.text : "";
        a->ok += g.finish == IFL_FINISH_END_ID &&
                 (i % 3 == 2 ? ifl_guide_validate_json(SCHEMAS[0], strlen(SCHEMAS[0]), t, strlen(t),
                                                       NULL) == 0
                             : full_match(re, t));
        gens_free(&g, 1);
    }
    return NULL;
}

static void test_concurrent_clients(void)
{
    ifl_executor *ex = open_ex(stories_path, 16, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    pthread_t th[4];
    struct cc_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (struct cc_arg){ex, k, 0};
        pthread_create(&th[k], NULL, cc_thread, &a[k]);
    }
    int ok = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        ok += a[k].ok;
    }
    CHECK_EQ(ok, 24);
    ifl_executor_destroy(ex, 0);
}

/* GUIDED_ONLY=name runs only the tests whose names contain it */
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        const char *only_ = getenv("GUIDED_ONLY");                                                 \
        if (!only_ || strstr(#fn, only_))                                                          \
            T_RUN(fn);                                                                             \
    } while (0)

int main(void)
{
    snprintf(stories_path, sizeof stories_path, "%s/models/stories260K.gguf", t_shared());
    const char *build = getenv("BUILD");
    char cmd[2048];
    snprintf(l3_dir, sizeof l3_dir, "/tmp/ifl_guided_XXXXXX");
    if (!mkdtemp(l3_dir)) {
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(l3_path, sizeof l3_path, "%s/l3.gguf", l3_dir);
    snprintf(cmd, sizeof cmd,
             "%s/tools/mkmodel -o %s --vocab %s/models/vocab/ggml-vocab-llama-bpe.gguf "
             "--n-embd 32 --n-layer 1 --n-head 2 --n-head-kv 2 --n-ff 64 --ctx 512 --type f32 "
             "--seed 7 2>/dev/null",
             build && *build ? build : "build", l3_path, t_shared());
    int have_l3 = system(cmd) == 0;
    RUN(test_invalid_guides);
    RUN(test_modes);
    RUN(test_preemption);
    RUN(test_concurrent_clients);
    RUN(test_regex_stories);
    RUN(test_grammars_stories);
    RUN(test_schemas_stories);
    if (have_l3) {
        RUN(test_regex_llama3_vocab);
        RUN(test_grammars_llama3_vocab);
        RUN(test_schemas_llama3_vocab);
    } else {
        fprintf(stderr, "cannot make the synthetic model: %s\n", cmd);
        t_fail_++;
    }
    unlink(l3_path);
    rmdir(l3_dir);
    return t_done();
}
