/* Reading a plan file back into a graph (values = buffers, nodes = steps in order) and
 * a vp_plan over it, so the runtime, `show` and `verify` work from the file alone. */
#ifndef VP_PLAN_LOAD_H
#define VP_PLAN_LOAD_H

#include "memory/plan.h"

typedef struct vp_loaded_plan {
    vp_graph *g;         /* owned */
    vp_plan plan;        /* over g */
    char *model;         /* the model the plan was made from */
    uint64_t checksum;   /* the payload's FNV-1a 64 from the file's frame: names this plan */
    int n_knobs;
    char **knob_names, **knob_values;
    char device_name[32];
    char algorithm[48];
} vp_loaded_plan;

/* Checks framing, version and checksum; rebuilds every step's op and re-derives its
 * output shapes, failing naming the step when the file disagrees with itself. */
vp_status vp_plan_read(const char *path, vp_loaded_plan *out, vp_error *err);

/* vp_plan_read, then the independent verifier (memory/verify.h) on what was read: what
 * `run`, `codegen` and `export` execute or compile must be sound whatever its checksum
 * says (the checksum catches accidents, not edits).  An unsound plan is refused with the
 * verifier's message, as `verify` gives it, and nothing is left in *out. */
vp_status vp_plan_read_sound(const char *path, vp_loaded_plan *out, vp_error *err);
void vp_loaded_plan_free(vp_loaded_plan *lp);

#endif
