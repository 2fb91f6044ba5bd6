/* npy.c — the NumPy .npy reader and writer (see npy.h).
 *
 * The header dict is parsed by a small recursive-descent reader over a
 * bounded byte range: keys and string values in single or double quotes,
 * True/False, and a tuple of non-negative integers for the shape. Exactly
 * the three keys 'descr', 'fortran_order' and 'shape' must appear, once
 * each (NumPy itself rejects other keys). Every read is bounds-checked
 * against the header length, so a hostile file can only produce an error. */
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir/fileio.h"

static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

typedef struct descr_row {
  char code[3];  /* kind + size, e.g. "f4" */
  sc_dtype dtype;
} descr_row;

static const descr_row DESCRS[] = {
    {"f4", SC_DTYPE_F32}, {"f8", SC_DTYPE_F64}, {"f2", SC_DTYPE_F16},
    {"i1", SC_DTYPE_I8},  {"i2", SC_DTYPE_I16}, {"i4", SC_DTYPE_I32},
    {"i8", SC_DTYPE_I64}, {"u1", SC_DTYPE_U8},  {"u2", SC_DTYPE_U16},
    {"u4", SC_DTYPE_U32}, {"u8", SC_DTYPE_U64}, {"b1", SC_DTYPE_BOOL},
};
enum { N_DESCRS = sizeof DESCRS / sizeof DESCRS[0] };
/* The largest .npy file read (64 GiB): files are read whole into memory. */
#define NPY_MAX_FILE_BYTES ((int64_t)1 << 36)

const char *sc_npy_descr(sc_dtype t) {
  switch (t) {
  case SC_DTYPE_F32: return "<f4";
  case SC_DTYPE_F64: return "<f8";
  case SC_DTYPE_F16: return "<f2";
  case SC_DTYPE_BF16: return "<u2";
  case SC_DTYPE_I8: return "|i1";
  case SC_DTYPE_I16: return "<i2";
  case SC_DTYPE_I32: return "<i4";
  case SC_DTYPE_I64: return "<i8";
  case SC_DTYPE_U8: return "|u1";
  case SC_DTYPE_U16: return "<u2";
  case SC_DTYPE_U32: return "<u4";
  case SC_DTYPE_U64: return "<u8";
  case SC_DTYPE_BOOL: return "|b1";
  default:
    if (sc_dtype_is_narrow(t)) return sc_dtype_is_signed(t) ? "|i1" : "|u1";
    return NULL;
  }
}

bool sc_npy_check_narrow(sc_dtype t, const void *data, int64_t n, int64_t *bad) {
  if (!sc_dtype_is_narrow(t)) return true;
  const uint8_t *b = data;
  for (int64_t i = 0; i < n; i++) {
    bool ok = sc_dtype_is_float(t) ? sc_dtype_file_bits(t) >= 8 || b[i] < 16
                                   : sc_narrow_wrap(t, b[i]) == (sc_dtype_is_signed(t)
                                                                     ? (int8_t)b[i]
                                                                     : (int64_t)b[i]);
    if (!ok) {
      *bad = i;
      return false;
    }
  }
  return true;
}

/* ---- header dict parser ---- */

typedef struct hdr {
  const char *s, *end; /* remaining header text */
  const char *name;
  sc_diag *diag;
} hdr;

static sc_status bad(hdr *h, const char *what) {
  return sc_diag_set(h->diag, SC_ERR_PARSE, NULL, NULL, "%s: malformed .npy header: %s",
                     h->name, what);
}

static void skip_ws(hdr *h) {
  while (h->s < h->end && (*h->s == ' ' || *h->s == '\t' || *h->s == '\n' || *h->s == '\r'))
    h->s++;
}

static bool eat(hdr *h, char c) {
  skip_ws(h);
  if (h->s < h->end && *h->s == c) {
    h->s++;
    return true;
  }
  return false;
}

