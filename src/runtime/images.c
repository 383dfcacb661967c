/*
 * Images in requests: intake at enqueue, the engine's encoder passes and
 * output cache, and the rows of each step (images.h describes the whole).
 */
#include "runtime/images.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/timeutil.h"
#include "runtime/engine_internal.h"
#include "vision/clip.h"
#include "vision/image.h"

/* Unreferenced cache entries kept at most, whatever their bytes: a lookup
 * walks the list. */
#define IMG_CACHE_MAX_IDLE 1024

struct ifl_img_entry {
    uint64_t h[2];
    float *rows; /* [n_tok][n_embd] */
    int64_t bytes;
    int32_t refs;                      /* requests using it */
    struct ifl_img_entry *prev, *next; /* most recently used first */
};

struct ifl_img_engine {
    struct ifl_clip_ctx *ctx;
    int32_t per_step;
    float *px;           /* [per_step][3][S][S] this pass's inputs */
    float *out;          /* [per_step][n_tok][n_embd] its outputs */
    struct ximg **batch; /* [per_step] */
    struct xreq **bq;    /* [per_step] their requests */
    struct xreq **order; /* [n_slots] running requests with images, in scheduling order */
    int32_t *from;       /* [n_slots] the least position their sequences have computed */
    struct ifl_img_entry *head;
    int64_t idle_bytes, cap;
    int32_t n_idle;
    int64_t encoded, hits;
    double seconds;
};

/* ---- hashing ---- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A seeded 128-bit hash of n bytes (two lanes, each a chain of bijections
 * of its state and the next word), continuing from h. Not cryptographic:
 * the executor's random seed is what keeps clients from aiming at a
 * collision. */
static void hash_bytes(uint64_t h[2], const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t a = h[0], b = h[1];
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t w0, w1;
        memcpy(&w0, s + i, 8);
        memcpy(&w1, s + i + 8, 8);
        a = mix64(a + w0 * 0x9e3779b97f4a7c15ull);
        b = mix64(b + w1 * 0xc2b2ae3d27d4eb4full);
    }
    unsigned char tail[16] = {0};
    memcpy(tail, s + i, n - i);
    uint64_t w0, w1;
    memcpy(&w0, tail, 8);
    memcpy(&w1, tail + 8, 8);
    a = mix64(a + w0 * 0x9e3779b97f4a7c15ull + (uint64_t)n);
    b = mix64(b + w1 * 0xc2b2ae3d27d4eb4full + (uint64_t)(n - i));
    h[0] = mix64(a ^ (b << 29 | b >> 35));
    h[1] = mix64(b ^ a * 0xff51afd7ed558ccdull);
}

static void hash_start(const struct ifl_executor *ex, uint64_t h[2], uint64_t tag)
{
    h[0] = mix64(ex->img_seed ^ tag);
    h[1] = mix64(~ex->img_seed + tag * 0x9e3779b97f4a7c15ull);
}

/* The prefix cache's key of row i of an image: never 0 (0 is a token). */
static uint64_t row_key(const uint64_t h[2], int32_t i)
{
    uint64_t k = mix64(h[0] ^ mix64(h[1] + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)));
    return k ? k : 1;
}

/* ---- creation ---- */

int ifl_img_exec_init(struct ifl_executor *ex, const char *mmproj_path, char *err)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = mix64((uint64_t)ifl_now_us() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)ex);
    ex->img_seed = seed;
    if (!mmproj_path || !mmproj_path[0])
        return 0;
    if (ex->tp)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "config: mmproj_path: images are not available with tensor parallelism "
                       "(--tp) in this version");
    int rc = ifl_clip_load_prec(
        &ex->clip, mmproj_path,
        ex->cfg.vision_precision == IFL_VISION_PREC_BF16 ? IFL_CLIP_PREC_BF16 : IFL_CLIP_PREC_F32,
        err);
    if (rc)
        return rc;
    if (ex->clip->hp.n_out != ex->model->hp.n_embd)
        return ifl_err(err, IFL_EINVAL,
                       "mmproj: '%s' projects images to rows of %d floats, but the model's n_embd "
                       "is %d (the mmproj is made for another text model)",
                       mmproj_path, ex->clip->hp.n_out, ex->model->hp.n_embd);
    return 0;
}

