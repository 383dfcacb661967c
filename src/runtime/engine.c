/*
 * The engine thread's lifecycle and main loop: creating the engine (the KV
 * pool sized from the configuration, the forward pass, the per-slot
 * buffers), one step (admit, build the batch, run the forward pass, choose
 * the tokens), cancels and timeouts, the statistics it publishes, and
 * giving idle KV memory back. engine_internal.h describes the whole.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/sysmem.h"
#include "core/timeutil.h"
#include "runtime/engine_internal.h"

static void publish_stats(struct ifl_executor *ex, double latency_ms, int32_t ctx_reqs,
                          int32_t ctx_rows, int32_t gen_reqs, int32_t gen_rows);
static void apply_cancel(struct ifl_executor *ex, ifl_id id);

static void kv_copy(void *user, int32_t dst, int32_t src, int32_t n)
{
    ifl_kv_store_copy_block(user, dst, src, n);
}

static int32_t blocks_for_n(int64_t n_pos, int32_t bs)
{
    return (int32_t)((n_pos + bs - 1) / bs);
}

static void kv_release(void *user, int32_t first, int32_t n)
{
    ifl_kv_store_release(user, first, n);
}

/* The default pool's size in positions: max_batch_size full contexts (and
 * their copy-on-write blocks) if that fits the memory bound, else as many
 * whole blocks as do, one context at least. Sets e->kv_bound and
 * e->kv_bound_bytes. */
static int64_t default_pool_tokens(struct ifl_executor *ex, struct engine *e, size_t per_pos,
                                   int32_t bs)
{
    const struct ifl_executor_config *c = &ex->cfg;
    int64_t full = (int64_t)c->max_batch_size * ex->n_ctx + (int64_t)(c->max_batch_size - 1) * bs;
    int64_t bound;
    if (c->kv_cache_memory_limit > 0) {
        bound = c->kv_cache_memory_limit;
        e->kv_bound = IFL_KV_BOUND_LIMIT;
    } else {
        struct ifl_sysmem m;
        ifl_sysmem_read(NULL, &m);
        double share = c->kv_cache_memory_share > 0 ? c->kv_cache_memory_share : 0.4;
        int64_t room = m.mem_available;
        e->kv_bound = IFL_KV_BOUND_MEM_AVAILABLE;
        if (m.cg_limit >= 0 && (room < 0 || m.cg_limit - m.cg_usage < room)) {
            room = m.cg_limit > m.cg_usage ? m.cg_limit - m.cg_usage : 0;
            e->kv_bound = IFL_KV_BOUND_CGROUP;
        }
        if (room < 0) { /* nothing known: the full pool, as before */
            e->kv_bound = IFL_KV_BOUND_CONTEXTS;
            return full;
        }
        bound = (int64_t)((double)room * share);
    }
    e->kv_bound_bytes = bound;
    if ((double)full * (double)per_pos <= (double)bound) {
        e->kv_bound = IFL_KV_BOUND_CONTEXTS;
        return full;
    }
    int64_t tokens = bound / (int64_t)per_pos / bs * bs;
    int64_t one = (int64_t)blocks_for_n(ex->n_ctx, bs) * bs;
    return tokens > one ? tokens : one;
}

