/*
 * GBNF grammars: the parser and the compiled form (the automaton that runs
 * it is automaton.c).
 *
 * Parsing builds each rule's body as elements (see internal.h); groups and
 * repetitions become generated rules named "<rule>_<n>": x* is R ::= x R |
 * (empty), x{m,n} is m copies of x then a chain of optional rules. So the
 * compiled grammar has only three element kinds: a character class, a rule
 * reference, and the end of an alternative.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/internal.h"

/* ---------------------------------------------------------------- vectors */

static int vec_push(struct ifl_guide_vec *v, uint32_t x)
{
    if (v->n == v->cap && ifl_guide_vec_reserve(v, v->n + 1))
        return IFL_ENOMEM;
    v->v[v->n++] = x;
    return 0;
}

/* ---------------------------------------------------------------- parser */

struct brule {
    char *name;
    int defined;
    size_t def_at, ref_at; /* source offsets of the definition / first reference */
    struct ifl_guide_vec body;
    int n_gen; /* generated sub-rules so far */
};

struct parser {
    const char *s;
    size_t n, p;
    struct brule *rules;
    uint32_t n_rules, cap_rules;
    struct ifl_guide_vec cls_off; /* into ranges */
    struct ifl_guide_vec ranges;
    struct ifl_guide_vec cls_neg;
    size_t total; /* elements emitted, against IFL_GUIDE_MAX_ELEMS */
    int depth;    /* nesting of ( ) */
    char *err;
    int rc;
};

static void where(const struct parser *ps, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && i < ps->n; i++) {
        if (ps->s[i] == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

static int perr(struct parser *ps, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int perr(struct parser *ps, size_t at, const char *fmt, ...)
{
    if (ps->rc)
        return ps->rc;
    ps->rc = IFL_EFORMAT;
    if (ps->err) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        int line, col;
        where(ps, at, &line, &col);
        snprintf(ps->err, IFL_ERR_LEN, "gbnf: %d:%d: %s", line, col, msg);
    }
    return ps->rc;
}

static int oom(struct parser *ps)
{
    if (!ps->rc) {
        ps->rc = IFL_ENOMEM;
        ifl_err(ps->err, IFL_ENOMEM, "gbnf: out of memory");
    }
    return ps->rc;
}

static int peek(const struct parser *ps)
{
    return ps->p < ps->n ? (unsigned char)ps->s[ps->p] : -1;
}

static void skip_ws(struct parser *ps, int newlines)
{
    while (ps->p < ps->n) {
        char c = ps->s[ps->p];
        if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->n && ps->s[ps->p] != '\n')
                ps->p++;
        } else {
            break;
        }
    }
}

static int is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static int64_t new_rule(struct parser *ps, const char *name, size_t len)
{
    if (ps->n_rules == ps->cap_rules) {
        uint32_t cap = ps->cap_rules ? ps->cap_rules * 2 : 16;
        struct brule *r = realloc(ps->rules, cap * sizeof *r);
        if (!r)
            return oom(ps);
        ps->rules = r;
        ps->cap_rules = cap;
    }
    if (ps->n_rules >= (1u << 27))
        return perr(ps, ps->p, "too many rules");
    struct brule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name)
        return oom(ps);
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return ps->n_rules++;
}

static int64_t find_rule(struct parser *ps, const char *name, size_t len)
{
    for (uint32_t i = 0; i < ps->n_rules; i++)
        if (strlen(ps->rules[i].name) == len && memcmp(ps->rules[i].name, name, len) == 0)
            return i;
    return new_rule(ps, name, len);
}

static int64_t gen_rule(struct parser *ps, uint32_t parent)
{
    char name[300];
    int k = ++ps->rules[parent].n_gen;
    snprintf(name, sizeof name, "%.200s_%d", ps->rules[parent].name, k);
    int64_t r = new_rule(ps, name, strlen(name));
    if (r >= 0)
        ps->rules[r].defined = 1;
    return r;
}

static int emit(struct parser *ps, uint32_t rule, uint32_t e)
{
    if (++ps->total > IFL_GUIDE_MAX_ELEMS)
        return perr(ps, ps->p, "grammar too large (over %zu elements)", IFL_GUIDE_MAX_ELEMS);
    if (vec_push(&ps->rules[rule].body, e))
        return oom(ps);
    return 0;
}

