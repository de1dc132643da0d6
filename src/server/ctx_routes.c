/* The stored contexts' endpoints (docs/server.md "Stored contexts"):
 * POST /v1/contexts (prefilled and pressed by a slot, then stored), GET the
 * list or one, DELETE one. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "server.h"

static json_t *context_object(const srv_context *c) {
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:f}", "id", c->id, "object", "context",
                          "created", (json_int_t)c->created, "kind", c->chat ? "chat" : "text", "tokens", c->n_tokens,
                          "kv_cache_rows", (json_int_t)c->rows, "kv_cache_rows_full", (json_int_t)c->rows_full,
                          "kv_cache_bytes", (json_int_t)c->bytes, "kv_cache_bytes_full", (json_int_t)c->bytes_full,
                          "memory_bytes", (json_int_t)c->mem, "prefill_seconds", c->seconds);
    if (o) json_object_set_new(o, "kv_press", srv_json_text(c->press, strlen(c->press))); /* a reloaded file's text */
    return o;
}

static enum MHD_Result queue_object(request *r, int status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return queue_json(r, status, s);
}

/* POST /v1/contexts: prefilled and pressed by a slot, then stored. */
static enum MHD_Result post_context(request *r) {
    server *srv = r->srv;
    srv_error e;
    srv_request req;
    if (srv_request_parse(r->body ? r->body : "", r->len, SRV_CONTEXT, &req, &e)) return queue_error(r, &e);
    srv_prepared prep;
    if (srv_prepare_context(srv->model, &srv->lim, &req, &prep, &e)) {
        srv_request_free(&req);
        return queue_error(r, &e);
    }
    if (prep.store_bytes_min > srv->opts->ctx_mem) {
        srv_bad(&e, "context_too_large", NULL,
                "this context needs at least %llu bytes of the context store once pressed, more than its limit of "
                "%llu (--ctx-mem; compress it more with kv_compression)",
                (unsigned long long)prep.store_bytes_min, (unsigned long long)srv->opts->ctx_mem);
        srv_prepared_free(&prep);
        srv_request_free(&req);
        return queue_error(r, &e);
    }
    r->prompt_tokens = prep.prompt.n_compressed;
    snprintf(r->press_desc, sizeof r->press_desc, "%s", prep.press_desc);
    r->job = srv_job_new(&req, &prep);
    if (!r->job) return queue_json(r, 500, NULL);
    if (srv_submit(&srv->sc, r->job, &e)) return queue_error(r, &e);
    for (;;) {
        srv_news n;
        if (srv_job_next(&srv->sc, r->job, client_gone, r, &n)) return MHD_NO; /* the client left: close */
        bool done = n.done, failed = n.failed;
        srv_error err = n.error;
        srv_news_free(&n);
        if (!done) continue;
        if (failed) return queue_error(r, &err);
        break;
    }
    srv_context *c = srv_job_take_made(&srv->sc, r->job);
    if (!c) return queue_json(r, 500, NULL);
    enum MHD_Result rc = queue_object(r, 200, context_object(c));
    srv_store_release(&srv->store, c);
    return rc;
}

static enum MHD_Result list_contexts(request *r) {
    srv_context **list;
    int n = srv_store_list(&r->srv->store, &list);
    if (n < 0) return queue_json(r, 500, NULL);
    json_t *data = json_array();
    for (int i = 0; i < n; i++) {
        if (data) json_array_append_new(data, context_object(list[i]));
        srv_store_release(&r->srv->store, list[i]);
    }
    free(list);
    return queue_object(r, 200, data ? json_pack("{s:s, s:o}", "object", "list", "data", data) : NULL);
}

enum MHD_Result srv_contexts_route(request *r) {
    server *srv = r->srv;
    const char *m = r->method, *id = r->url[12] == '/' ? r->url + 13 : NULL;
    bool get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
    if (!id) {
        r->allow = "GET, POST";
        if (!strcmp(m, "POST")) {
            if (is_draining(srv))
                return queue_fail(r, 503, "server_error", "shutting_down", "the server is shutting down%s", "");
            return post_context(r);
        }
        if (get) return list_contexts(r);
        return queue_fail(r, 405, "invalid_request_error", "method_not_allowed", "%s needs GET or POST", r->url);
    }
    r->allow = "GET, DELETE";
    if (!get && strcmp(m, "DELETE") != 0)
        return queue_fail(r, 405, "invalid_request_error", "method_not_allowed", "%s needs GET or DELETE", r->url);
    char safe[64]; /* the id as the client sent it, for the message: printable ASCII only */
    snprintf(safe, sizeof safe, "%s", id);
    for (char *p = safe; *p; p++)
        if ((unsigned char)*p < 0x21 || (unsigned char)*p > 0x7e) *p = '?';
    if (!strcmp(m, "DELETE")) {
        if (!srv_store_delete(&srv->store, id))
            return queue_fail(r, 404, "invalid_request_error", "context_not_found", "no stored context '%s'", safe);
        return queue_object(r, 200, json_pack("{s:s, s:s, s:b}", "id", safe, "object", "context.deleted", "deleted", 1));
    }
    srv_context *c = srv_store_get(&srv->store, id);
    if (!c) return queue_fail(r, 404, "invalid_request_error", "context_not_found", "no stored context '%s'", safe);
    enum MHD_Result rc = queue_object(r, 200, context_object(c));
    srv_store_release(&srv->store, c);
    return rc;
}

