/*
 * The token ids a reconstruction press's passes feed besides the context
 * (engine/reconstruct.c, docs/presses.md E.3): its first instruction, the
 * instruction before every later chunk, and the chat template's generation
 * prompt (a newline without a template). The request layer tokenizes them
 * before the prefill, so that the passes read token ids only.
 */
#ifndef PKV_ENGINE_RECON_PROMPTS_H
#define PKV_ENGINE_RECON_PROMPTS_H

#include <stdbool.h>
#include <stdint.h>

#include "promptkv.h"

typedef struct pkv_recon_prompts {
    int32_t *first, *next, *suffix;
    int n_first, n_next, n_suffix;
} pkv_recon_prompts;

/* The prompts of press (which reconstructs) for model; chat: the prompt is
 * framed by the model's chat template, whose generation prompt then ends
 * each instruction. */
int pkv_recon_prompts_build(const pkv_model *model, const pkv_press_cfg *press, bool chat, pkv_recon_prompts *out,
                            pkv_error *err);
void pkv_recon_prompts_free(pkv_recon_prompts *p);

#endif
