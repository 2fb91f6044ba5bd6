/* multi_tensor.c — runs of elementwise kernels, or of whole-tensor
 * reductions, that compute the same thing over different tensors become one
 * multi-tensor kernel (codegen/program.h, sc_program_multi_tensor; kir.h,
 * n_segs, seg_inner).
 *
 * A training step's optimizer is one fused kernel per parameter tensor
 * (AdamW: read P, its gradient, exp_avg, exp_avg_sq and the step's scalars,
 * write the three new tensors), 28 for GPT-2, each a launch of its own and
 * most of them too small to fill a GPU or to split over the CPU's threads.
 * PyTorch's fused AdamW and apex's multi_tensor_apply run them as one launch
 * over a table of (tensor addresses, length) instead. Here the table is the
 * kernel's params: the segments' buffers, whose addresses the memory plan
 * fixes, and their lengths (seg_start), compile-time constants.
 *
 * Which kernels: consecutive KERNEL steps (no max-pool), each one STORE
 * phase or more over inner 1, that FLATTEN (every store and every load of
 * a tensor at the point's own element — kir_is_point_index, a tensor of the
 * kernel's points; any other load at a constant element, a scalar; no other
 * use of a loop variable), whose flat forms — the same kernel over the
 * domain [points] with KIR_VAR 0 for the point index — are identical
 * expression for expression (params' dtypes and directions, every constant
 * bit for bit, the phases' order), and that are independent: no storage one
 * of them writes is touched by another (storage as the memory plan will
 * give it: a VIEW is its root, an output "new:X" paired with X is X). Each
 * segment then computes exactly what its kernel computed, element for
 * element, so results are bit-identical; only the launch is shared.
 *
 * Reductions alike: kernels of one outer point reducing over the inner
 * loop (the gradient norm's sum of squares, one a parameter, 27 for GPT-2)
 * whose every tensor is read at the inner index (kir_is_inner_index: r, or
 * r's digits recombined through the tensor's dims) flatten to the same
 * body over KIR_VAR KIR_INNER; their run is a multi-tensor reduction, a
 * segment a tensor with its own inner extent (seg_inner), which each
 * backend reduces in its kernel's own order: the same bits. A run of
 * reductions may pass kernel steps between its members that are
 * independent of the members before them (FSDP's slices of each shard out
 * of its bucket): the merged kernel sinks to the last member's place.
 *
 * A table holds at most SC_MULTI_TENSOR_ARG_BYTES of kernel arguments (8
 * bytes a param, plus begin and end): a longer run becomes several tables,
 * as multi_tensor_apply launches again when its table is full. The merged
 * kernel takes the first kernel's place (and its name with "_mt<n>"), the
 * others leave the program, and kernel ids in steps are renumbered. Runs
 * before overlap and the memory plan, so those see one step.
 *
 * Before the runs, a reduction of one point over a long inner loop is
 * split into a kernel of many points over its chunks and one completing it
 * (split_step, below); the completing kernels merge as the others do. A
 * run of reductions passes an earlier run's member (a step that sinks into
 * that run's merged kernel) as it passes any independent kernel step. */
#include <stdio.h>
#include <string.h>

#include "codegen/program.h"

/* Whether kernel k has a REDUCE phase. */
static bool reduces(const kir_kernel *k) {
  for (int32_t i = 0; i < k->n_phases; i++)
    if (k->phases[i].kind == KIR_PHASE_REDUCE) return true;
  return false;
}

/* Whether expression id of t depends on the inner index (true when
 * unsure: out of memory). */
static bool along_r(const kir_kernel *t, int32_t id) {
  bool *dep = sc_calloc((size_t)id + 1, sizeof *dep);
  if (!dep) return true;
  for (int32_t i = 0; i <= id; i++) { /* operands come first */
    const kir_expr *e = &t->exprs[i];
    int32_t ops[3] = {e->a, e->b, e->c};
    dep[i] = e->op == KIR_VAR && e->var == KIR_INNER;
    for (int j = 0; j < kir_op_arity(e->op); j++) dep[i] |= dep[ops[j]];
  }
  bool r = dep[id];
  sc_free(dep);
  return r;
}

/* Whether index expression id of k reads a tensor at its element of the
 * flat form: the point's (elementwise), the inner index (a reduction). */
static bool flat_index(const kir_kernel *k, bool red, int32_t id) {
  return red ? kir_is_inner_index(k, id) : kir_is_point_index(k, id);
}

enum { VARIES = -2 }; /* an expression depending on a loop variable: only an index may */

/* Adds phase i of kernel k to its flat form t (exprs map[] of k in t, v0
 * the flat element); false when it does not flatten. */
