/* schema.c - the protocol's field types for JSON; see schema.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

/* The reply's fields beyond struct tcgpu_status (lib/core/control.c, put_extras). */
static const struct tc_json_field status_extras[] = {
    { "pid", TC_JSON_INT },
    { "trigger_installed", TC_JSON_BOOL },
    { "op_elapsed_ms", TC_JSON_INT },
    { "progress_done", TC_JSON_INT },
    { "progress_total", TC_JSON_INT },
    { "ops_queued", TC_JSON_INT },
    { "blockers", TC_JSON_INT },
    { NULL, 0 },
};

const struct tc_json_schema tc_json_status_schema = {
    .name = "status", .fields = status_extras, .with_status = 1,
};

/* tools/tcgpud/commands.c, put_job */
static const struct tc_json_field job_fields[] = {
    { "pid", TC_JSON_INT },
    { "uid", TC_JSON_INT },
    { "priority", TC_JSON_INT },
    { "device", TC_JSON_INT },
    { "mem", TC_JSON_INT },
    { "limit", TC_JSON_INT },
    { "runtime_ms", TC_JSON_INT },
    { "preemptions", TC_JSON_INT },
    { "borrowing", TC_JSON_BOOL },
    { "for", TC_JSON_INT },
    { "auto_resume", TC_JSON_BOOL },
    { "compute", TC_JSON_INT },
    { "compute_cap", TC_JSON_INT },
    { "compute_busy", TC_JSON_INT },
    { NULL, 0 },
};

const struct tc_json_schema tc_json_job_schema = { .name = "job", .fields = job_fields };

static const struct tc_json_field device_fields[] = {
    { "id", TC_JSON_INT },
    { "uuid", TC_JSON_STRING },
    { "capacity", TC_JSON_INT },
    { "used", TC_JSON_INT },
    { NULL, 0 },
};

const struct tc_json_schema tc_json_device_schema = { .name = "device", .fields = device_fields };

/* Every key tcgpud's event() calls give (tools/tcgpud), with its type. */
static const struct tc_json_field event_fields[] = {
    { "seq", TC_JSON_INT },
    { "time_ms", TC_JSON_INT },
    { "pid", TC_JSON_INT },
    { "priority", TC_JSON_INT },
    { "bytes", TC_JSON_INT },
    { "limit", TC_JSON_INT },
    { "priority_given", TC_JSON_INT },
    { "for", TC_JSON_INT },
    { "latency_ms", TC_JSON_NUMBER },
    { "wait_ms", TC_JSON_NUMBER },
    { "runtime_ms", TC_JSON_NUMBER },
    { "gpu_bytes", TC_JSON_INT },
    { "by_uid", TC_JSON_INT },
    { "uid", TC_JSON_INT },
    { "from_pid", TC_JSON_INT },
    { "not_shown", TC_JSON_INT },
    { "free", TC_JSON_INT },
    { NULL, 0 },
};

const struct tc_json_schema tc_json_event_schema = { .name = "event", .fields = event_fields };

static enum tc_json_type type_of_kind(enum ctl_kind k)
{
    switch (k) {
    case CTL_U64:
    case CTL_U32:
    case CTL_I32:
        return TC_JSON_INT;
    case CTL_FLAG:
        return TC_JSON_BOOL;
    default:
        return TC_JSON_STRING;
    }
}

enum tc_json_type tc_json_type_of(const struct tc_json_schema *s, const char *key)
{
    for (const struct tc_json_field *f = s->fields; f && f->key; f++)
        if (!strcmp(f->key, key))
            return f->type;
    if (s->with_status) {
        size_t n;
        const struct ctl_field_desc *d = ctl_status_fields(&n);
        for (size_t i = 0; i < n; i++)
            if (!strcmp(d[i].key, key))
                return type_of_kind(d[i].kind);
    }
    return TC_JSON_STRING;
}

static json_t *integer_of(const char *v)
{
    char *end;
    long long i;
    unsigned long long u;

    errno = 0;
    if (v[0] == '-') {
        i = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return json_null();
        return json_integer(i);
    }
    if (v[0] < '0' || v[0] > '9')
        return json_null();     /* strtoull takes "+1", " 1" and "-1" */
    u = strtoull(v, &end, 10);
    if (errno || *end || u > (unsigned long long)INT64_MAX)
        return json_null();
    return json_integer((json_int_t)u);
}

static json_t *number_of(const char *v)
{
    char *end;
    double x;

    errno = 0;
    if ((v[0] < '0' || v[0] > '9') && v[0] != '-')
        return json_null();     /* no "inf", "nan", hex or leading spaces */
    x = strtod(v, &end);
    if (errno || *end || x != x)
        return json_null();
    return json_real(x);
}

json_t *tc_json_value(const char *value, enum tc_json_type t)
{
    if (t == TC_JSON_STRING)
        return tc_json_string(value);
    if (!value || !*value)
        return json_null();
    switch (t) {
    case TC_JSON_INT:
        return integer_of(value);
    case TC_JSON_NUMBER:
        return number_of(value);
    case TC_JSON_BOOL:
        if (!strcmp(value, "0") || !strcmp(value, "1"))
            return json_boolean(value[0] == '1');
        return json_null();
    default:
        return json_null();
    }
}

json_t *tc_json_from_msg(const struct ctl_msg *m, const struct tc_json_schema *s)
{
    json_t *o = json_object();

    if (!o)
        return NULL;
    for (int i = 0; i < m->nfields; i++) {
        const struct ctl_field *f = &m->fields[i];
        if (tc_json_set_new(o, f->key, tc_json_value(f->value, tc_json_type_of(s, f->key))) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}
