/*
 * Vocabulary loading from GGUF metadata (tokenizer.ggml.*), the text -> id
 * table, special tokens and the pieces tokens show when detokenized.
 *
 * Keys read: model ("llama" = SentencePiece, "gpt2" = byte-level BPE,
 * "gemma4" = BPE on raw UTF-8, "bert" = WordPiece, "t5" = Unigram), pre,
 * tokens, scores,
 * token_type, merges (bpe.c), bos/eos/eot/eom/unknown/seperator/
 * padding_token_id, add_bos_token, add_eos_token, add_sep_token,
 * add_space_prefix, and WordPiece's normalizer lowercase/strip_accents.
 * Defaults follow llama.cpp (llama-vocab.cpp): SPM has bos 1, eos 2, unk 0,
 * adds BOS and a space prefix; BPE has no defaults and adds BOS only when the
 * metadata or the pre-tokenizer says so; WordPiece has bos ([CLS]) 101,
 * unk 100, sep 102, pad 0, adds BOS and SEP, and lowercases and strips
 * accents unless told not to; Unigram has eos 1, unk 2, pad 0 and adds EOS
 * (precompiled_charsmap and remove_extra_whitespaces: ugm.c).
 * Ids outside the vocabulary (files write 0xFFFFFFFF for "none") are -1.
 *
 * The vocabulary is immutable once loaded; nothing here keeps pointers into
 * the GGUF file.
 */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "core/err.h"
#include "tokenizer/internal.h"

/* ---- text -> id table ---- */

static uint32_t pow2_at_least(uint64_t n)
{
    uint64_t c = 16;
    while (c < n)
        c <<= 1;
    return (uint32_t)c;
}

int32_t ifl_vocab_find2(const struct ifl_vocab *v, const char *a, size_t na, const char *b,
                        size_t nb)
{
    uint64_t h = ifl_tok_hash(ifl_tok_hash(IFL_TOK_HASH_INIT, a, na), b, nb);
    if (nb == 0)
        return ifl_vocab_find_h(v, h, a, na);
    for (uint32_t i = (uint32_t)h & v->tok_mask;; i = (i + 1) & v->tok_mask) {
        int32_t id = v->tok_slots[i];
        if (id < 0)
            return -1;
        size_t n;
        const char *t = ifl_vocab_text_(v, id, &n);
        if (n == na + nb && memcmp(t, a, na) == 0 && (nb == 0 || memcmp(t + na, b, nb) == 0))
            return id;
    }
}

int32_t ifl_vocab_find_h(const struct ifl_vocab *v, uint64_t h, const char *text, size_t len)
{
    for (uint32_t i = (uint32_t)h & v->tok_mask;; i = (i + 1) & v->tok_mask) {
        int32_t id = v->tok_slots[i];
        if (id < 0)
            return -1;
        size_t n;
        const char *t = ifl_vocab_text_(v, id, &n);
        if (n == len && memcmp(t, text, len) == 0)
            return id;
    }
}

int32_t ifl_vocab_find(const struct ifl_vocab *v, const char *text, size_t len)
{
    return ifl_vocab_find2(v, text, len, "", 0);
}

/* Later duplicates win, as in llama.cpp's token_to_id map. */
static void table_insert(struct ifl_vocab *v, int32_t id)
{
    size_t n;
    const char *t = ifl_vocab_text_(v, id, &n);
    uint64_t h = ifl_tok_hash(IFL_TOK_HASH_INIT, t, n);
    for (uint32_t i = (uint32_t)h & v->tok_mask;; i = (i + 1) & v->tok_mask) {
        int32_t o = v->tok_slots[i];
        if (o < 0) {
            v->tok_slots[i] = id;
            return;
        }
        size_t on;
        const char *ot = ifl_vocab_text_(v, o, &on);
        if (on == n && memcmp(ot, t, n) == 0) {
            v->tok_slots[i] = id;
            return;
        }
    }
}

/* ---- loading helpers ---- */

