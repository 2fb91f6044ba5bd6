/* check_run.c — the checks of `shardc check` that run what was built
 * (check_run.h): the partitioned training step against one rank, and the
 * bundle written twice and hashed.
 *
 * equivalence: both steps from the same seeded data (make_data),
 * SC_CHECK_EQUIV_STEPS steps each, the one-rank trainer (runtime/trainer.h) and the
 * thread-ranks' (runtime/dist_train.h) as `shardc train` creates them;
 * every loss and gradient norm compared, then every trained parameter
 * (its global tensor assembled from the ranks) against the one rank's, in
 * units of its largest update over the steps (the initial values kept).
 * reproducible: the bundles as `shardc compile` writes them (cpu), into a
 * scratch directory registered for removal on a signal and removed after
 * (ir/fileio.h's directory commit, aborted), every file hashed (streamed). */
#define _GNU_SOURCE /* nftw */
#include "check_run.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/bundle.h"
#include "codegen/dist_bundle.h"
#include "codegen/program_json.h"
#include "driver/train_bundle.h"
#include "ir/fileio.h"
#include "runtime/dist_train.h"
#include "runtime/train_bundle.h"
#include "runtime/trainer.h"

/* The equivalence's tolerances, lr and seed (check_run.h says why). */
static const double EQUIV_LOSS_RTOL = 2e-5;
static const double EQUIV_SGD_TOL = 2e-4, EQUIV_ADAMW_TOL = 2e-2;
/* AdamW: an element whose first moment is within this of its tensor's
 * largest is led by rounding noise (check_run.h) and left out of the
 * weights' comparison; the moments themselves are compared to
 * EQUIV_SGD_TOL (linear in the gradients, as SGD's update). */
static const double EQUIV_ADAMW_NOISE = 1e-4;
static const double EQUIV_LR = 1e-3;
static const uint64_t EQUIV_SEED = 20261205;

/* ---- 4. equivalence ---- */

