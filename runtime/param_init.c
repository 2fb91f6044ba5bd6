/* param_init.c — counter-based parameter initialisation (param_init.h).
 *
 * Philox4x32-10 is written out from the published algorithm (Salmon,
 * Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11): ten rounds of two 32×32→64 multiplications by 0xD2511F53 and
 * 0xCD9E8D57, the key bumped by the Weyl constants 0x9E3779B9 and
 * 0xBB67AE85 between rounds. tests/unit/test_param_init.c checks it
 * against Random123's known-answer vectors.
 *
 * A piece is filled by walking its packed local elements in row-major
 * order with a mixed-radix counter over the local dims, mapping each
 * local index to its global one (sc_sharding_piece: block b of a strided
 * dim starts at b·(size/stride) + offset), so nothing but the piece is
 * ever written or allocated. */
#include "runtime/param_init.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

uint64_t sc_param_init_name_hash(const char *name) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a's offset basis and prime */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  return h;
}

static const char *const KIND_NAMES[SC_INIT_KIND_COUNT] = {"normal", "uniform", "zeros",
                                                           "ones",   "xavier",  "kaiming"};
_Static_assert(sizeof KIND_NAMES / sizeof *KIND_NAMES == SC_INIT_KIND_COUNT,
               "a name for every initialiser");

const char *sc_init_kind_name(sc_init_kind k) {
  return k >= 0 && k < SC_INIT_KIND_COUNT ? KIND_NAMES[k] : "?";
}

/* A glob fnmatch takes as meant: not empty, every '[' closed. */
static bool glob_ok(const char *g, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++) {
    if (g[i] == '\\') {
      i++;
      continue;
    }
    if (g[i] != '[') continue;
    size_t j = i + 1;
    if (j < n && (g[j] == '!' || g[j] == '^')) j++;
    if (j < n && g[j] == ']') j++; /* a leading ']' is a member */
    while (j < n && g[j] != ']') j++;
    if (j >= n) return false;
    i = j;
  }
  return true;
}

sc_status sc_param_init_add(sc_param_init *pi, const char *text, sc_diag *d) {
  if (pi->n_rules == SC_PARAM_INIT_MAX_RULES)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "at most %d --init rules",
                       SC_PARAM_INIT_MAX_RULES);
  sc_init_rule r = {0};
  const char *spec = text, *eq = strrchr(text, '=');
  if (eq && eq - text >= 1024)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "--init: a name pattern of %d characters "
                       "(at most 1023)", (int)(eq - text));
  if (eq) {
    if (!glob_ok(text, (size_t)(eq - text)))
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "--init '%s': bad name pattern '%.*s' (empty, or a '[' not closed)",
                         text, (int)(eq - text), text);
    spec = eq + 1;
  }
  const char *colon = strchr(spec, ':');
  size_t kn = colon ? (size_t)(colon - spec) : strlen(spec);
  int k = 0;
  while (k < SC_INIT_KIND_COUNT && !(strlen(KIND_NAMES[k]) == kn &&
                                     strncmp(spec, KIND_NAMES[k], kn) == 0))
    k++;
  if (k == SC_INIT_KIND_COUNT)
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "--init '%s': unknown initialiser '%.*s' (normal:STD, uniform:A, zeros, "
                       "ones, xavier, kaiming)", text, (int)kn, spec);
  r.kind = (sc_init_kind)k;
  bool takes = r.kind == SC_INIT_NORMAL || r.kind == SC_INIT_UNIFORM;
  if (takes) {
    char *end = NULL;
    r.arg = colon ? strtod(colon + 1, &end) : 0;
    if (!colon || end == colon + 1 || *end || !(r.arg > 0) || !isfinite(r.arg))
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "--init '%s': %s takes a positive number (%s:%s)", text,
                         KIND_NAMES[k], KIND_NAMES[k], r.kind == SC_INIT_NORMAL ? "STD" : "A");
  } else if (colon) {
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL, "--init '%s': %s takes no argument", text,
                       KIND_NAMES[k]);
  }
  /* the glob is text up to its last '=' (rule_matches copies it out) */
  r.glob = eq ? text : NULL;
  pi->rules[pi->n_rules++] = r;
  return SC_OK;
}

/* fnmatch of the rule's glob, which ends at the last '=' of its text. */
static bool rule_matches(const sc_init_rule *r, const char *name) {
  if (!r->glob) return true;
  const char *eq = strrchr(r->glob, '=');
  char g[1024];
  size_t n = (size_t)(eq - r->glob);
  if (n >= sizeof g) return false;
  memcpy(g, r->glob, n);
  g[n] = 0;
  return fnmatch(g, name, 0) == 0;
}