int ifl_engine_create(struct ifl_executor *ex, char *err)
{
    const struct ifl_executor_config *c = &ex->cfg;
    const struct ifl_hparams *hp = &ex->model->hp;
    struct engine *e = calloc(1, sizeof(*e));
    if (!e)
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory");
    ex->eng = e;
    int32_t bs = c->kv_block_size;
    int64_t tokens = c->kv_cache_tokens;
    enum ifl_type st = c->kv_type == IFL_KV_F32    ? IFL_TYPE_F32
                       : c->kv_type == IFL_KV_Q8_0 ? IFL_TYPE_Q8_0
                                                   : IFL_TYPE_F16;
    size_t per_pos =
        (size_t)hp->n_layer * (ifl_type_row_size(st, (int64_t)hp->n_head_kv * hp->head_dim) +
                               ifl_type_row_size(st, (int64_t)hp->n_head_kv * hp->head_dim_v));
    /* a byte budget is whole blocks within it (too small a budget is the
     * error below, not the default size) */
    e->kv_bound = IFL_KV_BOUND_TOKENS;
    if (tokens == 0 && c->kv_cache_bytes > 0) {
        tokens = c->kv_cache_bytes / (int64_t)per_pos / bs * bs;
        e->kv_bound = IFL_KV_BOUND_BYTES;
    } else if (tokens == 0) { /* and the copy-on-write blocks that a request of
                                 max_batch_size samples at full context reserves */
        tokens = default_pool_tokens(ex, e, per_pos, bs);
    }
    e->kv_block_bytes = (int64_t)per_pos * bs;
    e->release_us =
        c->kv_release_ms < 0 ? -1 : (c->kv_release_ms ? c->kv_release_ms : 5000) * (int64_t)1000;
    int64_t n_blocks = (tokens + bs - 1) / bs;
    ex->kv_cache_tokens = n_blocks * bs;
    if (n_blocks < blocks_for_n(ex->n_ctx, bs))
        return ifl_err(err, IFL_EINVAL,
                       "config: a KV cache of %lld positions cannot hold one full context of %d",
                       (long long)tokens, ex->n_ctx);
    if (n_blocks > (1 << 30))
        return ifl_err(err, IFL_EINVAL, "config: KV cache of %lld positions is too large",
                       (long long)tokens);
    int rc = ifl_kv_store_create(&e->store, hp, st, (int32_t)n_blocks, bs, err);
    if (rc)
        return rc;
    if (c->kv_prefault) {
        if ((rc = ifl_kv_store_prefault(e->store, err)))
            return rc;
        e->release_us = -1;
    }
    struct ifl_kvc_config kc = {.n_blocks = (int32_t)n_blocks,
                                .block_size = bs,
                                .enable_prefix_caching = c->enable_prefix_caching,
                                .copy = kv_copy,
                                .copy_user = e->store,
                                .release = kv_release,
                                .release_user = e->store};
    if (ifl_kvc_create(&e->kvc, &kc))
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory for the KV block manager");
    /* IFL_KV_WINDOW_FREE=0 keeps every block (for comparing: outputs are the same) */
    const char *wf = getenv("IFL_KV_WINDOW_FREE");
    e->kv_window = ifl_hp_all_swa(hp) && !(wf && !strcmp(wf, "0"));
    e->max_rows = c->max_num_tokens;
    ex->kv_span =
        e->kv_window ? (int64_t)hp->n_swa + (bs > 256 ? bs : 256) + e->max_rows + 2 * bs : 0;
    struct ifl_fwd_config fc = {.max_rows = e->max_rows,
                                .max_ctx = ex->n_ctx,
                                .n_threads = c->n_threads,
                                .comm = ex->tp ? c->tp_comm : NULL,
                                .comm_timeout_s = c->tp_timeout_s};
    if ((rc = ifl_fwd_create(&e->fwd, ex->model, e->store, &fc, err)))
        return rc;
    if (ex->tp) { /* the workers repeat the block manager's copies and releases */
        e->store->mirror = ifl_tp_kv_mirror;
        e->store->mirror_user = ex->tp;
    }
    e->n_slots = c->max_batch_size;
    ifl_xguide_engine_init(&e->ge, ex->vocab, ex->n_vocab);
    e->logit_cap = e->n_slots > 64 ? e->n_slots : 64;
    if (e->logit_cap > e->max_rows)
        e->logit_cap = e->max_rows > e->n_slots ? e->max_rows : e->n_slots;
    size_t R = (size_t)e->max_rows;
    e->seqs = calloc((size_t)e->n_slots, sizeof(*e->seqs));
    e->b_tok = malloc(sizeof(int32_t) * R);
    e->b_pos = malloc(sizeof(int32_t) * R);
    e->b_seq = malloc(sizeof(int32_t) * R);
    e->b_want = malloc(R);
    e->b_kvpos = malloc(sizeof(int32_t) * R);
    e->b_pre = malloc(sizeof(int32_t) * R);
    e->b_off = malloc(sizeof(int32_t) * R);
    e->b_path = malloc(sizeof(int32_t) * (size_t)c->max_batch_size * TREE_PATH_MAX);
    e->row_slot = malloc(sizeof(int32_t) * R);
    e->tables = calloc((size_t)e->n_slots, sizeof(*e->tables));
    e->n_blocks = calloc((size_t)e->n_slots, sizeof(int32_t));
    e->logits = malloc(sizeof(float) * (size_t)e->logit_cap * (size_t)ex->n_vocab);
    e->scratch = malloc(sizeof(float) * (size_t)ex->n_vocab);
    e->n_embd = hp->n_embd;
    e->hidden = malloc(sizeof(float) * (size_t)e->logit_cap * (size_t)hp->n_embd);
    e->row_flag = malloc(R);
    e->row_pos = malloc(sizeof(int32_t) * R);
    e->piece = malloc(IFL_DETOK_ROOM(ex->vocab));
    /* a feed of one piece plus the longest hold: 64 stop strings of 256 bytes at most */
    e->stopbuf = malloc(IFL_DETOK_ROOM(ex->vocab) + 64 * 256);
    e->eog_ids = malloc(sizeof(int32_t) * (size_t)ex->n_vocab);
    e->pick_rows = malloc(sizeof(int32_t) * (size_t)e->logit_cap);
    e->pick_tok = malloc(sizeof(int32_t) * (size_t)e->logit_cap);
    e->pick_lp = malloc(sizeof(float) * (size_t)e->logit_cap);
    e->dec_rows = malloc(sizeof(int32_t) * (size_t)e->logit_cap);
    if (e->eog_ids)
        for (int32_t t = 0; t < ex->n_vocab; t++)
            if (ifl_vocab_is_eog(ex->vocab, t))
                e->eog_ids[e->n_eog++] = t;
    if (!e->seqs || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want || !e->b_kvpos || !e->b_pre ||
        !e->b_off || !e->b_path || !e->row_slot || !e->tables || !e->n_blocks || !e->logits ||
        !e->scratch || !e->hidden || !e->row_flag || !e->row_pos || !e->piece || !e->stopbuf ||
        !e->eog_ids || !e->pick_rows || !e->pick_tok || !e->pick_lp || !e->dec_rows)
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory");
    int32_t max_blocks = blocks_for_n(ex->n_ctx, bs) + 1;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        s->tokens = malloc(sizeof(int32_t) * (size_t)ex->n_ctx);
        s->logprobs = malloc(sizeof(float) * (size_t)ex->n_ctx);
        s->tops = malloc(sizeof(*s->tops) * (size_t)ex->n_ctx * IFL_MAX_TOP);
        s->cap_text = 4096;
        s->text = malloc(s->cap_text);
        if (!s->tokens || !s->logprobs || !s->tops || !s->text ||
            ifl_kvc_seq_init(&s->kv, max_blocks) || ifl_sampler_state_init(&s->st, ex->n_vocab))
            return ifl_err(err, IFL_ENOMEM, "engine: out of memory for %d sequences", e->n_slots);
        e->tables[i] = s->kv.blocks;
    }
    if ((rc = ifl_decoding_engine_init(ex, err)) || (rc = ifl_img_engine_init(ex, err)))
        return rc;
    publish_stats(ex, 0, 0, 0, 0, 0); /* the pool's size and use from creation on */
    return 0;
}

