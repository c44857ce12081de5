/*
 * commands.h - tcgpud's requests (commands.c): a handler each, and the
 * table that dispatches them (docs/tcgpud.md, "Protocol").
 */
#ifndef TCGPU_TCGPUD_COMMANDS_H
#define TCGPU_TCGPUD_COMMANDS_H

#include <stdint.h>

#include "ctl/proto.h"
#include "daemon.h"

/* Answer the request m on connection ci, if its peer may make it. */
void handle(int ci, const struct ctl_msg *m);
/* A "job" message of ps into b, as ps and the dashboard show a job. */
void put_job(struct ctl_buf *b, const struct djob *j, const struct pol_job *pj, uint64_t now);

#endif
