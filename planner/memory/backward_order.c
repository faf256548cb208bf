/* The backward's order: see backward_order.h. */
#include "memory/backward_order.h"

#include <stdlib.h>
#include <string.h>

#include "memory/plan.h"

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
    char *at_once; /* read only by fused updates (gradients), freed once they can run */
    int *wait_at;  /* per value + 1: an at_once value's updates wait for the last reads
                      of the storage roots wait[wait_at[v] .. wait_at[v + 1]) (the
                      weight they write in place, read by the backward's products) */
    int *wait;
} value_facts;

static int facts_make(const vp_graph *g, value_facts *f) {
    f->root = malloc(((size_t)g->n_values + 1) * sizeof *f->root);
    f->own = malloc(((size_t)g->n_values + 1) * sizeof *f->own);
    f->through = malloc((size_t)g->n_values + 1);
    f->at_once = calloc((size_t)g->n_values + 1, 1);
    if (!f->root || !f->own || !f->through || !f->at_once) return 0;
    for (int v = 0; v < g->n_values; v++) {
        f->root[v] = storage_root(g, v);
        f->own[v] = own_bytes(g, v);
        f->through[v] = (char)lives_through(g, v);
    }
    return 1;
}

/* With fused updates, a gradient read by nothing but optimizer nodes dies when they
 * run, and they run right after the last step that writes or reads one of their inputs
 * (vp_schedule below).  Where each of their other inputs is written before the segment
 * or lasts (the weight, its state), that is the later of the gradient's step and the
 * last read of those in the segment (the weight read by the product of the input's
 * gradient): the list scheduler counts the gradient as held only while such reads
 * remain.  Counting it held to the end made it put off a weight's gradient product
 * (GPT-2's Conv1D weights under bf16 held their gradients across the layers below).
 * An update that waits for a value of the segment (loss scaling's finiteness check
 * reads every gradient) leaves its gradients held, as they are. */
static int facts_mark_at_once(const vp_graph *g, value_facts *f, const int *pos_of, int lo, int hi) {
    for (int pass = 0; pass < 2; pass++) { /* count the wait lists, then fill them */
        int m = 0;
        for (int v = 0; v < g->n_values; v++) {
            const vp_value *val = &g->values[v];
            if (pass) f->wait_at[v] = m;
            int ok = val->producer >= 0 && f->root[v] == v && !f->through[v] && val->n_consumers > 0 &&
                     pos_of[val->producer] >= lo && pos_of[val->producer] < hi;
            for (int c = 0; ok && c < val->n_consumers; c++) {
                const vp_node *u = &g->nodes[val->consumers[c]];
                ok = u->phase == VP_PHASE_OPTIMIZER && !u->folded;
                for (int k = 0; ok && k < u->n_inputs; k++) {
                    int w = u->inputs[k];
                    if (w < 0 || w == v) continue;
                    if (f->through[f->root[w]]) continue;
                    int pr = g->values[w].producer;
                    ok = pr >= 0 && g->nodes[pr].phase != VP_PHASE_OPTIMIZER && pos_of[pr] >= 0 && pos_of[pr] < lo;
                }
            }
            if (pass) f->at_once[v] = (char)ok;
            for (int c = 0; ok && c < val->n_consumers; c++) {
                const vp_node *u = &g->nodes[val->consumers[c]];
                for (int k = 0; k < u->n_inputs; k++)
                    if (u->inputs[k] >= 0 && u->inputs[k] != v) {
                        if (pass) f->wait[m] = f->root[u->inputs[k]];
                        m++;
                    }
            }
        }
        if (pass) f->wait_at[g->n_values] = m;
        else if (!(f->wait_at = malloc(((size_t)g->n_values + 1) * sizeof *f->wait_at)) ||
                 !(f->wait = malloc(((size_t)m + 1) * sizeof *f->wait)))
            return 0;
    }
    return 1;
}

static void facts_free(value_facts *f) {
    free(f->root);
    free(f->own);
    free(f->through);
    free(f->at_once);
    free(f->wait_at);
    free(f->wait);
}

struct node_reads;
static int update_ready(const value_facts *f, const struct node_reads *r, int i, const int *left, int v);

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
    int *pending = f->wait_at ? malloc(((size_t)g->n_values + 1) * sizeof *pending) : NULL, n_pending = 0;
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
        /* gradients whose updates can run now die; the others wait for their reads */
        for (int k = 0; pending && k < nd->n_outputs; k++)
            if (nd->outputs[k] >= 0 && f->at_once[nd->outputs[k]]) pending[n_pending++] = nd->outputs[k];
        for (int q = 0; q < n_pending;)
            if (update_ready(f, NULL, -1, left, pending[q])) live -= f->own[pending[q]], pending[q] = pending[--n_pending];
            else q++;
    }
    free(pending);
    return peak;
}

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
            if (nd->outputs[k] >= 0 && !f->at_once[nd->outputs[k]]) r->out[i] += f->own[nd->outputs[k]];
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

/* Whether at_once value v's updates could run with left[] as it stands, less the reads
 * of segment node i (r's node i), which runs now; i < 0: none. */