void ifl_engine_free(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    if (!e)
        return;
    ifl_decoding_engine_fini(ex);
    for (struct xreq *q = e->waiting, *n; q; q = n) {
        n = q->next;
        ifl_xreq_free(q);
    }
    if (e->seqs) {
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct eseq *s = &e->seqs[i];
            if (e->kvc && s->kv.blocks)
                ifl_kvc_seq_release(e->kvc, &s->kv);
            ifl_sampler_state_deinit(&s->st);
            ifl_stopstr_free(s->stop);
            free(s->tokens);
            free(s->logprobs);
            free(s->tops);
            free(s->text);
            free(s->glog);
            free(s->ghid);
            if (s->g_init)
                ifl_guide_state_deinit(&s->gst);
        }
        /* requests still holding slots (only after a failed start) */
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct xreq *q = e->seqs[i].q;
            if (!q)
                continue;
            for (int32_t j = i; j < e->n_slots; j++)
                if (e->seqs[j].q == q)
                    e->seqs[j].q = NULL;
            ifl_seq_free_outputs(q);
            ifl_xreq_free(q);
        }
    }
    ifl_img_engine_fini(ex); /* before the forward pass, whose threads it runs on */
    free(e->seqs);
    ifl_fwd_free(e->fwd);
    ifl_kvc_free(e->kvc);
    ifl_kv_store_free(e->store);
    free(e->b_tok);
    free(e->l_ad);
    free(e->l_rt);
    free(e->l_scale);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_kvpos);
    free(e->b_pre);
    free(e->b_off);
    free(e->b_path);
    free(e->row_slot);
    free(e->tables);
    free(e->n_blocks);
    free(e->logits);
    free(e->scratch);
    free(e->hidden);
    free(e->row_flag);
    free(e->row_pos);
    free(e->pick_rows);
    free(e->pick_tok);
    free(e->pick_lp);
    free(e->dec_rows);
    free(e->piece);
    free(e->stopbuf);
    free(e->eog_ids);
    ifl_xguide_engine_deinit(&e->ge);
    free(e);
    ex->eng = NULL;
}

