/*
 * Tokenizers from GGUF metadata: SentencePiece (tokenizer.ggml.model =
 * "llama"), BPE ("gpt2", "gemma4") with every pre-tokenizer llama.cpp knows
 * (tokenizer.ggml.pre: "default", "llama-bpe", "qwen2", "deepseek-llm",
 * "falcon", ...; pretok.c lists them), WordPiece ("bert") and Unigram ("t5"),
 * control and user-defined special tokens, add_bos/add_eos and byte-fallback
 * tokens. Works on vocab-only GGUF files.
 *
 * A vocabulary is immutable after loading: share it between threads. The
 * functions below are reentrant; tokenizing may allocate (it is not on the
 * forward pass's hot path), detokenizing does not.
 */
#ifndef IFL_TOKENIZER_TOKENIZER_H
#define IFL_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "model/gguf.h"

struct ifl_vocab;

enum ifl_vocab_kind { IFL_VOCAB_SPM = 1, IFL_VOCAB_BPE = 2, IFL_VOCAB_WPM = 3, IFL_VOCAB_UGM = 4 };

/* Reads tokenizer.* keys from g. The vocabulary copies what it needs, so g
 * may be freed afterwards. Unsupported models or pre-tokenizers are an
 * IFL_EUNSUPPORTED error naming the value. */
int ifl_vocab_load(struct ifl_vocab **out, const struct ifl_gguf *g, char *err);
void ifl_vocab_free(struct ifl_vocab *v);

enum ifl_vocab_kind ifl_vocab_kind(const struct ifl_vocab *v);
int32_t ifl_vocab_n_tokens(const struct ifl_vocab *v);
/* Special ids, -1 when the vocabulary has none. */
int32_t ifl_vocab_bos(const struct ifl_vocab *v);
int32_t ifl_vocab_eos(const struct ifl_vocab *v);
int32_t ifl_vocab_eot(const struct ifl_vocab *v);
int32_t ifl_vocab_pad(const struct ifl_vocab *v);
int ifl_vocab_add_bos(const struct ifl_vocab *v); /* metadata says to prepend BOS */
int ifl_vocab_add_eos(const struct ifl_vocab *v);
/* 1 for tokens that end generation (eos, eot, eom and the like). */
int ifl_vocab_is_eog(const struct ifl_vocab *v, int32_t id);
/* 1 for control tokens (their text is not shown to users). */
int ifl_vocab_is_control(const struct ifl_vocab *v, int32_t id);
/* The token's stored text (e.g. "▁the", "Ġthe", "<0x0A>"), a view valid
 * while v lives; NULL for an id out of range. */
const char *ifl_vocab_text(const struct ifl_vocab *v, int32_t id, size_t *len);
/* Looks a token up by its stored text; -1 if absent. */
int32_t ifl_vocab_find(const struct ifl_vocab *v, const char *text, size_t len);

/* Tokenizes len bytes of text (any bytes; invalid UTF-8 is handled the way
 * the reference tokenizers handle it). add_special: prepend BOS / append EOS
 * (WordPiece: [CLS] / [SEP]) as the metadata says. parse_special: text of
 * control (and unknown) tokens becomes those tokens; otherwise it is plain
 * text. User-defined tokens (added tokens such as Qwen's "<think>") are
 * matched either way, as llama.cpp and Hugging Face do. Matching takes the
 * longest texts first. Writes at most cap ids; *n_out is the full count
 * either way, and the call
 * returns IFL_EFULL when it exceeds cap (call again with more room).
 * IFL_EINVAL for cap < 0 or len > IFL_TOKENIZE_MAX_LEN; IFL_ENOMEM. */
#define IFL_TOKENIZE_MAX_LEN ((size_t)1 << 29)
int ifl_tokenize(const struct ifl_vocab *v, const char *text, size_t len, int add_special,
                 int parse_special, int32_t *ids, int64_t cap, int64_t *n_out);
/* ifl_tokenize into a malloc'd array of exactly the ids (*ids, *n_out), with
 * room grown when byte fallback gives more ids than the text has bytes.
 * On an error *ids is NULL. */
int ifl_tokenize_alloc(const struct ifl_vocab *v, const char *text, size_t len, int add_special,
                       int parse_special, int32_t **ids, int64_t *n_out);

/* The bytes a token stands for when generated text is shown: SPM "▁" becomes
 * a space and <0xNN> one byte; byte-level BPE maps its code points back to
 * bytes; control tokens give "" unless show_special. The bytes may be part
 * of a UTF-8 character. Returns the byte count, writing at most cap bytes
 * (call again with more room if the count is larger). */
size_t ifl_vocab_piece(const struct ifl_vocab *v, int32_t id, int show_special, char *buf,
                       size_t cap);

/* The longest piece any token gives, in bytes (with show_special). */
size_t ifl_vocab_max_piece(const struct ifl_vocab *v);

/* The most input bytes that one id of ifl_tokenize can stand for (the
 * longest stored token text bounds it), so that a text of len bytes gives at
 * least ceil(len / max_cover) ids, BOS and EOS aside: a prompt can be found
 * too long for a context before it is tokenized. 0 when no such bound holds
 * (a vocabulary with a byte it has no token for drops that byte). */
size_t ifl_vocab_max_cover(const struct ifl_vocab *v);

/* Streaming detokenizer: feeds tokens one by one and emits only whole UTF-8
 * characters, holding back an incomplete tail (at most 3 bytes) until the
 * next token completes it. Each maximal ill-formed UTF-8 subpart (a byte
 * that cannot start a character, or a started character cut off by a wrong
 * byte) comes out as one U+FFFD (EF BF BD). Single-owner; no allocation. */
struct ifl_detok {
    const struct ifl_vocab *v;
    int show_special;
    unsigned char pending[8];
    int n_pending;
};

void ifl_detok_init(struct ifl_detok *d, const struct ifl_vocab *v, int show_special);
/* Appends the text of token id to out and returns the bytes written. out
 * must hold IFL_DETOK_ROOM(v) bytes: room for the longest piece plus a held
 * tail, each byte possibly becoming a 3-byte U+FFFD (push also uses the
 * buffer's back as scratch). */
#define IFL_DETOK_ROOM(v) (3 * ifl_vocab_max_piece(v) + 16)
size_t ifl_detok_push(struct ifl_detok *d, int32_t id, char *out);
/* Emits whatever is held back (as U+FFFD where incomplete). */
size_t ifl_detok_flush(struct ifl_detok *d, char *out); /* out holds >= 16 bytes */

#endif