static const char *gguf_type_name(enum ifl_gguf_type t)
{
    static const char *names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return (unsigned)t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

static int is_int_type(enum ifl_gguf_type t)
{
    return t <= IFL_GGUF_INT32 || t == IFL_GGUF_BOOL || t == IFL_GGUF_UINT64 || t == IFL_GGUF_INT64;
}

/* An optional token id key: keeps *id when absent, -1 when out of range. */
static int get_id(const struct ifl_gguf *g, const char *key, int32_t n_tokens, int32_t *id,
                  char *err)
{
    int64_t x;
    int rc = ifl_gguf_get_int(g, key, &x, err);
    if (rc == IFL_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    *id = x >= 0 && x < n_tokens ? (int32_t)x : -1;
    return 0;
}

static int get_flag(const struct ifl_gguf *g, const char *key, int *flag, char *err)
{
    int b;
    int rc = ifl_gguf_get_bool(g, key, &b, err);
    if (rc == IFL_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    *flag = b != 0;
    return 0;
}

static int load_tokens(struct ifl_vocab *v, const struct ifl_gguf *g, char *err)
{
    const char *key = "tokenizer.ggml.tokens";
    struct ifl_gguf_value arr;
    int rc = ifl_gguf_get_arr(g, key, &arr, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: missing %s", key);
    if (rc < 0)
        return rc;
    if (arr.elem_type != IFL_GGUF_STRING)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: %s must be an array of strings, not of %s",
                       key, gguf_type_name(arr.elem_type));
    if (arr.n == 0 || arr.n > (uint64_t)INT32_MAX / 4)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: %s has %llu entries", key,
                       (unsigned long long)arr.n);
    v->n_tokens = (int32_t)arr.n;
    uint64_t total = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        const char *s;
        size_t len;
        if (ifl_gguf_arr_str(&arr, i, &s, &len) < 0)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s[%llu] unreadable", key,
                           (unsigned long long)i);
        total += len + 1;
    }
    if (total > UINT32_MAX / 2)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: %s holds %llu bytes of text, too many", key,
                       (unsigned long long)total);
    v->text_blob = malloc(total);
    v->text_off = malloc((arr.n + 1) * sizeof(*v->text_off));
    v->scores = calloc(arr.n, sizeof(*v->scores));
    v->type = malloc(arr.n);
    v->flags = calloc(arr.n, 1);
    if (!v->text_blob || !v->text_off || !v->scores || !v->type || !v->flags)
        return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory for %llu tokens",
                       (unsigned long long)arr.n);
    uint32_t off = 0;
    for (uint64_t i = 0; i < arr.n; i++) {
        const char *s;
        size_t len;
        ifl_gguf_arr_str(&arr, i, &s, &len);
        v->text_off[i] = off;
        memcpy(v->text_blob + off, s, len);
        v->text_blob[off + len] = 0;
        off += (uint32_t)len + 1;
    }
    v->text_off[arr.n] = off;
    memset(v->type, IFL_TOK_NORMAL, arr.n);

    key = "tokenizer.ggml.scores";
    rc = ifl_gguf_get_arr(g, key, &arr, err);
    if (rc < 0 && rc != IFL_ENOTFOUND)
        return rc;
    if (rc == 0) {
        if (arr.elem_type != IFL_GGUF_FLOAT32 && arr.elem_type != IFL_GGUF_FLOAT64)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s must be an array of floats, not of %s",
                           key, gguf_type_name(arr.elem_type));
        if (arr.n != (uint64_t)v->n_tokens)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s has %llu entries for %d tokens", key,
                           (unsigned long long)arr.n, v->n_tokens);
        for (uint64_t i = 0; i < arr.n; i++) {
            double d = 0;
            ifl_gguf_arr_float(&arr, i, &d);
            v->scores[i] = (float)d;
        }
    }

    key = "tokenizer.ggml.token_type";
    rc = ifl_gguf_get_arr(g, key, &arr, err);
    if (rc < 0 && rc != IFL_ENOTFOUND)
        return rc;
    if (rc == 0) {
        if (!is_int_type(arr.elem_type))
            return ifl_err(err, IFL_EFORMAT,
                           "tokenizer: %s must be an array of integers, not of %s", key,
                           gguf_type_name(arr.elem_type));
        if (arr.n != (uint64_t)v->n_tokens)
            return ifl_err(err, IFL_EFORMAT, "tokenizer: %s has %llu entries for %d tokens", key,
                           (unsigned long long)arr.n, v->n_tokens);
        for (uint64_t i = 0; i < arr.n; i++) {
            int64_t t = 0;
            ifl_gguf_arr_int(&arr, i, &t);
            if (t < IFL_TOK_UNDEFINED || t > IFL_TOK_BYTE)
                return ifl_err(err, IFL_EFORMAT, "tokenizer: %s[%llu] = %lld is not a token type",
                               key, (unsigned long long)i, (long long)t);
            v->type[i] = (uint8_t)(t == IFL_TOK_UNDEFINED ? IFL_TOK_NORMAL : t);
        }
    }

    v->tok_mask = pow2_at_least((uint64_t)v->n_tokens * 2) - 1;
    v->tok_slots = malloc(((size_t)v->tok_mask + 1) * sizeof(*v->tok_slots));
    if (!v->tok_slots)
        return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory");
    memset(v->tok_slots, 0xff, ((size_t)v->tok_mask + 1) * sizeof(*v->tok_slots));
    for (int32_t i = 0; i < v->n_tokens; i++)
        table_insert(v, i);
    return 0;
}

