/* Schedule: one step order for the training graph.
 *
 * In: a training graph whose nodes are in a valid order (forward, loss, backward,
 * optimizer as the builder appended them).  Out: p->steps, every node that is not
 * folded, topologically ordered.  With fused_update each optimizer node moves right
 * after the last step that writes one of its inputs (the gradient) or reads the value
 * it updates in place, directly or through a view (which shares its storage), so the
 * gradient dies at once; without it all updates run last (the classic order, for
 * comparison).  An optimizer node may read another's output (loss scaling's scale
 * update reads the check the updates read): it is placed no earlier than that node, and after it among
 * those placed at the same step (the builder appends nodes in a valid order). */
#include <stdlib.h>
#include <string.h>

#include "memory/plan.h"

typedef struct placed_update {
    int node;
    int after; /* step index among the other nodes */
} placed_update;

/* The latest position among v's readers other than node self, following views. */
static int last_reader(const vp_graph *g, const int *pos, int v, int self, int after) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++) {
        int r = val->consumers[c];
        if (r == self) continue;
        if (pos[r] > after) after = pos[r];
        const vp_node *n = &g->nodes[r];
        if (vp_node_is_view(g, n) && n->inputs[0] == v) after = last_reader(g, pos, n->outputs[0], self, after);
    }
    return after;
}

/* Bytes a value's own buffer takes (0 for a view, which shares its input's). */
static int64_t own_bytes(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    if (val->producer >= 0 && vp_node_is_view(g, &g->nodes[val->producer])) return 0;
    return vp_value_numel(val) * (int64_t)vp_dtype_size(val->dtype);
}

/* Storage that outlives any one step's order: parameters, state, inputs, constants,
 * graph outputs.  Reordering never frees it. */
static int lives_through(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    return val->producer < 0 || (val->flags & (VP_VAL_OUTPUT | VP_VAL_STATE | VP_VAL_INITIALIZER | VP_VAL_CONST));
}

/* The value whose buffer v's storage is: v itself, or for a view its input's root. */
static int storage_root(const vp_graph *g, int v) {
    while (g->values[v].producer >= 0) {
        const vp_node *n = &g->nodes[g->values[v].producer];
        if (!vp_node_is_view(g, n) || n->inputs[0] < 0) break;
        v = n->inputs[0];
    }
    return v;
}

/* Per value, what the list scheduler asks of it again and again: its storage root, the
 * bytes of its own buffer, whether it lives through the step.  Computed once per
 * schedule (walking view chains for every ready node at every step was most of the
 * planner's time on a 48-layer GPT). */
typedef struct value_facts {
    int *root;
    int64_t *own;
    char *through;
} value_facts;

static int facts_make(const vp_graph *g, value_facts *f) {
    f->root = malloc(((size_t)g->n_values + 1) * sizeof *f->root);
    f->own = malloc(((size_t)g->n_values + 1) * sizeof *f->own);
    f->through = malloc((size_t)g->n_values + 1);
    if (!f->root || !f->own || !f->through) return 0;
    for (int v = 0; v < g->n_values; v++) {
        f->root[v] = storage_root(g, v);
        f->own[v] = own_bytes(g, v);
        f->through[v] = (char)lives_through(g, v);
    }
    return 1;
}

static void facts_free(value_facts *f) {
    free(f->root);
    free(f->own);
    free(f->through);
}

/* The most bytes the segment order[lo..hi) holds at once beyond what was live before
 * it: outputs counted from their writer, a buffer dropped after the last read in the
 * segment of it or of a view of it (the simple model the list scheduler below
 * optimises).  left[] counts reads per storage root. */
static int64_t segment_peak(const vp_graph *g, const value_facts *f, const int *order, int lo, int hi, int *left) {
    for (int i = lo; i < hi; i++) {
        const vp_node *nd = &g->nodes[order[i]];
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) left[f->root[nd->inputs[k]]] = 0;
    }
    for (int i = lo; i < hi; i++) {
        const vp_node *nd = &g->nodes[order[i]];
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) left[f->root[nd->inputs[k]]]++;
    }
    int64_t live = 0, peak = 0;
    for (int i = lo; i < hi; i++) {
        const vp_node *nd = &g->nodes[order[i]];
        for (int k = 0; k < nd->n_outputs; k++)
            if (nd->outputs[k] >= 0) live += f->own[nd->outputs[k]];
        if (live > peak) peak = live;
        for (int k = 0; k < nd->n_inputs; k++) {
            if (nd->inputs[k] < 0) continue;
            int r = f->root[nd->inputs[k]];
            if (--left[r] == 0 && !f->through[r]) live -= f->own[r];
        }
    }
    return peak;
}

