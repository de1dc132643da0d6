/* promptkv inspect --json: the kept positions of every full-attention layer
 * and KV head in a machine-readable form (tools/kvpress-parity.py reads it). */
#ifndef PKV_CLI_INSPECT_JSON_H
#define PKV_CLI_INSPECT_JSON_H

#include "promptkv.h"

typedef struct {
    const char *model;               /* the model file */
    const char *press;               /* pkv_press_cfg_describe */
    const char *mode;                /* query_aware | query_agnostic */
    const pkv_prompt_tokens *prompt; /* every prompt token and its segments */
    int n_compressed;                /* the press saw tokens [0, n_compressed) */
    const pkv_prefill_stats *stats;  /* of the compressed part */
    const int32_t *answer;           /* greedy continuation (NULL: none asked for) */
    int n_answer;
} inspect_report;

/* Writes the report and the session's kept positions below n_compressed to
 * path ("-": stdout); -1 with errno set on failure. */
int inspect_write_json(const char *path, const pkv_session *s, const pkv_model *m, const inspect_report *r);

#endif