void ifl_img_exec_fini(struct ifl_executor *ex)
{
    ifl_clip_free(ex->clip);
    ex->clip = NULL;
}

int ifl_executor_vision_info(ifl_executor *ex, struct ifl_vision_info *out)
{
    if (!ex || !out)
        return IFL_EINVAL;
    if (!ex->clip)
        return IFL_ENOTFOUND;
    const struct ifl_clip_hparams *hp = &ex->clip->hp;
    memset(out, 0, sizeof *out);
    out->image_size = hp->image_size;
    out->patch_size = hp->patch_size;
    out->n_tokens = hp->n_tok;
    out->n_embd = hp->n_out;
    out->n_layer = hp->n_layer;
    out->n_run = hp->n_run;
    out->max_images = ex->cfg.vision_images_per_step;
    return 0;
}

/* ---- intake ---- */

void ifl_img_free_request(struct xreq *q)
{
    for (int32_t i = 0; i < q->n_img; i++) {
        free(q->img[i].px);
        free(q->img[i].own);
    }
    free(q->img);
    free(q->img_ext);
    q->img = NULL;
    q->img_ext = NULL;
    q->n_img = 0;
}

/* The request's units: img grows by n (zeroed); NULL on ENOMEM. */
static struct ximg *grow(struct xreq *q, int32_t n)
{
    struct ximg *p = realloc(q->img, sizeof(*p) * (size_t)(q->n_img + n));
    if (!p)
        return NULL;
    q->img = p;
    memset(p + q->n_img, 0, sizeof(*p) * (size_t)n);
    q->n_img += n;
    return p + q->n_img - n;
}

/* Decodes and preprocesses one PNG/JPEG image at positions [pos, pos +
 * rows) into its units: one per encoder tile (InternVL's tiling gives
 * several, each n_tok rows, each hashed as the image's hash and its
 * index), appended to q->img. */
static int take_data(struct ifl_executor *ex, const struct ifl_image_input *in, int32_t pos,
                     struct xreq *q, char *why)
{
    struct ifl_image im = {0};
    int rc = ifl_image_decode(&im, in->data, (size_t)in->size, why);
    if (rc)
        return rc;
    uint64_t h[2];
    hash_start(ex, h, ((uint64_t)(uint32_t)im.w << 32 | (uint32_t)im.h) ^ 0x1);
    hash_bytes(h, im.rgb, (size_t)im.w * (size_t)im.h * 3);
    const int32_t nt = ifl_clip_n_tiles(ex->clip, im.w, im.h), NT = ex->clip->hp.n_tok;
    const size_t T = (size_t)3 * ex->clip->hp.image_size * ex->clip->hp.image_size;
    float *px = malloc(sizeof(float) * T * (size_t)nt);
    struct ximg *u = px ? grow(q, nt) : NULL;
    if (!u)
        rc = ifl_err(why, IFL_ENOMEM, "out of memory");
    else
        rc = ifl_clip_preprocess(ex->clip, &im, px, why);
    ifl_image_free(&im);
    for (int32_t t = 0; t < nt && !rc; t++) {
        u[t].pos = pos + t * NT;
        u[t].n = NT;
        u[t].h[0] = nt == 1 ? h[0] : mix64(h[0] ^ 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1));
        u[t].h[1] = nt == 1 ? h[1] : mix64(h[1] + (uint64_t)t);
        if (!(u[t].px = malloc(sizeof(float) * T)))
            rc = ifl_err(why, IFL_ENOMEM, "out of memory");
        else
            memcpy(u[t].px, px + (size_t)t * T, sizeof(float) * T);
    }
    free(px);
    return rc;
}

