/*
 * fork_in_thread - a stand-in for the gpuckpt that tcgpud runs as root
 * (TCGPU_GPUCKPT; tcgpud_abandon.sh) whose child was forked by a thread
 * other than the main one: the kernel lists that child under the thread
 * (/proc/PID/task/TID/children), not under the main thread.
 *
 *   fork_in_thread ... -D DIR ...    (tcgpud's arguments; only DIR is used)
 *
 * A second thread forks a child that sleeps until it is killed, and writes
 * the child's pid to DIR/forked.pid (whole: through a rename); then both
 * threads sleep until the program is killed (the thread lives on: when it
 * exits, the kernel hands its children to the main thread). Exit 1 on any
 * failure.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *dir;

static int fork_and_record(void)
{
    char tmp[PATH_MAX], path[PATH_MAX];
    pid_t child;
    FILE *f;

    if ((child = fork()) == 0)
        for (;;)
            pause();
    if (child < 0)
        return -1;
    snprintf(tmp, sizeof(tmp), "%s/forked.pid.tmp", dir);
    snprintf(path, sizeof(path), "%s/forked.pid", dir);
    if (!(f = fopen(tmp, "w")))
        return -1;
    fprintf(f, "%d\n", (int)child);
    if (fclose(f) != 0 || rename(tmp, path) < 0)
        return -1;
    return 0;
}

static void *forking_thread(void *unused)
{
    (void)unused;
    if (fork_and_record() < 0) {
        perror("fork_in_thread: the thread could not fork and record its child");
        exit(1);
    }
    for (;;)
        pause();
}

int main(int argc, char **argv)
{
    pthread_t t;

    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "-D"))
            dir = argv[i + 1];
    if (!dir) {
        fprintf(stderr, "fork_in_thread: no -D DIR\n");
        return 1;
    }
    if (pthread_create(&t, NULL, forking_thread, NULL) != 0) {
        fprintf(stderr, "fork_in_thread: cannot start a thread\n");
        return 1;
    }
    for (;;)
        pause();
}
