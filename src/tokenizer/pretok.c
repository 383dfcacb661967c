/*
 * BPE pre-tokenizers: the regexes (and flags) each tokenizer.ggml.pre value
 * stands for, and the splitting of a raw-text fragment into pre-tokens.
 *
 * The names are those llama.cpp's vocabulary loader accepts; the patterns
 * are the ones the models publish in their tokenizer.json files (Hugging
 * Face "Split" pre-tokenizers), written for PCRE2 in UTF + UCP mode. Where
 * llama.cpp rewrote a pattern for std::regex (case-insensitive groups as
 * [sS] classes, possessive quantifiers made greedy, class intersection as
 * lookaheads), we keep the published form, which PCRE2 runs as it is:
 * PCRE2 has (?i:...), possessive quantifiers and lookarounds.
 *
 * Two deliberate spellings: \s and \S are written out as the Unicode
 * White_Space set (the reference engines, Oniguruma and Rust's regex, use
 * that set; PCRE2's \s would also take U+180E), and "$" as "\z" (PCRE2's $
 * also matches before a final newline).
 *
 * Regexes are applied in sequence: each cuts the pieces the previous one
 * left, and both the matches and the gaps between them become pieces (Hugging
 * Face's "Isolated" behaviour, llama.cpp's unicode_regex_split). A match of
 * no characters is a cut point, so a pattern made only of lookarounds
 * (superbpe's digit grouping) splits where it matches.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/err.h"
#include "tokenizer/internal.h"

/* Unicode White_Space, the members of \s in the reference engines. */
#define WS                                                                                         \
    "\\t-\\r "                                                                                     \
    "\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define S_ "[" WS "]"
#define NS_ "[^" WS "]"
#define NOT_SLN "[^" WS "\\p{L}\\p{N}]" /* [^\s\p{L}\p{N}] */
#define NOT_RN_LN "[^\\r\\n\\p{L}\\p{N}]"
/* the tail most patterns share: \s*[\r\n]+|\s+(?!\S)|\s+ */
#define WS_TAIL S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"
#define CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
#define RE_GPT2                                                                                    \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?" NOT_SLN "+|" S_ "+(?!" NS_ ")|" S_ "+"

/* Llama 3 and its relatives differ only in the digits one piece takes:
 * (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}DIGITS| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
#define RE_LLAMA3_LIKE(digits)                                                                     \
    CONTRACTIONS "|" NOT_RN_LN "?\\p{L}+|\\p{N}" digits "| ?" NOT_SLN "+[\\r\\n]*|" WS_TAIL

/* GPT-4o's: words split before capitals, contractions kept on the word, up
 * to DIGITS digits, punctuation runs that take trailing newlines or slashes. */
#define UPPERISH "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define LOWERISH "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
#define RE_GPT4O_LIKE(upper, lower, digits)                                                        \
    NOT_RN_LN "?" upper "*" lower "+" CONTRACTIONS "?|" NOT_RN_LN "?" upper "+" lower              \
              "*" CONTRACTIONS "?|\\p{N}" digits "| ?" NOT_SLN "+[\\r\\n/]*|" WS_TAIL

/* Han, kana, Hangul and CJK punctuation ranges some models isolate first. */
#define CJK_DEEPSEEK "[\\x{4e00}-\\x{9fa5}\\x{0800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+"
#define CJK_KANA "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+"

/* DeepSeek-LLM's letters: the cased letters of many scripts, as the model's
 * tokenizer.json lists them (ranges of Latin, Greek, Cyrillic, Armenian,
 * Georgian, Cherokee, Glagolitic, Coptic, Deseret, ... and full-width). */
#define DEEPSEEK_LETTERS                                                                           \
    "A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-"        \
    "\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}"  \
    "\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-"        \
    "\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-" \
    "\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}"        \
    "\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-"       \
    "\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-"         \
    "\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-"        \
    "\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}"         \
    "\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-"         \
    "\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}"         \
    "\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}"         \
    "\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}"        \
    "\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-"       \
    "\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-"            \
    "\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-"         \
    "\\x{1e943}"

/* BLOOM-style: an optional space and a run of anything but whitespace and a
 * few punctuation marks (the class also excludes "(", "|" and ")"). */