const sc_init_rule *sc_param_init_match(const sc_param_init *pi, const char *name) {
  for (int32_t i = 0; i < pi->n_rules; i++)
    if (rule_matches(&pi->rules[i], name)) return &pi->rules[i];
  return NULL;
}

static const sc_param_init_role *role_of(const sc_param_init *pi, const char *name) {
  for (int32_t i = 0; i < pi->n_roles; i++)
    if (strcmp(pi->roles[i].name, name) == 0) return &pi->roles[i];
  return NULL;
}

/* PyTorch's fans (param_init.h). false when undefined (rank < 2). */
static bool fans(const sc_param_init_role *role, int32_t rank, const int64_t *dims, double *in,
                 double *out) {
  if (rank < 2) return false;
  if (rank == 2) {
    bool last = role && role->fan_in_last;
    *in = (double)dims[last ? 1 : 0];
    *out = (double)dims[last ? 0 : 1];
    return true;
  }
  double rf = 1;
  for (int32_t k = 2; k < rank; k++) rf *= (double)dims[k];
  *in = (double)dims[1] * rf;
  *out = (double)dims[0] * rf;
  return true;
}

/* Element e's value under rule r with name hash h, scale and fans. */
static double value_at(const sc_init_rule *r, uint64_t seed, uint64_t h, double scale,
                       double fi, double fo, uint64_t e) {
  if (r->kind == SC_INIT_ZEROS) return 0.0;
  if (r->kind == SC_INIT_ONES) return 1.0;
  uint32_t ctr[4] = {(uint32_t)e, (uint32_t)(e >> 32), (uint32_t)h, (uint32_t)(h >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, w[4];
  sc_philox4x32_10(ctr, key, w);
  if (r->kind == SC_INIT_UNIFORM || r->kind == SC_INIT_XAVIER) {
    double u = (double)(((uint64_t)w[0] << 21) ^ (w[1] >> 11)) * 0x1p-53; /* [0, 1) */
    double a = r->kind == SC_INIT_UNIFORM ? r->arg : sqrt(6.0 / (fi + fo));
    return scale * a * (2.0 * u - 1.0);
  }
  double u1 = ((double)w[0] + 0.5) * 0x1p-32, u2 = (double)w[1] * 0x1p-32;
  double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
  double std = r->kind == SC_INIT_NORMAL ? r->arg : sqrt(2.0) / sqrt(fi);
  return scale * std * z;
}

double sc_param_init_value(const sc_param_init *pi, const sc_init_rule *r,
                           const sc_param_init_role *role, const char *name, int32_t rank,
                           const int64_t *dims, uint64_t e) {
  double scale = role && role->scale > 0 ? role->scale : 1.0, fi = 1, fo = 1;
  fans(role, rank, dims, &fi, &fo);
  return value_at(r, pi->seed, sc_param_init_name_hash(name), scale, fi, fo, e);
}

/* The name hashed and the dims indexed: a role's logical ones, or the
 * program's. */
static void logical_of(const sc_param_init_role *role, const char *name, int32_t rank,
                       const int64_t *dims, const char **lname, int32_t *lrank,
                       const int64_t **ldims) {
  *lname = role && role->logical ? role->logical : name;
  bool own = role && role->logical && role->rank == rank;
  *lrank = rank;
  *ldims = own ? role->dims : dims;
}

sc_status sc_param_init_check(const sc_param_init *pi, const char *name, sc_dtype dtype,
                              int32_t rank, const int64_t *dims, const sc_init_rule **rule,
                              sc_diag *d) {
  const sc_param_init_role *role = role_of(pi, name);
  const char *lname;
  int32_t lrank;
  const int64_t *ldims;
  logical_of(role, name, rank, dims, &lname, &lrank, &ldims);
  const sc_init_rule *r = *rule = sc_param_init_match(pi, lname);
  if (!r) return SC_OK;
  if (!sc_dtype_is_float(dtype))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "--init: parameter '%s' is %s, not a float type", lname,
                       sc_dtype_name(dtype));
  double fi, fo;
  if ((r->kind == SC_INIT_XAVIER || r->kind == SC_INIT_KAIMING) &&
      (!fans(role, lrank, ldims, &fi, &fo) || !(fi > 0) || !(fo > 0)))
    return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                       "--init: %s needs a tensor of rank 2 or more with a non-zero fan-in and "
                       "fan-out; parameter '%s' has rank %d (give it another rule before this "
                       "one, e.g. --init '%s=zeros')",
                       KIND_NAMES[r->kind], lname, (int)lrank, lname);
  return SC_OK;
}