/* Copies given rows into a new unit. */
static int take_rows(struct ifl_executor *ex, const struct ifl_image_input *in, int32_t pos,
                     int32_t n, struct xreq *q, char *why)
{
    size_t k = (size_t)n * (size_t)ex->model->hp.n_embd;
    for (size_t i = 0; i < k; i++)
        if (!isfinite(in->embd[i]))
            return ifl_err(why, IFL_EINVAL, "embd: value %zu of row %zu is not finite", i,
                           i / (size_t)ex->model->hp.n_embd);
    struct ximg *m = grow(q, 1);
    if (!m || !(m->own = malloc(sizeof(float) * k)))
        return ifl_err(why, IFL_ENOMEM, "out of memory");
    memcpy(m->own, in->embd, sizeof(float) * k);
    m->pos = pos;
    m->n = n;
    hash_start(ex, m->h, (uint64_t)n ^ 0x2);
    hash_bytes(m->h, m->own, sizeof(float) * k);
    m->rows = m->own;
    return 0;
}

/* The rows a PNG/JPEG image takes with this executor's encoder, from its
 * header. */
static int data_rows(struct ifl_executor *ex, const void *data, int64_t size, int32_t *rows,
                     char *why)
{
    int32_t w, h;
    if (size <= 0)
        return ifl_err(why, IFL_EINVAL, "empty data (%lld bytes)", (long long)size);
    int rc = ifl_image_dims(data, (size_t)size, &w, &h, why);
    if (!rc)
        *rows = ifl_clip_n_tiles(ex->clip, w, h) * ex->clip->hp.n_tok;
    return rc;
}

int ifl_executor_image_rows(ifl_executor *ex, const void *data, int64_t size, int32_t *rows,
                            char *err)
{
    if (!ex || !data || !rows)
        return ifl_err(err, IFL_EINVAL, "images: a NULL argument");
    if (!ex->clip)
        return ifl_err(err, IFL_ENOTFOUND, "images: this executor has no vision encoder (mmproj)");
    char why[IFL_ERR_LEN] = "";
    int rc = data_rows(ex, data, size, rows, why);
    if (rc)
        ifl_err(err, rc, "images: %s", strncmp(why, "image: ", 7) ? why : why + 7);
    return rc;
}

int ifl_img_intake(struct ifl_executor *ex, const struct ifl_request *req, struct xreq *q,
                   char *err)
{
    int32_t n = req->n_images, N = req->n_input;
    if (n == 0)
        return 0;
    if (n < 0 || n > IFL_MAX_IMAGES_PER_REQUEST || !req->images)
        return ifl_err(err, IFL_EINVAL, "images: %d images (0..%d, with the array)", n,
                       IFL_MAX_IMAGES_PER_REQUEST);
    if (ex->tp)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "images: not available with tensor parallelism (--tp) in this version");
    q->img = NULL;
    q->n_img = 0;
    q->img_ext = calloc((size_t)N, sizeof(*q->img_ext));
    int rc = !q->img_ext ? ifl_err(err, IFL_ENOMEM, "images: out of memory") : 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        const struct ifl_image_input *in = &req->images[i];
        char why[IFL_ERR_LEN] = "";
        int32_t rows = 0;
        if (!in->data == !in->embd) {
            rc = ifl_err(err, IFL_EINVAL,
                         "images[%d]: give either data (a PNG or JPEG file) or embd (rows), %s", i,
                         in->data ? "not both" : "there is neither");
            break;
        }
        if (in->data) {
            if (!ex->clip) {
                rc = ifl_err(err, IFL_EINVAL,
                             "images[%d]: this executor has no vision encoder (load one with an "
                             "mmproj file: mmproj_path, --mmproj)",
                             i);
                break;
            }
            if ((rc = data_rows(ex, in->data, in->size, &rows, why))) {
                ifl_err(err, rc, "images[%d]: %s", i, strncmp(why, "image: ", 7) ? why : why + 7);
                break;
            }
            if (in->n_rows != 0 && in->n_rows != rows) {
                rc = ifl_err(err, IFL_EINVAL,
                             "images[%d]: n_rows %d, but the vision encoder gives this image %d "
                             "rows",
                             i, in->n_rows, rows);
                break;
            }
        } else {
            rows = in->n_rows;
            if (rows < 1 || rows > N) {
                rc = ifl_err(err, IFL_EINVAL, "images[%d]: n_rows %d (1..%d, the prompt's tokens)",
                             i, rows, N);
                break;
            }
        }
        if (in->pos < 0 || (int64_t)in->pos + rows > N) {
            rc = ifl_err(err, IFL_EINVAL,
                         "images[%d]: its %d rows at position %d run past the prompt's %d tokens "
                         "(an image stands for %d placeholder tokens of input_ids)",
                         i, rows, in->pos, N, rows);
            break;
        }
        for (int32_t p = in->pos; p < in->pos + rows; p++)
            if (q->img_ext[p]) {
                rc = ifl_err(err, IFL_EINVAL, "images[%d]: overlaps another image at position %d",
                             i, p);
                break;
            }
        if (rc)
            break;
        int32_t first = q->n_img;
        rc = in->data ? take_data(ex, in, in->pos, q, why)
                      : take_rows(ex, in, in->pos, rows, q, why);
        if (rc) { /* the image module's sentences start "image: " */
            ifl_err(err, rc, "images[%d]: %s", i, strncmp(why, "image: ", 7) ? why : why + 7);
            break;
        }
        int32_t got = 0;
        for (int32_t u = first; u < q->n_img; u++)
            got += q->img[u].n;
        if (got != rows) { /* the header said one size, the pixels another */
            rc = ifl_err(err, IFL_EINVAL,
                         "images[%d]: its header and its pixels disagree on "
                         "its size",
                         i);
            break;
        }
        for (int32_t u = first; u < q->n_img; u++)
            for (int32_t k = 0; k < q->img[u].n; k++)
                q->img_ext[q->img[u].pos + k] = row_key(q->img[u].h, k);
    }
    if (rc)
        ifl_img_free_request(q);
    return rc;
}