static bool flat_phase(sc_arena *a, const kir_kernel *k, kir_kernel *t, bool red, int64_t n,
                       int32_t v0, const int32_t *map, int32_t i) {
  const kir_phase *ph = &k->phases[i];
  if (map[ph->value] < 0) return false;
  if (ph->kind == KIR_PHASE_REDUCE) /* red: its value varies along r through loads only */
    return kir_add_reduce(a, t, ph->rop, ph->acc_dtype, map[ph->value]) == i;
  int32_t at = v0; /* elementwise: the point's element; a reduction's result: a constant one */
  if (red) {
    const kir_expr *x = &k->exprs[ph->out_index];
    if (x->op != KIR_CONST || along_r(t, map[ph->value]) ||
        (at = kir_const_i(a, t, SC_DTYPE_I64, x->i)) < 0)
      return false;
  } else if (!kir_is_point_index(k, ph->out_index) || k->params[ph->out_param].numel != n) {
    return false;
  }
  return kir_add_store(a, t, ph->out_param, at, map[ph->value]) == i;
}

/* The flat form of kernel k (arena a), or NULL when k does not flatten;
 * *points its outer points, *inner its inner extent. An elementwise kernel
 * (STORE phases over inner 1) flattens to [points] with KIR_VAR 0 for the
 * point index; a reduction of one point (REDUCE phases over the inner loop,
 * STOREs of what does not vary along it at constant elements) to [1] with
 * KIR_VAR KIR_INNER for the inner index: a tensor of `inner` elements read
 * at r, whatever dims the kernel read it through. */
static kir_kernel *flatten(sc_arena *a, const kir_kernel *k, int64_t *points, int64_t *inner) {
  if (k->n_segs > 0 || k->n_phases < 1 || k->n_exprs < 1) return NULL;
  bool red = reduces(k);
  if (!red && k->inner != 1) return NULL;
  int64_t n = 1;
  for (int32_t d = 0; d < k->outer_rank; d++)
    if (!sc_mul_i64(n, k->outer_dims[d], &n)) return NULL;
  if (n < 1 || (red && n != 1)) return NULL;
  int64_t len = red ? k->inner : n; /* a tensor read element for element has len elements */
  kir_kernel *t = kir_kernel_create(a, k->name);
  int32_t *map = sc_arena_array(a, (size_t)k->n_exprs, sizeof *map);
  bool *need = sc_arena_array(a, (size_t)k->n_exprs, sizeof *need);
  if (!t || !map || !need) return NULL;
  /* what the stored values read (a tensor's element index is the point's,
   * the same in every flat form, so its arithmetic is not copied) */
  for (int32_t i = 0; i < k->n_phases; i++) need[k->phases[i].value] = true;
  for (int32_t i = k->n_exprs - 1; i >= 0; i--) {
    const kir_expr *e = &k->exprs[i];
    int32_t ops[3] = {e->a, e->b, e->c};
    if (!need[i] || (e->op == KIR_LOAD && flat_index(k, red, e->a))) continue;
    for (int j = 0; j < kir_op_arity(e->op); j++) need[ops[j]] = true;
  }
  t->outer_rank = 1;
  t->outer_dims[0] = n;
  t->inner = k->inner;
  for (int32_t i = 0; i < k->n_params; i++)
    if (kir_add_param(a, t, k->params[i].buffer, k->params[i].dtype, k->params[i].numel,
                      k->params[i].written) < 0)
      return NULL;
  int32_t v0 = kir_var(a, t, red ? KIR_INNER : 0);
  if (v0 < 0) return NULL;
  int32_t added = 0; /* phases in t */
  for (int32_t i = 0; i < k->n_exprs; i++) {
    const kir_expr *e = &k->exprs[i];
    int32_t ar = kir_op_arity(e->op), ops[3] = {e->a, e->b, e->c}, m[3] = {-1, -1, -1};
    if (!need[i]) {
      map[i] = -1;
      continue;
    }
    bool varies = e->op == KIR_VAR;
    for (int j = 0; j < ar && e->op != KIR_LOAD; j++) varies |= (m[j] = map[ops[j]]) == VARIES;
    if (varies) {
      map[i] = VARIES;
      continue;
    }
    int32_t r = -1;
    switch (e->op) {
    case KIR_CONST:
      r = sc_dtype_is_float(e->dtype) ? kir_const_f(a, t, e->dtype, e->f)
                                      : kir_const_i(a, t, e->dtype, e->i);
      break;
    case KIR_REG: /* its phase first (built after its value, before its register) */
      for (; added <= e->var; added++)
        if (k->phases[added].value >= i || !flat_phase(a, k, t, red, n, v0, map, added))
          return NULL;
      r = kir_reg(a, t, e->var);
      break;
    case KIR_LOAD:
      if (flat_index(k, red, e->a)) {
        if (k->params[e->var].numel != len) return NULL;
        r = kir_load(a, t, e->var, v0);
      } else if (k->exprs[e->a].op == KIR_CONST) {
        r = kir_load(a, t, e->var, map[e->a]);
      } else {
        return NULL;
      }
      break;
    case KIR_CAST: r = kir_cast(a, t, e->dtype, m[0]); break;
    case KIR_BITCAST: r = kir_bitcast(a, t, e->dtype, m[0]); break;
    case KIR_SELECT: r = kir_select(a, t, m[0], m[1], m[2]); break;
    default: r = ar == 1 ? kir_unary(a, t, e->op, m[0]) : kir_binary(a, t, e->op, m[0], m[1]);
    }
    if (r < 0 || t->exprs[r].dtype != e->dtype) return NULL;
    map[i] = r;
  }
  for (; added < k->n_phases; added++)
    if (!flat_phase(a, k, t, red, n, v0, map, added)) return NULL;
  *points = n;
  *inner = k->inner;
  return t;
}

