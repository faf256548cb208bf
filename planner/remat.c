/* Checkpointing: the recompute insertion, the chain of blocks, and the strategies.
 * See remat.h. */
#include "remat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"

vp_status vp_remat_parse(const char *arg, vp_remat_kind *out, vp_error *err) {
    if (!strcmp(arg, "none")) *out = VP_REMAT_NONE;
    else if (!strcmp(arg, "sqrtn")) *out = VP_REMAT_SQRTN;
    else if (!strcmp(arg, "dp")) *out = VP_REMAT_DP;
    else if (!strcmp(arg, "ilp"))
        return vp_fail(err, VP_ERR_UNSUPPORTED, "--remat ilp is not available in this build (use dp or sqrtn)");
    else return vp_fail(err, VP_ERR_USAGE, "--remat expects none, sqrtn, dp or ilp, got '%s'", arg);
    return VP_OK;
}

const char *vp_remat_name(vp_remat_kind k) {
    static const char *n[] = {"none", "sqrtn", "dp", "ilp"};
    return (int)k >= 0 && k <= VP_REMAT_ILP ? n[k] : "?";
}

/* ---- recompute insertion ---- */

typedef struct remat_ctx {
    vp_graph *g;
    const char *keep;
    int n_orig_values;
    int *copy;      /* original value -> its recomputed copy, -1 */
    int *order;     /* the new node order being built */
    int n_order;
    int n_recompute;
} remat_ctx;

static int is_forward_activation(const vp_graph *g, int v, int n_orig) {
    if (v < 0 || v >= n_orig) return 0;
    const vp_value *val = &g->values[v];
    if (val->producer < 0 || val->data) return 0;
    const vp_node *p = &g->nodes[val->producer];
    return !p->folded && p->phase == VP_PHASE_FORWARD;
}

static int needs_recompute(const remat_ctx *c, int v) {
    return is_forward_activation(c->g, v, c->n_orig_values) && !c->keep[v];
}

static vp_status recompute(remat_ctx *c, int v, int *out, vp_error *err) {
    if (c->copy[v] >= 0) {
        *out = c->copy[v];
        return VP_OK;
    }
    vp_graph *g = c->g;
    int src = g->values[v].producer;
    int n_in = g->nodes[src].n_inputs, n_out = g->nodes[src].n_outputs;
    int *ins = malloc(((size_t)n_in + 1) * sizeof *ins), *outs = malloc(((size_t)n_out + 1) * sizeof *outs);
    vp_status s = ins && outs ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < n_in && !s; k++) {
        int u = g->nodes[src].inputs[k];
        ins[k] = u;
        if (u >= 0 && needs_recompute(c, u)) s = recompute(c, u, &ins[k], err);
    }
    for (int k = 0; k < n_out && !s; k++) {
        int o = g->nodes[src].outputs[k];
        outs[k] = -1;
        if (o < 0) continue;
        char name[600];
        snprintf(name, sizeof name, "%s/recomputed", g->values[o].name);
        outs[k] = vp_graph_add_unique_value(g, name);
        if (outs[k] < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            break;
        }
        vp_value *nv = &g->values[outs[k]];
        const vp_value *ov = &g->values[o];
        nv->dtype = ov->dtype;
        nv->rank = ov->rank;
        memcpy(nv->dims, ov->dims, sizeof nv->dims);
    }
    if (!s) {
        char name[600];
        snprintf(name, sizeof name, "%s/recompute", g->nodes[src].name);
        int id = vp_graph_add_node(g, g->nodes[src].op_type, g->nodes[src].domain, name, n_in, ins, n_out, outs);
        if (id < 0 || vp_node_copy_attrs(g, id, src)) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        else {
            vp_node *n = &g->nodes[id];
            n->opset = g->nodes[src].opset;
            n->op = g->nodes[src].op;
            n->phase = VP_PHASE_RECOMPUTE;
            c->order[c->n_order++] = id;
            c->n_recompute++;
            /* every output of the copy stands for the original's (running statistics of a
             * recomputed BatchNorm go to fresh values nobody reads: no second update) */
            for (int k = 0; k < n_out; k++) {
                int o = g->nodes[src].outputs[k];
                if (o >= 0) c->copy[o] = outs[k];
            }
            *out = c->copy[v];
        }
    }
    free(ins);
    free(outs);
    return s;
}

