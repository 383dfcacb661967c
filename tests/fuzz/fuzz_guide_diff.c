/*
 * Differential libFuzzer target for guided decoding (issue 35): whenever
 * the guide compiles a constraint, its automaton must decide like an
 * independent judge on sampled strings.
 *
 * - Regex: the judge is PCRE2's whole-string match (PCRE2_ANCHORED |
 *   PCRE2_ENDANCHORED, UTF mode). Both decisions must be equal, in both
 *   directions, on every sample.
 * - JSON Schema: the judge is the validator in src/guide/validate.c. The
 *   grammar is narrower than the schema by design (compact whitespace,
 *   properties in schema order, no extra properties, numbers of at most 15
 *   integer digits), so the check is one way: every text the automaton
 *   accepts must be valid JSON that the validator passes.
 *
 * Samples: walks of the automaton itself (a character at a time, chosen
 * from the constraint's own alphabet, so they reach deep accepting
 * states), one-character edits of those walks (insert, delete, replace:
 * the near misses where an off-by-one count or a wrong class would show),
 * random strings over the alphabet, and raw bytes (invalid UTF-8 must be
 * rejected by both).
 *
 * The first input byte picks the mode (mod 4): 0 the rest is a regex as
 * text, 1 a regex built from the rest by a small generator (always in the
 * common dialect), 2 a schema built from the rest, 3 the rest is schema
 * text. Sampling is seeded from the input, so a run is reproducible.
 *
 * Dialect (what both sides agree on; see docs/api.md for the regex
 * dialect). Excluded or translated here:
 * - PCRE's \v is a class of vertical space; ours (as in Python and
 *   JavaScript) is U+000B: \v is rewritten to \x0B for PCRE.
 * - \uHHHH and two-digit \xHH: PCRE2_ALT_BSUX gives PCRE the same reading.
 * - A '{' that starts like a count but is not one ("a{1a}", "a{,5}",
 *   "a{ 3}") is an error for us and text for PCRE 10.42; refused patterns
 *   are not compared.
 * - Patterns one side refuses are skipped: backreferences, lookaround,
 *   possessive and atomic groups, options, \p, POSIX classes, \Q..\E,
 *   octal, \x{...} (PCRE only); repeats of what can match the empty
 *   string such as (a*)* (rejected by our grammar compiler).
 * - A sample on which our automaton hits its stack limits (IFL_EFULL) or
 *   PCRE its match limit is not compared.
 * - Schemas: oneOf is compiled as anyOf (documented), so the generator
 *   does not use it; a schema the validator calls malformed or
 *   unsupported is skipped; a document with "\u0000" in an object key is
 *   valid JSON that jansson (so the validator) cannot load: not compared.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/guide.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ALPHA 96
#define MAX_SAMPLE 320

/* ------------------------------------------------------------ helpers */

/* What the run compared, printed at exit when FUZZ_GUIDE_STATS is set (a
 * run that compiles nothing or compares nothing finds nothing). */
static struct {
    unsigned long re_ours, re_both, re_samples, re_accepted, sc_ours, sc_judged, sc_docs;
} stats;

static void print_stats(void)
{
    fprintf(stderr,
            "fuzz_guide_diff: regex: %lu compiled by the guide, %lu by PCRE2 too, %lu samples "
            "compared (%lu matches); schema: %lu compiled, %lu judged, %lu documents "
            "validated\n",
            stats.re_ours, stats.re_both, stats.re_samples, stats.re_accepted, stats.sc_ours,
            stats.sc_judged, stats.sc_docs);
}

struct rng {
    uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static unsigned pick(struct rng *r, unsigned n)
{
    return n ? (unsigned)(rnd(r) % n) : 0;
}

/* Generator input: bytes consumed one at a time, zeros once used up. */
struct in {
    const uint8_t *p;
    size_t n, i;
};

static unsigned take(struct in *in, unsigned mod)
{
    if (in->i >= in->n || mod == 0)
        return 0;
    return in->p[in->i++] % mod;
}

struct buf {
    char s[4096];
    size_t n;
    int full;
};

static void add(struct buf *b, const char *s)
{
    size_t k = strlen(s);
    if (b->n + k + 1 > sizeof b->s) {
        b->full = 1;
        return;
    }
    memcpy(b->s + b->n, s, k + 1);
    b->n += k;
}

static size_t utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The characters samples are made of. */
struct alpha {
    uint32_t cp[MAX_ALPHA];
    int n;
};

static void alpha_add(struct alpha *a, int64_t cp)
{
    if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || a->n >= MAX_ALPHA)
        return;
    for (int i = 0; i < a->n; i++)
        if (a->cp[i] == (uint32_t)cp)
            return;
    a->cp[a->n++] = (uint32_t)cp;
}

