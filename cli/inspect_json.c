/* promptkv inspect --json (inspect_json.h). One object: the prompt's token ids
 * and segments, the press and its cost, per full-attention layer the kept
 * positions of each KV head (ascending), and the greedy answer if asked for. */
#include "inspect_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/json.h"
#include "eval/text.h"

static void ids(pkv_sbuf *b, const int32_t *v, int n) {
    pkv_sbuf_puts(b, "[");
    for (int i = 0; i < n; i++) pkv_sbuf_printf(b, "%s%d", i ? "," : "", v[i]);
    pkv_sbuf_puts(b, "]");
}

/* one line per layer: {"layer": L, "heads": [[...], ...]} */
static void layers(pkv_sbuf *b, const pkv_session *s, int n_compressed, int32_t *pos, int cap) {
    pkv_sbuf_puts(b, "\"layers\": [");
    int n_layers = pkv_session_n_layers(s), printed = 0;
    for (int l = 0; l < n_layers; l++) {
        if (!pkv_session_layer_is_full(s, l)) continue;
        pkv_sbuf_printf(b, "%s\n  {\"layer\": %d, \"heads\": [", printed++ ? "," : "", l);
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
            int n = pkv_session_positions(s, l, h, pos, cap);
            int kept = 0;
            while (kept < n && kept < cap && pos[kept] < n_compressed) kept++; /* ascending: later rows follow */
            pkv_sbuf_puts(b, h ? ", " : "");
            ids(b, pos, kept);
        }
        pkv_sbuf_puts(b, "]}");
    }
    pkv_sbuf_puts(b, "\n]");
}

static void answer_text(pkv_sbuf *b, const pkv_model *m, const int32_t *toks, int n) {
    pkv_sbuf text = {0};
    char piece[256];
    for (int i = 0; i < n; i++) {
        int len = pkv_token_to_piece(m, toks[i], false, piece, sizeof piece);
        if (len > 0) pkv_sbuf_add(&text, piece, len < (int)sizeof piece ? (size_t)len : sizeof piece);
    }
    pkv_json_str(b, text.data ? text.data : "");
    if (text.failed) b->failed = true;
    pkv_sbuf_free(&text);
}

int inspect_write_json(const char *path, const pkv_session *s, const pkv_model *m, const inspect_report *r) {
    const pkv_prompt_tokens *p = r->prompt;
    int cap = p->n_tokens + 1;
    int32_t *pos = malloc((size_t)cap * sizeof *pos);
    if (!pos) return -1;
    pkv_sbuf b = {0};
    pkv_sbuf_puts(&b, "{\"model\": ");
    pkv_json_str(&b, r->model);
    pkv_sbuf_puts(&b, ", \"press\": ");
    pkv_json_str(&b, r->press);
    pkv_sbuf_puts(&b, ", \"mode\": ");
    pkv_json_str(&b, r->mode);
    pkv_sbuf_printf(&b, ",\n \"n_tokens\": %d, \"n_compressed\": %d, \"system_end\": %d, \"context_begin\": %d, "
                        "\"context_end\": %d, \"question_end\": %d,\n",
                    p->n_tokens, r->n_compressed, p->system_end, p->context_begin, p->context_end, p->question_end);
    pkv_sbuf_printf(&b, " \"cache_bytes_full\": %llu, \"cache_bytes\": %llu, \"press_ms\": ",
                    (unsigned long long)r->stats->cache_bytes_full, (unsigned long long)r->stats->cache_bytes);
    pkv_json_num(&b, r->stats->press_seconds * 1e3);
    pkv_sbuf_puts(&b, ",\n \"tokens\": ");
    ids(&b, p->tokens, p->n_tokens);
    pkv_sbuf_puts(&b, ",\n ");
    layers(&b, s, r->n_compressed, pos, cap);
    if (r->answer) {
        pkv_sbuf_puts(&b, ",\n \"answer\": {\"tokens\": ");
        ids(&b, r->answer, r->n_answer);
        pkv_sbuf_puts(&b, ", \"text\": ");
        answer_text(&b, m, r->answer, r->n_answer);
        pkv_sbuf_puts(&b, "}");
    }
    pkv_sbuf_puts(&b, "\n}\n");
    free(pos);
    if (b.failed) {
        pkv_sbuf_free(&b);
        errno = ENOMEM;
        return -1;
    }
    bool to_stdout = !strcmp(path, "-");
    FILE *out = to_stdout ? stdout : fopen(path, "w");
    int rc = out && fwrite(b.data, 1, b.len, out) == b.len ? 0 : -1;
    if (out && !to_stdout && fclose(out)) rc = -1;
    if (to_stdout && fflush(stdout)) rc = -1;
    pkv_sbuf_free(&b);
    return rc;
}