/* ---- a large reduction split over many points ----
 *
 * A reduction of one point over a long inner loop runs on one GPU block
 * (or one CPU thread): the embedding's gradient-norm sum (50257 x 768
 * elements) bounds the step's norm by one SM. A reduction of at least
 * SC_MULTI_TENSOR_SPLIT_MIN elements (SUM, MAX or MIN, one REDUCE phase
 * first, then stores of what does not vary along r) becomes two kernels,
 * apex's multi_tensor_l2norm and its cleanup: "<name>_part" over
 * [n / c] points, each reducing its chunk of c elements (r + o * c) into
 * a scratch buffer of the accumulator's dtype, then the kernel itself
 * reducing those n / c partial results in order, with its stores as they
 * were. c divides n (the largest divisor in SPLIT_CHUNK_MIN ..
 * SPLIT_CHUNK_MAX; none: left whole). Every partial result is one
 * point's, whichever block or thread computes it, so the bits do not
 * depend on the launch grid; they differ from one pass over n (another
 * order of the additions). The second kernels, alike, merge as the
 * others do. */
enum { SPLIT_CHUNK_MIN = 1024, SPLIT_CHUNK_MAX = 16384 };

/* The chunk for n elements: a divisor of n in SPLIT_CHUNK_MIN ..
 * SPLIT_CHUNK_MAX, the largest; 0 when none. */
static int64_t split_chunk(int64_t n) {
  for (int64_t c = SPLIT_CHUNK_MAX; c >= SPLIT_CHUNK_MIN; c--)
    if (n % c == 0) return c;
  return 0;
}

/* Whether flat template t (a reduction of one point) splits: its first
 * phase is its one REDUCE (SUM, MAX or MIN), the rest STOREs. */
static bool splits(const kir_kernel *t) {
  if (t->n_phases < 1 || t->phases[0].kind != KIR_PHASE_REDUCE) return false;
  kir_reduce_op r = t->phases[0].rop;
  if (r != KIR_RED_SUM && r != KIR_RED_MAX && r != KIR_RED_MIN) return false;
  for (int32_t i = 1; i < t->n_phases; i++)
    if (t->phases[i].kind != KIR_PHASE_STORE) return false;
  return true;
}

/* Copies expression i of t into k (operands through map, KIR_VAR
 * KIR_INNER as r_to, param ids through pmap); -1 on failure. */
static int32_t copy_expr(sc_arena *a, const kir_kernel *t, kir_kernel *k, int32_t i,
                         const int32_t *map, const int32_t *pmap, int32_t r_to) {
  const kir_expr *e = &t->exprs[i];
  int32_t m[3] = {e->a >= 0 ? map[e->a] : -1, e->b >= 0 ? map[e->b] : -1,
                  e->c >= 0 ? map[e->c] : -1};
  for (int j = 0; j < kir_op_arity(e->op) && e->op != KIR_LOAD; j++)
    if (m[j] < 0) return -1;
  switch (e->op) {
  case KIR_CONST:
    return sc_dtype_is_float(e->dtype) ? kir_const_f(a, k, e->dtype, e->f)
                                       : kir_const_i(a, k, e->dtype, e->i);
  case KIR_VAR: return e->var == KIR_INNER ? r_to : -1;
  case KIR_REG: return kir_reg(a, k, e->var);
  case KIR_LOAD: return m[0] < 0 || pmap[e->var] < 0 ? -1 : kir_load(a, k, pmap[e->var], m[0]);
  case KIR_CAST: return kir_cast(a, k, e->dtype, m[0]);
  case KIR_BITCAST: return kir_bitcast(a, k, e->dtype, m[0]);
  case KIR_SELECT: return kir_select(a, k, m[0], m[1], m[2]);
  default:
    return kir_op_arity(e->op) == 1 ? kir_unary(a, k, e->op, m[0])
                                    : kir_binary(a, k, e->op, m[0], m[1]);
  }
}