/* ---- the engine's cache ---- */

static void entry_unlink(struct ifl_img_engine *ie, struct ifl_img_entry *x)
{
    if (x->prev)
        x->prev->next = x->next;
    else
        ie->head = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->prev = x->next = NULL;
}

static void entry_push_front(struct ifl_img_engine *ie, struct ifl_img_entry *x)
{
    x->prev = NULL;
    x->next = ie->head;
    if (ie->head)
        ie->head->prev = x;
    ie->head = x;
}

/* Drops unreferenced entries from the least recently used end while they
 * are over the bounds. */
static void cache_trim(struct ifl_img_engine *ie)
{
    struct ifl_img_entry *x = ie->head;
    while (x && x->next)
        x = x->next;
    while (x && (ie->idle_bytes > ie->cap || ie->n_idle > IMG_CACHE_MAX_IDLE)) {
        struct ifl_img_entry *p = x->prev;
        if (x->refs == 0) {
            entry_unlink(ie, x);
            ie->idle_bytes -= x->bytes;
            ie->n_idle--;
            free(x->rows);
            free(x);
        }
        x = p;
    }
}

static struct ifl_img_entry *cache_find(struct ifl_img_engine *ie, const uint64_t h[2])
{
    for (struct ifl_img_entry *x = ie->head; x; x = x->next)
        if (x->h[0] == h[0] && x->h[1] == h[1])
            return x;
    return NULL;
}

static void entry_pin(struct ifl_img_engine *ie, struct ifl_img_entry *x)
{
    if (x->refs++ == 0) {
        ie->idle_bytes -= x->bytes;
        ie->n_idle--;
    }
    entry_unlink(ie, x);
    entry_push_front(ie, x);
}

void ifl_img_release(struct ifl_executor *ex, struct xreq *q)
{
    struct ifl_img_engine *ie = ex->eng ? ex->eng->img : NULL;
    for (int32_t i = 0; i < q->n_img; i++) {
        struct ximg *m = &q->img[i];
        if (!m->ent)
            continue;
        if (ie && --m->ent->refs == 0) {
            ie->idle_bytes += m->ent->bytes;
            ie->n_idle++;
        }
        m->ent = NULL;
        m->rows = NULL;
    }
    if (ie)
        cache_trim(ie);
}

/* ---- the engine ---- */