vp_status vp_remat_apply(vp_graph *g, const char *keep, int *n_recompute, vp_error *err) {
    int n0 = g->n_nodes;
    remat_ctx c = {g, keep, g->n_values, NULL, NULL, 0, 0};
    c.copy = malloc(((size_t)g->n_values + 1) * sizeof *c.copy);
    /* at most one copy of each forward node */
    c.order = malloc(((size_t)2 * n0 + 1) * sizeof *c.order);
    if (!c.copy || !c.order) {
        free(c.copy);
        free(c.order);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int v = 0; v < g->n_values; v++) c.copy[v] = -1;
    vp_status s = VP_OK;
    for (int i = 0; i < n0 && !s; i++) {
        if (g->nodes[i].phase == VP_PHASE_BACKWARD) {
            for (int k = 0; k < g->nodes[i].n_inputs && !s; k++) {
                int v = g->nodes[i].inputs[k];
                if (v < 0 || !needs_recompute(&c, v)) continue;
                int r;
                s = recompute(&c, v, &r, err);
                if (!s) g->nodes[i].inputs[k] = r;
            }
        }
        c.order[c.n_order++] = i;
    }
    if (!s) s = vp_graph_reorder(g, c.order, err);
    if (n_recompute) *n_recompute = c.n_recompute;
    free(c.copy);
    free(c.order);
    return s;
}

/* ---- the chain of blocks ---- */

typedef struct block {
    int first, last;        /* forward positions, inclusive */
    int cut;                /* the value leaving the block (kept always), -1 for the last */
    int64_t all_bytes;      /* activations the backward reads, produced in the block */
    int64_t sel_bytes;      /* of which the outputs of expensive ops */
    double fwd_seconds, cheap_seconds;
    uint64_t signature;     /* identical blocks share a signature */
} block;

static int is_expensive(const char *op) {
    return !strcmp(op, "MatMul") || !strcmp(op, "Gemm") || !strcmp(op, "Conv") || !strcmp(op, "ConvTranspose");
}

static int needed_by_backward(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++)
        if (g->nodes[val->consumers[c]].phase == VP_PHASE_BACKWARD) return 1;
    return 0;
}

static int64_t value_bytes(const vp_graph *g, int v) {
    return vp_value_numel(&g->values[v]) * (int64_t)vp_dtype_size(g->values[v].dtype);
}

