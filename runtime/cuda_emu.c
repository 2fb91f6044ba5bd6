/* cuda_emu.c — the emulated GPU (cuda_emu.h): the host-compiled CUDA unit,
 * its launches, and the fibers of a block. */
#define _GNU_SOURCE
#include "runtime/cuda_emu.h"

#include "codegen/program_json.h" /* sc_sha256_hex */
#include "runtime/cuda_driver.h"    /* SC_CU_SHARED_OPTIN_BYTES */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

extern char **environ;

/* Switching fibers. glibc's swapcontext makes a sigprocmask system call per
 * switch, which was 70% of an emulated GPT-2 step (perf); on x86-64 the
 * switch is these few instructions instead: push the callee-saved
 * registers, swap stack pointers, pop them, return into the other fiber.
 * (The signal mask and the FPU control words are the same in every fiber:
 * nothing here changes them.) Elsewhere, ucontext. */
#if defined(__x86_64__) && !defined(SC_EMU_UCONTEXT)
#define SC_EMU_ASM_SWITCH 1
void sc_emu_switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".p2align 4\n"
        ".type sc_emu_switch, @function\n"
        "sc_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size sc_emu_switch, .-sc_emu_switch\n");
#endif

#if defined(__SANITIZE_ADDRESS__)
#define SC_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SC_EMU_ASAN 1
#endif
#endif
#ifdef SC_EMU_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old,
                                     size_t *size_old);
#endif

/* ThreadSanitizer keeps a shadow stack of the functions entered, per
 * thread; a fiber that ends never returns from fiber_main and to_scheduler,
 * so their entries would pile up launch after launch. Neither is
 * instrumented (they touch only the thread's own L and its fiber); the
 * fibers of a block are one thread's to TSan, so nothing else needs it. */
#if defined(__SANITIZE_THREAD__)
#define SC_EMU_NO_TSAN __attribute__((no_sanitize("thread")))
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SC_EMU_NO_TSAN __attribute__((no_sanitize("thread")))
#endif
#endif
#ifndef SC_EMU_NO_TSAN
#define SC_EMU_NO_TSAN
#endif

/* The unit's view of the emulator (codegen/cuda/cuda_emit.c, emu_prelude):
 * the layouts must match. */
typedef struct emu_dim3 {
  unsigned x, y, z;
} emu_dim3;
typedef struct emu_thread {
  emu_dim3 tid, bid, bdim, gdim;
  unsigned char *xchg, *dyn;
} emu_thread;
typedef struct emu_api {
  const emu_thread *(*current)(void);
  void (*barrier)(void);
  void (*warp_sync)(void);
} emu_api;

enum { STACK_BYTES = 64 * 1024, MAX_BLOCK = 1024, MAX_DYN_SHARED = SC_CU_SHARED_OPTIN_BYTES };

enum { RUNNABLE, AT_BARRIER, AT_WARP_SYNC, DONE };

typedef struct fiber {
#ifdef SC_EMU_ASM_SWITCH
  void *sp;                /* its saved stack pointer while switched out */
#else
  ucontext_t ctx;
#endif
  emu_thread th;
  char *stack;
  int state;
  void *fake;              /* ASan: its fake stack while switched out */
} fiber;

struct sc_cuda_emu {
  void *so;
  double compile_s;
  fiber *f;                /* [MAX_BLOCK], stacks made on first use */
  unsigned char *xchg;     /* [MAX_BLOCK][16] the shuffles' exchange area */
  unsigned char *dyn;      /* the block's dynamic shared memory */
  size_t dyn_bytes;
};

/* The calling thread's launch: the running fiber (or plain thread), the
 * scheduler's context, the kernel and its arguments. */
static __thread struct {
  emu_thread *cur;
  bool fibers;             /* in a block-per-point launch */
  bool bad_barrier;        /* a barrier outside one */
#ifdef SC_EMU_ASM_SWITCH
  void *sched_sp;
#else
  ucontext_t sched;
#endif
  fiber *running;
  void (*fn)(void **);
  void **args;
#ifdef SC_EMU_ASAN
  void *sched_fake;        /* the scheduler's fake stack while a fiber runs */
  const void *sched_bottom;
  size_t sched_size;
#endif
} L;

static const emu_thread *emu_current(void) { return L.cur; }

/* Back to the scheduler (a barrier, or the thread's end). */
SC_EMU_NO_TSAN static void to_scheduler(fiber *f) {
#ifdef SC_EMU_ASAN
  __sanitizer_start_switch_fiber(f->state == DONE ? NULL : &f->fake, L.sched_bottom,
                                 L.sched_size);
#endif
#ifdef SC_EMU_ASM_SWITCH
  sc_emu_switch(&f->sp, L.sched_sp);
#else
  swapcontext(&f->ctx, &L.sched);
#endif
#ifdef SC_EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake, NULL, NULL);
#endif
}