int ifl_engine_tp_setup(struct ifl_executor *ex, char *err)
{
    struct engine *e = ex->eng;
    const struct ifl_kv_store *kv = e->store;
    struct ifl_tp_setup su = {.n_blocks = kv->n_blocks,
                              .block_size = kv->block_size,
                              .kv_type = (int32_t)kv->type,
                              .max_rows = e->max_rows,
                              .max_ctx = ex->n_ctx,
                              .n_seqs = e->n_slots,
                              .n_vocab = ex->model->hp.n_vocab,
                              .n_layer = ex->model->hp.n_layer,
                              .weight_bytes = (int64_t)ex->model->weight_bytes};
    int rc = ifl_tp_send_setup(ex->tp, &su, err);
    if (!rc)
        rc = ifl_tp_agree(ex->cfg.tp_comm, 0, ex->cfg.tp_timeout_s > 0 ? ex->cfg.tp_timeout_s : 30,
                          err);
    if (!rc)
        publish_stats(ex, 0, 0, 0, 0, 0);
    return rc;
}

/* A collective failed: the job is over. Every request, running or waiting,
 * ends with IFL_ESTATE; enqueue refuses new ones with the reason. */
static void tp_fail(struct ifl_executor *ex, const char *why)
{
    struct engine *e = ex->eng;
    if (!atomic_load_explicit(&ex->tp_failed, memory_order_relaxed)) {
        snprintf(ex->tp_why, sizeof ex->tp_why,
                 "the tensor parallel job lost a rank (%s); this server cannot go on", why);
        atomic_store_explicit(&ex->tp_failed, 1, memory_order_release);
    }
    pthread_mutex_lock(&ex->in_mu);
    ex->accepting = 0;
    pthread_mutex_unlock(&ex->in_mu);
    while (e->waiting) {
        e->waiting->status = IFL_ESTATE;
        apply_cancel(ex, e->waiting->id);
    }
    for (int32_t i = 0; i < e->n_slots; i++)
        if (e->seqs[i].q) {
            e->seqs[i].q->status = IFL_ESTATE;
            ifl_seq_finish_request(ex, e->seqs[i].q, IFL_FINISH_CANCELLED);
        }
    publish_stats(ex, 0, 0, 0, 0, 0);
}

