/*
 * subreaper CMD [ARG...]: execs CMD as a child subreaper (PR_SET_CHILD_SUBREAPER,
 * kept across execve). What CMD's children leave behind (the job under a
 * `gpuckpt run` that was killed, a tree CRIU restored) then becomes CMD's child
 * instead of init's, and once CMD's shell reaps it its CPU time is counted as
 * CMD's (`times`): run.sh's "the rest of the machine" is the machine less the
 * bench, not less the part of the bench that stayed its descendants.
 */
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: subreaper CMD [ARG...]\n");
        return 2;
    }
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        perror("subreaper: PR_SET_CHILD_SUBREAPER (orphans' CPU will count as the machine's)");
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