/* Marks in need[] the expressions of t that expression `root` reads. */
static void mark_needed(const kir_kernel *t, int32_t root, bool *need) {
  need[root] = true;
  for (int32_t i = root; i >= 0; i--) {
    if (!need[i]) continue;
    const kir_expr *e = &t->exprs[i];
    int32_t ops[3] = {e->a, e->b, e->c};
    for (int j = 0; j < kir_op_arity(e->op); j++)
      if (ops[j] >= 0) need[ops[j]] = true;
  }
}

/* The params of t that the needed expressions load, or the phases from
 * `from` on store, added to k (pmap[t's] = k's, -1 when not); false when
 * out of memory. */
static bool copy_params(sc_arena *a, const kir_kernel *t, kir_kernel *k, const bool *need,
                        int32_t from, int32_t *pmap) {
  for (int32_t i = 0; i < t->n_params; i++) {
    bool used = false;
    for (int32_t e = 0; e < t->n_exprs && !used; e++)
      used = need[e] && t->exprs[e].op == KIR_LOAD && t->exprs[e].var == i;
    for (int32_t ph = from; ph < t->n_phases && !used; ph++)
      used = t->phases[ph].kind == KIR_PHASE_STORE && t->phases[ph].out_param == i;
    pmap[i] = -1;
    if (used && (pmap[i] = kir_add_param(a, k, t->params[i].buffer, t->params[i].dtype,
                                         t->params[i].numel, t->params[i].written)) < 0)
      return false;
  }
  return true;
}

/* A new kernel `name` of one outer dim of `points` over `inner`, with
 * arrays for copying template t into it: map (its expressions), pmap (its
 * params), need (zeroed); NULL when out of memory. */
static kir_kernel *split_kernel(sc_arena *a, const kir_kernel *t, const char *name,
                                int64_t points, int64_t inner, int32_t **map, int32_t **pmap,
                                bool **need) {
  kir_kernel *k = kir_kernel_create(a, name);
  *map = sc_arena_array(a, (size_t)t->n_exprs, sizeof **map);
  *pmap = sc_arena_array(a, (size_t)t->n_params + 1, sizeof **pmap);
  *need = sc_arena_array(a, (size_t)t->n_exprs, sizeof **need);
  if (!k || !*map || !*pmap || !*need) return NULL;
  k->outer_rank = 1;
  k->outer_dims[0] = points;
  k->inner = inner;
  return k;
}

/* The chunks' kernel of template t (n elements in chunks of c, scratch
 * buffer `part`): [n / c] points over inner c, each storing its chunk's
 * reduction at its own element of part. */
static kir_kernel *part_kernel(sc_arena *a, const kir_kernel *t, const char *name, int64_t n,
                               int64_t c, int32_t part) {
  const kir_phase *ph = &t->phases[0];
  int32_t *map, *pmap;
  bool *need;
  kir_kernel *k = split_kernel(a, t, name, n / c, c, &map, &pmap, &need);
  if (!k) return NULL;
  mark_needed(t, ph->value, need);
  if (!copy_params(a, t, k, need, t->n_phases, pmap)) return NULL;
  int32_t pp = kir_add_param(a, k, part, ph->acc_dtype, n / c, true);
  int32_t o = kir_var(a, k, 0);
  int32_t at = kir_binary(a, k, KIR_ADD, kir_var(a, k, KIR_INNER),
                          kir_binary(a, k, KIR_MUL, o, kir_const_i(a, k, SC_DTYPE_I64, c)));
  if (pp < 0 || o < 0 || at < 0) return NULL;
  for (int32_t i = 0; i <= ph->value; i++)
    if (need[i] && (map[i] = copy_expr(a, t, k, i, map, pmap, at)) < 0) return NULL;
  if (kir_add_reduce(a, k, ph->rop, ph->acc_dtype, map[ph->value]) != 0) return NULL;
  int32_t reg = kir_reg(a, k, 0);
  if (reg < 0 || kir_add_store(a, k, pp, o, reg) != 1) return NULL;
  return k;
}

/* Template t with its reduction over the n / c partial results in part
 * (read at r) in place of its values: the kernel that completes it. */
