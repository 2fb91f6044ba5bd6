/* cpu_conv.c — the CPU device's direct convolutions through oneDNN
 * (cpu_conv.h; docs/runtime.md#convolutions).
 *
 * For each GEMM step that carries a convolution and passes conv_fits, one
 * oneDNN forward-inference direct convolution primitive is made for a tile
 * (one image, tm output channels, all pixels) with every layout left to
 * the library ("any"), and declined unless oneDNN picks one of its JIT
 * kernels (implementations named "jit..." or "brg..." (brgemm); not
 * "ref...", its reference loops, nor "gemm...", im2col as ours). A
 * run is then:
 *   1. each image's input, in oneDNN's layout for it (a reorder into the
 *      scratch), unless that layout is the model's own NCHW;
 *   2. each tile: the convolution into the scratch, then a reorder into
 *      the output's NCHW slice. A constant per-channel bias (the step's
 *      sc_conv_geom.bias) is the convolution's own bias operand, and the
 *      kernel that would have filled the output with it first is skipped;
 *      otherwise the reorder adds beta times what the output holds.
 * Every oneDNN call runs on the calling pool thread alone, and the tiles
 * depend only on the shape: results do not depend on the thread count.
 * The weights are constants: they are put in oneDNN's layout once, at bind.
 * Every buffer is sized from the primitive descriptors made at prepare
 * (sc_cpu_convs_plan_memory): the weights, the step scratch, the NCHW
 * shadows of blocked buffers, and each pool thread's scratchpad (the
 * largest primitive's), grown at bind (sc_cpu_convs_thread_reserve) so that
 * no run grows it; sc_cpu_plan_convs makes the same descriptors for the
 * memory plan without a device (codegen/device_memory.h).
 * A oneDNN call that fails during a run (a thread's scratchpad not
 * allocated, or the library's own failure) cannot be returned by the pool
 * worker that made it, and must not end the process: the first is
 * recorded, the run's remaining convolutions and max-pools are skipped,
 * and the CPU device reports it at end_run (sc_cpu_convs_end_run;
 * docs/runtime.md#out-of-memory). */
#include "cpu_conv.h"
#include "runtime.h"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sc_cpu_engine_one_thread(void) {
  static _Thread_local bool pinned;
  if (pinned) return;
  omp_set_num_threads(1);
  pinned = true;
}

/* ---- the engine and the threads' streams (process-wide) ---- */

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine; /* NULL if oneDNN has no CPU engine */

static void engine_init(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

/* Each thread that runs a convolution has its own stream (a stream is not
 * meant to be shared between threads) and its own scratchpad: every
 * primitive is made with a user scratchpad, since the library's own may be
 * one buffer shared by all threads, and two tiles running at once then
 * overwrite each other's (seen: a 1.0-scale error with 2 threads). Kept
 * for the life of the process, listed so that they stay reachable. */
typedef struct thread_state {
  dnnl_stream_t stream;
  char *scratch;
  size_t cap;
} thread_state;

/* oneDNN's execute builds C++ containers of its arguments on every call and
 * lets std::bad_alloc end the process when one cannot be allocated (seen
 * under ulimit -v, on a pool thread's first call, just after its scratch
 * took the last of the address space). So when a thread's state is made
 * or its scratch grows, this much more address space must be free
 * (sc_mem_probe), or the call fails as out of memory. Another thread may
 * still take that room before the call: the probe narrows the window, it
 * cannot close it. */
enum { EXEC_HEADROOM = 1 << 20 };

/* oneDNN's JIT writes a new primitive's code into memory it maps itself,
 * and the process ends (SIGSEGV in its code writer) when that fails: seen
 * under ulimit -v, creating a max-pool's primitive. So a primitive is
 * created only while this much address space is free (sc_mem_probe; the
 * largest kernel seen needed under 3 MiB); otherwise it is declined as
 * when oneDNN has no kernel for it, and the step takes its own path, whose
 * memory the plan holds. */
enum { JIT_HEADROOM = 4 << 20 };

static bool create_primitive(dnnl_primitive_t *prim, const_dnnl_primitive_desc_t pd) {
  *prim = NULL;
  if (!sc_mem_probe(JIT_HEADROOM) || dnnl_primitive_create(prim, pd) != dnnl_success) {
    *prim = NULL;
    return false;
  }
  return true;
}

static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
static thread_state **states;
static size_t n_states, cap_states;
static _Thread_local thread_state *me;

static thread_state *this_thread(size_t scratch_bytes) {
  bool grew = !me || scratch_bytes > me->cap;
  if (!me) {
    thread_state *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags) != dnnl_success) {
      free(t);
      return NULL;
    }
    pthread_mutex_lock(&states_mu);
    if (n_states == cap_states) {
      size_t cap = cap_states ? 2 * cap_states : 16;
      thread_state **grown = realloc(states, cap * sizeof *grown);
      if (!grown) {
        pthread_mutex_unlock(&states_mu);
        dnnl_stream_destroy(t->stream);
        free(t);
        return NULL;
      }
      states = grown, cap_states = cap;
    }
    states[n_states++] = t;
    pthread_mutex_unlock(&states_mu);
    me = t;
  }
  if (scratch_bytes > me->cap) {
    char *grown = NULL;
    if (posix_memalign((void **)&grown, 64, scratch_bytes)) return NULL;
    free(me->scratch);
    me->scratch = grown, me->cap = scratch_bytes;
  }
  return grew && !sc_mem_probe(EXEC_HEADROOM) ? NULL : me;
}

/* ---- one convolution step ---- */

typedef struct conv {
  const sc_gemm *g;
  char note[128];                 /* "direct convolution, oneDNN <impl>, ..." */
  int64_t N, T, tm;               /* images, tiles per image group, channels per tile */
  int64_t G;                      /* images per group: a tile is G images x tm channels */
  int64_t P;                      /* parts per image of the input reorder */
  bool bias;                      /* the convolution adds conv.bias itself */
  bool wino;                      /* Winograd's F(4x4, 3x3), not direct */
  dnnl_primitive_t prim;          /* the tile's convolution */
  dnnl_primitive_t src_reorder;   /* NCHW image (or a part: P > 1) -> src_md, or NULL
                                     (src_md is NCHW) */
  dnnl_primitive_t dst_reorder;   /* dst_md -> the output's NCHW slice, + beta x it */
  dnnl_memory_desc_t x_user, src_md, w_user, w_md, dst_md, y_user, b_md; /* one image */
  dnnl_memory_desc_t src_g, dst_g; /* the convolution's: G images in src_md's, dst_md's layout */
  dnnl_memory_desc_t pad_conv, pad_src, pad_dst; /* the primitives' scratchpads (pad_src
                                                    zeroed, size 0, without src_reorder) */
  size_t src_bytes, w_bytes, dst_bytes, pad_bytes; /* dst_bytes: a tile's, G images */
  char *w_blk;                    /* T tiles' weights in w_md */
  dnnl_memory_t *s_mem;           /* per group: the convolution's input (src_g) */
  dnnl_memory_t *xp_mem, *xbp_mem; /* per image x part: the reorder's NCHW part and its
                                      place in src_md (P > 1 only) */
  dnnl_memory_desc_t xp_user, srcp_md; /* one part of the image: NCHW; blocked */
  dnnl_memory_t *w_mem, *b_mem;   /* per tile (b_mem: with bias) */
  dnnl_memory_t *d_mem;           /* per group x tile: the convolution's output (dst_g) */
  dnnl_memory_t *r_mem, *y_mem;   /* per image x tile: its part of d_mem (dst_md); its
                                     output slice (y_user, NCHW; when y_blocked, the same
                                     place holds the slice's channel blocks, copied raw),
                                     both unless y_direct */
  bool x_blocked, y_blocked;      /* x, y held in src_md / dst_md (nChw8c or nChw16c) between steps:
                                     no reorder (see "Blocked activations") */
  bool y_direct;                  /* tiles write the output in place: y_blocked and a tile's
                                     part of it contiguous (G or T is 1) */
  int32_t kernel;                 /* the step's epilogue kernel, or -1 */
  bool epi_tiles;                 /* it runs on each tile's output as the tile ends */
} conv;

/* The channel-blocked layouts activations are held in between steps
 * (docs/runtime.md#blocked-activations). */
enum { N_BLOCKS = 2 };
static const int64_t BLOCKS[N_BLOCKS] = {8, 16};
static const dnnl_format_tag_t BLOCK_TAGS[N_BLOCKS] = {dnnl_nChw8c, dnnl_nChw16c};

/* ---- one max-pool step (docs/runtime.md#max-pools) ---- */

typedef struct pool {
  const sc_pool_geom *v;
  int32_t kernel;                 /* its step's kernel */
  bool takes_part;                /* in the layout plan (a convolution writes its input) */
  bool on;                        /* runs directly: its buffers are blocked (set by the
                                     layout plan; otherwise its kernels run as written) */
  int bi;                         /* then in BLOCKS[bi] */
  int64_t parts;                  /* parts per image, cp channels each */
  int64_t cp;
  /* per block of BLOCKS (NULL prim: oneDNN has no JIT kernel for it);
   * after the plan, only bi's */
  char note[N_BLOCKS][96];        /* "direct max-pool, oneDNN <impl>, nChw8c" */
  dnnl_primitive_t prim[N_BLOCKS]; /* one part: [1, cp, h, w] -> [1, cp, oh, ow] */
  dnnl_memory_desc_t src_md[N_BLOCKS], dst_md[N_BLOCKS], pad[N_BLOCKS];
  dnnl_memory_t *x_mem, *y_mem;   /* per image x part (bind) */
} pool;

/* The run's first oneDNN call that failed (see the file's opening). */
typedef struct run_failure {
  atomic_bool failed;
  dnnl_status_t status; /* dnnl_out_of_memory, or the call's other status */
  uint64_t bytes;       /* the thread's scratchpad and headroom it needed (run); 0:
                           oneDNN's own failure */
  char what[160];       /* "the direct convolution of a 16 x 256 x 144 product" */
} run_failure;

static void record_failure(run_failure *f, dnnl_status_t status, uint64_t bytes,
                           const char *fmt, ...) {
  bool was = false;
  if (!atomic_compare_exchange_strong(&f->failed, &was, true)) return;
  f->status = status;
  f->bytes = bytes;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->what, sizeof f->what, fmt, ap);
  va_end(ap);
}

static bool has_failed(run_failure *f) {
  return atomic_load_explicit(&f->failed, memory_order_relaxed);
}

struct sc_cpu_convs {
  const sc_program *p;
  run_failure fail;     /* this run's, until end_run */
  int32_t n;
  conv *v;
  int32_t *of_kernel;   /* im2col kernel id -> index in v, or -1 */
  int32_t n_pools;
  pool *pools;
  int32_t *pool_of_kernel; /* a pool's kernel (its step's, or a prep one) -> index in pools,
                              or -1 */
  char *scratch;        /* the blocked input and output of the step running */
  size_t scratch_bytes;
  size_t thread_pad;    /* the largest scratchpad of a primitive: each pool thread's */
  atomic_int reserved;  /* pool threads whose scratchpad holds thread_pad (bind) */
  /* blocked activations (see "Blocked activations"), per buffer */
  int64_t (*dims)[4];   /* its N, C, H, W (blocked ones) */
  int64_t *block;       /* its block of channels (8: nChw8c, 16: nChw16c), 0: NCHW */
  float **shadow;       /* an NCHW copy for the kernels that read or write it so */
  int32_t n_hooks;
  struct layout_hook {
    int32_t kernel, buffer;
    bool after;         /* after the kernel: shadow -> blocked; before: blocked -> shadow */
  } *hooks;
  bool *hooked;         /* per kernel: has hooks */
  bool *foreign;        /* per kernel: reads or writes blocked buffers through shadows */
};