/* Adds a class from ranges[lo, hi] pairs; returns its id. */
static int64_t add_class(struct parser *ps, int neg, const uint32_t *rg, size_t n_pairs)
{
    if (ps->cls_off.n == 0 && vec_push(&ps->cls_off, 0))
        return oom(ps);
    if (ps->cls_off.n > (1u << 27))
        return perr(ps, ps->p, "too many character classes");
    for (size_t i = 0; i < 2 * n_pairs; i++)
        if (vec_push(&ps->ranges, rg[i]))
            return oom(ps);
    if (vec_push(&ps->cls_off, (uint32_t)(ps->ranges.n / 2)) || vec_push(&ps->cls_neg, neg))
        return oom(ps);
    return (int64_t)ps->cls_neg.n - 1;
}

static int emit_char(struct parser *ps, uint32_t rule, uint32_t cp)
{
    uint32_t rg[2] = {cp, cp};
    int64_t c = add_class(ps, 0, rg, 1);
    return c < 0 ? (int)c : emit(ps, rule, E_MAKE(E_CLASS, c));
}

/* Decodes one UTF-8 character of the source; invalid bytes stand for
 * themselves (as code points 0x80-0xFF would not be meant, reject them). */
static int64_t src_char(struct parser *ps)
{
    size_t at = ps->p;
    int64_t cp = ifl_guide_utf8_next(ps->s, ps->n, &ps->p);
    if (cp == -1)
        return perr(ps, at, "invalid UTF-8 byte 0x%02X", (unsigned char)ps->s[at]);
    if (cp == -2)
        return perr(ps, at, "truncated UTF-8 character");
    return cp;
}

/* One character of a literal or class, escapes decoded. */
static int64_t parse_char(struct parser *ps)
{
    if (ps->p >= ps->n)
        return perr(ps, ps->p, "unexpected end of grammar");
    if (ps->s[ps->p] != '\\')
        return src_char(ps);
    size_t at = ps->p++;
    if (ps->p >= ps->n)
        return perr(ps, at, "unfinished escape at end of grammar");
    char e = ps->s[ps->p++];
    int digits = 0;
    /* clang-format off */
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
    case '(': case ')': case '|': case '*': case '+': case '?': case '{': case '}':
        return e;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        return perr(ps, at, "bad escape '\\%c'", e >= 32 && e < 127 ? e : '?');
    }
    /* clang-format on */
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = ps->p < ps->n ? ifl_guide_hexval((unsigned char)ps->s[ps->p]) : -1;
        if (h < 0)
            return perr(ps, at, "bad escape: '\\%c' needs %d hex digits", e, digits);
        v = v * 16 + (uint32_t)h;
        ps->p++;
    }
    if (v > 0x10FFFF)
        return perr(ps, at, "escape U+%X is beyond U+10FFFF", v);
    return v;
}

static int parse_alts(struct parser *ps, uint32_t rule, int nested);

static int parse_count(struct parser *ps, uint32_t *v)
{
    size_t at = ps->p;
    uint64_t x = 0;
    if (peek(ps) < '0' || peek(ps) > '9')
        return perr(ps, at, "expected a number in { }");
    while (peek(ps) >= '0' && peek(ps) <= '9') {
        x = x * 10 + (uint64_t)(ps->s[ps->p++] - '0');
        if (x > 100000)
            return perr(ps, at, "repetition count too large (max 10000)");
    }
    *v = (uint32_t)x;
    return 0;
}

/* Emits item x repeated m..n times (n == UINT32_MAX: unbounded). */
static int emit_repeat(struct parser *ps, uint32_t rule, uint32_t x, uint32_t m, uint32_t n,
                       size_t at)
{
    if (n != UINT32_MAX && n < m)
        return perr(ps, at, "repetition {%u,%u} has max below min", m, n);
    if (m > 10000 || (n != UINT32_MAX && n > 10000))
        return perr(ps, at, "repetition count too large (max 10000)");
    for (uint32_t i = 0; i < m; i++)
        if (emit(ps, rule, x))
            return ps->rc;
    if (n == UINT32_MAX) {
        int64_t r = gen_rule(ps, rule);
        if (r < 0)
            return (int)r;
        if (emit(ps, (uint32_t)r, x) || emit(ps, (uint32_t)r, E_MAKE(E_REF, r)) ||
            emit(ps, (uint32_t)r, E_MAKE(E_END, 0)) || emit(ps, (uint32_t)r, E_MAKE(E_END, 0)))
            return ps->rc;
        return emit(ps, rule, E_MAKE(E_REF, r));
    }
    int64_t prev = -1;
    for (uint32_t i = m; i < n; i++) {
        int64_t r = gen_rule(ps, rule);
        if (r < 0)
            return (int)r;
        if (emit(ps, (uint32_t)r, x) || (prev >= 0 && emit(ps, (uint32_t)r, E_MAKE(E_REF, prev))) ||
            emit(ps, (uint32_t)r, E_MAKE(E_END, 0)) || emit(ps, (uint32_t)r, E_MAKE(E_END, 0)))
            return ps->rc;
        prev = r;
    }
    return prev >= 0 ? emit(ps, rule, E_MAKE(E_REF, prev)) : 0;
}

