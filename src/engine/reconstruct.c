/*
 * Reconstruction passes for presses that score the context by how the model
 * repeats it (KVzip; docs/design.md "Reconstruction passes", docs/presses.md
 * E.3), as kvpress 0.5.5's KVzipPress runs them: the context after the chat
 * template's opening, tokens[begin, n), is cut into chunks of chunk_size;
 * pass i feeds the press's instruction (the first one, or the next one
 * followed by the previous chunk's last `overlap` tokens), the chat
 * template's generation prompt (a newline without a template) and chunk i,
 * at the positions after the context. Each pass's rows are appended to the
 * cache like any prefill's and removed once the pass is done, so every pass
 * sees the context and itself only, and the session ends as it began. The
 * press gets each full layer's queries of the pass, with the keys of the
 * sinks (the first min(n_sink, chunk start) rows), of the chunk and of the
 * pass, and keeps a score per context row; rows no pass repeats score 0.
 *
 * Cost: every pass is a prefill of its chunk and instruction, so the context
 * is read about twice (docs/presses.md E.3 gives the measurement). Memory:
 * the whole unpressed cache of every layer plus one pass, as kvpress.
 */
#include "engine/reconstruct.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/forward.h"
#include "engine/recon_prompts.h"


typedef struct {
    int32_t *ids;
    int n, cap;
} token_list;

static int add_tokens(token_list *t, const int32_t *ids, int n, pkv_error *err) {
    if (t->n + n > t->cap) {
        int cap = (t->n + n) * 2;
        int32_t *p = realloc(t->ids, (size_t)cap * sizeof *p);
        if (!p) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building a reconstruction pass");
        t->ids = p;
        t->cap = cap;
    }
    memcpy(t->ids + t->n, ids, (size_t)n * sizeof *ids);
    t->n += n;
    return 0;
}

int64_t pkv_recon_pass_rows(const pkv_press_cfg *press, int n) {
    const pkv_press_recon_ops *r = press->ops->recon;
    int chunk = r->chunk_size(press->params);
    /* up to three ids a byte (byte fallback), and a generation prompt of a few dozen */
    return (int64_t)(chunk < n ? chunk : n) + 3 * (int64_t)strlen(r->next_prompt) + r->overlap + 64;
}

/* ---------------------------------------------------------------- the passes */

/* Removes a pass: every head keeps its first ctx_rows rows. */
static int drop_pass(pkv_session *s, int ctx_rows, const int32_t *identity, int spare, pkv_error *err) {
    for (int il = 0; il < s->model->hp.n_layer; il++)
        for (int g = 0; g < pkv_kvcache_n_heads(&s->cache, il); g++)
            if (pkv_kvcache_keep_rows(&s->cache, il, g, identity, ctx_rows, spare, err)) return -1;
    return 0;
}

static void free_scores(float ***scores, int n_layer, int n_head_kv) {
    if (!scores) return;
    for (int il = 0; il < n_layer; il++) {
        if (!scores[il]) continue;
        for (int g = 0; g < n_head_kv; g++) free(scores[il][g]);
        free(scores[il]);
    }
    free(scores);
}

/* ---------------------------------------------------------------- the memo */

struct pkv_recon_memo {
    float ***scores; /* NULL: empty */
    int n_layer, n_head_kv;
    uint64_t gen;    /* the source's probe_gen */
    const pkv_press_ops *ops;
    int n_sink, chunk_size, n, begin;
    uint64_t prompts; /* prompts_key of the instructions the passes fed */
};

pkv_recon_memo *pkv_recon_memo_new(void) { return calloc(1, sizeof(pkv_recon_memo)); }

static void memo_clear(pkv_recon_memo *m) {
    free_scores(m->scores, m->n_layer, m->n_head_kv);
    m->scores = NULL;
}

void pkv_recon_memo_free(pkv_recon_memo *memo) {
    if (!memo) return;
    memo_clear(memo);
    free(memo);
}

/* FNV-1a over the instructions' ids and lengths: passes that fed other
 * instructions (another chat template) scored other rows. */
static uint64_t prompts_key(const pkv_recon_prompts *p) {
    uint64_t h = 1469598103934665603ull;
    const int32_t *parts[3] = {p->first, p->next, p->suffix};
    int lens[3] = {p->n_first, p->n_next, p->n_suffix};
    for (int k = 0; k < 3; k++) {
        h = (h ^ (uint64_t)(uint32_t)lens[k]) * 1099511628211ull;
        for (int i = 0; i < lens[k]; i++) h = (h ^ (uint64_t)(uint32_t)parts[k][i]) * 1099511628211ull;
    }
    return h;
}

