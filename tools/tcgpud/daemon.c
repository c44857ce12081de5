/* tcgpud's loop state and the lookups every file of the loop makes in it; see daemon.h. */
#include <stdint.h>

#include "daemon.h"

struct daemon d = { .listen_fd = -1, .sig_fd = -1 };

struct pol_actions acts;

struct djob *job_of(pid_t pid)
{
    for (size_t i = 0; i < d.njobs; i++)
        if (d.jobs[i].pid == pid)
            return &d.jobs[i];
    return NULL;
}

const char *project_name(int idx)
{
    const struct pol_project *p = policy_project(d.pol, idx);
    return p ? p->name : "?";
}

const char *display_state(const struct pol_job *pj)
{
    if (pj->state == POL_RUNNING && pj->req != POL_REQ_NONE)
        return "waiting";
    return pol_state_name(pj->state);
}