static bool f32_buffer(const sc_program *p, int32_t b, int64_t numel) {
  if (b < 0 || b >= p->n_buffers || p->buffers[b].dtype != SC_DTYPE_F32) return false;
  int64_t bytes;
  return sc_mul_i64(numel, 4, &bytes) && p->buffers[b].bytes >= bytes;
}

/* ONNX's output size for one axis, or -1 */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
  if (k < 1 || s < 1 || d < 1 || p0 < 0 || p1 < 0) return -1;
  int64_t span = (k - 1) * d + 1, room = in + p0 + p1 - span;
  return room < 0 ? -1 : room / s + 1;
}

/* Whether GEMM g is exactly the convolution it carries, in a form this
 * file runs: f32, constant weights, alpha 1, no GEMM bias operand (the
 * per-channel conv.bias, when there is one, is an f32 [m] buffer), output
 * channels a multiple of 16, consistent sizes and strides. */
static bool conv_fits(const sc_program *p, const sc_gemm *g) {
  const sc_conv_geom *v = &g->conv;
  if (!v->on || g->trans_a || g->trans_b || g->alpha != 1.0f || g->bias >= 0) return false;
  if (v->prep[1] < 0 || v->prep[1] >= p->n_kernels || v->prep[0] < -1 ||
      v->prep[0] >= p->n_kernels)
    return false;
  if (g->m <= 0 || g->m % 16 != 0 || g->batch < 1) return false;
  int64_t k, n, taps;
  if (!sc_mul_i64(v->kh, v->kw, &taps) || !sc_mul_i64(v->c, taps, &k) || k != g->k) return false;
  if (out_size(v->h, v->kh, v->sh, v->dh, v->pt, v->pb) != v->oh ||
      out_size(v->w, v->kw, v->sw, v->dw, v->pl, v->pr) != v->ow ||
      !sc_mul_i64(v->oh, v->ow, &n) || n != g->n || n <= 0)
    return false;
  if (g->lda != k || g->ldc != n) return false;
  int64_t mn, img, wn;
  if (!sc_mul_i64(g->m, n, &mn) || !sc_mul_i64(v->c, v->h, &img) ||
      !sc_mul_i64(img, v->w, &img) || !sc_mul_i64(g->m, k, &wn))
    return false;
  if (g->batch > 1 && (g->stride_a != 0 || g->stride_c != mn)) return false;
  int32_t ra = sc_program_root(p, g->a);
  if (ra < 0 || p->buffers[ra].kind != SC_BUF_CONST) return false;
  if (v->bias >= 0 && (v->bias_kernel < 0 || v->bias_kernel >= p->n_kernels ||
                       !f32_buffer(p, v->bias, g->m)))
    return false;
  int64_t xn, cn;
  return sc_mul_i64(img, g->batch, &xn) && sc_mul_i64(mn, g->batch, &cn) &&
         f32_buffer(p, g->a, wn) && f32_buffer(p, v->x, xn) && f32_buffer(p, g->c, cn);
}

/* Tiles per image: the most blocks of 32 channels (16 when 32 does not
 * divide them), up to TILES_WANTED tiles per step over all images, that
 * divide the channels evenly. Fewer, larger tiles run faster in oneDNN
 * (each tile reads the whole image); on ResNet-18 with 2 threads, 2 to 8
 * tiles per image measured within noise of each other and 16 slower on an
 * AVX-512 machine, while on an AVX2 one tiles of 16 channels ran its 64-
 * channel convolutions at 110 GFLOP/s and tiles of 32 at 160
 * (docs/runtime.md#convolutions). */
enum { TILES_WANTED = 4 };

/* Parts per image of `blocks` blocks: the most that divide them, up to
 * TILES_WANTED over all `images` (the tiles here, the input reorder's and a
 * max-pool's parts). */
static int64_t split(int64_t blocks, int64_t images) {
  int64_t want = images >= TILES_WANTED ? 1 : TILES_WANTED / images, t = 1;
  for (int64_t d = 1; d <= blocks && d <= want; d++)
    if (blocks % d == 0) t = d;
  return t;
}

static int64_t tiles_per_image(int64_t m, int64_t images) {
  return split(m % 32 == 0 ? m / 32 : m / 16, images);
}

/* Images per tile. A convolution whose output plane is small (under
 * SMALL_PLANE pixels: ResNet's last stage, 7 x 7) reads all its weights
 * for few products per image, and run one image at a time it streams them
 * from the outer caches for every image; one primitive over several
 * images keeps a block of weights for all of them. So such a step groups
 * images, the most that divide the batch with at most GROUP_PIXELS output
 * pixels in all. On the AVX2 EPYC (one thread, oneDNN jit:avx2, 512 -> 512
 * channels at 7 x 7): one image x 512 channels 74 GFLOP/s, 8 images x 128
 * channels 86-88; at 14 x 14 and for the strided 14 -> 7 one, grouping
 * measured the same as not (docs/runtime.md#convolutions). */
enum { SMALL_PLANE = 64, GROUP_PIXELS = 512 };

static int64_t images_per_tile(const sc_conv_geom *v, int64_t images) {
  int64_t plane = v->oh * v->ow, G = 1;
  if (plane >= SMALL_PLANE) return 1;
  for (int64_t d = 1; d <= images && d * plane <= GROUP_PIXELS; d++)
    if (images % d == 0) G = d;
  return G;
}

/* The block of channels of md, one image [1, c, h, w] in nChw8c (8) or
 * nChw16c (16) with c a multiple of it; 0 for another layout. */
static int64_t block_of(const dnnl_memory_desc_t *md, int64_t c, int64_t h, int64_t w) {
  dnnl_dims_t d = {1, c, h, w};
  for (int i = 0; i < N_BLOCKS; i++) {
    dnnl_memory_desc_t t;
    if (c % BLOCKS[i] == 0 &&
        dnnl_memory_desc_init_by_tag(&t, 4, d, dnnl_f32, BLOCK_TAGS[i]) == dnnl_success &&
        dnnl_memory_desc_equal(&t, md))
      return BLOCKS[i];
  }
  return 0;
}

/* *out: `one` (a single image's layout, one of the plain or channel-
 * blocked ones with images outermost) for n images; false for another. */
static bool with_images(const dnnl_memory_desc_t *one, int64_t n, dnnl_memory_desc_t *out) {
  static const dnnl_format_tag_t tags[] = {dnnl_nchw, dnnl_nChw8c, dnnl_nChw16c, dnnl_nhwc};
  const dnnl_dims_t *d = &one->dims;
  dnnl_dims_t dn = {n, (*d)[1], (*d)[2], (*d)[3]};
  if (one->ndims != 4 || (*d)[0] != 1) return false;
  for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
    dnnl_memory_desc_t t;
    if (dnnl_memory_desc_init_by_tag(&t, 4, *d, dnnl_f32, tags[i]) == dnnl_success &&
        dnnl_memory_desc_equal(&t, one))
      return dnnl_memory_desc_init_by_tag(out, 4, dn, dnnl_f32, tags[i]) == dnnl_success;
  }
  return false;
}

/* Parts per image of the input reorder: with fewer images than
 * TILES_WANTED, a blocked input (nChw8c or nChw16c, whose blocks of
 * channels are contiguous, as they are in NCHW) is reordered in up to
 * that many parts of whole blocks, so that every thread takes a share
 * (at batch 1 the whole reorder ran on one thread while the other waited:
 * ~1.6 ms of ResNet-18's 23 on 2 threads). 1 when it cannot be split. */
static int64_t reorder_parts(const conv *c, const sc_conv_geom *v, int64_t *block) {
  if (!(*block = block_of(&c->src_md, v->c, v->h, v->w))) return 1;
  return split(v->c / *block, c->N);
}

/* Releases what bind made (memory objects, the weights in oneDNN's layout). */
static void conv_unbind(conv *c) {
  int64_t NG = c->G ? c->N / c->G : 0;
  dnnl_memory_t **arrays[] = {&c->s_mem,  &c->w_mem,  &c->b_mem,  &c->d_mem,
                              &c->r_mem,  &c->y_mem,  &c->xp_mem, &c->xbp_mem};
  int64_t counts[] = {NG,         c->T,       c->T,       NG * c->T,
                      c->N * c->T, c->N * c->T, c->N * c->P, c->N * c->P};
  for (int i = 0; i < 8; i++) {
    if (!*arrays[i]) continue;
    for (int64_t j = 0; j < counts[i]; j++)
      if ((*arrays[i])[j]) dnnl_memory_destroy((*arrays[i])[j]);
    free(*arrays[i]);
    *arrays[i] = NULL;
  }
  free(c->w_blk);
  c->w_blk = NULL;
}

static void conv_free(conv *c) {
  conv_unbind(c);
  if (c->prim) dnnl_primitive_destroy(c->prim);
  if (c->src_reorder) dnnl_primitive_destroy(c->src_reorder);
  if (c->dst_reorder) dnnl_primitive_destroy(c->dst_reorder);
  memset(c, 0, sizeof *c);
}

/* A reorder from -> to that adds beta times what `to` holds (beta 0: it
 * overwrites), with a user scratchpad described in *pad. */
static dnnl_primitive_t make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                     float beta, dnnl_memory_desc_t *pad) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
            dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
                dnnl_success;
  if (ok && beta != 0.0f)
    ok = dnnl_post_ops_create(&po) == dnnl_success &&
         dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
  if (ok)
    ok = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, attr) == dnnl_success;
  if (ok) *pad = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (ok) create_primitive(&prim, pd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (po) dnnl_post_ops_destroy(po);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return prim;
}

/* A primitive descriptor for op_desc (a oneDNN operation descriptor) with a
 * user scratchpad, and in *impl its implementation's name: oneDNN's first
 * choice, or with `want` its first implementation whose name starts so;
 * NULL when there is none. */
