/*
 * Streaming detokenizer: token pieces in, whole UTF-8 characters out.
 *
 * The bytes held back from the previous token are joined with the new
 * piece and scanned with a strict UTF-8 check (Unicode table 3-7). Valid
 * characters pass through; each maximal ill-formed subpart (a byte that can
 * start nothing, or a valid start cut off by a wrong byte) becomes one
 * U+FFFD, the substitution Unicode recommends and most decoders use; a valid
 * but incomplete start at the end (at most 3 bytes) is held back for the
 * next token, and the flush turns it into one U+FFFD.
 *
 * No allocation: the joined bytes are staged at the back of the caller's
 * buffer and decoded towards its front. Since every input byte yields at
 * most 3 output bytes and the staging starts at least 2 * max_piece + 13
 * bytes in, the writer never overtakes the reader (IFL_DETOK_ROOM sizes it).
 */
#include "tokenizer/internal.h"

static const char REPLACEMENT[3] = {'\xef', '\xbf', '\xbd'}; /* U+FFFD */

void ifl_detok_init(struct ifl_detok *d, const struct ifl_vocab *v, int show_special)
{
    memset(d, 0, sizeof(*d));
    d->v = v;
    d->show_special = show_special;
}

size_t ifl_detok_push(struct ifl_detok *d, int32_t id, char *out)
{
    size_t pl;
    const char *p = ifl_vocab_piece_view(d->v, id, d->show_special, &pl);
    size_t np = (size_t)d->n_pending;
    size_t n = np + pl;
    if (n == 0)
        return 0;
    size_t room = 3 * d->v->max_piece + 16; /* IFL_DETOK_ROOM */
    unsigned char *in = (unsigned char *)out + room - n;
    memcpy(in, d->pending, np);
    memcpy(in + np, p, pl);
    d->n_pending = 0;

    size_t w = 0;
    for (size_t k = 0; k < n;) {
        size_t cl;
        int st = ifl_utf8_check(in + k, n - k, &cl);
        if (st == IFL_UTF8_OK) {
            memmove(out + w, in + k, cl);
            w += cl;
        } else if (st == IFL_UTF8_SHORT) {
            memcpy(d->pending, in + k, cl); /* cl <= 3 */
            d->n_pending = (int)cl;
        } else {
            memcpy(out + w, REPLACEMENT, 3);
            w += 3;
        }
        k += cl;
    }
    return w;
}

size_t ifl_detok_flush(struct ifl_detok *d, char *out)
{
    if (d->n_pending == 0)
        return 0;
    d->n_pending = 0;
    memcpy(out, REPLACEMENT, 3);
    return 3;
}