static kir_kernel *sum_kernel(sc_arena *a, const kir_kernel *t, const char *name, int64_t parts,
                              int32_t part) {
  const kir_phase *ph = &t->phases[0];
  int32_t *map, *pmap;
  bool *need;
  kir_kernel *k = split_kernel(a, t, name, 1, parts, &map, &pmap, &need);
  if (!k) return NULL;
  for (int32_t i = 1; i < t->n_phases; i++) {
    mark_needed(t, t->phases[i].value, need);
    mark_needed(t, t->phases[i].out_index, need);
  }
  if (!copy_params(a, t, k, need, 1, pmap)) return NULL;
  int32_t pp = kir_add_param(a, k, part, ph->acc_dtype, parts, false);
  int32_t r = kir_var(a, k, KIR_INNER);
  int32_t v = pp < 0 || r < 0 ? -1 : kir_load(a, k, pp, r);
  if (v < 0 || kir_add_reduce(a, k, ph->rop, ph->acc_dtype, v) != 0) return NULL;
  int32_t added = 1;
  for (int32_t i = 0; i < t->n_exprs; i++) {
    if (!need[i]) continue;
    const kir_expr *e = &t->exprs[i];
    if (e->op == KIR_REG) /* its phase first */
      for (; added <= e->var && added < t->n_phases; added++) {
        const kir_phase *q = &t->phases[added];
        if (map[q->value] < 0 || map[q->out_index] < 0 ||
            kir_add_store(a, k, pmap[q->out_param], map[q->out_index], map[q->value]) != added)
          return NULL;
      }
    if ((map[i] = copy_expr(a, t, k, i, map, pmap, r)) < 0) return NULL;
  }
  for (; added < t->n_phases; added++) {
    const kir_phase *q = &t->phases[added];
    if (kir_add_store(a, k, pmap[q->out_param], map[q->out_index], map[q->value]) != added)
      return NULL;
  }
  return k;
}

/* Splits step i's reduction (its flat form t over n elements) into the
 * chunks' kernel, inserted before it, and the kernel completing it in its
 * place; false when it is left as it is (SC_OK in *st) or on failure. */
static bool split_step(sc_program *p, int32_t i, const kir_kernel *t, int64_t n, sc_status *st) {
  int64_t c = split_chunk(n);
  if (n < SC_MULTI_TENSOR_SPLIT_MIN || !c || !splits(t)) return false;
  const kir_kernel *k = p->kernels[p->steps[i].kernel];
  const kir_phase *ph = &t->phases[0];
  sc_buffer b;
  memset(&b, 0, sizeof b);
  b.name = sc_arena_printf(&p->arena, "%s.partial", k->name);
  b.kind = SC_BUF_TEMP;
  b.dtype = ph->acc_dtype;
  b.rank = 1;
  b.dims[0] = n / c;
  b.bytes = n / c * sc_dtype_size(ph->acc_dtype);
  b.offset = -1;
  b.alias_of = -1;
  b.value = -1;
  int32_t part = b.name ? sc_program_add_buffer(p, &b) : -1;
  const char *pname = sc_arena_printf(&p->arena, "%s_part", k->name);
  kir_kernel *pk = part < 0 || !pname ? NULL : part_kernel(&p->arena, t, pname, n, c, part);
  kir_kernel *sk = pk ? sum_kernel(&p->arena, t, k->name, n / c, part) : NULL;
  int32_t kid = sk ? sc_program_add_kernel(p, pk) : -1;
  sc_step s = p->steps[i];
  if (kid < 0 || sc_program_add_step(p, &s) < 0) {
    *st = SC_ERR_NOMEM;
    return false;
  }
  sk->origin = pk->origin = k->origin;
  memmove(&p->steps[i + 1], &p->steps[i], (size_t)(p->n_steps - 1 - i) * sizeof *p->steps);
  p->steps[i].kernel = kid;
  p->kernels[p->steps[i + 1].kernel] = sk;
  for (int32_t j = i + 2; j < p->n_steps; j++) /* a WAIT's step moved on by one */
    if (p->steps[j].kind == SC_STEP_WAIT && p->steps[j].started >= i) p->steps[j].started++;
  return true;
}

/* Whether flat forms x and y compute the same over their params. */
static bool same_template(const kir_kernel *x, const kir_kernel *y) {
  if (x->n_params != y->n_params || x->n_exprs != y->n_exprs || x->n_phases != y->n_phases)
    return false;
  for (int32_t i = 0; i < x->n_params; i++)
    if (x->params[i].dtype != y->params[i].dtype || x->params[i].written != y->params[i].written)
      return false;
  for (int32_t i = 0; i < x->n_exprs; i++) {
    const kir_expr *a = &x->exprs[i], *b = &y->exprs[i];
    if (a->op != b->op || a->dtype != b->dtype || a->a != b->a || a->b != b->b ||
        a->c != b->c || a->var != b->var || a->i != b->i || memcmp(&a->f, &b->f, sizeof a->f))
      return false;
  }
  for (int32_t i = 0; i < x->n_phases; i++) {
    const kir_phase *a = &x->phases[i], *b = &y->phases[i];
    if (a->kind != b->kind || a->value != b->value || a->out_param != b->out_param ||
        a->out_index != b->out_index || a->rop != b->rop || a->acc_dtype != b->acc_dtype)
      return false;
  }
  return true;
}

