/* gpuckpt's parts, shared between its files. */
#ifndef GPUCKPT_H
#define GPUCKPT_H

#include <stdio.h>

/* "gpuckpt: <message>" on stderr. */
void gpuckpt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints a usage error for `cmd`; returns the usage exit code. */
int gpuckpt_usage_error(const char *cmd, const char *msg);
/* Prints `cmd`'s --help on stdout. */
void gpuckpt_command_help(const char *cmd);
/* A JSON string literal. */
void gpuckpt_json_string(FILE *f, const char *s);

/* gpuckpt_image.c: inspect and verify. argv[0] is the command name. */
int gpuckpt_cmd_inspect(int argc, char **argv);
int gpuckpt_cmd_verify(int argc, char **argv);

#endif