/* "<0xNN>" -> NN, or -1. */
static int parse_byte_token(const char *t, size_t n)
{
    if (n != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>')
        return -1;
    int x = 0;
    for (int i = 3; i < 5; i++) {
        char c = t[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0)
            return -1;
        x = x * 16 + d;
    }
    return x;
}

/* Writes token id's show_special piece to out (room: its text length + 3). */
static size_t make_piece(const struct ifl_vocab *v, int32_t id, char *out)
{
    size_t n;
    const char *t = ifl_vocab_text_(v, id, &n);
    int type = v->type[id];
    if (type == IFL_TOK_CONTROL || type == IFL_TOK_USER_DEFINED || type == IFL_TOK_UNUSED) {
        memcpy(out, t, n);
        return n;
    }
    int spm_like = v->kind == IFL_VOCAB_SPM || v->kind == IFL_VOCAB_WPM ||
                   v->kind == IFL_VOCAB_UGM || (v->pre_flags & IFL_PRE_ESCAPE_WS);
    if (v->kind == IFL_VOCAB_WPM && type == IFL_TOK_UNKNOWN) {
        memcpy(out, t, n);
        return n;
    }
    if (spm_like) {
        if (type == IFL_TOK_UNKNOWN) { /* llama.cpp shows U+2585 for SPM's unknown token */
            memcpy(out, "\xe2\x96\x85", 3);
            return 3;
        }
        if (type == IFL_TOK_BYTE) {
            int b = parse_byte_token(t, n);
            if (b >= 0) {
                out[0] = (char)b;
                return 1;
            }
        }
        size_t w = 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                out[w++] = ' ';
                i += 3;
            } else {
                out[w++] = t[i++];
            }
        }
        return w;
    }
    /* byte-level BPE: every code point of the alphabet is one byte */
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t cl;
        if (ifl_utf8_check((const unsigned char *)t + i, n - i, &cl) == IFL_UTF8_OK) {
            int b = ifl_vocab_bpe_cp_byte(ifl_utf8_decode((const unsigned char *)t + i, cl));
            if (b >= 0) {
                out[w++] = (char)b;
            } else {
                memcpy(out + w, t + i, cl);
                w += cl;
            }
            i += cl;
        } else {
            out[w++] = t[i++];
        }
    }
    return w;
}

static int build_pieces(struct ifl_vocab *v, char *err)
{
    size_t total = v->text_off[v->n_tokens] + (size_t)3 * v->n_tokens + 16;
    v->piece_blob = malloc(total);
    v->piece_off = malloc(((size_t)v->n_tokens + 1) * sizeof(*v->piece_off));
    if (!v->piece_blob || !v->piece_off)
        return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory for pieces");
    uint32_t off = 0;
    v->max_piece = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        v->piece_off[i] = off;
        size_t n = make_piece(v, i, v->piece_blob + off);
        off += (uint32_t)n;
        if (n > v->max_piece)
            v->max_piece = n;
        int type = v->type[i];
        if (type == IFL_TOK_CONTROL || type == IFL_TOK_UNUSED)
            v->flags[i] |= IFL_TOKF_HIDDEN;
    }
    v->piece_off[v->n_tokens] = off;
    return 0;
}

