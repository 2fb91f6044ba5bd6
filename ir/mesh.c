/* mesh.c — mesh parsing, rank <-> coordinates, groups along axes, nodes.
 *
 * All arithmetic is on int64 with n_ranks <= 2^20, so products of sizes
 * cannot overflow once a mesh is valid; parsing checks each product as it
 * grows. Groups are computed from coordinates, never by scanning all ranks,
 * except sc_mesh_is_intra_node, which visits each group once (O(n_ranks)). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh.h"

void sc_mesh_init(sc_mesh *m) {
  memset(m, 0, sizeof *m);
  m->n_ranks = 1;
}

static bool is_ident(const char *s, size_t n) {
  if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
  return true;
}

sc_status sc_mesh_add_axis(sc_mesh *m, const char *name, int64_t size, sc_diag *d) {
  size_t len = strlen(name);
  if (!is_ident(name, len))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "mesh axis name '%s' is not an identifier", name);
  if (len >= SC_MESH_NAME_MAX)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL,
                       "mesh axis name '%s' is longer than %d bytes", name,
                       SC_MESH_NAME_MAX - 1);
  if (sc_mesh_find_axis(m, name) >= 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "mesh axis '%s' appears twice", name);
  if (m->n_axes >= SC_MESH_MAX_AXES)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL, "a mesh has at most %d axes",
                       SC_MESH_MAX_AXES);
  if (size < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "mesh axis '%s' has size %lld; sizes are >= 1", name,
                       (long long)size);
  int64_t total;
  if (size > SC_MESH_MAX_RANKS || !sc_mul_i64(m->n_ranks, size, &total) ||
      total > SC_MESH_MAX_RANKS)
    return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL,
                       "mesh has more than %lld ranks (axis '%s' = %lld)",
                       (long long)SC_MESH_MAX_RANKS, name, (long long)size);
  memcpy(m->axes[m->n_axes].name, name, len + 1);
  m->axes[m->n_axes].size = size;
  m->n_axes++;
  m->n_ranks = total;
  return SC_OK;
}

const char *const sc_mesh_role_names[] = {"dp", "fsdp", "tp", "pp", "cp", "ep", NULL};

sc_status sc_mesh_check_roles(const sc_mesh *m, sc_diag *d) {
  for (int32_t i = 0; i < m->n_axes; i++) {
    bool known = false;
    for (int k = 0; sc_mesh_role_names[k] && !known; k++)
      known = strcmp(m->axes[i].name, sc_mesh_role_names[k]) == 0;
    if (!known)
      return sc_diag_set(d, SC_ERR_USAGE, NULL, NULL,
                         "mesh axis '%s' has no role: the known axes are dp (data parallel), fsdp "
                         "(sharded data parallel, training), "
                         "tp (tensor parallel), pp (pipeline stages), cp (context parallel: "
                         "the sequence) and ep (expert parallel: the experts and the batch)",
                         m->axes[i].name);
  }
  return SC_OK;
}

sc_status sc_mesh_parse(const char *spec, sc_mesh *m, sc_diag *d) {
  sc_mesh_init(m);
  if (!spec) spec = "";
  const char *s = spec;
  for (;;) {
    while (*s == ' ' || *s == '\t') s++;
    const char *name = s;
    while (*s && *s != '=' && *s != ',' && *s != ' ' && *s != '\t') s++;
    size_t nlen = (size_t)(s - name);
    while (*s == ' ' || *s == '\t') s++;
    if (nlen == 0 || *s != '=') {
      sc_mesh_init(m);
      return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL,
                         "mesh '%s': expected NAME=SIZE[,NAME=SIZE...] at '%s'", spec,
                         name);
    }
    char nbuf[256];
    if (nlen >= sizeof nbuf) nlen = sizeof nbuf - 1;
    memcpy(nbuf, name, nlen);
    nbuf[nlen] = 0;
    s++;
    while (*s == ' ' || *s == '\t') s++;
    const char *num = s;
    while (*s >= '0' && *s <= '9') s++;
    if (s == num || s - num > 9) {
      const char *bad = num;
      sc_mesh_init(m);
      if (s - num > 9)
        return sc_diag_set(d, SC_ERR_LIMIT, NULL, NULL,
                           "mesh '%s': axis '%s' is larger than %lld", spec, nbuf,
                           (long long)SC_MESH_MAX_RANKS);
      return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL,
                         "mesh '%s': axis '%s' needs a size, found '%s'", spec, nbuf, bad);
    }
    int64_t size = strtoll(num, NULL, 10);
    sc_status st = sc_mesh_add_axis(m, nbuf, size, d);
    if (st != SC_OK) {
      sc_mesh_init(m);
      return st;
    }
    while (*s == ' ' || *s == '\t') s++;
    if (*s == 0) return SC_OK;
    if (*s != ',') {
      const char *bad = s;
      sc_mesh_init(m);
      return sc_diag_set(d, SC_ERR_PARSE, NULL, NULL,
                         "mesh '%s': expected ',' or the end at '%s'", spec, bad);
    }
    s++;
  }
}

sc_status sc_mesh_set_ranks_per_node(sc_mesh *m, int64_t n, sc_diag *d) {
  if (n < 0 || n > SC_MESH_MAX_RANKS)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "ranks per node %lld outside 1..%lld", (long long)n,
                       (long long)SC_MESH_MAX_RANKS);
  m->ranks_per_node = n;
  return SC_OK;
}

size_t sc_mesh_format(const sc_mesh *m, char *buf, size_t n) {
  size_t len = 0;
  if (n) buf[0] = 0;
  for (int32_t i = 0; i < m->n_axes; i++) {
    int k = snprintf(len < n ? buf + len : NULL, len < n ? n - len : 0, "%s%s=%lld",
                     i ? "," : "", m->axes[i].name, (long long)m->axes[i].size);
    if (k > 0) len += (size_t)k;
  }
  return len;
}

bool sc_mesh_equal(const sc_mesh *a, const sc_mesh *b) {
  if (a->n_axes != b->n_axes || a->ranks_per_node != b->ranks_per_node) return false;
  for (int32_t i = 0; i < a->n_axes; i++)
    if (a->axes[i].size != b->axes[i].size || strcmp(a->axes[i].name, b->axes[i].name))
      return false;
  return true;
}

int32_t sc_mesh_find_axis(const sc_mesh *m, const char *name) {
  for (int32_t i = 0; i < m->n_axes; i++)
    if (strcmp(m->axes[i].name, name) == 0) return i;
  return -1;
}

int64_t sc_mesh_axis_size(const sc_mesh *m, const char *name) {
  int32_t i = sc_mesh_find_axis(m, name);
  return i < 0 ? 1 : m->axes[i].size;
}

void sc_mesh_rank_to_coords(const sc_mesh *m, int64_t rank, int64_t *coords) {
  SC_ASSERT(rank >= 0 && rank < m->n_ranks);
  for (int32_t i = m->n_axes - 1; i >= 0; i--) {
    coords[i] = rank % m->axes[i].size;
    rank /= m->axes[i].size;
  }
}

int64_t sc_mesh_coords_to_rank(const sc_mesh *m, const int64_t *coords) {
  int64_t r = 0;
  for (int32_t i = 0; i < m->n_axes; i++) {
    SC_ASSERT(coords[i] >= 0 && coords[i] < m->axes[i].size);
    r = r * m->axes[i].size + coords[i];
  }
  return r;
}

bool sc_mesh_axes_of(const sc_mesh *m, const char *const *names, int32_t n, sc_axes *out) {
  sc_axes set = 0;
  for (int32_t i = 0; i < n; i++) {
    int32_t a = sc_mesh_find_axis(m, names[i]);
    if (a < 0) return false;
    set |= (sc_axes)1 << a;
  }
  *out = set;
  return true;
}

sc_axes sc_mesh_all_axes(const sc_mesh *m) {
  return m->n_axes ? (sc_axes)((1u << m->n_axes) - 1) : 0;
}

int64_t sc_mesh_group_size(const sc_mesh *m, sc_axes set) {
  int64_t n = 1;
  for (int32_t i = 0; i < m->n_axes; i++)
    if (set & (1u << i)) n *= m->axes[i].size;
  return n;
}

/* Row-major index of coords over the axes in set (in mesh order). */
static int64_t index_over(const sc_mesh *m, sc_axes set, const int64_t *coords) {
  int64_t r = 0;
  for (int32_t i = 0; i < m->n_axes; i++)
    if (set & (1u << i)) r = r * m->axes[i].size + coords[i];
  return r;
}

