/* tensorboard.c — TensorBoard event files (tensorboard.h): TFRecord framing
 * with masked CRC-32C around protobuf-c `Event` messages
 * (runtime/tensorboard.proto, generated into tensorboard.pb-c.h at build
 * time).
 *
 * Invariants: the file holds only whole records plus, after a failed
 * write, at most one partial one; every call that returns SC_OK has
 * flushed what it wrote. The writer allocates the packed event per call
 * (a few hundred bytes) and keeps nothing between calls but the FILE. */
#include "tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tensorboard.pb-c.h"

struct sc_tensorboard {
  FILE *f;
  char path[4096];
};

/* CRC-32C, one table lookup per byte (the reflected polynomial 0x82f63b78:
 * Castagnoli's 0x1edc6f41 bit-reversed). The table is built on first use;
 * building it twice at once writes the same bytes. */
static uint32_t crc_table[256];
static volatile int crc_table_ready;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc_table[i] = c;
  }
  __atomic_store_n(&crc_table_ready, 1, __ATOMIC_RELEASE);
}

uint32_t sc_crc32c(uint32_t crc, const void *data, size_t n) {
  if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE)) crc_init();
  const uint8_t *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t sc_crc32c_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void sc_tfrecord_frame(const void *data, uint64_t n, uint8_t header[SC_TFRECORD_HEADER_BYTES],
                       uint8_t footer[SC_TFRECORD_FOOTER_BYTES]) {
  put_le(header, n, 8);
  put_le(header + 8, sc_crc32c_mask(sc_crc32c(0, header, 8)), 4);
  put_le(footer, sc_crc32c_mask(sc_crc32c(0, data, (size_t)n)), 4);
}

static double wall_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static sc_status write_failed(sc_tensorboard *tb, sc_diag *d) {
  return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write the TensorBoard log: %s",
                     tb->path, strerror(errno ? errno : EIO));
}

/* ev packed, framed and written as one record, then flushed. */
static sc_status write_event(sc_tensorboard *tb, const Tensorboard__Event *ev, sc_diag *d) {
  size_t n = tensorboard__event__get_packed_size(ev);
  uint8_t *buf = sc_malloc(n ? n : 1);
  if (!buf) return sc_diag_nomem(d, n, "a TensorBoard event");
  tensorboard__event__pack(ev, buf);
  uint8_t header[SC_TFRECORD_HEADER_BYTES], footer[SC_TFRECORD_FOOTER_BYTES];
  sc_tfrecord_frame(buf, n, header, footer);
  errno = 0;
  bool ok = fwrite(header, 1, sizeof header, tb->f) == sizeof header &&
            fwrite(buf, 1, n, tb->f) == n &&
            fwrite(footer, 1, sizeof footer, tb->f) == sizeof footer && fflush(tb->f) == 0;
  sc_free(buf);
  return ok ? SC_OK : write_failed(tb, d);
}

sc_status sc_tensorboard_open(const char *dir, sc_tensorboard **out, sc_diag *d) {
  *out = NULL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL,
                       "%s: cannot create the TensorBoard log folder: %s", dir, strerror(errno));
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: the TensorBoard log folder is not a folder",
                       dir);
  sc_tensorboard *tb = sc_calloc(1, sizeof *tb);
  if (!tb) return sc_diag_nomem(d, sizeof *tb, "a TensorBoard writer");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = 0;
  for (char *c = host; *c; c++)
    if (*c == '/') *c = '_';
  int len = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%ld.0", dir,
                     (long long)time(NULL), host, (long)getpid());
  if (len < 0 || (size_t)len >= sizeof tb->path) {
    sc_free(tb);
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: the TensorBoard log folder's name is too "
                       "long", dir);
  }
  /* "x": a new file, never another writer's */
  if (!(tb->f = fopen(tb->path, "wbx"))) {
    sc_status st2 = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "%s: cannot write the TensorBoard log "
                                "in %s: %s", tb->path, dir, strerror(errno));
    sc_free(tb);
    return st2;
  }
  Tensorboard__SourceMetadata src = TENSORBOARD__SOURCE_METADATA__INIT;
  src.writer = (char *)"shardc";
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_seconds();
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = (char *)"brain.Event:2";
  ev.source_metadata = &src;
  sc_status st3 = write_event(tb, &ev, d);
  if (st3 != SC_OK) {
    sc_tensorboard_close(tb, NULL);
    return st3;
  }
  *out = tb;
  return SC_OK;
}

const char *sc_tensorboard_path(const sc_tensorboard *tb) {
  return tb->path;
}

sc_status sc_tensorboard_write_scalars(sc_tensorboard *tb, int64_t step,
                                       const sc_tensorboard_scalar *s, int32_t n, sc_diag *d) {
  Tensorboard__Summary__Value *vals = sc_calloc(n > 0 ? (size_t)n : 1, sizeof *vals);
  Tensorboard__Summary__Value **ptrs = sc_calloc(n > 0 ? (size_t)n : 1, sizeof *ptrs);
  if (!vals || !ptrs) {
    sc_free(vals);
    sc_free(ptrs);
    return sc_diag_nomem(d, (uint64_t)n * (sizeof *vals + sizeof *ptrs), "TensorBoard values");
  }
  for (int32_t i = 0; i < n; i++) {
    Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT;
    v.tag = (char *)s[i].tag;
    v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
    v.simple_value = (float)s[i].value;
    vals[i] = v;
    ptrs[i] = &vals[i];
  }
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  sum.n_value = (size_t)n;
  sum.value = ptrs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.wall_time = wall_seconds();
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  sc_status st = write_event(tb, &ev, d);
  sc_free(vals);
  sc_free(ptrs);
  return st;
}

sc_status sc_tensorboard_close(sc_tensorboard *tb, sc_diag *d) {
  if (!tb) return SC_OK;
  errno = 0;
  sc_status st = SC_OK;
  if (fclose(tb->f) != 0 && d) st = write_failed(tb, d);
  sc_free(tb);
  return st;
}