/* The backward pass (and its recompute nodes) in a memory-aware order: list scheduling
 * that always runs, among the nodes whose inputs are ready, the one that adds the
 * fewest bytes (its outputs less the inputs it reads last), the builder's order
 * breaking ties.  The builder emits a node's whole backward before moving on, so a
 * branch whose gradient is only needed at a residual Add (a downsample convolution's)
 * holds its result across the other branch; here it waits until that result can be
 * consumed.  A local choice can also raise the peak (it did on MobileNet-v2), so the new
 * order is kept only where it holds fewer bytes at once than the builder's.
 * order[lo..hi) is rewritten in place. */
/* Per node of the segment, what it reads and writes as the list scheduler weighs it:
 * the bytes of its outputs' own buffers, and each storage root it reads once with the
 * number of its reads of it (nodes with many inputs, a gradient Sum, weighed often). */
typedef struct node_reads {
    int64_t *out;  /* per node; the block the other arrays are carved from */
    int *at;       /* per node + 1: its roots are root[at[i] .. at[i + 1]) */
    int *root, *reads;
} node_reads;

static int reads_make(const vp_graph *g, const value_facts *f, const int *order, int lo, int hi, node_reads *r) {
    int n = hi - lo, total = 0;
    for (int i = lo; i < hi; i++) total += g->nodes[order[i]].n_inputs;
    /* one block: the int64 counts first, then the ints */
    r->out = malloc(((size_t)n + 1) * sizeof *r->out + ((size_t)n + 2 + 2 * ((size_t)total + 1)) * sizeof(int));
    if (!r->out) return 0;
    r->at = (int *)(r->out + n + 1);
    r->root = r->at + n + 2;
    r->reads = r->root + total + 1;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const vp_node *nd = &g->nodes[order[lo + i]];
        r->out[i] = 0;
        for (int k = 0; k < nd->n_outputs; k++)
            if (nd->outputs[k] >= 0) r->out[i] += f->own[nd->outputs[k]];
        r->at[i] = m;
        for (int k = 0; k < nd->n_inputs; k++) {
            if (nd->inputs[k] < 0) continue;
            int v = f->root[nd->inputs[k]], j = r->at[i];
            while (j < m && r->root[j] != v) j++;
            if (j < m) r->reads[j]++;
            else r->root[m] = v, r->reads[m++] = 1;
        }
    }
    r->at[n] = m;
    return 1;
}

static void reads_free(node_reads *r) { free(r->out); }

/* What running segment node i adds to the live bytes now: its outputs, less the buffers
 * it reads last (by left[], reads still to run per storage root). */
static int64_t node_delta(const node_reads *r, int i, const value_facts *f, const int *left) {
    int64_t delta = r->out[i];
    for (int j = r->at[i]; j < r->at[i + 1]; j++) {
        int v = r->root[j];
        if (left[v] == r->reads[j] && !f->through[v]) delta -= f->own[v];
    }
    return delta;
}

/* A weight's copy cast again for the backward (precision/recast.c's "/recast", or
 * checkpointing's copy of a weight's Cast): a recompute Cast of a value with no
 * producer, read in the segment.  Ready from the start, it would run as soon as its
 * small output is the cheapest choice and hold it across the layers before its reader;
 * it runs instead right before the first reader the scheduler picks. */
static int is_recast(const vp_graph *g, const vp_node *nd, const int *pos_of, int lo, int hi) {
    if (nd->phase != VP_PHASE_RECOMPUTE || nd->domain[0] || strcmp(nd->op_type, "Cast") || nd->n_inputs != 1 ||
        nd->inputs[0] < 0 || g->values[nd->inputs[0]].producer >= 0 || nd->n_outputs != 1 || nd->outputs[0] < 0)
        return 0;
    const vp_value *y = &g->values[nd->outputs[0]];
    for (int c = 0; c < y->n_consumers; c++)
        if (pos_of[y->consumers[c]] >= lo && pos_of[y->consumers[c]] < hi) return 1;
    return 0;
}

