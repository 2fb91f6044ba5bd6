/* extdata.c — ONNX external data: checked, memory-mapped, borrowed.
 *
 * A tensor whose data_location is EXTERNAL names a file ("location") and a
 * byte range ("offset", "length") in it. The location is untrusted: it must
 * be a relative path without ".." components, and after resolving symlinks
 * (realpath) it must still lie inside the model's folder. Each distinct file
 * is mapped once, read-only, in full; tensors point into the mapping (no
 * copy) and a graph cleanup unmaps it when the graph is destroyed. The one
 * exception: a range whose offset is not a multiple of the element size is
 * copied into the graph arena, because the rest of shardc reads elements
 * through typed pointers.
 *
 * Offsets and lengths are checked against the file size and the tensor's
 * dtype x shape; a file that changes size after it was mapped is not
 * defended against (reading past its new end raises SIGBUS). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend_internal.h"
#include "ir/fileio.h"

typedef struct mapping_cleanup {
  void *addr;
  size_t size;
} mapping_cleanup;

static void unmap_cleanup(void *p) {
  mapping_cleanup *m = p;
  if (m->addr) munmap(m->addr, m->size);
  sc_free(m);
}

void sc_onnx_ctx_free(sc_onnx_ctx *c) {
  for (int32_t i = 0; i < c->n_maps; i++) sc_free(c->maps[i].real_path);
  sc_free(c->maps);
  sc_free(c->base_real);
  c->maps = NULL;
  c->base_real = NULL;
  c->n_maps = c->cap_maps = 0;
}

/* Decimal, no sign, no overflow. */
static bool parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s) return false;
  uint64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return false;
    if (!sc_mul_u64(v, 10, &v) || !sc_add_u64(v, (uint64_t)(*s - '0'), &v))
      return false;
  }
  *out = v;
  return true;
}

/* Relative, no "..", no empty path; backslashes are refused too so that a
 * Windows-style "..\\x" cannot be read on a system that treats it as a
 * separator. */
static bool location_syntax_ok(const char *loc) {
  if (!loc[0] || loc[0] == '/' || strchr(loc, '\\')) return false;
  const char *p = loc;
  while (*p) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    if (!e) break;
    p = e + 1;
  }
  return true;
}

static sc_status map_file(sc_onnx_ctx *c, const char *what, const char *loc,
                          const sc_onnx_map **out) {
  if (!c->base_dir)
    return sc_onnx_error(c, SC_ERR_IO,
                         "tensor '%s': external data '%s' needs the model's folder "
                         "(model given as bytes)", what, loc);
  if (!c->base_real) {
    c->base_real = realpath(c->base_dir, NULL);
    if (!c->base_real)
      return sc_onnx_error(c, SC_ERR_IO, "model folder '%s': %s", c->base_dir,
                           strerror(errno));
  }
  size_t blen = strlen(c->base_dir), llen = strlen(loc);
  char *joined = sc_malloc(blen + llen + 2);
  if (!joined) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  memcpy(joined, c->base_dir, blen);
  joined[blen] = '/';
  memcpy(joined + blen + 1, loc, llen + 1);
  char *real = realpath(joined, NULL);
  int err = errno;
  sc_free(joined);
  if (!real)
    return sc_onnx_error(c, SC_ERR_IO, "tensor '%s': external data file '%s': %s",
                         what, loc,
                         err == ENOENT ? "not found (--no-weights reads the model's shapes "
                                         "without its weight files)"
                                       : strerror(err));
  size_t rlen = strlen(c->base_real);
  bool inside = strcmp(c->base_real, "/") == 0
                    ? real[0] == '/'
                    : strncmp(real, c->base_real, rlen) == 0 && real[rlen] == '/';
  if (!inside) {
    sc_status st = sc_onnx_error(c, SC_ERR_INVALID,
                                 "tensor '%s': external data file '%s' resolves "
                                 "outside the model's folder", what, loc);
    free(real);
    return st;
  }
  for (int32_t i = 0; i < c->n_maps; i++)
    if (strcmp(c->maps[i].real_path, real) == 0) {
      free(real);
      *out = &c->maps[i];
      return SC_OK;
    }

  sc_status st = SC_OK;
  void *addr = NULL;
  struct stat sb;
  int fd = -1;
  /* the same checks as the model file's (ir/fileio.h); real is resolved */
  int64_t file_bytes = 0;
  {
    char label[600];
    snprintf(label, sizeof label, "tensor '%s': external data file '%s'", what, loc);
    sc_diag fd_diag = {0};
    if (sc_file_open_regular(real, label, (int64_t)(SIZE_MAX / 2), &fd, &file_bytes, &fd_diag) !=
        SC_OK) {
      st = sc_onnx_error(c, fd_diag.status, "%s", fd_diag.msg);
      goto fail;
    }
  }
  sb.st_size = (off_t)file_bytes;
  if (sb.st_size > 0) {
    addr = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED && errno == ENOMEM) {
      addr = NULL;
      st = sc_onnx_error(c, SC_ERR_NOMEM, "tensor '%s': out of memory: needed %lld bytes for "
                         "mapping '%s'", what, (long long)sb.st_size, loc);
      goto fail;
    }
    if (addr == MAP_FAILED) {
      addr = NULL;
      st = sc_onnx_error(c, SC_ERR_IO, "tensor '%s': cannot map '%s': %s", what, loc,
                         strerror(errno));
      goto fail;
    }
  }
  close(fd);
  fd = -1;
  mapping_cleanup *mc = sc_malloc(sizeof *mc);
  if (!mc) {
    if (addr) munmap(addr, (size_t)sb.st_size);
    st = sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    goto fail;
  }
  mc->addr = addr;
  mc->size = (size_t)sb.st_size;
  if (sc_graph_add_cleanup(c->g, unmap_cleanup, mc) != SC_OK) { /* unmaps */
    st = sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    goto fail;
  }
  if (c->n_maps == c->cap_maps) {
    int32_t ncap = c->cap_maps ? c->cap_maps * 2 : 4;
    sc_onnx_map *m = sc_realloc(c->maps, (size_t)ncap * sizeof *m);
    if (!m) {
      st = sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
      goto fail; /* the mapping stays owned by the graph cleanup */
    }
    c->maps = m;
    c->cap_maps = ncap;
  }
  c->maps[c->n_maps] = (sc_onnx_map){real, addr, (uint64_t)sb.st_size};
  *out = &c->maps[c->n_maps++];
  return SC_OK;