static void wait_at(int state) {
  if (!L.fibers) {
    L.bad_barrier = true; /* reported by the launch */
    return;
  }
  L.running->state = state;
  to_scheduler(L.running);
}
static void emu_barrier(void) { wait_at(AT_BARRIER); }
static void emu_warp_sync(void) { wait_at(AT_WARP_SYNC); }

static const emu_api API = {emu_current, emu_barrier, emu_warp_sync};

SC_EMU_NO_TSAN static void fiber_main(void) {
  fiber *f = L.running;
#ifdef SC_EMU_ASAN
  __sanitizer_finish_switch_fiber(NULL, &L.sched_bottom, &L.sched_size);
#endif
  L.fn(L.args);
  f->state = DONE;
  to_scheduler(f); /* never resumed */
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static sc_status nomem(sc_diag *d) {
  return sc_diag_set(d, SC_ERR_NOMEM, NULL, NULL, "cuda emulation: out of memory");
}

/* Writes n bytes to path (created, private). */
static bool write_file(const char *path, const char *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, data + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    done += (size_t)w;
  }
  return close(fd) == 0 && done == n;
}

/* The first lines of the compiler's messages (at most room bytes). */
static void read_head(const char *path, char *buf, size_t room) {
  buf[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  size_t n = fread(buf, 1, room - 1, f);
  buf[n] = 0;
  fclose(f);
}

/* Runs argv (no shell) with stdout and stderr into log; its exit status,
 * or -1 when it could not start. */
static int run_compiler(char *const *argv, const char *log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Compiles the unit and loads it: *so, and the compiler's seconds. */
static sc_status compile_unit(const char *cuda_src, void **so_out, double *secs_out,
                              sc_diag *d) {
  *so_out = NULL;
  const char *tmp = getenv("TMPDIR");
  char dir[4096], src[4200], so[4200], log[4200];
  snprintf(dir, sizeof dir, "%s/shardc-emu-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir))
    return sc_diag_set(d, SC_ERR_IO, NULL, NULL, "cuda emulation: %s: cannot create: %s", dir,
                       strerror(errno));
  snprintf(src, sizeof src, "%s/kernels.cu", dir);
  snprintf(so, sizeof so, "%s/kernels.so", dir);
  snprintf(log, sizeof log, "%s/compiler.log", dir);
  sc_status st = SC_OK;
  if (!write_file(src, cuda_src, strlen(cuda_src)))
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "cuda emulation: %s: cannot write", src);
  const char *cxx = getenv("CXX");
  char *argv[] = {(char *)(cxx && *cxx ? cxx : "c++"), "-std=c++17", "-O1", "-fPIC", "-shared",
                  "-DSC_CUDA_EMU", "-w", "-x", "c++", src, "-o", so, NULL};
  double t0 = now_s();
  int rc = st == SC_OK ? run_compiler(argv, log) : 0;
  *secs_out = now_s() - t0;
  if (st == SC_OK && rc != 0) {
    char head[600];
    read_head(log, head, sizeof head);
    st = sc_diag_set(d, SC_ERR_UNSUPPORTED, NULL, NULL,
                     "cuda emulation: %s %s: %s", argv[0],
                     rc < 0 ? "could not be run (set CXX to a C++ compiler)" : "failed on the "
                                                                               "kernels",
                     head);
  }
  void *h = st == SC_OK ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (st == SC_OK && !h)
    st = sc_diag_set(d, SC_ERR_IO, NULL, NULL, "cuda emulation: dlopen: %s", dlerror());
  unlink(src); /* the object stays mapped */
  unlink(so);
  unlink(log);
  rmdir(dir);
  if (st == SC_OK && !dlsym(h, "sc_emu_bind"))
    st = sc_diag_set(d, SC_ERR_INVALID, NULL, NULL,
                     "cuda emulation: the unit has no sc_emu_bind (not shardc's CUDA C)");
  if (st != SC_OK && h) dlclose(h);
  if (st == SC_OK) *so_out = h;
  return st;
}

/* Units compiled in this process, by the SHA-256 of their source: ranks
 * (threads) running the same stage program compile it once. An entry whose
 * `so` is NULL is being compiled by another thread. */
typedef struct unit {
  char hash[65];
  void *so;
  double compile_s;
  int refs;
  struct unit *next;
} unit;
static pthread_mutex_t units_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t units_cv = PTHREAD_COND_INITIALIZER;
static unit *units;

static sc_status open_unit(const char *cuda_src, void **so, double *secs, sc_diag *d) {
  char hash[65];
  sc_sha256_hex(cuda_src, strlen(cuda_src), hash);
  pthread_mutex_lock(&units_mu);
  for (;;) {
    unit *u = units;
    while (u && strcmp(u->hash, hash) != 0) u = u->next;
    if (u && u->so) { /* compiled already */
      u->refs++;
      *so = u->so;
      *secs = 0;
      pthread_mutex_unlock(&units_mu);
      return SC_OK;
    }
    if (!u) break;
    pthread_cond_wait(&units_cv, &units_mu); /* another thread compiles it */
  }
  unit *u = sc_calloc(1, sizeof *u);
  if (!u) {
    pthread_mutex_unlock(&units_mu);
    return nomem(d);
  }
  memcpy(u->hash, hash, sizeof hash);
  u->next = units;
  units = u;
  pthread_mutex_unlock(&units_mu);
  sc_status st = compile_unit(cuda_src, so, secs, d);
  pthread_mutex_lock(&units_mu);
  if (st == SC_OK) {
    u->so = *so;
    u->refs = 1;
  } else { /* let a later open try again */
    unit **pp = &units;
    while (*pp != u) pp = &(*pp)->next;
    *pp = u->next;
    sc_free(u);
  }
  pthread_cond_broadcast(&units_cv);
  pthread_mutex_unlock(&units_mu);
  return st;
}

static void close_unit(void *so) {
  pthread_mutex_lock(&units_mu);
  for (unit **pp = &units; *pp; pp = &(*pp)->next) {
    unit *u = *pp;
    if (u->so != so) continue;
    if (--u->refs == 0) {
      *pp = u->next;
      dlclose(u->so);
      sc_free(u);
    }
    break;
  }
  pthread_mutex_unlock(&units_mu);
}

sc_status sc_cuda_emu_open(const char *cuda_src, sc_cuda_emu **out, sc_diag *d) {
  *out = NULL;
  void *h = NULL;
  double secs = 0;
  sc_status st = open_unit(cuda_src, &h, &secs, d);
  if (st != SC_OK) return st;
  sc_cuda_emu *e = sc_calloc(1, sizeof *e);
  if (!e || !(e->f = sc_calloc(MAX_BLOCK, sizeof *e->f)) || !(e->xchg = sc_calloc(MAX_BLOCK, 16))) {
    if (e) {
      sc_free(e->f);
      sc_free(e->xchg);
      sc_free(e);
    }
    close_unit(h);
    return nomem(d);
  }
  void (*bind)(const emu_api *) = (void (*)(const emu_api *))dlsym(h, "sc_emu_bind");
  bind(&API);
  e->so = h;
  e->compile_s = secs;
  *out = e;
  return SC_OK;
}

double sc_cuda_emu_compile_seconds(const sc_cuda_emu *e) { return e ? e->compile_s : 0; }

/* One block of n threads as fibers (cuda_emu.h): each runnable thread is
 * resumed until it waits or ends; a warp whose live lanes all wait at a
 * warp sync goes on, and the block when all its live threads wait at its
 * barrier. Nothing runnable and nothing released is a deadlock. */
static sc_status run_block_fibers(sc_cuda_emu *e, int n, const char *name, sc_diag *d) {
  for (int t = 0; t < n; t++) {
    fiber *f = &e->f[t];
    if (!f->stack && !(f->stack = sc_malloc(STACK_BYTES))) return nomem(d);
    f->state = RUNNABLE;
    f->fake = NULL;
#ifdef SC_EMU_ASM_SWITCH
    /* the first switch pops six zero registers and returns into
     * fiber_main, with the stack as after a call (rsp + 8 16-aligned) */
    uintptr_t top = ((uintptr_t)f->stack + STACK_BYTES) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;                    /* fiber_main's return address: never used */
    *--sp = (void *)(uintptr_t)fiber_main;
    for (int r = 0; r < 6; r++) *--sp = NULL;
    f->sp = sp;
#else
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc_link = &L.sched;
    makecontext(&f->ctx, fiber_main, 0);
#endif
  }
  for (int live = n; live > 0;) {
    bool moved = false;
    for (int t = 0; t < n; t++) {
      fiber *f = &e->f[t];
      if (f->state != RUNNABLE) continue;
      L.running = f;
      L.cur = &f->th;
#ifdef SC_EMU_ASAN
      __sanitizer_start_switch_fiber(&L.sched_fake, f->stack, STACK_BYTES);
#endif
#ifdef SC_EMU_ASM_SWITCH
      sc_emu_switch(&L.sched_sp, f->sp);
#else
      swapcontext(&L.sched, &f->ctx);
#endif
#ifdef SC_EMU_ASAN
      __sanitizer_finish_switch_fiber(L.sched_fake, NULL, NULL);
#endif
      live -= f->state == DONE;
      moved = true;
    }
    for (int w = 0; w < n; w += 32) { /* warps whose live lanes all sync */
      int end = w + 32 < n ? w + 32 : n, syncing = 0, lanes = 0;
      for (int t = w; t < end; t++) {
        lanes += e->f[t].state != DONE;
        syncing += e->f[t].state == AT_WARP_SYNC;
      }
      if (syncing && syncing == lanes) {
        for (int t = w; t < end; t++)
          if (e->f[t].state == AT_WARP_SYNC) e->f[t].state = RUNNABLE;
        moved = true;
      }
    }
    int at_barrier = 0;
    for (int t = 0; t < n; t++) at_barrier += e->f[t].state == AT_BARRIER;
    if (at_barrier && at_barrier == live) {
      for (int t = 0; t < n; t++)
        if (e->f[t].state == AT_BARRIER) e->f[t].state = RUNNABLE;
      moved = true;
    }
    if (!moved && live > 0)
      return sc_diag_set(d, SC_ERR_INVALID, name, NULL,
                         "cuda emulation: kernel '%s' deadlocks: %d threads wait, at a barrier "
                         "and at a warp sync", name, live);
  }
  return SC_OK;
}

sc_status sc_cuda_emu_launch(sc_cuda_emu *e, const char *name, const sc_cuda_launch *l,
                             void **args, sc_diag *d) {
  char sym[512];
  snprintf(sym, sizeof sym, "%s" SC_CUDA_EMU_SUFFIX, name);
  void (*fn)(void **) = (void (*)(void **))dlsym(e->so, sym);
  if (!fn)
    return sc_diag_set(d, SC_ERR_INVALID, name, NULL, "cuda emulation: no kernel '%s'", name);
  if (l->block < 1 || l->block > MAX_BLOCK || l->grid < 1 || l->grid > (1LL << 31) - 1)
    return sc_diag_set(d, SC_ERR_INVALID, name, NULL,
                       "cuda emulation: launch of %lld blocks of %d threads", (long long)l->grid,
                       l->block);
  if (l->shared_bytes < 0 || l->shared_bytes > MAX_DYN_SHARED)
    return sc_diag_set(d, SC_ERR_INVALID, name, NULL,
                       "cuda emulation: %d bytes of dynamic shared memory", l->shared_bytes);
  if ((size_t)l->shared_bytes > e->dyn_bytes) {
    unsigned char *m = sc_realloc(e->dyn, (size_t)l->shared_bytes);
    if (!m) return sc_diag_set(d, SC_ERR_NOMEM, name, NULL, "cuda emulation: out of memory");
    e->dyn = m;
    e->dyn_bytes = (size_t)l->shared_bytes;
  }
  bool fibers = l->mode == SC_CUDA_BLOCK_PER_POINT;
  L.fn = fn;
  L.args = args;
  L.fibers = fibers;
  L.bad_barrier = false;
  emu_thread plain;
  sc_status st = SC_OK;
  for (int64_t b = 0; b < l->grid && st == SC_OK; b++) {
    for (int t = 0; t < l->block; t++) {
      emu_thread *th = fibers ? &e->f[t].th : &plain;
      *th = (emu_thread){.tid = {(unsigned)t, 0, 0}, .bid = {(unsigned)b, 0, 0},
                         .bdim = {(unsigned)l->block, 1, 1}, .gdim = {(unsigned)l->grid, 1, 1},
                         .xchg = e->xchg, .dyn = l->shared_bytes ? e->dyn : NULL};
      if (!fibers) {
        L.cur = th;
        fn(args);
      }
    }
    if (fibers) st = run_block_fibers(e, l->block, name, d);
  }
  L.cur = NULL;
  if (st == SC_OK && L.bad_barrier)
    st = sc_diag_set(d, SC_ERR_INVALID, name, NULL,
                     "cuda emulation: kernel '%s' met a barrier in a thread-per-point launch",
                     name);
  return st;
}

bool sc_cuda_emu_kernel_info(const sc_cuda_emu *e, const char *name, int *n_args,
                             sc_cuda_mode *mode, int *n_ptrs, const long long **extents) {
  char sym[512];
  snprintf(sym, sizeof sym, "%s" SC_CUDA_EMU_INFO_SUFFIX, name);
  const long long *info = (const long long *)dlsym(e->so, sym);
  if (!info || info[0] < 0 || info[2] < 0 || info[2] > info[0]) return false;
  *n_args = (int)info[0];
  *mode = info[1] ? SC_CUDA_BLOCK_PER_POINT : SC_CUDA_THREAD_PER_POINT;
  *n_ptrs = (int)info[2];
  *extents = info + 3;
  return true;
}

void sc_cuda_emu_close(sc_cuda_emu *e) {
  if (!e) return;
  for (int t = 0; e->f && t < MAX_BLOCK; t++) sc_free(e->f[t].stack);
  sc_free(e->f);
  sc_free(e->xchg);
  sc_free(e->dyn);
  if (e->so) close_unit(e->so);
  sc_free(e);
}