/* The segment index of a recast node v comes from, or -1. */
static int recast_of(const vp_graph *g, const char *attached, const int *pos_of, int lo, int hi, int v) {
    int pr = v >= 0 ? g->values[v].producer : -1;
    if (pr < 0 || pos_of[pr] < lo || pos_of[pr] >= hi || !attached[pos_of[pr] - lo]) return -1;
    return pos_of[pr] - lo;
}

/* Adds bytes to pending[] of each segment node that reads recast node a's output, once
 * per reader: what choosing that reader would run first. */
static void recast_readers(const vp_graph *g, int a, const int *pos_of, int lo, int hi, int64_t *pending, int64_t bytes) {
    const vp_value *y = &g->values[g->nodes[a].outputs[0]];
    for (int c = 0; c < y->n_consumers; c++) {
        int r = y->consumers[c], dup = 0;
        for (int e = 0; e < c && !dup; e++) dup = y->consumers[e] == r;
        if (!dup && pos_of[r] >= lo && pos_of[r] < hi) pending[pos_of[r] - lo] += bytes;
    }
}

static vp_status order_backward(const vp_graph *g, int *order, int lo, int hi, const int *pos_of) {
    int n = hi - lo;
    if (n < 2) return VP_OK;
    char *attached = calloc((size_t)n, 1); /* recast nodes, run with their first reader */
    int64_t *pending = calloc((size_t)n, sizeof *pending); /* per node: bytes of the recasts it reads not yet run */
    int any_attached = 0;
    for (int i = 0; attached && i < n; i++) any_attached |= attached[i] = (char)is_recast(g, &g->nodes[order[lo + i]], pos_of, lo, hi);
    if (!attached || !pending) {
        free(attached);
        free(pending);
        return VP_ERR_NOMEM;
    }
    int *deps = calloc((size_t)n, sizeof *deps), *left = calloc((size_t)g->n_values + 1, sizeof *left);
    char *dirty = malloc((size_t)n);
    int64_t *delta = malloc((size_t)n * sizeof *delta);
    /* readers of each storage root in the segment (rd[rd_at[r] .. rd_at[r + 1])): a
     * node's delta changes only when left[] of a root it reads does, so it is kept
     * between steps and recomputed only then (every ready node every step was most of
     * the planner's time on a 48-layer GPT) */
    int *rd_at = calloc((size_t)g->n_values + 2, sizeof *rd_at), *rd = NULL;
    int *seen = calloc((size_t)n, sizeof *seen); /* per node: 1 + the value whose readers were last counted */
    int *out = malloc((size_t)n * sizeof *out), *ready = malloc((size_t)n * sizeof *ready), n_ready = 0;
    value_facts facts = {0}, *f = &facts;
    node_reads nr = {0};
    int ok = deps && left && dirty && delta && rd_at && seen && out && ready && facts_make(g, f) &&
             reads_make(g, f, order, lo, hi, &nr);
    /* deps: inputs produced inside the segment; left: reads inside it still to run, per
     * storage root (a view's readers keep its input's buffer alive) */
    for (int i = lo; ok && i < hi; i++) {
        const vp_node *nd = &g->nodes[order[i]];
        for (int k = 0; k < nd->n_inputs; k++) {
            int v = nd->inputs[k];
            if (v < 0) continue;
            left[f->root[v]]++;
            rd_at[f->root[v] + 1]++;
            int pr = g->values[v].producer;
            if (pr >= 0 && pos_of[pr] >= lo && pos_of[pr] < hi && !attached[pos_of[pr] - lo]) deps[i - lo]++;
        }
    }
    for (int v = 0; ok && v < g->n_values; v++) rd_at[v + 1] += rd_at[v];
    if (ok && !(rd = malloc(((size_t)rd_at[g->n_values] + 1) * sizeof *rd))) ok = 0;
    for (int i = lo; ok && i < hi; i++) { /* filled through left[] as a cursor, then restored */
        const vp_node *nd = &g->nodes[order[i]];
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) {
                int r = f->root[nd->inputs[k]];
                rd[rd_at[r] + --left[r]] = i - lo;
            }
    }
    for (int i = lo; ok && i < hi; i++) {
        const vp_node *nd = &g->nodes[order[i]];
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) left[f->root[nd->inputs[k]]]++;
    }
    if (!ok) {
        free(deps); free(left); free(dirty); free(delta); free(rd_at); free(rd); free(seen); free(out); free(ready); facts_free(f); reads_free(&nr);
        free(attached);
        free(pending);
        return VP_ERR_NOMEM;
    }
    memset(dirty, 1, (size_t)n);
    for (int a = 0; any_attached && a < n; a++)
        if (attached[a]) recast_readers(g, order[lo + a], pos_of, lo, hi, pending, nr.out[a]);
    for (int i = 0; i < n; i++)
        if (!deps[i] && !attached[i]) ready[n_ready++] = i;
    for (int step = 0; step < n;) {
        int best = -1, best_r = -1;
        int64_t best_delta = 0;
        for (int r = 0; r < n_ready; r++) {
            int i = ready[r];
            if (dirty[i]) {
                delta[i] = node_delta(&nr, i, f, left);
                dirty[i] = 0;
            }
            int64_t d = delta[i] + pending[i]; /* the recasts it would run first */
            if (best < 0 || d < best_delta || (d == best_delta && i < best)) best = i, best_r = r, best_delta = d;
        }
        if (best < 0) { /* a broken graph (stale consumers, a cycle): keep the builder's order */
            free(deps); free(left); free(dirty); free(delta); free(rd_at); free(rd); free(seen); free(out); free(ready); facts_free(f); reads_free(&nr);
            free(attached);
            free(pending);
            return VP_ERR_RUNTIME;
        }
        ready[best_r] = ready[--n_ready];
        const vp_node *bn = &g->nodes[order[lo + best]];
        for (int k = 0; any_attached && k < bn->n_inputs; k++) {
            int a = recast_of(g, attached, pos_of, lo, hi, bn->inputs[k]);
            if (a < 0 || attached[a] != 1) continue;
            attached[a] = 2; /* run now; it reads a weight, which lasts: no delta changes */
            recast_readers(g, order[lo + a], pos_of, lo, hi, pending, -nr.out[a]);
            out[step++] = order[lo + a];
            const vp_node *an = &g->nodes[order[lo + a]];
            left[f->root[an->inputs[0]]]--;
        }
        int node = order[lo + best];
        out[step++] = node;
        const vp_node *nd = &g->nodes[node];
        for (int k = 0; k < nd->n_inputs; k++) {
            if (nd->inputs[k] < 0) continue;
            int r = f->root[nd->inputs[k]];
            left[r]--;
            for (int q = rd_at[r]; !f->through[r] && q < rd_at[r + 1]; q++) dirty[rd[q]] = 1; /* no delta counts a lasting one */
        }
        for (int k = 0; k < nd->n_outputs; k++) {
            int v = nd->outputs[k];
            if (v < 0) continue;
            const vp_value *val = &g->values[v];
            for (int c = 0; c < val->n_consumers; c++) {
                int r = val->consumers[c];
                if (pos_of[r] < lo || pos_of[r] >= hi || seen[pos_of[r] - lo] == v + 1) continue; /* each reader once */
                seen[pos_of[r] - lo] = v + 1;
                const vp_node *rn = &g->nodes[r];
                for (int j = 0; j < rn->n_inputs; j++)
                    if (rn->inputs[j] == v && --deps[pos_of[r] - lo] == 0) ready[n_ready++] = pos_of[r] - lo;
            }
        }
    }
    int64_t before = segment_peak(g, f, order, lo, hi, left);
    int *builder = deps; /* no longer needed as counts: reuse for the builder's order */
    memcpy(builder, order + lo, (size_t)n * sizeof *builder);
    memcpy(order + lo, out, (size_t)n * sizeof *out);
    if (segment_peak(g, f, order, lo, hi, left) >= before) memcpy(order + lo, builder, (size_t)n * sizeof *builder);
    free(deps); free(left); free(dirty); free(delta); free(rd_at); free(rd); free(seen); free(out); free(ready); facts_free(f); reads_free(&nr);
    free(attached);
    free(pending);
    return VP_OK;
}

