/*
 * WordPiece (tokenizer.ggml.model = "bert"), as BERT's tokenizer does it:
 *
 * 1. Normalize (BertNormalizer): drop NUL, U+FFFD and other control
 *    characters; with strip_accents, decompose each character (NFD) and
 *    drop the non-spacing marks (Mn); with lowercase, lowercase.
 * 2. Split (BertPreTokenizer): whitespace ends a word; a punctuation mark
 *    (Unicode P*, or an ASCII symbol) and a CJK ideograph each make a word
 *    of their own.
 * 3. Each word is matched greedily from the left against the vocabulary,
 *    longest piece first. The GGUF converter stores word-initial pieces with
 *    a leading U+2581 and continuation pieces ("##ing") without their "##",
 *    so the word is looked up as "▁" + word. A word with any part that
 *    matches nothing, or longer than 100 characters (Hugging Face's
 *    max_input_chars_per_word), becomes the unknown token.
 *
 * Character properties, decompositions and case come from ICU, so they
 * follow the Unicode version of the system's ICU.
 */
#include <unicode/uchar.h>
#include <unicode/unorm2.h>

#include "tokenizer/internal.h"

#define WPM_MAX_WORD_CHARS 100

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

struct wpm_word {
    char *s; /* "▁" + the word's normalized UTF-8 */
    size_t n, cap;
    size_t chars; /* characters after the mark */
};

static int word_put(struct wpm_word *w, uint32_t cp)
{
    if (w->n + 4 > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        char *s = realloc(w->s, cap);
        if (!s)
            return IFL_ENOMEM;
        w->s = s;
        w->cap = cap;
    }
    if (w->n == 0) {
        memcpy(w->s, SPACE_MARK, 3);
        w->n = 3;
    }
    w->n += ifl_utf8_encode(cp, w->s + w->n);
    w->chars++;
    return 0;
}

/* Greedy longest-match-first over the word; empties the word. */
static void word_flush(const struct ifl_vocab *v, struct wpm_word *w, struct ifl_tok_out *out)
{
    if (w->n == 0)
        return;
    int64_t start = out->n;
    size_t n = w->n;
    int ok = w->chars <= WPM_MAX_WORD_CHARS;
    for (size_t i = 0; ok && i < n;) {
        size_t j = n - i > v->max_text ? i + v->max_text : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = ifl_vocab_find(v, w->s + i, j - i)) >= 0)
                break;
        if (id < 0) {
            ok = 0;
            break;
        }
        ifl_tok_out_push(out, id);
        i = j;
    }
    if (!ok) {
        out->n = start;
        if (v->unk >= 0)
            ifl_tok_out_push(out, v->unk);
    }
    w->n = 0;
    w->chars = 0;
}

static int is_control(uint32_t cp)
{
    switch (u_charType((UChar32)cp)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_UNASSIGNED:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
        return 1;
    default:
        return 0;
    }
}

static int is_punct(uint32_t cp)
{
    if (cp < 0x7f && cp > 0x20 && !(cp >= '0' && cp <= '9') && !(cp >= 'A' && cp <= 'Z') &&
        !(cp >= 'a' && cp <= 'z'))
        return 1; /* ASCII punctuation and symbols */
    return u_ispunct((UChar32)cp);
}

/* The ideographs BERT isolates (the ranges of Hugging Face's code, whose
 * third extension range starts at U+2B920). */
static int is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* One normalized code point into the words. */
static int put_cp(const struct ifl_vocab *v, struct wpm_word *w, uint32_t cp,
                  struct ifl_tok_out *out)
{
    if (u_isUWhiteSpace((UChar32)cp)) {
        word_flush(v, w, out);
        return 0;
    }
    if (cp == 0 || cp == 0xFFFD || is_control(cp))
        return 0;
    if (v->wpm_strip_accents && u_charType((UChar32)cp) == U_NON_SPACING_MARK)
        return 0;
    uint32_t lc = v->wpm_lowercase ? (uint32_t)u_tolower((UChar32)cp) : cp;
    int rc;
    if (is_punct(cp) || is_cjk(cp)) {
        word_flush(v, w, out);
        if ((rc = word_put(w, lc)) < 0)
            return rc;
        word_flush(v, w, out);
        return 0;
    }
    return word_put(w, lc);
}

int ifl_vocab_wpm_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           struct ifl_tok_out *out)
{
    struct wpm_word w = {0};
    const UNormalizer2 *nfd = NULL;
    if (v->wpm_strip_accents) {
        UErrorCode st = U_ZERO_ERROR;
        nfd = unorm2_getNFDInstance(&st);
        if (U_FAILURE(st))
            return IFL_EUNSUPPORTED;
    }
    const unsigned char *s = (const unsigned char *)text;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        size_t cl;
        uint32_t cp = 0xFFFD; /* a byte that starts no valid character (then dropped) */
        if (ifl_utf8_check(s + i, len - i, &cl) == IFL_UTF8_OK)
            cp = ifl_utf8_decode(s + i, cl);
        else
            cl = 1;
        i += cl;
        UChar dec[32];
        int32_t nd = -1;
        if (nfd) {
            UErrorCode st = U_ZERO_ERROR;
            nd = unorm2_getDecomposition(nfd, (UChar32)cp, dec, 32, &st);
            if (U_FAILURE(st))
                nd = -1;
        }
        if (nd < 0) {
            rc = put_cp(v, &w, cp, out);
            continue;
        }
        for (int32_t k = 0; k < nd && rc == 0;) { /* the decomposition is UTF-16 */
            uint32_t d = dec[k++];
            if (d >= 0xD800 && d <= 0xDBFF && k < nd && dec[k] >= 0xDC00 && dec[k] <= 0xDFFF)
                d = 0x10000 + ((d - 0xD800) << 10) + (dec[k++] - 0xDC00u);
            rc = put_cp(v, &w, d, out);
        }
    }
    if (rc == 0)
        word_flush(v, &w, out);
    free(w.s);
    return rc;
}