static dnnl_primitive_desc_t user_pd(const void *op_desc, const char *want, const char **impl) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_iterator_t it = NULL;
  dnnl_primitive_desc_t pd = NULL;
  *impl = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
  if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
      dnnl_primitive_desc_iterator_create(&it, op_desc, attr, engine, NULL) == dnnl_success) {
    do {
      pd = dnnl_primitive_desc_iterator_fetch(it);
      if (pd && (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, impl) !=
                     dnnl_success ||
                 !*impl || (want && strncmp(*impl, want, strlen(want)) != 0))) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
      }
    } while (!pd && want && dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
  }
  dnnl_primitive_attr_destroy(attr);
  return pd;
}

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* The Winograd implementation taken when oneDNN offers it: of its two
 * for f32 (AVX-512 only), F(4x4, 3x3) ran every tile shape of ResNet-18
 * faster than F(2x2, 3x3), which oneDNN often lists first
 * (docs/runtime.md#winograd-convolutions). */
static const char WINO_IMPL[] = "jit_wino_4x3";

/* A primitive descriptor for c's convolution (geometry v, algorithm alg:
 * dnnl_convolution_direct or _winograd) with these layouts, or NULL when
 * oneDNN declines it or has no JIT kernel for it (for Winograd: not
 * WINO_IMPL). */
static dnnl_primitive_desc_t conv_pd(const conv *c, const sc_conv_geom *v, dnnl_alg_kind_t alg,
                                     const dnnl_memory_desc_t *src, const dnnl_memory_desc_t *w,
                                     const dnnl_memory_desc_t *dst) {
  dnnl_dims_t strides = {v->sh, v->sw}, dil = {v->dh - 1, v->dw - 1};
  dnnl_dims_t pad_l = {v->pt, v->pl}, pad_r = {v->pb, v->pr};
  dnnl_convolution_desc_t cd;
  if (dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, alg, src, w,
                                                 c->bias ? &c->b_md : NULL, dst, strides, dil,
                                                 pad_l, pad_r))
    return NULL;
  const char *impl;
  dnnl_primitive_desc_t pd = user_pd(&cd, alg == dnnl_convolution_winograd ? WINO_IMPL : NULL,
                                     &impl);
  if (pd && strncmp(impl, "jit", 3) != 0 && strncmp(impl, "brg", 3) != 0) {
    dnnl_primitive_desc_destroy(pd);
    return NULL;
  }
  return pd;
}

/* Winograd's F(4x4, 3x3) does 2.25 times fewer multiplications than a
 * direct convolution, but its weights, transformed to 6 x 6 per pair of
 * channels, are 4 times larger, and a tile streams all of its share of
 * them from memory. Per tile of P output pixels (G images), it saves
 * ~18 P (1 - 1/2.25) = 10 P flops per pair of channels and reads 108 more
 * bytes; at ~8 flops per byte of memory bandwidth (2 threads, ~240 GFLOP/s
 * against ~31 GB/s, the AVX-512 EPYC) it wins above ~86 pixels. Measured
 * in ResNet-18 at batch 1: 14 x 14 planes 0.99 -> 0.77-0.93 ms per
 * convolution, 7 x 7 ones 1.13 -> 1.21-1.33 ms (9.4 MB of weights become
 * 37.7 MB). */
enum { WINO_PIXELS = 100 };

/* Whether c's convolution (G images per tile) may run as Winograd's
 * F(4x4, 3x3): 3 x 3, stride 1, not dilated, channels in blocks of 16, at
 * least WINO_PIXELS output pixels per tile, and SHARDC_CONV_ALGO is not
 * "direct" (A/B runs, tests). */
static bool wino_fits(const conv *c, const sc_conv_geom *v) {
  const char *env = getenv("SHARDC_CONV_ALGO");
  if (env && strcmp(env, "direct") == 0) return false;
  return v->kh == 3 && v->kw == 3 && v->sh == 1 && v->sw == 1 && v->dh == 1 && v->dw == 1 &&
         v->c % 16 == 0 && c->tm % 16 == 0 && c->G * v->oh * v->ow >= WINO_PIXELS;
}

/* The primitives of one convolution with G images per tile; false when
 * oneDNN declines it or has no JIT kernel for it. */
static bool conv_build_with(conv *c, const sc_gemm *g, int64_t G) {
  const sc_conv_geom *v = &g->conv;
  c->g = g;
  c->N = g->batch;
  c->G = G;
  c->T = tiles_per_image(g->m, c->N / G);
  c->tm = g->m / c->T;
  dnnl_dims_t sd = {1, v->c, v->h, v->w}, wd = {c->tm, v->c, v->kh, v->kw};
  dnnl_dims_t dd = {1, c->tm, v->oh, v->ow}, bd = {c->tm};
  c->bias = v->bias >= 0;
  dnnl_memory_desc_t s_any, w_any, d_any;
  if (dnnl_memory_desc_init_by_tag(&s_any, 4, sd, dnnl_f32, dnnl_format_tag_any) ||
      dnnl_memory_desc_init_by_tag(&w_any, 4, wd, dnnl_f32, dnnl_format_tag_any) ||
      dnnl_memory_desc_init_by_tag(&d_any, 4, dd, dnnl_f32, dnnl_format_tag_any) ||
      dnnl_memory_desc_init_by_tag(&c->x_user, 4, sd, dnnl_f32, dnnl_nchw) ||
      dnnl_memory_desc_init_by_tag(&c->w_user, 4, wd, dnnl_f32, dnnl_oihw) ||
      dnnl_memory_desc_init_by_tag(&c->y_user, 4, dd, dnnl_f32, dnnl_nchw) ||
      dnnl_memory_desc_init_by_tag(&c->b_md, 1, bd, dnnl_f32, dnnl_a))
    return false;
  /* the layouts oneDNN picks for one image; a group of images is those
   * images one after another, whole 64-byte lines each (the input scratch
   * holds each image at a multiple of 64 bytes) */
  dnnl_primitive_desc_t pd = NULL;
  c->wino = false;
  if (wino_fits(c, v)) {
    /* Winograd on channel blocks of 16, the layout its kernels take */
    dnnl_memory_desc_t s16, d16;
    if (dnnl_memory_desc_init_by_tag(&s16, 4, sd, dnnl_f32, dnnl_nChw16c) == dnnl_success &&
        dnnl_memory_desc_init_by_tag(&d16, 4, dd, dnnl_f32, dnnl_nChw16c) == dnnl_success)
      pd = conv_pd(c, v, dnnl_convolution_winograd, &s16, &w_any, &d16);
    c->wino = pd != NULL;
  }
  if (!pd) pd = conv_pd(c, v, dnnl_convolution_direct, &s_any, &w_any, &d_any);
  if (!pd) return false;
  if (!c->wino &&
      !block_of(dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0), c->tm, v->oh, v->ow)) {
    /* blocks of channels rather than oneDNN's own choice (its AVX-512
     * brgemm kernels take NHWC): held between steps without reorders
     * (layout_plan), they ran ResNet-18 faster than NHWC with them */
    dnnl_memory_desc_t s16, d16;
    if (dnnl_memory_desc_init_by_tag(&s16, 4, sd, dnnl_f32,
                                     v->c % 16 == 0 ? dnnl_nChw16c : dnnl_format_tag_any) ==
            dnnl_success &&
        dnnl_memory_desc_init_by_tag(&d16, 4, dd, dnnl_f32, dnnl_nChw16c) == dnnl_success) {
      dnnl_primitive_desc_t pd16 = conv_pd(c, v, dnnl_convolution_direct, &s16, &w_any, &d16);
      if (pd16) dnnl_primitive_desc_destroy(pd), pd = pd16;
    }
  }
  c->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  c->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  c->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  c->src_g = c->src_md, c->dst_g = c->dst_md;
  if (G > 1) {
    dnnl_primitive_desc_destroy(pd);
    pd = with_images(&c->src_md, G, &c->src_g) && with_images(&c->dst_md, G, &c->dst_g) &&
                 dnnl_memory_desc_get_size(&c->src_md) % 64 == 0
             ? conv_pd(c, v, c->wino ? dnnl_convolution_winograd : dnnl_convolution_direct,
                       &c->src_g, c->wino ? &w_any : &c->w_md, &c->dst_g)
             : NULL;
    if (!pd) return false;
    /* Winograd's weights layout depends on the problem, the images included */
    c->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  }
  const char *impl = NULL;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  int len = snprintf(c->note, sizeof c->note, "%s convolution, oneDNN %s",
                     c->wino ? "Winograd" : "direct", impl ? impl : "?");
  if (G > 1 && len > 0 && (size_t)len < sizeof c->note)
    snprintf(c->note + len, sizeof c->note - (size_t)len, ", %lld images per tile", (long long)G);
  c->pad_conv = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  bool ok = create_primitive(&c->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  if (!ok) return false;
  c->src_bytes = dnnl_memory_desc_equal(&c->src_md, &c->x_user)
                     ? 0
                     : (dnnl_memory_desc_get_size(&c->src_md) + 63) / 64 * 64;
  c->w_bytes = (dnnl_memory_desc_get_size(&c->w_md) + 63) / 64 * 64;
  c->dst_bytes = (dnnl_memory_desc_get_size(&c->dst_g) + 63) / 64 * 64;
  int64_t block = 1;
  c->P = c->src_bytes ? reorder_parts(c, v, &block) : 1;
  c->xp_user = c->x_user, c->srcp_md = c->src_md;
  if (c->P > 1) {
    dnnl_dims_t pd_dims = {1, v->c / c->P, v->h, v->w};
    if (dnnl_memory_desc_init_by_tag(&c->xp_user, 4, pd_dims, dnnl_f32, dnnl_nchw) ||
        dnnl_memory_desc_init_by_tag(&c->srcp_md, 4, pd_dims, dnnl_f32,
                                     block == 8 ? dnnl_nChw8c : dnnl_nChw16c))
      return false;
  }
  if (c->src_bytes &&
      !(c->src_reorder = make_reorder(&c->xp_user, &c->srcp_md, 0.0f, &c->pad_src)))
    return false;
  if (!(c->dst_reorder =
            make_reorder(&c->dst_md, &c->y_user, c->bias ? 0.0f : g->beta, &c->pad_dst)))
    return false;
  c->pad_bytes = max3(dnnl_memory_desc_get_size(&c->pad_conv),
                      dnnl_memory_desc_get_size(&c->pad_src),
                      dnnl_memory_desc_get_size(&c->pad_dst));
  return true;
}

/* The primitives of one convolution: with images grouped when
 * images_per_tile says so and oneDNN takes the group, else one image per
 * tile; false when oneDNN declines it (the step then stays a GEMM). */
static bool conv_build(conv *c, const sc_gemm *g) {
  int64_t G = images_per_tile(&g->conv, g->batch);
  if (G > 1) {
    if (conv_build_with(c, g, G)) return true;
    conv_free(c);
  }
  return conv_build_with(c, g, 1);
}

/* Whether KERNEL step s completes a max-pool this file can run: its
 * geometry consistent (ONNX's output sizes), f32 buffers of those sizes,
 * apart from each other, channels in whole blocks of 8. */
static bool pool_fits(const sc_program *p, const sc_step *s) {
  const sc_pool_geom *v = &s->pool;
  if (s->kind != SC_STEP_KERNEL || !v->on || s->kernel < 0 || s->kernel >= p->n_kernels)
    return false;
  for (int i = 0; i < 2; i++)
    if (v->prep[i] < -1 || v->prep[i] >= p->n_kernels || v->prep[i] == s->kernel) return false;
  if (v->n < 1 || v->c < 8 || v->c % 8 != 0 || v->pt >= v->kh || v->pl >= v->kw ||
      v->pb >= v->kh || v->pr >= v->kw ||
      out_size(v->h, v->kh, v->sh, 1, v->pt, v->pb) != v->oh ||
      out_size(v->w, v->kw, v->sw, 1, v->pl, v->pr) != v->ow || v->oh < 1 || v->ow < 1)
    return false;
  int64_t nc, xn, yn;
  return sc_mul_i64(v->n, v->c, &nc) && sc_mul_i64(nc, v->h, &xn) && sc_mul_i64(xn, v->w, &xn) &&
         sc_mul_i64(nc, v->oh, &yn) && sc_mul_i64(yn, v->ow, &yn) && f32_buffer(p, v->x, xn) &&
         f32_buffer(p, v->y, yn) && sc_program_disjoint(p, v->x, v->y);
}

