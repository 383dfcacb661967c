/*
 * Jinja2 lexer for chat templates, with the environment transformers uses:
 * trim_blocks and lstrip_blocks on, default delimiters.
 *
 * Mirrors jinja2/lexer.py (3.1): the text before a tag is stripped of all
 * trailing whitespace when the tag opens with '-'; otherwise, for block and
 * comment tags not opened with '+', the spaces between the last newline
 * (or the start of the template, or a tag whose match ended in a newline)
 * and the tag are removed (lstrip_blocks). A block or comment tag closing
 * with '%}' / '#}' swallows one following newline (trim_blocks); '-%}'
 * swallows all following whitespace; '+%}' nothing. '{% raw %}' bodies are
 * data. Inside brackets end delimiters are not recognised, as in Jinja.
 * The caller has normalised newlines and dropped one trailing newline.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

struct lexer {
    struct ifl_chat_arena *a;
    const char *s;
    size_t n, pos;
    int line;
    struct ifl_chat_token *t;
    size_t nt, cap;
    char *msg;
    int err_line;
};

static int lex_fail(struct lexer *L, const char *fmt, const char *arg)
{
    snprintf(L->msg, IFL_ERR_LEN, fmt, arg);
    L->err_line = L->line;
    return -1;
}

static struct ifl_chat_token *emit(struct lexer *L, int type)
{
    if (L->nt == L->cap) {
        size_t nc = L->cap ? L->cap * 2 : 256;
        struct ifl_chat_token *nt = ifl_chat_alloc(L->a, nc * sizeof *nt);
        if (L->nt)
            memcpy(nt, L->t, L->nt * sizeof *nt);
        L->t = nt;
        L->cap = nc;
    }
    struct ifl_chat_token *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = L->line;
    return t;
}

static void count_lines(struct lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n')
            L->line++;
}

/* Length of the whitespace (Python \s) starting at p, or 0. */
static size_t ws_at(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x80) {
            if (!ifl_chat_is_space(c))
                break;
            i++;
        } else {
            size_t adv;
            uint32_t cp = ifl_chat_utf8_dec(p + i, n - i, &adv);
            if (!ifl_chat_is_space(cp))
                break;
            i += adv;
        }
    }
    return i;
}

/* Length of text[0..n) once trailing whitespace is removed. */
static size_t rstrip_len(const char *p, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t st = end - 1;
        while (st > 0 && ((unsigned char)p[st] & 0xc0) == 0x80)
            st--;
        size_t adv;
        uint32_t c = ifl_chat_utf8_dec(p + st, end - st, &adv);
        if (!ifl_chat_is_space(c))
            break;
        end = st;
    }
    return end;
}

/* The data before a tag, with '-' / lstrip_blocks applied. */
static void emit_data(struct lexer *L, size_t from, size_t to, char sign, int is_var,
                      int line_starting)
{
    const char *p = L->s + from;
    size_t n = to - from;
    if (sign == '-') {
        n = rstrip_len(p, n);
    } else if (sign != '+' && !is_var) {
        size_t l = n;
        while (l > 0 && p[l - 1] != '\n')
            l--;
        if ((l > 0 || line_starting) && l < n && ws_at(p + l, n - l) == n - l)
            n = l;
    }
    if (n) {
        struct ifl_chat_token *t = emit(L, T_DATA);
        t->s = ifl_chat_mkstr(L->a, p, n);
    }
}

/* Matches the end of a block/comment tag at pos ("+%}", "-%}\s*", "%}\n?").
 * Returns the length of the match or 0. */