/* The storage each buffer will have (id[b]): its root, or, for an output
 * paired with an input (p->updates), that input's root. */
static void storage_ids(const sc_program *p, int32_t *id) {
  for (int32_t b = 0; b < p->n_buffers; b++) id[b] = sc_program_root(p, b);
  for (int32_t j = 0; j < p->n_outputs; j++) {
    int32_t in = sc_program_updates(p, j), r = sc_program_root(p, p->outputs[j]);
    if (in < 0) continue;
    int32_t to = sc_program_root(p, p->inputs[in]);
    for (int32_t b = 0; b < p->n_buffers; b++)
      if (id[b] == r) id[b] = to;
  }
}

/* Whether kernels x and y may run at once: neither writes storage the
 * other touches (storage ids sid). */
static bool independent(const int32_t *sid, const kir_kernel *x, const kir_kernel *y) {
  for (int32_t i = 0; i < x->n_params; i++)
    for (int32_t j = 0; j < y->n_params; j++)
      if ((x->params[i].written || y->params[j].written) &&
          sid[x->params[i].buffer] == sid[y->params[j].buffer])
        return false;
  return true;
}

/* Kernel `name` with suffix, unique among p's kernels. */
static const char *unique_name(sc_program *p, const char *name, int32_t n) {
  char buf[512];
  for (int32_t extra = 0;; extra++) {
    if (extra) snprintf(buf, sizeof buf, "%s_mt%d_%d", name, (int)n, (int)extra);
    else snprintf(buf, sizeof buf, "%s_mt%d", name, (int)n);
    bool taken = false;
    for (int32_t k = 0; k < p->n_kernels && !taken; k++) taken = !strcmp(p->kernels[k]->name, buf);
    if (!taken) return sc_arena_strdup(&p->arena, buf);
  }
}

/* The multi-tensor kernel of steps mem[0 .. n) (templates flat[], their
 * points pts[] and inner extents inn[], by step), put in the first step's
 * kernel slot. */
static sc_status merge(sc_program *p, const int32_t *mem, int32_t n, kir_kernel **flat,
                       const int64_t *pts, const int64_t *inn) {
  sc_arena *a = &p->arena;
  const kir_kernel *t = flat[mem[0]];
  int32_t s0 = mem[0], k0 = p->steps[s0].kernel;
  kir_kernel *m = kir_kernel_create(a, p->kernels[k0]->name);
  int64_t *start = sc_arena_array(a, (size_t)n + 1, sizeof *start);
  if (!m || !start || !(m->name = unique_name(p, p->kernels[k0]->name, n))) return SC_ERR_NOMEM;
  if (reduces(t)) { /* a reduction: a segment is one point over its own inner extent */
    if (!(m->seg_inner = sc_arena_array(a, (size_t)n, sizeof *m->seg_inner))) return SC_ERR_NOMEM;
    for (int32_t s = 0; s < n; s++)
      if ((m->seg_inner[s] = inn[mem[s]]) > m->inner) m->inner = inn[mem[s]];
  }
  size_t olen = 0;
  for (int32_t s = 0; s < n; s++) {
    const char *o = p->steps[mem[s]].origin;
    olen += (o ? strlen(o) : 0) + 1;
  }
  char *origin = sc_arena_alloc(a, olen + 1);
  if (!origin) return SC_ERR_NOMEM;
  for (int32_t s = 0; s < n; s++) {
    const char *o = p->steps[mem[s]].origin;
    if (s && o) strcat(origin, ",");
    if (o) strcat(origin, o);
  }
  m->origin = origin;
  m->outer_rank = 1;
  for (int32_t s = 0; s < n; s++) {
    const kir_kernel *k = p->kernels[p->steps[mem[s]].kernel];
    for (int32_t i = 0; i < k->n_params; i++)
      if (kir_add_param(a, m, k->params[i].buffer, k->params[i].dtype, k->params[i].numel,
                        k->params[i].written) < 0)
        return SC_ERR_NOMEM;
    if (!sc_add_i64(start[s], pts[mem[s]], &start[s + 1])) return SC_ERR_LIMIT;
  }
  /* the template's expressions and phases, copied as they are */
  m->exprs = sc_arena_array(a, (size_t)t->n_exprs, sizeof *m->exprs);
  m->phases = sc_arena_array(a, (size_t)t->n_phases, sizeof *m->phases);
  if (!m->exprs || !m->phases) return SC_ERR_NOMEM;
  memcpy(m->exprs, t->exprs, (size_t)t->n_exprs * sizeof *m->exprs);
  memcpy(m->phases, t->phases, (size_t)t->n_phases * sizeof *m->phases);
  m->n_exprs = m->cap_exprs = t->n_exprs;
  m->n_phases = m->cap_phases = t->n_phases;
  m->outer_dims[0] = start[n];
  m->n_segs = n;
  m->seg_params = t->n_params;
  m->seg_start = start;
  p->kernels[k0] = m;
  p->steps[s0].origin = origin;
  return SC_OK;
}

