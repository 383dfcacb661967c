/*
 * Stop strings on streamed text: a matcher that is fed the decoded bytes of
 * each new token and says which bytes may be shown now and whether a stop
 * string has appeared, across token boundaries.
 *
 * Contract, for text T fed in any chunking:
 *  - The match is the one that ends first in T; of several stop strings
 *    ending at that byte, the longest. (So stops "ab" and "bc" on "abc"
 *    match "ab"; stops "abcd" and "c" on "abcd" match "c". The answer never
 *    depends on how T was split into feeds.)
 *  - Emitted output is always a prefix of T[0 .. match start) (or of T when
 *    nothing matches): no byte of a matched stop string is ever emitted.
 *  - A byte is held back exactly while it belongs to the longest suffix of
 *    the text so far that is a prefix of some stop string; every other byte
 *    is released at once. Hold-back is byte-exact: with valid UTF-8 stop
 *    strings and text fed in whole characters, output splits only between
 *    characters.
 *  - After a match, feeds emit nothing more; flush at the end of
 *    generation (no match) releases the held bytes.
 *
 * Implementation: an Aho-Corasick automaton over byte classes (the bytes
 * that occur in some stop string, plus one class for all others), built at
 * create; a feed costs one table step per byte and allocates nothing.
 * The held bytes are always the automaton state's string, so they are read
 * back from the stored stop strings rather than buffered.
 *
 * Single-owner (the engine thread); one matcher per request (or per
 * returned sequence).
 */
#ifndef IFL_RUNTIME_STOPSTR_H
#define IFL_RUNTIME_STOPSTR_H

#include <stddef.h>
#include <stdint.h>

struct ifl_stopstr;

/* Builds a matcher for stops[0..n_stops) (copied; n_stops may be 0: then
 * everything passes through). Each must be a non-empty string. Memory is
 * about 4 * (total bytes + 1) * (distinct bytes + 1) bytes for the table.
 * Returns 0, IFL_EINVAL with a message naming "stop_strings[i]", or
 * IFL_ENOMEM. */
int ifl_stopstr_create(struct ifl_stopstr **out, const char *const *stops, int32_t n_stops,
                       char *err);
/* NULL is fine. */
void ifl_stopstr_free(struct ifl_stopstr *m);
/* Starts a new text (same stop strings). */
void ifl_stopstr_reset(struct ifl_stopstr *m);

/* Longest stop string length minus one (0 without stop strings): the most
 * bytes ever held back. */
size_t ifl_stopstr_max_hold(const struct ifl_stopstr *m);

/* Feeds the next n bytes of text. Writes the bytes that may be emitted now
 * to out, which must have room for n + ifl_stopstr_max_hold(m) bytes, and
 * their number to *n_out. Returns 1 if a stop string has matched (in this
 * feed or before: then *n_out is the text up to the match start not yet
 * emitted, and every later feed emits nothing), else 0. */
int ifl_stopstr_feed(struct ifl_stopstr *m, const char *text, size_t n, char *out, size_t *n_out);

/* The end of the text without a match: writes the held bytes (at most
 * max_hold) to out and returns their number. After a match it writes
 * nothing. Later feeds start matching afresh, as if after a reset. */
size_t ifl_stopstr_flush(struct ifl_stopstr *m, char *out);

/* Byte offset of the match start in the text fed since reset, or -1. */
int64_t ifl_stopstr_match_offset(const struct ifl_stopstr *m);
/* Index of the matched stop string (the first of equal duplicates), or -1. */
int32_t ifl_stopstr_match_index(const struct ifl_stopstr *m);
/* Bytes fed and emitted since reset. */
int64_t ifl_stopstr_n_fed(const struct ifl_stopstr *m);
int64_t ifl_stopstr_n_emitted(const struct ifl_stopstr *m);

#endif
