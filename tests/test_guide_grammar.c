/*
 * Guided decoding: GBNF parse errors, acceptance byte by byte (and split at
 * every byte), partial UTF-8, JSON mode and regexes, masks against a brute
 * force on two real vocabularies, and random walks whose output must parse
 * (jansson) or match (PCRE2, anchored at both ends).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <time.h>

#include "core/err.h"
#include "guide/guide.h"
#include "guide/internal.h"
#include "model/gguf.h"
#include "t.h"
#include "tokenizer/tokenizer.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static struct ifl_guide *compile(const char *text)
{
    struct ifl_guide *g = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_guide_compile_gbnf(&g, text, strlen(text), err);
    CHECK_MSG(rc == 0, "compile failed: %s\n%s", err, text);
    return g;
}

/* 1 when s is a complete sentence of g, fed whole. */
static int matches(const struct ifl_guide *g, const char *s, size_t n)
{
    struct ifl_guide_state st;
    CHECK_EQ(ifl_guide_state_init(&st, g), 0);
    int ok = ifl_guide_accept_bytes(&st, s, n) == 0 && ifl_guide_is_accepting(&st);
    ifl_guide_state_deinit(&st);
    return ok;
}

/* The same, fed byte by byte and split at every position into two calls;
 * every way must agree with matches(). */
static int matches_all_ways(const struct ifl_guide *g, const char *s)
{
    size_t n = strlen(s);
    int whole = matches(g, s, n);
    struct ifl_guide_state st;
    CHECK_EQ(ifl_guide_state_init(&st, g), 0);
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++)
        ok = ifl_guide_accept_bytes(&st, s + i, 1) == 0;
    ok = ok && ifl_guide_is_accepting(&st);
    CHECK_MSG(ok == whole, "byte by byte disagrees on '%s'", s);
    for (size_t cut = 0; cut <= n; cut++) {
        ifl_guide_state_reset(&st);
        int k = ifl_guide_accept_bytes(&st, s, cut) == 0 &&
                ifl_guide_accept_bytes(&st, s + cut, n - cut) == 0 && ifl_guide_is_accepting(&st);
        CHECK_MSG(k == whole, "split at %zu disagrees on '%s'", cut, s);
    }
    ifl_guide_state_deinit(&st);
    return whole;
}

static void expect_error(const char *text, const char *want)
{
    struct ifl_guide *g = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_guide_compile_gbnf(&g, text, strlen(text), err);
    CHECK_MSG(rc == IFL_EFORMAT, "'%s' compiled (rc %d)", text, rc);
    CHECK(g == NULL);
    CHECK_MSG(strstr(err, want) != NULL, "error for '%s' is '%s', wanted '%s'", text, err, want);
}

static void test_parse_errors(void)
{
    expect_error("root ::= foo", "gbnf: 1:10: undefined rule 'foo'");
    expect_error("root ::= a\na ::= \"x\" bar\n", "2:11: undefined rule 'bar'");
    expect_error("root ::= (\"a\" | \"b\"", "1:10: unbalanced '('");
    expect_error("root ::= \"a\")", "unbalanced ')'");
    expect_error("root ::= [a-z", "1:10: unbalanced '['");
    expect_error("root ::= \"\\q\"", "1:11: bad escape '\\q'");
    expect_error("root ::= \"\\x4\"", "needs 2 hex digits");
    expect_error("root ::= \"abc", "unterminated string literal");
    expect_error("a ::= \"x\"", "missing rule 'root'");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "2:1: rule 'root' is defined twice");
    expect_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"",
                 "left recursion through rule 'expr'");
    expect_error("root ::= (\"a\"?)*", "left recursion");
    expect_error("root ::= \"a\"{3,2}", "max below min");
    expect_error("root ::= [z-a]", "reversed");
    expect_error("root \"a\"", "expected '::='");
    expect_error("", "missing rule 'root'");
}

static void test_basic_accept(void)
{
    struct ifl_guide *g = compile("# a comment\nroot ::= \"ab\" [c-e]? x{2,3} ( \"y\" | \"z\" )+\n"
                                  "x ::= [^a-z] # trailing comment\n");
    CHECK(matches_all_ways(g, "ab12y"));
    CHECK(matches_all_ways(g, "abc123zy"));
    CHECK(!matches_all_ways(g, "ab1y"));
    CHECK(!matches_all_ways(g, "ab1234y"));
    CHECK(!matches_all_ways(g, "abf12y"));
    CHECK(!matches_all_ways(g, "ab12"));
    struct ifl_guide_state st;
    ifl_guide_state_init(&st, g);
    CHECK(!ifl_guide_is_accepting(&st));
    CHECK(ifl_guide_can_continue(&st));
    CHECK_EQ(ifl_guide_accept_bytes(&st, "ab12y", 5), 0);
    CHECK(ifl_guide_is_accepting(&st));
    CHECK(ifl_guide_can_continue(&st));
    /* a rejected byte leaves the state as it was */
    CHECK_EQ(ifl_guide_accept_bytes(&st, "yq", 2), IFL_EINVAL);
    CHECK(ifl_guide_is_accepting(&st));
    struct ifl_guide_state c2;
    ifl_guide_state_init(&c2, g);
    CHECK_EQ(ifl_guide_state_copy(&c2, &st), 0);
    CHECK_EQ(ifl_guide_accept_bytes(&c2, "z", 1), 0);
    CHECK(ifl_guide_is_accepting(&c2));
    ifl_guide_state_reset(&st);
    CHECK(!ifl_guide_is_accepting(&st));
    ifl_guide_state_deinit(&st);
    ifl_guide_state_deinit(&c2);
    ifl_guide_free(g);

    g = compile("root ::= \"a\" \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\" [\\]\\-x]\n");
    CHECK(matches_all_ways(g, "a\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80]"));
    CHECK(matches_all_ways(g, "a\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80-"));
    CHECK(!matches_all_ways(g, "a\n\t\\\"A\xC3\xA9\xF0\x9F\x98\x80y"));
    ifl_guide_free(g);

    /* multi-line alternatives and a rule continued inside parentheses */
    g = compile(
        "root ::= item\n  | \"[\" (\n item\n \",\"\n item ) \"]\"\nitem ::= \"x\" | \"y\"\n");
    CHECK(matches_all_ways(g, "x"));
    CHECK(matches_all_ways(g, "[x,y]"));
    CHECK(!matches_all_ways(g, "[x]"));
    ifl_guide_free(g);
    /* exact and open counts */
    g = compile("root ::= \"a\"{3} \"b\"{2,} \"c\"{0,1}");
    CHECK(matches_all_ways(g, "aaabb"));
    CHECK(matches_all_ways(g, "aaabbbbbc"));
    CHECK(!matches_all_ways(g, "aabb"));
    CHECK(!matches_all_ways(g, "aaab"));
    ifl_guide_free(g);
}