static size_t block_end_at(struct lexer *L, size_t pos, char ch)
{
    const char *s = L->s;
    size_t n = L->n;
    if (pos + 2 < n && (s[pos] == '+' || s[pos] == '-') && s[pos + 1] == ch && s[pos + 2] == '}') {
        if (s[pos] == '+')
            return 3;
        return 3 + ws_at(s + pos + 3, n - pos - 3);
    }
    if (pos + 1 < n && s[pos] == ch && s[pos + 1] == '}') {
        if (pos + 2 < n && s[pos + 2] == '\n')
            return 3;
        return 2;
    }
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Python 'unicode-escape' decoding of a string literal body. */
static int unescape(struct lexer *L, const char *p, size_t n, cstr **out)
{
    char *buf = ifl_chat_alloc(L->a, n + 1);
    size_t o = 0, i = 0;
    while (i < n) {
        if (p[i] != '\\' || i + 1 >= n) {
            buf[o++] = p[i++];
            continue;
        }
        char c = p[i + 1];
        i += 2;
        int hex = 0;
        switch (c) {
        case '\n':
            break;
        case '\\':
            buf[o++] = '\\';
            break;
        case '\'':
            buf[o++] = '\'';
            break;
        case '"':
            buf[o++] = '"';
            break;
        case 'a':
            buf[o++] = '\a';
            break;
        case 'b':
            buf[o++] = '\b';
            break;
        case 'f':
            buf[o++] = '\f';
            break;
        case 'n':
            buf[o++] = '\n';
            break;
        case 'r':
            buf[o++] = '\r';
            break;
        case 't':
            buf[o++] = '\t';
            break;
        case 'v':
            buf[o++] = '\v';
            break;
        case 'x':
            hex = 2;
            break;
        case 'u':
            hex = 4;
            break;
        case 'U':
            hex = 8;
            break;
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = (uint32_t)(c - '0');
                for (int k = 0; k < 2 && i < n && p[i] >= '0' && p[i] <= '7'; k++)
                    v = v * 8 + (uint32_t)(p[i++] - '0');
                o += ifl_chat_utf8_enc(v, buf + o);
            } else {
                buf[o++] = '\\';
                buf[o++] = c;
            }
        }
        if (hex) {
            uint32_t v = 0;
            for (int k = 0; k < hex; k++) {
                int h = i < n ? hexval(p[i]) : -1;
                if (h < 0) {
                    static const char *const m[] = {"", "", "truncated \\xXX escape", "",
                                                    "truncated \\uXXXX escape"};
                    return lex_fail(L, "%s", hex == 8 ? "truncated \\UXXXXXXXX escape" : m[hex]);
                }
                v = v * 16 + (uint32_t)h;
                i++;
            }
            if (v > 0x10ffff)
                return lex_fail(L, "%s", "illegal Unicode character");
            o += ifl_chat_utf8_enc(v, buf + o);
        }
    }
    /* escapes never grow the text: \x/\u/\U/octal are at least as long as their UTF-8 */
    *out = ifl_chat_mkstr(L->a, buf, o);
    return 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_ident(char c, int first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (!first && is_digit(c));
}

/* Digits with single underscores between them: (\d+_?)*\d+ ; returns length. */
static size_t digits_at(const char *s, size_t n, size_t pos)
{
    size_t i = pos, last = pos;
    while (i < n && is_digit(s[i])) {
        i++;
        last = i;
        if (i < n && s[i] == '_' && i + 1 < n && is_digit(s[i + 1]))
            i++;
    }
    return last - pos;
}

static int lex_number(struct lexer *L)
{
    const char *s = L->s;
    size_t n = L->n, p = L->pos;
    size_t d = digits_at(s, n, p);
    size_t end = p + d;
    int is_float = 0;
    if (!(p > 0 && s[p - 1] == '.')) {
        size_t q = end;
        size_t frac = 0;
        if (q < n && s[q] == '.' && (frac = digits_at(s, n, q + 1)) > 0)
            q += 1 + frac;
        size_t e = q;
        if (e < n && (s[e] == 'e' || s[e] == 'E')) {
            size_t k = e + 1;
            if (k < n && (s[k] == '+' || s[k] == '-'))
                k++;
            size_t ed = digits_at(s, n, k);
            if (ed) {
                q = k + ed;
                is_float = 1;
            }
        }
        if (!is_float && frac) {
            is_float = 1;
        }
        if (is_float)
            end = q;
    }
    char buf[128];
    size_t o = 0;
    for (size_t i = p; i < end && o < sizeof buf - 1; i++)
        if (s[i] != '_')
            buf[o++] = s[i];
    buf[o] = 0;
    if (is_float) {
        struct ifl_chat_token *t = emit(L, T_FLOAT);
        t->d = strtod(buf, NULL);
    } else {
        /* integer: 0x / 0o / 0b prefixes, or decimal without leading zeros */
        struct ifl_chat_token *t = emit(L, T_INT);
        if (s[p] == '0' && p + 1 < n && strchr("xXoObB", s[p + 1])) {
            int base = (s[p + 1] == 'x' || s[p + 1] == 'X')   ? 16
                       : (s[p + 1] == 'o' || s[p + 1] == 'O') ? 8
                                                              : 2;
            size_t i = p + 2;
            unsigned long long v = 0;
            int any = 0;
            while (i < n) {
                if (s[i] == '_' && any) {
                    i++;
                    continue;
                }
                int h = hexval(s[i]);
                if (h < 0 || h >= base)
                    break;
                if (v > (unsigned long long)INT64_MAX / (unsigned)base)
                    return lex_fail(L, "%s", "integer literal too large");
                v = v * (unsigned)base + (unsigned)h;
                any = 1;
                i++;
            }
            if (!any)
                return lex_fail(L, "%s", "invalid integer literal");
            t->i = (int64_t)v;
            end = i;
        } else if (s[p] == '0') {
            end = p + 1;
            while (end < n &&
                   (s[end] == '0' || (s[end] == '_' && end + 1 < n && s[end + 1] == '0')))
                end++;
            t->i = 0;
        } else {
            unsigned long long v = 0;
            for (size_t i = 0; buf[i]; i++) {
                if (v > ((unsigned long long)INT64_MAX - 9) / 10)
                    return lex_fail(L, "%s", "integer literal too large");
                v = v * 10 + (unsigned)(buf[i] - '0');
            }
            t->i = (int64_t)v;
        }
    }
    L->pos = end;
    return 0;
}

static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char ops1[] = "+-/*%~[](){}><=.:|,;";

/* Tokens inside {{ }} or {% %} up to and including the end delimiter. */
static int lex_tag(struct lexer *L, int is_var, int *line_starting)
{
    const char *s = L->s;
    size_t n = L->n;
    int depth = 0;
    char stack[64];
    for (;;) {
        if (L->pos >= n)
            return lex_fail(L, "%s", "unexpected end of template, expected end of tag");
        size_t p = L->pos;
        if (depth == 0) {
            if (is_var) {
                size_t m = 0;
                if (p + 2 < n && s[p] == '-' && s[p + 1] == '}' && s[p + 2] == '}')
                    m = 3 + ws_at(s + p + 3, n - p - 3);
                else if (p + 1 < n && s[p] == '}' && s[p + 1] == '}')
                    m = 2;
                if (m) {
                    emit(L, T_VAR_END);
                    count_lines(L, p, p + m);
                    *line_starting = s[p + m - 1] == '\n';
                    L->pos = p + m;
                    return 0;
                }
            } else {
                size_t m = block_end_at(L, p, '%');
                if (m) {
                    emit(L, T_BLOCK_END);
                    count_lines(L, p, p + m);
                    *line_starting = s[p + m - 1] == '\n';
                    L->pos = p + m;
                    return 0;
                }
            }
        }
        size_t w = ws_at(s + p, n - p);
        if (w) {
            count_lines(L, p, p + w);
            L->pos += w;
            continue;
        }
        char c = s[p];
        if (is_digit(c)) {
            if (lex_number(L))
                return -1;
            continue;
        }
        if (is_ident(c, 1)) {
            size_t e = p + 1;
            while (e < n && is_ident(s[e], 0))
                e++;
            struct ifl_chat_token *t = emit(L, T_NAME);
            t->s = ifl_chat_mkstr(L->a, s + p, e - p);
            L->pos = e;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t e = p + 1;
            while (e < n && s[e] != c) {
                if (s[e] == '\\' && e + 1 < n)
                    e++;
                e++;
            }
            if (e >= n)
                return lex_fail(L, "%s", "unexpected end of string");
            struct ifl_chat_token *t = emit(L, T_STRING);
            if (unescape(L, s + p + 1, e - p - 1, &t->s))
                return -1;
            count_lines(L, p, e);
            L->pos = e + 1;
            continue;
        }
        size_t ol = 0;
        for (size_t k = 0; k < sizeof ops2 / sizeof ops2[0]; k++)
            if (p + 1 < n && s[p] == ops2[k][0] && s[p + 1] == ops2[k][1])
                ol = 2;
        if (!ol && c && strchr(ops1, c))
            ol = 1;
        if (!ol) {
            char ch[8];
            size_t adv;
            ifl_chat_utf8_dec(s + p, n - p, &adv);
            snprintf(ch, sizeof ch, "%.*s", (int)adv, s + p);
            return lex_fail(L, "unexpected char '%s'", ch);
        }
        if (ol == 1 && (c == '(' || c == '[' || c == '{')) {
            if (depth >= (int)sizeof stack)
                return lex_fail(L, "%s", "brackets nested too deeply");
            stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (ol == 1 && (c == ')' || c == ']' || c == '}')) {
            if (depth == 0) {
                char m[2] = {c, 0};
                return lex_fail(L, "unexpected '%s'", m);
            }
            if (stack[depth - 1] != c) {
                char m[2] = {c, 0};
                return lex_fail(L, "unexpected '%s'", m);
            }
            depth--;
        }
        struct ifl_chat_token *t = emit(L, T_OP);
        memcpy(t->op, s + p, ol);
        t->op[ol] = 0;
        L->pos += ol;
    }
}

/* {% raw %} ... {% endraw %}: body is data. At pos: just after the raw tag. */
static int lex_raw(struct lexer *L, int *line_starting)
{
    const char *s = L->s;
    size_t n = L->n;
    for (size_t k = L->pos; k + 1 < n; k++) {
        if (s[k] != '{' || s[k + 1] != '%')
            continue;
        size_t q = k + 2;
        char sign = 0;
        if (q < n && (s[q] == '-' || s[q] == '+'))
            sign = s[q++];
        q += ws_at(s + q, n - q);
        if (q + 6 > n || memcmp(s + q, "endraw", 6) != 0)
            continue;
        q += 6;
        q += ws_at(s + q, n - q);
        size_t m = block_end_at(L, q, '%');
        if (!m)
            continue;
        emit_data(L, L->pos, k, sign, 0, *line_starting);
        count_lines(L, L->pos, q + m);
        *line_starting = s[q + m - 1] == '\n';
        L->pos = q + m;
        return 0;
    }
    return lex_fail(L, "%s", "Missing end of raw directive");
}

int ifl_chat_lex(struct ifl_chat_arena *a, const char *src, size_t len,
                 struct ifl_chat_token **toks, size_t *ntoks, char *msg, int *line)
{
    struct lexer L = {.a = a, .s = src, .n = len, .line = 1, .msg = msg};
    int line_starting = 1;
    const char *s = src;
    size_t n = len;
    while (L.pos < n) {
        size_t k = L.pos;
        const char *hit = NULL;
        while (k + 1 < n) {
            hit = memchr(s + k, '{', n - k - 1);
            if (!hit)
                break;
            k = (size_t)(hit - s);
            char c = s[k + 1];
            if (c == '{' || c == '%' || c == '#')
                break;
            k++;
            hit = NULL;
        }
        if (!hit) {
            struct ifl_chat_token *t = emit(&L, T_DATA);
            t->s = ifl_chat_mkstr(a, s + L.pos, n - L.pos);
            count_lines(&L, L.pos, n);
            L.pos = n;
            break;
        }
        char kind = s[k + 1];
        size_t q = k + 2;
        char sign = 0;
        if (q < n && (s[q] == '-' || s[q] == '+'))
            sign = s[q++];
        /* {% raw %} */
        if (kind == '%') {
            size_t r = q + ws_at(s + q, n - q);
            if (r + 3 <= n && memcmp(s + r, "raw", 3) == 0) {
                size_t e = r + 3;
                e += ws_at(s + e, n - e);
                size_t m = 0;
                if (e + 2 < n && s[e] == '-' && s[e + 1] == '%' && s[e + 2] == '}')
                    m = 3 + ws_at(s + e + 3, n - e - 3);
                else if (e + 1 < n && s[e] == '%' && s[e + 1] == '}')
                    m = 2;
                if (m) {
                    emit_data(&L, L.pos, k, sign, 0, line_starting);
                    count_lines(&L, L.pos, e + m);
                    line_starting = s[e + m - 1] == '\n';
                    L.pos = e + m;
                    if (lex_raw(&L, &line_starting))
                        goto fail;
                    continue;
                }
            }
        }
        emit_data(&L, L.pos, k, sign, kind == '{', line_starting);
        count_lines(&L, L.pos, k);
        L.pos = q;
        if (kind == '#') {
            size_t e = q;
            size_t m = 0;
            for (; e + 1 < n; e++) {
                if ((s[e] == '+' || s[e] == '-') && e + 2 < n && s[e + 1] == '#' &&
                    s[e + 2] == '}') {
                    m = s[e] == '+' ? 3 : 3 + ws_at(s + e + 3, n - e - 3);
                    break;
                }
                if (s[e] == '#' && s[e + 1] == '}') {
                    m = (e + 2 < n && s[e + 2] == '\n') ? 3 : 2;
                    break;
                }
            }
            if (!m) {
                lex_fail(&L, "%s", "Missing end of comment tag");
                goto fail;
            }
            count_lines(&L, q, e + m);
            line_starting = s[e + m - 1] == '\n';
            L.pos = e + m;
            continue;
        }
        emit(&L, kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN);
        if (lex_tag(&L, kind == '{', &line_starting))
            goto fail;
    }
    emit(&L, T_EOF);
    *toks = L.t;
    *ntoks = L.nt;
    return 0;
fail:
    *line = L.err_line;
    return -1;
}
