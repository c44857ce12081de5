/*
 * probe_plugin.c - a CRIU plugin for the ownership test (plugin.sh): it
 * records every pid CRIU hands it and claims each (returns 0), as NVIDIA's
 * cuda_plugin does with any process. Loaded after tcgpu_plugin, it must
 * never see a tcgpu process. $PROBE_LOG names its log; it is named "probe".
 */
#include <stdio.h>
#include <stdlib.h>

#include "criu-plugin.h"

static void note(const char *what, int pid)
{
    const char *log = getenv("PROBE_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;

    if (f) {
        fprintf(f, "%s %d\n", what, pid);
        fclose(f);
    }
}

static int pause_devices(int pid)
{
    note("pause", pid);
    return 0;
}

static int checkpoint_devices(int pid)
{
    note("checkpoint", pid);
    return 0;
}

static int resume_devices_late(int pid)
{
    note("resume", pid);
    return 0;
}

CR_PLUGIN_REGISTER_DUMMY("probe")
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__PAUSE_DEVICES, pause_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__CHECKPOINT_DEVICES, checkpoint_devices)
CR_PLUGIN_REGISTER_HOOK(CR_PLUGIN_HOOK__RESUME_DEVICES_LATE, resume_devices_late)