static void publish_stats(struct ifl_executor *ex, double latency_ms, int32_t ctx_reqs,
                          int32_t ctx_rows, int32_t gen_reqs, int32_t gen_rows)
{
    struct engine *e = ex->eng;
    struct ifl_iteration_stats st = {0};
    struct ifl_kvc_stats k;
    ifl_kvc_get_stats(e->kvc, &k);
    st.iteration = e->iteration;
    st.latency_ms = latency_ms;
    st.timestamp_us = ifl_now_us();
    int32_t paused = 0;
    for (int32_t i = 0; i < e->n_slots; i++)
        paused += e->seqs[i].q && e->seqs[i].paused;
    st.active_requests = e->n_active_req;
    st.queued_requests = e->n_waiting;
    st.completed_requests = e->completed;
    st.paused_requests = paused;
    st.context_requests = ctx_reqs;
    st.context_tokens = ctx_rows;
    st.generation_requests = gen_reqs;
    st.generation_tokens = gen_rows;
    st.kv_blocks_max = k.n_blocks;
    st.kv_blocks_free = k.n_free + k.n_cached;
    st.kv_blocks_used = k.n_used;
    st.kv_blocks_reused = k.reused;
    st.kv_blocks_missed = k.missed;
    st.kv_cache_hit_rate =
        k.reused + k.missed ? (double)k.reused / (double)(k.reused + k.missed) : 0;
    st.kv_bytes_reserved = (int64_t)e->store->bytes;
    st.kv_bytes_used = (int64_t)k.n_used * e->kv_block_bytes;
    st.kv_block_bytes = (int32_t)e->kv_block_bytes;
    st.kv_blocks_peak = k.peak_used;
    st.kv_blocks_cached = k.n_cached;
    st.kv_pool_bound = e->kv_bound;
    st.tp_ranks = ex->tp ? ifl_tp_size(ex->tp) : 1;
    if (ex->tp) {
        struct ifl_comm_stats cs;
        ifl_tp_stats(ex->tp, &cs);
        st.tp_collectives = cs.calls;
        st.tp_comm_seconds = cs.seconds;
        st.tp_failed = atomic_load_explicit(&ex->tp_failed, memory_order_relaxed);
    }
    st.kv_bytes_bound = e->kv_bound_bytes;
    st.kv_blocks_released = k.released;
    st.draft_tokens = e->spec_drafted;
    st.accepted_draft_tokens = e->spec_accepted;
    ifl_img_stats(ex, &st.images_encoded, &st.image_cache_hits, &st.image_encode_seconds);
    pthread_mutex_lock(&ex->out_mu);
    ex->last_stats = st;
    if (ex->hist) {
        /* a step publishes once; a second publication of the same
         * iteration (an idle release) replaces the first */
        struct ifl_iteration_stats *prev =
            ex->n_hist ? &ex->hist[(ex->n_hist - 1) % IFL_STATS_HISTORY] : NULL;
        if (prev && prev->iteration == st.iteration)
            *prev = st;
        else
            ex->hist[ex->n_hist++ % IFL_STATS_HISTORY] = st;
    }
    ex->guide_stats = e->ge.stats;
    ex->stats_seq++;
    if (ex->n_idle_waiters && ex->n_unfinished == 0)
        pthread_cond_broadcast(&ex->idle_cv);
    pthread_mutex_unlock(&ex->out_mu);
    /* per-request stats */
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (!s->q || s->index != 0)
            continue;
        struct ifl_request_stats rs = {.request_id = s->q->id,
                                       .stage = s->q->stage,
                                       .context_prefill_position =
                                           s->kv.n_pos < s->n_prompt ? s->kv.n_pos : s->n_prompt,
                                       .n_generated = s->n_gen,
                                       .paused = s->paused};
        ifl_exec_update_stats(ex, s->q->id, &rs);
    }
}

static void apply_cancel(struct ifl_executor *ex, ifl_id id)
{
    struct engine *e = ex->eng;
    for (struct xreq **pp = &e->waiting; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct xreq *q = *pp;
            *pp = q->next;
            e->n_waiting--;
            pthread_mutex_lock(&ex->in_mu);
            ex->n_queued--;
            pthread_mutex_unlock(&ex->in_mu);
            ifl_emit_unstarted(ex, q, IFL_FINISH_CANCELLED);
            e->completed++;
            ifl_xreq_free(q);
            return;
        }
    for (int32_t i = 0; i < e->n_slots; i++)
        if (e->seqs[i].q && e->seqs[i].q->id == id) {
            ifl_seq_finish_request(ex, e->seqs[i].q, IFL_FINISH_CANCELLED);
            return;
        }
}

static void expire(struct ifl_executor *ex, int64_t now)
{
    struct engine *e = ex->eng;
    for (struct xreq **pp = &e->waiting; *pp;) {
        struct xreq *q = *pp;
        if (q->deadline_us && now >= q->deadline_us) {
            *pp = q->next;
            e->n_waiting--;
            pthread_mutex_lock(&ex->in_mu);
            ex->n_queued--;
            pthread_mutex_unlock(&ex->in_mu);
            ifl_emit_unstarted(ex, q, IFL_FINISH_TIMED_OUT);
            e->completed++;
            ifl_xreq_free(q);
        } else {
            pp = &q->next;
        }
    }
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct xreq *q = e->seqs[i].q;
        if (q && q->deadline_us && now >= q->deadline_us)
            ifl_seq_finish_request(ex, q, IFL_FINISH_TIMED_OUT);
    }
}

/* The step's adapters (model/forward.h): every adapter some row's request
 * holds, in order of id, so that each row adds its adapters in the order
 * of their ids whatever else shares the step; and each row's scales.
 * IFL_ENOMEM when the arrays cannot grow (a step with more adapters than
 * any before). */