static const char *arith = "root ::= expr\n"
                           "expr ::= term ((\"+\" | \"-\") term)*\n"
                           "term ::= factor ((\"*\" | \"/\") factor)*\n"
                           "factor ::= number | \"(\" expr \")\" | \"-\" factor\n"
                           "number ::= [0-9]+ (\".\" [0-9]+)?\n";

static const char *csv = "root ::= row (\"\\n\" row)* \"\\n\"?\n"
                         "row ::= field (\",\" field)*\n"
                         "field ::= [^,\\n\"]* | \"\\\"\" ([^\"] | \"\\\"\\\"\")* \"\\\"\"\n";

static const char *stmt = "root ::= stmt+\n"
                          "stmt ::= ident ws \"=\" ws expr \";\" ws | \"if\" ws \"(\" expr \")\" "
                          "ws \"{\" ws stmt* \"}\" ws\n"
                          "expr ::= atom (ws [-+*<] ws atom)*\n"
                          "atom ::= ident | [0-9]+ | \"(\" expr \")\"\n"
                          "ident ::= [a-z] [a-z0-9_]*\n"
                          "ws ::= [ ]?\n";

static void test_grammars(void)
{
    struct ifl_guide *g = compile(arith);
    const char *good[] = {"1", "1+2*3", "(1+2)*3", "-(4.5)/-2", "((((7))))", "1-2-3*4/5"};
    const char *bad[] = {"", "1+", "(1", "1++2", "a", "1.", "()", "1)"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK_MSG(matches_all_ways(g, good[i]), "arith rejects '%s'", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!matches_all_ways(g, bad[i]), "arith accepts '%s'", bad[i]);
    ifl_guide_free(g);

    g = compile(csv);
    CHECK(matches_all_ways(g, "a,b,c\n1,2,3\n"));
    CHECK(matches_all_ways(g, "\"x,y\",\"say \"\"hi\"\"\",\n,,"));
    CHECK(!matches_all_ways(g, "a\"b"));
    CHECK(!matches_all_ways(g, "\"open"));
    ifl_guide_free(g);

    g = compile(stmt);
    CHECK(matches_all_ways(g, "x = 1 + y;"));
    CHECK(matches_all_ways(g, "if (a<b) { x = (a*2); } y=3;"));
    CHECK(!matches_all_ways(g, "if (a) { x = 1; "));
    CHECK(!matches_all_ways(g, "x = ;"));
    ifl_guide_free(g);
}

static void test_json_mode(void)
{
    struct ifl_guide *g = NULL, *o = NULL;
    char err[IFL_ERR_LEN];
    CHECK_EQ(ifl_guide_compile_json(&g, 0, err), 0);
    CHECK_EQ(ifl_guide_compile_json(&o, 1, err), 0);
    const char *good[] = {"{}",
                          "[]",
                          "0",
                          "-1.5e+10",
                          "\"a\\u00e9\\n\"",
                          "true",
                          "null",
                          " { \"a\" : [1, 2, {\"b\": null}], \"c\": \"\xC3\xA9\" } ",
                          "[[[[]]]]"};
    const char *bad[] = {"{",   "[1,]",     "01", "{\"a\" 1}", "\"\\x\"",
                         "tru", "{'a': 1}", "1.", "\"a\nb\""};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK_MSG(matches_all_ways(g, good[i]), "json rejects '%s'", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_MSG(!matches_all_ways(g, bad[i]), "json accepts '%s'", bad[i]);
    CHECK(matches_all_ways(o, "{\"k\": [true]}"));
    CHECK(!matches_all_ways(o, "[1]"));
    CHECK(!matches_all_ways(o, "1"));
    ifl_guide_free(g);
    ifl_guide_free(o);
}

static struct ifl_guide *compile_re(const char *re)
{
    struct ifl_guide *g = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_guide_compile_regex(&g, re, strlen(re), err);
    CHECK_MSG(rc == 0, "regex '%s': %s", re, err);
    return g;
}

static void test_regex(void)
{
    struct {
        const char *re, *yes[3], *no[3];
    } cases[] = {
        {"^\\d{4}-\\d{2}-\\d{2}$",
         {"2024-01-31", "0000-00-00", NULL},
         {"2024-1-31", "2024-01-31x", "abcd-ef-gh"}},
        {"\\(?\\d{3}\\)?[- ]?\\d{3}-\\d{4}",
         {"(555) 123-4567", "555-123-4567", "5551234567x"},
         {"55-123-4567", "(555)1234567", NULL}},
        {"[a-zA-Z_][a-zA-Z0-9_]*", {"_x1", "Hello", NULL}, {"1x", "", "a-b"}},
        {"(cat|dog|bird)s?( and (cat|dog))*",
         {"cats", "dog and cat and dog", "bird"},
         {"cow", "cats and", NULL}},
        {"a.c|x\\.y|[^abc]{2,3}|\\w+@\\w+\\.(com|org)",
         {"abc", "x.y", "zzz"},
         {"a\nc", "xay", "zzzz"}},
        {"(?:ab)+\\s\\S[\\d\\sx-z]", {"abab x9", "ab -y", NULL}, {"ab x", "aba x1", NULL}},
        {"caf\\u00e9|\xCE\xB1+", {"caf\xC3\xA9", "\xCE\xB1\xCE\xB1", NULL}, {"cafe", "", NULL}},
    };
    /* (555) 123-4567: "5551234567x" is a no; fix the table entry by hand */
    cases[1].yes[2] = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct ifl_guide *g = compile_re(cases[i].re);
        if (!g)
            continue;
        for (int k = 0; k < 3; k++) {
            if (cases[i].yes[k])
                CHECK_MSG(matches_all_ways(g, cases[i].yes[k]), "/%s/ rejects '%s'", cases[i].re,
                          cases[i].yes[k]);
            if (cases[i].no[k])
                CHECK_MSG(!matches_all_ways(g, cases[i].no[k]), "/%s/ accepts '%s'", cases[i].re,
                          cases[i].no[k]);
        }
        ifl_guide_free(g);
    }
    struct {
        const char *re, *want;
        int rc;
    } errs[] = {
        {"(ab", "regex: 1: unbalanced '('", IFL_EFORMAT},
        {"ab)", "regex: 3: unbalanced ')'", IFL_EFORMAT},
        {"[ab", "unbalanced '['", IFL_EFORMAT},
        {"*a", "nothing to repeat", IFL_EFORMAT},
        {"(a)\\1", "backreferences", IFL_EUNSUPPORTED},
        {"a(?=b)", "lookaround", IFL_EUNSUPPORTED},
        {"a^b", "'^' is supported only at the start", IFL_EUNSUPPORTED},
        {"a\\", "lone backslash", IFL_EFORMAT},
        {"\\q", "unknown escape", IFL_EFORMAT},
    };
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
        struct ifl_guide *g = NULL;
        char err[IFL_ERR_LEN] = "";
        int rc = ifl_guide_compile_regex(&g, errs[i].re, strlen(errs[i].re), err);
        CHECK_MSG(rc == errs[i].rc, "/%s/: rc %d (%s)", errs[i].re, rc, err);
        CHECK_MSG(strstr(err, errs[i].want) != NULL, "/%s/: '%s'", errs[i].re, err);
        CHECK(g == NULL);
    }
}