#define RE_BLOOM " ?[^(" WS "|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+"

/* DeepSeek-V3's third pattern (also AFMoE's): a punctuation mark glued to
 * ASCII letters, letters with their marks, punctuation/symbol runs. */
#define RE_DEEPSEEK3_WORDS                                                                         \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"           \
    "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|" WS_TAIL

/* Kimi K2: letter classes exclude Han (tiktoken's [..&&[^\p{Han}]]). */
#define NOHAN(cls) "(?:(?!\\p{Han})" cls ")"

static const struct ifl_pretok pretoks[] = {
    /* llama.cpp's fallback for BPE vocabularies without a known pre-tokenizer */
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, 0},
    {"gpt-2 gpt2 phi-2 jina-es jina-de jina-v1-en jina-v2-es jina-v2-de jina-v2-code "
     "roberta-bpe gigachat a.x-4.0 mellum modern-bert exaone4 mpt olmo jais trillion "
     "granite-docling",
     {RE_GPT2},
     0},
    {"llama-bpe llama3 llama-v3 falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
     {RE_LLAMA3_LIKE("{1,3}")},
     IFL_PRE_IGNORE_MERGES | IFL_PRE_ADD_BOS},
    {"dbrx smaug-bpe", {RE_LLAMA3_LIKE("{1,3}")}, 0},
    {"glm4 chatglm-bpe", {RE_LLAMA3_LIKE("{1,3}")}, IFL_PRE_NO_BOS},
    {"qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
     {RE_LLAMA3_LIKE("")},
     0},
    {"qwen35",
     {CONTRACTIONS "|" NOT_RN_LN "?[\\p{L}\\p{M}]+|\\p{N}| ?[^" WS
                   "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|" WS_TAIL},
     0},
    {"jais-2",
     {CONTRACTIONS "|" NOT_RN_LN "?\\p{L}+|\\p{N}{1,3}| ?" NOT_SLN "+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_
                   "{512}(?!" NS_ ")|" S_ "{256}(?!" NS_ ")|" S_ "{128}(?!" NS_ ")|" S_
                   "{64}(?!" NS_ ")|" S_ "{32}(?!" NS_ ")|" S_ "{16}(?!" NS_ ")|" S_ "{8}(?!" NS_
                   ")|" S_ "{4}(?!" NS_ ")|" S_ "{1,2}(?!" NS_ ")|" S_ "{1}"},
     0},
    {"minicpm5",
     {"\\p{N}{1,3}",
      CONTRACTIONS "|" NOT_RN_LN "?\\p{L}+|\\p{N}+| ?" NOT_SLN "+[\\r\\n]*|" WS_TAIL},
     IFL_PRE_IGNORE_MERGES},
    {"starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
     {"\\p{N}", RE_GPT2},
     0},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}, 0},
    {"deepseek-llm",
     {"[\\r\\n]", S_ "?[" DEEPSEEK_LETTERS "]+",
      S_ "?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
      S_ "+\\z", CJK_DEEPSEEK, "\\p{N}+"},
     0},
    {"deepseek-coder", {"[\\r\\n]", S_ "?\\p{L}+", S_ "?\\p{P}+", CJK_DEEPSEEK, "\\p{N}"}, 0},
    {"deepseek-v3 hunyuan-dense joyai-llm", {"\\p{N}{1,3}", CJK_KANA, RE_DEEPSEEK3_WORDS}, 0},
    {"youtu",
     {"[\\x{ac00}-\\x{d7a3}\\x{3131}-\\x{318e}]+|[\\x{ff01}\\x{2026}\\x{201c}\\x{201d}\\x{2018}"
      "\\x{2019}\\x{2014}\\x{ff1a}\\x{ff1b}\\x{ff0c}\\x{3001}-\\x{303f}\\x{fe30}-\\x{fe4f}]+|"
      "[\\x{3105}-\\x{312f}]+|" CJK_KANA,
      RE_GPT4O_LIKE(UPPERISH, LOWERISH, "")},
     IFL_PRE_IGNORE_MERGES},
    {"poro-chat bloom gpt3-finnish", {RE_BLOOM}, 0},
    {"viking", {RE_BLOOM, "\\p{N}"}, 0},
    {"tekken",
     {NOT_RN_LN "?" UPPERISH "*" LOWERISH "+|" NOT_RN_LN "?" UPPERISH "+" LOWERISH
                "*|\\p{N}| ?" NOT_SLN "+[\\r\\n/]*|" WS_TAIL},
     IFL_PRE_IGNORE_MERGES | IFL_PRE_ADD_BOS},
    {"chameleon",
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2},
     IFL_PRE_ADD_BOS},
    {"gpt-4o llama4 kanana2 talkie minimax-m2", {RE_GPT4O_LIKE(UPPERISH, LOWERISH, "{1,3}")}, 0},
    /* GPT-4o's pattern, whose letter classes already hold the combining
     * marks (llama.cpp's std::regex rewrite adds \p{M} to its lookaheads to
     * the same end), taking whole pre-tokens found in the vocabulary */
    {"granite-embed-multi-97m",
     {RE_GPT4O_LIKE(UPPERISH, LOWERISH, "{1,3}")},
     IFL_PRE_IGNORE_MERGES},
    {"tiny_aya cohere2moe",
     {"\\d{1,3}(?=(?:\\d{3})*\\b)", RE_GPT4O_LIKE(UPPERISH, LOWERISH, "{1,3}")},
     0},
    {"kimi-k2",
     {"\\p{Han}+|" NOT_RN_LN
      "?" NOHAN(UPPERISH) "*" NOHAN(LOWERISH) "+" CONTRACTIONS "?|" NOT_RN_LN "?" NOHAN(
          UPPERISH) "+" NOHAN(LOWERISH) "*" CONTRACTIONS "?|\\p{N}{1,3}| ?" NOT_SLN
                                        "+[\\r\\n]*|" WS_TAIL},
     IFL_PRE_MERGES_OPTIONAL},
    {"superbpe", {"\\p{N}+", "(?=(\\d{3})+(?!\\d))"}, 0},
    {"bailingmoe bailingmoe2 llada-moe",
     {"'(?i:[sdmt]|ll|ve|re)|" NOT_RN_LN "?+\\p{L}+|\\p{N}| ?" NOT_SLN "++[\\r\\n]*|" S_
      "*[\\r\\n]|" S_ "+(?!" NS_ ")|" S_ "+"},
     0},
    {"seed-coder",
     {CONTRACTIONS "|" NOT_RN_LN "?\\p{L}+|\\p{N}{1}| ?[^" WS "\\p{L}\\p{N}\\r\\n]+|" WS_TAIL},
     0},
    /* AFMoE: digit runs cut into threes from the right, Asian scripts isolated
     * (the ranges as llama.cpp has them: from U+8C48 and from U+0E40) */
    {"afmoe",
     {"\\p{N}{1,3}(?=(?:\\p{N}{3})*(?!\\p{N}))",
      "[\\x{4e00}-\\x{9fff}\\x{3400}-\\x{4dbf}\\x{8c48}-\\x{faff}\\x{3040}-\\x{309f}\\x{30a0}-"
      "\\x{30ff}\\x{ff65}-\\x{ff9f}\\x{2f00}-\\x{2fdf}\\x{0e40}-\\x{0e7f}\\x{0e80}-\\x{0eff}"
      "\\x{1780}-\\x{17ff}\\x{1000}-\\x{109f}\\x{aa60}-\\x{aa7f}\\x{a9e0}-\\x{a9ff}\\x{ac00}-"
      "\\x{d7af}\\x{1100}-\\x{11ff}]+",
      RE_DEEPSEEK3_WORDS},
     0},
    {"laguna", {"[^\\n]+|[\\n]+", RE_LLAMA3_LIKE("")}, 0},
    {"exaone-moe",
     {CONTRACTIONS "|" NOT_RN_LN "?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?" NOT_SLN
                   "+[\\r\\n/]?|" S_ "*[\\r\\n]|" S_ "+(?!" NS_ ")|" S_ "+"},
     0},
    /* SentencePiece-like BPE on raw UTF-8: spaces become U+2581 first */
    {"gemma4 granite-embed-multi-311m",
     {"[^\\n]+|[\\n]+"},
     IFL_PRE_RAW | IFL_PRE_ESCAPE_WS | IFL_PRE_NEWLINE_WORDS | IFL_PRE_FORCE_BOS},
    {"sarvam-moe", {"[^\\n]+|[\\n]+"}, IFL_PRE_RAW | IFL_PRE_ESCAPE_WS},
    {"whitespace", {NS_ "+"}, IFL_PRE_RAW},
};