static bool memo_fits(const pkv_recon_memo *m, uint64_t gen, const pkv_press_cfg *press, int n, int begin,
                      uint64_t prompts) {
    const pkv_press_recon_ops *ro = press->ops->recon;
    return m->scores && m->gen == gen && m->ops == press->ops && m->n_sink == ro->n_sink(press->params) &&
           m->chunk_size == ro->chunk_size(press->params) && m->n == n && m->begin == begin && m->prompts == prompts;
}

/* Hands the scores to the memo (which owns them from now on). */
static void memo_keep(pkv_recon_memo *m, float ***scores, const pkv_hparams *hp, uint64_t gen,
                      const pkv_press_cfg *press, int n, int begin, uint64_t prompts) {
    const pkv_press_recon_ops *ro = press->ops->recon;
    memo_clear(m);
    *m = (pkv_recon_memo){.scores = scores, .n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv, .gen = gen,
                          .ops = press->ops, .n_sink = ro->n_sink(press->params),
                          .chunk_size = ro->chunk_size(press->params), .n = n, .begin = begin, .prompts = prompts};
}

int pkv_recon_check(const pkv_session *s, const pkv_press_cfg *press, bool before_prefill, pkv_error *err) {
    const pkv_model *m = s->model;
    for (int il = 0; il < m->hp.n_layer; il++)
        if (!pkv_layer_is_full(m, il))
            return pkv_fail(err, PKV_ERR_ARG, /* the request's choice: a server answers 400 */
                            "%s: layer %d attends over a sliding window, which the reconstruction passes would push "
                            "the context out of (kvpress refuses Gemma 3 too)",
                            press->ops->name, il);
    if (before_prefill && s->n_pos != 0)
        return pkv_fail(err, PKV_ERR_ARG,
                        "%s presses a session's first prefill only (this one holds %d tokens already)",
                        press->ops->name, s->n_pos);
    return 0;
}

static int check_session(const pkv_session *s, int n, const pkv_press_cfg *press, int begin, pkv_error *err) {
    const pkv_model *m = s->model;
    for (int il = 0; il < m->hp.n_layer; il++) {
        for (int g = 0; g < pkv_kvcache_n_heads(&s->cache, il); g++)
            if (pkv_kvcache_head_rows(&s->cache, il, g) != n)
                return pkv_fail(err, PKV_ERR_UNSUPPORTED,
                                "%s presses a session's first prefill only (layer %d head %d holds %d rows, the "
                                "prefill %d tokens)",
                                press->ops->name, il, g, pkv_kvcache_head_rows(&s->cache, il, g), n);
    }
    if (s->n_pos != n)
        return pkv_fail(err, PKV_ERR_UNSUPPORTED, "%s presses a session's first prefill only", press->ops->name);
    if (begin < 0 || begin > n)
        return pkv_fail(err, PKV_ERR_INTERNAL, "%s: context start %d outside the prefill of %d", press->ops->name,
                        begin, n);
    return 0;
}

