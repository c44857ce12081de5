/*
 * plugin.c - tcgpu_plugin.so's face to CRIU: its descriptor, init and fini,
 * and the hooks (internal.h says what each does).
 */
#include <errno.h>

#include "internal.h"
#include "criu-plugin.h"

static struct tp_config config;
static int stage_now = -1;      /* CR_PLUGIN_STAGE__*, -1 while disabled */

static int tcgpu_init(int stage)
{
    int r;

    tp_log_setup();
    stage_now = -1;
    if (stage == CR_PLUGIN_STAGE__PRE_DUMP)
        return 0;               /* pre-dump copies memory pages only: the GPU waits for the dump */
    if ((r = tp_config_load(&config)) < 0)
        return r;
    if (stage == CR_PLUGIN_STAGE__DUMP)
        r = tp_dump_init(&config);
    else if (stage == CR_PLUGIN_STAGE__RESTORE)
        r = tp_restore_init(&config);
    if (r == 0)
        stage_now = stage;
    return r;
}

static void tcgpu_fini(int stage, int ret)
{
    if (stage_now == CR_PLUGIN_STAGE__DUMP)
        tp_dump_fini(ret);
    else if (stage_now == CR_PLUGIN_STAGE__RESTORE)
        tp_restore_fini();
    stage_now = -1;
}

static int pause_devices(int pid)
{
    return stage_now == CR_PLUGIN_STAGE__DUMP ? tp_dump_pause(pid) : -ENOTSUP;
}

static int checkpoint_devices(int pid)
{
    /* taken off the GPU at PAUSE_DEVICES already; claimed, so no later plugin acts on it */
    return stage_now == CR_PLUGIN_STAGE__DUMP && tp_dump_owns(pid) ? 0 : -ENOTSUP;
}

static int resume_devices_late(int pid)
{
    return stage_now == CR_PLUGIN_STAGE__RESTORE ? tp_restore_resume(pid) : -ENOTSUP;
}

CR_PLUGIN_REGISTER(TP_NAME, tcgpu_init, tcgpu_fini)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, pause_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, checkpoint_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, resume_devices_late)