const struct ifl_pretok *ifl_pretok_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(pretoks) / sizeof(pretoks[0]); i++) {
        const char *p = pretoks[i].names;
        while (*p) {
            const char *e = strchr(p, ' ');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            if (n == len && memcmp(p, name, len) == 0)
                return &pretoks[i];
            p += n;
            while (*p == ' ')
                p++;
        }
    }
    return NULL;
}

size_t ifl_pretok_count(void)
{
    return sizeof(pretoks) / sizeof(pretoks[0]);
}

const struct ifl_pretok *ifl_pretok_at(size_t i)
{
    return i < ifl_pretok_count() ? &pretoks[i] : NULL;
}

int ifl_pretok_compile(struct ifl_vocab *v, const struct ifl_pretok *d, char *err)
{
    for (int i = 0; i < IFL_BPE_MAX_RE && d->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->re[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            return ifl_err(err, IFL_EUNSUPPORTED, "tokenizer: pre-tokenizer regex %d at %zu: %s", i,
                           (size_t)eo, (const char *)msg);
        }
        /* JIT is an optimisation; without it the interpreter runs */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        v->re[v->n_re++] = re;
    }
    v->pre_flags = d->flags;
    return 0;
}

void ifl_pretok_free(struct ifl_vocab *v)
{
    for (int i = 0; i < v->n_re; i++)
        pcre2_code_free(v->re[i]);
    v->n_re = 0;
}

