/*
 * dashboard.h - what the dashboard shows (dashboard.c; GET /api/state).
 */
#ifndef TCGPU_TCGPUD_DASHBOARD_H
#define TCGPU_TCGPUD_DASHBOARD_H

/* Every tick: one sample of the memory history, the state for /api/state. */
void dashboard_tick(void);

#endif
