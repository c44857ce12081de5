/*
 * save.h - the privileged path of gpuckpt save and restore (save.c): an
 * ordinary user's own process trees, saved and restored with CRIU by tcgpud.
 */
#ifndef TCGPU_TCGPUD_SAVE_H
#define TCGPU_TCGPUD_SAVE_H

#include "ctl/proto.h"
#include "daemon.h"

/* The requests save and restore of connection ci: answered, or handed to a
 * thread of their own that answers (the job argument is unused). */
void priv_save(int ci, const struct ctl_msg *m, struct djob *unused);
void priv_restore(int ci, const struct ctl_msg *m, struct djob *unused);

#endif