/* Repeat counts, escapes and braces: a count that does not compile is an
 * error naming it, never literal text (issue 35: a{100000} was lexed as
 * "a" then the text "{100000}", so the guide "matched" a{1000...). */
static void test_regex_counts(void)
{
    struct {
        const char *re, *want;
        int rc;
    } errs[] = {
        {"a{100000}", "regex: 2: repeat count in '{100000}' is too large (max 10000)", IFL_EFORMAT},
        {"[a-z]{1,100000}", "regex: 6: repeat count in '{1,100000}' is too large", IFL_EFORMAT},
        {"a{99999}", "regex: 2: repeat count in '{99999}' is too large", IFL_EFORMAT},
        {"a{1234567890123456789012}", "is too large (max 10000)", IFL_EFORMAT},
        {"a{4294967297}", "is too large", IFL_EFORMAT}, /* 2^32 + 1: no wrap to 1 */
        {"(ab){2,4294967296}", "is too large", IFL_EFORMAT},
        {"a{10001,}", "is too large", IFL_EFORMAT},
        {"a{1a}", "malformed repeat '{1a}'", IFL_EFORMAT},
        {"a{1,2", "malformed repeat '{1,2'", IFL_EFORMAT},
        {"a{ 3}", "malformed repeat", IFL_EFORMAT},
        {"a{,5}", "malformed repeat '{,5}'", IFL_EFORMAT},
        {"a{3,2}", "maximum below its minimum", IFL_EFORMAT},
        {"{3}", "regex: 1: '{3}' has nothing to repeat", IFL_EFORMAT},
        {"x|{2,}", "'{2,}' has nothing to repeat", IFL_EFORMAT},
        {"a*+a", "possessive quantifier '*+' is not supported", IFL_EUNSUPPORTED},
        {"a{2}+", "possessive quantifier '{2}+'", IFL_EUNSUPPORTED},
        {"a{2}{3}", "stacked quantifiers", IFL_EUNSUPPORTED},
        {"\\012", "octal escapes", IFL_EUNSUPPORTED},
        {"[\\01]", "octal escapes", IFL_EUNSUPPORTED},
        {"\\uD800", "surrogate", IFL_EFORMAT},
    };
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
        struct ifl_guide *g = NULL;
        char err[IFL_ERR_LEN] = "";
        int rc = ifl_guide_compile_regex(&g, errs[i].re, strlen(errs[i].re), err);
        CHECK_MSG(rc == errs[i].rc, "/%s/: rc %d (%s)", errs[i].re, rc, err);
        CHECK_MSG(strstr(err, errs[i].want) != NULL, "/%s/: '%s'", errs[i].re, err);
        CHECK(g == NULL);
        ifl_guide_free(g);
    }
    /* what does compile means what PCRE means by it */
    struct {
        const char *re, *yes[3], *no[3];
    } cases[] = {
        {"a{10000}", {NULL}, {"a", "aaaaaaaaaaaaaaaaaaaa", "a{10000}"}},
        {"a{2,}b", {"aab", "aaaaab", NULL}, {"ab", "a{2,}b", NULL}},
        {"a{0}b", {"b", NULL, NULL}, {"ab", "a{0}b", NULL}},
        {"a{1,3}?", {"a", "aaa", NULL}, {"aaaa", "", NULL}},
        {"a{x}", {"a{x}", NULL, NULL}, {"a", "ax", NULL}}, /* not a count: text */
        {"a*{b", {"aaa{b", "{b", NULL}, {"aaab", NULL, NULL}},
        {"{\"k\": \\d}", {"{\"k\": 7}", NULL, NULL}, {"{\"k\": }", NULL, NULL}},
        {"caf\\\xC3\xA9", {"caf\xC3\xA9", NULL, NULL}, {"cafe", NULL, NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct ifl_guide *g = compile_re(cases[i].re);
        if (!g)
            continue;
        for (int k = 0; k < 3; k++) {
            if (cases[i].yes[k])
                CHECK_MSG(matches_all_ways(g, cases[i].yes[k]), "/%s/ rejects '%s'", cases[i].re,
                          cases[i].yes[k]);
            if (cases[i].no[k])
                CHECK_MSG(!matches_all_ways(g, cases[i].no[k]), "/%s/ accepts '%s'", cases[i].re,
                          cases[i].no[k]);
        }
        ifl_guide_free(g);
    }
    /* \0 is NUL when no octal digit follows */
    struct ifl_guide *g = compile_re("\\0x");
    if (g) {
        CHECK(matches(g, "\0x", 2));
        CHECK(!matches(g, "x", 1));
        ifl_guide_free(g);
    }
    /* exactly 10000 (the limit) still compiles and counts */
    g = compile_re("a{10000}");
    if (g) {
        char *s = malloc(10001);
        memset(s, 'a', 10000);
        s[10000] = 0;
        CHECK(matches(g, s, 10000));
        CHECK(!matches(g, s, 9999));
        free(s);
        ifl_guide_free(g);
    }
    /* GBNF's own counts name the limit too */
    expect_error("root ::= \"a\"{100001}", "repetition count too large (max 10000)");
    expect_error("root ::= \"a\"{0,99999999999999999999}",
                 "repetition count too large (max 10000)");
}

static void test_partial_utf8(void)
{
    struct ifl_guide *g =
        compile("root ::= \"\xC3\xA9\" [\xCE\xB1-\xCF\x89]+ \"\xF0\x9F\x98\x80\"?");
    struct ifl_guide_state st;
    ifl_guide_state_init(&st, g);
    /* é split over two tokens */
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xC3", 1), 0);
    CHECK(!ifl_guide_is_accepting(&st));
    CHECK(ifl_guide_can_continue(&st));
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xA8", 1), IFL_EINVAL); /* è */
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xA9\xCE", 2), 0);
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xB1", 1), 0); /* α */
    CHECK(ifl_guide_is_accepting(&st));
    /* a lead byte no allowed character starts with is refused at once */
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xC4", 1), IFL_EINVAL);
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\x80", 1), IFL_EINVAL); /* stray continuation */
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xF0\x9F", 2), 0);
    CHECK(!ifl_guide_is_accepting(&st));
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\x98\x81", 2), IFL_EINVAL); /* U+1F601 */
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\x98", 1), 0);
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\x80", 1), 0);
    CHECK(ifl_guide_is_accepting(&st));
    CHECK(!ifl_guide_can_continue(&st));
    ifl_guide_state_deinit(&st);
    ifl_guide_free(g);
    /* negated classes: a prefix is fine when some completion is outside */
    g = compile("root ::= [^\xC3\x80-\xC3\xBF]");
    CHECK(!matches(g, "\xC3\xA9", 2));
    CHECK(matches(g, "\xC4\x80", 2));
    ifl_guide_state_init(&st, g);
    CHECK_EQ(ifl_guide_accept_bytes(&st, "\xC3", 1), IFL_EINVAL); /* all of C3xx excluded */
    ifl_guide_state_deinit(&st);
    ifl_guide_free(g);
}

static void test_limits(void)
{
    /* exponentially ambiguous: every "a" may end any of many parses */
    const char *amb = "root ::= x x x x x x x x x x x x x x x x\nx ::= \"a\"* \n";
    struct ifl_guide *g = compile(amb);
    if (g) {
        struct ifl_guide_state st;
        ifl_guide_state_init(&st, g);
        int rc = 0;
        for (int i = 0; i < 40 && rc == 0; i++)
            rc = ifl_guide_accept_bytes(&st, "a", 1);
        CHECK(rc == 0 || rc == IFL_EFULL);
        ifl_guide_state_deinit(&st);
        ifl_guide_free(g);
    }
    /* deep nesting is bounded, an error rather than a crash */
    g = compile("root ::= \"(\" root \")\" | \"x\"");
    struct ifl_guide_state st;
    ifl_guide_state_init(&st, g);
    int rc = 0, i;
    for (i = 0; i < 5000 && rc == 0; i++)
        rc = ifl_guide_accept_bytes(&st, "(", 1);
    CHECK_EQ(rc, IFL_EFULL);
    ifl_guide_state_deinit(&st);
    ifl_guide_free(g);
    /* nested repeats of what can match nothing: exponentially many paths
     * reach the same few stacks. Each step's work is bounded, so this is
     * an error or IFL_EFULL in well under a second, not a hang (the old
     * code took ~30 s for the first and ~4 s for the step of the second;
     * found by fuzz_guide_diff) */
    struct ifl_guide *h = NULL;
    char err[IFL_ERR_LEN] = "";
    double t0 = now_s();
    rc = ifl_guide_compile_regex(&h, "(((|){3}){3}){3}", 16, err);
    CHECK_EQ(rc, IFL_EFORMAT);
    CHECK_MSG(strstr(err, "too ambiguous") != NULL, "err: %s", err);
    ifl_guide_free(h);
    h = compile_re("x((|){4}){6}y");
    if (h) {
        ifl_guide_state_init(&st, h);
        CHECK_EQ(ifl_guide_accept_bytes(&st, "x", 1), IFL_EFULL);
        ifl_guide_state_deinit(&st);
        ifl_guide_free(h);
    }
    double dt = now_s() - t0;
    CHECK_MSG(dt < 10.0, "ambiguous repeats took %.1f s", dt);
    /* a long repetition runs in constant stack depth */
    g = compile("root ::= [a-z]* \"!\"");
    ifl_guide_state_init(&st, g);
    for (i = 0; i < 100000 && rc == IFL_EFULL; i++)
        rc = 0;
    for (i = 0; i < 100000; i++)
        if (ifl_guide_accept_bytes(&st, "q", 1))
            break;
    CHECK_EQ(i, 100000);
    CHECK(st.len < 16);
    ifl_guide_state_deinit(&st);
    ifl_guide_free(g);
}

/* ---------------------------------------------------------------- vocab */

struct vocab_fix {
    struct ifl_gguf *gg;
    struct ifl_vocab *v;
    struct ifl_guide_vocab_index *vi;
    struct ifl_guide_masker *m;
};

static int load_vocab(struct vocab_fix *f, const char *rel)
{
    char path[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/%s", t_shared(), rel);
    memset(f, 0, sizeof *f);
    if (ifl_gguf_open(&f->gg, path, err) || ifl_vocab_load(&f->v, f->gg, err)) {
        fprintf(stderr, "  skip: %s: %s\n", path, err);
        return -1;
    }
    double t0 = now_s();
    int rc = ifl_guide_vocab_index_create(&f->vi, f->v, err);
    CHECK_MSG(rc == 0, "index: %s", err);
    if (rc)
        return -1;
    fprintf(stderr, "  %s: %d tokens, index built in %.1f ms\n", rel, ifl_vocab_n_tokens(f->v),
            (now_s() - t0) * 1e3);
    CHECK_EQ(ifl_guide_masker_create(&f->m, f->vi), 0);
    return 0;
}

static void free_vocab(struct vocab_fix *f)
{
    ifl_guide_masker_free(f->m);
    ifl_guide_vocab_index_free(f->vi);
    ifl_vocab_free(f->v);
    ifl_gguf_free(f->gg);
}

/* Compares the mask with accepting each token from a copy of the state. */
static int check_mask_brute(struct vocab_fix *f, const struct ifl_guide_state *st,
                            const uint32_t *mask, int64_t count)
{
    struct ifl_guide_state t;
    ifl_guide_state_init(&t, st->g);
    int32_t n = ifl_vocab_n_tokens(f->v);
    int64_t c = 0;
    int bad = 0;
    for (int32_t id = 0; id < n; id++) {
        ifl_guide_state_copy(&t, st);
        int ok = ifl_guide_accept_token(&t, f->vi, id) == 0;
        int in = (mask[id >> 5] >> (id & 31)) & 1;
        c += ok;
        if (ok != in && bad++ < 5) {
            char piece[256];
            size_t l = ifl_vocab_piece(f->v, id, 1, piece, sizeof piece - 1);
            piece[l < sizeof piece ? l : sizeof piece - 1] = 0;
            CHECK_MSG(0, "token %d '%s': brute force %d, mask %d", id, piece, ok, in);
        }
    }
    CHECK_EQ(c, count);
    ifl_guide_state_deinit(&t);
    return bad == 0;
}

/* Picks a random allowed token (not an end token); -1 when none. */
static int32_t pick(const uint32_t *mask, int32_t n, const struct vocab_fix *f, int allow_eog)
{
    int32_t start = (int32_t)(rnd() % (uint32_t)n);
    for (int32_t k = 0; k < n; k++) {
        int32_t id = (start + k) % n;
        if ((mask[id >> 5] >> (id & 31)) & 1) {
            if (!allow_eog && ifl_vocab_is_eog(f->v, id))
                continue;
            return id;
        }
    }
    return -1;
}

static uint32_t min_depth(const struct ifl_guide_state *st)
{
    uint32_t best = UINT32_MAX;
    for (size_t off = 0; off < st->len; off += 1 + st->buf[off])
        if (st->buf[off] < best)
            best = st->buf[off];
    return best + (st->need ? 1 : 0);
}

/* Random walk: random allowed tokens; after `relax` steps, prefer among a
 * few candidates the one that brings a parse closest to its end. Writes the
 * text (NUL-terminated) and returns its length, or -1 if it did not end. */
static long walk(struct vocab_fix *f, const struct ifl_guide *g, char *out, size_t cap,
                 int check_every, int *n_checked, double *mask_time, int *n_masks)
{
    int32_t n = ifl_vocab_n_tokens(f->v);
    uint32_t *mask = malloc(((size_t)n + 31) / 32 * 4);
    struct ifl_guide_state st, t, best;
    ifl_guide_state_init(&st, g);
    ifl_guide_state_init(&t, g);
    ifl_guide_state_init(&best, g);
    size_t len = 0;
    long result = -1;
    for (int step = 0; step < 400; step++) {
        double t0 = now_s();
        int64_t cnt = ifl_guide_mask(f->m, &st, mask);
        *mask_time += now_s() - t0;
        ++*n_masks;
        CHECK(cnt >= 0);
        if (check_every && step % check_every == 0) {
            check_mask_brute(f, &st, mask, cnt);
            ++*n_checked;
        }
        if (ifl_guide_is_accepting(&st) &&
            (!ifl_guide_can_continue(&st) || step > 30 || rnd() % 4 == 0)) {
            result = (long)len;
            break;
        }
        int32_t id;
        if (step < 30) {
            id = pick(mask, n, f, 0);
        } else {
            id = -1;
            uint32_t bd = UINT32_MAX;
            for (int c = 0; c < 64; c++) {
                int32_t k = pick(mask, n, f, 0);
                if (k < 0)
                    break;
                ifl_guide_state_copy(&t, &st);
                if (ifl_guide_accept_token(&t, f->vi, k))
                    continue;
                uint32_t d = ifl_guide_is_accepting(&t) ? 0 : min_depth(&t) + 1;
                if (d < bd) {
                    bd = d;
                    id = k;
                }
            }
        }
        if (id < 0)
            break;
        char piece[512];
        size_t pl = ifl_vocab_piece(f->v, id, 0, piece, sizeof piece);
        CHECK_EQ(ifl_guide_accept_token(&st, f->vi, id), 0);
        if (len + pl + 1 > cap)
            break;
        memcpy(out + len, piece, pl);
        len += pl;
    }
    out[len] = 0;
    free(mask);
    ifl_guide_state_deinit(&st);
    ifl_guide_state_deinit(&t);
    ifl_guide_state_deinit(&best);
    return result;
}

static const char *uni_gbnf =
    "root ::= ([\xCE\xB1-\xCF\x89] | \"\xC3\xA9\" | [^a-z\\x00-\\x1f] | \"the\" | \" \")+ \".\"\n";

static void run_vocab(const char *rel, int walks, int check_every, int is_big)
{
    struct vocab_fix f;
    if (load_vocab(&f, rel))
        return;
    char err[IFL_ERR_LEN];
    struct ifl_guide *json = NULL, *obj = NULL;
    CHECK_EQ(ifl_guide_compile_json(&json, 0, err), 0);
    CHECK_EQ(ifl_guide_compile_json(&obj, 1, err), 0);
    struct ifl_guide *gs[] = {json,         obj,           compile(arith),
                              compile(csv), compile(stmt), compile(uni_gbnf)};
    const char *names[] = {"json", "json object", "arith", "csv", "stmt", "unicode"};
    const char *regexes[] = {"\\d{4}-\\d{2}-\\d{2}", "\\(\\d{3}\\) \\d{3}-\\d{4}",
                             "[a-zA-Z_][a-zA-Z0-9_]{0,20}", "(cat|dog|bird)s?( and (cat|dog))*",
                             "[a-z]{1,8}@[a-z]{1,8}\\.(com|org)"};
    char *buf = malloc(1 << 16);
    int n_checked = 0, n_masks = 0;
    double mt = 0;
    for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++) {
        if (!gs[gi])
            continue;
        int done = 0;
        for (int w = 0; w < walks; w++) {
            long l = walk(&f, gs[gi], buf, 1 << 16, check_every, &n_checked, &mt, &n_masks);
            if (l < 0)
                continue;
            done++;
            CHECK_MSG(matches(gs[gi], buf, (size_t)l), "%s: walk output not accepted: %s",
                      names[gi], buf);
            if (gi <= 1) {
                json_error_t je;
                json_t *j = json_loadb(buf, (size_t)l, JSON_DECODE_ANY, &je);
                CHECK_MSG(j != NULL, "%s: jansson rejects '%s': %s", names[gi], buf, je.text);
                if (j && gi == 1)
                    CHECK(json_is_object(j));
                json_decref(j);
            }
        }
        CHECK_MSG(done >= walks / 2, "%s: only %d of %d walks ended", names[gi], done, walks);
    }
    for (size_t ri = 0; ri < sizeof regexes / sizeof *regexes; ri++) {
        struct ifl_guide *g = compile_re(regexes[ri]);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)regexes[ri], PCRE2_ZERO_TERMINATED,
                          PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF, &ec, &eo, NULL);
        CHECK(re != NULL);
        pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
        int done = 0;
        for (int w = 0; g && re && w < walks; w++) {
            long l = walk(&f, g, buf, 1 << 16, check_every, &n_checked, &mt, &n_masks);
            if (l < 0)
                continue;
            done++;
            int rc = pcre2_match(re, (PCRE2_SPTR)buf, (size_t)l, 0, 0, md, NULL);
            CHECK_MSG(rc >= 0, "/%s/: PCRE2 does not match '%s'", regexes[ri], buf);
        }
        CHECK_MSG(done >= walks / 2, "/%s/: only %d of %d walks ended", regexes[ri], done, walks);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        ifl_guide_free(g);
    }
    uint64_t hits, misses;
    ifl_guide_masker_stats(f.m, &hits, &misses);
    fprintf(stderr,
            "  %s: %d masks checked against brute force; mask %.3f ms/step mean over %d "
            "steps (cache %llu hits, %llu misses)\n",
            rel, n_checked, n_masks ? mt / n_masks * 1e3 : 0.0, n_masks, (unsigned long long)hits,
            (unsigned long long)misses);
    if (is_big && json) {
        /* cold masks (new masker, so no cache) at a few JSON states */
        struct ifl_guide_masker *m2;
        ifl_guide_masker_create(&m2, f.vi);
        uint32_t *mask = malloc(((size_t)ifl_vocab_n_tokens(f.v) + 31) / 32 * 4);
        const char *pre[] = {"", "{\"name\": \"ab", "[1, 2.5, {\"k\": tr", "{\"a\": [[", "12"};
        for (size_t i = 0; i < sizeof pre / sizeof *pre; i++) {
            struct ifl_guide_state st;
            ifl_guide_state_init(&st, json);
            CHECK_EQ(ifl_guide_accept_bytes(&st, pre[i], strlen(pre[i])), 0);
            ifl_guide_masker_free(m2);
            ifl_guide_masker_create(&m2, f.vi);
            double t0 = now_s();
            int64_t c = ifl_guide_mask(m2, &st, mask);
            double t1 = now_s();
            ifl_guide_mask(m2, &st, mask);
            double t2 = now_s();
            fprintf(stderr, "  json after '%s': %lld allowed, mask %.2f ms cold, %.3f ms cached\n",
                    pre[i], (long long)c, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
            check_mask_brute(&f, &st, mask, c);
            ifl_guide_state_deinit(&st);
        }
        free(mask);
        ifl_guide_masker_free(m2);
    }
    free(buf);
    for (size_t gi = 0; gi < sizeof gs / sizeof *gs; gi++)
        ifl_guide_free(gs[gi]);
    free_vocab(&f);
}

