/*
 * api_user - a "framework" using tcgpu's C API the way tcgpu.h recommends:
 * looked up with dlsym(RTLD_DEFAULT, ...), so the same binary runs with and
 * without libtcgpu.so preloaded.
 *
 *   api_user               exit 0 when every check passed
 *
 * Preloaded, it checks what a framework relies on: suspend from its own
 * thread releases the device memory (status says so, the event callback
 * fires on the thread that asked, as tcgpu.h says), resume brings every byte
 * back at the same address except ranges hinted as not worth saving, a
 * checkpoint writes an image (asked from a second thread too), and errors
 * come back as documented (-EALREADY, -EEXIST with a message). Without the
 * library it only computes, and says that tcgpu is absent.
 */
#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

#include "check.h"

#include "tcgpu.h"

#define N (8u << 20)
#define SKIP_OFF (1u << 20)
#define SKIP_LEN (1u << 20)

struct api {
    int (*suspend)(const char *);
    int (*resume)(void);
    int (*checkpoint)(const char *);
    int (*status)(struct tcgpu_status *);
    int (*get_status)(struct tcgpu_status *, size_t);
    int (*hint_skip)(uint64_t, size_t, int);
    int (*hint_dtype)(uint64_t, size_t, enum tcgpu_dtype);
    int (*set_callback)(tcgpu_event_fn, void *);
    const char *(*last_error)(void);
};

/* The documented pattern: present when libtcgpu.so is preloaded, NULL otherwise. */
static int load_api(struct api *a)
{
    a->suspend = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    a->resume = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");
    a->checkpoint = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_checkpoint");
    a->status = (int (*)(struct tcgpu_status *))dlsym(RTLD_DEFAULT, "tcgpu_status");
    a->get_status = (int (*)(struct tcgpu_status *, size_t))dlsym(RTLD_DEFAULT, "tcgpu_get_status");
    a->hint_skip = (int (*)(uint64_t, size_t, int))dlsym(RTLD_DEFAULT, "tcgpu_hint_skip");
    a->hint_dtype = (int (*)(uint64_t, size_t, enum tcgpu_dtype))dlsym(RTLD_DEFAULT, "tcgpu_hint_dtype");
    a->set_callback = (int (*)(tcgpu_event_fn, void *))dlsym(RTLD_DEFAULT, "tcgpu_set_event_callback");
    a->last_error = (const char *(*)(void))dlsym(RTLD_DEFAULT, "tcgpu_last_error");
    return a->suspend && a->resume && a->checkpoint && a->status && a->hint_skip &&
           a->hint_dtype && a->set_callback && a->last_error && a->get_status;
}

static int events_seen[8];
/* tcgpu.h: the callback runs on the thread that asked for the operation
 * (set before each one); counted here, checked on the main thread. */
static pthread_t asker;
static int events_elsewhere;

static void on_event(enum tcgpu_event ev, enum tcgpu_op op, int result, void *arg)
{
    (void)op;
    (void)result;
    if (arg != (void *)events_seen || !pthread_equal(pthread_self(), asker))
        events_elsewhere++;
    if ((unsigned)ev < 8)
        events_seen[ev]++;
}

struct checkpoint_job {
    struct api *a;
    const char *dir;
    int rc;
};

