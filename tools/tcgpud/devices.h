/*
 * devices.h - the GPUs tcgpud manages and their capacities (devices.c).
 */
#ifndef TCGPU_TCGPUD_DEVICES_H
#define TCGPU_TCGPUD_DEVICES_H

#include <stddef.h>

#include "ctl/proto.h"

/*
 * Put the GPUs tcgpud manages into the policy: [gpu N] capacity where
 * configured (at most the device's memory), else the device's memory as the
 * driver reports it to a child process. Returns how many, or -EINVAL.
 */
int learn_devices(void);
/*
 * The GPU a job's message names: uuid= (the device's UUID, 32 hex digits:
 * a job's ordinals are remapped by CUDA_VISIBLE_DEVICES) when tcgpud knows
 * the UUIDs, else device= (default 0). 0 with *dev, or -EINVAL (malformed),
 * -ENODEV (not a GPU tcgpud manages), with why.
 */
int job_device(const struct ctl_msg *m, int *dev, char *why, size_t len);
/* GPU idx's UUID as nvidia-smi writes it ("GPU-xxxxxxxx-xxxx-..."), for ps
 * and the state file; "" when the driver did not show tcgpud that GPU. */
#define DEVICE_UUID_TEXT_LEN 41
void device_uuid_text(int idx, char out[DEVICE_UUID_TEXT_LEN]);
/* The GPU whose UUID text that is, or -ENODEV. */
int device_of_uuid_text(const char *text);

#endif
