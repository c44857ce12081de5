/*
 * settings.c - libtcgpu.so's settings, read from the environment (see
 * settings.h; the rows are settings.def's). The only file of lib/ that
 * calls getenv (tests/unit/test_layout.py checks it).
 */
#include "settings.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "engine/pipeline.h"
#include "image/image.h"

/* The longest TEXT value taken, with its NUL: a path's. */
#define TEXT_MAX PATH_MAX

enum setting_type { SETTING_TEXT, SETTING_SWITCH, SETTING_BIT, SETTING_COUNT, SETTING_NUMBER,
                    SETTING_CNUMBER };

struct setting {
    const char *name;
    enum setting_type type;
    size_t offset;                /* of its member in struct tcgpu_settings */
    const char *dflt;
};

static const struct setting table[] = {
#define SETTING(name, type, field, dflt, ...) \
    { #name, SETTING_##type, offsetof(struct tcgpu_settings, field), dflt },
#include "settings.def"
#undef SETTING
};

enum {
    TEXT_SETTINGS = 0
#define SETTING(name, type, ...) + (SETTING_##type == SETTING_TEXT)
#include "settings.def"
#undef SETTING
};

static struct tcgpu_settings current;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

/* Copies of the TEXT values the environment gave, one after the other: it
 * never fills up (each is shorter than TEXT_MAX), and only the pages its
 * values need are ever touched. */
static char text_pool[TEXT_SETTINGS * TEXT_MAX];
static size_t text_used;

static bool read_text(const char *v, const char **out)
{
    size_t len = strlen(v);

    if (len >= TEXT_MAX)
        return false;             /* said by complain_too_long() */
    *out = memcpy(text_pool + text_used, v, len + 1);
    text_used += len + 1;
    return true;
}

static bool read_switch(const char *v, int *out)
{
    if (!*v)
        return false;
    *out = strcmp(v, "0") ? 1 : -1;
    return true;
}

static bool read_bit(const char *v, int *out)
{
    if (strcmp(v, "0") && strcmp(v, "1"))
        return false;
    *out = *v == '1' ? 1 : -1;
    return true;
}

static bool read_count(const char *v, unsigned *out)
{
    char *end;
    unsigned long n;

    if (!*v)
        return false;
    n = strtoul(v, &end, 10);
    if (*end || n == 0)
        return false;
    *out = (unsigned)n;
    return true;
}

static bool read_number(const char *v, int base, unsigned long long *out)
{
    if (!*v)
        return false;
    *out = strtoull(v, NULL, base);
    return true;
}

/* Reads v (not NULL) as s's type into its member; false when v does not
 * count (empty, or not of the type), the member then untouched. */
static bool read_as(const struct setting *s, const char *v)
{
    void *at = (char *)&current + s->offset;

    switch (s->type) {
    case SETTING_TEXT:
        return read_text(v, at);
    case SETTING_SWITCH:
        return read_switch(v, at);
    case SETTING_BIT:
        return read_bit(v, at);
    case SETTING_COUNT:
        return read_count(v, at);
    case SETTING_NUMBER:
        return read_number(v, 10, at);
    case SETTING_CNUMBER:
        return read_number(v, 0, at);
    }
    return false;
}

/* A member that neither the variable nor its default set: 0, or "". */
static void clear(const struct setting *s)
{
    void *at = (char *)&current + s->offset;

    switch (s->type) {
    case SETTING_TEXT:
        *(const char **)at = "";
        break;
    case SETTING_SWITCH:
    case SETTING_BIT:
        *(int *)at = 0;
        break;
    case SETTING_COUNT:
        *(unsigned *)at = 0;
        break;
    case SETTING_NUMBER:
    case SETTING_CNUMBER:
        *(unsigned long long *)at = 0;
        break;
    }
}

/* The default, as the value of an unset variable. A TEXT default is the
 * table's own string. */
static void read_default(const struct setting *s)
{
    if (s->type == SETTING_TEXT)
        *(const char **)((char *)&current + s->offset) = s->dflt;
    else if (!read_as(s, s->dflt))
        clear(s);
}

static void parse_environment(void)
{
    text_used = 0;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const char *v = getenv(table[i].name);

        /* TEXT keeps an empty value; the other types read it as unset */
        if (!v || !read_as(&table[i], v))
            read_default(&table[i]);
    }
}

/* Once the log has its level: the values too long to take. */
static void complain_too_long(void)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        const char *v = getenv(table[i].name);

        if (table[i].type == SETTING_TEXT && v && strlen(v) >= TEXT_MAX)
            log_err("%s is longer than %d bytes: ignored (read as \"%s\")", table[i].name,
                    TEXT_MAX - 1, table[i].dflt);
    }
}

/* The parts below core that take a setting at start rather than an option
 * per call. */
static void hand_out(void)
{
    tcgpu_log_set_level(tcgpu_log_level_named(current.log));
    tcgpu_driver_set_path(current.real_libcuda);
    tcgpu_gate_set_membarrier(current.gate_no_membarrier <= 0);
}

static void read_settings(void)
{
    parse_environment();
    hand_out();
}

static void load_first(void)
{
    read_settings();
    complain_too_long();          /* once: a forked child has nothing new to say */
    pthread_atfork(NULL, NULL, read_settings);
}

void settings_load(void)
{
    pthread_once(&loaded, load_first);
}

void settings_reload(void)
{
    settings_load();
    read_settings();
}

const struct tcgpu_settings *settings_get(void)
{
    settings_load();
    return &current;
}

void settings_pipe_opts(struct pipe_opts *o)
{
    const struct tcgpu_settings *s = settings_get();

    o->chunk_size = (size_t)s->chunk_kb << 10;
    o->workers = s->workers;
    o->slot_size = (size_t)s->slot_mb << 20;
    o->slots = s->slots;
    o->block_size = (size_t)s->block_kb << 10;
    /* TCGPU_DEVICE_HELPERS "0" (-1): never (1); "1" (1): the twin too (-1) */
    o->no_helpers = -s->device_helpers;
    o->device_hash = s->device_hash;
    o->patch_xor = s->patch_xor;
    o->prefault = s->prefault;
    o->store_thp = s->store_thp;
    o->host_register = s->host_register;
}

unsigned settings_image_flags(void)
{
    const struct tcgpu_settings *s = settings_get();

    return (s->io_uring < 0 ? IMAGE_NO_URING : 0) | (s->io_direct < 0 ? IMAGE_NO_DIRECT : 0);
}
