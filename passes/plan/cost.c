/* cost.c — the collective and roofline formulas of cost.h.
 *
 * Ring (every collective): the n ranks pass chunks round a ring; a step
 * takes one hop's latency (the network's when the ring crosses nodes: every
 * step waits for its slowest hop) and the chunk's bytes over the slowest
 * link's bandwidth. Steps: all-reduce 2(n-1) (reduce-scatter then
 * all-gather), all-gather and reduce-scatter n-1, broadcast n-1 (a
 * pipelined chain), all-to-all and send 1 (every peer at once).
 *
 * Tree (all-reduce only), NCCL's shape: a chain through the m = n/nodes
 * ranks of each node, a binary tree between nodes; the reduction goes up
 * and the result comes down, so its latency is 2((m-1) intra-node hops +
 * ceil(log2 nodes) network hops), and each rank's link carries the whole
 * buffer once each way: 2B. Its bandwidth term is never below the ring's
 * (2B >= 2(n-1)/n B); it wins on latency, for small messages over many
 * ranks, as NCCL's tuner picks it. */
#include <math.h>
#include <string.h>

#include "cost.h"

#include "ir/attention.h"

const char *sc_coll_kind_name(sc_coll_kind k) {
  static const char *const names[SC_COLL_KIND_COUNT] = {
      "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "send"};
  return (unsigned)k < SC_COLL_KIND_COUNT ? names[k] : "?";
}

const char *sc_coll_algo_name(sc_coll_algo a) {
  return a == SC_COLL_RING ? "ring" : a == SC_COLL_TREE ? "tree" : "?";
}

/* Latency and bandwidth of the link a group uses; an unknown one is an
 * error naming the cluster's key. */
static sc_status link_of(const sc_cluster *c, bool cross, const sc_cluster_link **out,
                         sc_diag *d) {
  const sc_cluster_link *l = cross ? &c->inter_node : &c->intra_node;
  const char *key = cross ? "inter_node" : "intra_node";
  if (!(l->bandwidth_bytes_per_s > 0) || !(l->latency_s > 0))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "cluster %s: %s.%s is unknown (uncalibrated: run shardc calibrate)",
                       c->name, key, l->bandwidth_bytes_per_s > 0 ? "latency_s"
                                                                  : "bandwidth_bytes_per_s");
  *out = l;
  return SC_OK;
}

sc_status sc_cost_collective_algo(const sc_cluster *c, sc_coll_kind k, sc_coll_algo a,
                                  double bytes, sc_coll_group g, sc_coll_cost *out,
                                  sc_diag *d) {
  memset(out, 0, sizeof *out);
  out->algo = a;
  if ((unsigned)k >= SC_COLL_KIND_COUNT || (unsigned)a >= SC_COLL_ALGO_COUNT)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "collective: unknown kind or algorithm");
  if (a == SC_COLL_TREE && k != SC_COLL_ALL_REDUCE)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "collective: %s has no tree algorithm",
                       sc_coll_kind_name(k));
  if (!(bytes >= 0) || !isfinite(bytes))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "collective: %s of %g bytes",
                       sc_coll_kind_name(k), bytes);
  if (g.ranks < 1 || g.nodes < 1 || g.ranks % g.nodes != 0)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "collective: a group of %lld ranks over %lld nodes is not even",
                       (long long)g.ranks, (long long)g.nodes);
  if (g.ranks == 1) return SC_OK; /* nothing moves */
  bool cross = g.nodes > 1;
  const sc_cluster_link *l = NULL;
  if (link_of(c, cross, &l, d) != SC_OK) return d->status;
  double n = (double)g.ranks, steps = 1, moved = bytes;
  if (a == SC_COLL_TREE) {
    const sc_cluster_link *intra = l;
    if (g.ranks > g.nodes && link_of(c, false, &intra, d) != SC_OK) return d->status;
    double per_node = (double)(g.ranks / g.nodes);
    double up = (per_node - 1) * intra->latency_s + ceil(log2((double)g.nodes)) *
                                                        (cross ? l->latency_s : 0);
    out->latency_s = 2 * up;
    out->bytes_per_rank = 2 * bytes;
  } else {
    switch (k) {
    case SC_COLL_ALL_REDUCE: steps = 2 * (n - 1); moved = 2 * (n - 1) / n * bytes; break;
    case SC_COLL_ALL_GATHER:
    case SC_COLL_REDUCE_SCATTER: steps = n - 1; moved = (n - 1) / n * bytes; break;
    case SC_COLL_ALL_TO_ALL: steps = 1; moved = (n - 1) / n * bytes; break;
    case SC_COLL_BROADCAST: steps = n - 1; moved = bytes; break;
    default: steps = 1; moved = bytes; break; /* send */
    }
    out->latency_s = steps * l->latency_s;
    out->bytes_per_rank = moved;
  }
  if (!cross && c->profile.n_comms > 0) out->latency_s += c->profile.comms[0].overhead_s;
  out->transfer_s = out->bytes_per_rank / l->bandwidth_bytes_per_s;
  if (k == SC_COLL_ALL_TO_ALL && cross && g.ranks > g.nodes) {
    /* each rank's B/n to each peer: the m − 1 in its node over NVLink at
     * the same time as the n − m elsewhere over the network; the slower
     * part is the time */
    const sc_cluster_link *intra = NULL;
    if (link_of(c, false, &intra, d) != SC_OK) return d->status;
    double m = (double)(g.ranks / g.nodes);
    double net = (n - m) / n * bytes / l->bandwidth_bytes_per_s;
    double nv = (m - 1) / n * bytes / intra->bandwidth_bytes_per_s;
    out->transfer_s = net > nv ? net : nv;
  }
  out->seconds = out->latency_s + out->transfer_s;
  return SC_OK;
}

