/*
 * split.c - ncclCommSplit: a new communicator of the ranks of comm that give
 * the same color, ranked by key (ties by their rank in comm), as NCCL
 * documents. Collective over comm: every rank calls it, one that wants no
 * new communicator with NCCL_SPLIT_NOCOLOR.
 *
 * The ranks meet in comm's rendezvous segment: each writes its color and
 * key into its rank_info, a barrier; each group's new rank 0 makes a unique
 * id and writes it there too, a barrier; every member copies its group's id,
 * a last barrier (so that a rank's next split cannot overwrite what a slower
 * peer still reads). Then the new communicator is an init with that id on
 * comm's context: what NCCL does without a unique id from the program,
 * built from simnccl's own parts.
 */
#include "simnccl.h"

#include <string.h>

/* Where the rank of comm whose info is mine goes: the members of color and
 * this rank's new rank among them (lower key first, ties by old rank). */
static void place(const struct snccl_seg *s, int nranks, int me, int *members, int *newrank)
{
    const struct snccl_rank_info *mine = &s->ranks[me];

    *members = 0;
    *newrank = 0;
    for (int p = 0; p < nranks; p++) {
        const struct snccl_rank_info *o = &s->ranks[p];
        if (o->split_color != mine->split_color)
            continue;
        (*members)++;
        if (o->split_key < mine->split_key || (o->split_key == mine->split_key && p < me))
            (*newrank)++;
    }
}

/* The group's new rank 0 in comm (its id is there). */
static int leader(const struct snccl_seg *s, int nranks, int me)
{
    int best = me;

    for (int p = 0; p < nranks; p++) {
        const struct snccl_rank_info *o = &s->ranks[p], *b = &s->ranks[best];
        if (o->split_color == s->ranks[me].split_color &&
            (o->split_key < b->split_key || (o->split_key == b->split_key && p < best)))
            best = p;
    }
    return best;
}

/* The exchange in comm's segment: *id gets the group's id (color not
 * NOCOLOR), *members and *newrank its size and this rank's place. */
static ncclResult_t exchange(struct ncclComm *comm, int color, int key, ncclUniqueId *id,
                             int *members, int *newrank)
{
    struct snccl_seg *s = comm->seg;
    struct snccl_rank_info *me = &s->ranks[comm->rank];
    ncclResult_t rc;

    me->split_color = color;
    me->split_key = key;
    if ((rc = snccl_barrier(comm)))
        return rc;
    place(s, comm->nranks, comm->rank, members, newrank);
    if (color != NCCL_SPLIT_NOCOLOR && *newrank == 0) {
        if ((rc = snccl_get_unique_id(id)))
            return rc;
        memcpy(&me->split_id, id->internal, sizeof(me->split_id));
    }
    if ((rc = snccl_barrier(comm)))
        return rc;
    if (color != NCCL_SPLIT_NOCOLOR) {
        memset(id, 0, sizeof(*id));
        memcpy(id->internal, &s->ranks[leader(s, comm->nranks, comm->rank)].split_id,
               sizeof(struct snccl_id));
    }
    return snccl_barrier(comm);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    ncclUniqueId id;
    int members = 0, newrank = 0;
    ncclResult_t rc;
    CUresult r;

    if (!newcomm)
        return snccl_fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    *newcomm = NULL;
    if ((rc = snccl_ready(comm, "ncclCommSplit")))
        return rc;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return snccl_fail(ncclInvalidArgument, "ncclCommSplit: color %d (>= 0 or NCCL_SPLIT_NOCOLOR)", color);
    if (snccl_group_depth() > 0)
        return snccl_fail(ncclInvalidUsage, "ncclCommSplit: inside a group (not simulated)");
    __atomic_add_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);      /* an abort waits for us */
    rc = exchange(comm, color, key, &id, &members, &newrank);
    __atomic_sub_fetch(&comm->busy, 1, __ATOMIC_ACQ_REL);
    if (rc || color == NCCL_SPLIT_NOCOLOR)
        return rc;
    if ((r = cuCtxPushCurrent(comm->ctx)))
        return snccl_cu(r, "cuCtxPushCurrent");
    rc = snccl_comm_init(newcomm, members, id, newrank, config);
    cuCtxPopCurrent(NULL);
    return rc;
}
