/* plan_report.c — memory per rank and collectives of a partitioned build
 * (plan_report.h): one walk over each stage program's buffers and steps. */
#include "driver/plan_report.h"

#include <stdlib.h>
#include <string.h>

const char *const sc_comm_kind_names[SC_COMM_KIND_COUNT] = {
    "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Send", "Recv", "SendRecv"};

static int64_t buffer_bytes(const sc_program *p, int32_t id) {
  return id >= 0 && id < p->n_buffers ? p->buffers[id].bytes : 0;
}

static int cmp_coll(const void *x, const void *y) {
  const sc_collective_row *a = x, *b = y;
  if (a->stage != b->stage) return a->stage < b->stage ? -1 : 1;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  return a->axes < b->axes ? -1 : a->axes > b->axes;
}

sc_status sc_plan_report_gather(const sc_build *b, sc_plan_report *r) {
  memset(r, 0, sizeof *r);
  r->n_stages = b->part ? b->part->n_stages : b->program->n_stages;
  r->mem = sc_calloc((size_t)r->n_stages + 1, sizeof *r->mem);
  if (!r->mem) return SC_ERR_NOMEM;
  int32_t cap = 0;
  for (int32_t s = 0; s < r->n_stages; s++) {
    const sc_program *p = b->program->stages[s].program;
    sc_stage_memory *m = &r->mem[s];
    if (!p) continue;
    m->arena_bytes = p->arena_bytes;
    for (int32_t i = 0; i < p->n_buffers; i++)
      if (p->buffers[i].kind == SC_BUF_CONST) m->weight_bytes += p->buffers[i].bytes;
    /* Comm scratch: the most any one COMM step needs (pack + unpack);
     * the memory plan reuses the space between steps. */
    for (int32_t k = 0; k < p->n_steps; k++) {
      const sc_step *step = &p->steps[k];
      if (step->kind != SC_STEP_COMM) continue;
      int64_t scratch = buffer_bytes(p, step->comm.pack) + buffer_bytes(p, step->comm.unpack);
      if (scratch > m->comm_bytes) m->comm_bytes = scratch;
      /* a ring's exchange counts as its Send and its Recv */
      sc_comm_step half[2];
      for (int32_t h = 0, nh = sc_comm_halves(&step->comm, half); h < nh; h++) {
        const sc_comm_step *c = &half[h];
        int64_t in = buffer_bytes(p, c->in), out = buffer_bytes(p, c->out);
        int32_t j = 0;
        while (j < r->n_coll && !(r->coll[j].stage == s && r->coll[j].kind == c->kind &&
                                  r->coll[j].axes == c->axes))
          j++;
        if (j == r->n_coll) {
          if (r->n_coll == cap) {
            int32_t ncap = cap ? 2 * cap : 16;
            sc_collective_row *nc = sc_realloc(r->coll, (size_t)ncap * sizeof *nc);
            if (!nc) return SC_ERR_NOMEM;
            r->coll = nc;
            cap = ncap;
          }
          r->coll[r->n_coll++] = (sc_collective_row){s, c->kind, c->axes, 0, 0};
        }
        r->coll[j].ops++;
        r->coll[j].bytes += in > out ? in : out;
      }
    }
  }
  if (r->n_coll) qsort(r->coll, (size_t)r->n_coll, sizeof *r->coll, cmp_coll);
  return SC_OK;
}

void sc_plan_report_free(sc_plan_report *r) {
  sc_free(r->mem);
  sc_free(r->coll);
  memset(r, 0, sizeof *r);
}