static int cmp_special(const void *pa, const void *pb, void *arg)
{
    const struct ifl_vocab *v = arg;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->text_off[a + 1] - v->text_off[a], lb = v->text_off[b + 1] - v->text_off[b];
    if (la != lb)
        return la > lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Texts that end generation when they are control (or user-defined) tokens;
 * the first few also serve to find eot when the metadata names none. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",         "<|endoftext|>",
    "<EOT>",      "<|eom_id|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>",
};
#define N_EOT_TEXTS 6 /* eog_texts[0..6) are eot candidates */

static int32_t find_special_text(const struct ifl_vocab *v, const char *s)
{
    int32_t id = ifl_vocab_find(v, s, strlen(s));
    if (id >= 0 && (v->type[id] == IFL_TOK_CONTROL || v->type[id] == IFL_TOK_USER_DEFINED))
        return id;
    return -1;
}

/* gpt-oss's harmony format (o200k_harmony): a reply is several messages,
 * each "<|channel|>NAME<|message|>TEXT" closed by <|end|>, and only
 * <|return|> (the final answer done) or <|call|> (a tool call written) end
 * the turn. So with those two present <|end|> no longer ends generation,
 * and the framing tokens show in the text, where the server's harmony
 * parser reads the channels (llama.cpp's loader does the same). */
static void harmony_specials(struct ifl_vocab *v)
{
    int32_t ret = find_special_text(v, "<|return|>"), call = find_special_text(v, "<|call|>");
    int32_t chan = find_special_text(v, "<|channel|>");
    if (chan < 0 || (ret < 0 && call < 0))
        return;
    int32_t end = find_special_text(v, "<|end|>");
    if (end >= 0 && end != v->eos) {
        v->flags[end] &= (uint8_t)~IFL_TOKF_EOG;
        if (v->eot == end)
            v->eot = ret >= 0 ? ret : call;
    }
    if (ret >= 0)
        v->flags[ret] |= IFL_TOKF_EOG;
    if (call >= 0)
        v->flags[call] |= IFL_TOKF_EOG;
    static const char *const shown[] = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>",
                                        "<|end|>",   "<|call|>",    "<|return|>"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        int32_t id = find_special_text(v, shown[i]);
        if (id >= 0)
            v->flags[id] &= (uint8_t)~IFL_TOKF_HIDDEN;
    }
}

/* Mistral's tool calls and reasoning, [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}
 * and [THINK] ... [/THINK]: control tokens in its vocabularies (v3 and
 * Tekken), shown in the text where the server's parsers read them
 * (llama.cpp keeps them as its Mistral parser's preserved tokens). So are
 * DeepSeek-R1's <｜tool▁calls▁begin｜> and kin when a vocabulary has them as
 * control tokens (its distills' GGUFs usually have them user-defined,
 * shown anyway). */
static void tool_specials(struct ifl_vocab *v)
{
    static const char *const shown[] = {
        "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]",
        /* DeepSeek-R1's call tags (deepseek.c), where a vocabulary makes them control tokens */
        "<\xef\xbd\x9ctool\xe2\x96\x81"
        "calls\xe2\x96\x81"
        "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81"
        "calls\xe2\x96\x81"
        "end\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81"
        "call\xe2\x96\x81"
        "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81"
        "call\xe2\x96\x81"
        "end\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"};
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++) {
        int32_t id = find_special_text(v, shown[i]);
        if (id >= 0)
            v->flags[id] &= (uint8_t)~IFL_TOKF_HIDDEN;
    }
}