static int update_ready(const value_facts *f, const struct node_reads *r, int i, const int *left, int v) {
    for (int j = f->wait_at[v]; j < f->wait_at[v + 1]; j++) {
        int w = f->wait[j], mine = 0;
        for (int q = i >= 0 ? r->at[i] : 0; i >= 0 && q < r->at[i + 1]; q++)
            if (r->root[q] == w) mine = r->reads[q];
        if (left[w] > mine) return 0;
    }
    return 1;
}

/* What running segment node i adds to the live bytes now: its outputs, less the buffers
 * it reads last (by left[], reads still to run per storage root). */
static int64_t node_delta(const vp_node *nd, const node_reads *r, int i, const value_facts *f, const int *left) {
    int64_t delta = r->out[i];
    for (int k = 0; f->wait_at && k < nd->n_outputs; k++) /* a gradient held until its update can run */
        if (nd->outputs[k] >= 0 && f->at_once[nd->outputs[k]] && !update_ready(f, r, i, left, nd->outputs[k]))
            delta += f->own[nd->outputs[k]];
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

/* wt_at (per value + 1, zeroed) and *wt: for each storage root, the segment nodes
 * writing a gradient whose update waits for its reads. */
static int watchers_make(const vp_graph *g, const value_facts *f, const int *order, int lo, int hi, int *wt_at, int **wt) {
    for (int fill = 0; fill < 2; fill++) {
        for (int i = lo; i < hi; i++) {
            const vp_node *nd = &g->nodes[order[i]];
            for (int k = 0; k < nd->n_outputs; k++) {
                int v = nd->outputs[k];
                if (v < 0 || !f->at_once[v]) continue;
                for (int j = f->wait_at[v]; j < f->wait_at[v + 1]; j++) {
                    if (fill) (*wt)[wt_at[f->wait[j]]++] = i - lo;
                    else wt_at[f->wait[j] + 1]++;
                }
            }
        }
        if (!fill) {
            for (int v = 0; v < g->n_values; v++) wt_at[v + 1] += wt_at[v];
            if (!(*wt = malloc(((size_t)wt_at[g->n_values] + 1) * sizeof **wt))) return 0;
        } else { /* the cursors moved each start to the next one's: shift back */
            for (int v = g->n_values; v > 0; v--) wt_at[v] = wt_at[v - 1];
            wt_at[0] = 0;
        }
    }
    return 1;
}

static void watchers_dirty(const int *wt_at, const int *wt, int r, char *dirty) {
    for (int q = wt_at ? wt_at[r] : 0; wt_at && q < wt_at[r + 1]; q++) dirty[wt[q]] = 1;
}

vp_status vp_order_backward(const vp_graph *g, int *order, int lo, int hi, const int *pos_of, int fused_update) {
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
    int ok = deps && left && dirty && delta && rd_at && seen && out && ready && facts_make(g, f);
    if (ok && fused_update) ok = facts_mark_at_once(g, f, pos_of, lo, hi);
    ok = ok && reads_make(g, f, order, lo, hi, &nr);
    /* watchers: the nodes whose delta a root's reads change though they do not read it
     * (a gradient's writer, while the weight its update writes is still read) */
    int *wt_at = ok && f->wait_at ? calloc((size_t)g->n_values + 2, sizeof *wt_at) : NULL, *wt = NULL;
    if (ok && f->wait_at) ok = wt_at && watchers_make(g, f, order, lo, hi, wt_at, &wt);
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
        free(deps); free(left); free(dirty); free(delta); free(rd_at); free(rd); free(seen); free(out); free(ready); facts_free(f); reads_free(&nr); free(wt_at); free(wt);
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
                delta[i] = node_delta(&g->nodes[order[lo + i]], &nr, i, f, left);
                dirty[i] = 0;
            }
            int64_t d = delta[i] + pending[i]; /* the recasts it would run first */
            if (best < 0 || d < best_delta || (d == best_delta && i < best)) best = i, best_r = r, best_delta = d;
        }
        if (best < 0) { /* a broken graph (stale consumers, a cycle): keep the builder's order */
            free(deps); free(left); free(dirty); free(delta); free(rd_at); free(rd); free(seen); free(out); free(ready); facts_free(f); reads_free(&nr); free(wt_at); free(wt);
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
            watchers_dirty(wt_at, wt, f->root[an->inputs[0]], dirty);
        }
        int node = order[lo + best];
        out[step++] = node;
        const vp_node *nd = &g->nodes[node];
        for (int k = 0; k < nd->n_inputs; k++) {
            if (nd->inputs[k] < 0) continue;
            int r = f->root[nd->inputs[k]];
            left[r]--;
            for (int q = rd_at[r]; !f->through[r] && q < rd_at[r + 1]; q++) dirty[rd[q]] = 1; /* no delta counts a lasting one */
            watchers_dirty(wt_at, wt, r, dirty);
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
    free(deps); free(left); free(dirty); free(delta); free(rd_at); free(rd); free(seen); free(out); free(ready); facts_free(f); reads_free(&nr); free(wt_at); free(wt);
    free(attached);
    free(pending);
    return VP_OK;
}