static int cmp_pair(const void *a, const void *b)
{
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

static int parse_class(struct parser *ps, uint32_t rule)
{
    size_t at = ps->p++;
    int neg = 0;
    if (peek(ps) == '^') {
        neg = 1;
        ps->p++;
    }
    struct ifl_guide_vec rg = {0};
    while (1) {
        if (ps->p >= ps->n) {
            free(rg.v);
            return perr(ps, at, "unbalanced '[': character class is not closed");
        }
        if (ps->s[ps->p] == ']')
            break;
        int64_t lo = parse_char(ps), hi = lo;
        if (lo < 0)
            break;
        if (peek(ps) == '-' && ps->p + 1 < ps->n && ps->s[ps->p + 1] != ']') {
            ps->p++;
            hi = parse_char(ps);
            if (hi < 0)
                break;
            if (hi < lo) {
                free(rg.v);
                return perr(ps, at, "character range is reversed (U+%X after U+%X)", (unsigned)hi,
                            (unsigned)lo);
            }
        }
        if (vec_push(&rg, (uint32_t)lo) || vec_push(&rg, (uint32_t)hi)) {
            free(rg.v);
            return oom(ps);
        }
    }
    if (ps->rc) {
        free(rg.v);
        return ps->rc;
    }
    ps->p++; /* ']' */
    /* sort and merge, so membership and coverage are simple scans */
    size_t np = rg.n / 2, k = 0;
    if (np)
        qsort(rg.v, np, 2 * sizeof(uint32_t), cmp_pair);
    for (size_t i = 0; i < np; i++) {
        if (k && rg.v[2 * i] <= rg.v[2 * (k - 1) + 1] + 1) {
            if (rg.v[2 * i + 1] > rg.v[2 * (k - 1) + 1])
                rg.v[2 * (k - 1) + 1] = rg.v[2 * i + 1];
        } else {
            rg.v[2 * k] = rg.v[2 * i];
            rg.v[2 * k + 1] = rg.v[2 * i + 1];
            k++;
        }
    }
    int64_t c = add_class(ps, neg, rg.v, k);
    free(rg.v);
    return c < 0 ? (int)c : emit(ps, rule, E_MAKE(E_CLASS, c));
}

/* Parses one atom into rule's body; 1 when there was one, 0 when not. */
static int parse_atom(struct parser *ps, uint32_t rule, int nested)
{
    int c = peek(ps);
    size_t at = ps->p;
    if (c == '"') {
        ps->p++;
        while (1) {
            if (ps->p >= ps->n || ps->s[ps->p] == '\n')
                return perr(ps, at, "unterminated string literal");
            if (ps->s[ps->p] == '"')
                break;
            int64_t ch = parse_char(ps);
            if (ch < 0 || emit_char(ps, rule, (uint32_t)ch))
                return ps->rc;
        }
        ps->p++;
        return 1;
    }
    if (c == '[')
        return parse_class(ps, rule) ? ps->rc : 1;
    if (c == '.') {
        ps->p++;
        int64_t k = add_class(ps, 1, NULL, 0);
        return k < 0 ? (int)k : emit(ps, rule, E_MAKE(E_CLASS, k)) ? ps->rc : 1;
    }
    if (c == '(') {
        ps->p++;
        if (++ps->depth > 200)
            return perr(ps, at, "groups nested too deeply");
        int64_t r = gen_rule(ps, rule);
        if (r < 0)
            return (int)r;
        if (parse_alts(ps, (uint32_t)r, 1))
            return ps->rc;
        skip_ws(ps, 1);
        if (peek(ps) != ')')
            return perr(ps, at, "unbalanced '(': no matching ')'");
        ps->p++;
        ps->depth--;
        return emit(ps, rule, E_MAKE(E_REF, r)) ? ps->rc : 1;
    }
    if (is_name_char(c)) {
        size_t b = ps->p;
        while (is_name_char(peek(ps)))
            ps->p++;
        size_t e = ps->p;
        if (!nested) {
            /* `name ::=` starts the next rule */
            skip_ws(ps, 0);
            if (ps->p + 3 <= ps->n && memcmp(ps->s + ps->p, "::=", 3) == 0) {
                ps->p = b;
                return 0;
            }
            ps->p = e;
        }
        int64_t r = find_rule(ps, ps->s + b, e - b);
        if (r < 0)
            return (int)r;
        if (!ps->rules[r].ref_at)
            ps->rules[r].ref_at = b + 1;
        return emit(ps, rule, E_MAKE(E_REF, r)) ? ps->rc : 1;
    }
    return 0;
}

static int parse_seq(struct parser *ps, uint32_t rule, int nested)
{
    while (1) {
        skip_ws(ps, nested);
        size_t start = ps->rules[rule].body.n, at = ps->p;
        int got = parse_atom(ps, rule, nested);
        if (got < 0 || ps->rc)
            return ps->rc;
        if (!got)
            break;
        skip_ws(ps, 0);
        int c = peek(ps);
        uint32_t m, n;
        if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            m = c == '+' ? 1 : 0;
            n = c == '?' ? 1 : UINT32_MAX;
        } else if (c == '{') {
            ps->p++;
            skip_ws(ps, 0);
            if (parse_count(ps, &m))
                return ps->rc;
            skip_ws(ps, 0);
            n = m;
            if (peek(ps) == ',') {
                ps->p++;
                skip_ws(ps, 0);
                n = UINT32_MAX;
                if (peek(ps) != '}' && parse_count(ps, &n))
                    return ps->rc;
                skip_ws(ps, 0);
            }
            if (peek(ps) != '}')
                return perr(ps, at, "unbalanced '{': expected '}'");
            ps->p++;
        } else {
            continue;
        }
        /* the atom becomes one element x (a generated rule if it is longer) */
        struct ifl_guide_vec *b = &ps->rules[rule].body;
        uint32_t x;
        if (b->n - start == 1) {
            x = b->v[start];
        } else {
            int64_t r = gen_rule(ps, rule);
            if (r < 0)
                return (int)r;
            b = &ps->rules[rule].body; /* rules may have moved */
            for (size_t i = start; i < b->n; i++)
                if (emit(ps, (uint32_t)r, b->v[i]))
                    return ps->rc;
            if (emit(ps, (uint32_t)r, E_MAKE(E_END, 0)))
                return ps->rc;
            x = E_MAKE(E_REF, r);
        }
        ps->rules[rule].body.n = start;
        if (emit_repeat(ps, rule, x, m, n, at))
            return ps->rc;
    }
    return 0;
}