int ifl_img_engine_init(struct ifl_executor *ex, char *err)
{
    struct engine *e = ex->eng;
    if (!(e->b_embd = calloc((size_t)e->max_rows, sizeof(*e->b_embd))))
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory");
    if (!ex->clip)
        return 0;
    struct ifl_img_engine *ie = calloc(1, sizeof(*ie));
    if (!ie)
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory");
    e->img = ie;
    const struct ifl_clip_hparams *hp = &ex->clip->hp;
    int32_t k = ex->cfg.vision_images_per_step;
    ie->per_step = k;
    ie->cap = ex->cfg.image_cache_bytes < 0 ? 0 : ex->cfg.image_cache_bytes;
    size_t S = (size_t)hp->image_size;
    ie->px = malloc(sizeof(float) * 3 * S * S * (size_t)k);
    ie->out = malloc(sizeof(float) * (size_t)hp->n_tok * (size_t)hp->n_out * (size_t)k);
    ie->batch = calloc((size_t)k, sizeof(*ie->batch));
    ie->bq = calloc((size_t)k, sizeof(*ie->bq));
    ie->order = calloc((size_t)e->n_slots, sizeof(*ie->order));
    ie->from = calloc((size_t)e->n_slots, sizeof(*ie->from));
    if (!ie->px || !ie->out || !ie->batch || !ie->bq || !ie->order || !ie->from)
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory for %d images a step", (int)k);
    /* on the forward pass's threads: the engine runs one or the other */
    return ifl_clip_ctx_create(&ie->ctx, ex->clip, k, ifl_fwd_pool(e->fwd), 0, err);
}

void ifl_img_engine_fini(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    free(e->b_embd);
    e->b_embd = NULL;
    struct ifl_img_engine *ie = e->img;
    if (!ie)
        return;
    for (struct ifl_img_entry *x = ie->head, *n; x; x = n) {
        n = x->next;
        free(x->rows);
        free(x);
    }
    ifl_clip_ctx_free(ie->ctx);
    free(ie->px);
    free(ie->out);
    free(ie->batch);
    free(ie->bq);
    free(ie->order);
    free(ie->from);
    free(ie);
    e->img = NULL;
}

void ifl_img_stats(const struct ifl_executor *ex, int64_t *encoded, int64_t *hits, double *seconds)
{
    const struct ifl_img_engine *ie = ex->eng ? ex->eng->img : NULL;
    *encoded = ie ? ie->encoded : 0;
    *hits = ie ? ie->hits : 0;
    *seconds = ie ? ie->seconds : 0;
}

/* The scheduler's order (priority, then arrival), as schedule.c keeps it. */
static int before(const struct xreq *a, const struct xreq *b)
{
    if (a->r.priority != b->r.priority)
        return a->r.priority > b->r.priority;
    return a->seq_no < b->seq_no;
}

/* The running requests with images still to encode, in scheduling order,
 * each with the least position its sequences have computed. */
static int32_t collect(struct engine *e, struct ifl_img_engine *ie)
{
    int32_t n = 0;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (!s->q || !s->started || s->finish || !s->q->n_img)
            continue;
        int32_t k = 0;
        while (k < n && ie->order[k] != s->q)
            k++;
        if (k == n) {
            ie->order[n] = s->q;
            ie->from[n++] = s->kv.n_pos;
        } else if (s->kv.n_pos < ie->from[k]) {
            ie->from[k] = s->kv.n_pos;
        }
    }
    for (int32_t i = 1; i < n; i++) { /* insertion sort: n is small */
        struct xreq *v = ie->order[i];
        int32_t f = ie->from[i], j = i;
        while (j > 0 && before(v, ie->order[j - 1])) {
            ie->order[j] = ie->order[j - 1];
            ie->from[j] = ie->from[j - 1];
            j--;
        }
        ie->order[j] = v;
        ie->from[j] = f;
    }
    return n;
}

