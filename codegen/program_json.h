/* program_json.h — a program as JSON and its weights layout, and the
 * SHA-256 that bundles are checked with: the parts of the bundle format
 * that both the writer (codegen/bundle.h, which also emits kernels) and
 * the loader (runtime/bundle.h) need. Layout in docs/bundle.md.
 *
 * Ownership: strings returned through char ** are sc_malloc'd; the caller
 * frees them with sc_free. A program read from JSON owns its names and
 * kernels (its arena) but borrows CONST data from `weights`, which must
 * outlive it. Errors: SC_ERR_PARSE (malformed JSON or a missing field),
 * SC_ERR_INVALID (well-formed but inconsistent), SC_ERR_NOMEM. */
#ifndef SC_CODEGEN_PROGRAM_JSON_H
#define SC_CODEGEN_PROGRAM_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "codegen/program.h"

enum {
  SC_BUNDLE_FORMAT_VERSION = 1, /* manifest.json "format_version" */
  SC_PROGRAM_JSON_VERSION = 1,  /* program.json "version" */
  SC_BUNDLE_WEIGHT_ALIGN = 64,  /* alignment of each CONST in weights.bin */
};

/* ---- SHA-256 (FIPS 180-4) ---- */
typedef struct sc_sha256 {
  uint32_t h[8];
  uint64_t n_bytes; /* message bytes so far */
  uint8_t buf[64];
  size_t n_buf;
} sc_sha256;
void sc_sha256_init(sc_sha256 *s);
void sc_sha256_update(sc_sha256 *s, const void *data, size_t n);
void sc_sha256_final(sc_sha256 *s, uint8_t digest[32]);
/* A digest as 64 lowercase hex digits plus NUL. */
void sc_sha256_digest_hex(const uint8_t digest[32], char hex[65]);
/* One-shot digest as 64 lowercase hex digits plus NUL. */
void sc_sha256_hex(const void *data, size_t n, char hex[65]);

/* ---- program.json ---- */

/* The weights.bin layout: offsets[b] for every CONST buffer b with data or
 * of 0 bytes (others, and external constants without data, -1),
 * in buffer order, each SC_BUNDLE_WEIGHT_ALIGN aligned. Returns the total
 * size, or -1 on overflow. offsets has p->n_buffers entries. */
int64_t sc_program_weights_layout(const sc_program *p, int64_t *offsets);

/* The program as JSON text (2-space indented, keys in a fixed order).
 * weight_offsets: from sc_program_weights_layout, or NULL to write none (the
 * text is then not readable back when the program has CONST buffers). */
sc_status sc_program_write_json(const sc_program *p, const int64_t *weight_offsets,
                                char **text, sc_diag *diag);
/* The program as JSON text for comparing and hashing (the distributed
 * program's hash, runtime/comm_handshake.c), never read back: as
 * sc_program_write_json without weight offsets, and a program with inputs
 * bound outside the arena (pipelined training's state on the CPU) is
 * written too, its bound inputs' indices under "bound". */
sc_status sc_program_describe_json(const sc_program *p, char **text, sc_diag *diag);
/* Parses and validates program JSON. CONST buffers point into weights
 * (weights_bytes long; may be NULL/0 when there are no CONST buffers). */
sc_status sc_program_read_json(const char *text, size_t len, const void *weights,
                               int64_t weights_bytes, sc_program **out, sc_diag *diag);

#endif
