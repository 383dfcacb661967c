/*
 * UTF-8, strictly (Unicode table 3-7: no overlong forms, no surrogates,
 * nothing above U+10FFFF): the one place that decides what a character is,
 * for the tokenizers, the server's JSON text, chat templates (whose
 * decoder turns a bad byte into U+FFFD on top of it) and the guide (whose
 * decoder reports bad and cut-short characters on top of it).
 */
#ifndef IFL_CORE_UTF8_H
#define IFL_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Byte count a lead byte announces, as llama.cpp counts it (no validation):
 * 1 for ASCII and stray continuation bytes. */
static inline size_t ifl_utf8_len_lead(unsigned char c)
{
    static const unsigned char len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

enum { IFL_UTF8_OK, IFL_UTF8_SHORT, IFL_UTF8_BAD };

/* Checks the character at s[0..n) (n >= 1) strictly (no overlongs, no
 * surrogates, at most U+10FFFF; Unicode table 3-7). Returns IFL_UTF8_OK with
 * *len its length; IFL_UTF8_SHORT when s is a valid but cut-off start
 * (*len = n); IFL_UTF8_BAD with *len the maximal ill-formed subpart (>= 1),
 * which is what one U+FFFD replaces. */
static inline int ifl_utf8_check(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c < 0x80) {
        *len = 1;
        return IFL_UTF8_OK;
    } else if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        *len = 1;
        return IFL_UTF8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return IFL_UTF8_SHORT;
        }
        unsigned char b = s[i];
        int ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            *len = i;
            return IFL_UTF8_BAD;
        }
    }
    *len = need;
    return IFL_UTF8_OK;
}

/* Code point of a character ifl_utf8_check accepted. */
static inline uint32_t ifl_utf8_decode(const unsigned char *s, size_t len)
{
    switch (len) {
    case 1:
        return s[0];
    case 2:
        return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3:
        return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
               (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    }
}

/* Writes cp (< 0x110000) as UTF-8; returns the byte count. */
static inline size_t ifl_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The length of the whole, valid character at p[0..n) (n >= 1), or 0 when
 * it is invalid or cut short. */
static inline size_t ifl_utf8_char_len(const unsigned char *p, size_t n)
{
    size_t len;
    return ifl_utf8_check(p, n, &len) == IFL_UTF8_OK ? len : 0;
}

/* Whether all of s[0..n) is valid UTF-8 (NUL bytes are characters). */
static inline int ifl_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = ifl_utf8_char_len(p + i, n - i);
        if (!len)
            return 0;
        i += len;
    }
    return 1;
}

#endif
