#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = t->oom ? 0 : vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (t->oom || n < 0) return;
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        char *p = realloc(t->buf, t->cap * 2 + (size_t)n);
        if (!p) {
            t->oom = true;
            return;
        }
        t->buf = p;
        t->cap = t->cap * 2 + (size_t)n;
    }
}

static void metric(text *t, const char *name, const char *type, const char *help) {
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric with one unlabelled sample: integer, or real with prec decimals. */
static void metric_u64(text *t, const char *name, const char *type, const char *help, unsigned long long v) {
    metric(t, name, type, help);
    put(t, "%s %llu\n", name, v);
}
static void metric_real(text *t, const char *name, const char *type, const char *help, int prec, double v) {
    metric(t, name, type, help);
    put(t, "%s %.*f\n", name, prec, v);
}

static double rate(double tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; }

char *srv_metrics_text(const srv_metrics *m) {
    text t = {malloc(4096), 0, 4096, false};
    if (!t.buf) return NULL;
    static const char *const ENDPOINTS[] = {"completions", "chat_completions", "contexts"};
    static const char *const CLASSES[] = {"2xx", "400", "413", "429", "503", "other"};
    metric(&t, "promptkv_requests_total", "counter",
           "Completion and context requests answered, by endpoint and status.");
    for (int e = 0; e < 3; e++)
        for (int c = 0; c < 6; c++)
            put(&t, "promptkv_requests_total{endpoint=\"%s\",status=\"%s\"} %llu\n", ENDPOINTS[e], CLASSES[c],
                (unsigned long long)m->requests_total[e][c]);
    metric_u64(&t, "promptkv_other_requests_total", "counter",
            "Requests to other paths (health, models, metrics, unknown).", m->other_requests);
    metric_u64(&t, "promptkv_prompt_tokens_total", "counter", "Prompt tokens prefilled.", m->prompt_tokens);
    metric_u64(&t, "promptkv_completion_tokens_total", "counter", "Tokens generated.", m->completion_tokens);
    metric_real(&t, "promptkv_prefill_seconds_total", "counter",
            "Seconds spent prefilling prompts (press included).", 6, m->prefill_seconds);
    metric_real(&t, "promptkv_decode_seconds_total", "counter", "Seconds spent decoding tokens.", 6, m->decode_seconds);
    metric_real(&t, "promptkv_prefill_tokens_per_second", "gauge",
            "Prompt tokens per second of prefill, since start (per slot).",
            3, rate((double)m->prompt_tokens, m->prefill_seconds));
    metric_real(&t, "promptkv_decode_tokens_per_second", "gauge",
            "Decoded tokens per second of decode, since start (per slot).",
            3, rate((double)m->decoded_tokens, m->decode_seconds));
    metric_u64(&t, "promptkv_batch_steps_total", "counter",
               "Batched decode steps (one forward pass for every generating request).", m->batch_steps);
    metric_u64(&t, "promptkv_batch_streams_total", "counter",
               "Streams those steps decoded in all (over promptkv_batch_steps_total: the mean batch).", m->batch_rows);
    metric_u64(&t, "promptkv_cache_bytes_in_use", "gauge",
            "KV-cache bytes the running requests hold.", m->cache_bytes_in_use);
    metric_u64(&t, "promptkv_cache_bytes_saved", "gauge",
            "KV-cache bytes the running requests would hold more without compression.", m->cache_bytes_saved);
    metric_u64(&t, "promptkv_cache_bytes_reserved", "gauge",
            "KV-cache bytes reserved by admission for the running requests.", m->mem_reserved);
    metric_u64(&t, "promptkv_cache_bytes_limit", "gauge",
            "KV-cache bytes the server admits requests up to (--kv-mem).", m->mem_limit);
    metric_u64(&t, "promptkv_compression_saved_bytes_total", "counter",
            "KV-cache bytes compression removed after prompts, summed.", m->compression_saved_bytes);
    metric_u64(&t, "promptkv_compressed_requests_total", "counter",
            "Requests whose prompt cache was compressed.", m->compressed_requests);
    metric_real(&t, "promptkv_queue_length", "gauge", "Requests waiting for a slot.", 0, m->queue_length);
    metric_real(&t, "promptkv_slots_busy", "gauge", "Slots running a request.", 0, m->slots_busy);
    metric_real(&t, "promptkv_slots", "gauge", "Slots (requests decoded in parallel).", 0, m->n_slots);
    metric_u64(&t, "promptkv_requests_cancelled_total", "counter",
            "Requests stopped because the client went away.", m->cancelled);
    metric_u64(&t, "promptkv_memory_waits_total", "counter",
            "Requests that waited for KV-cache memory (--kv-mem) rather than for a slot.", m->memory_waits);
    metric(&t, "promptkv_requests_rejected_total", "counter", "Requests refused before running, by reason.");
    put(&t, "promptkv_requests_rejected_total{reason=\"queue_full\"} %llu\n", (unsigned long long)m->rejected_queue_full);
    put(&t, "promptkv_requests_rejected_total{reason=\"queue_timeout\"} %llu\n", (unsigned long long)m->queue_timeouts);
    put(&t, "promptkv_requests_rejected_total{reason=\"shutting_down\"} %llu\n", (unsigned long long)m->rejected_draining);
    const srv_store_stats *st = &m->store;
    metric_u64(&t, "promptkv_contexts", "gauge", "Stored contexts.", st->count);
    metric_u64(&t, "promptkv_context_bytes", "gauge", "Memory the stored contexts hold (--ctx-mem counts it).",
               st->mem_used);
    metric_u64(&t, "promptkv_context_bytes_limit", "gauge", "Memory the stored contexts may hold (--ctx-mem).",
               st->mem_limit);
    metric(&t, "promptkv_contexts_total", "counter", "Stored contexts by what happened to them.");
    put(&t, "promptkv_contexts_total{event=\"created\"} %llu\n", (unsigned long long)st->created);
    put(&t, "promptkv_contexts_total{event=\"reloaded\"} %llu\n", (unsigned long long)st->reloaded);
    put(&t, "promptkv_contexts_total{event=\"deleted\"} %llu\n", (unsigned long long)st->deleted);
    put(&t, "promptkv_contexts_total{event=\"evicted\"} %llu\n", (unsigned long long)st->evicted);
    put(&t, "promptkv_contexts_total{event=\"refused_too_large\"} %llu\n",
        (unsigned long long)st->refused_too_large);
    metric(&t, "promptkv_context_requests_total", "counter",
           "Requests that started from a stored context, by how: its context_id, or a prompt beginning with its tokens.");
    put(&t, "promptkv_context_requests_total{by=\"id\"} %llu\n", (unsigned long long)st->requests_by_id);
    put(&t, "promptkv_context_requests_total{by=\"prefix\"} %llu\n", (unsigned long long)st->requests_by_prefix);
    metric_u64(&t, "promptkv_context_tokens_reused_total", "counter",
               "Prompt tokens taken from stored contexts instead of prefilled.", st->tokens_reused);
    if (t.oom) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}
