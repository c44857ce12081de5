/*
 * ending_thread.c - preloaded beside libtcgpu.so by plugin.sh's
 * ending-thread test: a thread named like tcgpu's operation worker (as a
 * thread that worker starts inherits its name) that ends by itself once
 * the file $ENDING_THREAD_FILE exists. The file appears after the dump: at
 * the restore the thread ends as soon as it runs. The plugin must not be
 * the one that lets it run (only CRIU, once the task is whole), or CRIU's
 * detach finds it gone and fails the restore.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *until_file(void *arg)
{
    const char *path = arg;
    struct timespec tick = { 0, 10 * 1000 * 1000 };

    while (access(path, F_OK) != 0)
        nanosleep(&tick, NULL);
    return NULL;
}

__attribute__((constructor)) static void start_ending_thread(void)
{
    const char *path = getenv("ENDING_THREAD_FILE");
    pthread_t th;

    if (path && pthread_create(&th, NULL, until_file, (void *)path) == 0) {
        pthread_setname_np(th, "tcgpu-ops");
        pthread_detach(th);
    }
}