/* Forward node ids in order, and the blocks between articulation points. */
static vp_status find_blocks(const vp_graph *g, const vp_device_profile *dev, int **fwd_out, int *n_fwd_out,
                             block **blocks_out, int *n_blocks_out, vp_error *err) {
    int *fwd = malloc(((size_t)g->n_nodes + 1) * sizeof *fwd), *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
    int *cross = NULL;
    block *b = NULL;
    int nf = 0, nb = 0;
    vp_status s = fwd && pos ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < g->n_nodes; i++) {
        pos[i] = -1;
        const vp_node *n = &g->nodes[i];
        if (!n->folded && n->phase == VP_PHASE_FORWARD) {
            pos[i] = nf;
            fwd[nf++] = i;
        }
    }
    if (!s) {
        cross = calloc((size_t)nf + 1, sizeof *cross);
        b = calloc((size_t)nf + 1, sizeof *b);
        if (!cross || !b) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    /* cross[i]: forward activations live across the boundary after position i */
    for (int i = 0; !s && i < nf; i++) {
        const vp_node *n = &g->nodes[fwd[i]];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
            int last = i;
            const vp_value *val = &g->values[v];
            for (int c = 0; c < val->n_consumers; c++) {
                const vp_node *cn = &g->nodes[val->consumers[c]];
                int cp = pos[val->consumers[c]];
                if (cp < 0 && cn->phase == VP_PHASE_LOSS) cp = nf; /* the loss reads past the end */
                if (cp > last) last = cp;
            }
            for (int j = i; j < last && j < nf; j++) cross[j]++;
        }
    }
    int start = 0;
    for (int i = 0; !s && i < nf; i++) {
        int cut = -1;
        if (cross[i] == 1 && i + 1 < nf) {
            const vp_node *n = &g->nodes[fwd[i]];
            for (int k = 0; k < n->n_outputs; k++) {
                int v = n->outputs[k];
                if (v < 0) continue;
                for (int c = 0; c < g->values[v].n_consumers; c++)
                    if (pos[g->values[v].consumers[c]] > i) cut = v;
            }
        }
        if (cut < 0 && i + 1 < nf) continue;
        block *bk = &b[nb++];
        bk->first = start;
        bk->last = i;
        bk->cut = cut;
        start = i + 1;
    }
    for (int k = 0; !s && k < nb; k++) {
        block *bk = &b[k];
        uint64_t h = 1469598103934665603ull;
        for (int i = bk->first; i <= bk->last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            vp_node_cost c = vp_cost_node(g, n);
            double t = vp_cost_seconds(&c, dev, 0);
            bk->fwd_seconds += t;
            if (!is_expensive(n->op_type)) bk->cheap_seconds += t;
            for (const char *p = n->op_type; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o];
                if (v < 0) continue;
                h = (h ^ (uint64_t)value_bytes(g, v)) * 1099511628211ull;
                if (v == bk->cut || !needed_by_backward(g, v)) continue;
                bk->all_bytes += value_bytes(g, v);
                if (is_expensive(n->op_type)) bk->sel_bytes += value_bytes(g, v);
            }
        }
        bk->signature = h;
    }
    free(pos);
    free(cross);
    if (s) {
        free(fwd);
        free(b);
        return s;
    }
    *fwd_out = fwd;
    *n_fwd_out = nf;
    *blocks_out = b;
    *n_blocks_out = nb;
    return VP_OK;
}

enum { OPT_ALL = 0, OPT_SELECTIVE, OPT_NONE, N_OPTS };
static const char opt_letter[N_OPTS] = {'A', 'S', 'N'};

static int64_t opt_kept(const block *b, int o) { return o == OPT_ALL ? b->all_bytes : o == OPT_SELECTIVE ? b->sel_bytes : 0; }
static double opt_time(const block *b, int o) { return o == OPT_ALL ? 0 : o == OPT_SELECTIVE ? b->cheap_seconds : b->fwd_seconds; }

/* keep[] from one option per block (cuts always kept); sqrtn passes choice NULL. */
static void keep_from_choice(const vp_graph *g, const int *fwd, const block *b, int nb, const int *choice, char *keep) {
    for (int v = 0; v < g->n_values; v++) keep[v] = 1;
    for (int k = 0; k < nb; k++) {
        int o = choice ? choice[k] : OPT_NONE;
        if (o == OPT_ALL) continue;
        for (int i = b[k].first; i <= b[k].last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            if (o == OPT_SELECTIVE && is_expensive(n->op_type)) continue;
            for (int j = 0; j < n->n_outputs; j++)
                if (n->outputs[j] >= 0 && n->outputs[j] != b[k].cut) keep[n->outputs[j]] = 0;
        }
    }
}

/* Minimises recompute time subject to  base + sum(kept) + max(all - kept) <= budget:
 * for each candidate working set W, a knapsack over blocks in Q memory units. */
