/*
 * slurmapi.c - what tcgpu-slurm asks slurmctld, through libslurm
 * (slurm/slurm.h from libslurm-dev); see tcgpu_slurm.h.
 *
 * The grace-time signal of a preemption (SIGTERM, and the --signal one
 * with preempt_send_user_signal) is the signal scancel and the time limit
 * send too: only slurmctld knows which it was. It records the preemption
 * in the job (preempt_time) before it signals the job, so a wrapper that
 * asks after the signal arrived gets the truth.
 */
#include <errno.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "tcgpu_slurm.h"

static void init_once(void)
{
    static int done;

    if (!done) {
        slurm_init(NULL);       /* SLURM_CONF, else the default slurm.conf */
        done = 1;
    }
}

/* The job's record; the caller frees *msg. 0 or -errno (said, unless ENOENT). */
static int load_job(uint32_t job_id, job_info_msg_t **msg)
{
    init_once();
    if (slurm_load_job(msg, job_id, SHOW_DETAIL) != SLURM_SUCCESS) {
        int e = slurm_get_errno();
        if (e == ESLURM_INVALID_JOB_ID)
            return -ENOENT;
        log_err("cannot ask slurmctld about job %u: %s", job_id, slurm_strerror(e));
        return -EIO;
    }
    if ((*msg)->record_count < 1) {
        slurm_free_job_info_msg(*msg);
        return -ENOENT;
    }
    return 0;
}

int ts_job_preempted(uint32_t job_id)
{
    job_info_msg_t *msg;
    int r = load_job(job_id, &msg);

    if (r < 0)
        return r;
    r = msg->job_array[0].preempt_time != 0;
    slurm_free_job_info_msg(msg);
    return r;
}

int ts_job_requeue(uint32_t job_id)
{
    init_once();
    if (slurm_requeue(job_id, 0) != SLURM_SUCCESS) {
        int e = slurm_get_errno();
        /* another task of the job asked first */
        if (e == ESLURM_JOB_PENDING || e == ESLURM_TRANSITION_STATE_NO_UPDATE)
            return 0;
        log_err("cannot requeue job %u: %s", job_id, slurm_strerror(e));
        return -EIO;
    }
    return 0;
}

int ts_job_over(uint32_t job_id)
{
    job_info_msg_t *msg;
    uint32_t state;
    int r = load_job(job_id, &msg);

    if (r == -ENOENT)
        return 1;               /* purged: long over */
    if (r < 0)
        return r;
    state = msg->job_array[0].job_state;
    /* a requeued job passes through a completing state with the requeue flag */
    r = !(state & (JOB_REQUEUE | JOB_REQUEUE_HOLD | JOB_REQUEUE_FED)) &&
        (state & JOB_STATE_BASE) >= JOB_COMPLETE;
    slurm_free_job_info_msg(msg);
    return r;
}