/* A quoted string (no escapes: descr and key strings never need them) into
 * buf; false when absent, unterminated or too long. */
static bool read_str(hdr *h, char *buf, size_t n) {
  skip_ws(h);
  if (h->s >= h->end || (*h->s != '\'' && *h->s != '"')) return false;
  char q = *h->s++;
  size_t len = 0;
  while (h->s < h->end && *h->s != q) {
    if (*h->s == '\\' || len + 1 >= n) return false;
    buf[len++] = *h->s++;
  }
  if (h->s >= h->end) return false;
  h->s++;
  buf[len] = 0;
  return true;
}

static bool read_word(hdr *h, const char *w) {
  skip_ws(h);
  size_t len = strlen(w);
  if ((size_t)(h->end - h->s) < len || memcmp(h->s, w, len) != 0) return false;
  h->s += len;
  return true;
}

static sc_status read_shape(hdr *h, sc_npy *a) {
  if (!eat(h, '(')) return bad(h, "'shape' must be a tuple");
  a->rank = 0;
  for (;;) {
    if (eat(h, ')')) return SC_OK;
    skip_ws(h);
    if (h->s >= h->end || *h->s < '0' || *h->s > '9')
      return bad(h, "'shape' must hold non-negative integers");
    int64_t v = 0;
    while (h->s < h->end && *h->s >= '0' && *h->s <= '9') {
      if (!sc_mul_i64(v, 10, &v) || !sc_add_i64(v, *h->s - '0', &v) || v > SC_MAX_ELEMENTS)
        return sc_diag_set(h->diag, SC_ERR_LIMIT, NULL, NULL,
                           "%s: .npy shape dim too large", h->name);
      h->s++;
    }
    skip_ws(h);
    if (h->s < h->end && *h->s == 'L') h->s++; /* Python 2 long suffix */
    if (a->rank == SC_MAX_RANK)
      return sc_diag_set(h->diag, SC_ERR_LIMIT, NULL, NULL,
                         "%s: .npy array has more than %d dims", h->name, SC_MAX_RANK);
    a->dims[a->rank++] = v;
    if (eat(h, ',')) continue;
    if (eat(h, ')')) return SC_OK;
    return bad(h, "expected ',' or ')' in 'shape'");
  }
}

static sc_status parse_header(hdr *h, sc_npy *a, bool *swap) {
  bool have_descr = false, have_fortran = false, have_shape = false;
  char descr[16] = "";
  if (!eat(h, '{')) return bad(h, "expected '{'");
  for (;;) {
    if (eat(h, '}')) break;
    char key[32];
    if (!read_str(h, key, sizeof key)) return bad(h, "expected a quoted key");
    if (!eat(h, ':')) return bad(h, "expected ':' after a key");
    if (strcmp(key, "descr") == 0 && !have_descr) {
      if (!read_str(h, descr, sizeof descr))
        return bad(h, "'descr' must be a short string (structured dtypes are not supported)");
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
      if (read_word(h, "True")) {
        return sc_diag_set(h->diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                           "%s: fortran_order arrays are not supported (save in C order: "
                           "numpy.ascontiguousarray)", h->name);
      } else if (!read_word(h, "False")) {
        return bad(h, "'fortran_order' must be True or False");
      }
      have_fortran = true;
    } else if (strcmp(key, "shape") == 0 && !have_shape) {
      sc_status st = read_shape(h, a);
      if (st != SC_OK) return st;
      have_shape = true;
    } else {
      return bad(h, "unknown or repeated key");
    }
    if (eat(h, ',')) continue;
    if (eat(h, '}')) break;
    return bad(h, "expected ',' or '}'");
  }
  skip_ws(h);
  if (h->s != h->end) return bad(h, "trailing characters after the dict");
  if (!have_descr || !have_fortran || !have_shape)
    return bad(h, "'descr', 'fortran_order' and 'shape' are all required");

  /* descr: byte order + kind + size */
  if (strlen(descr) != 3 || !strchr("<>|=", descr[0]))
    return sc_diag_set(h->diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "%s: unsupported .npy dtype '%s'", h->name, descr);
  a->dtype = SC_DTYPE_COUNT;
  for (int i = 0; i < N_DESCRS; i++)
    if (memcmp(descr + 1, DESCRS[i].code, 2) == 0) a->dtype = DESCRS[i].dtype;
  if (a->dtype == SC_DTYPE_COUNT)
    return sc_diag_set(h->diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "%s: unsupported .npy dtype '%s'", h->name, descr);
  *swap = descr[0] == '>';
  return SC_OK;
}