static int dp_choose(const block *b, int nb, int64_t room, int *choice) {
    enum { Q = 1024 };
    int64_t total_all = 0;
    for (int k = 0; k < nb; k++) total_all += b[k].all_bytes;
    if (room < 0) return 0;
    double unit = (double)(total_all > 0 ? total_all : 1) / Q;
    /* candidate W: distinct working sets of the options */
    int64_t *ws = malloc(((size_t)nb * N_OPTS + 1) * sizeof *ws);
    int nw = 0;
    for (int k = 0; k < nb; k++)
        for (int o = 0; o < N_OPTS; o++) {
            int64_t w = b[k].all_bytes - opt_kept(&b[k], o), seen = 0;
            for (int i = 0; i < nw && !seen; i++) seen = ws[i] == w;
            if (!seen) ws[nw++] = w;
        }
    double *dp = malloc((size_t)(Q + 1) * sizeof *dp), *nx = malloc((size_t)(Q + 1) * sizeof *nx);
    unsigned char *pick = malloc((size_t)nb * (Q + 1));
    double best = INFINITY;
    int found = 0;
    for (int wi = 0; wi < nw; wi++) {
        int64_t cap_bytes = room - ws[wi];
        if (cap_bytes < 0) continue;
        int cap = cap_bytes / unit > Q ? Q : (int)(cap_bytes / unit);
        for (int m = 0; m <= Q; m++) dp[m] = m == 0 ? 0 : INFINITY;
        for (int k = 0; k < nb; k++) {
            for (int m = 0; m <= Q; m++) nx[m] = INFINITY;
            for (int m = 0; m <= cap; m++) {
                if (dp[m] == INFINITY) continue;
                for (int o = 0; o < N_OPTS; o++) {
                    if (b[k].all_bytes - opt_kept(&b[k], o) > ws[wi]) continue;
                    int cost = (int)ceil((double)opt_kept(&b[k], o) / unit);
                    int m2 = m + cost;
                    if (m2 > cap) continue;
                    double t = dp[m] + opt_time(&b[k], o);
                    if (t < nx[m2]) {
                        nx[m2] = t;
                        pick[(size_t)k * (Q + 1) + m2] = (unsigned char)o;
                    }
                }
            }
            memcpy(dp, nx, (size_t)(Q + 1) * sizeof *dp);
        }
        int bm = -1;
        for (int m = 0; m <= cap; m++)
            if (dp[m] < INFINITY && (bm < 0 || dp[m] < dp[bm])) bm = m;
        if (bm < 0 || dp[bm] >= best) continue;
        /* walk back: recover the picks by re-running the recurrence backwards */
        best = dp[bm];
        found = 1;
        int m = bm;
        for (int k = nb - 1; k >= 0; k--) {
            int o = pick[(size_t)k * (Q + 1) + m];
            choice[k] = o;
            m -= (int)ceil((double)opt_kept(&b[k], o) / unit);
            if (m < 0) m = 0;
        }
    }
    free(ws);
    free(dp);
    free(nx);
    free(pick);
    return found;
}

/* ---- planning with checkpointing ---- */

static double step_seconds(const vp_graph *g, const vp_device_profile *dev, vp_phase only, int all) {
    double t = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || (!all && n->phase != only)) continue;
        vp_node_cost c = vp_cost_node(g, n);
        t += vp_cost_seconds(&c, dev, 0);
    }
    return t;
}

/* Clones g, applies keep, plans.  On success *out is the clone and p the plan. */
static vp_status plan_candidate(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused,
                                const char *keep, vp_graph **out, vp_plan *p, int *n_recompute, vp_error *err) {
    vp_graph *c = vp_graph_clone(g);
    if (!c) return vp_fail(err, VP_ERR_NOMEM, "out of memory copying the graph");
    vp_status s = vp_remat_apply(c, keep, n_recompute, err);
    if (!s) s = vp_plan_build(p, c, t, dev, fused, err);
    if (s) {
        vp_plan_free(p);
        vp_graph_free(c);
        return s;
    }
    *out = c;
    return VP_OK;
}

