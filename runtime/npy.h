/* npy.h — reading and writing NumPy .npy files (format versions 1.0, 2.0
 * and 3.0; C order only).
 *
 * A .npy file is a magic string, a version, a header length and a Python
 * dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (2,
 * 3), } padded with spaces to a multiple of 64 bytes, followed by the raw
 * elements in row-major order. shardc uses it for `shardc run` inputs and
 * outputs.
 *
 * dtypes (descr ↔ sc_dtype): <f4 F32, <f8 F64, <f2 F16, |i1 I8, <i2 I16,
 * <i4 I32, <i8 I64, |u1 U8, <u2 U16, <u4 U32, <u8 U64, |b1 BOOL. Big-endian
 * descrs ('>f4') are read and byte-swapped; '=' means native (little)
 * endian; '|' and '<' are both accepted for one-byte types. NumPy has no
 * bfloat16: BF16 tensors are written as '<u2' (the raw bits) and a '<u2' file
 * is read as U16 — callers that expect BF16 accept U16 data as its bits.
 *
 * The file is untrusted input: every header field is checked (lengths,
 * nesting, dims, element count overflow, data size) and a malformed file is
 * SC_ERR_PARSE with a message saying what is wrong, never a crash.
 * fortran_order True is SC_ERR_UNSUPPORTED.
 *
 * Ownership: sc_npy_read* allocate the data with sc_malloc; release it with
 * sc_npy_free. Thread-safe (no global state). */
#ifndef SC_RUNTIME_NPY_H
#define SC_RUNTIME_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/runtime.h"

typedef struct sc_npy {
  sc_dtype dtype;
  int32_t rank;
  int64_t dims[SC_MAX_RANK];
  int64_t numel;
  int64_t bytes;   /* numel * element size */
  void *data;      /* packed row-major, little-endian (owned) */
} sc_npy;

/* Parses a whole .npy file held in memory; `name` is used in messages. */
sc_status sc_npy_read_mem(const void *buf, size_t size, const char *name, sc_npy *out,
                          sc_diag *diag);
/* Reads path, which must be a regular file of at most 64 GiB (a FIFO or a
 * device is refused at once, naming the file: ir/fileio.h). */
sc_status sc_npy_read(const char *path, sc_npy *out, sc_diag *diag);
void sc_npy_free(sc_npy *a);

/* The .npy descr of a dtype ("<f4"); NULL when NumPy cannot hold it
 * (string, complex, undef). BF16 gives "<u2". */
const char *sc_npy_descr(sc_dtype t);
/* For a narrow dtype t: whether every one of the n bytes is a value of t
 * (a 4/2-bit integer in range, a float4 code below 16); *bad = the first
 * that is not. */
bool sc_npy_check_narrow(sc_dtype t, const void *data, int64_t n, int64_t *bad);

/* Writes a version 1.0 file (2.0 when the header needs more than 65535
 * bytes, which needs a very high rank — never in practice), under a
 * temporary name renamed to path when complete: path is never left
 * truncated (ir/fileio.h). */
sc_status sc_npy_write(const char *path, sc_dtype dtype, int32_t rank, const int64_t *dims,
                       const void *data, sc_diag *diag);
/* Writes n files, paths[i] from views[i] (its dtype, rank, dims, data; the
 * name is not used), as one commit (ir/fileio.h sc_file_commit_end_all):
 * each is written whole under a temporary name first, then all are
 * renamed into place with the interrupting signals held, so an
 * interruption leaves every old file or every new one. */
sc_status sc_npy_write_all(const char *const *paths, const sc_tensor_view *views, int32_t n,
                           sc_diag *diag);

#endif