static void byteswap(void *data, int64_t numel, unsigned size) {
  unsigned char *p = data;
  for (int64_t i = 0; i < numel; i++, p += size)
    for (unsigned j = 0; j < size / 2; j++) {
      unsigned char t = p[j];
      p[j] = p[size - 1 - j];
      p[size - 1 - j] = t;
    }
}

void sc_npy_free(sc_npy *a) {
  if (!a) return;
  sc_free(a->data);
  a->data = NULL;
}

sc_status sc_npy_read_mem(const void *buf, size_t size, const char *name, sc_npy *out,
                          sc_diag *diag) {
  memset(out, 0, sizeof *out);
  const unsigned char *b = buf;
  if (size < 10 || memcmp(b, MAGIC, 6) != 0)
    return sc_diag_set(diag, SC_ERR_PARSE, NULL, NULL,
                       "%s: not a .npy file (bad magic string)", name);
  unsigned major = b[6];
  size_t hlen, hstart;
  if (major == 1) {
    hlen = (size_t)b[8] | (size_t)b[9] << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12)
      return sc_diag_set(diag, SC_ERR_PARSE, NULL, NULL, "%s: truncated .npy header", name);
    hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    hstart = 12;
  } else {
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "%s: unsupported .npy format version %u.%u", name, major, b[7]);
  }
  if (hlen > size - hstart)
    return sc_diag_set(diag, SC_ERR_PARSE, NULL, NULL,
                       "%s: truncated .npy header (%zu bytes announced, %zu present)", name,
                       hlen, size - hstart);
  hdr h = {(const char *)b + hstart, (const char *)b + hstart + hlen, name, diag};
  bool swap = false;
  sc_status st = parse_header(&h, out, &swap);
  if (st != SC_OK) return st;

  unsigned esize = sc_dtype_size(out->dtype);
  int64_t numel = 1;
  for (int32_t d = 0; d < out->rank; d++)
    if (!sc_mul_i64(numel, out->dims[d], &numel) || numel > SC_MAX_ELEMENTS)
      return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "%s: .npy array too large", name);
  int64_t bytes;
  if (!sc_mul_i64(numel, esize, &bytes))
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "%s: .npy array too large", name);
  size_t avail = size - hstart - hlen;
  if ((uint64_t)bytes > avail)
    return sc_diag_set(diag, SC_ERR_PARSE, NULL, NULL,
                       "%s: truncated .npy data (%lld bytes expected, %zu present)", name,
                       (long long)bytes, avail);
  out->numel = numel;
  out->bytes = bytes;
  out->data = sc_malloc(bytes > 0 ? (size_t)bytes : 1);
  if (!out->data) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "%s: out of memory", name);
  memcpy(out->data, b + hstart + hlen, (size_t)bytes);
  if (swap && esize > 1) byteswap(out->data, numel, esize);
  return SC_OK;
}

sc_status sc_npy_read(const char *path, sc_npy *out, sc_diag *diag) {
  memset(out, 0, sizeof *out);
  /* a regular file (a FIFO or device is refused, never waited on), at most
   * the header plus SC_MAX_ELEMENTS of the widest dtype */
  char *buf = NULL;
  size_t size = 0;
  sc_status st = sc_file_read_all(path, path, NPY_MAX_FILE_BYTES, &buf, &size, diag);
  if (st != SC_OK) return st;
  st = sc_npy_read_mem(buf, size, path, out, diag);
  sc_free(buf);
  return st;
}