static int parse_alts(struct parser *ps, uint32_t rule, int nested)
{
    while (1) {
        if (parse_seq(ps, rule, nested) || emit(ps, rule, E_MAKE(E_END, 0)))
            return ps->rc;
        size_t save = ps->p;
        skip_ws(ps, 1);
        if (peek(ps) != '|') {
            ps->p = save;
            return 0;
        }
        ps->p++;
        skip_ws(ps, 1);
    }
}

static int parse_grammar(struct parser *ps)
{
    while (1) {
        skip_ws(ps, 1);
        if (ps->p >= ps->n)
            return 0;
        size_t at = ps->p;
        if (!is_name_char(peek(ps))) {
            int c = peek(ps);
            if (c == ')')
                return perr(ps, at, "unbalanced ')'");
            return perr(ps, at, "expected a rule name, found '%c'", c >= 32 && c < 127 ? c : '?');
        }
        while (is_name_char(peek(ps)))
            ps->p++;
        int64_t r = find_rule(ps, ps->s + at, ps->p - at);
        if (r < 0)
            return (int)r;
        skip_ws(ps, 0);
        if (!(ps->p + 3 <= ps->n && memcmp(ps->s + ps->p, "::=", 3) == 0))
            return perr(ps, ps->p, "expected '::=' after rule name '%s'", ps->rules[r].name);
        if (ps->rules[r].defined)
            return perr(ps, at, "rule '%s' is defined twice", ps->rules[r].name);
        ps->rules[r].defined = 1;
        ps->rules[r].def_at = at;
        ps->p += 3;
        skip_ws(ps, 1); /* a rule may start on the next line */
        if (parse_alts(ps, (uint32_t)r, 0))
            return ps->rc;
        skip_ws(ps, 0);
        int c = peek(ps);
        if (c == ')')
            return perr(ps, ps->p, "unbalanced ')'");
        if (c >= 0 && c != '\n')
            return perr(ps, ps->p, "unexpected '%c'", c >= 32 && c < 127 ? c : '?');
    }
}

