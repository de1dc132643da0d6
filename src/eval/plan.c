/* The plan's units, the result lines' keys and the lines (plan.h). */
#include "eval/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/json.h"
#include "eval/text.h"

/* ---------------------------------------------------------------- units and keys */

static int questions_of(const pkv_eval_task *t) { return t->n_questions > 1 ? t->n_questions : 1; }

pkv_eval_spec pkv_eval_unit_spec(const pkv_eval_unit *u, uint64_t base_seed) {
    return (pkv_eval_spec){u->task, u->length, u->sample, u->depth, base_seed, u->question};
}

pkv_eval_unit *pkv_eval_plan_units(const pkv_eval_plan *p, int *n) {
    int cap = 0;
    for (int t = 0; t < p->n_tasks; t++)
        cap += (p->tasks[t]->grid ? p->n_grid_lengths * p->n_grid_depths * p->grid_samples : p->n_lengths * p->samples) *
               questions_of(p->tasks[t]);
    pkv_eval_unit *u = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *u);
    *n = 0;
    if (!u) return NULL;
    for (int t = 0; t < p->n_tasks; t++) {
        const pkv_eval_task *task = p->tasks[t];
        if (task->grid) {
            for (int l = 0; l < p->n_grid_lengths; l++)
                for (int d = 0; d < p->n_grid_depths; d++)
                    for (int s = 0; s < p->grid_samples; s++)
                        u[(*n)++] = (pkv_eval_unit){task, p->grid_lengths[l], s, p->grid_depths[d], 0};
        } else {
            /* a context's questions next to each other: the runner prefills it once for them */
            for (int l = 0; l < p->n_lengths; l++)
                for (int s = 0; s < p->samples; s++)
                    for (int q = 0; q < questions_of(task); q++)
                        u[(*n)++] = (pkv_eval_unit){task, p->lengths[l], s, -1, q};
        }
    }
    return u;
}

void pkv_eval_row_key(const pkv_eval_unit *u, pkv_eval_mode mode, const pkv_eval_config *c, char *buf, int len) {
    if (u->task->grid)
        snprintf(buf, (size_t)len, "%s/%d/%d/d%g/%s/%s", u->task->name, u->length, u->sample, u->depth,
                 pkv_eval_mode_name(mode), c->describe);
    else if (u->task->n_questions > 1)
        snprintf(buf, (size_t)len, "%s/%d/%d/q%d/%s/%s", u->task->name, u->length, u->sample, u->question,
                 pkv_eval_mode_name(mode), c->describe);
    else
        snprintf(buf, (size_t)len, "%s/%d/%d/%s/%s", u->task->name, u->length, u->sample, pkv_eval_mode_name(mode),
                 c->describe);
}

/* ---------------------------------------------------------------- the JSON line */

static void num_field(pkv_sbuf *b, const char *key, double v) {
    pkv_sbuf_printf(b, ",\"%s\":", key);
    pkv_json_num(b, v);
}