static int build_specials(struct ifl_vocab *v, char *err)
{
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int t = v->type[i];
        if ((t == IFL_TOK_CONTROL || t == IFL_TOK_USER_DEFINED || t == IFL_TOK_UNKNOWN) &&
            v->text_off[i + 1] - v->text_off[i] > 1)
            n++;
    }
    v->special = malloc(((size_t)n + 1) * sizeof(*v->special));
    if (!v->special)
        return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory");
    v->n_special = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        int t = v->type[i];
        if ((t == IFL_TOK_CONTROL || t == IFL_TOK_USER_DEFINED || t == IFL_TOK_UNKNOWN) &&
            v->text_off[i + 1] - v->text_off[i] > 1)
            v->special[v->n_special++] = i;
    }
    qsort_r(v->special, (size_t)v->n_special, sizeof(*v->special), cmp_special, v);

    if (v->eot < 0) {
        for (int i = 0; i < N_EOT_TEXTS && v->eot < 0; i++)
            v->eot = find_special_text(v, eog_texts[i]);
    }
    if (v->eom < 0)
        v->eom = find_special_text(v, "<|eom_id|>");
    int32_t ends[3] = {v->eos, v->eot, v->eom};
    for (int i = 0; i < 3; i++)
        if (ends[i] >= 0)
            v->flags[ends[i]] |= IFL_TOKF_EOG;
    for (size_t i = 0; i < sizeof(eog_texts) / sizeof(eog_texts[0]); i++) {
        int32_t id = find_special_text(v, eog_texts[i]);
        if (id >= 0)
            v->flags[id] |= IFL_TOKF_EOG;
    }
    harmony_specials(v);
    tool_specials(v);
    return 0;
}

/* The most input bytes one id of ifl_tokenize can stand for, or 0 when the
 * vocabulary may drop input bytes. Every id comes from matching a token's
 * stored text against the text (special tokens against the input itself;
 * SPM pieces against the input with each space grown to the 3-byte "▁";
 * byte-level BPE pieces against the input with each byte written as a 1-
 * or 2-byte code point; BPE input's invalid bytes grow to U+FFFD first),
 * so no id covers more input bytes than its stored text has (byte-level
 * BPE: than it has code points); or from a fallback that covers one byte.
 * Input is lost only where a byte has no token at all (SPM: no <0xNN>, no
 * one-byte token, no unknown token; BPE: no token for the byte's code
 * point), and then no bound holds. */
static size_t max_cover(const struct ifl_vocab *v)
{
    if (v->kind == IFL_VOCAB_WPM || v->kind == IFL_VOCAB_UGM)
        return 0; /* normalizing may drop input (accents, controls, spaces) */
    int raw = (v->pre_flags & IFL_PRE_RAW) != 0;
    for (int b = 0; b < 256; b++) {
        if (raw) {
            if (v->byte_tok[b] < 0 && b != 0xC0 && b != 0xC1 && b < 0xF5)
                return 0; /* a character without a token falls back to <0xNN> */
        } else if (v->kind == IFL_VOCAB_SPM) {
            char c = (char)b;
            if (v->byte_tok[b] < 0 && ifl_vocab_find(v, &c, 1) < 0 && v->unk < 0)
                return 0;
        } else if (v->byte_sym[b] < 0 && b != 0xC0 && b != 0xC1 && b < 0xF5) {
            return 0; /* (those bytes never occur in the sanitized UTF-8 BPE sees) */
        }
    }
    size_t most = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        size_t n = v->text_off[i + 1] - v->text_off[i] - 1;
        int t = v->type[i];
        if (v->kind == IFL_VOCAB_BPE && !raw && t != IFL_TOK_CONTROL && t != IFL_TOK_USER_DEFINED &&
            t != IFL_TOK_UNKNOWN) {
            /* byte-level text: one code point per input byte (special tokens
             * are matched against the input as they are stored) */
            const unsigned char *p = (const unsigned char *)v->text_blob + v->text_off[i];
            size_t cps = 0;
            for (size_t k = 0; k < n; k++)
                cps += (p[k] & 0xC0) != 0x80;
            n = cps;
        }
        most = n > most ? n : most;
    }
    return most ? most : 1;
}

