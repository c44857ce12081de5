/*
 * metrics.h - tcgpud's metrics (metrics.c): latency histograms, counters,
 * and their Prometheus exposition (docs/tcgpud.md, "Metrics").
 */
#ifndef TCGPU_TCGPUD_METRICS_H
#define TCGPU_TCGPUD_METRICS_H

#include <stddef.h>

#include "daemon.h"

/* One observation of secs into l. */
void latency_add(struct latency *l, double secs);
/* Counts an event of this type (event() calls it). */
void metrics_count_event(const char *type);
/* The Prometheus exposition of everything now (docs/tcgpud.md, "Metrics"):
 * a new string the caller frees, its length in *len; NULL without memory. */
char *metrics_text(size_t *len);
/* Every tick: the textfile, if configured, and the HTTP endpoint's copy. */
void publish_metrics(void);

#endif