/* Parts per image of a pool: the most, up to TILES_WANTED over all images,
 * whole blocks of 16 channels (8 when 16 does not divide them) each, that
 * divide the channels: whole blocks in either layout. */
static int64_t pool_parts(const sc_pool_geom *v) {
  return split(v->c % 16 == 0 ? v->c / 16 : v->c / 8, v->n);
}

static void pool_unbind(pool *o) {
  int64_t n = o->v ? o->v->n * o->parts : 0;
  for (int64_t i = 0; i < n; i++) {
    if (o->x_mem && o->x_mem[i]) dnnl_memory_destroy(o->x_mem[i]);
    if (o->y_mem && o->y_mem[i]) dnnl_memory_destroy(o->y_mem[i]);
  }
  free(o->x_mem);
  free(o->y_mem);
  o->x_mem = o->y_mem = NULL;
}

static void pool_free(pool *o) {
  pool_unbind(o);
  for (int i = 0; i < N_BLOCKS; i++)
    if (o->prim[i]) dnnl_primitive_destroy(o->prim[i]);
  memset(o, 0, sizeof *o);
}

/* Pool o's primitive on parts in BLOCKS[i]; false (prim[i] NULL) when
 * oneDNN declines it or has no JIT kernel for it. */
static bool pool_build_in(pool *o, int i) {
  const sc_pool_geom *v = o->v;
  dnnl_dims_t sd = {1, o->cp, v->h, v->w}, dd = {1, o->cp, v->oh, v->ow};
  dnnl_dims_t strides = {v->sh, v->sw}, kernel = {v->kh, v->kw}, dil = {0, 0};
  dnnl_dims_t pad_l = {v->pt, v->pl}, pad_r = {v->pb, v->pr};
  dnnl_pooling_v2_desc_t d;
  dnnl_primitive_desc_t pd = NULL;
  const char *impl = NULL;
  bool ok = o->cp % BLOCKS[i] == 0 &&
            dnnl_memory_desc_init_by_tag(&o->src_md[i], 4, sd, dnnl_f32, BLOCK_TAGS[i]) ==
                dnnl_success &&
            dnnl_memory_desc_init_by_tag(&o->dst_md[i], 4, dd, dnnl_f32, BLOCK_TAGS[i]) ==
                dnnl_success &&
            dnnl_pooling_v2_forward_desc_init(&d, dnnl_forward_inference, dnnl_pooling_max,
                                              &o->src_md[i], &o->dst_md[i], strides, kernel, dil,
                                              pad_l, pad_r) == dnnl_success &&
            (pd = user_pd(&d, NULL, &impl)) && strncmp(impl, "jit", 3) == 0;
  if (ok) {
    snprintf(o->note[i], sizeof o->note[i], "direct max-pool, oneDNN %s, nChw%lldc", impl,
             (long long)BLOCKS[i]);
    o->pad[i] = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    create_primitive(&o->prim[i], pd);
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  return o->prim[i] != NULL;
}

/* The primitives of step s's max-pool, in every block oneDNN has a JIT
 * kernel for; false when it has none. */
static bool pool_build(pool *o, const sc_step *s) {
  o->v = &s->pool;
  o->kernel = s->kernel;
  o->parts = pool_parts(o->v);
  o->cp = o->v->c / o->parts;
  bool any = false;
  for (int i = 0; i < N_BLOCKS; i++) any |= pool_build_in(o, i);
  return any;
}

/* Every kernel of pool o skipped (or run again) */
static void pool_skip(const pool *o, bool *skip_kernel, bool skip) {
  skip_kernel[o->kernel] = skip;
  for (int i = 0; i < 2; i++)
    if (o->v->prep[i] >= 0) skip_kernel[o->v->prep[i]] = skip;
}

/* The max-pools that may run directly: their primitives, their kernels
 * skipped while the layout plan runs (it then says which do). false: out
 * of memory. */
static bool pools_prepare(sc_cpu_convs *cv, bool *skip_kernel) {
  const sc_program *p = cv->p;
  int32_t n = 0;
  for (int32_t i = 0; i < p->n_steps; i++)
    n += p->steps[i].kind == SC_STEP_KERNEL && p->steps[i].pool.on;
  if (n == 0) return true;
  cv->pools = sc_calloc((size_t)n, sizeof *cv->pools);
  cv->pool_of_kernel = sc_calloc((size_t)p->n_kernels, sizeof *cv->pool_of_kernel);
  if (!cv->pools || !cv->pool_of_kernel) return false;
  for (int32_t k = 0; k < p->n_kernels; k++) cv->pool_of_kernel[k] = -1;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    if (!pool_fits(p, s)) continue;
    const sc_pool_geom *v = &s->pool;
    bool taken = skip_kernel[s->kernel] || cv->pool_of_kernel[s->kernel] >= 0;
    for (int j = 0; j < 2; j++)
      taken |= v->prep[j] >= 0 && (skip_kernel[v->prep[j]] || cv->pool_of_kernel[v->prep[j]] >= 0);
    pool *o = &cv->pools[cv->n_pools];
    if (taken || !pool_build(o, s)) {
      pool_free(o);
      continue;
    }
    pool_skip(o, skip_kernel, true);
    cv->pool_of_kernel[s->kernel] = cv->n_pools;
    for (int j = 0; j < 2; j++)
      if (v->prep[j] >= 0) cv->pool_of_kernel[v->prep[j]] = cv->n_pools;
    cv->n_pools++;
  }
  return true;
}

static bool layout_plan(sc_cpu_convs *cv, bool *skip);
static void epilogue_plan(sc_cpu_convs *cv, const bool *skip);

sc_status sc_cpu_convs_prepare(const sc_program *p, bool *skip_kernel, sc_cpu_convs **out,
                               sc_diag *diag) {
  *out = NULL;
  int32_t convs = 0; /* GEMMs that carry a convolution: conv_fits says which run directly */
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind == SC_STEP_GEMM && p->steps[i].gemm.conv.on) convs++;
  if (convs == 0) return SC_OK;
  pthread_once(&engine_once, engine_init);
  if (!engine) return SC_OK;
  sc_cpu_engine_one_thread();
  sc_cpu_convs *cv = sc_calloc(1, sizeof *cv);
  if (cv) cv->v = sc_calloc((size_t)convs, sizeof *cv->v);
  if (cv) cv->of_kernel = sc_calloc((size_t)p->n_kernels, sizeof *cv->of_kernel);
  if (!cv || !cv->v || !cv->of_kernel) {
    sc_cpu_convs_destroy(cv);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  cv->p = p;
  for (int32_t k = 0; k < p->n_kernels; k++) cv->of_kernel[k] = -1;
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_gemm *g = &p->steps[i].gemm;
    if (p->steps[i].kind != SC_STEP_GEMM || !conv_fits(p, g)) continue;
    conv *c = &cv->v[cv->n];
    if (cv->of_kernel[g->conv.prep[1]] >= 0 || !conv_build(c, g)) {
      conv_free(c);
      continue;
    }
    size_t need = (size_t)c->N * c->src_bytes + (size_t)(c->N / c->G * c->T) * c->dst_bytes;
    if (need > cv->scratch_bytes) cv->scratch_bytes = need;
    c->kernel = p->steps[i].kernel;
    cv->of_kernel[g->conv.prep[1]] = cv->n++;
    for (int j = 0; j < 2; j++)
      if (g->conv.prep[j] >= 0) skip_kernel[g->conv.prep[j]] = true;
    if (c->bias) skip_kernel[g->conv.bias_kernel] = true;
  }
  if (cv->n == 0) {
    sc_cpu_convs_destroy(cv);
    return SC_OK;
  }
  if (!pools_prepare(cv, skip_kernel) || !layout_plan(cv, skip_kernel)) {
    sc_cpu_convs_destroy(cv);
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  }
  if (posix_memalign((void **)&cv->scratch, 64, cv->scratch_bytes ? cv->scratch_bytes : 64)) {
    cv->scratch = NULL;
    size_t bytes = cv->scratch_bytes;
    sc_cpu_convs_destroy(cv);
    return sc_diag_nomem(diag, bytes, "the direct convolutions' blocked inputs and outputs");
  }
  /* a pool whose buffers stay NCHW runs as written */
  for (int32_t i = 0; i < cv->n_pools; i++)
    if (!cv->pools[i].on) pool_skip(&cv->pools[i], skip_kernel, false);
  for (int32_t i = 0; i < cv->n; i++)
    if (cv->v[i].pad_bytes > cv->thread_pad) cv->thread_pad = cv->v[i].pad_bytes;
  for (int32_t i = 0; i < cv->n_pools; i++) {
    const pool *o = &cv->pools[i];
    size_t pad = o->on ? dnnl_memory_desc_get_size(&o->pad[o->bi]) : 0;
    if (pad > cv->thread_pad) cv->thread_pad = pad;
  }
  epilogue_plan(cv, skip_kernel);
  *out = cv;
  return SC_OK;
}

static bool new_mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md, void *ptr) {
  return dnnl_memory_create(m, md, engine, ptr) == dnnl_success;
}

/* Runs prim with args (and, when it has one, the scratchpad pad in this
 * thread's scratch, grown to pad_bytes) on this thread's stream:
 * dnnl_success, or the failing call's status; dnnl_out_of_memory with
 * *scratch_bytes = pad_bytes + EXEC_HEADROOM when this thread's state or
 * scratch could not be allocated with that room left (else 0). */
static dnnl_status_t run(dnnl_primitive_t prim, const dnnl_memory_desc_t *pad, size_t pad_bytes,
                         int n, dnnl_exec_arg_t *args, uint64_t *scratch_bytes) {
  *scratch_bytes = 0;
  thread_state *t = this_thread(pad_bytes);
  if (!t) {
    *scratch_bytes = (uint64_t)pad_bytes + EXEC_HEADROOM;
    return dnnl_out_of_memory;
  }
  dnnl_memory_t m = NULL;
  dnnl_exec_arg_t all[5];
  memcpy(all, args, (size_t)n * sizeof *args);
  dnnl_status_t st;
  if (dnnl_memory_desc_get_size(pad) > 0) {
    if ((st = dnnl_memory_create(&m, pad, engine, t->scratch)) != dnnl_success) return st;
    all[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m};
  }
  st = dnnl_primitive_execute(prim, t->stream, n, all);
  if (m) dnnl_memory_destroy(m);
  return st;
}

static dnnl_status_t exec2(dnnl_primitive_t prim, const dnnl_memory_desc_t *pad,
                           size_t pad_bytes, int a0, dnnl_memory_t m0, int a1, dnnl_memory_t m1,
                           uint64_t *scratch_bytes) {
  dnnl_exec_arg_t args[2] = {{a0, m0}, {a1, m1}};
  return run(prim, pad, pad_bytes, 2, args, scratch_bytes);
}

