/*
 * Guided decoding: grammars that constrain what a sequence may generate.
 *
 * A grammar (GBNF text, JSON mode, or a regex translated to GBNF) compiles to
 * an immutable struct ifl_guide: rules flattened into one element array and
 * character classes over Unicode code points. A struct ifl_guide_state is
 * the per-sequence position in that grammar: a set of stacks of element
 * positions (a pushdown automaton run on every parse at once), plus the
 * bytes of a UTF-8 character a token may have left unfinished. Tokens are
 * fed byte by byte, so a token may end in the middle of a character.
 *
 * A struct ifl_guide_vocab_index is a trie of every token's bytes, built
 * once per vocabulary; ifl_guide_mask walks it against a state, pruning a
 * whole subtree as soon as the automaton rejects its prefix, and memoises
 * the last few masks by state (struct ifl_guide_masker, single-owner).
 *
 * Ownership and threads: struct ifl_guide and the vocab index are immutable
 * after creation (share them between threads). A state and a masker are
 * single-owner. accept/mask grow their scratch buffers when a state needs
 * more room than any before, and otherwise do not allocate.
 *
 * Limits: a state holds at most IFL_GUIDE_MAX_STACKS stacks of at most
 * IFL_GUIDE_MAX_DEPTH entries, and a step follows at most
 * IFL_GUIDE_MAX_EXPAND references; a step that would exceed them fails with
 * IFL_EFULL (an ambiguous grammar is an error, never a hang). Left
 * recursion (and a repeated item that can match nothing) is rejected when
 * the grammar compiles.
 */
#ifndef IFL_GUIDE_GUIDE_H
#define IFL_GUIDE_GUIDE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

#define IFL_GUIDE_MAX_STACKS 4096
#define IFL_GUIDE_MAX_DEPTH 2048
/* most expansion steps (a rule reference or alternative followed) in one
 * step of the automaton: bounds the time a byte may take */
#define IFL_GUIDE_MAX_EXPAND (1 << 16)
/* longest grammar text accepted, and most elements after expansion */
#define IFL_GUIDE_MAX_TEXT ((size_t)1 << 22)
#define IFL_GUIDE_MAX_ELEMS ((size_t)1 << 22)

struct ifl_guide;
struct ifl_guide_vocab_index;
struct ifl_guide_masker;

/* Compiles GBNF text (llama.cpp's dialect: `name ::= alternatives`, `|`,
 * `( )`, `?` `*` `+` `{m}` `{m,}` `{m,n}`, "literals" with \n \r \t \\ \"
 * \' \[ \] \- \xNN \uNNNN \UNNNNNNNN, [classes] with ranges and ^, `.`, `#`
 * comments). The start rule is `root`. Errors (IFL_EFORMAT) name line and
 * column: "gbnf: 3:14: undefined rule 'value'". *out is owned by the caller
 * (ifl_guide_free). err is optional, IFL_ERR_LEN bytes. */
int ifl_guide_compile_gbnf(struct ifl_guide **out, const char *text, size_t len, char *err);
/* Any JSON value (object_only = 0) or any JSON object (object_only = 1),
 * with optional whitespace between tokens. */
int ifl_guide_compile_json(struct ifl_guide **out, int object_only, char *err);
/* A regular expression the whole output must match: literals, ., [classes]
 * (ranges, ^, \d \w \s inside), groups ( ) and (?: ), |, ? * + {m} {m,}
 * {m,n} (counts up to 10000; lazy suffix ? ignored), escapes \d \D \w \W
 * \s \S \n \t \r \f \v (U+000B) \0 \xNN \uNNNN and escaped punctuation or
 * non-ASCII; ^ and $ only at the very ends. A '{' that starts like a count
 * ("{" then a digit, or ",digit") must be a whole valid count, else it is
 * IFL_EFORMAT naming it ("regex: 2: repeat count in '{100000}' is too
 * large (max 10000)"); any other '{' is text. Backrefs, lookaround, other
 * anchors, possessive quantifiers and octal escapes are IFL_EUNSUPPORTED;
 * malformed patterns IFL_EFORMAT ("regex: 5: unbalanced '('"). */
int ifl_guide_compile_regex(struct ifl_guide **out, const char *re, size_t len, char *err);
/* Translates a regex to GBNF text (malloc'd, NUL-terminated, caller frees). */
int ifl_guide_regex_to_gbnf(char **out, const char *re, size_t len, char *err);
/* A JSON Schema (JSON text): type (and arrays of types), properties,
 * required, additionalProperties (for objects without properties), items,
 * prefixItems, minItems/maxItems, enum, const, anyOf/oneOf (oneOf as
 * anyOf: give it disjoint alternatives), allOf of one
 * schema, $ref to #, #/$defs/... or #/definitions/... (recursion allowed),
 * string formats date, time, date-time, uuid, email, minLength/maxLength,
 * integer minimum/maximum (both bounds within 2000 values, or minimum 0 or
 * 1 alone), number minimum 0 alone or minimum and maximum (integer
 * bounds, at most 2000 apart; up to six fraction digits, no exponent),
 * nullable. const/enum allow only type beside them, $ref and the
 * combinators only annotations. Properties come out in schema
 * order, required ones first. A constraining keyword it cannot express is
 * IFL_EUNSUPPORTED naming it (never silently dropped); a malformed schema
 * is IFL_EFORMAT. */
int ifl_guide_compile_json_schema(struct ifl_guide **out, const char *schema, size_t len,
                                  char *err);