static int step_adapters(struct engine *e, int32_t rows, struct ifl_batch *b)
{
    int32_t n = 0;
    for (int32_t r = 0; r < rows; r++) {
        const struct xreq *q = e->seqs[e->b_seq[r]].q;
        if (!q || !q->lora.n || (r > 0 && e->seqs[e->b_seq[r - 1]].q == q))
            continue;
        for (int32_t k = 0; k < q->lora.n; k++) {
            struct xlora *a = q->lora.a[k];
            int32_t i = 0;
            while (i < n && e->l_ad[i]->id < a->id)
                i++;
            if (i < n && e->l_ad[i] == a)
                continue;
            if (n == e->l_cap) {
                int32_t cap = e->l_cap ? 2 * e->l_cap : 8;
                struct xlora **ad = realloc(e->l_ad, sizeof(*ad) * (size_t)cap);
                if (ad)
                    e->l_ad = ad;
                const struct ifl_lora_rt **rt = realloc(e->l_rt, sizeof(*rt) * (size_t)cap);
                if (rt)
                    e->l_rt = rt;
                float *sc = realloc(e->l_scale, sizeof(float) * (size_t)cap * (size_t)e->max_rows);
                if (sc)
                    e->l_scale = sc;
                if (!ad || !rt || !sc)
                    return IFL_ENOMEM;
                e->l_cap = cap;
            }
            memmove(e->l_ad + i + 1, e->l_ad + i, sizeof(*e->l_ad) * (size_t)(n - i));
            e->l_ad[i] = a;
            n++;
        }
    }
    if (!n)
        return 0;
    memset(e->l_scale, 0, sizeof(float) * (size_t)rows * (size_t)n);
    for (int32_t r = 0; r < rows; r++) {
        const struct xreq *q = e->seqs[e->b_seq[r]].q;
        for (int32_t k = 0, i = 0; q && k < q->lora.n; k++) {
            while (e->l_ad[i] != q->lora.a[k]) /* both by id */
                i++;
            e->l_scale[(size_t)r * (size_t)n + (size_t)i] = q->lora.scale[k];
        }
    }
    for (int32_t i = 0; i < n; i++)
        e->l_rt[i] = e->l_ad[i]->rt;
    b->n_lora = n;
    b->lora = e->l_rt;
    b->lora_scale = e->l_scale;
    return 0;
}