static bool conv_bind(conv *c, void *const *ptrs, char *scratch) {
  const sc_gemm *g = c->g;
  conv_unbind(c); /* a second bind starts over */
  int64_t NG = c->N / c->G, NT = c->N * c->T, img = g->conv.c * g->conv.h * g->conv.w,
          mn = g->m * g->n;
  c->y_direct = c->y_blocked && (c->G == 1 || c->T == 1);
  c->s_mem = calloc((size_t)NG, sizeof *c->s_mem);
  c->w_mem = calloc((size_t)c->T, sizeof *c->w_mem);
  c->b_mem = calloc((size_t)c->T, sizeof *c->b_mem);
  c->d_mem = calloc((size_t)(NG * c->T), sizeof *c->d_mem);
  c->r_mem = calloc((size_t)NT, sizeof *c->r_mem);
  c->y_mem = calloc((size_t)NT, sizeof *c->y_mem);
  if (posix_memalign((void **)&c->w_blk, 64, (size_t)c->T * c->w_bytes)) c->w_blk = NULL;
  if (!c->s_mem || !c->w_mem || !c->b_mem || !c->d_mem || !c->r_mem || !c->y_mem || !c->w_blk)
    return false;
  c->xp_mem = calloc((size_t)(c->N * c->P), sizeof *c->xp_mem);
  c->xbp_mem = calloc((size_t)(c->N * c->P), sizeof *c->xbp_mem);
  if (!c->xp_mem || !c->xbp_mem) return false;
  float *x = ptrs[g->conv.x], *a = ptrs[g->a], *y = ptrs[g->c];
  char *dst = scratch + (size_t)c->N * c->src_bytes;
  int64_t part = img / c->P; /* floats of a part, in both layouts */
  /* the input: as it is (NCHW, or held in src_md), or reordered into the
   * scratch, each image at a multiple of src_bytes */
  bool in_place = c->x_blocked || !c->src_bytes;
  for (int64_t i = 0; i < NG; i++)
    if (!new_mem(&c->s_mem[i], &c->src_g,
                 in_place ? (void *)(x + i * c->G * img) : scratch + i * c->G * c->src_bytes))
      return false;
  for (int64_t i = 0; i < c->N; i++)
    for (int64_t q = 0; !in_place && q < c->P; q++)
      if (!new_mem(&c->xp_mem[i * c->P + q], &c->xp_user, x + i * img + q * part) ||
          !new_mem(&c->xbp_mem[i * c->P + q], &c->srcp_md,
                   (float *)(scratch + i * c->src_bytes) + q * part))
        return false;
  /* the weights, once: each tile's rows of A (OIHW) into w_md */
  dnnl_memory_desc_t wpad;
  dnnl_primitive_t wr = make_reorder(&c->w_user, &c->w_md, 0.0f, &wpad);
  bool ok = wr != NULL;
  for (int64_t t = 0; ok && t < c->T; t++) {
    dnnl_memory_t from = NULL;
    uint64_t pad_need;
    ok = new_mem(&from, &c->w_user, a + t * c->tm * g->k) &&
         new_mem(&c->w_mem[t], &c->w_md, c->w_blk + t * c->w_bytes) &&
         exec2(wr, &wpad, dnnl_memory_desc_get_size(&wpad), DNNL_ARG_FROM, from, DNNL_ARG_TO,
               c->w_mem[t], &pad_need) == dnnl_success;
    if (from) dnnl_memory_destroy(from);
  }
  if (wr) dnnl_primitive_destroy(wr);
  float *bias = c->bias ? ptrs[g->conv.bias] : NULL; /* a constant: read in place */
  for (int64_t t = 0; ok && bias && t < c->T; t++)
    ok = new_mem(&c->b_mem[t], &c->b_md, bias + t * c->tm);
  /* the output: tile (group i, channels j) in place, or into the scratch
   * and from there per image (r_mem) into its slice of the output */
  size_t one = dnnl_memory_desc_get_size(&c->dst_md);
  for (int64_t t = 0; ok && t < NG * c->T; t++) {
    int64_t i = t / c->T, j = t % c->T;
    ok = new_mem(&c->d_mem[t], &c->dst_g,
                 c->y_direct ? (void *)(y + i * c->G * mn + j * c->tm * g->n)
                             : dst + t * c->dst_bytes);
    for (int64_t e = 0; ok && !c->y_direct && e < c->G; e++) {
      int64_t u = (i * c->G + e) * c->T + j; /* image i * G + e, tile j */
      ok = new_mem(&c->r_mem[u], &c->dst_md, dst + t * c->dst_bytes + e * one) &&
           new_mem(&c->y_mem[u], &c->y_user, y + (i * c->G + e) * mn + j * c->tm * g->n);
    }
  }
  return ok;
}

/* Pool o's memory objects: part q of image i at its channels' offset (in
 * nChw8c as in NCHW, whole blocks of channels are contiguous). */
static bool pool_bind(pool *o, void *const *ptrs) {
  const sc_pool_geom *v = o->v;
  pool_unbind(o);
  int64_t n = v->n * o->parts;
  o->x_mem = calloc((size_t)n, sizeof *o->x_mem);
  o->y_mem = calloc((size_t)n, sizeof *o->y_mem);
  if (!o->x_mem || !o->y_mem) return false;
  float *x = ptrs[v->x], *y = ptrs[v->y];
  for (int64_t u = 0; u < n; u++) /* channel u * cp of all n * c */
    if (!new_mem(&o->x_mem[u], &o->src_md[o->bi], x + u * o->cp * v->h * v->w) ||
        !new_mem(&o->y_mem[u], &o->dst_md[o->bi], y + u * o->cp * v->oh * v->ow))
      return false;
  return true;
}

sc_status sc_cpu_convs_bind(sc_cpu_convs *cv, void *const *ptrs, sc_diag *diag) {
  sc_cpu_engine_one_thread();
  atomic_store(&cv->reserved, 0); /* the threads reserve again after a bind */
  for (int32_t i = 0; i < cv->n_pools; i++)
    if (cv->pools[i].on && !pool_bind(&cv->pools[i], ptrs))
      return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL,
                         "cpu device: a direct max-pool's oneDNN memory objects: out of memory");
  for (int32_t i = 0; i < cv->n; i++) {
    conv *c = &cv->v[i];
    if (!conv_bind(c, ptrs, cv->scratch))
      return sc_diag_nomem(diag, (uint64_t)c->T * c->w_bytes,
                           "the weights of the direct convolution of a %lld x %lld x %lld "
                           "product in oneDNN's layout (and its memory objects)",
                           (long long)c->g->m, (long long)c->g->n, (long long)c->g->k);
  }
  return SC_OK;
}

/* A step's run: the convolution, and the epilogue kernel when it runs on
 * each tile's output (epi_tiles); a failed oneDNN call goes to fail. */
typedef struct conv_job {
  const conv *c;
  sc_cpu_kernel_fn epi;
  void *const *epi_args;
  run_failure *fail;
} conv_job;

/* A oneDNN call that fails here has been set up and checked at prepare and
 * bind: what is left is memory (this thread's scratchpad, or the library's
 * own) or the library's own failure. The first is recorded; false then. */
static bool conv_call(const conv_job *job, dnnl_status_t st, uint64_t scratch_bytes,
                      const char *part) {
  if (st == dnnl_success) return true;
  const sc_gemm *g = job->c->g;
  record_failure(job->fail, st, scratch_bytes, "%sthe direct convolution of a %lld x %lld x %lld "
                 "product", part, (long long)g->m, (long long)g->n, (long long)g->k);
  return false;
}

static void src_parts(void *ud, int64_t begin, int64_t end) {
  const conv_job *job = ud;
  const conv *c = job->c;
  sc_cpu_engine_one_thread();
  for (int64_t i = begin; i < end && !has_failed(job->fail); i++) {
    uint64_t scratch;
    dnnl_status_t st = exec2(c->src_reorder, &c->pad_src, c->pad_bytes, DNNL_ARG_FROM,
                             c->xp_mem[i], DNNL_ARG_TO, c->xbp_mem[i], &scratch);
    conv_call(job, st, scratch, "the input reorder of ");
  }
}

static void *mem_ptr(dnnl_memory_t m) {
  void *p = NULL;
  dnnl_memory_get_data_handle(m, &p);
  return p;
}

static void conv_tiles(void *ud, int64_t begin, int64_t end) {
  const conv_job *job = ud;
  const conv *c = job->c;
  int64_t mn = c->g->m * c->g->n, part = c->tm * c->g->n; /* an image's, a tile's elements */
  sc_cpu_engine_one_thread();
  for (int64_t t = begin; t < end && !has_failed(job->fail); t++) {
    int64_t i = t / c->T, j = t % c->T;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, c->s_mem[i]},
                               {DNNL_ARG_WEIGHTS, c->w_mem[j]},
                               {DNNL_ARG_DST, c->d_mem[t]},
                               {DNNL_ARG_BIAS, c->b_mem[j]}};
    uint64_t scratch;
    dnnl_status_t st = run(c->prim, &c->pad_conv, c->pad_bytes, c->bias ? 4 : 3, args, &scratch);
    if (!conv_call(job, st, scratch, "")) return;
    for (int64_t e = 0; !c->y_direct && e < c->G; e++) {
      int64_t u = (i * c->G + e) * c->T + j;
      if (c->y_blocked) { /* the image's run of channel blocks, as it is */
        memcpy(mem_ptr(c->y_mem[u]), mem_ptr(c->r_mem[u]), dnnl_memory_desc_get_size(&c->dst_md));
        continue;
      }
      st = exec2(c->dst_reorder, &c->pad_dst, c->pad_bytes, DNNL_ARG_FROM, c->r_mem[u],
                 DNNL_ARG_TO, c->y_mem[u], &scratch);
      if (!conv_call(job, st, scratch, "the output reorder of ")) return;
    }
    /* the tile's output, image by image: a contiguous run of elements in
     * either layout (whole images when T is 1), still in the caches */
    if (!job->epi) continue;
    if (c->T == 1)
      job->epi(job->epi_args, i * c->G * mn, (i + 1) * c->G * mn);
    else
      for (int64_t e = 0; e < c->G; e++) {
        int64_t at = (i * c->G + e) * mn + j * part;
        job->epi(job->epi_args, at, at + part);
      }
  }
}

static void on_pool(sc_thread_pool *tp, sc_pool_fn fn, void *ud, int64_t n) {
  if (tp && n > 1 && sc_thread_pool_threads(tp) > 1)
    sc_thread_pool_run(tp, fn, ud, n, n);
  else
    fn(ud, 0, n);
}

static conv *conv_of(const sc_cpu_convs *cv, const sc_step *s) {
  const sc_conv_geom *v = &s->gemm.conv;
  if (!cv || s->kind != SC_STEP_GEMM || !v->on || v->prep[1] < 0 ||
      v->prep[1] >= cv->p->n_kernels)
    return NULL;
  int32_t i = cv->of_kernel[v->prep[1]];
  return i < 0 ? NULL : &cv->v[i];
}