/* The kernel ids step s names (its kernel; a bias gradient's kernel; a
 * convolution's prep and bias kernels; a max-pool's prep kernels), as
 * pointers into it; returns how many (at most 5), -1 entries included. */
static int32_t kernel_refs(sc_step *s, int32_t **refs) {
  int32_t n = 0;
  refs[n++] = &s->kernel;
  if (s->kind == SC_STEP_GEMM && s->gemm.bgrad != SC_GEMM_BGRAD_NONE)
    refs[n++] = &s->gemm.bgrad_kernel;
  else if (s->kind == SC_STEP_GEMM && s->gemm.conv.on) {
    refs[n++] = &s->gemm.conv.prep[0];
    refs[n++] = &s->gemm.conv.prep[1];
    refs[n++] = &s->gemm.conv.bias_kernel;
  }
  if (s->kind == SC_STEP_KERNEL && s->pool.on) {
    refs[n++] = &s->pool.prep[0];
    refs[n++] = &s->pool.prep[1];
  }
  return n;
}

/* Drops the kernels marked dropped (no step names them now) and renumbers
 * the steps' kernel ids. */
static sc_status drop_unused(sc_program *p, const bool *dropped) {
  int32_t *id = sc_arena_array(&p->arena, (size_t)p->n_kernels + 1, sizeof *id);
  if (!id) return SC_ERR_NOMEM;
  int32_t nk = 0, old = p->n_kernels;
  for (int32_t k = 0; k < old; k++) {
    id[k] = dropped[k] ? -1 : nk;
    if (!dropped[k]) p->kernels[nk++] = p->kernels[k];
  }
  p->n_kernels = nk;
  for (int32_t i = 0; i < p->n_steps; i++) {
    int32_t *refs[5];
    int32_t n = kernel_refs(&p->steps[i], refs);
    for (int32_t j = 0; j < n; j++)
      if (*refs[j] >= 0 && *refs[j] < old) *refs[j] = id[*refs[j]];
  }
  return SC_OK;
}

/* Splits every large reduction of a kernel step of its own (split_step):
 * the chunks' kernels join the program, each before its step. */
static sc_status split_large(sc_program *p) {
  int32_t *uses = sc_calloc((size_t)p->n_kernels + 1, sizeof *uses);
  if (!uses) return SC_ERR_NOMEM;
  for (int32_t i = 0; i < p->n_steps; i++) {
    int32_t *refs[5];
    int32_t n = kernel_refs(&p->steps[i], refs);
    for (int32_t j = 0; j < n; j++)
      if (*refs[j] >= 0 && *refs[j] < p->n_kernels) uses[*refs[j]]++;
  }
  sc_arena scratch;
  sc_arena_init(&scratch);
  sc_status st = SC_OK;
  for (int32_t i = 0; st == SC_OK && i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind != SC_STEP_KERNEL || s->pool.on || s->kernel < 0 || s->kernel >= p->n_kernels ||
        uses[s->kernel] != 1)
      continue;
    int64_t pts = 0, inn = 0;
    const kir_kernel *t = flatten(&scratch, p->kernels[s->kernel], &pts, &inn);
    if (t && reduces(t) && split_step(p, i, t, inn, &st)) i++; /* past the kernel it completes */
  }
  sc_arena_free(&scratch);
  sc_free(uses);
  return st;
}