static int load(struct ifl_vocab *v, const struct ifl_gguf *g, char *err)
{
    const char *key = "tokenizer.ggml.model";
    const char *model;
    size_t model_len;
    int rc = ifl_gguf_get_str(g, key, &model, &model_len, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "tokenizer: missing %s", key);
    if (rc < 0)
        return rc;
    const char *forced_pre = NULL;
    if (model_len == 5 && memcmp(model, "llama", 5) == 0) {
        v->kind = IFL_VOCAB_SPM;
    } else if (model_len == 4 && memcmp(model, "gpt2", 4) == 0) {
        v->kind = IFL_VOCAB_BPE;
    } else if (model_len == 6 && memcmp(model, "gemma4", 6) == 0) {
        v->kind = IFL_VOCAB_BPE;
        forced_pre = "gemma4"; /* the model implies its pre-tokenizer */
    } else if (model_len == 4 && memcmp(model, "bert", 4) == 0) {
        v->kind = IFL_VOCAB_WPM;
    } else if (model_len == 2 && memcmp(model, "t5", 2) == 0) {
        v->kind = IFL_VOCAB_UGM;
    } else {
        return ifl_err(
            err, IFL_EUNSUPPORTED,
            "tokenizer: %s '%.*s' is not supported (known: llama, gpt2, gemma4, bert, t5)", key,
            (int)(model_len > 64 ? 64 : model_len), model);
    }

    if ((rc = load_tokens(v, g, err)) < 0)
        return rc;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        size_t tl = v->text_off[i + 1] - v->text_off[i] - 1;
        v->max_text = tl > v->max_text ? tl : v->max_text;
    }

    v->bos = v->eos = v->eot = v->eom = v->pad = v->unk = v->sep = -1;
    v->add_bos = v->add_eos = v->add_sep = 0;
    if (v->kind == IFL_VOCAB_SPM) {
        v->bos = 1 < v->n_tokens ? 1 : -1;
        v->eos = 2 < v->n_tokens ? 2 : -1;
        v->unk = 0;
        v->add_bos = 1;
        v->add_space_prefix = 1;
    } else if (v->kind == IFL_VOCAB_WPM) {
        v->bos = 101 < v->n_tokens ? 101 : -1; /* [CLS] */
        v->unk = 100 < v->n_tokens ? 100 : -1; /* [UNK] */
        v->sep = 102 < v->n_tokens ? 102 : -1; /* [SEP] */
        v->pad = 0;
        v->add_bos = v->add_sep = 1;
        v->wpm_lowercase = 1;
    } else if (v->kind == IFL_VOCAB_UGM) {
        v->eos = 1 < v->n_tokens ? 1 : -1;
        v->unk = 2 < v->n_tokens ? 2 : -1;
        v->pad = 0;
        v->add_eos = 1;
    }
    for (int b = 0; b < 256; b++)
        v->byte_tok[b] = v->byte_sym[b] = -1;
    if (v->kind == IFL_VOCAB_BPE) {
        /* before the ids: a pre-tokenizer may drop the BOS default */
        if ((rc = ifl_vocab_bpe_load(v, g, forced_pre, err)) < 0)
            return rc;
    }
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct ifl_vocab, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct ifl_vocab, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct ifl_vocab, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct ifl_vocab, eom)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct ifl_vocab, pad)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct ifl_vocab, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(struct ifl_vocab, sep)},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        int32_t *p = (int32_t *)((char *)v + ids[i].off);
        if ((rc = get_id(g, ids[i].key, v->n_tokens, p, err)) < 0)
            return rc;
    }

    if (v->kind == IFL_VOCAB_SPM) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof(name), "<0x%02X>", b);
            v->byte_tok[b] = ifl_vocab_find(v, name, 6);
        }
    }

    if ((rc = get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) < 0 ||
        (rc = get_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) < 0 ||
        (rc = get_flag(g, "tokenizer.ggml.add_sep_token", &v->add_sep, err)) < 0 ||
        (rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) < 0 ||
        (rc = get_flag(g, "tokenizer.ggml.remove_extra_whitespaces", &v->remove_extra_ws, err)) <
            0 ||
        (rc = get_flag(g, "tokenizer.ggml.normalizer.lowercase", &v->wpm_lowercase, err)) < 0)
        return rc;
    if (v->kind == IFL_VOCAB_UGM && (rc = ifl_vocab_ugm_load(v, g, err)) < 0)
        return rc;
    /* BERT's normalizer strips accents when it lowercases, unless told */
    v->wpm_strip_accents = v->wpm_lowercase;
    if ((rc = get_flag(g, "tokenizer.ggml.normalizer.strip_accents", &v->wpm_strip_accents, err)) <
        0)
        return rc;
    if (v->pre_flags & IFL_PRE_FORCE_BOS) /* as llama.cpp does for Gemma 4 */
        v->add_bos = 1;
    if (v->kind != IFL_VOCAB_WPM)
        v->add_sep = 0; /* (llama.cpp adds SEP only for WordPiece when tokenizing) */
    if (v->add_sep && v->sep < 0)
        v->add_sep = 0;
    if (v->add_bos && v->bos < 0)
        v->add_bos = 0;
    if (v->add_eos && v->eos < 0)
        v->add_eos = 0;

    if ((rc = build_pieces(v, err)) < 0 || (rc = build_specials(v, err)) < 0)
        return rc;
    v->max_cover = max_cover(v);
    return 0;
}