/* A checkpoint asked by a thread of the program that is not its main one. */
static void *checkpoint_main(void *arg)
{
    struct checkpoint_job *j = arg;

    asker = pthread_self();
    j->rc = j->a->checkpoint(j->dir);
    return NULL;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void fill(unsigned char *h, unsigned seed)
{
    for (size_t i = 0; i < N; i++)
        h[i] = (unsigned char)((i * 2654435761u) >> 13 ^ seed);
}

int main(int argc, char **argv)
{
    unsigned char *want = malloc(N), *got = malloc(N);
    struct tcgpu_status st;
    char tmp[] = "/tmp/tcgpu-api-XXXXXX", image[64], image2[64];
    struct api a;
    CUcontext ctx;
    CUdeviceptr p;

    (void)argv;
    if (argc != 1 || !want || !got || !mkdtemp(tmp)) {
        fprintf(stderr, "usage: api_user\n");
        return 2;
    }
    snprintf(image, sizeof(image), "%s/image", tmp);
    snprintf(image2, sizeof(image2), "%s/image2", tmp);
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuMemAlloc(&p, N), "cuMemAlloc");
    fill(want, 7);
    cu(cuMemcpyHtoD(p, want, N), "cuMemcpyHtoD");

    if (!load_api(&a)) {
        cu(cuMemcpyDtoH(got, p, N), "cuMemcpyDtoH");
        CHECK(memcmp(got, want, N) == 0);
        rmdir(tmp);
        printf("tcgpu not loaded: computed without it\n");
        return failures ? 1 : 0;
    }

    asker = pthread_self();
    CHECK(a.set_callback(on_event, events_seen) == 0);
    CHECK(a.hint_skip(p + SKIP_OFF, SKIP_LEN, 1) == 0);
    CHECK(a.hint_dtype(p, SKIP_OFF, TCGPU_DTYPE_BF16) == 0);
    CHECK(a.hint_skip(0, 16, 1) == -EINVAL);
    CHECK(a.resume() == -EALREADY);                      /* not suspended */
    CHECK(strstr(a.last_error(), "not suspended") != NULL);

    CHECK(a.suspend(NULL) == 0);
    CHECK(a.status(&st) == 0);
    CHECK(st.state == TCGPU_STATE_SUSPENDED);
    CHECK(st.gpu_bytes == 0);
    CHECK(st.tracked_bytes >= N);
    CHECK(st.last_op == TCGPU_OP_SUSPEND && st.last_result == 0);
    CHECK(events_seen[TCGPU_EVENT_SUSPENDED] == 1);
    CHECK(a.suspend(NULL) == -EALREADY);
    CHECK(a.resume() == 0);
    CHECK(events_seen[TCGPU_EVENT_RESUMED] == 1);
    CHECK(a.status(&st) == 0 && st.state == TCGPU_STATE_RUNNING && st.gpu_bytes >= N);

    /* Same address, same bytes, except the range hinted as not worth saving. */
    cu(cuMemcpyDtoH(got, p, N), "cuMemcpyDtoH");
    CHECK(memcmp(got, want, SKIP_OFF) == 0);
    CHECK(memcmp(got + SKIP_OFF + SKIP_LEN, want + SKIP_OFF + SKIP_LEN,
                 N - SKIP_OFF - SKIP_LEN) == 0);

    CHECK(a.checkpoint(image) == 0);
    CHECK(access(image, F_OK) == 0);
    CHECK(events_seen[TCGPU_EVENT_CHECKPOINTED] == 1);
    CHECK(a.checkpoint(image) == -EEXIST);
    CHECK(a.last_error()[0] != '\0');
    CHECK(events_seen[TCGPU_EVENT_FAILED] >= 2);
    CHECK(a.status(&st) == 0 && st.last_op == TCGPU_OP_CHECKPOINT && st.last_result == -EEXIST);
    CHECK(a.resume() == -EALREADY && a.last_error()[0] != '\0');
    {
        /* A caller built against a newer header: a larger struct, whose tail
         * this library does not know, comes back zeroed; a smaller one than
         * release 0.1's is refused; the 0.1 call fills what it always did. */
        struct {
            struct tcgpu_status st;
            uint64_t newer[4];
        } big;
        memset(&big, 0xa5, sizeof(big));
        CHECK(a.get_status(&big.st, sizeof(big)) == 0);
        CHECK(big.st.state == TCGPU_STATE_RUNNING && big.st.last_op == TCGPU_OP_RESUME);
        CHECK(big.newer[0] == 0 && big.newer[3] == 0);
        CHECK(a.get_status(&st, TCGPU_STATUS_SIZE_0_1 - 1) == -EINVAL);
        CHECK(a.get_status(NULL, sizeof(st)) == -EINVAL);
        memset(&st, 0xa5, sizeof(st));
        CHECK(a.status(&st) == 0 && st.last_image_ns == big.st.last_image_ns);
    }
    {
        /* Events come on the thread that asked, whichever it is (tcgpu.h). */
        struct checkpoint_job j = { .a = &a, .dir = image2, .rc = 1 };
        pthread_t th;

        CHECK(pthread_create(&th, NULL, checkpoint_main, &j) == 0 && pthread_join(th, NULL) == 0);
        CHECK(j.rc == 0 && events_seen[TCGPU_EVENT_CHECKPOINTED] == 2);
        asker = pthread_self();
    }
    CHECK(events_elsewhere == 0, "%d events on another thread than the one that asked",
          events_elsewhere);
    /* A successful operation clears the thread's message (tcgpu.h). */
    CHECK(a.suspend(NULL) == 0 && a.last_error()[0] == '\0');
    CHECK(a.resume() == 0);

    /* The program carries on after all of it. */
    fill(want, 9);
    cu(cuMemcpyHtoD(p, want, N), "cuMemcpyHtoD");
    cu(cuMemcpyDtoH(got, p, N), "cuMemcpyDtoH");
    CHECK(memcmp(got, want, N) == 0);
    cu(cuMemFree(p), "cuMemFree");
    nftw(tmp, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    if (failures)
        return 1;
    printf("tcgpu C API: ok\n");
    return 0;
}
