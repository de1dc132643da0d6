/* The one clock for timings: seconds on CLOCK_MONOTONIC. */
#ifndef PKV_CLOCK_H
#define PKV_CLOCK_H

double pkv_now_seconds(void);

#endif