int ifl_vocab_load(struct ifl_vocab **out, const struct ifl_gguf *g, char *err)
{
    *out = NULL;
    struct ifl_vocab *v = calloc(1, sizeof(*v));
    if (!v)
        return ifl_err(err, IFL_ENOMEM, "tokenizer: out of memory");
    int rc = load(v, g, err);
    if (rc < 0) {
        ifl_vocab_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

void ifl_vocab_free(struct ifl_vocab *v)
{
    if (!v)
        return;
    ifl_vocab_bpe_free(v);
    free(v->text_blob);
    free(v->text_off);
    free(v->scores);
    free(v->type);
    free(v->flags);
    free(v->piece_blob);
    free(v->piece_off);
    free(v->tok_slots);
    free(v->special);
    free(v->charsmap);
    free(v);
}

/* ---- accessors ---- */

enum ifl_vocab_kind ifl_vocab_kind(const struct ifl_vocab *v)
{
    return v->kind;
}
int32_t ifl_vocab_n_tokens(const struct ifl_vocab *v)
{
    return v->n_tokens;
}
int32_t ifl_vocab_bos(const struct ifl_vocab *v)
{
    return v->bos;
}
int32_t ifl_vocab_eos(const struct ifl_vocab *v)
{
    return v->eos;
}
int32_t ifl_vocab_eot(const struct ifl_vocab *v)
{
    return v->eot;
}
int32_t ifl_vocab_pad(const struct ifl_vocab *v)
{
    return v->pad;
}
int ifl_vocab_add_bos(const struct ifl_vocab *v)
{
    return v->add_bos;
}
int ifl_vocab_add_eos(const struct ifl_vocab *v)
{
    return v->add_eos;
}

int ifl_vocab_is_eog(const struct ifl_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && (v->flags[id] & IFL_TOKF_EOG);
}

int ifl_vocab_is_control(const struct ifl_vocab *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && v->type[id] == IFL_TOK_CONTROL;
}

const char *ifl_vocab_text(const struct ifl_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_tokens) {
        if (len)
            *len = 0;
        return NULL;
    }
    size_t n;
    const char *t = ifl_vocab_text_(v, id, &n);
    if (len)
        *len = n;
    return t;
}

size_t ifl_vocab_piece(const struct ifl_vocab *v, int32_t id, int show_special, char *buf,
                       size_t cap)
{
    size_t n;
    const char *p = ifl_vocab_piece_view(v, id, show_special, &n);
    if (cap > 0)
        memcpy(buf, p, n < cap ? n : cap);
    return n;
}

size_t ifl_vocab_max_piece(const struct ifl_vocab *v)
{
    return v->max_piece;
}
size_t ifl_vocab_max_cover(const struct ifl_vocab *v)
{
    return v->max_cover;
}
