/* tensorboard.h — TensorBoard event files: the scalars a training run
 * writes step by step, which `tensorboard --logdir DIR` shows while the run
 * goes on (docs/training.md, "TensorBoard").
 *
 *   sc_tensorboard *tb;
 *   sc_tensorboard_open("runs/a", &tb, &d);          creates the file
 *   sc_tensorboard_scalar s[] = {{"train/loss", 2.3}, {"train/learning_rate", 1e-3}};
 *   sc_tensorboard_write_scalars(tb, step, s, 2, &d);   one Event, flushed
 *   sc_tensorboard_close(tb, &d);
 *
 * The file. sc_tensorboard_open creates DIR when missing (its parents must
 * exist) and in it a new file named as TensorFlow's and PyTorch's writers
 * name theirs, events.out.tfevents.<unix seconds, 10 digits>.<host>.<pid>.0
 * (TensorBoard reads every file whose name holds "tfevents"; the files of
 * one folder are one run, so several processes of one run each write their
 * own file into DIR). The file is a sequence of TFRecords, each
 *   uint64 length | uint32 masked CRC-32C of those 8 bytes |
 *   data (length bytes) | uint32 masked CRC-32C of the data
 * little-endian, the mask ((crc >> 15) | (crc << 17)) + 0xa282ead8 (both
 * from TensorFlow's tensorflow/core/lib/io/record_writer.cc and
 * tensorflow/tsl/lib/hash/crc32c.h). Each record's data is one `Event`
 * protobuf (runtime/tensorboard.proto, TensorBoard's field numbers): the
 * first holds file_version "brain.Event:2", each later one a Summary of
 * scalar values (float32 simple_value) at one step. Every call writes whole
 * records and flushes them to the file before returning, so a reader never
 * waits on a buffer; a process that dies leaves a file whose every record
 * is complete, or whose last one is cut short (which TensorBoard's reader
 * reports as truncated and skips).
 *
 * Values are written as float32 (TensorBoard's scalars), so a double loses
 * what float32 cannot hold; NaN and infinities are written as they are.
 *
 * Errors: SC_ERR_IO with a message naming the folder or the file and the
 * system's reason (an unwritable DIR, a full disk); SC_ERR_NOMEM. After an
 * error the writer may only be closed. Threading: a writer belongs to one
 * thread. */
#ifndef SC_RUNTIME_TENSORBOARD_H
#define SC_RUNTIME_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "ir/base.h"

typedef struct sc_tensorboard sc_tensorboard;

typedef struct sc_tensorboard_scalar {
  const char *tag;    /* "train/loss"; '/' groups the charts */
  double value;       /* written as float32 */
} sc_tensorboard_scalar;

/* Creates DIR if missing and a new event file in it, and writes its first
 * record (the file version), flushed. *out is the writer (close it with
 * sc_tensorboard_close), NULL on error. */
sc_status sc_tensorboard_open(const char *dir, sc_tensorboard **out, sc_diag *d);
/* The event file's path (owned by the writer). */
const char *sc_tensorboard_path(const sc_tensorboard *tb);
/* One Event at `step` (its wall time now) holding the n values, flushed. */
sc_status sc_tensorboard_write_scalars(sc_tensorboard *tb, int64_t step,
                                       const sc_tensorboard_scalar *s, int32_t n, sc_diag *d);
/* Closes the file and frees the writer (NULL: nothing); reports a failed
 * close when d is not NULL. */
sc_status sc_tensorboard_close(sc_tensorboard *tb, sc_diag *d);

/* The framing, for the tests. CRC-32C (Castagnoli, reflected polynomial
 * 0x82f63b78, as iSCSI and TFRecord use) of n bytes, continuing crc (0 to
 * start): sc_crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t sc_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's mask of a CRC (stored CRCs are masked). */
uint32_t sc_crc32c_mask(uint32_t crc);
enum { SC_TFRECORD_HEADER_BYTES = 12, SC_TFRECORD_FOOTER_BYTES = 4 };
/* The header (length, masked CRC of the length) and footer (masked CRC of
 * the data) of the record holding n bytes of data. */
void sc_tfrecord_frame(const void *data, uint64_t n, uint8_t header[SC_TFRECORD_HEADER_BYTES],
                       uint8_t footer[SC_TFRECORD_FOOTER_BYTES]);

#endif