static uint64_t next_random(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Seeded data for each input the step takes, dims[0] times the microbatch
 * accumulation: floats uniform in [-1, 1), integers (labels and token ids)
 * uniform in [0, classes) (2 without classes). */
static sc_status make_data(const sc_trainer *one, const sc_train_manifest *m, sc_tensor_view *v,
                           int32_t *n, sc_diag *d) {
  *n = sc_trainer_n_data(one);
  uint64_t seed = EQUIV_SEED;
  int64_t k = m->classes > 0 ? m->classes : 2;
  for (int32_t i = 0; i < *n; i++) {
    const sc_buffer *b = sc_trainer_data(one, i);
    v[i] = (sc_tensor_view){.name = b->name, .dtype = b->dtype, .rank = b->rank};
    memcpy(v[i].dims, b->dims, sizeof v[i].dims);
    if (b->rank > 0) v[i].dims[0] *= m->grad_accum;
    int64_t numel = 1;
    for (int32_t j = 0; j < b->rank; j++) numel *= v[i].dims[j];
    void *data = sc_malloc((size_t)numel * sc_dtype_size(b->dtype) + 1);
    if (!data) return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
    v[i].data = data;
    for (int64_t e = 0; e < numel; e++) {
      uint64_t x = next_random(&seed);
      if (sc_dtype_is_float(b->dtype))
        sc_store_f64(b->dtype, data, e, (double)(x >> 11) * 0x1.0p-52 - 1.0);
      else sc_store_i64(b->dtype, data, e, (int64_t)(x % (uint64_t)k));
    }
  }
  return SC_OK;
}

void sc_check_equivalence(sc_check_report *r, const sc_build *mesh, const sc_build *one_build,
                          const sc_train_opts *t) {
  const sc_check_id C = SC_CHECK_EQUIVALENCE;
  const sc_dist_program *dp = mesh->program;
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_train_manifest *m1 = NULL, *mm = NULL;
  sc_trainer *one = NULL;
  sc_dist_trainer *dist = NULL;
  sc_tensor_view data[64];
  int32_t n_data = 0;
  double *init = NULL;
  sc_trainer_opts to = {.threads = 1};
  sc_status st = sc_build_train_manifest(one_build, t, &m1, &d);
  if (st == SC_OK) st = sc_build_train_manifest(mesh, t, &mm, &d);
  if (st == SC_OK)
    st = sc_trainer_create_manifest(one_build->program->stages[0].program, m1, &to, &one, &d);
  if (st == SC_OK) st = sc_dist_trainer_create(dp, mm, &to, NULL, &dist, &d);
  if (st == SC_OK && sc_trainer_n_data(one) > 64)
    st = sc_diag_set(&d, SC_ERR_LIMIT, NULL, NULL, "more than 64 data inputs");
  if (st == SC_OK) st = make_data(one, m1, data, &n_data, &d);
  /* the initial weights, for the size of the updates */
  int64_t total = 0;
  for (int32_t k = 0; st == SC_OK && k < m1->n_params; k++) {
    const sc_buffer *pb;
    if (sc_trainer_state(one, m1->params[k].name, &pb)) total += pb->bytes / (int64_t)sc_dtype_size(pb->dtype);
  }
  if (st == SC_OK && !(init = sc_malloc((size_t)total * sizeof *init + 1)))
    st = sc_diag_set(&d, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  for (int32_t k = 0, off = 0; st == SC_OK && k < m1->n_params; k++) {
    const sc_buffer *pb;
    const void *x = sc_trainer_state(one, m1->params[k].name, &pb);
    int64_t n = x ? pb->bytes / (int64_t)sc_dtype_size(pb->dtype) : 0;
    for (int64_t e = 0; e < n; e++) init[off + e] = sc_load_f64(pb->dtype, x, e);
    off += (int32_t)n;
  }
  double worst_loss = 0;
  bool bad = false;
  for (int64_t step = 1; st == SC_OK && step <= SC_CHECK_EQUIV_STEPS; step++) {
    double l1 = 0, n1 = 0, l2 = 0, n2 = 0;
    bool ap1 = true, ap2 = true;
    st = sc_trainer_step(one, data, n_data, EQUIV_LR, step, &l1, &n1, &ap1, &d);
    if (st == SC_OK)
      st = sc_dist_trainer_step(dist, data, n_data, EQUIV_LR, step, &l2, &n2, &ap2, &d);
    if (st != SC_OK) break;
    double el = fabs(l2 - l1) / fmax(fabs(l1), 1e-30), en = fabs(n2 - n1) / fmax(fabs(n1), 1e-30);
    if (!isfinite(l1) || !isfinite(l2) || !isfinite(n1) || !isfinite(n2) ||
        el > EQUIV_LOSS_RTOL || en > EQUIV_LOSS_RTOL) {
      if (!bad) sc_check_set(r, C, SC_CHECK_FAILED, "the mesh does not train as one rank:");
      bad = true;
      sc_check_append(r, C, "  step %lld: loss %.9g (one rank %.9g), gradient norm %.9g (%.9g): "
                      "relative differences %.3g and %.3g, tolerance %g", (long long)step, l2,
                      l1, n2, n1, el, en, EQUIV_LOSS_RTOL);
    }
    worst_loss = fmax(worst_loss, fmax(el, en));
  }
  bool sgd = strcmp(m1->optimizer, "sgd") == 0;
  double tol = sgd ? EQUIV_SGD_TOL : EQUIV_ADAMW_TOL, worst_w = 0;
  int32_t n_noise = 0; /* tensors with elements left out as noise-led */
  const char *worst_name = "";
  for (int32_t k = 0, off = 0; st == SC_OK && k < m1->n_params; k++) {
    const sc_buffer *pb;
    const char *name = m1->params[k].name;
    const void *x = sc_trainer_state(one, name, &pb);
    if (!x) continue;
    int64_t n = pb->bytes / (int64_t)sc_dtype_size(pb->dtype);
    sc_tensor_view v;
    if ((st = sc_dist_trainer_state(dist, name, &v, &d)) != SC_OK) break;
    /* AdamW's first moments: compared, and which elements they lead */
    char mname[600];
    snprintf(mname, sizeof mname, "%s.exp_avg", name);
    const sc_buffer *mb = NULL;
    const void *m_one = sgd ? NULL : sc_trainer_state(one, mname, &mb);
    sc_tensor_view mv = {0};
    double mmax = 0, mdiff = 0;
    if (m_one && mb->bytes / (int64_t)sc_dtype_size(mb->dtype) == n) {
      if ((st = sc_dist_trainer_state(dist, mname, &mv, &d)) != SC_OK) {
        sc_free((void *)v.data);
        break;
      }
      for (int64_t e = 0; e < n; e++) {
        double a = sc_load_f64(mb->dtype, m_one, e), b = sc_load_f64(mv.dtype, mv.data, e);
        mmax = fmax(mmax, fabs(a));
        double dd = fabs(b - a);
        mdiff = isnan(dd) || isnan(mdiff) ? NAN : fmax(mdiff, dd);
      }
    } else {
      m_one = NULL;
    }
    double update = 0, diff = 0;
    int64_t noise = 0;
    for (int64_t e = 0; e < n; e++) {
      double w1 = sc_load_f64(pb->dtype, x, e), w2 = sc_load_f64(v.dtype, v.data, e);
      update = fmax(update, fabs(w1 - init[off + e]));
      double dd = fabs(w2 - w1);
      if (m_one && !isnan(dd) &&
          fabs(sc_load_f64(mb->dtype, m_one, e)) <= EQUIV_ADAMW_NOISE * mmax) {
        noise++; /* its direction is the rounding's */
        continue;
      }
      if (isnan(dd)) diff = NAN;
      else if (!isnan(diff)) diff = fmax(diff, dd);
    }
    sc_free((void *)v.data);
    sc_free((void *)mv.data);
    double mrel = mmax > 0 ? mdiff / mmax : (mdiff > 0 ? INFINITY : 0);
    if (m_one && (isnan(mdiff) || mrel > EQUIV_SGD_TOL)) {
      if (!bad) sc_check_set(r, C, SC_CHECK_FAILED, "the mesh does not train as one rank:");
      bad = true;
      sc_check_append(r, C, "  first moment '%s' after %d steps: differs by %.3g, %.3g of its "
                      "largest %.3g (tolerance %g)", mname, SC_CHECK_EQUIV_STEPS, mdiff, mrel, mmax,
                      EQUIV_SGD_TOL);
    }
    if (noise) n_noise++;
    off += (int32_t)n;
    double rel = update > 0 ? diff / update : (diff > 0 ? INFINITY : 0);
    if (isnan(diff) || rel > tol) {
      if (!bad) sc_check_set(r, C, SC_CHECK_FAILED, "the mesh does not train as one rank:");
      bad = true;
      sc_check_append(r, C, "  weight '%s' after %d steps: differs by %.3g, %.3g of its largest "
                      "update %.3g (tolerance %g, %s)", name, SC_CHECK_EQUIV_STEPS, diff, rel, update,
                      tol, m1->optimizer);
    }
    if (!(rel <= worst_w)) {
      worst_w = rel;
      worst_name = name;
    }
  }
  if (st != SC_OK) {
    char msg[2048];
    sc_diag_format(&d, msg, sizeof msg);
    sc_check_set(r, C, SC_CHECK_FAILED, "the steps did not run: %s", msg);
  } else if (!bad) {
    char axes[256];
    sc_mesh_format(&dp->mesh, axes, sizeof axes);
    sc_check_set(r, C, SC_CHECK_PASSED, "%d steps of %s on %lld thread-ranks as one rank: losses "
                 "and gradient norms within %.3g (tolerance %g), weights within %.3g of their "
                 "largest update (%s; tolerance %g, %s)", SC_CHECK_EQUIV_STEPS, axes,
                 (long long)dp->mesh.n_ranks, worst_loss, EQUIV_LOSS_RTOL, worst_w, worst_name,
                 tol, m1->optimizer);
    if (n_noise)
      sc_check_append(r, C, "  first moments within %g of their largest; in %d tensor%s the "
                      "weights whose first moment is under %g of its tensor's largest (rounding "
                      "noise, which AdamW scales to a whole step) left out", EQUIV_SGD_TOL,
                      (int)n_noise, n_noise == 1 ? "" : "s", EQUIV_ADAMW_NOISE);
  }
  for (int32_t i = 0; i < n_data; i++) sc_free((void *)data[i].data);
  sc_free(init);
  sc_trainer_destroy(one);
  sc_dist_trainer_destroy(dist);
  sc_train_manifest_destroy(m1);
  sc_train_manifest_destroy(mm);
}


/* ---- 5. reproducible ---- */

typedef struct file_hash {
  char path[256];
  char sha[65];
} file_hash;

static file_hash *walk_out;
static int32_t walk_n, walk_cap;
static size_t walk_root;
static bool walk_failed;

static int hash_one(const char *path, const struct stat *sb, int type, struct FTW *f) {
  (void)sb;
  (void)f;
  if (type != FTW_F) return 0;
  if (walk_n == walk_cap) {
    int32_t cap = walk_cap ? 2 * walk_cap : 32;
    file_hash *h = sc_realloc(walk_out, (size_t)cap * sizeof *h);
    if (!h) return walk_failed = true, 1;
    walk_out = h;
    walk_cap = cap;
  }
  FILE *in = fopen(path, "rb"); /* streamed: a weight file may be large */
  if (!in) return walk_failed = true, 1;
  sc_sha256 sh;
  sc_sha256_init(&sh);
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, in)) > 0) sc_sha256_update(&sh, buf, got);
  bool bad_read = ferror(in);
  fclose(in);
  if (bad_read) return walk_failed = true, 1;
  uint8_t digest[32];
  sc_sha256_final(&sh, digest);
  file_hash *h = &walk_out[walk_n++];
  snprintf(h->path, sizeof h->path, "%s", path + walk_root);
  sc_sha256_digest_hex(digest, h->sha);
  return 0;
}

