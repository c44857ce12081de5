/*
 * schema.h - the JSON type of each field of the control protocol's
 * messages, so that a field's JSON type depends on its key, never on its
 * value: a project named "2024" stays a string (docs/cli.md, "JSON output",
 * documents one schema per object).
 *
 * The messages are key=value text (ctl/proto.h). A schema lists the keys
 * whose values are integers, numbers or booleans; every other key, known or
 * new, is a string. A typed value that is empty or does not parse as its
 * type (a process of another version, a bug) is written as JSON null rather
 * than as a string of the wrong type.
 *
 * The tables are constant; the functions are pure and thread-safe.
 */
#ifndef TCGPU_JSON_SCHEMA_H
#define TCGPU_JSON_SCHEMA_H

#include "json.h"
#include "ctl/proto.h"

enum tc_json_type {
    TC_JSON_STRING,
    TC_JSON_INT,                /* a decimal integer, signed or not */
    TC_JSON_NUMBER,             /* a decimal fraction ("545.0": milliseconds) */
    TC_JSON_BOOL,               /* 0 or 1 */
};

struct tc_json_field {
    const char *key;
    enum tc_json_type type;
};

struct tc_json_schema {
    const char *name;                   /* the object's name in docs/cli.md */
    const struct tc_json_field *fields; /* ends with a NULL key */
    int with_status;                    /* also struct tcgpu_status's fields (ctl_status_fields) */
};

/* A process's status reply (gpuckpt status, and the "status" of an operation's result). */
extern const struct tc_json_schema tc_json_status_schema;
/* tcgpud's messages: a job and a device of `ps`, an event of `events`. */
extern const struct tc_json_schema tc_json_job_schema;
extern const struct tc_json_schema tc_json_device_schema;
extern const struct tc_json_schema tc_json_event_schema;

/* The type of key in s (TC_JSON_STRING when s does not list it). */
enum tc_json_type tc_json_type_of(const struct tc_json_schema *s, const char *key);

/* value as JSON of type t: a new reference (null when it does not parse), NULL without memory. */
json_t *tc_json_value(const char *value, enum tc_json_type t);

/* Every field of m, typed by s, in m's order: a new object, or NULL without memory. */
json_t *tc_json_from_msg(const struct ctl_msg *m, const struct tc_json_schema *s);

#endif
