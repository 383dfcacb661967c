/*
 * What the tool-call parsers' tests share (tests/test_hermes.c,
 * tests/test_llama3.c, tests/test_mistral.c): a reply parsed whole or cut into streamed pieces at
 * given points, its calls written out compactly, and check(): the reply
 * gives the content and calls wanted, whole, at every single and every
 * pair of cut points, and one byte at a time. The including file names its
 * parser first: RP_T (the state's type) and RP_INIT, RP_PUSH, RP_FINISH,
 * RP_DEINIT (its functions, as ifl_hermes_*).
 */
#ifndef IFL_TESTS_REPLY_CUTS_H
#define IFL_TESTS_REPLY_CUTS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "t.h"

static json_t *names; /* the request's functions */

static void parse_cut(const char *text, const size_t *cuts, int n_cuts, struct ifl_reply_out *o)
{
    RP_T t;
    RP_INIT(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "t");
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        RP_PUSH(&t, text + at, to - at, o);
        at = to;
    }
    RP_FINISH(&t, o);
    RP_DEINIT(&t);
}

static void out_free(struct ifl_reply_out *o)
{
    ifl_buf_free(&o->reasoning);
    ifl_buf_free(&o->content);
    json_decref(o->calls);
}

static const char *str(const struct ifl_buf *b)
{
    return b->p ? b->p : "";
}

/* the calls' name and arguments, compact: [["name", "arguments"], ...],
 * and every id and index as they must be; a parser whose ids are its own
 * defines RP_ID_SHOWN(id, index), what the check shows for an id: then
 * [["name", "arguments", shown id], ...] */
static char *calls_text(const struct ifl_reply_out *o)
{
    json_t *a = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(o->calls, i, c)
    {
        char id[32];
        snprintf(id, sizeof id, "call_t_%zu", i);
        json_t *f = json_object_get(c, "function");
        const char *cid = json_string_value(json_object_get(c, "id"));
        const char *ty = json_string_value(json_object_get(c, "type"));
#ifdef RP_ID_SHOWN
        (void)id;
        int bad_id = !cid;
#else
        int bad_id = !cid || strcmp(cid, id);
#endif
        if (json_integer_value(json_object_get(c, "index")) != (json_int_t)i || bad_id || !ty ||
            strcmp(ty, "function"))
            json_array_append_new(a, json_string("bad id, index or type"));
#ifdef RP_ID_SHOWN
        else
            json_array_append_new(a,
                                  json_pack("[OOs]", json_object_get(f, "name"),
                                            json_object_get(f, "arguments"), RP_ID_SHOWN(cid, i)));
#else
        json_array_append_new(
            a, json_pack("[OO]", json_object_get(f, "name"), json_object_get(f, "arguments")));
#endif
    }
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

/* text parses to content and calls, whole and cut anywhere */
static void check(const char *text, const char *content, const char *calls)
{
    size_t n = strlen(text);
    struct ifl_reply_out o;
    parse_cut(text, NULL, 0, &o);
    char *ct = calls_text(&o);
    CHECK_MSG(!strcmp(str(&o.content), content) && !strcmp(ct, calls) && !o.oom,
              "%s:\n  content \"%s\" (want \"%s\")\n  calls %s (want %s)", text, str(&o.content),
              content, ct, calls);
    int bad = 0;
    for (size_t a = 1; a < n && !bad; a++)
        for (size_t b = a; b < n && !bad; b++) {
            size_t cuts[2] = {a, b};
            struct ifl_reply_out p;
            parse_cut(text, cuts, a == b ? 1 : 2, &p);
            char *pt = calls_text(&p);
            if (strcmp(str(&p.content), str(&o.content)) || strcmp(pt, ct)) {
                fprintf(stderr, "  cut at %zu, %zu of \"%s\": \"%s\" / %s\n", a, b, text,
                        str(&p.content), pt);
                bad = 1;
            }
            free(pt);
            out_free(&p);
        }
    size_t *all = malloc(sizeof *all * (n ? n : 1));
    for (size_t i = 0; i + 1 < n; i++)
        all[i] = i + 1;
    struct ifl_reply_out b;
    parse_cut(text, all, n ? (int)n - 1 : 0, &b);
    char *bt = calls_text(&b);
    bad |= strcmp(str(&b.content), str(&o.content)) || strcmp(bt, ct);
    CHECK_MSG(!bad, "\"%s\": streamed pieces parse otherwise (one byte at a time: \"%s\" / %s)",
              text, str(&b.content), bt);
    free(bt);
    out_free(&b);
    free(all);
    free(ct);
    out_free(&o);
}

#endif