static void step(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    double t0 = ifl_now_s();
    ifl_seq_drop_behind_window(ex); /* before admission: what it gives back serves there */
    ifl_sched_admit(ex);
    if (ifl_img_step(ex)) /* the encoder's share of the step (images.h) */
        for (int32_t i = 0; i < e->n_slots; i++)
            if (e->seqs[i].q && e->seqs[i].q->status) /* its final response says why */
                ifl_seq_finish_request(ex, e->seqs[i].q, IFL_FINISH_CANCELLED);
    int32_t nlog, ctx_rows, ctx_reqs, gen_rows;
    int32_t rows = ifl_sched_build_batch(ex, &nlog, &ctx_rows, &ctx_reqs, &gen_rows);
    if (rows == 0) {
        publish_stats(ex, 0, 0, 0, 0, 0);
        return;
    }
    e->iteration++;
    struct ifl_batch b = {.n_rows = rows,
                          .tokens = e->b_tok,
                          .pos = e->b_pos,
                          .seq = e->b_seq,
                          .logits = e->b_want,
                          .n_seqs = e->n_slots,
                          .block_tables = e->tables,
                          .n_blocks = e->n_blocks,
                          .hidden = e->want_hidden ? e->hidden : NULL};
    if (e->tree_rows) { /* some sequence verifies a draft tree (decoding.h) */
        b.kv_pos = e->b_kvpos;
        b.att_prefix = e->b_pre;
        b.tree_off = e->b_off;
        b.tree_path = e->b_path;
        b.n_tree_path = e->n_path;
    }
    if (ifl_img_batch_rows(ex, rows, e->b_embd))
        b.embd = e->b_embd;
    if (e->n_extract) {
        /* the configured strategy's sequences have their states captured */
        int any = 0;
        for (int32_t r = 0; r < rows; r++) {
            const struct xreq *q = e->seqs[e->b_seq[r]].q;
            e->extract_rows[r] = q && q->dec == e->spec;
            any |= e->extract_rows[r];
        }
        if (any) {
            b.n_extract = e->n_extract;
            b.extract_layers = e->extract_layers;
            b.extract_rows = e->extract_rows;
            b.extract_out = e->extract_out;
        }
    }
    char err[IFL_ERR_LEN] = "";
    int rc = step_adapters(e, rows, &b);
    if (!rc && ex->tp) /* the workers run the same step on their shards */
        rc = ifl_tp_send_step(ex->tp, &b, err);
    if (!rc)
        rc = ifl_forward(e->fwd, &b, e->logits, err);
    if (rc && ex->tp && rc != IFL_EINVAL && rc != IFL_ENOMEM) {
        tp_fail(ex, err);
        return;
    }
    if (rc) {
        /* the batch is built by the engine: this is a bug, not bad input;
         * fail the requests involved rather than spin on them */
        for (int32_t r = 0; r < rows; r++) {
            struct eseq *s = &e->seqs[e->b_seq[r]];
            if (s->q) {
                if (rc == IFL_ENOMEM) /* adapters' scratch; its final response says so */
                    s->q->status = IFL_ENOMEM;
                ifl_seq_finish_request(ex, s->q, IFL_FINISH_CANCELLED);
            }
        }
        return;
    }
    /* record what the cache now holds: the sequences' tokens, not their
     * drafts (accepting settles those, decoding.c) */
    for (int32_t r = 0; r < rows;) {
        int32_t slot = e->b_seq[r], k = r;
        while (k < rows && e->b_seq[k] == slot)
            k++;
        struct eseq *s = &e->seqs[slot];
        int32_t end = e->b_pos[k - 1] + 1;
        ifl_kvc_commit(e->kvc, &s->kv, s->tokens, end < s->n_tokens ? end : s->n_tokens);
        r = k;
    }
    ifl_choose_capture_rows(ex, nlog);
    ifl_choose_run_processors(ex, nlog);
    int32_t nv = ex->n_vocab;
    int32_t gen_reqs = 0;
    /* the plain rows' processing and choice, on every thread at once (a
     * 32000-token row takes some 20 us, a 16-row step's rows 0.35 ms on
     * the engine thread alone); their tokens are taken in row order below */
    e->n_pick = 0;
    for (int32_t r = 0; r < nlog; r++)
        if (ifl_choose_plain_pick(e, r))
            e->pick_rows[e->n_pick++] = r;
    if (e->n_pick > 1) {
        ifl_fwd_parallel(e->fwd, ifl_choose_pick_rows, ex);
        for (int32_t k = 0; k < e->n_pick; k++)
            e->row_flag[e->pick_rows[k]] |= ROW_PICKED;
    } else {
        e->n_pick = 0;
    }
    /* each sequence's tokens, in row order: beams into their search, the
     * others through their decoding strategy (decoding.h) */
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        if (!(e->row_flag[r] & ROW_SAMPLE) || !s->q || s->finish)
            continue;
        gen_reqs += s->n_gen > 0;
        if (s->q->beam)
            ifl_beamslot_take_row(ex, s, e->logits + (size_t)r * nv);
        else
            ifl_decoding_accept(ex, s, r, nlog);
    }
    /* beam searches whose live beams all have their rows take a step */
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        if ((e->row_flag[r] & ROW_SAMPLE) && s->q && s->q->beam)
            ifl_beamslot_advance(ex, s->q);
    }
    ifl_decoding_observe(ex, rows);
    publish_stats(ex, (ifl_now_s() - t0) * 1e3, ctx_reqs, ctx_rows, gen_reqs, gen_rows);
}

int64_t ifl_engine_kv_resident(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    return e && e->store ? ifl_kv_store_resident(e->store, ifl_kvc_touched_end(e->kvc)) : -1;
}

/* Gives back the memory of blocks that have been free for release_us (the
 * engine is idle: nothing waits on it) and publishes the figures if any
 * went. Returns the clock time when more will be due, INT64_MAX if none. */