/* ---------------------------------------------------------------- checks */

/* Rejects left recursion: rule r reaching itself through references that
 * start an alternative or follow only elements that can match nothing. */
static int check_left_recursion(struct parser *ps, struct ifl_guide *g)
{
    uint8_t *nullable = calloc(g->n_rules, 1);
    uint8_t *mark = calloc(g->n_rules, 1);
    uint32_t *stack = malloc((g->n_rules + 1) * 2 * sizeof *stack);
    int rc = 0;
    if (!nullable || !mark || !stack) {
        rc = oom(ps);
        goto out;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (nullable[r])
                continue;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && !nullable[r]; a++) {
                uint32_t p = g->alts[a];
                while (E_TYPE(g->elems[p]) == E_REF && nullable[E_VAL(g->elems[p])])
                    p++;
                if (E_TYPE(g->elems[p]) == E_END) {
                    nullable[r] = 1;
                    changed = 1;
                }
            }
        }
    }
    /* iterative DFS over left edges; mark 1 = on the path, 2 = done */
    for (uint32_t s = 0; s < g->n_rules && !rc; s++) {
        if (mark[s])
            continue;
        size_t sp = 0;
        stack[sp++] = s; /* the rule */
        stack[sp++] = 0; /* how many of its left references were visited */
        mark[s] = 1;
        while (sp && !rc) {
            uint32_t r = stack[sp - 2], cur = stack[sp - 1];
            /* enumerate left references of r: walk alternatives, cur counts visited refs */
            uint32_t k = 0, next = UINT32_MAX;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && next == UINT32_MAX; a++) {
                for (uint32_t p = g->alts[a]; E_TYPE(g->elems[p]) == E_REF; p++) {
                    if (k++ == cur) {
                        next = E_VAL(g->elems[p]);
                        break;
                    }
                    if (!nullable[E_VAL(g->elems[p])])
                        break;
                }
            }
            if (next == UINT32_MAX) {
                mark[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = cur + 1;
            if (mark[next] == 1) {
                size_t at = ps->rules[next].def_at;
                rc = perr(ps, at,
                          "left recursion through rule '%s' (a rule that can start with itself, "
                          "or a repeated item that can match the empty string)",
                          g->names[next]);
            } else if (mark[next] == 0) {
                mark[next] = 1;
                stack[sp++] = next;
                stack[sp++] = 0;
            }
        }
    }
out:
    free(nullable);
    free(mark);
    free(stack);
    return rc;
}

/* ---------------------------------------------------------------- compile */

void ifl_guide_free(struct ifl_guide *g)
{
    if (!g)
        return;
    if (g->names)
        for (uint32_t i = 0; i < g->n_rules; i++)
            free(g->names[i]);
    free(g->names);
    free(g->elems);
    free(g->alt_off);
    free(g->alts);
    free(g->cls_off);
    free(g->cls_neg);
    free(g->cls_ascii);
    free(g->ranges);
    free(g->init);
    free(g);
}