static int run_passes(pkv_session *s, const int32_t *tokens, int n, int begin, const pkv_recon_prompts *pp,
                      pkv_recon_state *r, pkv_error *err) {
    const pkv_press_cfg *press = r->press;
    const pkv_press_recon_ops *ro = press->ops->recon;
    int chunk = ro->chunk_size(press->params), n_sink = ro->n_sink(press->params);
    token_list pass = {0};
    int32_t *identity = malloc((size_t)(n > 0 ? n : 1) * sizeof *identity);
    float *logits = malloc((size_t)s->model->hp.n_vocab * sizeof(float));
    int rc = -1;
    if (!identity || !logits) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the reconstruction passes");
        goto done;
    }
    for (int i = 0; i < n; i++) identity[i] = i;
    memcpy(logits, s->logits, (size_t)s->model->hp.n_vocab * sizeof(float));
    for (int start = begin, i = 0; start < n; start += chunk, i++) {
        int len = n - start < chunk ? n - start : chunk;
        pass.n = 0;
        if (i == 0 ? add_tokens(&pass, pp->first, pp->n_first, err) : add_tokens(&pass, pp->next, pp->n_next, err))
            goto done;
        if (i > 0) {
            int ov = ro->overlap < chunk ? ro->overlap : chunk;
            if (add_tokens(&pass, tokens + start - ov, ov, err)) goto done;
        }
        if (add_tokens(&pass, pp->suffix, pp->n_suffix, err) || add_tokens(&pass, tokens + start, len, err)) goto done;
        /* the pass is the press's own work, gone afterwards: it may use the
         * model's trained positions beyond a smaller session context */
        int limit = s->opts.n_ctx > s->model->hp.n_ctx_train ? s->opts.n_ctx : s->model->hp.n_ctx_train;
        if ((int64_t)n + pass.n > limit) {
            pkv_fail(err, PKV_ERR_LIMIT,
                     "%s: a reconstruction pass of %d tokens after the %d of the prompt exceeds the context length %d "
                     "(the session's %d or the model's trained %d); lower chunk_size",
                     press->ops->name, pass.n, n, limit, s->opts.n_ctx, s->model->hp.n_ctx_train);
            goto done;
        }
        r->n_sink = n_sink < start ? n_sink : start;
        r->chunk_begin = start;
        r->n_chunk = len;
        s->recon = r;
        int frc = pkv_forward(s, pass.ids, pass.n, NULL, NULL, NULL, NULL, NULL, err);
        s->recon = NULL;
        if (frc) goto done;
        s->broken = true; /* until the pass is gone */
        if (drop_pass(s, n, identity, pass.n, err)) goto done;
        s->n_pos = n;
        s->broken = false;
    }
    memcpy(s->logits, logits, (size_t)s->model->hp.n_vocab * sizeof(float));
    rc = 0;
done:
    free(pass.ids);
    free(identity);
    free(logits);
    return rc;
}

int pkv_recon_press(pkv_session *s, const pkv_layer_probe *probes, const pkv_recon_source *from,
                    const int32_t *tokens, int n, int begin, const pkv_recon_prompts *prompts,
                    const pkv_press_cfg *press, pkv_compress_stats *stats, pkv_error *err) {
    double t0 = pkv_now_seconds();
    if (check_session(s, n, press, begin, err)) return -1;
    const pkv_hparams *hp = &s->model->hp;
    pkv_recon_state r = {.press = press, .ctx_rows = n};
    int rc = -1;
    const float *const **by_rank = NULL;
    if (!prompts)
        return pkv_fail(err, PKV_ERR_INTERNAL, "%s: its passes' instructions were not tokenized (press through "
                        "pkv_prefill or the request API)", press->ops->name);
    uint64_t key = prompts_key(prompts);
    bool reused = from && from->memo && memo_fits(from->memo, from->gen, press, n, begin, key);
    if (reused) {
        r.scores = from->memo->scores;
    } else {
        r.scores = calloc((size_t)hp->n_layer, sizeof *r.scores);
        if (!r.scores) goto nomem;
        for (int il = 0; il < hp->n_layer; il++) {
            r.scores[il] = calloc((size_t)hp->n_head_kv, sizeof **r.scores);
            if (!r.scores[il]) goto nomem;
            for (int g = 0; g < hp->n_head_kv; g++)
                if (!(r.scores[il][g] = calloc((size_t)n + 1, sizeof(float)))) goto nomem;
        }
        if (run_passes(s, tokens, n, begin, prompts, &r, err)) goto done;
    }
    /* the press reads every pressed layer's scores, by rank */
    by_rank = calloc((size_t)hp->n_layer, sizeof *by_rank);
    if (!by_rank) goto nomem;
    for (int il = 0; il < hp->n_layer; il++) by_rank[il] = (const float *const *)r.scores[il];
    s->recon_scores = (const float *const *const *)by_rank;
    s->broken = true;
    pkv_compress_stats local = {0};
    for (int il = 0; il < hp->n_layer; il++)
        if (pkv_compress_layer(s, &probes[il], press, il, &local, err)) goto done;
    s->broken = false;
    if (stats) {
        stats->compressed = true;
        stats->rows_before += local.rows_before;
        stats->rows_after += local.rows_after;
        /* the passes are the press's cost (none when the memo had them) */
        stats->press_seconds += pkv_now_seconds() - t0;
    }
    if (!reused && from && from->memo) {
        memo_keep(from->memo, r.scores, hp, from->gen, press, n, begin, key);
        r.scores = NULL;
    }
    rc = 0;
    goto done;
nomem:
    pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the reconstruction scores");
done:
    s->recon_scores = NULL;
    s->recon = NULL;
    free(by_rank);
    free(r.keys);
    if (!reused) free_scores(r.scores, hp->n_layer, hp->n_head_kv);
    return rc;
}
