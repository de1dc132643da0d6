/*
 * The server's batched decode (docs/server.md "Batching"): one thread steps
 * every request that is generating, all together (pkv_generation_step_batched:
 * the weights read once a step for all streams). A slot prefills its request
 * on its own thread, hands the generation to the decoder and waits until it
 * is done; a stream joins the batch at the next step and leaves when it
 * ends. The token callbacks run on the decoder's thread.
 */
#ifndef PKV_SERVER_DECODER_H
#define PKV_SERVER_DECODER_H

#include <stdint.h>

#include "promptkv.h"
#include "turn.h"

typedef struct srv_decoder srv_decoder;

/* n_threads: the batched step's threads; each step holds turn (turn.h). */
srv_decoder *srv_decoder_start(pkv_model *model, int n_threads, srv_turn *turn, pkv_error *err);
/* Stops the thread once no stream is left (the slots have ended theirs). */
void srv_decoder_stop(srv_decoder *d);

/* Steps gen with the other streams until it is done; 0, or -1 with err when
 * its generation failed (interrupted, out of memory, no finite logit). */
int srv_decoder_run(srv_decoder *d, pkv_generation *gen, pkv_error *err);

/* Batched steps run so far, and the streams they stepped in all (their
 * ratio: the mean batch). */
void srv_decoder_counts(srv_decoder *d, uint64_t *steps, uint64_t *rows);

#endif