static int cmp_hash(const void *a, const void *b) {
  return strcmp(((const file_hash *)a)->path, ((const file_hash *)b)->path);
}

/* Every file under dir with its SHA-256, sorted by path; NULL on failure. */
static file_hash *hash_tree(const char *dir, int32_t *n) {
  walk_out = NULL;
  walk_n = walk_cap = 0;
  walk_failed = false;
  walk_root = strlen(dir) + 1;
  if (nftw(dir, hash_one, 16, FTW_PHYS) != 0 || walk_failed) {
    sc_free(walk_out);
    return NULL;
  }
  qsort(walk_out, (size_t)walk_n, sizeof *walk_out, cmp_hash);
  *n = walk_n;
  return walk_out;
}

/* b written as `shardc compile` writes it (cpu), into dir. */
static sc_status write_bundle(const sc_build *b, const sc_train_opts *t, const char *model,
                              const char *dir, sc_diag *d) {
  sc_bundle_opts bo;
  sc_bundle_opts_init(&bo);
  bo.target = SC_BUNDLE_CPU;
  const char *slash = strrchr(model, '/');
  bo.model = slash ? slash + 1 : model;
  sc_train_manifest *tm = NULL;
  sc_status st = SC_OK;
  if (t && (st = sc_build_train_manifest(b, t, &tm, d)) != SC_OK) return st;
  bo.train = tm;
  st = b->part ? sc_dist_program_write(b->program, &bo, dir, d)
               : sc_bundle_write(b->program->stages[0].program, &bo, dir, d);
  sc_train_manifest_destroy(tm);
  return st;
}