static void test_vocab_small(void)
{
    run_vocab("models/stories260K.gguf", 12, 1, 0);
}

static void test_vocab_llama3(void)
{
    run_vocab("models/vocab/ggml-vocab-llama-bpe.gguf", 4, 7, 1);
}

/* ---------------------------------------------------------------- schema */

/* A small validator for the keywords the schemas below use (test-only). */
static int validate(json_t *v, json_t *s, json_t *root)
{
    if (json_is_true(s))
        return 1;
    json_t *k;
    if ((k = json_object_get(s, "$ref"))) {
        const char *r = json_string_value(k);
        if (strcmp(r, "#") == 0)
            return validate(v, root, root);
        return validate(v, json_object_get(json_object_get(root, "$defs"), r + 8), root);
    }
    if (json_object_get(s, "nullable") == json_true() && json_is_null(v))
        return 1;
    if ((k = json_object_get(s, "const")))
        return json_equal(v, k);
    if ((k = json_object_get(s, "enum"))) {
        for (size_t i = 0; i < json_array_size(k); i++)
            if (json_equal(v, json_array_get(k, i)))
                return 1;
        return 0;
    }
    if ((k = json_object_get(s, "anyOf")) || (k = json_object_get(s, "oneOf"))) {
        for (size_t i = 0; i < json_array_size(k); i++)
            if (validate(v, json_array_get(k, i), root))
                return 1;
        return 0;
    }
    const char *t = json_string_value(json_object_get(s, "type"));
    if (json_is_array(json_object_get(s, "type"))) {
        json_t *ts = json_object_get(s, "type");
        for (size_t i = 0; i < json_array_size(ts); i++) {
            json_t *sub = json_deep_copy(s);
            json_object_set(sub, "type", json_array_get(ts, i));
            int ok = validate(v, sub, root);
            json_decref(sub);
            if (ok)
                return 1;
        }
        return 0;
    }
    if (!t)
        return 1;
    if (strcmp(t, "string") == 0) {
        if (!json_is_string(v))
            return 0;
        const char *str = json_string_value(v);
        size_t cps = 0;
        for (const char *p = str; *p; p++)
            cps += ((unsigned char)*p & 0xC0) != 0x80;
        json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
        if ((mn && cps < (size_t)json_integer_value(mn)) ||
            (mx && cps > (size_t)json_integer_value(mx)))
            return 0;
        const char *f = json_string_value(json_object_get(s, "format"));
        if (f && strcmp(f, "date") == 0) {
            int y, m, d;
            char tail;
            return strlen(str) == 10 && sscanf(str, "%4d-%2d-%2d%c", &y, &m, &d, &tail) == 3 &&
                   m >= 1 && m <= 12 && d >= 1 && d <= 31;
        }
        if (f && strcmp(f, "uuid") == 0)
            return strlen(str) == 36 && str[8] == '-' && str[13] == '-';
        if (f && strcmp(f, "email") == 0)
            return strchr(str, '@') != NULL;
        return 1;
    }
    if (strcmp(t, "integer") == 0) {
        if (!json_is_integer(v))
            return 0;
        json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
        return !(mn && json_integer_value(v) < json_number_value(mn)) &&
               !(mx && json_integer_value(v) > json_number_value(mx));
    }
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    if (strcmp(t, "array") == 0) {
        if (!json_is_array(v))
            return 0;
        json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
        size_t n = json_array_size(v);
        if ((mn && n < (size_t)json_integer_value(mn)) ||
            (mx && n > (size_t)json_integer_value(mx)))
            return 0;
        json_t *items = json_object_get(s, "items");
        for (size_t i = 0; items && i < n; i++)
            if (!validate(json_array_get(v, i), items, root))
                return 0;
        return 1;
    }
    if (strcmp(t, "object") == 0) {
        if (!json_is_object(v))
            return 0;
        json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i))))
                return 0;
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val)
        {
            json_t *ps = json_object_get(props, key);
            if (props && !ps && json_object_get(s, "additionalProperties") == json_false())
                return 0;
            if (ps && !validate(val, ps, root))
                return 0;
        }
        return 1;
    }
    return 0;
}

