/*
 * test_settings.c - libtcgpu.so's settings (lib/core/settings.h): the
 * environment read once into one struct, by the types of settings.def.
 *
 *   defaults    every variable unset: each member is its row's default
 *   types       TEXT keeps an empty value; SWITCH, BIT, COUNT, NUMBER and
 *               CNUMBER read values and non-values as settings.def says
 *   too-long    a TEXT value of a path's length or more reads as its
 *               default; one byte shorter is taken
 *   once        the environment changed later changes nothing until a
 *               reload; a forked child reads it again
 *   options     what the layers below get: the engine's pipe_opts, the image
 *               writer's flags, the log's level, the gate's mode
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "core/settings.h"
#include "driver/gate.h"
#include "engine/pipeline.h"
#include "image/image.h"
#include "../common/check.h"

/* Every variable of the table unset, then read again. */
static void reload_without_environment(void)
{
#define SETTING(name, ...) unsetenv(#name);
#include "core/settings.def"
#undef SETTING
    settings_reload();
}

/* NAME=value (NULL: unset), then the settings read again. */
static const struct tcgpu_settings *with(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    settings_reload();
    return settings_get();
}

static int test_defaults(void)
{
    const struct tcgpu_settings *s;

    reload_without_environment();
    s = settings_get();
    CHECK(!strcmp(s->signal, "RTMIN+4") && !strcmp(s->signal_action, "toggle"));
    CHECK(!strcmp(s->checkpoint_dir, "") && !strcmp(s->run_dir, "") && !strcmp(s->project, ""));
    CHECK(!strcmp(s->log, "info") && !strcmp(s->real_libcuda, "libcuda.so.1"));
    CHECK(s->gate_timeout_ms == 10000, "%llu", s->gate_timeout_ms);
    CHECK(s->trace_alloc == -1 && s->trace_alloc_min == 1u << 20);
    CHECK(s->host_compress == -1 && s->device_helpers == 0 && s->device_hash == 0);
    CHECK(s->prefault == 1 && s->host_register == 1 && s->store_thp == 0 && s->patch_xor == 0);
    CHECK(s->io_uring == 1 && s->io_direct == 1 && s->gate_no_membarrier == -1);
    CHECK(s->workers == 0 && s->slots == 0 && s->chunk_kb == 0 && s->block_kb == 0);
    CHECK(s->host_keep_poll_ms == 0);
    return 0;
}

static int test_types(void)
{
    reload_without_environment();
    /* TEXT: the value itself, an empty one kept (TCGPU_SIGNAL= is "off") */
    CHECK(!strcmp(with("TCGPU_CHECKPOINT_DIR", "/ckpt")->checkpoint_dir, "/ckpt"));
    CHECK(!strcmp(with("TCGPU_SIGNAL", "")->signal, ""));
    CHECK(!strcmp(with("TCGPU_SIGNAL", NULL)->signal, "RTMIN+4"));
    /* SWITCH: "0" off, anything else on, empty as unset */
    CHECK(with("TCGPU_PATCH_XOR", "0")->patch_xor == -1);
    CHECK(with("TCGPU_PATCH_XOR", "yes")->patch_xor == 1);
    CHECK(with("TCGPU_PATCH_XOR", "")->patch_xor == 0);
    CHECK(with("TCGPU_PREFAULT", "")->prefault == 1);
    CHECK(with("TCGPU_PREFAULT", "0")->prefault == -1);
    /* BIT: only "1" and "0" count */
    CHECK(with("TCGPU_HOST_COMPRESS", "1")->host_compress == 1);
    CHECK(with("TCGPU_HOST_COMPRESS", "yes")->host_compress == -1);
    CHECK(with("TCGPU_DEVICE_HELPERS", "yes")->device_helpers == 0);
    CHECK(with("TCGPU_DEVICE_HELPERS", "0")->device_helpers == -1);
    CHECK(with("TCGPU_DEVICE_HELPERS", "1")->device_helpers == 1);
    /* COUNT: a positive decimal number, the whole value */
    CHECK(with("TCGPU_WORKERS", "8")->workers == 8);
    CHECK(with("TCGPU_WORKERS", "8x")->workers == 0);
    CHECK(with("TCGPU_WORKERS", "0")->workers == 0);
    /* NUMBER: the digits it starts with; CNUMBER in C's notation */
    CHECK(with("TCGPU_GATE_TIMEOUT_MS", "12ms")->gate_timeout_ms == 12);
    CHECK(with("TCGPU_GATE_TIMEOUT_MS", "x")->gate_timeout_ms == 0);
    CHECK(with("TCGPU_GATE_TIMEOUT_MS", "")->gate_timeout_ms == 10000);
    CHECK(with("TCGPU_GATE_TIMEOUT_MS", "010")->gate_timeout_ms == 10);
    CHECK(with("TCGPU_TRACE_ALLOC_MIN", "0x100")->trace_alloc_min == 256);
    CHECK(with("TCGPU_TRACE_ALLOC_MIN", "010")->trace_alloc_min == 8);
    return 0;
}

