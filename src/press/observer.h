/*
 * What a press tells an observer while it runs, for inspection (promptkv
 * inspect --clusters) and benchmarks (tools/bench-press): not part of the
 * public API, which only callers that look inside a press include.
 */
#ifndef PKV_PRESS_OBSERVER_H
#define PKV_PRESS_OBSERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "promptkv.h"

/* What a grouping press (ProtoKV) decided for one KV head of one layer. Rows are the head's rows before the press, ascending position;
 * the first n_prefix are scored, the rest is the observation window. Pointers
 * live only during the callback. */
typedef struct {
    int layer, head;
    int n_rows, n_prefix;
    const int32_t *pos;           /* [n_rows] original positions */
    const double *theta;          /* [n_prefix] outlier degree (standardised local deviation) */
    const int32_t *sat_bucket;    /* [n_prefix] LSH bucket of a SAT candidate, -1 for the others */
    const int32_t *cluster;       /* [n_prefix] cluster the row joined */
    int n_clusters;               /* clusters [0, n_sat_clusters) grew from SAT prototypes, the rest from chunks */
    int n_sat_clusters;
    const int32_t *cluster_size;  /* [n_clusters] rows that joined */
    const double *cluster_score;  /* [n_clusters] psi */
    const int8_t *cluster_kept;   /* [n_clusters] 2 kept whole, 1 partly (overflow fill), 0 evicted */
    const bool *row_kept;         /* [n_rows] */
    /* Do the SAT candidates cluster? Mean cosine among them and between them
     * and the other prefix rows; the same for an equally large seeded random
     * subset (the control). Gamma = intra / inter. */
    double sat_intra, sat_inter, rand_intra, rand_inter;
} pkv_cluster_view;

typedef struct {
    /* The clusters of KV head `head` of layer `layer` (-1: every full layer /
     * every head), from presses that form clusters. */
    int layer, head;
    void (*clusters)(void *user, const pkv_cluster_view *view);
    /* Seconds spent in a step of the press, by the step's name (ProtoKV:
     * similarity, lsh, prototypes, assignment, scoring, retention). */
    void (*step)(void *user, const char *step, double seconds);
    void *user;
} pkv_press_observer;

/* Observes cfg's press from its next run (obs NULL: stop). A clusters
 * callback needs a press that forms clusters (an error otherwise). */
int pkv_press_cfg_observe(pkv_press_cfg *cfg, const pkv_press_observer *obs, pkv_error *err);

#endif
