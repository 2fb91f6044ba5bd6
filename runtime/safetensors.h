/* safetensors.h — reading and writing safetensors files, the tensor
 * container that checkpoints (runtime/checkpoint.h) are made of.
 *
 * Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON
 *   {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [B, E]},
 *    ..., "__metadata__": {"key": "value", ...}}
 * then the data buffer. Offsets are relative to the buffer's start; every
 * byte of the buffer belongs to exactly one tensor (no holes, no
 * overlaps), tensors are row-major and little-endian, names are unique and
 * the header is at most SC_SAFETENSORS_MAX_HEADER bytes.
 *
 * dtypes (safetensors ↔ sc_dtype): BOOL, U8, I8, I16, U16, F16, BF16, I32,
 * U32, F32, F64, I64, U64, C64 map to the shardc type of the same name;
 * the 8-bit float types (F8_E4M3, F8_E5M2, ...) and anything else are
 * refused by the reader (SC_ERR_UNSUPPORTED / SC_ERR_PARSE).
 *
 * The reader treats the file as hostile: the header length is checked
 * against the file and the limit before anything is allocated for it, the
 * JSON must be an object of tensor objects (duplicate keys refused), every
 * offset and size is overflow-checked, shape product × element size must
 * equal end − begin, and the sorted offsets must cover the buffer exactly.
 * Messages name the file and, where it is about one, the tensor.
 *
 * The writer pads the header with spaces to a multiple of 8 bytes (as the
 * reference implementation does) and orders the data by element size,
 * largest first, so each tensor's data is aligned to its element size in
 * the file and in a loaded copy. Data from another writer may be
 * unaligned: read it with memcpy.
 *
 * Ownership: a loaded sc_safetensors owns the file's bytes, the names,
 * the metadata strings; tensors' data point into those bytes and live until
 * sc_safetensors_destroy. Writers borrow everything they are given.
 * Thread-safe (no global state). */
#ifndef SC_RUNTIME_SAFETENSORS_H
#define SC_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "runtime/runtime.h"

enum {
  SC_SAFETENSORS_MAX_HEADER = 100 * 1000 * 1000, /* bytes of JSON header, as the reference */
  SC_SAFETENSORS_ALIGN = 8,                      /* 8 + N is a multiple of this */
};

/* A named dense tensor (runtime/runtime.h's sc_tensor_view): what the
 * writer takes (data only read) and the reader returns (data owned by the
 * reader's result, not to be written). */

/* A metadata entry (both strings UTF-8, NUL-free). */
typedef struct sc_safetensors_meta {
  const char *key;
  const char *value;
} sc_safetensors_meta;

typedef struct sc_safetensors {
  int32_t n_tensors;
  sc_tensor_view *tensors; /* in the order of their data in the file */
  int32_t n_meta;
  sc_safetensors_meta *meta; /* "__metadata__" entries, in file order */
  size_t file_bytes;         /* size of the whole file */
  void *owner;               /* internal: the bytes and strings */
} sc_safetensors;

/* "F32" for SC_DTYPE_F32; NULL when safetensors has no name for it. */
const char *sc_safetensors_dtype_name(sc_dtype t);
/* SC_DTYPE_COUNT when the name is not one of the types above. */
sc_dtype sc_safetensors_dtype_parse(const char *name);

/* Element count and byte size of a view; false on overflow or a negative
 * dim. */
bool sc_tensor_view_size(const sc_tensor_view *t, int64_t *numel, int64_t *bytes);

/* Parses a whole file held in memory. Takes ownership of buf (sc_malloc'd)
 * in every case: on success the result keeps it, on failure it is freed.
 * name: the file name used in messages. */
sc_status sc_safetensors_parse(void *buf, size_t size, const char *name, sc_safetensors **out,
                               sc_diag *diag);
/* Reads path (a regular file, at most max_bytes; < 0: no limit) and parses
 * it. A FIFO or device is refused without blocking (ir/fileio.h). */
sc_status sc_safetensors_read(const char *path, int64_t max_bytes, sc_safetensors **out,
                              sc_diag *diag);
const sc_tensor_view *sc_safetensors_find(const sc_safetensors *s, const char *name);
/* The metadata value of key, or NULL. */
const char *sc_safetensors_meta_get(const sc_safetensors *s, const char *key);
void sc_safetensors_destroy(sc_safetensors *s);

/* Writes the file to f (at its current position) and, when sha256 is not
 * NULL, the SHA-256 of every byte written; *bytes gets the file size;
 * progress (NULL: none; ir/progress.h) gets the bytes as they are written.
 * Refuses (SC_ERR_INVALID, naming the tensor) an empty or duplicate name,
 * "__metadata__" as a name, a dtype safetensors cannot name, a rank above
 * SC_MAX_RANK, a negative dim, NULL data for a non-empty tensor, and
 * metadata keys that repeat. name: the file name used in messages. */
struct sc_progress;
sc_status sc_safetensors_write_stream(FILE *f, const char *name, const sc_tensor_view *tensors,
                                      int32_t n_tensors, const sc_safetensors_meta *meta,
                                      int32_t n_meta, uint8_t sha256[32], int64_t *bytes,
                                      struct sc_progress *progress, sc_diag *diag);
/* The same into path, written under a temporary name and renamed into
 * place when complete (ir/fileio.h): path is never left half-written. */
sc_status sc_safetensors_write(const char *path, const sc_tensor_view *tensors, int32_t n_tensors,
                               const sc_safetensors_meta *meta, int32_t n_meta, sc_diag *diag);

#endif