static int build(struct parser *ps, struct ifl_guide **out)
{
    struct ifl_guide *g = calloc(1, sizeof *g);
    if (!g)
        return oom(ps);
    g->n_rules = ps->n_rules;
    size_t n_el = 0, n_alt = 0;
    for (uint32_t r = 0; r < ps->n_rules; r++) {
        n_el += ps->rules[r].body.n;
        for (size_t i = 0; i < ps->rules[r].body.n; i++)
            n_alt += E_TYPE(ps->rules[r].body.v[i]) == E_END;
    }
    g->n_elems = n_el;
    g->elems = malloc((n_el + 1) * sizeof *g->elems);
    g->alts = malloc((n_alt + 1) * sizeof *g->alts);
    g->alt_off = malloc(((size_t)g->n_rules + 1) * sizeof *g->alt_off);
    g->names = calloc(g->n_rules + 1, sizeof *g->names);
    g->n_classes = (uint32_t)ps->cls_neg.n;
    g->cls_off = malloc(((size_t)g->n_classes + 1) * sizeof *g->cls_off);
    g->cls_neg = malloc((size_t)g->n_classes + 1);
    g->cls_ascii = calloc((size_t)g->n_classes * 4 + 1, sizeof *g->cls_ascii);
    g->ranges = malloc((ps->ranges.n + 1) * sizeof *g->ranges);
    if (!g->elems || !g->alts || !g->alt_off || !g->names || !g->cls_off || !g->cls_neg ||
        !g->cls_ascii || !g->ranges) {
        ifl_guide_free(g);
        return oom(ps);
    }
    size_t pe = 0, pa = 0;
    for (uint32_t r = 0; r < ps->n_rules; r++) {
        g->names[r] = ps->rules[r].name;
        ps->rules[r].name = NULL;
        g->alt_off[r] = (uint32_t)pa;
        const struct ifl_guide_vec *b = &ps->rules[r].body;
        size_t start = pe;
        for (size_t i = 0; i < b->n; i++) {
            g->elems[pe++] = b->v[i];
            if (E_TYPE(b->v[i]) == E_END) {
                g->alts[pa++] = (uint32_t)start;
                start = pe;
            }
        }
    }
    g->alt_off[g->n_rules] = (uint32_t)pa;
    g->elems[pe] = E_MAKE(E_END, 0);
    if (g->n_classes)
        memcpy(g->cls_off, ps->cls_off.v, ((size_t)g->n_classes + 1) * sizeof *g->cls_off);
    for (uint32_t c = 0; c < g->n_classes; c++)
        g->cls_neg[c] = (uint8_t)ps->cls_neg.v[c];
    if (ps->ranges.n)
        memcpy(g->ranges, ps->ranges.v, ps->ranges.n * sizeof *g->ranges);
    for (uint32_t c = 0; c < g->n_classes; c++) {
        for (uint32_t i = g->cls_off[c]; i < g->cls_off[c + 1]; i++)
            for (uint32_t cp = g->ranges[2 * i]; cp <= g->ranges[2 * i + 1] && cp < 128; cp++)
                g->cls_ascii[4 * c + (cp >> 5)] |= 1u << (cp & 31);
        if (g->cls_neg[c])
            for (int k = 0; k < 4; k++)
                g->cls_ascii[4 * c + k] = ~g->cls_ascii[4 * c + k];
    }
    *out = g;
    return 0;
}

int ifl_guide_compile_gbnf(struct ifl_guide **out, const char *text, size_t len, char *err)
{
    if (!out || (!text && len))
        return ifl_err(err, IFL_EINVAL, "gbnf: no grammar given");
    *out = NULL;
    if (len > IFL_GUIDE_MAX_TEXT)
        return ifl_err(err, IFL_EFORMAT, "gbnf: grammar of %zu bytes exceeds the limit of %zu", len,
                       IFL_GUIDE_MAX_TEXT);
    struct parser ps = {.s = text, .n = len, .err = err};
    struct ifl_guide *g = NULL;
    int rc = parse_grammar(&ps);
    int64_t root = -1;
    for (uint32_t r = 0; !rc && r < ps.n_rules; r++) {
        if (!ps.rules[r].defined)
            rc = perr(&ps, ps.rules[r].ref_at ? ps.rules[r].ref_at - 1 : 0, "undefined rule '%s'",
                      ps.rules[r].name);
        else if (strcmp(ps.rules[r].name, "root") == 0)
            root = r;
    }
    if (!rc && root < 0)
        rc = ifl_err(err, ps.rc = IFL_EFORMAT, "gbnf: missing rule 'root' (the start rule)");
    if (!rc)
        rc = build(&ps, &g);
    if (!rc) {
        /* relaxed: the id only has to be unique, it orders nothing */
        static atomic_uint_fast64_t next_id = 1;
        g->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
        g->root = (uint32_t)root;
        rc = check_left_recursion(&ps, g);
    }
    if (!rc) {
        rc = ifl_guide_build_start(g);
        if (rc == IFL_EFULL)
            rc = ifl_err(err, IFL_EFORMAT,
                         "gbnf: the grammar is too ambiguous (its start exceeds %d parses "
                         "or %d expansion steps)",
                         IFL_GUIDE_MAX_STACKS, IFL_GUIDE_MAX_EXPAND);
        else if (rc)
            rc = ifl_err(err, rc, "gbnf: out of memory");
    }
    for (uint32_t r = 0; r < ps.n_rules; r++) {
        free(ps.rules[r].name);
        free(ps.rules[r].body.v);
    }
    free(ps.rules);
    free(ps.cls_off.v);
    free(ps.ranges.v);
    free(ps.cls_neg.v);
    if (rc) {
        ifl_guide_free(g);
        return rc;
    }
    *out = g;
    return 0;
}