void sc_mesh_group_ranks(const sc_mesh *m, sc_axes set, int64_t rank, int64_t *out) {
  int64_t c[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(m, rank, c);
  int64_t n = sc_mesh_group_size(m, set);
  for (int64_t k = 0; k < n; k++) {
    /* k row-major over the set's axes: the last one varies fastest */
    int64_t rem = k;
    for (int32_t i = m->n_axes - 1; i >= 0; i--) {
      if (!(set & (1u << i))) continue;
      c[i] = rem % m->axes[i].size;
      rem /= m->axes[i].size;
    }
    out[k] = sc_mesh_coords_to_rank(m, c);
  }
}

int64_t sc_mesh_group_color(const sc_mesh *m, sc_axes set, int64_t rank) {
  int64_t c[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(m, rank, c);
  return index_over(m, sc_mesh_all_axes(m) & ~set, c);
}

int64_t sc_mesh_group_key(const sc_mesh *m, sc_axes set, int64_t rank) {
  int64_t c[SC_MESH_MAX_AXES];
  sc_mesh_rank_to_coords(m, rank, c);
  return index_over(m, set, c);
}

int64_t sc_mesh_node_of(const sc_mesh *m, int64_t rank) {
  return m->ranks_per_node > 0 ? rank / m->ranks_per_node : 0;
}

bool sc_mesh_is_intra_node(const sc_mesh *m, sc_axes set) {
  if (m->ranks_per_node <= 0) return true;
  /* Nodes are contiguous rank ranges and rank grows with each coordinate,
   * so a group is within one node iff its smallest and largest ranks are. */
  int64_t c[SC_MESH_MAX_AXES];
  for (int64_t r = 0; r < m->n_ranks; r++) {
    sc_mesh_rank_to_coords(m, r, c);
    bool first = true;
    for (int32_t i = 0; i < m->n_axes; i++)
      if ((set & (1u << i)) && c[i] != 0) first = false;
    if (!first) continue;
    for (int32_t i = 0; i < m->n_axes; i++)
      if (set & (1u << i)) c[i] = m->axes[i].size - 1;
    if (sc_mesh_node_of(m, r) != sc_mesh_node_of(m, sc_mesh_coords_to_rank(m, c)))
      return false;
  }
  return true;
}
