/* fuzz_npy.c — libFuzzer target: the .npy reader (runtime/npy.h).
 *
 * Each input is taken as the bytes of a .npy file and parsed from memory
 * with sc_npy_read_mem (no file system). A rejected file must come back as a
 * status with a message. An accepted one must be self-consistent: a dtype
 * NumPy can hold, rank in [0, SC_MAX_RANK], non-negative dims whose product
 * is numel, bytes = numel × element size, and data present when bytes > 0;
 * every data byte is read (so ASan sees a short allocation). A crash, a
 * sanitizer report, a leak or an assert is a bug. Built by
 * tests/fuzz/run.sh. */
#include <stddef.h>
#include <stdint.h>

#include "runtime/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sc_npy a;
  sc_diag diag;
  sc_diag_clear(&diag);
  if (sc_npy_read_mem(data, size, "fuzz.npy", &a, &diag) != SC_OK) {
    SC_ASSERT(diag.msg[0] != '\0'); /* every rejection says why */
    return 0;
  }
  SC_ASSERT(sc_npy_descr(a.dtype) != NULL);
  SC_ASSERT(a.rank >= 0 && a.rank <= SC_MAX_RANK);
  int64_t numel = 1;
  for (int32_t i = 0; i < a.rank; i++) {
    SC_ASSERT(a.dims[i] >= 0);
    SC_ASSERT(sc_mul_i64(numel, a.dims[i], &numel));
  }
  SC_ASSERT(numel == a.numel);
  int64_t bytes = 0;
  SC_ASSERT(sc_mul_i64(numel, (int64_t)sc_dtype_size(a.dtype), &bytes) && bytes == a.bytes);
  SC_ASSERT(a.bytes == 0 || a.data != NULL);
  /* Touch every byte: a buffer shorter than `bytes` is an ASan report. */
  volatile uint8_t sum = 0;
  for (int64_t i = 0; i < a.bytes; i++) sum ^= ((const uint8_t *)a.data)[i];
  (void)sum;
  sc_npy_free(&a);
  return 0;
}
