/*
 * Turns at the compute (docs/server.md "Batching"): a batched decode step
 * and every prefill chunk take the whole machine one after the other, first
 * come first served. A prefill holds the turn for one chunk of one layer and
 * then queues again (pkv_session_opts.between_chunks), so a decode step that
 * arrived meanwhile runs next: running streams stall for one chunk at most
 * while a long prompt is read, and a prompt still advances between steps.
 */
#ifndef PKV_SERVER_TURN_H
#define PKV_SERVER_TURN_H

#include <pthread.h>
#include <stdint.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next, serving; /* tickets: drawn, and the one whose turn it is */
} srv_turn;

void srv_turn_init(srv_turn *t);
void srv_turn_destroy(srv_turn *t);
void srv_turn_take(srv_turn *t);
void srv_turn_give(srv_turn *t);
/* Gives the turn and queues for the next one (pkv_session_opts.between_chunks). */
void srv_turn_yield(void *turn);

#endif
