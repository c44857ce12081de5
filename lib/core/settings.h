/*
 * settings.h - libtcgpu.so's settings: every variable of its environment
 * (settings.def lists them, with their defaults and docs), parsed once into
 * one struct. Nothing else in lib/ reads the environment: lib/core reads
 * this struct and hands the layers below their part as options (design
 * decision 19).
 *
 * When: settings_load() once, from libtcgpu.so's constructor (interpose/)
 * or from the first settings_get(); again in a forked child (settings_load
 * registers that with pthread_atfork), which sees the environment the
 * parent had when it forked. A program that changes its environment later
 * does not change tcgpu's settings.
 *
 * A bad value does not stop the program: the part that uses a TEXT setting
 * says what is wrong with it when it uses it, as it did reading the
 * variable; numbers and switches read as settings.def says.
 */
#ifndef TCGPU_CORE_SETTINGS_H
#define TCGPU_CORE_SETTINGS_H

/* The C type of each TYPE of settings.def. */
#define SETTING_C_TEXT    const char *
#define SETTING_C_SWITCH  int
#define SETTING_C_BIT     int
#define SETTING_C_COUNT   unsigned
#define SETTING_C_NUMBER  unsigned long long
#define SETTING_C_CNUMBER unsigned long long

/* One member per row of settings.def, named by its FIELD. */
struct tcgpu_settings {
#define SETTING(name, type, field, ...) SETTING_C_##type field;
#include "settings.def"
#undef SETTING
};

/*
 * Parses the environment into the settings (the first call only: later
 * calls return at once), hands the log its level and the driver its path
 * and gate mode, and registers settings_reload for a forked child.
 * Thread-safe.
 */
void settings_load(void);

/*
 * Parses the environment again and hands it out as settings_load does (a
 * forked child does this itself): for tests that change their environment.
 * Not thread-safe: nothing may read the settings meanwhile. Pointers to
 * TEXT settings taken before are stale.
 */
void settings_reload(void);

/* The settings (settings_load first, if nothing did yet). Never NULL. */
const struct tcgpu_settings *settings_get(void);

struct pipe_opts;

/* The engine's options the settings give (chunk, workers, staging ring,
 * block size, helpers, device hash, patch XOR, the host store's pages);
 * the callbacks and their arguments are left as they are. */
void settings_pipe_opts(struct pipe_opts *o);

/* The image writer's flags the settings give (IMAGE_NO_URING, IMAGE_NO_DIRECT). */
unsigned settings_image_flags(void);

#endif
