/* fuzz_program_json.c — libFuzzer target: program.json (codegen/bundle.h).
 *
 * Each input is taken as the text of a bundle's program.json (it need not be
 * NUL-terminated). The weights it may point into are a fixed, read-only,
 * zero-filled mapping of WEIGHTS_BYTES (reading never copies them, so the
 * size costs no memory). A rejected text must come back as a status with a
 * message. An accepted one must round-trip: written back (with each CONST
 * buffer's offset recovered from its data pointer), the text must be read
 * again, and writing that gives the same text — the written form is the
 * program's canonical form, so read(write(read(x))) == read(x) compared as
 * written JSON. A crash, a sanitizer report, a leak, an assert or a failed
 * round trip is a bug. Built by tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "codegen/bundle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { WEIGHTS_BYTES = 256 << 20 }; /* above every sample's weights.bin */

static const uint8_t *weights(void) {
  static const uint8_t *w;
  if (!w) {
    void *m = mmap(NULL, WEIGHTS_BYTES, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    SC_ASSERT(m != MAP_FAILED);
    w = m;
  }
  return w;
}

/* The program as JSON, with the weights offsets its CONST buffers have. */
static char *write_program(const sc_program *p) {
  int64_t *offsets = sc_malloc(sizeof(int64_t) * (size_t)(p->n_buffers > 0 ? p->n_buffers : 1));
  SC_ASSERT(offsets);
  for (int32_t b = 0; b < p->n_buffers; b++) {
    const sc_buffer *buf = &p->buffers[b];
    offsets[b] = buf->kind == SC_BUF_CONST ? (const uint8_t *)buf->data - weights() : -1;
  }
  char *text = NULL;
  sc_diag diag;
  sc_diag_clear(&diag);
  SC_ASSERT(sc_program_write_json(p, offsets, &text, &diag) == SC_OK && text);
  sc_free(offsets);
  return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sc_program *p = NULL;
  sc_diag diag;
  sc_diag_clear(&diag);
  if (sc_program_read_json((const char *)data, size, weights(), WEIGHTS_BYTES, &p, &diag) !=
      SC_OK) {
    SC_ASSERT(p == NULL && diag.msg[0] != '\0');
    return 0;
  }
  char *text = write_program(p);
  sc_program *p2 = NULL;
  sc_diag_clear(&diag);
  /* What the writer writes must read back, and write the same again. */
  SC_ASSERT(sc_program_read_json(text, strlen(text), weights(), WEIGHTS_BYTES, &p2, &diag) ==
            SC_OK);
  char *text2 = write_program(p2);
  SC_ASSERT(strcmp(text, text2) == 0);
  sc_free(text2);
  sc_free(text);
  sc_program_destroy(p2);
  sc_program_destroy(p);
  return 0;
}
