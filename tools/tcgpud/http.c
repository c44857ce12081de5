/*
 * http.c - tcgpud's HTTP endpoint on libmicrohttpd; see http.h.
 *
 * libmicrohttpd runs its own polling thread and calls answer() there. The
 * only state shared with the loop is `published` (copies, under a mutex);
 * the dashboard's files are constant, embedded at build time
 * (codegen/embed.py).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/macros.h"
#include "http.h"

/*
 * Connection bounds. On loopback every client has the same address, so the
 * per-address bound only matters on other interfaces; a connection that
 * sends nothing for IDLE_TIMEOUT_S is closed. A local user can still hold
 * connections open and so delay scrapes; the loop itself never waits on
 * this thread (docs/tcgpud.md, "HTTP endpoint and dashboard").
 */
#define MAX_CONNECTIONS     256   /* in all */
#define MAX_PER_ADDRESS     64    /* from one address */
#define IDLE_TIMEOUT_S      10
#define REQUEST_MEMORY      (32 * 1024)   /* per connection: headers of a GET fit easily */

/* The dashboard's files (dashboard/, embedded by codegen/embed.py). */
extern const unsigned char dashboard_html[], dashboard_js[], dashboard_css[];
extern const size_t dashboard_html_len, dashboard_js_len, dashboard_css_len;

static struct MHD_Daemon *server;
static int with_dashboard;

static pthread_mutex_t published_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char *data;
    size_t len;
} published[HTTP_RESOURCES];

void http_publish(enum http_resource r, const char *data, size_t len)
{
    char *copy = malloc(len ? len : 1);

    if (!copy)
        return;                   /* the previous copy stays: stale rather than gone */
    memcpy(copy, data, len);
    pthread_mutex_lock(&published_lock);
    free(published[r].data);
    published[r].data = copy;
    published[r].len = len;
    pthread_mutex_unlock(&published_lock);
}

/* ---------------------------------------------------------------------------
 * Answers
 * ------------------------------------------------------------------------- */

/* Headers every answer has: nothing cached, nothing sniffed, never framed. */
static void common_headers(struct MHD_Response *r)
{
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
}

static enum MHD_Result send_copy(struct MHD_Connection *c, unsigned status, const char *type,
                                 const void *data, size_t len)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ok;

    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    common_headers(r);
    if (!strncmp(type, "text/html", 9))
        /* the page loads its own script and style and talks to /api/state: nothing else */
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'none'; script-src 'self'; style-src 'self'; "
                                "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'");
    ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    return send_copy(c, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* The latest copy of r, or 503 before the loop published one. */
static enum MHD_Result send_published(struct MHD_Connection *c, enum http_resource r, const char *type)
{
    enum MHD_Result ok;

    pthread_mutex_lock(&published_lock);
    if (!published[r].data) {
        pthread_mutex_unlock(&published_lock);
        return send_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready yet\n");
    }
    ok = send_copy(c, MHD_HTTP_OK, type, published[r].data, published[r].len);
    pthread_mutex_unlock(&published_lock);
    return ok;
}

struct route {
    const char *path;
    int dashboard;              /* only with dashboard = yes */
    enum http_resource resource;   /* published, or ... */
    const unsigned char *file;  /* ... embedded */
    const size_t *file_len;
    const char *type;
};

static const struct route routes[] = {
    { "/metrics", 0, HTTP_METRICS, NULL, NULL, "text/plain; version=0.0.4; charset=utf-8" },
    { "/api/state", 1, HTTP_STATE, NULL, NULL, "application/json" },
    { "/", 1, 0, dashboard_html, &dashboard_html_len, "text/html; charset=utf-8" },
    { "/dashboard.js", 1, 0, dashboard_js, &dashboard_js_len, "text/javascript; charset=utf-8" },
    { "/dashboard.css", 1, 0, dashboard_css, &dashboard_css_len, "text/css; charset=utf-8" },
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
    static int first_call;

    (void)cls;
    (void)version;
    (void)upload;
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        enum MHD_Result ok;
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, "Allow", "GET, HEAD");
        common_headers(r);
        ok = MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
        MHD_destroy_response(r);
        return ok;
    }
    if (!*state) {
        /* headers only so far: a request that announces a body is refused
         * now, before any of it is read; the others are answered next call */
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if ((len && strcmp(len, "0")) ||
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
            return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "no request body, please\n");
        *state = &first_call;
        return MHD_YES;
    }
    if (*upload_size) {           /* cannot happen after the check above: drop it */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/healthz"))
        return send_text(c, MHD_HTTP_OK, "ok\n");
    for (size_t i = 0; i < NELEM(routes); i++) {
        const struct route *rt = &routes[i];
        if (strcmp(url, rt->path))
            continue;
        if (rt->dashboard && !with_dashboard)
            return send_text(c, MHD_HTTP_NOT_FOUND,
                             "the dashboard is off: dashboard = yes in tcgpud.ini's [daemon] turns it on;"
                             " /metrics is here\n");
        if (rt->file)
            return send_copy(c, MHD_HTTP_OK, rt->type, rt->file, *rt->file_len);
        return send_published(c, rt->resource, rt->type);
    }
    return send_text(c, MHD_HTTP_NOT_FOUND, "not found: tcgpud serves /metrics (and the dashboard at /)\n");
}

static void log_from_mhd(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    size_t n;

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_info("http: %s", msg);
}

/* ---------------------------------------------------------------------------
 * Start and stop
 * ------------------------------------------------------------------------- */

int http_start(const char *host, int port, int dashboard, int *bound, char *err, size_t errlen)
{
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    const union MHD_DaemonInfo *info;

    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "http: '%s' is not a numeric address", host);
        return -EINVAL;
    }
    with_dashboard = dashboard;
    /* the logger first, as libmicrohttpd wants it, so that it gets every message */
    server = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, answer, NULL,
                              MHD_OPTION_EXTERNAL_LOGGER, log_from_mhd, NULL,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                              MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)MAX_PER_ADDRESS,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)REQUEST_MEMORY,
                              MHD_OPTION_END);
    if (!server) {
        snprintf(err, errlen, "http: cannot listen on %s%s%s:%d (in use? not an address of this "
                 "machine?): see the line above", strchr(host, ':') ? "[" : "", host,
                 strchr(host, ':') ? "]" : "", port);
        return -EADDRNOTAVAIL;
    }
    info = MHD_get_daemon_info(server, MHD_DAEMON_INFO_BIND_PORT);
    *bound = info ? info->port : port;
    return 0;
}

void http_stop(void)
{
    if (server)
        MHD_stop_daemon(server);
    server = NULL;
    for (int r = 0; r < HTTP_RESOURCES; r++) {
        free(published[r].data);
        published[r].data = NULL;
    }
}