void sc_check_reproducible(sc_check_report *r, const sc_build *first, const sc_build *second,
                           const sc_train_opts *t, const char *model) {
  const sc_check_id C = SC_CHECK_REPRODUCIBLE;
  char root[512], d1[600], d2[600];
  const char *tmp = getenv("TMPDIR");
  snprintf(root, sizeof root, "%s/shardc-check-%ld", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
  sc_diag d = {0};
  sc_diag_clear(&d);
  sc_dir_commit dc;
  sc_status st = sc_dir_commit_begin(&dc, root, NULL, &d); /* removed with abort, or on a signal */
  if (st == SC_OK) {
    snprintf(d1, sizeof d1, "%s/first", dc.tmp);
    snprintf(d2, sizeof d2, "%s/second", dc.tmp);
    st = write_bundle(first, t, model, d1, &d);
    if (st == SC_OK) st = write_bundle(second, t, model, d2, &d);
  }
  file_hash *h1 = NULL, *h2 = NULL;
  int32_t n1 = 0, n2 = 0;
  if (st == SC_OK) {
    h1 = hash_tree(d1, &n1);
    h2 = h1 ? hash_tree(d2, &n2) : NULL;
    if (!h1 || !h2) st = sc_diag_set(&d, SC_ERR_IO, NULL, NULL, "cannot read the bundles back");
  }
  if (st != SC_OK) {
    char msg[2048];
    sc_diag_format(&d, msg, sizeof msg);
    sc_check_set(r, C, SC_CHECK_FAILED, "the bundle could not be written: %s", msg);
  } else {
    int32_t differ = 0;
    for (int32_t i = 0, j = 0; i < n1 || j < n2;) {
      int c = i == n1 ? 1 : j == n2 ? -1 : strcmp(h1[i].path, h2[j].path);
      const char *why = c < 0 ? "in the first compile only" : c > 0 ? "in the second only"
                        : strcmp(h1[i].sha, h2[j].sha) != 0 ? "differs" : NULL;
      if (why) {
        if (!differ) sc_check_set(r, C, SC_CHECK_FAILED, "two compiles differ:");
        differ++;
        sc_check_append(r, C, "  %s: %s", c > 0 ? h2[j].path : h1[i].path, why);
      }
      if (c <= 0) i++;
      if (c >= 0) j++;
    }
    for (int32_t i = 0; i < n1; i++) sc_check_artifact_add(r, h1[i].path, h1[i].sha);
    if (!differ)
      sc_check_set(r, C, SC_CHECK_PASSED, "two compiles: %d files, byte-identical (SHA-256 in "
                   "the report's artifacts)", (int)n1);
  }
  sc_free(h1);
  sc_free(h2);
  if (st == SC_OK || dc.tmp) sc_dir_commit_abort(&dc);
}