/* The pool whose kernels include KERNEL step s's (on or not yet decided),
 * or NULL */
static pool *pool_with(const sc_cpu_convs *cv, const sc_step *s) {
  if (!cv || !cv->pool_of_kernel || s->kind != SC_STEP_KERNEL || s->kernel < 0 ||
      s->kernel >= cv->p->n_kernels)
    return NULL;
  int32_t i = cv->pool_of_kernel[s->kernel];
  return i >= 0 ? &cv->pools[i] : NULL;
}

/* The pool step s completes, or NULL */
static pool *pool_of(const sc_cpu_convs *cv, const sc_step *s) {
  pool *o = pool_with(cv, s);
  return o && o->kernel == s->kernel ? o : NULL;
}

const char *sc_cpu_convs_note(const sc_cpu_convs *cv, const sc_step *s) {
  const conv *c = conv_of(cv, s);
  if (c) return c->note;
  const pool *o = pool_with(cv, s);
  if (!o || !o->on) return NULL;
  return o->kernel == s->kernel ? o->note[o->bi] : "skipped: its max-pool runs directly";
}

/* ---- blocked activations ----
 *
 * oneDNN's AVX2 convolutions read and write activations in nChw8c (blocks
 * of 8 channels innermost); converting every input from NCHW and every
 * output back cost ResNet-18 ~1.3 ms of ~26 at batch 1 and ~9 of ~200 at
 * batch 8. So a buffer that only direct convolutions and pointwise kernels
 * touch is kept in nChw8c for its whole life, the convolutions reading and
 * writing it in place. A kernel is pointwise ("uniform") when it reads and
 * writes every operand at the same element, the row-major index of its
 * outer point, and uses the point nowhere else: it computes out[i] =
 * f(a[i], b[i], ...) for every i, so it computes the same thing on any one
 * permutation of all its operands' elements (the ReLU and residual-add
 * epilogues are such kernels). Its operands' buffers share a layout:
 * classes of buffers joined by uniform kernels are blocked or not as a
 * whole. A class is blocked when
 *   - a direct convolution reads or writes one of its buffers, and every
 *     convolution that does agrees on the shape [N, C, H, W] (C a multiple
 *     of 8) and holds it in nChw8c (oneDNN's choice for it), writing its
 *     output fresh (its own bias, or beta 0);
 *   - every buffer is an f32 temporary of N*C*H*W elements that no view
 *     aliases;
 *   - every other access is a kernel ("foreign": the max-pool that makes a
 *     block's input, the average-pool that reads the last one), and either
 *     foreign kernels are the buffer's only writers and no class member
 *     reads it before the last of them (they write an NCHW shadow,
 *     converted into the buffer after the last one runs; other foreign
 *     kernels read the shadow too), or only class members write the buffer
 *     (it is converted into the shadow before each foreign reader runs);
 *     no foreign kernel has two params at one address (the generated code
 *     would read the input through the output's pointer, not the shadow);
 *   - the program has only kernel and GEMM steps, and no GEMM that is not
 *     a direct convolution touches the class;
 *   - it saves more reorders than it needs conversions.
 * Shadows are the device's own memory, outside the arena. Conversions are
 * exact copies, so results are bit-identical to the NCHW ones. */

static bool uniform_kernel(const kir_kernel *kk) {
  if (kk->inner != 1 || kk->n_phases < 1 || kk->n_params < 1) return false;
  int32_t E = kk->phases[0].out_index;
  if (!kir_is_point_index(kk, E)) return false;
  int64_t pts = 1;
  for (int32_t d = 0; d < kk->outer_rank; d++) pts *= kk->outer_dims[d];
  for (int32_t i = 0; i < kk->n_params; i++)
    if (kk->params[i].numel != pts) return false;
  for (int32_t h = 0; h < kk->n_phases; h++)
    if (kk->phases[h].kind != KIR_PHASE_STORE || kk->phases[h].out_index != E) return false;
  /* E's operands are index arithmetic only: the values stored may use
   * them (or a loop variable) only through E, and E only as a load's
   * index. Operands precede their users, so one pass down from E marks
   * E's subtree, and one down from the stored values theirs. */
  uint8_t *mark = calloc((size_t)kk->n_exprs, 1); /* 1: in E's subtree, 2: a value's */
  if (!mark) return false;
  mark[E] = 1;
  for (int32_t h = 0; h < kk->n_phases; h++) mark[kk->phases[h].value] |= 2;
  bool ok = !(mark[E] & 2);
  for (int32_t e = kk->n_exprs - 1; e >= 0 && ok; e--) {
    const kir_expr *x = &kk->exprs[e];
    int32_t ops[3] = {x->a, x->b, x->c};
    if (mark[e] & 1)
      for (int j = 0; j < kir_op_arity(x->op); j++)
        if (ops[j] >= 0) mark[ops[j]] |= 1;
    if (!(mark[e] & 2)) continue;
    if (x->op == KIR_VAR || x->op == KIR_REG) ok = false;
    for (int j = 0; j < kir_op_arity(x->op) && ok; j++) {
      if (ops[j] < 0) continue;
      if (x->op == KIR_LOAD)
        ok = ops[j] == E;
      else
        mark[ops[j]] |= 2;
    }
  }
  /* an expression both in E's subtree and a value's is index arithmetic
   * used as a value */
  for (int32_t e = 0; e < kk->n_exprs && ok; e++) ok = mark[e] != 3;
  free(mark);
  return ok;
}

static int32_t find(int32_t *up, int32_t b) {
  while (up[b] != b) b = up[b] = up[up[b]];
  return b;
}

/* What a class holds, while it is planned. */
typedef struct layout_class {
  bool conv;      /* a direct convolution touches it */
  bool sized;     /* a convolution or pool gave dims */
  int32_t saved;  /* reorders the convolutions skip when it is blocked */
  int32_t cost;   /* conversions it then needs */
  bool bad;       /* it stays NCHW */
  int64_t block;  /* the convolutions' block of channels (8, 16), 0 before the first */
  int64_t dims[4];
} layout_class;

/* Joins block b into *into (0: none yet); false when they differ. */
static bool same_block(int64_t *into, int64_t b) {
  if (*into && b && *into != b) return false;
  if (b) *into = b;
  return true;
}

/* One access of a direct convolution or max-pool to buffer b: in class cl
 * with shape [n, c, h, w]; a convolution's in blocks of `block` channels
 * (0: another layout), saving a reorder when the class is blocked; a
 * pool's (block -1) in whichever block the class takes. */
static void class_access(layout_class *cl, const sc_program *p, int32_t b, int64_t block,
                         int64_t n, int64_t c, int64_t h, int64_t w) {
  int64_t d[4] = {n, c, h, w};
  if (block == 0 || p->buffers[b].kind != SC_BUF_TEMP) cl->bad = true;
  if (cl->sized && memcmp(cl->dims, d, sizeof d) != 0) cl->bad = true;
  cl->sized = true;
  memcpy(cl->dims, d, sizeof d);
  if (block > 0) {
    if (!same_block(&cl->block, block)) cl->bad = true;
    cl->conv = true, cl->saved++;
  }
}

static bool add_hook(sc_cpu_convs *cv, int32_t k, int32_t b, bool after) {
  for (int32_t i = 0; i < cv->n_hooks; i++)
    if (cv->hooks[i].kernel == k && cv->hooks[i].buffer == b && cv->hooks[i].after == after)
      return true;
  struct layout_hook *grown = realloc(cv->hooks, (size_t)(cv->n_hooks + 1) * sizeof *grown);
  if (!grown) return false;
  cv->hooks = grown;
  cv->hooks[cv->n_hooks++] = (struct layout_hook){k, b, after};
  cv->hooked[k] = true;
  return true;
}

/* Plans which buffers are blocked, their shadows and hooks,
 * and which convolutions then skip their reorders. false: out of memory. */
