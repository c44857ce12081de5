/* Large buffers as anonymous mappings; see bigbuf.h. */
#include <sys/mman.h>

#include "bigbuf.h"

void *bigbuf_alloc(size_t len)
{
    void *p = mmap(NULL, len ? len : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

void bigbuf_free(void *p, size_t len)
{
    if (p)
        munmap(p, len ? len : 1);
}

void *bigbuf_grow(void *p, size_t old, size_t len)
{
    void *q;

    if (!p)
        return bigbuf_alloc(len);
    q = mremap(p, old ? old : 1, len ? len : 1, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
}
