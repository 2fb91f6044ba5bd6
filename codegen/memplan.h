/* memplan.h — the static memory plan of a program: one arena, offsets from
 * buffer lifetimes, verified.
 *
 * sc_memplan_run gives every arena buffer (INPUT, OUTPUT, TEMP; a VIEW uses
 * its root's storage and keeps offset -1) an offset that is a multiple of
 * p->arena_align, such that no two buffers live at the same step overlap in
 * memory, and sets p->arena_bytes to the peak (rounded up to the alignment):
 * the runtime allocates exactly that. Lifetimes are step intervals: from the
 * first step that touches a buffer (or any view of it) to the last; INPUTs
 * are live from step 0, OUTPUTs (and storage any graph output views) to the
 * end. Offsets are assigned greedily by size with best fit (the "greedy by
 * size" planner of TFLite and onnx2c). A kernel's output may take over the
 * storage of a TEMP input that dies at that step when both have the same byte
 * size and the kernel reads that input only at the elements it writes
 * (kir_reads_aligned) — in-place reuse; so may a SCATTER_ADD step's output
 * take its data's (rows added into the data where it lies: an embedding's
 * gradient into the sum the tied LM head began).
 *
 * sc_memplan_verify checks a plan however it was made: offsets aligned and
 * inside [0, arena_bytes), and any two buffers whose lifetimes overlap are
 * disjoint in memory unless they are a legal in-place pair (same slot; one
 * dies at the very kernel or scatter step the other is born in, as above).
 *
 * Errors: SC_ERR_INVALID (a step names a buffer that does not exist, a view
 * cycle, a broken plan: the message names both buffers), SC_ERR_LIMIT (sizes
 * overflow), SC_ERR_NOMEM. Not thread-safe on the same program. */
#ifndef SC_PASSES_MEMPLAN_H
#define SC_PASSES_MEMPLAN_H

#include "codegen/program.h"

sc_status sc_memplan_run(sc_program *p, sc_diag *diag);
sc_status sc_memplan_verify(const sc_program *p, sc_diag *diag);
/* The step at which the most arena storage is live (*step; n_steps means
 * after the last step, when only outputs are) and how much (*bytes: slot
 * sizes rounded to the alignment; a state pair counts once, for the whole
 * run; a buffer taken over in place counts until the step before its
 * successor's; arena_bytes >= it, the difference being what greedy
 * placement loses). Needs the plan's offsets. live: NULL or [n_buffers], set for the
 * storage roots live there. SC_ERR_INVALID (a malformed program),
 * SC_ERR_NOMEM. */
sc_status sc_memplan_peak(const sc_program *p, int32_t *step, int64_t *bytes, bool *live,
                          sc_diag *diag);
/* What sc_memplan_peak's *bytes would be without activation offloading
 * (codegen/offload.c): each value copied to the host pool and back counts
 * as one root live from its first step to its reloaded copy's last, the
 * copies' own steps adding no live bytes. The difference from the peak is
 * what offloading saves at the device's peak. */
sc_status sc_memplan_peak_unoffloaded(const sc_program *p, int64_t *bytes, sc_diag *diag);
/* The lifetimes the plan works from: for each storage root i (an arena
 * buffer that is not a view), first[i] and last[i] as above (INPUTs from
 * step 0, OUTPUTs to n_steps, unused [0, 0]); -1 for other buffers. first
 * and last: [n_buffers]. SC_ERR_INVALID, SC_ERR_NOMEM as sc_memplan_run. */
sc_status sc_memplan_lifetimes(const sc_program *p, int32_t *first, int32_t *last,
                               sc_diag *diag);

#endif