static const char *schemas[] = {
    "{\"type\": \"integer\"}",
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 8}, "
    "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120}}, \"required\": [\"name\", "
    "\"age\"], \"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"green\", 3, null]}, \"minItems\": 1, "
    "\"maxItems\": 3}",
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"boolean\"}, \"b\": {\"type\": "
    "[\"string\", \"null\"]}, \"c\": {\"const\": \"x\"}}}",
    "{\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"string\", \"format\": \"uuid\"}, "
    "\"when\": {\"type\": \"string\", \"format\": \"date\"}, \"mail\": {\"type\": \"string\", "
    "\"format\": \"email\"}}, \"required\": [\"id\", \"when\"]}",
    "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": "
    "\"integer\"}, "
    "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}, \"maxItems\": 2}}, "
    "\"required\": [\"v\"]}}, \"$ref\": \"#/$defs/node\"}",
    "{\"anyOf\": [{\"type\": \"number\"}, {\"type\": \"array\", \"items\": {\"type\": \"object\", "
    "\"properties\": {\"k\": {\"type\": \"string\", \"minLength\": 2}}, \"required\": [\"k\"]}}]}",
    "{\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"string\", \"format\": "
    "\"date-time\", \"nullable\": true}, \"n\": {\"type\": \"integer\", \"minimum\": 1}}, "
    "\"required\": [\"t\", \"n\"]}",
    "{\"type\": [\"string\", \"null\"], \"enum\": [\"a\", 1, \"b\", null, 2.5]}",
    "{\"type\": \"integer\", \"enum\": [\"1\", 2, true]}",
    "{\"type\": \"integer\", \"minimum\": -3, \"maximum\": 0}",
    "{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}",
    "{\"type\": \"number\", \"minimum\": -1, \"maximum\": 0}",
};

