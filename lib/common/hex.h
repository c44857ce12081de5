/*
 * hex.h - bytes as lowercase hexadecimal and back: the 16-byte identities
 * (GPU UUIDs, image checksums and ids) that images, records, the control
 * protocol and the tools print and read.
 */
#ifndef TCGPU_COMMON_HEX_H
#define TCGPU_COMMON_HEX_H

#include <stddef.h>
#include <stdint.h>

/* n bytes of in as 2n lowercase hex digits and a NUL into out (2n+1 bytes). */
void hex_put(const uint8_t *in, size_t n, char *out);

/* hex_put of 16 bytes: out holds 33. */
void hex_put16(const uint8_t in[16], char out[33]);

/* The value of one hex digit (either case), or -1. */
int hex_digit_value(char c);

/* 32 hex digits (either case) and nothing more into 16 bytes: 0, or
 * -EINVAL for NULL, another length or a non-hex digit (out is then
 * unspecified). */
int hex_get16(const char *s, uint8_t out[16]);

#endif