static int by_after(const void *a, const void *b) {
    const placed_update *x = a, *y = b;
    if (x->after != y->after) return x->after - y->after;
    return x->node - y->node;
}

vp_status vp_schedule(vp_plan *p, const vp_training *t, vp_error *err) {
    vp_graph *g = p->g;
    /* carried_from[v]: the value a carried v is written over (its storage), or -1 */
    int *carried_from = malloc(((size_t)g->n_values + 1) * sizeof *carried_from);
    if (!carried_from) return vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling");
    for (int v = 0; v < g->n_values; v++) carried_from[v] = -1;
    for (int c = 0; t && c < t->n_carry; c++)
        if (t->carry[c].to >= 0 && t->carry[c].from >= 0) carried_from[t->carry[c].to] = t->carry[c].from;
    int *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
    int *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order);
    placed_update *ups = malloc(((size_t)g->n_nodes + 1) * sizeof *ups);
    int *up_after = malloc(((size_t)g->n_nodes + 1) * sizeof *up_after);
    if (!pos || !order || !ups || !up_after) {
        free(pos); free(order); free(ups); free(up_after); free(carried_from);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling");
    }
    int n_main = 0, n_ups = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        pos[i] = -1;
        up_after[i] = -1;
        if (g->nodes[i].folded) continue;
        if (g->nodes[i].phase == VP_PHASE_OPTIMIZER) continue;
        pos[i] = n_main;
        order[n_main++] = i;
    }
    /* the backward segment: from the first backward or recompute node on */
    int seg = n_main;
    for (int m = 0; m < n_main && seg == n_main; m++) {
        vp_phase ph = g->nodes[order[m]].phase;
        if (ph == VP_PHASE_BACKWARD || ph == VP_PHASE_RECOMPUTE) seg = m;
    }
    vp_status os = order_backward(g, order, seg, n_main, pos);
    if (os) {
        free(pos); free(order); free(ups); free(up_after); free(carried_from);
        return os == VP_ERR_NOMEM ? vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling")
                                  : vp_fail(err, VP_ERR_RUNTIME, "%s: internal: the backward pass has no node ready to run "
                                            "(a cycle, or consumers not relinked)", g->path ? g->path : "graph");
    }
    for (int m = seg; m < n_main; m++) pos[order[m]] = m;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || n->phase != VP_PHASE_OPTIMIZER) continue;
        int after = n_main - 1;
        if (p->fused_update) {
            after = -1;
            for (int k = 0; k < n->n_inputs; k++) {
                const vp_value *v = n->inputs[k] >= 0 ? &g->values[n->inputs[k]] : NULL;
                if (!v) continue;
                if (v->producer >= 0 && pos[v->producer] > after) after = pos[v->producer];
                if (v->producer >= 0 && g->nodes[v->producer].phase == VP_PHASE_OPTIMIZER &&
                    up_after[v->producer] > after)
                    after = up_after[v->producer];
                after = last_reader(g, pos, n->inputs[k], i, after);
            }
            /* a carried output overwrites the old value's storage (the weight an offloaded
             * update's copy back writes): after the old value's last reader too */
            for (int k = 0; k < n->n_outputs; k++)
                if (n->outputs[k] >= 0 && carried_from[n->outputs[k]] >= 0)
                    after = last_reader(g, pos, carried_from[n->outputs[k]], i, after);
        }
        up_after[i] = after;
        ups[n_ups++] = (placed_update){i, after};
    }
    free(up_after);
    free(carried_from);
    qsort(ups, (size_t)n_ups, sizeof *ups, by_after);
    p->steps = malloc(((size_t)(n_main + n_ups) + 1) * sizeof *p->steps);
    if (!p->steps) {
        free(pos); free(order); free(ups);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory scheduling");
    }
    int k = 0, u = 0;
    while (u < n_ups && ups[u].after < 0) p->steps[k++] = ups[u++].node;
    for (int m = 0; m < n_main; m++) {
        p->steps[k++] = order[m];
        while (u < n_ups && ups[u].after == m) p->steps[k++] = ups[u++].node;
    }
    while (u < n_ups) p->steps[k++] = ups[u++].node;
    p->n_steps = k;
    free(pos);
    free(order);
    free(ups);
    return VP_OK;
}