static bool layout_plan(sc_cpu_convs *cv, bool *skip) {
  const sc_program *p = cv->p;
  int32_t nb = p->n_buffers, nk = p->n_kernels;
  const char *env = getenv("SHARDC_CONV_LAYOUT"); /* "nchw": every buffer as it is (A/B) */
  if (env && strcmp(env, "nchw") == 0) return true;
  for (int32_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].kind != SC_STEP_KERNEL && p->steps[i].kind != SC_STEP_GEMM) return true;
  bool *blocked = calloc((size_t)nb, sizeof *blocked); /* held in nChw8c or nChw16c */
  cv->dims = calloc((size_t)nb, sizeof *cv->dims);
  cv->block = calloc((size_t)nb, sizeof *cv->block);
  cv->shadow = calloc((size_t)nb, sizeof *cv->shadow);
  cv->hooked = calloc((size_t)nk, sizeof *cv->hooked);
  cv->foreign = calloc((size_t)nk, sizeof *cv->foreign);
  int32_t *up = malloc((size_t)nb * sizeof *up);
  layout_class *cls = calloc((size_t)nb, sizeof *cls);
  bool *uni = calloc((size_t)nk, sizeof *uni);
  /* per buffer: class members' writes; the last foreign writer (kernel id)
   * and the first class member's access (step index); per kernel: its step */
  int32_t *mwrites = calloc((size_t)nb, sizeof *mwrites);
  int32_t *fwriter = malloc((size_t)nb * sizeof *fwriter);
  int32_t *first = malloc((size_t)nb * sizeof *first);
  int32_t *kstep = malloc((size_t)(nk > 0 ? nk : 1) * sizeof *kstep);
  int32_t *lay = malloc((size_t)nb * sizeof *lay);
  layout_class *dec = calloc((size_t)nb, sizeof *dec);
  bool ok = blocked && cv->dims && cv->block && cv->shadow && cv->hooked && cv->foreign && up &&
            cls && uni && mwrites && fwriter && first && kstep && lay && dec;
  if (!ok) goto done;
  for (int32_t b = 0; b < nb; b++) up[b] = b, fwriter[b] = -1, first[b] = INT32_MAX;
  for (int32_t k = 0; k < nk; k++) kstep[k] = -1;
  for (int32_t i = p->n_steps - 1; i >= 0; i--)
    if (p->steps[i].kernel >= 0 && p->steps[i].kernel < nk) kstep[p->steps[i].kernel] = i;
  /* views: their roots (and they) stay as they are */
  for (int32_t b = 0; b < nb; b++)
    if (p->buffers[b].kind == SC_BUF_VIEW) {
      int32_t r = sc_program_root(p, b);
      cls[b].bad = true;
      if (r >= 0) cls[r].bad = true;
    }
  for (int32_t k = 0; k < nk; k++) {
    if (skip[k] || !(uni[k] = uniform_kernel(p->kernels[k]))) continue;
    const kir_kernel *kk = p->kernels[k];
    for (int32_t i = 1; i < kk->n_params; i++) {
      int32_t a = find(up, kk->params[0].buffer), b = find(up, kk->params[i].buffer);
      if (a != b) up[a] = b;
    }
  }
  for (int32_t b = 0; b < nb; b++)
    if (cls[b].bad) cls[find(up, b)].bad = true;
  /* a max-pool takes part when a direct convolution writes its input's
   * class (ResNet's stem): else (a max-pool of the model's input) its
   * kernels run as written, and its output may still be blocked with a
   * conversion after them */
  for (int32_t i = 0; i < cv->n; i++) mwrites[find(up, cv->v[i].g->c)]++;
  for (int32_t i = 0; i < cv->n_pools; i++) {
    pool *o = &cv->pools[i];
    o->takes_part = mwrites[find(up, o->v->x)] > 0;
    if (!o->takes_part) pool_skip(o, skip, false);
  }
  memset(mwrites, 0, (size_t)nb * sizeof *mwrites);
  /* every step in order: the direct convolutions' accesses, GEMMs that
   * are not one (their buffers stay NCHW), kernels (uniform: members;
   * else foreign) */
  for (int32_t i = 0; i < p->n_steps; i++) {
    const sc_step *s = &p->steps[i];
    const conv *c = s->kind == SC_STEP_GEMM ? conv_of(cv, s) : NULL;
    const pool *o = pool_of(cv, s);
    if (o && !o->takes_part) o = NULL;
    if (c) {
      const sc_gemm *g = c->g;
      const sc_conv_geom *v = &g->conv;
      class_access(&cls[find(up, v->x)], p, v->x, block_of(&c->src_md, v->c, v->h, v->w),
                   g->batch, v->c, v->h, v->w);
      class_access(&cls[find(up, g->c)], p, g->c,
                   c->bias || g->beta == 0.0f ? block_of(&c->dst_md, c->tm, v->oh, v->ow) : 0,
                   g->batch, g->m, v->oh, v->ow);
      mwrites[g->c]++;
      if (first[v->x] > i) first[v->x] = i;
      if (first[g->c] > i) first[g->c] = i;
    } else if (o) {
      const sc_pool_geom *v = o->v;
      class_access(&cls[find(up, v->x)], p, v->x, -1, v->n, v->c, v->h, v->w);
      class_access(&cls[find(up, v->y)], p, v->y, -1, v->n, v->c, v->oh, v->ow);
      mwrites[v->y]++;
      if (first[v->x] > i) first[v->x] = i;
      if (first[v->y] > i) first[v->y] = i;
    } else if (s->kind == SC_STEP_GEMM) {
      const sc_gemm *g = &s->gemm;
      int32_t bs[4] = {g->a, g->b, g->c, g->bias};
      for (int j = 0; j < 4; j++)
        if (bs[j] >= 0) cls[find(up, bs[j])].bad = true;
    }
    int32_t k = s->kernel;
    if (k < 0 || k >= nk || skip[k]) continue;
    const kir_kernel *kk = p->kernels[k];
    for (int32_t j = 0; j < kk->n_params; j++) {
      int32_t b = kk->params[j].buffer;
      if (uni[k]) {
        if (kk->params[j].written) mwrites[b]++;
        if (first[b] > i) first[b] = i;
      } else if (kk->params[j].written) {
        fwriter[b] = k;
      }
    }
  }
  for (int32_t b = 0; b < nb; b++) {
    layout_class *cl = &cls[find(up, b)];
    if (p->buffers[b].kind != SC_BUF_TEMP || p->buffers[b].dtype != SC_DTYPE_F32) cl->bad = true;
    /* foreign writers: no member writes it, and members read it only after
     * the last of them (a max-pool's two kernels, interior and edges) */
    if (fwriter[b] >= 0 && (mwrites[b] > 0 || first[b] <= kstep[fwriter[b]])) cl->bad = true;
    if (cl->sized && !cl->bad &&
        p->buffers[b].bytes != 4 * cl->dims[0] * cl->dims[1] * cl->dims[2] * cl->dims[3])
      cl->bad = true;
  }
  /* a foreign kernel with two params at one address (a buffer read and
   * written, or an input whose memory the memory plan gives to the output:
   * the generated code then reads it through the output's pointer, which a
   * shadow would not redirect) leaves their classes alone */
  for (int32_t k = 0; k < nk; k++) {
    if (skip[k] || uni[k]) continue;
    const kir_kernel *kk = p->kernels[k];
    for (int32_t i = 0; i < kk->n_params; i++)
      for (int32_t j = 0; j < kk->n_params; j++)
        if (i != j && sc_program_same_address(p, kk->params[i].buffer, kk->params[j].buffer)) {
          cls[find(up, kk->params[i].buffer)].bad = true;
          cls[find(up, kk->params[j].buffer)].bad = true;
        }
  }
  /* what blocking costs: a conversion per foreign write, and per foreign
   * read of a buffer class members write; worth it only when it saves more
   * reorders than that (a convolution's output that only a max-pool reads
   * would just trade oneDNN's reorder for a conversion) */
  for (int32_t k = 0; k < nk; k++) {
    if (skip[k] || uni[k]) continue;
    const kir_kernel *kk = p->kernels[k];
    for (int32_t i = 0; i < kk->n_params; i++) {
      int32_t b = kk->params[i].buffer;
      if (kk->params[i].written ? fwriter[b] == k : fwriter[b] < 0) cls[find(up, b)].cost++;
    }
  }
  /* a max-pool reads and writes one layout: the classes of its input and
   * output are decided together (dec: their sums, at the root of lay), in
   * a block it has a primitive for */
  for (int32_t b = 0; b < nb; b++) lay[b] = b;
  for (int32_t i = 0; i < cv->n_pools; i++) {
    if (!cv->pools[i].takes_part) continue;
    const sc_pool_geom *v = cv->pools[i].v;
    int32_t a = find(lay, find(up, v->x)), b = find(lay, find(up, v->y));
    if (a != b) lay[a] = b;
  }
  for (int32_t b = 0; b < nb; b++) {
    if (find(up, b) != b) continue;
    layout_class *d = &dec[find(lay, b)];
    d->conv |= cls[b].conv, d->bad |= cls[b].bad;
    d->saved += cls[b].saved, d->cost += cls[b].cost;
    if (!same_block(&d->block, cls[b].block)) d->bad = true;
  }
  for (int32_t i = 0; i < cv->n_pools; i++) {
    pool *o = &cv->pools[i];
    if (!o->takes_part) continue;
    layout_class *d = &dec[find(lay, find(up, o->v->x))];
    for (o->bi = 0; o->bi < N_BLOCKS && BLOCKS[o->bi] != d->block; o->bi++) {}
    if (o->bi == N_BLOCKS || !o->prim[o->bi]) d->bad = true;
  }
  for (int32_t b = 0; b < nb; b++) {
    layout_class *cl = &cls[find(up, b)], *d = &dec[find(lay, find(up, b))];
    if (!d->conv || d->bad || d->saved <= d->cost || !cl->sized) continue;
    blocked[b] = true;
    cv->block[b] = d->block;
    memcpy(cv->dims[b], cl->dims, sizeof cl->dims);
  }
  /* shadows and hooks */
  for (int32_t k = 0; k < nk && ok; k++) {
    if (skip[k] || uni[k]) continue;
    const kir_kernel *kk = p->kernels[k];
    for (int32_t i = 0; i < kk->n_params && ok; i++) {
      int32_t b = kk->params[i].buffer;
      if (!blocked[b]) continue;
      cv->foreign[k] = true;
      if (!cv->shadow[b] &&
          posix_memalign((void **)&cv->shadow[b], 64, (size_t)p->buffers[b].bytes)) {
        cv->shadow[b] = NULL;
        ok = false;
        break;
      }
      /* written: converted after the last foreign writer; read, with class
       * writers: converted before it (a foreign writer's shadow is read
       * as it is) */
      if (kk->params[i].written) {
        if (fwriter[b] == k) ok = add_hook(cv, k, b, true);
      }
      else if (fwriter[b] < 0)
        ok = add_hook(cv, k, b, false);
    }
  }
  for (int32_t i = 0; i < cv->n_pools; i++) {
    pool *o = &cv->pools[i];
    if (!o->takes_part) continue;
    /* decided together, both sized: both or neither */
    SC_ASSERT(blocked[o->v->x] == blocked[o->v->y]);
    o->on = blocked[o->v->x];
    for (int j = 0; j < N_BLOCKS; j++) /* the other blocks' primitives are not used */
      if (j != o->bi && o->prim[j]) dnnl_primitive_destroy(o->prim[j]), o->prim[j] = NULL;
  }
  for (int32_t i = 0; i < cv->n; i++) {
    conv *c = &cv->v[i];
    c->x_blocked = blocked[c->g->conv.x];
    c->y_blocked = blocked[c->g->c];
    static const char *const held[4] = {"", ", output", ", input", ", input and output"};
    int64_t blk = cv->block[c->x_blocked ? c->g->conv.x : c->g->c];
    size_t len = strlen(c->note);
    if (c->x_blocked || c->y_blocked)
      snprintf(c->note + len, sizeof c->note - len, "%s nChw%lldc",
               held[2 * c->x_blocked + c->y_blocked], (long long)blk);
  }
done:
  free(blocked);
  free(up);
  free(cls);
  free(uni);
  free(mwrites);
  free(fwriter);
  free(first);
  free(kstep);
  free(lay);
  free(dec);
  return ok;
}

/* ---- epilogues on each tile ----
 *
 * A convolution step's epilogue kernel (ReLU, residual add + ReLU) read
 * the whole output back from memory after the last tile. When it is
 * pointwise (uniform_kernel: it computes element i of every operand from
 * element i of the others, in any layout), each tile runs it on the
 * elements it has just written, while they are in the caches; the kernel's
 * own code on the same elements, so the results are the same bits. That
 * needs its written buffers to be either the convolution's output itself
 * or apart from it (another tile's elements are not yet computed:
 * sc_program_pointwise_after), and apart from the convolution's input
 * (other tiles still read it). */
static void epilogue_plan(sc_cpu_convs *cv, const bool *skip) {
  const sc_program *p = cv->p;
  const char *env = getenv("SHARDC_EPILOGUE_TILES"); /* "0": after the last tile (A/B) */
  if (env && strcmp(env, "0") == 0) return;
  for (int32_t i = 0; i < cv->n; i++) {
    conv *c = &cv->v[i];
    const sc_gemm *g = c->g;
    int32_t k = c->kernel;
    c->epi_tiles = false;
    if (k < 0 || k >= p->n_kernels || skip[k] || (cv->hooked && cv->hooked[k]) ||
        (cv->foreign && cv->foreign[k]) || !uniform_kernel(p->kernels[k]))
      continue;
    const kir_kernel *kk = p->kernels[k];
    bool ok = sc_program_pointwise_after(p, k, g->c);
    for (int32_t j = 0; j < kk->n_params && ok; j++)
      ok = !kk->params[j].written || sc_program_disjoint(p, kk->params[j].buffer, g->conv.x);
    c->epi_tiles = ok;
    size_t len = strlen(c->note);
    if (ok) snprintf(c->note + len, sizeof c->note - len, ", epilogue per tile");
  }
}

/* ---- conversions between NCHW and nChw8c or nChw16c ---- */

typedef struct convert_job {
  const float *from;
  float *to;
  int64_t blk, hw; /* channels per block, pixels per channel */
  bool to_blocked;
  bool avx;       /* the 8 x 8 transposes (this CPU has AVX) */
} convert_job;