static int64_t release_idle_blocks(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    if (e->release_us < 0)
        return INT64_MAX;
    ifl_kvc_set_clock(e->kvc, ifl_now_us());
    if (ifl_kvc_release_idle(e->kvc, e->release_us) > 0)
        publish_stats(ex, 0, 0, 0, 0, 0);
    int64_t own = ifl_kvc_next_release(e->kvc, e->release_us), spec = ifl_decoding_idle(ex);
    return own < spec ? own : spec;
}

/* Between steps under load the engine is never idle, so blocks freed
 * after a burst would stay resident: at most once a second, and only when
 * at least a quarter of the pool (and 8 MiB) is free but resident, the
 * idle release runs here too (a scan of the block states and a system
 * call per free run and array: well under a step). */
static void busy_release(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    int64_t now = ifl_now_us();
    if (e->release_us < 0 || now < e->busy_release_at)
        return;
    e->busy_release_at = now + 1000000;
    struct ifl_kvc_stats k;
    ifl_kvc_get_stats(e->kvc, &k);
    int64_t touched_free = (int64_t)(k.n_touched - k.n_used - k.n_cached);
    if (touched_free * 4 < k.n_blocks || touched_free * e->kv_block_bytes < ((int64_t)8 << 20))
        return;
    ifl_kvc_release_idle(e->kvc, e->release_us); /* the step's stats follow it */
}

void *ifl_engine_main(void *arg)
{
    struct ifl_executor *ex = arg;
    struct engine *e = ex->eng;
    ifl_id cancels[256];
    for (;;) {
        pthread_mutex_lock(&ex->in_mu);
        while (!ex->in_head && !ex->n_cancels && !ex->stop && !e->waiting && !e->n_active_req) {
            /* idle: blocks free long enough give their memory back; wake
             * up when the next ones will have been */
            pthread_mutex_unlock(&ex->in_mu);
            int64_t wake = release_idle_blocks(ex);
            if (ex->tp && !atomic_load_explicit(&ex->tp_failed, memory_order_relaxed)) {
                /* a keep-alive each idle second: the workers' wait for the
                 * next step is bounded, and a dead rank is noticed */
                char err[IFL_ERR_LEN] = "";
                if (ifl_tp_idle(ex->tp, err))
                    tp_fail(ex, err);
                int64_t next = ifl_now_us() + 250000;
                wake = wake < next ? wake : next;
            }
            pthread_mutex_lock(&ex->in_mu);
            if (ex->in_head || ex->n_cancels || ex->stop)
                break;
            if (wake == INT64_MAX) {
                pthread_cond_wait(&ex->in_cv, &ex->in_mu);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                int64_t ahead = wake - ifl_now_us();
                int64_t ns = (int64_t)ts.tv_nsec + (ahead > 0 ? ahead : 0) * 1000 + 1000000;
                ts.tv_sec += (time_t)(ns / 1000000000);
                ts.tv_nsec = (long)(ns % 1000000000);
                pthread_cond_timedwait(&ex->in_cv, &ex->in_mu, &ts);
            }
        }
        struct xreq *in = ex->in_head;
        ex->in_head = ex->in_tail = NULL;
        int32_t nc = ex->n_cancels < 256 ? ex->n_cancels : 256;
        if (nc) {
            memcpy(cancels, ex->cancels, sizeof(ifl_id) * (size_t)nc);
            memmove(ex->cancels, ex->cancels + nc, sizeof(ifl_id) * (size_t)(ex->n_cancels - nc));
            ex->n_cancels -= nc;
        }
        int stop = ex->stop, cancel_all = ex->cancel_all;
        pthread_mutex_unlock(&ex->in_mu);
        while (in) {
            struct xreq *n = in->next;
            ifl_sched_wait(e, in);
            in = n;
        }
        for (int32_t i = 0; i < nc; i++)
            apply_cancel(ex, cancels[i]);
        if (stop && cancel_all) {
            while (e->waiting)
                apply_cancel(ex, e->waiting->id);
            for (int32_t i = 0; i < e->n_slots; i++)
                if (e->seqs[i].q)
                    ifl_seq_finish_request(ex, e->seqs[i].q, IFL_FINISH_CANCELLED);
        }
        if (stop && !e->waiting && !e->n_active_req)
            break;
        int64_t now = ifl_now_us();
        ifl_kvc_set_clock(e->kvc, now);
        expire(ex, now);
        /* before the step, whose stats then show what went back (after
         * it, a release the engine then idles on was never published) */
        busy_release(ex);
        step(ex);
    }
    return NULL;
}
