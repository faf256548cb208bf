/* Weight copies cast again for the backward, rather than held from the forward.
 *
 * In: a built training step under --precision bf16|fp16, its consumers linked.  Mixed
 * precision reads each weight through a Cast to the low dtype; the forward product and
 * the backward's dX = dY W^T both read that copy, so every layer's copy lives from the
 * forward to the backward: the whole model's weights once more at half width, all of
 * them alive when the backward starts, where the activations peak.  (PyTorch's autocast
 * holds them the same way: autograd saves the cast weight for the backward.)
 * Out: the same step in which each backward reader of such a copy reads a second Cast of
 * the same weight (phase RECOMPUTE, through remat's recompute insertion: placed right
 * before the first backward node that reads it), so the forward copy dies after its
 * last forward reader and the backward one lives through that layer's backward alone.
 * A Cast is memory-bound (read 4 bytes, write 2 per weight), negligible beside the
 * products that read it.
 *
 * Keeps true: every value has the bits it had (the second Cast reads the same weight
 * value: the scheduler orders a fused update after every reader of the weight it
 * overwrites), so the step trains exactly as before. */
#include "precision/recast.h"

#include <stdlib.h>
#include <string.h>

#include "remat/remat.h"

/* v is a forward Cast's output whose input is a weight (no producer: a parameter or an
 * initializer), and a backward node reads it. */
static int weight_copy_read_backward(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    if (val->producer < 0) return 0;
    const vp_node *p = &g->nodes[val->producer];
    if (p->folded || p->phase != VP_PHASE_FORWARD || p->domain[0] || strcmp(p->op_type, "Cast") || p->n_inputs != 1 ||
        p->inputs[0] < 0)
        return 0;
    const vp_value *w = &g->values[p->inputs[0]];
    if (w->producer >= 0 || !(w->flags & (VP_VAL_PARAM | VP_VAL_INITIALIZER))) return 0;
    for (int c = 0; c < val->n_consumers; c++)
        if (g->nodes[val->consumers[c]].phase == VP_PHASE_BACKWARD) return 1;
    return 0;
}

vp_status vp_recast_weights(vp_graph *g, const struct vp_training *t, int *n_recast, vp_error *err) {
    *n_recast = 0;
    vp_status s = vp_graph_link(g, err);
    if (s) return s;
    char *keep = malloc((size_t)g->n_values + 1);
    if (!keep) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int any = 0;
    for (int v = 0; v < g->n_values; v++) {
        keep[v] = !weight_copy_read_backward(g, v);
        any |= !keep[v];
    }
    if (any) s = vp_remat_apply(g, t, keep, n_recast, err);
    free(keep);
    /* named "<cast>/recast" rather than remat's "/recompute", so a plan's steps say why
     * the Cast runs again (the scheduler runs either right before its first reader) */
    for (int i = 0; !s && any && i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        size_t len = strlen(n->name), suf = strlen("/recompute");
        if (n->phase != VP_PHASE_RECOMPUTE || strcmp(n->op_type, "Cast") || len < suf ||
            strcmp(n->name + len - suf, "/recompute"))
            continue;
        char *name = malloc(len + 1);
        if (!name) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        memcpy(name, n->name, len - suf);
        strcpy(name + len - suf, "/recast");
        free(n->name);
        n->name = name;
    }
    return s;
}
