/*
 * restore.h - what restore.c's checks of a save directory offer image.c:
 * gpuckpt inspect and verify of a save directory (docs/save-restore.md).
 */
#ifndef GPUCKPT_RESTORE_H
#define GPUCKPT_RESTORE_H

/* Shows the save at dir on stdout (JSON in JSON mode, util.h). Returns an exit code. */
int gpuckpt_tree_inspect(const char *dir);

/* Checks the whole save at dir, as restore would. Returns an exit code (7: corrupt). */
int gpuckpt_tree_verify(const char *dir);

#endif
