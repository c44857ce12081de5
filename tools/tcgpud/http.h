/*
 * http.h - tcgpud's HTTP endpoint (docs/tcgpud.md, "Metrics" and
 * "Dashboard"), served by libmicrohttpd on a thread of its own:
 *
 *   GET /metrics          the Prometheus exposition (always)
 *   GET /healthz          "ok"
 *   GET /                 the dashboard (dashboard = yes), a read-only page
 *   GET /dashboard.js, /dashboard.css   its script and style
 *   GET /api/state        the dashboard's data, JSON (dashboard = yes)
 *
 * Read-only: anything but GET and HEAD is answered 405, a request with a
 * body 413. The server never touches the loop's state: the loop publishes
 * copies of what is served (http_publish), and a request only copies the
 * latest under a mutex, so a slow or hostile client cannot stall the
 * policy. Connections are bounded (in all, per address, in time).
 */
#ifndef TCGPU_TCGPUD_HTTP_H
#define TCGPU_TCGPUD_HTTP_H

#include <stddef.h>

/* What the loop publishes. */
enum http_resource {
    HTTP_METRICS,               /* text/plain, the exposition format 0.0.4 */
    HTTP_STATE,                 /* application/json */
    HTTP_RESOURCES
};

/*
 * Starts serving on host (numeric, IPv4 or IPv6) and port (0: any free
 * one); the dashboard's paths only when `dashboard`. *bound receives the
 * port listened on. Returns 0, or -errno with a message in err (the address
 * is taken, not an address of this machine...). Call once.
 */
int http_start(const char *host, int port, int dashboard, int *bound, char *err, size_t errlen);

/* Stops the server (waits for its thread) and frees what was published; safe if not started. */
void http_stop(void);

/* Replaces what `r` serves with a copy of len bytes at data. Any thread; never blocks long. */
void http_publish(enum http_resource r, const char *data, size_t len);

#endif