sc_status sc_cost_collective(const sc_cluster *c, sc_coll_kind k, double bytes, sc_coll_group g,
                             sc_coll_cost *out, sc_diag *d) {
  if (sc_cost_collective_algo(c, k, SC_COLL_RING, bytes, g, out, d) != SC_OK) return d->status;
  if (k != SC_COLL_ALL_REDUCE || g.ranks == 1) return SC_OK;
  sc_coll_cost tree;
  if (sc_cost_collective_algo(c, k, SC_COLL_TREE, bytes, g, &tree, d) != SC_OK) return d->status;
  if (tree.seconds < out->seconds) *out = tree;
  return SC_OK;
}

int64_t sc_cost_group_nodes(const sc_mesh *m, sc_axes set) {
  int64_t n = sc_mesh_group_size(m, set);
  if (m->ranks_per_node < 1 || n <= 1) return 1;
  /* the group through rank 0: its members in key order, nodes ascending */
  int64_t nodes = 0, last = -1;
  int64_t coords[SC_MESH_MAX_AXES] = {0};
  for (int64_t key = 0; key < n; key++) {
    int64_t rest = key; /* key's coordinates along set, last axis fastest */
    for (int32_t a = m->n_axes - 1; a >= 0; a--) {
      if (!(set & (1u << a))) continue;
      coords[a] = rest % m->axes[a].size;
      rest /= m->axes[a].size;
    }
    int64_t node = sc_mesh_node_of(m, sc_mesh_coords_to_rank(m, coords));
    if (node != last) nodes++;
    last = node;
  }
  return nodes;
}

double sc_cost_gemm_efficiency(int64_t m, int64_t n, int64_t k) {
  int64_t lo = m < n ? m : n;
  if (k < lo) lo = k;
  if (lo >= SC_COST_GEMM_LARGE) return SC_COST_GEMM_BEST;
  if (lo >= SC_COST_GEMM_TILE) return SC_COST_GEMM_MID;
  return SC_COST_GEMM_LOW * (double)(lo < 1 ? 1 : lo) / SC_COST_GEMM_TILE;
}

static sc_status need_hbm(const sc_cluster *c, sc_diag *d) {
  if (c->memory_bytes_per_s > 0) return SC_OK;
  return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "cluster %s: gpu.hbm_bytes_per_s is unknown (uncalibrated: run shardc "
                     "calibrate)", c->name);
}

double sc_cost_step_overhead(const sc_cluster *c) {
  return c->profile.present ? c->profile.step_overhead_s : 0;
}

/* The profile's time of `flops` at `rate` (of dtype t; 0: none
 * measured), with the bytes at its streaming bandwidth, plus the step
 * overhead. */