int ifl_img_step(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    struct ifl_img_engine *ie = e->img;
    if (!ie)
        return 0;
    int32_t nq = collect(e, ie), nb = 0;
    for (int32_t k = 0; k < nq; k++) {
        struct xreq *q = ie->order[k];
        for (int32_t i = 0; i < q->n_img; i++) {
            struct ximg *m = &q->img[i];
            /* ready, or wholly inside what the prefix cache gave back */
            if (m->rows || m->pos + m->n <= ie->from[k])
                continue;
            struct ifl_img_entry *x = cache_find(ie, m->h);
            if (x) {
                entry_pin(ie, x);
                m->ent = x;
                m->rows = x->rows;
                free(m->px);
                m->px = NULL;
                ie->hits++;
                continue;
            }
            int dup = 0; /* the same image twice in one pass: the second hits next step */
            for (int32_t b = 0; b < nb && !dup; b++)
                dup = ie->batch[b]->h[0] == m->h[0] && ie->batch[b]->h[1] == m->h[1];
            if (dup || nb == ie->per_step)
                continue;
            ie->bq[nb] = q;
            ie->batch[nb++] = m;
        }
    }
    if (!nb)
        return 0;
    const struct ifl_clip_hparams *hp = &ex->clip->hp;
    size_t in_n = 3 * (size_t)hp->image_size * (size_t)hp->image_size;
    size_t out_n = (size_t)hp->n_tok * (size_t)hp->n_out;
    for (int32_t b = 0; b < nb; b++)
        memcpy(ie->px + (size_t)b * in_n, ie->batch[b]->px, sizeof(float) * in_n);
    char err[IFL_ERR_LEN] = "";
    double t0 = ifl_now_s();
    int rc = ifl_clip_encode(ie->ctx, ie->px, nb, ie->out, err);
    ie->seconds += ifl_now_s() - t0;
    for (int32_t b = 0; b < nb; b++) {
        struct ximg *m = ie->batch[b];
        struct ifl_img_entry *x = rc ? NULL : calloc(1, sizeof(*x));
        float *rows = x ? malloc(sizeof(float) * out_n) : NULL;
        if (!rows) { /* the request fails below, with this status */
            free(x);
            ie->bq[b]->status = rc ? rc : IFL_ENOMEM;
            continue;
        }
        memcpy(rows, ie->out + (size_t)b * out_n, sizeof(float) * out_n);
        x->h[0] = m->h[0];
        x->h[1] = m->h[1];
        x->rows = rows;
        x->bytes = (int64_t)(sizeof(float) * out_n);
        x->refs = 1;
        entry_push_front(ie, x);
        m->ent = x;
        m->rows = rows;
        free(m->px);
        m->px = NULL;
        ie->encoded++;
    }
    int failed = 0;
    for (int32_t b = 0; b < nb; b++)
        failed |= ie->bq[b]->status != 0;
    return failed;
}

int32_t ifl_img_ready_until(const struct xreq *q, int32_t from, int32_t to)
{
    int32_t until = to;
    for (int32_t i = 0; i < q->n_img; i++) {
        const struct ximg *m = &q->img[i];
        if (!m->rows && m->pos < until && m->pos + m->n > from)
            until = m->pos > from ? m->pos : from;
    }
    return until;
}

int ifl_img_batch_rows(struct ifl_executor *ex, int32_t rows, const float **embd)
{
    struct engine *e = ex->eng;
    const size_t E = (size_t)ex->model->hp.n_embd;
    int any = 0;
    for (int32_t r = 0; r < rows; r++) {
        const struct xreq *q = e->seqs[e->b_seq[r]].q;
        int32_t p = e->b_kvpos[r];
        embd[r] = NULL;
        if (!q || !q->img_ext || p >= q->r.n_input || !q->img_ext[p])
            continue;
        for (int32_t i = 0; i < q->n_img; i++) {
            const struct ximg *m = &q->img[i];
            if (p >= m->pos && p < m->pos + m->n) {
                IFL_ASSERT(m->rows); /* the batch builder waits for it */
                embd[r] = m->rows + (size_t)(p - m->pos) * E;
                any = 1;
                break;
            }
        }
    }
    return any;
}

/* ---- prompts with markers ---- */

/* Tokenizes text[0, len) onto ids at *n (counting past cap). */
static int tok_piece(struct ifl_executor *ex, const char *text, size_t len, int add_special,
                     int parse_special, int32_t *ids, int64_t cap, int64_t *n)
{
    int64_t got = 0, room = *n < cap ? cap - *n : 0;
    int rc = ifl_tokenize(ex->vocab, text, len, add_special, parse_special, room ? ids + *n : NULL,
                          room, &got);
    if (rc && rc != IFL_EFULL)
        return rc;
    *n += got;
    return 0;
}

