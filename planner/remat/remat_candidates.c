/* One checkpointing candidate planned for real, and picking among them.  See
 * remat_candidates.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remat/cost.h"
#include "remat/remat_candidates.h"

double vp_remat_step_seconds(const vp_graph *g, const vp_device_profile *dev, vp_phase only, int all) {
    double t = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || (!all && n->phase != only)) continue;
        vp_node_cost c = vp_cost_node(g, n);
        t += vp_cost_seconds(&c, dev, 0);
    }
    return t;
}

vp_status vp_remat_plan_copy(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                                const char *keep, const vp_remat_schedule *rs, int64_t stop_above, vp_graph **out,
                                vp_plan *p, int *n_recompute, vp_error *err) {
    vp_graph *c = vp_graph_clone(g);
    if (!c) return vp_fail(err, VP_ERR_NOMEM, "out of memory copying the graph");
    vp_status s = rs ? vp_remat_apply_schedule(c, t, rs, n_recompute, err) : vp_remat_apply(c, t, keep, n_recompute, err);
    /* candidates are weighed with one order (size, best fit: the one that lands on the
     * bound most often) and no improving search; the plan kept gets the full solver */
    vp_arena_opts quick = {.search_seconds = -1, .only = 0, .stop_above = stop_above};
    if (!s) s = vp_plan_build_opts(p, c, t, dev, fused, &quick, err);
    if (s) {
        vp_plan_free(p);
        vp_graph_free(c);
        return s;
    }
    *out = c;
    return VP_OK;
}


vp_status vp_remat_candidate_add(candidate *c, int *n, int max, vp_graph *g, const vp_training *t, const vp_device_profile *dev,
                               int fused, const char *keep, const vp_remat_schedule *rs, int64_t budget, int trial,
                               const char *choice, vp_error *err) {
    if (*n >= max) return VP_OK;
    candidate *k = &c[*n];
    memset(k, 0, sizeof *k);
    vp_status s = vp_remat_plan_copy(g, t, dev, fused, keep, rs, trial ? budget : 0, &k->g, &k->p, &k->n_recompute, err);
    if (s) return s;
    k->fits = !budget || k->p.arena_bytes <= budget;
    k->recompute_seconds = vp_remat_step_seconds(k->g, dev, VP_PHASE_RECOMPUTE, 0);
    snprintf(k->choice, sizeof k->choice, "%s", choice);
    (*n)++;
    return VP_OK;
}

int vp_remat_candidate_pick(const candidate *c, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (!c[i].fits) continue;
        if (best < 0 || c[i].recompute_seconds < c[best].recompute_seconds ||
            (c[i].recompute_seconds == c[best].recompute_seconds && c[i].p.arena_bytes < c[best].p.arena_bytes))
            best = i;
    }
    if (best >= 0) return best;
    best = 0;
    for (int i = 1; i < n; i++)
        if (c[i].p.arena_bytes < c[best].p.arena_bytes ||
            (c[i].p.arena_bytes == c[best].p.arena_bytes && c[i].recompute_seconds < c[best].recompute_seconds))
            best = i;
    return best;
}

/* Over the pieces the chain was cut into before layers were joined: Chen's segments
 * are as fine as the graph allows, whatever dp's blocks are. */
void vp_remat_sqrtn_keep(const vp_graph *g, const chain *ch, char *keep) {
    int stride = (int)ceil(sqrt((double)(ch->n_pieces > 0 ? ch->n_pieces : 1)));
    for (int v = 0; v < g->n_values; v++) keep[v] = 1;
    for (int i = 0; i < ch->nf; i++) { /* every activation dropped, the pinned ones aside */
        const vp_node *n = &g->nodes[ch->fwd[i]];
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && !ch->pinned[n->outputs[k]]) keep[n->outputs[k]] = 0;
    }
    for (int k = 0; k < ch->n_pieces; k++)
        if (ch->piece_cuts[k] >= 0 && (k + 1) % stride == 0) keep[ch->piece_cuts[k]] = 1;
}
