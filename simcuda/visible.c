/*
 * visible.c - CUDA_VISIBLE_DEVICES: which of the machine's devices this
 * process sees, and in which order (docs/simcuda.md, "Devices").
 *
 * As the real driver: the variable is read once, at cuInit. Unset, every
 * device is visible in machine order. Set, it is a comma-separated list of
 * device indices or UUIDs ("GPU-8a3059da-aa3b-563d-abab-0e5a879bb0eb", or
 * any unique prefix of one, dashes optional); the process's ordinal N is the
 * N-th entry. The list ends at the first entry that names no device, a
 * device already listed, or an ambiguous prefix: the entries before it
 * count. No visible device (an empty list, "-1", "", "NoDevFiles") makes
 * cuInit fail with CUDA_ERROR_NO_DEVICE.
 *
 * Everything a process sees by ordinal (CUdevice) is remapped here and
 * only here: the machine's accounting (shm.c) is by physical index, and a
 * device's UUID and PCI bus id belong to the physical device, so they are
 * the same whatever ordinal a process gives it.
 */
#include "sim.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int nvisible;
static int phys_of[SIM_MAX_DEVICES];

/* The UUID of physical device phys of machine `name` (shm.c's hash of the
 * two): the GPUs of two machines differ. */
void sim_device_uuid_phys_of(const char *name, int phys, CUuuid *u)
{
    sim_device_uuid(name, phys, (unsigned char *)u->bytes);
}

void sim_device_uuid_phys(int phys, CUuuid *u)
{
    sim_device_uuid_phys_of(sim_shm_name(), phys, u);
}

/* A UUID entry's hex digits (after "GPU-", dashes dropped), lower case, into hex. */
static int uuid_digits(const char *s, size_t n, char *hex, size_t cap)
{
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        if (s[i] == '-')
            continue;
        if (!isxdigit((unsigned char)s[i]) || k + 1 >= cap)
            return -1;
        hex[k++] = (char)tolower((unsigned char)s[i]);
    }
    hex[k] = '\0';
    return k ? 0 : -1;
}

/* The physical device a UUID entry names: its index, -1 (none or ambiguous). */
static int by_uuid(const char *s, size_t n, int ndev)
{
    char want[40], have[33];
    int found = -1;

    if (uuid_digits(s, n, want, sizeof(want)) < 0)
        return -1;
    for (int d = 0; d < ndev; d++) {
        CUuuid u;
        sim_device_uuid_phys(d, &u);
        for (int i = 0; i < 16; i++)
            snprintf(have + 2 * i, 3, "%02x", (unsigned char)u.bytes[i]);
        if (!strncmp(have, want, strlen(want))) {
            if (found >= 0)
                return -1;      /* a prefix two devices share names neither */
            found = d;
        }
    }
    return found;
}

/* The physical device one entry names, or -1. */
static int parse_entry(const char *s, size_t n, int ndev)
{
    char num[16];
    char *end;
    long v;

    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (n > 4 && !strncmp(s, "GPU-", 4))
        return by_uuid(s + 4, n - 4, ndev);
    if (!n || n >= sizeof(num) || !isdigit((unsigned char)*s))
        return -1;
    memcpy(num, s, n);
    num[n] = '\0';
    v = strtol(num, &end, 10);
    return *end || v >= ndev ? -1 : (int)v;
}

int sim_visible_init(int ndev)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");

    nvisible = 0;
    if (!env) {
        for (int d = 0; d < ndev; d++)
            phys_of[nvisible++] = d;
        return nvisible;
    }
    for (const char *s = env; nvisible < ndev;) {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        int d = parse_entry(s, n, ndev), dup = 0;

        for (int i = 0; i < nvisible; i++)
            dup |= phys_of[i] == d;
        if (d < 0 || dup)
            break;
        phys_of[nvisible++] = d;
        if (!comma)
            break;
        s = comma + 1;
    }
    return nvisible;
}

int sim_device_count(void)
{
    return sim_shm ? nvisible : 0;
}

void sim_visible_remap(const int *phys)
{
    for (int v = 0; v < nvisible; v++)
        phys_of[v] = phys[v];
}

int sim_device_phys(CUdevice dev)
{
    return phys_of[dev];
}