static const char *find_marker(const char *p, const char *end, const char *m, size_t ml)
{
    for (; p + ml <= end; p++)
        if (*p == m[0] && !memcmp(p, m, ml))
            return p;
    return NULL;
}

int ifl_executor_tokenize_images(ifl_executor *ex, const char *text, int64_t len,
                                 const char *marker, int32_t add_special, int32_t parse_special,
                                 int32_t n_images, const int32_t *n_rows, int32_t *ids, int64_t cap,
                                 int64_t *n_out, int32_t *pos, char *err)
{
    if (!n_out)
        return IFL_EINVAL;
    *n_out = 0;
    if (!ex || len < 0 || cap < 0 || (len && !text) || (cap && !ids) || n_images < 0 ||
        n_images > IFL_MAX_IMAGES_PER_REQUEST || (n_images && !pos))
        return ifl_err(err, IFL_EINVAL, "tokenize: invalid arguments");
    if (!n_rows && n_images && !ex->clip)
        return ifl_err(err, IFL_ENOTFOUND, "images: this executor has no vision encoder (mmproj)");
    const int vl = ex->clip && ex->clip->hp.proj == IFL_CLIP_PROJ_INTERNVL;
    if (!n_rows && n_images && vl)
        return ifl_err(err, IFL_EINVAL,
                       "images: this vision encoder tiles images, so their rows depend on their "
                       "sizes: give n_rows (ifl_executor_image_rows)");
    if (!marker || !marker[0])
        marker = IFL_IMAGE_MARKER;
    size_t ml = strlen(marker);
    const char *end = text + len;
    int32_t n_mark = 0;
    for (const char *p = text; len && (p = find_marker(p, end, marker, ml)); p += ml)
        n_mark++;
    if (n_mark && n_mark != n_images)
        return ifl_err(err, IFL_EINVAL,
                       "images: the prompt marks %d image places (%s) but %d images are given",
                       n_mark, marker, n_images);
    int32_t ph = ifl_vocab_pad(ex->vocab);
    if (ph < 0 || ph >= ex->n_vocab)
        ph = 0;
    int64_t n = 0;
    int rc = 0;
    const char *p = text;
    for (int32_t k = 0; k < n_images && !rc; k++) {
        if (n_mark) { /* the text up to the marker */
            const char *m = find_marker(p, end, marker, ml);
            rc = tok_piece(ex, p, (size_t)(m - p), add_special && k == 0, parse_special, ids, cap,
                           &n);
            p = m + ml;
        } else if (k == 0 && add_special && ifl_vocab_add_bos(ex->vocab) &&
                   ifl_vocab_bos(ex->vocab) >= 0) {
            if (n < cap)
                ids[n] = ifl_vocab_bos(ex->vocab);
            n++;
        }
        int32_t r = n_rows ? n_rows[k] : ex->clip->hp.n_tok;
        if (r < 1 || n + r > INT32_MAX) {
            rc = ifl_err(err, IFL_EINVAL, "images: image %d: %d rows", k, r);
            break;
        }
        /* InternVL's markers around an image's rows, as llama.cpp's mtmd
         * writes them (special tokens when the vocabulary has them) */
        if (vl && (rc = tok_piece(ex, "<img>", 5, 0, 1, ids, cap, &n)))
            break;
        pos[k] = (int32_t)n;
        for (int32_t i = 0; i < r; i++, n++)
            if (n < cap)
                ids[n] = ph;
        if (vl && (rc = tok_piece(ex, "</img>", 6, 0, 1, ids, cap, &n)))
            break;
    }
    if (!rc) { /* the rest of the text: after a marker, or all of it without one */
        /* (with images, BOS came with the first piece or before them) */
        rc = tok_piece(ex, p, (size_t)(end - p), add_special && n_images == 0, parse_special, ids,
                       cap, &n);
    }
    if (rc)
        return rc == IFL_EINVAL ? rc : ifl_err(err, rc, "tokenize: %s", ifl_strerror(rc));
    *n_out = n;
    return n > cap ? IFL_EFULL : 0;
}