/* The GBNF text a schema compiles to (malloc'd, caller frees). */
int ifl_guide_schema_to_gbnf(char **out, const char *schema, size_t len, char *err);
/* A schema's rules alone, to be part of a larger grammar: every rule the
 * schema needs is named PREFIX "s" N (prefix: letters, digits, '-' and '_',
 * at most 32 bytes; "" gives the names of ifl_guide_schema_to_gbnf), and
 * rule PREFIX "s" *top matches the schema's values, with no whitespace
 * around. The rules refer to the JSON building blocks of
 * ifl_guide_schema_gbnf_common, which the larger grammar must hold once.
 * *out malloc'd (caller frees); the errors of ifl_guide_schema_to_gbnf. */
int ifl_guide_schema_rules(char **out, int *top, const char *schema, size_t len, const char *prefix,
                           char *err);
/* The JSON building blocks schema rules refer to (value, object, member,
 * array, string, char, hex4, number, integer, ws), as GBNF lines (a
 * static string). */
const char *ifl_guide_schema_gbnf_common(void);
/* Validates the JSON text doc against a JSON Schema (its own code, not
 * the grammar; see validate.c for the keywords). 0: valid; IFL_EINVAL:
 * invalid or not JSON, err names the place as a JSON path and the rule
 * ("$.items[2].age: 130 is above maximum 120"); IFL_EFORMAT: the schema is
 * malformed; IFL_EUNSUPPORTED: it uses a keyword the validator lacks.
 * Thread-safe. err optional, IFL_ERR_LEN bytes. */
int ifl_guide_validate_json(const char *schema, size_t schema_len, const char *doc, size_t doc_len,
                            char *err);
/* The GBNF text of JSON mode (a static string). */
const char *ifl_guide_json_gbnf(int object_only);
void ifl_guide_free(struct ifl_guide *g);

/* Per-sequence state. Fields are private. */
struct ifl_guide_state {
    const struct ifl_guide *g;
    uint32_t *buf; /* stacks, each [depth, bottom ... top] */
    size_t len, cap;
    uint32_t n_stacks;
    uint32_t cp;   /* bits of an unfinished UTF-8 character */
    uint32_t need; /* continuation bytes it still needs (0: none pending) */
    void *scratch; /* struct ifl_guide_scratch (automaton.c), grown on demand */
};

/* Puts st at the start of g. IFL_ENOMEM; st needs deinit either way. */
int ifl_guide_state_init(struct ifl_guide_state *st, const struct ifl_guide *g);
void ifl_guide_state_deinit(struct ifl_guide_state *st);
/* Back to the start of its grammar. */
int ifl_guide_state_reset(struct ifl_guide_state *st);
/* dst (initialised, any grammar) becomes a copy of src (for beams and
 * parallel samples). IFL_ENOMEM. */
int ifl_guide_state_copy(struct ifl_guide_state *dst, const struct ifl_guide_state *src);
/* Feeds n bytes. 0: all accepted; IFL_EINVAL: rejected, state unchanged;
 * IFL_EFULL: the stack limits were hit (state unchanged); IFL_ENOMEM. A
 * partial UTF-8 character is accepted when some code point it may still
 * become is allowed. */
int ifl_guide_accept_bytes(struct ifl_guide_state *st, const void *bytes, size_t n);
/* 1 when the text so far is a complete sentence of the grammar. */
int ifl_guide_is_accepting(const struct ifl_guide_state *st);
/* 1 when some longer text is still possible. */
int ifl_guide_can_continue(const struct ifl_guide_state *st);

/* Trie of the vocabulary's token bytes. Control tokens and tokens with an
 * empty piece are never allowed; end-of-generation tokens are allowed
 * exactly when the state is accepting. vocab must outlive the index. */
int ifl_guide_vocab_index_create(struct ifl_guide_vocab_index **out, const struct ifl_vocab *vocab,
                                 char *err);
void ifl_guide_vocab_index_free(struct ifl_guide_vocab_index *vi);
int32_t ifl_guide_vocab_index_n_tokens(const struct ifl_guide_vocab_index *vi);

/* Feeds token id's bytes (an end-of-generation token: 0 when accepting,
 * else IFL_EINVAL; the state does not change). Same returns as
 * accept_bytes; IFL_EINVAL for an id out of range or a never-allowed token. */
int ifl_guide_accept_token(struct ifl_guide_state *st, const struct ifl_guide_vocab_index *vi,
                           int32_t id);

/* A masker: scratch and a small LRU cache of masks keyed by the full state,
 * for one vocab index. Single-owner. */
int ifl_guide_masker_create(struct ifl_guide_masker **out, const struct ifl_guide_vocab_index *vi);
/* The same with room for n_cache masks (an executor shares one masker
 * between requests, so it remembers many states). */
int ifl_guide_masker_create_sized(struct ifl_guide_masker **out,
                                  const struct ifl_guide_vocab_index *vi, int n_cache);
void ifl_guide_masker_free(struct ifl_guide_masker *m);
/* Sets bit id of allowed[(n_tokens + 31) / 32] (bit id % 32 of word id / 32)
 * for every token st may accept next, clears the others. Returns the number
 * of allowed tokens (>= 0) or IFL_ENOMEM. A token whose bytes would exceed
 * the stack limits counts as not allowed. */
int64_t ifl_guide_mask(struct ifl_guide_masker *m, const struct ifl_guide_state *st,
                       uint32_t *allowed);
/* Turns the plain-token fast path off (0) or on (1, the default); tests
 * compare the two. */
void ifl_guide_masker_set_fast(struct ifl_guide_masker *m, int on);
/* Cache statistics since creation. */
void ifl_guide_masker_stats(const struct ifl_guide_masker *m, uint64_t *hits, uint64_t *misses);

#endif