static sc_status profile_rate_time(const sc_cluster *c, sc_cluster_dtype t, double flops,
                                   double bytes, double rate, double *seconds, sc_diag *d) {
  if (!(rate > 0))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "cluster %s: its profile has no %s GEMM (calibrate measured none)",
                       c->name, sc_cluster_dtype_names[t]);
  double tc = flops / rate, tm = bytes / c->profile.memory_bytes_per_s;
  *seconds = (tc > tm ? tc : tm) + sc_cost_step_overhead(c);
  return SC_OK;
}

/* The same at the rate of an m x n x k product of t in layout (ta, tb). */
static sc_status profile_gemm_time(const sc_cluster *c, sc_cluster_dtype t, double flops,
                                   double bytes, bool ta, bool tb, double m, double n, double k,
                                   double *seconds, sc_diag *d) {
  double rate = sc_profile_gemm_rate(&c->profile, t, ta, tb, m, n, k);
  return profile_rate_time(c, t, flops, bytes, rate, seconds, d);
}

static sc_status check_gemm(const sc_cluster *c, sc_cluster_dtype t, double flops, double bytes,
                            double eff, sc_diag *d) {
  if ((unsigned)t >= SC_CLUSTER_DTYPE_COUNT || !(c->peak_flops[t] > 0))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                       "cluster %s: gpu.peak_flops.%s is unknown%s", c->name,
                       (unsigned)t < SC_CLUSTER_DTYPE_COUNT ? sc_cluster_dtype_names[t] : "?",
                       c->memory_bytes_per_s > 0 ? " (the cluster gives no peak for it)"
                           : " (uncalibrated: run shardc calibrate)");
  if (need_hbm(c, d) != SC_OK) return d->status;
  if (!(eff > 0 && eff <= 1) || !(flops >= 0) || !(bytes >= 0))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "GEMM: %g FLOPs, %g bytes, efficiency %g",
                       flops, bytes, eff);
  return SC_OK;
}

sc_status sc_cost_gemm_time(const sc_cluster *c, sc_cluster_dtype t, double flops, double bytes,
                            double eff, double *seconds, sc_diag *d) {
  *seconds = 0;
  if (check_gemm(c, t, flops, bytes, eff, d) != SC_OK) return d->status;
  if (c->profile.present) { /* the shape is unknown here: a cube of the same FLOPs */
    double side = cbrt(flops / 2);
    return profile_gemm_time(c, t, flops, bytes, false, false, side, side, side, seconds, d);
  }
  double tc = flops / (c->peak_flops[t] * eff);
  double tm = bytes / (c->memory_bytes_per_s * SC_COST_MEMORY_EFF);
  *seconds = tc > tm ? tc : tm;
  return SC_OK;
}

sc_status sc_cost_gemm_shape_time(const sc_cluster *c, sc_cluster_dtype t, bool trans_a,
                                  bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                                  double bytes, double *seconds, sc_diag *d) {
  *seconds = 0;
  double flops = 2.0 * (double)batch * (double)m * (double)n * (double)k;
  if (batch < 1 || m < 1 || n < 1 || k < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "GEMM: shape %lld x %lld x %lld x %lld",
                       (long long)batch, (long long)m, (long long)n, (long long)k);
  double eff = sc_cost_gemm_efficiency(m, n, k);
  if (!c->profile.present) return sc_cost_gemm_time(c, t, flops, bytes, eff, seconds, d);
  if (check_gemm(c, t, flops, bytes, eff, d) != SC_OK) return d->status;
  return profile_gemm_time(c, t, flops, bytes, trans_a, trans_b, (double)m, (double)n, (double)k,
                           seconds, d);
}

sc_status sc_cost_kernel_time(const sc_cluster *c, double bytes, const double *f, bool split,
                              double *seconds, sc_diag *d) {
  if (!c->profile.present || !c->profile.has_kernel)
    return sc_cost_memory_time(c, bytes, seconds, d);
  *seconds = 0;
  if (need_hbm(c, d) != SC_OK) return d->status;
  double tc = 0;
  for (int t = 0; t < SC_PROFILE_KERNEL_TERMS; t++) {
    if (!(f[t] >= 0))
      return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "kernel feature %d: %g", t, f[t]);
    tc += c->profile.kernel_s[t] * f[t];
  }
  if (split && c->profile.threads > 1) tc /= (double)c->profile.threads;
  /* a kernel the pool does not split streams on one thread */
  double bw = !split && c->profile.memory_thread_bytes_per_s > 0
                  ? c->profile.memory_thread_bytes_per_s : c->profile.memory_bytes_per_s;
  double tm = bytes / bw;
  *seconds = (tc > tm ? tc : tm) + sc_cost_step_overhead(c);
  return SC_OK;
}

