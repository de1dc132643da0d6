/*
 * Reconstruction passes (reconstruct.c, docs/design.md "Reconstruction
 * passes"): for a press that scores rows by how the model repeats the
 * context (KVzip), the engine feeds, after the prefill, an instruction to
 * repeat and the context again, chunk by chunk, appending each pass to the
 * cache and removing it afterwards; the forward pass hands every full layer's
 * queries of a pass to the press (pkv_recon_observe, compress.c). Then it
 * presses every full layer with the scores.
 */
#ifndef PKV_ENGINE_RECONSTRUCT_H
#define PKV_ENGINE_RECONSTRUCT_H

#include "engine/compress.h"
#include "engine/recon_prompts.h"
#include "engine/state.h"

/* Before a prefill of s with press (before_prefill: s must hold nothing yet)
 * or a copy of s pressed: the model has no sliding-window layer. */
int pkv_recon_check(const pkv_session *s, const pkv_press_cfg *press, bool before_prefill, pkv_error *err);

/* The scores of a session's last passes, kept for the next copy of the same
 * source pressed by the same press at another budget: the passes read the
 * context and the press's own options (n_sink, chunk_size), never the budget,
 * so an evaluation of four ratios runs them once (docs/presses.md E.3). */
pkv_recon_memo *pkv_recon_memo_new(void);
void pkv_recon_memo_free(pkv_recon_memo *memo);

/* The session a copy was made from: its memo (written through the const
 * source: derived data only) and its probe_gen when copied. */
typedef struct {
    pkv_recon_memo *memo;
    uint64_t gen;
} pkv_recon_source;

/* s holds exactly the n tokens (its first prefill, unpressed; probes[il]
 * what that prefill kept of layer il, s's own or the session s was copied
 * from, from then naming that session): runs press's passes over
 * tokens[begin, n) (begin: where the context starts after the chat
 * template's opening), each pass fed prompts' instruction and generation
 * prompt (recon_prompts.h) before its chunk, and presses every full layer
 * with their scores. With from, scores of the same passes over the
 * same source are taken from its memo, and new ones are left there. */
int pkv_recon_press(pkv_session *s, const pkv_layer_probe *probes, const pkv_recon_source *from,
                    const int32_t *tokens, int n, int begin, const pkv_recon_prompts *prompts,
                    const pkv_press_cfg *press, pkv_compress_stats *stats, pkv_error *err);

/* An upper bound of the rows a pass of press adds to each head while a prompt
 * of n compressed tokens is reconstructed (the admission estimate). */
int64_t pkv_recon_pass_rows(const pkv_press_cfg *press, int n);

#endif
