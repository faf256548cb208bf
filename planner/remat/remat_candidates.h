/* Checkpointing's candidates: a choice of what to keep (or a recompute schedule) planned
 * for real on a copy of the graph, and the searches that make them.  Internal to
 * remat.c, remat_candidates.c (planning one) and remat_search.c (dp's searches). */
#ifndef VP_REMAT_CANDIDATES_H
#define VP_REMAT_CANDIDATES_H

#include "remat/remat.h"
#include "remat/remat_chain.h"

typedef struct candidate {
    vp_plan p;
    vp_graph *g;
    int *opt;          /* dp's option per block, NULL for other candidates */
    vp_ilp_stats ilp;  /* ilp: the solve that gave this schedule */
    int n_recompute;
    int fits;
    double recompute_seconds;
    char choice[256];
} candidate;

/* Estimated seconds of the nodes of phase only (or of all of them) on dev. */
double vp_remat_step_seconds(const vp_graph *g, const vp_device_profile *dev, vp_phase only, int all);
/* Clones g, applies keep (or the schedule rs), plans with one quick arena order (none
 * when the lower bound exceeds stop_above > 0: the plan is then unplaced).  On success
 * *out is the clone and p the plan. */
vp_status vp_remat_plan_copy(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                             const char *keep, const vp_remat_schedule *rs, int64_t stop_above, vp_graph **out, vp_plan *p,
                             int *n_recompute, vp_error *err);
/* Plans keep (or the schedule rs) on a copy of g as candidate c[*n], when there is room.
 * A trial (a search's step kept only if it fits) is not placed when its lower bound is
 * over the budget: it cannot fit, and its arena would be thrown away. */
vp_status vp_remat_candidate_add(candidate *c, int *n, int max, vp_graph *g, const vp_training *t,
                                 const vp_device_profile *dev, int fused, const char *keep, const vp_remat_schedule *rs,
                                 int64_t budget, int trial, const char *choice, vp_error *err);
/* The fitting candidate with the least recompute time, else the smallest arena. */
int vp_remat_candidate_pick(const candidate *c, int n);
/* Chen et al.: every ceil(sqrt(k))-th cut kept, everything else recomputed. */
void vp_remat_sqrtn_keep(const vp_graph *g, const chain *ch, char *keep);
/* dp's candidates under budget (remat_search.c). */
vp_status vp_remat_dp_candidates(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                                 int64_t budget, const chain *ch, char *keep, int *choice, candidate *cands, int *nc,
                                 int max, vp_remat_result *r, vp_error *err);

#endif