sc_status sc_program_multi_tensor(sc_program *p, sc_diag *diag) {
  sc_status split = split_large(p);
  if (split != SC_OK) return sc_diag_set(diag, split, NULL, NULL, "out of memory");
  int32_t ns = p->n_steps;
  size_t cap = (size_t)(ns > 0 ? ns : 1);
  kir_kernel **flat = sc_calloc(cap, sizeof *flat);
  int64_t *pts = sc_calloc(cap, sizeof *pts), *inn = sc_calloc(cap, sizeof *inn);
  bool *dropped = sc_calloc((size_t)p->n_kernels + 1, sizeof *dropped);
  sc_arena scratch;
  sc_arena_init(&scratch);
  int32_t *sid = sc_calloc((size_t)p->n_buffers + 1, sizeof *sid);
  sc_status st = flat && pts && inn && dropped && sid ? SC_OK : SC_ERR_NOMEM;
  if (st == SC_OK) storage_ids(p, sid);
  /* a kernel named by more than one step (or by a GEMM's or a pool's
   * geometry) is left alone: only a kernel step's own kernel merges */
  int32_t *uses = st == SC_OK ? sc_calloc((size_t)p->n_kernels + 1, sizeof *uses) : NULL;
  if (st == SC_OK && !uses) st = SC_ERR_NOMEM;
  for (int32_t i = 0; st == SC_OK && i < ns; i++) {
    int32_t *refs[5];
    int32_t n = kernel_refs(&p->steps[i], refs);
    for (int32_t j = 0; j < n; j++)
      if (*refs[j] >= 0 && *refs[j] < p->n_kernels) uses[*refs[j]]++;
  }
  for (int32_t i = 0; st == SC_OK && i < ns; i++) {
    const sc_step *s = &p->steps[i];
    if (s->kind == SC_STEP_KERNEL && !s->pool.on && s->kernel >= 0 && uses[s->kernel] == 1)
      flat[i] = flatten(&scratch, p->kernels[s->kernel], &pts[i], &inn[i]);
  }
  /* runs of equal templates, cut where a kernel is not independent of the
   * run's others or the table is full. A run of reductions may have kernel
   * steps between its members that are independent of the members before
   * them (under FSDP each sum follows the slice taking its shard out of the
   * bucket): the merged kernel sinks past them to the last member's place */
  int32_t out = 0;
  int32_t *mem = sc_calloc(cap, sizeof *mem);
  bool *gone = sc_calloc(cap, sizeof *gone); /* a member that sank into a later step */
  bool *taken = sc_calloc(cap, sizeof *taken);
  if (st == SC_OK && (!mem || !gone || !taken)) st = SC_ERR_NOMEM;
  for (int32_t i = 0; st == SC_OK && i < ns; i++) {
    if (!flat[i] || taken[i]) continue;
    int32_t n = 1;
    bool red = reduces(flat[i]);
    int64_t bytes = 8 * ((int64_t)flat[i]->n_params + 2);
    mem[0] = i;
    for (int32_t j = i + 1; j < ns; j++) {
      const sc_step *s = &p->steps[j];
      if (taken[j]) { /* an earlier run's member: passed as any independent kernel step */
        bool ok = red;
        for (int32_t m = 0; m < n && ok; m++)
          ok = independent(sid, p->kernels[p->steps[mem[m]].kernel], p->kernels[s->kernel]);
        if (!ok) break;
        continue;
      }
      bool alike = flat[j] && same_template(flat[i], flat[j]);
      if (!alike && (!red || s->kind != SC_STEP_KERNEL || s->pool.on || s->kernel < 0)) break;
      if (alike && bytes + 8 * flat[i]->n_params > SC_MULTI_TENSOR_ARG_BYTES) break;
      bool ok = true;
      for (int32_t m = 0; m < n && ok; m++)
        ok = independent(sid, p->kernels[p->steps[mem[m]].kernel], p->kernels[s->kernel]);
      if (!ok) break;
      if (alike) {
        bytes += 8 * flat[i]->n_params;
        mem[n++] = j;
      }
    }
    if (n < 2) continue;
    for (int32_t j = 1; j < n; j++) dropped[p->steps[mem[j]].kernel] = true;
    st = merge(p, mem, n, flat, pts, inn);
    p->steps[mem[n - 1]] = p->steps[i]; /* the merged step, in the last member's place */
    for (int32_t j = 0; j < n; j++) taken[mem[j]] = true;
    for (int32_t j = 0; j + 1 < n; j++) gone[mem[j]] = true;
  }
  for (int32_t i = 0; st == SC_OK && i < ns; i++)
    if (!gone[i]) p->steps[out++] = p->steps[i];
  sc_free(mem);
  sc_free(gone);
  sc_free(taken);
  if (st == SC_OK && out < ns) {
    p->n_steps = out;
    st = drop_unused(p, dropped);
  }
  sc_free(sid);
  sc_free(flat);
  sc_free(pts);
  sc_free(inn);
  sc_free(dropped);
  sc_free(uses);
  sc_arena_free(&scratch);
  if (st != SC_OK)
    return sc_diag_set(diag, st, NULL, NULL,
                       st == SC_ERR_NOMEM ? "out of memory" : "multi-tensor kernel too large");
  return SC_OK;
}
