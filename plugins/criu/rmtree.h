/* rmtree.h - rm -r of name under the directory parent, never following symlinks (rmtree.c). */
#ifndef TCGPU_CRIU_RMTREE_H
#define TCGPU_CRIU_RMTREE_H

/* 0 (removed, or there was nothing), or -errno. */
int tp_rmtree_at(int parent, const char *name);

#endif