/* Writes the whole file (header and data) to f; path names it in
 * messages. */
static sc_status write_stream(FILE *f, const char *path, sc_dtype dtype, int32_t rank,
                              const int64_t *dims, const void *data, sc_diag *diag) {
  const char *descr = sc_npy_descr(dtype);
  if (!descr)
    return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL,
                       "%s: dtype %s cannot be written as .npy", path, sc_dtype_name(dtype));
  if (rank < 0 || rank > SC_MAX_RANK)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: bad rank %d", path, (int)rank);
  char dict[512];
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; d++) {
    if (dims[d] < 0 || !sc_mul_i64(numel, dims[d], &numel))
      return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: bad shape", path);
    /* as Python prints tuples: "()", "(3,)", "(2, 3)" */
    len += snprintf(dict + len, sizeof dict - (size_t)len, "%s%lld%s", d ? " " : "",
                    (long long)dims[d], d + 1 < rank || rank == 1 ? "," : "");
  }
  len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
  int64_t bytes;
  if (!sc_mul_i64(numel, sc_dtype_size(dtype), &bytes))
    return sc_diag_set(diag, SC_ERR_LIMIT, NULL, NULL, "%s: array too large", path);

  /* magic(6) + version(2) + hlen(2) + dict + padding + '\n' ≡ 0 mod 64 */
  size_t total = 10 + (size_t)len + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)len + pad + 1;
  unsigned char pre[10];
  memcpy(pre, MAGIC, 6);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = (unsigned char)(hlen & 0xff);
  pre[9] = (unsigned char)(hlen >> 8);

  errno = 0;
  bool ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre &&
            fwrite(dict, 1, (size_t)len, f) == (size_t)len;
  for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  if (ok && bytes > 0) ok = fwrite(data, 1, (size_t)bytes, f) == (size_t)bytes;
  if (!ok)
    return sc_diag_set(diag, SC_ERR_IO, NULL, NULL, "%s: write failed: %s", path,
                       strerror(errno ? errno : EIO));
  return SC_OK;
}

sc_status sc_npy_write(const char *path, sc_dtype dtype, int32_t rank, const int64_t *dims,
                       const void *data, sc_diag *diag) {
  if (rank < 0 || rank > SC_MAX_RANK)
    return sc_diag_set(diag, SC_ERR_USAGE, NULL, NULL, "%s: bad rank %d", path, (int)rank);
  sc_tensor_view v = {.name = path, .dtype = dtype, .rank = rank, .data = (void *)data};
  if (rank > 0) memcpy(v.dims, dims, (size_t)rank * sizeof *dims);
  return sc_npy_write_all(&path, &v, 1, diag);
}

sc_status sc_npy_write_all(const char *const *paths, const sc_tensor_view *views, int32_t n,
                           sc_diag *diag) {
  sc_file_commit *c = sc_calloc((size_t)n + 1, sizeof *c);
  if (!c) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_status st = SC_OK;
  int32_t open_n = 0;
  for (; st == SC_OK && open_n < n; open_n++) {
    const sc_tensor_view *v = &views[open_n];
    st = sc_file_commit_begin(&c[open_n], paths[open_n], diag);
    if (st != SC_OK) break;
    st = write_stream(c[open_n].f, paths[open_n], v->dtype, v->rank, v->dims, v->data, diag);
  }
  if (st == SC_OK) {
    st = sc_file_commit_end_all(c, n, diag);
  } else {
    for (int32_t i = 0; i < open_n && i < n; i++)
      if (c[i].f) sc_file_commit_abort(&c[i]);
  }
  sc_free(c);
  return st;
}