/* ---- splitting ---- */

static int pieces_push(struct ifl_pieces *p, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct ifl_piece *a = realloc(p->a, cap * sizeof(*a));
        if (!a)
            return IFL_ENOMEM;
        p->a = a;
        p->cap = cap;
    }
    p->a[p->n++] = (struct ifl_piece){off, len};
    return 0;
}

/* Cuts text[off, off+len) by re into out (matches and gaps, in order). The
 * subject is the piece alone, so lookarounds do not see past it. */
static int split_piece(pcre2_code *re, pcre2_match_data *md, const char *text, size_t off,
                       size_t len, struct ifl_pieces *out)
{
    PCRE2_SPTR subj = (PCRE2_SPTR)(text + off);
    size_t emitted = 0, pos = 0;
    while (pos < len) {
        int rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, subj, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return rc == PCRE2_ERROR_NOMEMORY ? IFL_ENOMEM : IFL_EINVAL;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        int e;
        if ((e = pieces_push(out, off + emitted, ms - emitted)) < 0)
            return e;
        if (me == ms) { /* a cut point: the text goes on from the next character */
            emitted = ms;
            pos = ms + ifl_utf8_len_lead((unsigned char)text[off + ms]);
            continue;
        }
        if ((e = pieces_push(out, off + ms, me - ms)) < 0)
            return e;
        emitted = pos = me;
    }
    return pieces_push(out, off + emitted, len - emitted);
}

int ifl_pretok_split(const struct ifl_vocab *v, const char *text, size_t len, struct ifl_pieces *pa,
                     struct ifl_pieces *pb)
{
    int rc;
    pa->n = 0;
    if ((rc = pieces_push(pa, 0, len)) < 0)
        return rc;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md)
        return IFL_ENOMEM;
    for (int r = 0; r < v->n_re; r++) {
        pb->n = 0;
        for (size_t i = 0; i < pa->n; i++)
            if ((rc = split_piece(v->re[r], md, text, pa->a[i].off, pa->a[i].len, pb)) < 0)
                goto done;
        struct ifl_pieces t = *pa;
        *pa = *pb;
        *pb = t;
    }
    rc = 0;
done:
    pcre2_match_data_free(md);
    return rc;
}