char *pkv_eval_row_json(const pkv_eval_unit *u, const pkv_eval_item *item, uint64_t seed, const pkv_eval_run_id *run,
                        const pkv_eval_result *r) {
    const pkv_eval_config *c = r->config;
    char key[512];
    pkv_eval_row_key(u, r->mode, c, key, sizeof key);
    pkv_sbuf b = {0};
    pkv_sbuf_puts(&b, "{\"key\":");
    pkv_json_str(&b, key);
    pkv_sbuf_puts(&b, ",\"task\":");
    pkv_json_str(&b, u->task->name);
    num_field(&b, "length", u->length);
    num_field(&b, "sample", u->sample);
    num_field(&b, "depth", item->depth);
    if (u->task->n_questions > 1) num_field(&b, "question", u->question);
    pkv_sbuf_printf(&b, ",\"seed\":\"%016llx\",\"model\":", (unsigned long long)seed);
    pkv_json_str(&b, run && run->model ? run->model : "");
    pkv_sbuf_printf(&b, ",\"chat\":%s,\"mode\":", run && run->chat ? "true" : "false");
    pkv_json_str(&b, pkv_eval_mode_name(r->mode));
    pkv_sbuf_puts(&b, ",\"press\":");
    pkv_json_str(&b, c->press);
    num_field(&b, "budget", c->budget);
    num_field(&b, "ratio", c->ratio);
    pkv_sbuf_puts(&b, ",\"config\":");
    pkv_json_str(&b, c->label);
    pkv_sbuf_puts(&b, ",\"describe\":");
    pkv_json_str(&b, c->describe);
    num_field(&b, "units", item->n_units);
    num_field(&b, "n_context", r->n_context);
    num_field(&b, "n_question", r->n_question);
    num_field(&b, "n_prefix", r->n_prefix);
    num_field(&b, "L", r->n_compressible);
    num_field(&b, "kept_rows", r->kept_rows);
    double keep_frac = r->n_compressible > 0 ? r->kept_rows / r->n_compressible : NAN;
    num_field(&b, "r_eff", 1.0 - keep_frac);
    num_field(&b, "compression", r->kept_rows > 0 ? r->n_compressible / r->kept_rows : NAN);
    num_field(&b, "cache_bytes", (double)r->cache_bytes);
    num_field(&b, "cache_bytes_full", (double)r->cache_bytes_full);
    num_field(&b, "score", 100.0 * r->score);
    if (r->pass >= 0) pkv_sbuf_printf(&b, ",\"pass\":%s", r->pass ? "true" : "false");
    pkv_sbuf_puts(&b, ",\"prediction\":");
    pkv_json_str(&b, r->prediction ? r->prediction : "");
    pkv_sbuf_puts(&b, ",\"gold\":[");
    for (int i = 0; i < item->n_gold; i++) {
        if (i) pkv_sbuf_puts(&b, ",");
        pkv_json_str(&b, item->gold[i]);
    }
    pkv_sbuf_puts(&b, "]");
    num_field(&b, "n_gen", r->n_gen);
    if (r->reused_full) pkv_sbuf_puts(&b, ",\"reused_full\":true");
    num_field(&b, "agree_k", r->agree_k);
    num_field(&b, "agree_top1", r->agree_top1);
    num_field(&b, "kl", r->kl);
    num_field(&b, "n_ref", r->n_ref);
    num_field(&b, "nll", r->nll);
    num_field(&b, "nll_full", r->nll_full);
    num_field(&b, "nll_diff", r->nll - r->nll_full);
    num_field(&b, "needle_tokens", r->n_needle_tokens);
    pkv_sbuf_puts(&b, ",\"needle_positions\":[");
    for (int i = 0; i < r->n_needle_tokens; i++) pkv_sbuf_printf(&b, "%s%d", i ? "," : "", r->needle_positions[i]);
    pkv_sbuf_puts(&b, "]");
    if (r->needle_kept && r->n_full_layers > 0 && r->n_heads > 0) {
        double sum = 0;
        for (int i = 0; i < r->n_full_layers * r->n_heads; i++) sum += r->needle_kept[i];
        num_field(&b, "needle_kept", sum / (r->n_full_layers * r->n_heads));
        pkv_sbuf_puts(&b, ",\"needle_kept_layers\":[");
        for (int l = 0; l < r->n_full_layers; l++) {
            pkv_sbuf_printf(&b, "%s{\"layer\":%d,\"heads\":[", l ? "," : "", r->full_layers[l]);
            for (int h = 0; h < r->n_heads; h++) {
                if (h) pkv_sbuf_puts(&b, ",");
                pkv_json_num(&b, r->needle_kept[l * r->n_heads + h]);
            }
            pkv_sbuf_puts(&b, "]}");
        }
        pkv_sbuf_puts(&b, "]");
    } else {
        pkv_sbuf_puts(&b, ",\"needle_kept\":null");
    }
    /* timings last, in one object, so comparisons can drop them */
    pkv_sbuf_puts(&b, ",\"time\":{\"prefill_s\":");
    pkv_json_num(&b, r->prefill_seconds);
    /* 0 s: an earlier question of the same context left this prefill in the source */
    if (r->shared_prefill) pkv_sbuf_puts(&b, ",\"prefill_shared\":true");
    num_field(&b, "copy_s", r->copy_seconds);
    num_field(&b, "press_s", r->press_seconds);
    num_field(&b, "question_s", r->question_seconds);
    num_field(&b, "decode_s", r->decode_seconds);
    num_field(&b, "decode_steps", r->n_decoded);
    num_field(&b, "decode_ms_per_token", r->n_decoded > 0 ? 1e3 * r->decode_seconds / r->n_decoded : NAN);
    pkv_sbuf_puts(&b, "}}\n");
    return pkv_sbuf_take(&b);
}