#if defined(__x86_64__)
#include <immintrin.h>
/* r[i] <- column i of the 8 x 8 block r */
__attribute__((target("avx"))) static void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* The first (hw / 8) * 8 pixels of 8 channels: NCHW rows f (to_blocked)
 * or t, the blocked pixels (every blk floats) the other. */
__attribute__((target("avx"))) static int64_t convert_avx(const float *f, float *t, int64_t hw,
                                                          int64_t blk, bool to_blocked) {
  int64_t q = 0;
  for (__m256 r[8]; q + 8 <= hw; q += 8) {
    for (int i = 0; i < 8; i++)
      r[i] = _mm256_loadu_ps(to_blocked ? f + i * hw + q : f + (q + i) * blk);
    transpose8(r);
    for (int i = 0; i < 8; i++)
      _mm256_storeu_ps(to_blocked ? t + (q + i) * blk : t + i * hw + q, r[i]);
  }
  return q;
}
#endif

/* units [begin, end) of (image, channel block) */
static void convert_units(void *ud, int64_t begin, int64_t end) {
  const convert_job *j = ud;
  int64_t B = j->blk, hw = j->hw;
  for (int64_t u = begin; u < end; u++) {
    const float *f = j->from + u * B * hw;
    float *t = j->to + u * B * hw;
    for (int64_t c0 = 0; c0 < B; c0 += 8) { /* 8 channels at a time */
      const float *f8 = j->to_blocked ? f + c0 * hw : f + c0;
      float *t8 = j->to_blocked ? t + c0 : t + c0 * hw;
      int64_t q0 = 0;
#if defined(__x86_64__)
      if (j->avx) q0 = convert_avx(f8, t8, hw, B, j->to_blocked);
#endif
      if (j->to_blocked)
        for (int64_t q = q0; q < hw; q++)
          for (int c = 0; c < 8; c++) t8[q * B + c] = f8[c * hw + q];
      else
        for (int c = 0; c < 8; c++)
          for (int64_t q = q0; q < hw; q++) t8[c * hw + q] = f8[q * B + c];
    }
  }
}

static void convert(const sc_cpu_convs *cv, int32_t b, void *const *ptrs, bool to_blocked,
                    sc_thread_pool *tp) {
  const int64_t *d = cv->dims[b];
  convert_job j = {.from = to_blocked ? cv->shadow[b] : ptrs[b],
                   .to = to_blocked ? ptrs[b] : cv->shadow[b],
                   .blk = cv->block[b], .hw = d[2] * d[3], .to_blocked = to_blocked};
#if defined(__x86_64__)
  j.avx = __builtin_cpu_supports("avx");
#endif
  int64_t units = d[0] * d[1] / j.blk;
  if (tp && units > 1 && sc_thread_pool_threads(tp) > 1)
    sc_thread_pool_run(tp, convert_units, &j, units, units);
  else
    convert_units(&j, 0, units);
}

void sc_cpu_convs_kernel_hooks(const sc_cpu_convs *cv, int32_t k, bool after, void *const *ptrs,
                               sc_thread_pool *tp) {
  if (!cv || !cv->hooked || !cv->hooked[k]) return;
  for (int32_t i = 0; i < cv->n_hooks; i++)
    if (cv->hooks[i].kernel == k && cv->hooks[i].after == after)
      convert(cv, cv->hooks[i].buffer, ptrs, after, tp);
}

void *sc_cpu_convs_param_ptr(const sc_cpu_convs *cv, int32_t k, int32_t i) {
  if (!cv || !cv->foreign || k < 0 || k >= cv->p->n_kernels || !cv->foreign[k]) return NULL;
  const kir_kernel *kk = cv->p->kernels[k];
  if (i < 0 || i >= kk->n_params) return NULL;
  return cv->shadow[kk->params[i].buffer];
}

bool sc_cpu_convs_run(sc_cpu_convs *cv, const sc_step *s, sc_thread_pool *tp,
                      sc_cpu_kernel_fn epi, void *const *epi_args, bool *epi_ran) {
  conv *c = conv_of(cv, s);
  *epi_ran = false;
  if (!c) return false;
  conv_job job = {c, NULL, NULL, &cv->fail};
  if (has_failed(&cv->fail)) return true; /* the run's results are lost */
  if (c->src_bytes && !c->x_blocked) on_pool(tp, src_parts, &job, c->N * c->P);
  if (c->epi_tiles && epi && s->kernel == c->kernel) {
    job.epi = epi, job.epi_args = epi_args;
    *epi_ran = true;
  }
  on_pool(tp, conv_tiles, &job, c->N / c->G * c->T);
  return true;
}

typedef struct pool_job {
  const pool *o;
  run_failure *fail;
} pool_job;

static void pool_parts_run(void *ud, int64_t begin, int64_t end) {
  const pool_job *job = ud;
  const pool *o = job->o;
  sc_cpu_engine_one_thread();
  const dnnl_memory_desc_t *pad = &o->pad[o->bi];
  for (int64_t u = begin; u < end && !has_failed(job->fail); u++) {
    uint64_t scratch;
    dnnl_status_t st = exec2(o->prim[o->bi], pad, dnnl_memory_desc_get_size(pad), DNNL_ARG_SRC,
                             o->x_mem[u], DNNL_ARG_DST, o->y_mem[u], &scratch);
    if (st != dnnl_success)
      record_failure(job->fail, st, scratch, "the direct max-pool of %lld channels at %lld x %lld",
                     (long long)o->v->c, (long long)o->v->h, (long long)o->v->w);
  }
}

bool sc_cpu_convs_pool(sc_cpu_convs *cv, const sc_step *s, sc_thread_pool *tp) {
  const pool *o = pool_of(cv, s);
  if (!o || !o->on) return false;
  pool_job job = {o, &cv->fail};
  if (!has_failed(&cv->fail)) on_pool(tp, pool_parts_run, &job, o->v->n * o->parts);
  return true;
}

static int64_t scratch_alloc_bytes(const sc_cpu_convs *cv) {
  return cv->scratch_bytes ? (int64_t)cv->scratch_bytes : 64; /* never 0 (prepare) */
}

void sc_cpu_convs_plan_memory(const sc_cpu_convs *cv, int threads, sc_device_memory *m) {
  int64_t w = 0, shadows = 0;
  for (int32_t i = 0; cv && i < cv->n; i++) w += cv->v[i].T * (int64_t)cv->v[i].w_bytes;
  for (int32_t b = 0; cv && cv->shadow && b < cv->p->n_buffers; b++)
    if (cv->shadow[b]) shadows += cv->p->buffers[b].bytes;
  m->bytes[SC_MEM_CONV_WEIGHTS] = w;
  m->bytes[SC_MEM_CONV_SCRATCH] = cv ? scratch_alloc_bytes(cv) : 0;
  m->bytes[SC_MEM_CONV_SHADOWS] = shadows;
  m->bytes[SC_MEM_CONV_THREADS] = cv ? (int64_t)(threads > 0 ? threads : 1) *
                                           (int64_t)cv->thread_pad : 0;
}

void sc_cpu_convs_memory(const sc_cpu_convs *cv, sc_device_memory *m) {
  int64_t w = 0, shadows = 0;
  for (int32_t i = 0; cv && i < cv->n; i++)
    if (cv->v[i].w_blk) w += cv->v[i].T * (int64_t)cv->v[i].w_bytes;
  for (int32_t b = 0; cv && cv->shadow && b < cv->p->n_buffers; b++)
    if (cv->shadow[b]) shadows += cv->p->buffers[b].bytes;
  m->bytes[SC_MEM_CONV_WEIGHTS] = w;
  m->bytes[SC_MEM_CONV_SCRATCH] = cv && cv->scratch ? scratch_alloc_bytes(cv) : 0;
  m->bytes[SC_MEM_CONV_SHADOWS] = shadows;
  m->bytes[SC_MEM_CONV_THREADS] =
      cv ? (int64_t)atomic_load(&((sc_cpu_convs *)cv)->reserved) * (int64_t)cv->thread_pad : 0;
}

bool sc_cpu_convs_thread_reserve(sc_cpu_convs *cv) {
  if (!cv || !cv->thread_pad) return true;
  sc_cpu_engine_one_thread();
  thread_state *t = this_thread(cv->thread_pad);
  if (!t) return false;
  /* touched now: the pages are the plan's from bind on, not faulted in
   * by whichever run first needs them (a primitive may use a fraction) */
  memset(t->scratch, 0, cv->thread_pad);
  atomic_fetch_add(&cv->reserved, 1);
  return true;
}

sc_status sc_cpu_plan_convs(const sc_program *p, int threads, sc_device_memory *m,
                            sc_diag *diag) {
  bool *skip = sc_calloc((size_t)(p->n_kernels > 0 ? p->n_kernels : 1), sizeof *skip);
  if (!skip) return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL, "out of memory");
  sc_cpu_convs *cv = NULL;
  sc_status st = sc_cpu_convs_prepare(p, skip, &cv, diag);
  if (st == SC_OK) sc_cpu_convs_plan_memory(cv, threads, m);
  sc_cpu_convs_destroy(cv);
  sc_free(skip);
  return st;
}

void sc_runtime_target_host(sc_device_target *t) {
  sc_device_target_host(t);
  t->conv_memory = sc_cpu_plan_convs;
}

bool sc_cpu_convs_failed(sc_cpu_convs *cv) { return cv && has_failed(&cv->fail); }

sc_status sc_cpu_convs_end_run(sc_cpu_convs *cv, sc_diag *diag) {
  if (!sc_cpu_convs_failed(cv)) return SC_OK;
  run_failure f = {.status = cv->fail.status, .bytes = cv->fail.bytes};
  memcpy(f.what, cv->fail.what, sizeof f.what);
  atomic_store(&cv->fail.failed, false);
  if (f.bytes)
    return sc_diag_nomem(diag, f.bytes, "a thread's oneDNN scratchpad and 1 MiB of headroom for %s",
                         f.what);
  if (f.status == dnnl_out_of_memory)
    return sc_diag_set(diag, SC_ERR_NOMEM, NULL, NULL,
                       "out of memory: oneDNN could not allocate what it needed for %s", f.what);
  return sc_diag_set(diag, SC_ERR_UNSUPPORTED, NULL, NULL, "oneDNN failed (status %d) in %s",
                     (int)f.status, f.what);
}

void sc_cpu_convs_destroy(sc_cpu_convs *cv) {
  if (!cv) return;
  for (int32_t i = 0; cv->v && i < cv->n; i++) conv_free(&cv->v[i]);
  sc_free(cv->v);
  sc_free(cv->of_kernel);
  for (int32_t i = 0; cv->pools && i < cv->n_pools; i++) pool_free(&cv->pools[i]);
  sc_free(cv->pools);
  sc_free(cv->pool_of_kernel);
  free(cv->scratch);
  for (int32_t b = 0; cv->shadow && b < cv->p->n_buffers; b++) free(cv->shadow[b]);
  free(cv->shadow);
  free(cv->dims);
  free(cv->block);
  free(cv->hooks);
  free(cv->hooked);
  free(cv->foreign);
  sc_free(cv);
}