sc_status sc_cost_attention_time(const sc_cluster *c, sc_cluster_dtype t,
                                 const sc_attention_shape *s, bool grad, double bytes,
                                 double *seconds, double *flops, sc_diag *d) {
  *seconds = *flops = 0;
  double f = sc_attention_flops(s->b, s->h, s->sq, s->skv, s->d, s->dv, s->causal, grad);
  if (f <= 0) return SC_OK; /* nothing visible, or an empty batch */
  if (s->sq < 1 || s->skv < 1 || s->d < 1)
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "attention: sq %lld, skv %lld, d %lld",
                       (long long)s->sq, (long long)s->skv, (long long)s->d);
  const sc_profile_attention *pa = c->profile.present && strcmp(c->profile.device, "cpu") == 0
                                       ? sc_profile_find_attention(&c->profile, t, grad) : NULL;
  if (pa) { /* the CPU kernel's measured model (profile.h) */
    if (need_hbm(c, d) != SC_OK) return d->status;
    double feat[SC_PROFILE_ATTN_TERMS], units = 1, tc = 0;
    sc_profile_attention_features(s->b, s->h, s->sq, s->skv, s->d, s->dv, s->causal, feat,
                                  &units);
    for (int i = 0; i < SC_PROFILE_ATTN_TERMS; i++) tc += pa->s[i] * feat[i];
    double par = (double)(c->profile.threads > 1 ? c->profile.threads : 1);
    tc /= units < par ? (units > 1 ? units : 1) : par;
    double tm = bytes / c->profile.memory_bytes_per_s;
    *seconds = (tc > tm ? tc : tm) + sc_cost_step_overhead(c);
    *flops = f;
    return SC_OK;
  }
  sc_status st =
      sc_cost_fused_attention_time(c, t, f, bytes, s->sq, s->skv, s->d, grad, seconds, d);
  if (st == SC_OK) *flops = f;
  return st;
}

sc_status sc_cost_fused_attention_time(const sc_cluster *c, sc_cluster_dtype t, double flops,
                                       double bytes, int64_t sq, int64_t skv, int64_t hd,
                                       bool grad, double *seconds, sc_diag *d) {
  *seconds = 0;
  double eff = sc_cost_gemm_efficiency(sq, skv, hd);
  if (check_gemm(c, t, flops, bytes, eff, d) != SC_OK) return d->status;
  double ae = c->attention_efficiency;
  if (!c->profile.present) /* the kernel reaches no more than its products would */
    return sc_cost_gemm_time(c, t, flops, bytes, ae > 0 && ae < eff ? ae : eff, seconds, d);
  const sc_profile_attention *pa = strcmp(c->profile.device, "cuda") == 0
                                       ? sc_profile_find_attention(&c->profile, t, grad) : NULL;
  double rate = pa ? pa->flops_per_s
                   : sc_profile_gemm_rate(&c->profile, t, false, true, (double)sq, (double)skv,
                                          (double)hd);
  if (!pa && ae > 0 && rate > ae * c->peak_flops[t]) rate = ae * c->peak_flops[t];
  return profile_rate_time(c, t, flops, bytes, rate, seconds, d);
}

sc_status sc_cost_memory_time(const sc_cluster *c, double bytes, double *seconds, sc_diag *d) {
  *seconds = 0;
  if (need_hbm(c, d) != SC_OK) return d->status;
  if (!(bytes >= 0))
    return sc_diag_set(d, SC_ERR_INVALID, NULL, NULL, "memory-bound step of %g bytes", bytes);
  if (c->profile.present) { /* measured: no efficiency on top */
    *seconds = bytes / c->profile.memory_bytes_per_s + sc_cost_step_overhead(c);
    return SC_OK;
  }
  *seconds = bytes / (c->memory_bytes_per_s * SC_COST_MEMORY_EFF);
  return SC_OK;
}