vp_status vp_plan_with_remat(vp_graph *g, const vp_training *t, const vp_device_profile *dev, int fused, int64_t budget,
                             vp_remat_kind kind, vp_graph **planned, vp_plan *p, vp_remat_result *r, vp_error *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r->forward_seconds = step_seconds(g, dev, VP_PHASE_FORWARD, 0);
    *planned = g;
    vp_status s;
    if (kind == VP_REMAT_NONE) {
        s = vp_plan_build(p, g, t, dev, fused, err);
        r->step_seconds = step_seconds(g, dev, 0, 1);
        r->fits = !budget || p->arena_bytes <= budget;
        return s;
    }
    int *fwd = NULL, nf = 0, nb = 0;
    block *b = NULL;
    s = find_blocks(g, dev, &fwd, &nf, &b, &nb, err);
    if (s) return s;
    r->n_blocks = nb;
    for (int k = 0; k < nb; k++) {
        int dup = 0;
        for (int j = 0; j < k && !dup; j++) dup = b[j].signature == b[k].signature;
        r->n_distinct_blocks += !dup;
    }
    char *keep = malloc((size_t)g->n_values + 1);
    int *choice = malloc(((size_t)nb + 1) * sizeof *choice);
    if (!keep || !choice) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_graph *best_g = NULL;
    if (!s && kind == VP_REMAT_SQRTN) {
        /* keep every stride-th cut (all other activations recomputed segment by segment) */
        int stride = (int)ceil(sqrt((double)(nb > 0 ? nb : 1)));
        keep_from_choice(g, fwd, b, nb, NULL, keep);
        for (int k = 0; k < nb; k++)
            if (b[k].cut >= 0 && (k + 1) % stride != 0) keep[b[k].cut] = 0;
        s = plan_candidate(g, t, dev, fused, keep, &best_g, p, &r->n_recompute, err);
        r->iterations = 1;
    } else if (!s && budget > 0 && vp_plan_build(p, g, t, dev, fused, err) == VP_OK && p->arena_bytes <= budget) {
        best_g = g; /* keeping everything fits: nothing to recompute */
        r->iterations = 1;
        for (int k = 0; k < nb && k + 1 < (int)sizeof r->choice; k++) r->choice[k] = 'A';
    } else if (!s) {
        vp_plan_free(p);
        /* calibrate the estimate on a real plan that keeps nothing it can recompute */
        vp_plan lo;
        vp_graph *lo_g = NULL;
        for (int k = 0; k < nb; k++) choice[k] = OPT_NONE;
        keep_from_choice(g, fwd, b, nb, choice, keep);
        s = plan_candidate(g, t, dev, fused, keep, &lo_g, &lo, &r->n_recompute, err);
        int64_t max_all = 0;
        for (int k = 0; k < nb; k++)
            if (b[k].all_bytes > max_all) max_all = b[k].all_bytes;
        int64_t base = s ? 0 : lo.arena_bytes - max_all;
        int64_t target = budget > 0 ? budget : INT64_MAX / 4;
        int done = 0;
        for (int it = 0; !s && !done && it < 8; it++) {
            r->iterations++;
            if (!dp_choose(b, nb, target - base, choice)) break;
            keep_from_choice(g, fwd, b, nb, choice, keep);
            vp_plan cand;
            vp_graph *cg = NULL;
            int nr = 0;
            s = plan_candidate(g, t, dev, fused, keep, &cg, &cand, &nr, err);
            if (s) break;
            if (!budget || cand.arena_bytes <= budget) {
                *p = cand;
                best_g = cg;
                r->n_recompute = nr;
                done = 1;
                size_t used = 0;
                for (int k = 0; k < nb && used + 3 < sizeof r->choice; k++)
                    used += (size_t)snprintf(r->choice + used, sizeof r->choice - used, "%c", opt_letter[choice[k]]);
            } else {
                target -= cand.arena_bytes - budget; /* the estimate was optimistic by that much */
                vp_plan_free(&cand);
                vp_graph_free(cg);
            }
        }
        if (!s && !done) { /* nothing fits: the smallest plan we know, reported as over budget */
            *p = lo;
            best_g = lo_g;
            lo_g = NULL;
            for (int k = 0; k < nb && k + 1 < (int)sizeof r->choice; k++) r->choice[k] = 'N';
        } else if (lo_g) {
            vp_plan_free(&lo);
            vp_graph_free(lo_g);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!s) {
        p->planning_seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        *planned = best_g;
        r->step_seconds = step_seconds(best_g, dev, 0, 1);
        r->recompute_seconds = step_seconds(best_g, dev, VP_PHASE_RECOMPUTE, 0);
        r->fits = !budget || p->arena_bytes <= budget;
    }
    free(keep);
    free(choice);
    free(fwd);
    free(b);
    return s;
}
