/* /metrics in the Prometheus text exposition format (version 0.0.4). */
#ifndef PKV_SERVER_METRICS_H
#define PKV_SERVER_METRICS_H

#include "sched.h"

/* malloc'd text; NULL when out of memory. */
char *srv_metrics_text(const srv_metrics *m);

#endif
