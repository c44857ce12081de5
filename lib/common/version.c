/* The library's version, as the public header documents it. */
#include "tcgpu.h"

const char *tcgpu_version_string(void)
{
    return TCGPU_VERSION_STRING;
}
