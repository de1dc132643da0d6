/* A first-come, first-served turn (turn.h): a ticket lock. */
#include "turn.h"

#include <stdbool.h>

void srv_turn_init(srv_turn *t) {
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->next = t->serving = 0;
}

void srv_turn_destroy(srv_turn *t) {
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

void srv_turn_take(srv_turn *t) {
    pthread_mutex_lock(&t->mu);
    uint64_t mine = t->next++;
    while (t->serving != mine) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void srv_turn_give(srv_turn *t) {
    pthread_mutex_lock(&t->mu);
    t->serving++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void srv_turn_yield(void *turn) {
    srv_turn *t = turn;
    /* nobody waits: keep going without a round trip through the queue */
    pthread_mutex_lock(&t->mu);
    bool alone = t->next == t->serving + 1;
    pthread_mutex_unlock(&t->mu);
    if (alone) return;
    srv_turn_give(t);
    srv_turn_take(t);
}