fail:
  if (fd >= 0) close(fd);
  free(real);
  return st;
}

sc_status sc_onnx_read_external(sc_onnx_ctx *c, const Onnx__TensorProto *t,
                                const char *what, sc_onnx_tensor *out) {
  const char *loc = NULL;
  uint64_t offset = 0, length = 0;
  bool has_length = false;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = t->external_data[i];
    if (!e || !e->key) continue;
    const char *val = e->value ? e->value : "";
    if (strcmp(e->key, "location") == 0) {
      loc = val;
    } else if (strcmp(e->key, "offset") == 0) {
      if (!parse_u64(val, &offset))
        return sc_onnx_error(c, SC_ERR_INVALID,
                             "tensor '%s': bad external data offset '%.64s'", what, val);
    } else if (strcmp(e->key, "length") == 0) {
      if (!parse_u64(val, &length))
        return sc_onnx_error(c, SC_ERR_INVALID,
                             "tensor '%s': bad external data length '%.64s'", what, val);
      has_length = true;
    } /* "checksum" and unknown keys are ignored */
  }
  if (!loc || !loc[0])
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': external data without a location", what);
  if (!location_syntax_ok(loc))
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': external data location '%s' must be a relative "
                         "path inside the model's folder (no '..', not absolute)",
                         what, loc);
  if (!has_length) length = out->data_bytes;
  if (length != out->data_bytes)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': external data length %llu but its type and "
                         "shape need %llu bytes", what, (unsigned long long)length,
                         (unsigned long long)out->data_bytes);
  uint64_t end;
  if (!sc_add_u64(offset, length, &end))
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': external data offset + length overflows", what);
  out->ext_location = sc_arena_strdup(&c->g->arena, loc);
  out->ext_offset = offset;
  if (!out->ext_location) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
  out->data = NULL;
  out->kind = SC_DATA_NONE;
  if (c->no_weights) return SC_OK;

  const sc_onnx_map *m = NULL;
  sc_status st = map_file(c, what, loc, &m);
  if (st != SC_OK) return st;
  if (offset > m->size || end > m->size)
    return sc_onnx_error(c, SC_ERR_INVALID,
                         "tensor '%s': external data [%llu, %llu) lies past the end of "
                         "'%s' (%llu bytes)", what, (unsigned long long)offset,
                         (unsigned long long)end, loc, (unsigned long long)m->size);
  if (length == 0) return SC_OK;
  const uint8_t *p = m->addr + offset;
  unsigned esize = sc_dtype_size(out->dtype);
  if (esize > 1 && offset % esize != 0) {
    void *copy = sc_arena_alloc(&c->g->arena, (size_t)length);
    if (!copy) return sc_onnx_error(c, SC_ERR_NOMEM, "out of memory");
    memcpy(copy, p, (size_t)length);
    out->data = copy;
    out->kind = SC_DATA_ARENA;
  } else {
    out->data = p;
    out->kind = SC_DATA_BORROWED;
  }
  return SC_OK;
}