sc_status sc_param_init_fill(const sc_param_init *pi, const char *name, sc_dtype dtype,
                             int32_t rank, const int64_t *dims, const sc_sharding *sh,
                             const sc_mesh *m, const int64_t *coords, void *dst, sc_diag *d) {
  const sc_init_rule *r;
  sc_status st = sc_param_init_check(pi, name, dtype, rank, dims, &r, d);
  if (st != SC_OK) return st;
  if (!r)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "--init: no rule matches parameter '%s'",
                       name);
  const sc_param_init_role *role = role_of(pi, name);
  const char *lname;
  int32_t lrank;
  const int64_t *ldims;
  logical_of(role, name, rank, dims, &lname, &lrank, &ldims);
  /* the piece: per dim its offset, extent, stride blocks and local size */
  int64_t off[SC_MAX_RANK], ext[SC_MAX_RANK], blk[SC_MAX_RANK], local[SC_MAX_RANK], n = 1;
  bool zero = false;
  for (int32_t k = 0; k < rank; k++) {
    int64_t s = sh ? sc_sharding_stride(sh, k) : 1;
    if (sh) sc_sharding_piece(sh, m, k, dims[k], coords, &off[k], &ext[k]);
    else off[k] = 0, ext[k] = dims[k];
    blk[k] = dims[k] / s;
    local[k] = ext[k] * s;
    n *= local[k];
  }
  for (int32_t a = 0; sh && a < m->n_axes; a++)
    if ((sh->partial & (1u << a)) && coords[a] != 0) zero = true;
  /* the piece is all that is written: a tensor split in P parts has a
   * piece of 1/P of it (the whole tensor is never on a rank that holds a
   * shard) */
  int64_t whole = 1, parts = 1;
  for (int32_t k = 0; k < rank; k++) {
    whole *= dims[k];
    parts *= sh ? sc_sharding_dim_parts(sh, m, k) : 1;
  }
  SC_ASSERT(n * parts == whole);
  uint64_t h = sc_param_init_name_hash(lname);
  double scale = role && role->scale > 0 ? role->scale : 1.0, fi = 1, fo = 1;
  fans(role, lrank, ldims, &fi, &fo);
  int64_t idx[SC_MAX_RANK] = {0};
  for (int64_t i = 0; i < n; i++) {
    /* global index of local element idx, row-major over the logical dims */
    uint64_t e = 0;
    bool pad = zero;
    for (int32_t k = 0; k < rank; k++) {
      int64_t g = (idx[k] / ext[k]) * blk[k] + off[k] + idx[k] % ext[k];
      if (g >= ldims[k]) pad = true;
      e = e * (uint64_t)ldims[k] + (uint64_t)g;
    }
    sc_store_f64(dtype, dst, i,
                 pad ? 0.0 : value_at(r, pi->seed, h, scale, fi, fo, e));
    for (int32_t k = rank - 1; k >= 0; k--) {
      if (++idx[k] < local[k]) break;
      idx[k] = 0;
    }
  }
  return SC_OK;
}

int64_t sc_param_init_piece_bytes(const sc_sharding *sh, const sc_mesh *m, sc_dtype dtype,
                                  int32_t rank, const int64_t *dims) {
  int64_t n = (int64_t)sc_dtype_size(dtype);
  for (int32_t k = 0; k < rank; k++) {
    int64_t off = 0, ext = dims[k];
    if (sh) sc_sharding_piece(sh, m, k, dims[k], (const int64_t[SC_MESH_MAX_AXES]){0}, &off, &ext);
    n *= ext * (sh ? sc_sharding_stride(sh, k) : 1);
  }
  return n;
}

sc_status sc_param_init_check_params(const sc_param_init *pi, const sc_train_manifest *m,
                                     const sc_program *p, const sc_dist_program *dp,
                                     int32_t *n_init, sc_diag *d) {
  *n_init = 0;
  for (int32_t k = 0; k < m->n_params; k++) {
    const char *name = m->params[k].name;
    int32_t gi = dp ? sc_dist_find_input(dp, name) : -1;
    const sc_dist_value *gv = gi >= 0 ? &dp->inputs[gi] : NULL;
    /* a pipelined step's buffer ids are its pieces': the global value */
    const sc_buffer *b = gv ? NULL : &p->buffers[m->params[k].buffer];
    const sc_init_rule *r;
    /* a parameter stored flat: its own shape (sc_train_manifest_param) */
    int32_t rank = m->params[k].rank > 0 ? m->params[k].rank : gv ? gv->rank : b->rank;
    const int64_t *dims = m->params[k].rank > 0 ? m->params[k].dims : gv ? gv->dims : b->dims;
    sc_status st = sc_param_init_check(pi, name, gv ? gv->dtype : b->dtype, rank, dims, &r, d);
    if (st != SC_OK) return st;
    if (r) (*n_init)++;
    else if (!m->params[k].data)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "parameter '%s' has no value in the model (its weights are absent) and "
                         "no --init rule matches it", name);
  }
  return SC_OK;
}