static struct ifl_guide *compile_schema(const char *s)
{
    struct ifl_guide *g = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_guide_compile_json_schema(&g, s, strlen(s), err);
    CHECK_MSG(rc == 0, "schema %s: %s", s, err);
    return g;
}

static void test_schema(void)
{
    struct {
        int schema;
        const char *yes, *no;
    } cases[] = {
        {0, "-12", "1.5"},
        {1, "{\"name\": \"bob\", \"age\": 7}", "{\"name\": \"bob\", \"age\": 121}"},
        {1, "{ \"name\" : \"\", \"age\" : 120 }", "{\"age\": 7, \"name\": \"bob\"}"},
        {1, "{\"name\": \"12345678\", \"age\": 0}", "{\"name\": \"123456789\", \"age\": 0}"},
        {2, "[\"red\", 3, null]", "[]"},
        {2, "[\"green\"]", "[\"red\", \"red\", \"red\", \"red\"]"},
        {3, "{}", "{\"c\": \"y\"}"},
        {3, "{\"b\": null, \"c\": \"x\"}", "{\"b\": 1}"},
        {3, "{\"a\": true, \"b\": \"s\", \"c\": \"x\"}", "{\"c\": \"x\", \"a\": true}"},
        {4, "{\"id\": \"123e4567-e89b-12d3-a456-426614174000\", \"when\": \"2024-02-29\"}",
         "{\"id\": \"123e4567\", \"when\": \"2024-02-29\"}"},
        {4,
         "{\"id\": \"00000000-0000-0000-0000-000000000000\", \"when\": \"1999-12-31\", \"mail\": "
         "\"a.b@c.org\"}",
         "{\"id\": \"00000000-0000-0000-0000-000000000000\", \"when\": \"1999-13-31\"}"},
        {5, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": []}]}", "{\"kids\": []}"},
        {6, "[{\"k\": \"ab\"}]", "[{\"k\": \"a\"}]"},
        {6, "2.5e3", "\"x\""},
        {7, "{\"t\": \"2024-01-02T03:04:05Z\", \"n\": 3}",
         "{\"t\": \"2024-01-02T03:04:05\", \"n\": 3}"},
        {7, "{\"t\": null, \"n\": 1}", "{\"t\": null, \"n\": 0}"},
        /* enum values of another type than `type` are left out */
        {8, "\"a\"", "1"},
        {8, "null", "\"c\""},
        {9, "2", "1"},
        /* ranges whose integer part is 0 alone: the digits 0..0 were an
         * empty alternative, so "" and ".5" passed (found by fuzz_guide_diff) */
        {10, "0", ""},
        {10, "-3", "-0"},
        {11, "0.5", ".5"},
        {11, "0", ""},
        {11, "1", "1.5"},
        {12, "-0.25", "-.25"},
        {12, "-1", "-"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct ifl_guide *g = compile_schema(schemas[cases[i].schema]);
        if (!g)
            continue;
        CHECK_MSG(matches_all_ways(g, cases[i].yes), "schema %d rejects %s", cases[i].schema,
                  cases[i].yes);
        CHECK_MSG(!matches_all_ways(g, cases[i].no), "schema %d accepts %s", cases[i].schema,
                  cases[i].no);
        ifl_guide_free(g);
    }
    struct {
        const char *s, *want;
        int rc;
    } errs[] = {
        {"{\"type\": \"strin\"}", "json schema: unknown type 'strin'", IFL_EFORMAT},
        {"{\"type\": \"string\", \"pattern\": \"a+\"}", "'pattern' is not supported",
         IFL_EUNSUPPORTED},
        {"{\"$ref\": \"#/$defs/nope\"}", "$ref '#/$defs/nope' does not resolve", IFL_EFORMAT},
        {"{\"type\": \"object\"", "json schema: 1:", IFL_EFORMAT},
        {"{\"type\": \"integer\", \"minimum\": -5}", "not supported", IFL_EUNSUPPORTED},
        {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", "below minItems", IFL_EFORMAT},
        {"{\"enum\": []}", "'enum' must be a non-empty array", IFL_EFORMAT},
        {"{\"type\": \"string\", \"format\": \"ipv6\"}", "format 'ipv6' is not supported",
         IFL_EUNSUPPORTED},
        /* never fail open (issue 35): a constraint the grammar would drop is an error */
        {"{\"type\": \"string\", \"minLength\": 20000}", "minLength 20000 is above 10000",
         IFL_EUNSUPPORTED},
        {"{\"type\": \"string\", \"maxLength\": 100000}", "maxLength 100000 is above 10000",
         IFL_EUNSUPPORTED},
        {"{\"type\": \"array\", \"minItems\": 100000}", "minItems/maxItems above 10000",
         IFL_EUNSUPPORTED},
        {"{\"type\": \"string\", \"format\": \"date\", \"maxLength\": 5}",
         "'format' together with minLength/maxLength", IFL_EUNSUPPORTED},
        {"{\"type\": \"string\", \"minLength\": 5, \"enum\": [\"a\", \"bcdefg\"]}",
         "'enum' together with 'minLength'", IFL_EUNSUPPORTED},
        {"{\"type\": \"integer\", \"const\": \"x\"}", "admits no value", IFL_EFORMAT},
        {"{\"type\": \"string\", \"enum\": [1, 2]}", "admits no value", IFL_EFORMAT},
        {"{\"const\": 1, \"enum\": [2]}", "admits no value", IFL_EFORMAT},
        {"{\"type\": \"integer\", \"not\": {\"const\": 3}}", "keyword 'not' is not supported",
         IFL_EUNSUPPORTED},
        {"{\"type\": \"object\", \"properties\": {\"a\": {}}, \"if\": {}}", "keyword 'if'",
         IFL_EUNSUPPORTED},
        {"{\"type\": \"integer\", \"anyOf\": [{\"type\": \"string\"}]}",
         "'anyOf' together with 'type'", IFL_EUNSUPPORTED},
        {"{\"anyOf\": [{\"type\": \"integer\"}], \"allOf\": [{\"type\": \"string\"}]}",
         "'anyOf' together with 'allOf'", IFL_EUNSUPPORTED},
        {"{\"$ref\": \"#/$defs/a\", \"maxLength\": 2, \"$defs\": {\"a\": {\"type\": \"string\"}}}",
         "'$ref' together with 'maxLength'", IFL_EUNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
        struct ifl_guide *g = NULL;
        char err[IFL_ERR_LEN] = "";
        int rc = ifl_guide_compile_json_schema(&g, errs[i].s, strlen(errs[i].s), err);
        CHECK_MSG(rc == errs[i].rc, "%s: rc %d (%s)", errs[i].s, rc, err);
        CHECK_MSG(strstr(err, errs[i].want) != NULL, "%s: '%s'", errs[i].s, err);
        CHECK(g == NULL);
    }
}

static void run_schema_walks(const char *rel, int walks, int check_every)
{
    struct vocab_fix f;
    if (load_vocab(&f, rel))
        return;
    char *buf = malloc(1 << 16);
    int n_checked = 0, n_masks = 0, total = 0, ok = 0;
    double mt = 0;
    for (size_t si = 0; si < sizeof schemas / sizeof *schemas; si++) {
        struct ifl_guide *g = compile_schema(schemas[si]);
        json_t *sch = json_loads(schemas[si], 0, NULL);
        for (int w = 0; g && w < walks; w++) {
            long l = walk(&f, g, buf, 1 << 16, check_every, &n_checked, &mt, &n_masks);
            if (l < 0)
                continue;
            total++;
            json_error_t je;
            json_t *j = json_loadb(buf, (size_t)l, JSON_DECODE_ANY, &je);
            CHECK_MSG(j != NULL, "schema %zu: jansson rejects '%s': %s", si, buf, je.text);
            int valid = j && validate(j, sch, sch);
            CHECK_MSG(valid, "schema %zu: '%s' does not validate", si, buf);
            ok += valid;
            json_decref(j);
        }
        json_decref(sch);
        ifl_guide_free(g);
    }
    fprintf(stderr, "  %s: schemas: %d of %d walks valid, %d masks checked, %.3f ms/mask\n", rel,
            ok, total, n_checked, n_masks ? mt / n_masks * 1e3 : 0.0);
    CHECK(total >= (int)(sizeof schemas / sizeof *schemas) * walks / 2);
    free(buf);
    free_vocab(&f);
}

static void test_schema_walks(void)
{
    run_schema_walks("models/stories260K.gguf", 10, 3);
    run_schema_walks("models/vocab/ggml-vocab-llama-bpe.gguf", 3, 0);
}

/* The plain-token fast path against the whole-trie walk: along random
 * token walks of several grammars, every mask is the same both ways and
 * the fast one is the faster in string content. */
static void test_fast_path(void)
{
    struct vocab_fix f;
    if (load_vocab(&f, "models/vocab/ggml-vocab-llama-bpe.gguf"))
        return;
    struct ifl_guide_masker *slow = NULL;
    CHECK_EQ(ifl_guide_masker_create_sized(&slow, f.vi, 1), 0);
    ifl_guide_masker_set_fast(slow, 0);
    struct ifl_guide_masker *fast = NULL;
    CHECK_EQ(ifl_guide_masker_create_sized(&fast, f.vi, 1), 0);
    if (!slow || !fast)
        return;
    static const char *const texts[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":7},"
        "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}},"
        "\"required\":[\"a\",\"b\",\"c\"]}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"email\"}}",
    };
    int32_t n = ifl_vocab_n_tokens(f.v);
    size_t nw = ((size_t)n + 31) / 32;
    uint32_t *a = malloc(nw * 4), *b = malloc(nw * 4);
    int compared = 0;
    double t_fast = 0, t_slow = 0;
    static const char *const res[] = {"[A-Za-z_][A-Za-z0-9_]{0,15}( [a-z]+)?",
                                      "(0x[0-9a-f]{1,12}|[0-9]{1,9})(, [0-9a-f]+)*"};
    for (int k = 0; k < 6 && a && b; k++) {
        struct ifl_guide *g = NULL;
        if (k < 2)
            CHECK_EQ(ifl_guide_compile_json_schema(&g, texts[k], strlen(texts[k]), NULL), 0);
        else if (k < 4)
            CHECK_EQ(ifl_guide_compile_json(&g, k == 3, NULL), 0);
        else
            CHECK_EQ(ifl_guide_compile_regex(&g, res[k - 4], strlen(res[k - 4]), NULL), 0);
        if (!g)
            continue;
        struct ifl_guide_state st;
        ifl_guide_state_init(&st, g);
        for (int step = 0; step < 12; step++) {
            double t0 = now_s();
            int64_t ca = ifl_guide_mask(fast, &st, a);
            double t1 = now_s();
            int64_t cb = ifl_guide_mask(slow, &st, b);
            t_fast += t1 - t0;
            t_slow += now_s() - t1;
            CHECK_EQ(ca, cb);
            CHECK_MSG(!memcmp(a, b, nw * 4), "grammar %d step %d: masks differ", k, step);
            compared++;
            /* prefer long tokens, so the walk gets inside strings */
            int32_t id = -1;
            for (int c = 0; c < 200; c++) {
                int32_t t = pick(a, n, &f, 0);
                if (t >= 0 && (id < 0 || ifl_vocab_piece(f.v, t, 0, NULL, 0) >
                                             ifl_vocab_piece(f.v, id, 0, NULL, 0)))
                    id = t;
            }
            if (id < 0 || ifl_guide_accept_token(&st, f.vi, id))
                break;
        }
        ifl_guide_state_deinit(&st);
        ifl_guide_free(g);
    }
    fprintf(stderr, "  %d masks equal both ways; fast %.3f ms, full walk %.3f ms per mask\n",
            compared, t_fast / compared * 1e3, t_slow / compared * 1e3);
    CHECK(compared >= 20);
    free(a);
    free(b);
    ifl_guide_masker_free(slow);
    ifl_guide_masker_free(fast);
    free_vocab(&f);
}

int main(void)
{
    T_RUN(test_parse_errors);
    T_RUN(test_basic_accept);
    T_RUN(test_grammars);
    T_RUN(test_json_mode);
    T_RUN(test_regex);
    T_RUN(test_regex_counts);
    T_RUN(test_partial_utf8);
    T_RUN(test_limits);
    T_RUN(test_vocab_small);
    T_RUN(test_vocab_llama3);
    T_RUN(test_schema);
    T_RUN(test_schema_walks);
    T_RUN(test_fast_path);
    return t_done();
}