static int hexv(int c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Every character of the text, the values of \xHH and \uHHHH escapes,
 * their neighbours (so a range's edges get tested from both sides), and a
 * few that sit on class boundaries. */
static void alpha_from_text(struct alpha *a, const char *s, size_t n)
{
    static const uint32_t extra[] = {'a', '0', ' ', '\n', '\t', 0x0B,   0x0C,    '\r',
                                     '_', '9', 'Z', '-',  0xE9, 0x20AC, 0x1F600, 0};
    for (size_t i = 0; i < sizeof extra / sizeof *extra; i++)
        alpha_add(a, extra[i]);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int64_t cp;
        if (c == '\\' && i + 1 < n && (s[i + 1] == 'x' || s[i + 1] == 'u')) {
            int digits = s[i + 1] == 'x' ? 2 : 4;
            uint32_t v = 0;
            int ok = i + 2 + (size_t)digits <= n;
            for (int k = 0; ok && k < digits; k++) {
                int h = hexv((unsigned char)s[i + 2 + (size_t)k]);
                ok = h >= 0;
                v = v * 16 + (uint32_t)(h < 0 ? 0 : h);
            }
            if (ok) {
                alpha_add(a, v);
                alpha_add(a, (int64_t)v - 1);
                alpha_add(a, (int64_t)v + 1);
            }
            i += 2;
            continue;
        }
        if (c < 0x80) {
            cp = c;
            i++;
        } else {
            int need = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
            cp = c & (0x3F >> need);
            i++;
            for (int k = 0; k < need && i < n; k++, i++)
                cp = (cp << 6) | ((unsigned char)s[i] & 0x3F);
        }
        alpha_add(a, cp);
        alpha_add(a, cp - 1);
        alpha_add(a, cp + 1);
    }
}

/* Our decision: 1 accept, 0 reject, -1 undecided (stack limits). st is
 * reused (reset first), so samples do not pay for a new state each. */
static int ours(struct ifl_guide_state *st, const char *s, size_t n)
{
    if (ifl_guide_state_reset(st))
        return -1;
    int rc = ifl_guide_accept_bytes(st, s, n);
    return rc == 0 ? ifl_guide_is_accepting(st) : rc == IFL_EINVAL ? 0 : -1;
}

struct samples {
    char s[48][MAX_SAMPLE];
    size_t n[48];
    int count;
};

static void sample_add(struct samples *sm, const char *s, size_t n)
{
    if (sm->count >= 48 || n > MAX_SAMPLE)
        return;
    memcpy(sm->s[sm->count], s, n);
    sm->n[sm->count++] = n;
}

/* A walk of the automaton: characters from the alphabet, each kept only
 * when the automaton takes it; ends at random once accepting, or when
 * nothing is taken. `closers` are tried first once the text is long (a
 * JSON walk must get to its closing brackets). Returns the length, or -1
 * when the walk did not end in an accepting state. */
static long walk(const struct ifl_guide *g, const struct alpha *a, struct rng *r, char *out,
                 size_t cap, size_t soft, const char *closers)
{
    struct ifl_guide_state st;
    if (ifl_guide_state_init(&st, g)) {
        ifl_guide_state_deinit(&st);
        return -1;
    }
    size_t n = 0;
    long res = -1;
    while (1) {
        if (ifl_guide_is_accepting(&st) && (pick(r, 4) == 0 || n >= soft)) {
            res = (long)n;
            break;
        }
        int taken = 0;
        for (int t = 0; t < 24 && !taken; t++) {
            uint32_t cp;
            if (closers && n >= soft && t < 8)
                cp = (unsigned char)closers[pick(r, (unsigned)strlen(closers))];
            else
                cp = a->cp[pick(r, (unsigned)a->n)];
            char enc[4];
            size_t k = utf8_put(cp, enc);
            if (n + k > cap)
                break;
            int rc = ifl_guide_accept_bytes(&st, enc, k);
            if (rc == 0) {
                memcpy(out + n, enc, k);
                n += k;
                taken = 1;
            } else if (rc != IFL_EINVAL) {
                break;
            }
        }
        if (!taken) {
            if (ifl_guide_is_accepting(&st))
                res = (long)n;
            break;
        }
    }
    ifl_guide_state_deinit(&st);
    return res;
}

/* One-character edits of s (insert, delete, replace), over the alphabet. */
static size_t mutate(const char *s, size_t n, const struct alpha *a, struct rng *r, char *out)
{
    /* split into characters: positions of their first bytes */
    size_t pos[MAX_SAMPLE + 1], np = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            pos[np++] = i;
    pos[np] = n;
    unsigned op = pick(r, 3);
    size_t at = pick(r, (unsigned)np + 1);
    char enc[4];
    size_t k = utf8_put(a->cp[pick(r, (unsigned)a->n)], enc);
    size_t m = 0;
    if (op == 0 || np == 0 || at == np) { /* insert before character `at` */
        size_t b = at < np ? pos[at] : n;
        if (n + k > MAX_SAMPLE)
            return n <= MAX_SAMPLE ? (memcpy(out, s, n), n) : 0;
        memcpy(out, s, b);
        memcpy(out + b, enc, k);
        memcpy(out + b + k, s + b, n - b);
        return n + k;
    }
    size_t b = pos[at], e = pos[at + 1];
    memcpy(out, s, b);
    m = b;
    if (op == 2 && m + k + (n - e) <= MAX_SAMPLE) {
        memcpy(out + m, enc, k);
        m += k;
    }
    memcpy(out + m, s + e, n - e);
    return m + n - e;
}

static void report(const char *what, const char *src, size_t src_n, const char *s, size_t n,
                   const char *detail)
{
    fprintf(stderr,
            "fuzz_guide_diff: %s\n  constraint (%zu bytes): %.*s\n  sample (%zu bytes):", what,
            src_n, (int)src_n, src, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %02X", (unsigned char)s[i]);
    fprintf(stderr, "\n  as text: %.*s\n  %s\n", (int)n, s, detail ? detail : "");
    abort();
}

/* ------------------------------------------------------------ regex */

/* The pattern as PCRE must read it: \v is U+000B here. */
static size_t to_pcre(const char *re, size_t n, char *out, size_t cap)
{
    size_t m = 0;
    for (size_t i = 0; i < n && m + 5 < cap; i++) {
        if (re[i] == '\\' && i + 1 < n) {
            if (re[i + 1] == 'v') {
                memcpy(out + m, "\\x0B", 4);
                m += 4;
            } else {
                out[m++] = re[i];
                out[m++] = re[i + 1];
            }
            i++;
            continue;
        }
        out[m++] = re[i];
    }
    return m;
}

static void check_regex(const char *re, size_t n, uint64_t seed)
{
    struct ifl_guide *g = NULL;
    char err[IFL_ERR_LEN];
    if (ifl_guide_compile_regex(&g, re, n, err))
        return;
    stats.re_ours++;
    char pat[2048];
    size_t pn = to_pcre(re, n, pat, sizeof pat);
    int ec;
    PCRE2_SIZE eo;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    pcre2_code *code = pcre2_compile(
        (PCRE2_SPTR)pat, pn,
        PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_DOLLAR_ENDONLY | PCRE2_NEVER_BACKSLASH_C, &ec, &eo, cc);
    pcre2_compile_context_free(cc);
    if (!code) { /* outside the common dialect */
        ifl_guide_free(g);
        return;
    }
    stats.re_both++;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(mc, 200000);
    pcre2_set_depth_limit(mc, 5000);
    struct rng r = {seed};
    struct alpha a = {.n = 0};
    alpha_from_text(&a, re, n);
    struct samples *sm = malloc(sizeof *sm);
    if (!sm || !md || !mc)
        abort();
    sm->count = 0;
    char w[MAX_SAMPLE];
    for (int i = 0; i < 6; i++) {
        long l = walk(g, &a, &r, w, 64, 40, NULL);
        if (l < 0)
            continue;
        sample_add(sm, w, (size_t)l);
        for (int k = 0; k < 2; k++) {
            char m[MAX_SAMPLE];
            size_t ml = mutate(w, (size_t)l, &a, &r, m);
            sample_add(sm, m, ml);
        }
    }
    sample_add(sm, "", 0);
    while (sm->count < 30) { /* random strings over the alphabet */
        size_t len = pick(&r, 10), k = 0;
        for (size_t i = 0; i < len; i++)
            k += utf8_put(a.cp[pick(&r, (unsigned)a.n)], w + k);
        sample_add(sm, w, k);
    }
    while (sm->count < 33) { /* raw bytes: invalid UTF-8 too */
        size_t len = 1 + pick(&r, 4);
        for (size_t i = 0; i < len; i++)
            w[i] = (char)(pick(&r, 2) ? 0x80 + pick(&r, 128) : pick(&r, 128));
        sample_add(sm, w, len);
    }
    struct ifl_guide_state st;
    if (ifl_guide_state_init(&st, g))
        abort();
    for (int i = 0; i < sm->count; i++) {
        const char *s = sm->s[i];
        size_t sn = sm->n[i];
        int o = ours(&st, s, sn);
        if (o < 0)
            continue;
        int rc =
            pcre2_match(code, (PCRE2_SPTR)s, sn, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, mc);
        int p;
        if (rc >= 0)
            p = 1;
        else if (rc == PCRE2_ERROR_NOMATCH ||
                 (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21))
            p = 0; /* an invalid subject matches nothing */
        else
            continue; /* match or depth limit */
        stats.re_samples++;
        stats.re_accepted += (unsigned long)p;
        if (o != p) {
            char d[128];
            snprintf(d, sizeof d, "guide %s, PCRE2 %s", o ? "accepts" : "rejects",
                     p ? "matches" : "does not match");
            report("regex: the guide and PCRE2 disagree", re, n, s, sn, d);
        }
    }
    ifl_guide_state_deinit(&st);
    free(sm);
    pcre2_match_context_free(mc);
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    ifl_guide_free(g);
}

/* Pieces of the common dialect; the generator strings them together. */
static const char *const re_lit[] = {"a",
                                     "b",
                                     "c",
                                     "x",
                                     "0",
                                     "7",
                                     "-",
                                     " ",
                                     ",",
                                     "}",
                                     "]",
                                     "{",
                                     "\\.",
                                     "\\-",
                                     "\\*",
                                     "\\{",
                                     "\\}",
                                     "\\[",
                                     "\\\\",
                                     "\\/",
                                     "\\|",
                                     "\\(",
                                     "\\?",
                                     "\\n",
                                     "\\t",
                                     "\\r",
                                     "\\f",
                                     "\\v",
                                     "\\0",
                                     "\\x41",
                                     "\\x7f",
                                     "\\x00",
                                     "\\u00e9",
                                     "\\u20AC",
                                     "\xC3\xA9",
                                     "\xE2\x82\xAC",
                                     "\xF0\x9F\x98\x80",
                                     "\\d",
                                     "\\w",
                                     "\\s",
                                     "\\D",
                                     "\\W",
                                     "\\S",
                                     ".",
                                     "\\\xC3\xA9",
                                     "\\ ",
                                     "\\\"",
                                     "\"",
                                     "'",
                                     "_",
                                     "Z",
                                     "\\^",
                                     "\\$",
                                     "#"};
static const char *const cls_item[] = {"a",
                                       "b",
                                       "c-e",
                                       "0-9",
                                       "a-z",
                                       "A-Z",
                                       "\\d",
                                       "\\w",
                                       "\\s",
                                       "-",
                                       "\\]",
                                       "\\-",
                                       "^",
                                       ".",
                                       "\\n",
                                       "\\x00-\\x1f",
                                       "\xC3\xA9",
                                       "\xC3\xA0-\xC3\xBF",
                                       "\\u0100-\\uFFFF",
                                       "\\x7f",
                                       "\\\\",
                                       "[",
                                       "\\^",
                                       " ",
                                       "_",
                                       "x-x",
                                       "\\t-\\r",
                                       "*",
                                       "{",
                                       "}",
                                       "\\v"};

static void g_alt(struct in *in, struct buf *b, int depth);

static void g_atom(struct in *in, struct buf *b, int depth)
{
    unsigned k = take(in, 12);
    if (k <= 4) {
        add(b, re_lit[take(in, sizeof re_lit / sizeof *re_lit)]);
    } else if (k <= 7) {
        add(b, "[");
        if (take(in, 3) == 0)
            add(b, "^");
        unsigned items = 1 + take(in, 3);
        for (unsigned i = 0; i < items; i++) {
            const char *it = cls_item[take(in, sizeof cls_item / sizeof *cls_item)];
            /* '^' first would negate; ']' first would be literal (fine) */
            if (i == 0 && it[0] == '^')
                it = "a";
            add(b, it);
        }
        add(b, "]");
    } else if (k <= 9 && depth < 4) {
        add(b, take(in, 2) ? "(" : "(?:");
        g_alt(in, b, depth + 1);
        add(b, ")");
    } else {
        add(b, re_lit[take(in, 4)]);
    }
    char q[32];
    unsigned m = take(in, 4), x = take(in, 4);
    switch (take(in, 14)) {
    case 0:
        add(b, "*");
        break;
    case 1:
        add(b, "+");
        break;
    case 2:
        add(b, "?");
        break;
    case 3:
        snprintf(q, sizeof q, "{%u}", m);
        add(b, q);
        break;
    case 4:
        snprintf(q, sizeof q, "{%u,}", m);
        add(b, q);
        break;
    case 5:
        snprintf(q, sizeof q, "{%u,%u}", m, m + x);
        add(b, q);
        break;
    case 6:
        add(b, "*?");
        break;
    case 7:
        snprintf(q, sizeof q, "{%u,%u}?", m, m + x);
        add(b, q);
        break;
    case 8:
        add(b, "??");
        break;
    default:
        break;
    }
}

static void g_seq(struct in *in, struct buf *b, int depth)
{
    unsigned n = take(in, 5);
    for (unsigned i = 0; i < n && !b->full; i++)
        g_atom(in, b, depth);
}

static void g_alt(struct in *in, struct buf *b, int depth)
{
    unsigned n = 1 + take(in, depth < 3 ? 3 : 1);
    for (unsigned i = 0; i < n && !b->full; i++) {
        if (i)
            add(b, "|");
        g_seq(in, b, depth);
    }
}

/* ------------------------------------------------------------ schema */

static void check_schema(const char *sc, size_t n, uint64_t seed)
{
    struct ifl_guide *g = NULL;
    char err[IFL_ERR_LEN];
    if (ifl_guide_compile_json_schema(&g, sc, n, err))
        return;
    stats.sc_ours++;
    /* the validator must be able to judge this schema at all */
    int vr = ifl_guide_validate_json(sc, n, "null", 4, err);
    if (vr != 0 && vr != IFL_EINVAL) {
        ifl_guide_free(g);
        return;
    }
    stats.sc_judged++;
    struct rng r = {seed};
    struct alpha a = {.n = 0};
    static const char json_chars[] = "{}[]\",:-.0123456789eE+ truefalsnl\\TZ@_";
    for (const char *c = json_chars; *c; c++)
        alpha_add(&a, (unsigned char)*c);
    alpha_from_text(&a, sc, n);
    char w[MAX_SAMPLE], m[MAX_SAMPLE];
    struct ifl_guide_state st;
    if (ifl_guide_state_init(&st, g))
        abort();
    for (int i = 0; i < 3; i++) {
        long l = walk(g, &a, &r, w, MAX_SAMPLE - 8, 60 + pick(&r, 60), "\"]}0");
        if (l < 0)
            continue;
        for (int k = 0; k < 5; k++) {
            const char *s = w;
            size_t sn = (size_t)l;
            if (k) { /* edits the grammar still takes must be valid too */
                sn = mutate(w, (size_t)l, &a, &r, m);
                s = m;
                if (ours(&st, s, sn) != 1)
                    continue;
            }
            int rc = ifl_guide_validate_json(sc, n, s, sn, err);
            stats.sc_docs++;
            /* valid JSON jansson cannot load: "\u0000" in an object key */
            if (rc == IFL_EINVAL && strstr(err, "NUL byte in object key"))
                continue;
            if (rc == IFL_EINVAL)
                report("schema: the guide accepts a document the validator rejects", sc, n, s, sn,
                       err);
        }
    }
    ifl_guide_state_deinit(&st);
    ifl_guide_free(g);
}

static const char *const names[] = {"a", "b", "c d", "\xC3\xA9", "\"q", "k"};

static json_t *g_value(struct in *in)
{
    switch (take(in, 12)) {
    case 0:
        return json_string("a");
    case 1:
        return json_integer((json_int_t)take(in, 5) - 2);
    case 2:
        return json_real(2.5);
    case 3:
        return json_null();
    case 4:
        return json_true();
    case 5:
        return json_false();
    case 6:
        return json_string("");
    case 7:
        return json_string("\xC3\xA9\n");
    case 8:
        return json_real(1.0);
    case 9:
        return json_pack("{s:i}", "k", 1);
    case 10:
        return json_pack("[is]", 1, "x");
    default:
        return json_string("bcd");
    }
}

static json_t *g_schema(struct in *in, int depth)
{
    json_t *s = json_object();
    unsigned kind = take(in, depth > 3 ? 5 : 15);
    switch (kind) {
    case 0: { /* string */
        json_object_set_new(s, "type", json_string("string"));
        unsigned f = take(in, 10);
        static const char *fmts[] = {"date", "time", "date-time", "uuid", "email"};
        if (f < 5) {
            json_object_set_new(s, "format", json_string(fmts[f]));
        } else {
            unsigned mn = take(in, 4);
            if (take(in, 2))
                json_object_set_new(s, "minLength", json_integer(mn));
            if (take(in, 2))
                json_object_set_new(s, "maxLength", json_integer(mn + take(in, 4)));
        }
        break;
    }
    case 1: { /* integer */
        json_object_set_new(s, "type", json_string("integer"));
        int lo = (int)take(in, 41) - 20, w = (int)take(in, 30);
        switch (take(in, 7)) {
        case 0:
            break;
        case 1:
            json_object_set_new(s, "minimum", json_integer(lo));
            json_object_set_new(s, "maximum", json_integer(lo + w));
            break;
        case 2:
            json_object_set_new(s, "minimum", json_integer(take(in, 2)));
            break;
        case 3:
            json_object_set_new(s, "exclusiveMinimum", json_integer(lo));
            json_object_set_new(s, "exclusiveMaximum", json_integer(lo + w));
            break;
        case 4:
            json_object_set_new(s, "minimum", json_real(lo + 0.5));
            json_object_set_new(s, "maximum", json_real(lo + w + 0.5));
            break;
        case 5:
            json_object_set_new(s, "minimum", json_integer(-999999999999999ll + lo));
            json_object_set_new(s, "maximum", json_integer(999999999999999ll - w));
            break;
        default:
            json_object_set_new(s, "exclusiveMinimum", json_integer(-1));
            break;
        }
        break;
    }
    case 2: { /* number */
        json_object_set_new(s, "type", json_string("number"));
        int lo = (int)take(in, 11) - 5;
        switch (take(in, 3)) {
        case 0:
            break;
        case 1:
            json_object_set_new(s, "minimum", json_integer(0));
            break;
        default:
            json_object_set_new(s, "minimum", json_integer(lo));
            json_object_set_new(s, "maximum", json_integer(lo + (int)take(in, 6)));
        }
        break;
    }
    case 3:
        json_object_set_new(s, "type", json_string("boolean"));
        break;
    case 4:
        json_object_set_new(s, "type", json_string("null"));
        break;
    case 5: { /* object */
        json_object_set_new(s, "type", json_string("object"));
        unsigned np = take(in, 4);
        if (np) {
            json_t *props = json_object(), *req = json_array();
            for (unsigned i = 0; i < np; i++) {
                const char *k = names[take(in, sizeof names / sizeof *names)];
                json_object_set_new(props, k, g_schema(in, depth + 1));
                if (take(in, 2))
                    json_array_append_new(req, json_string(k));
            }
            json_object_set_new(s, "properties", props);
            json_object_set_new(s, "required", req);
            if (take(in, 2))
                json_object_set_new(s, "additionalProperties", json_false());
        } else {
            unsigned ad = take(in, 3);
            if (ad == 1)
                json_object_set_new(s, "additionalProperties", json_false());
            else if (ad == 2)
                json_object_set_new(s, "additionalProperties", g_schema(in, depth + 1));
        }
        break;
    }
    case 6: { /* array */
        json_object_set_new(s, "type", json_string("array"));
        unsigned it = take(in, 3), npre = take(in, 3);
        if (npre) {
            json_t *pre = json_array();
            for (unsigned i = 0; i < npre; i++)
                json_array_append_new(pre, g_schema(in, depth + 1));
            json_object_set_new(s, "prefixItems", pre);
        }
        if (it == 1)
            json_object_set_new(s, "items", g_schema(in, depth + 1));
        else if (it == 2)
            json_object_set_new(s, "items", json_false());
        unsigned mn = take(in, 4);
        if (take(in, 2))
            json_object_set_new(s, "minItems", json_integer(mn));
        if (take(in, 2))
            json_object_set_new(s, "maxItems", json_integer(mn + take(in, 4)));
        break;
    }
    case 7: { /* enum, maybe typed */
        json_t *e = json_array();
        unsigned k = 1 + take(in, 4);
        for (unsigned i = 0; i < k; i++)
            json_array_append_new(e, g_value(in));
        json_object_set_new(s, "enum", e);
        if (take(in, 2)) {
            static const char *ts[] = {"string", "integer", "number", "null", "object"};
            json_object_set_new(s, "type", json_string(ts[take(in, 5)]));
        }
        break;
    }
    case 8:
        json_object_set_new(s, "const", g_value(in));
        break;
    case 9:
    case 10: { /* anyOf / allOf of one */
        json_t *arr = json_array();
        unsigned k = kind == 10 ? 1 : 1 + take(in, 3);
        for (unsigned i = 0; i < k; i++)
            json_array_append_new(arr, g_schema(in, depth + 1));
        json_object_set_new(s, kind == 10 ? "allOf" : "anyOf", arr);
        break;
    }
    case 11: { /* a type array */
        json_t *t = json_array();
        json_array_append_new(t, json_string(take(in, 2) ? "string" : "integer"));
        json_array_append_new(t, json_string(take(in, 2) ? "null" : "boolean"));
        json_object_set_new(s, "type", t);
        if (take(in, 2))
            json_object_set_new(s, "maxLength", json_integer(take(in, 3)));
        if (take(in, 2)) {
            json_object_set_new(s, "minimum", json_integer(-3));
            json_object_set_new(s, "maximum", json_integer(take(in, 5)));
        }
        break;
    }
    case 12: /* a reference to the definition at the root */
        json_object_set_new(s, "$ref", json_string("#/$defs/d"));
        break;
    case 13: { /* nullable */
        json_decref(s);
        s = g_schema(in, depth + 1);
        json_object_set_new(s, "nullable", json_true());
        break;
    }
    default:
        break; /* {}: any value */
    }
    return s;
}

/* ------------------------------------------------------------ entry */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        if (getenv("FUZZ_GUIDE_STATS"))
            atexit(print_stats);
    }
    if (size < 1)
        return 0;
    uint64_t seed = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 1099511628211ull;
    const char *rest = (const char *)data + 1;
    size_t rn = size - 1;
    struct in in = {.p = data + 1, .n = size - 1};
    switch (data[0] % 4) {
    case 0:
        if (rn < 256)
            check_regex(rest, rn, seed);
        break;
    case 1: {
        struct buf *b = malloc(sizeof *b);
        if (!b)
            abort();
        b->n = 0;
        b->full = 0;
        b->s[0] = 0;
        g_alt(&in, b, 0);
        if (!b->full)
            check_regex(b->s, b->n, seed);
        free(b);
        break;
    }
    case 2: {
        json_t *root = g_schema(&in, 0);
        /* the definition $ref "#/$defs/d" points at (refs inside it recurse) */
        if (json_is_object(root))
            json_object_set_new(root, "$defs", json_pack("{s:o}", "d", g_schema(&in, 2)));
        char *text = json_dumps(root, JSON_COMPACT);
        json_decref(root);
        if (text)
            check_schema(text, strlen(text), seed);
        free(text);
        break;
    }
    default:
        if (rn < 4096)
            check_schema(rest, rn, seed);
        break;
    }
    return 0;
}