static int test_too_long(void)
{
    static char v[PATH_MAX + 1];

    reload_without_environment();
    memset(v, 'd', PATH_MAX);
    v[0] = '/';
    CHECK(!strcmp(with("TCGPU_RUN_DIR", v)->run_dir, ""), "a value of %d bytes taken", PATH_MAX);
    CHECK(!strcmp(with("TCGPU_REAL_LIBCUDA", v)->real_libcuda, "libcuda.so.1"));
    v[PATH_MAX - 1] = '\0';
    CHECK(!strcmp(with("TCGPU_RUN_DIR", v)->run_dir, v), "a value of %d bytes refused",
          PATH_MAX - 1);
    /* every TEXT value has its room: the longest, all at once */
    setenv("TCGPU_CHECKPOINT_DIR", v, 1);
    CHECK(!strcmp(with("TCGPU_REAL_LIBCUDA", v)->real_libcuda, v) &&
          !strcmp(settings_get()->checkpoint_dir, v) && !strcmp(settings_get()->run_dir, v));
    return 0;
}

static int test_once(void)
{
    pid_t child;
    int status;

    reload_without_environment();
    REQUIRE(with("TCGPU_SLOTS", "3")->slots == 3);
    setenv("TCGPU_SLOTS", "6", 1);
    CHECK(settings_get()->slots == 3, "read again without a reload: %u", settings_get()->slots);
    child = fork();
    REQUIRE(child >= 0);
    if (child == 0)
        _exit(settings_get()->slots == 6 ? 0 : 1);
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a forked child kept its parent's settings");
    CHECK(settings_get()->slots == 3);
    return 0;
}

static int test_options(void)
{
    struct pipe_opts o = { .slots = 99 };

    reload_without_environment();
    settings_pipe_opts(&o);
    CHECK(o.slots == 0 && o.chunk_size == 0 && o.no_helpers == 0 && o.prefault == 1,
          "defaults: slots %u, chunk %zu, no_helpers %d", o.slots, o.chunk_size, o.no_helpers);
    setenv("TCGPU_CHUNK_KB", "8", 1);
    setenv("TCGPU_SLOT_MB", "2", 1);
    setenv("TCGPU_BLOCK_KB", "16", 1);
    setenv("TCGPU_DEVICE_HASH", "0", 1);
    with("TCGPU_DEVICE_HELPERS", "0");
    settings_pipe_opts(&o);
    CHECK(o.chunk_size == 8 << 10 && o.slot_size == 2 << 20 && o.block_size == 16 << 10);
    CHECK(o.no_helpers == 1 && o.device_hash == -1, "never: %d %d", o.no_helpers, o.device_hash);
    with("TCGPU_DEVICE_HELPERS", "1");
    settings_pipe_opts(&o);
    CHECK(o.no_helpers == -1, "the twin too: %d", o.no_helpers);

    CHECK(settings_image_flags() == 0);
    with("TCGPU_IO_URING", "0");
    CHECK(settings_image_flags() == IMAGE_NO_URING);
    with("TCGPU_IO_DIRECT", "0");
    CHECK(settings_image_flags() == (IMAGE_NO_URING | IMAGE_NO_DIRECT));

    with("TCGPU_LOG", "debug");
    CHECK(tcgpu_log_enabled(TCGPU_LOG_DEBUG));
    with("TCGPU_LOG", "quiet");
    CHECK(!tcgpu_log_enabled(TCGPU_LOG_INFO) && tcgpu_log_enabled(TCGPU_LOG_ERROR));
    /* the gate takes its mode before its first use (nothing here used it) */
    with("TCGPU_GATE_NO_MEMBARRIER", "1");
    CHECK(!tcgpu_gate_uses_membarrier());
    return 0;
}

int main(void)
{
    RUN(test_defaults);
    RUN(test_types);
    RUN(test_too_long);
    RUN(test_once);
    RUN(test_options);
    return T_EXIT_STATUS();
}
