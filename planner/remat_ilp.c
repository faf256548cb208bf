/* Checkpointing as Checkmate's MILP (Jain et al. 2020), solved exactly with GLPK: the
 * optimality reference for dp on graphs small enough for it to finish.
 *
 * The forward pass runs once as scheduled; the backward pass is cut into stages, one per
 * backward node that reads a forward activation.  Per stage t and modelled forward node i:
 *   S[t,i]       i's outputs are resident when stage t begins (S[0,i]: kept from the forward)
 *   R[t,i]       i is recomputed in stage t, right before the stage's backward node
 *   FREE[t,i,k]  i's outputs are freed once k has been recomputed in stage t
 *   P[t,j]       live modelled MiB while the stage's j-th candidate is computed
 * minimise  sum cost_i R[t,i]  subject to
 *   R[t,k] <= R[t,j] + S[t,j]        every forward input j of k is there to recompute k
 *   R[t,j] + S[t,j] >= 1             the stage's backward node reads j
 *   S[t+1,i] <= S[t,i] + R[t,i]      nothing becomes resident without being computed
 *   FREE[t,i,k] <= R[t,k], 1 - S[t+1,i], 1 - R[t,j] for each later recomputed user j of i
 *   P[t,*] + base(t) <= budget, and likewise the forward pass and the gaps between stages.
 * Checkmate's FREE linearisation is split into one row per hazard so FREE can be
 * continuous: with R and S integral each row pins it to 0 or lets it reach 1.
 *
 * Memory that recomputation does not change (parameters, gradients, optimizer state,
 * loss values) is read off the un-checkpointed plan step by step.  Like Checkmate's, the
 * model counts every output at its full size without in-place reuse, so the real arena
 * of a schedule is at most the model's peak; the caller checks the real arena anyway. */
#include <glpk.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cost.h"
#include "remat.h"

const char *vp_ilp_status_name(vp_ilp_status s) {
    static const char *n[] = {"not run", "optimal", "time limit, best found", "infeasible", "time limit, no solution",
                              "too large"};
    return (int)s >= 0 && s <= VP_ILP_TOO_LARGE ? n[s] : "?";
}

/* Past these the MILP is not built: GLPK would not finish anyway. */
enum { MAX_BINARIES = 200000, MAX_CELLS = 4000000 };

typedef struct ivec {
    int *a;
    int n, cap;
} ivec;

static int ivec_push(ivec *v, int x) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        int *a = realloc(v->a, (size_t)cap * sizeof *a);
        if (!a) return 0;
        v->a = a;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return 1;
}

typedef struct model {
    int n;               /* modelled forward nodes, in forward order */
    int *node;           /* modelled index -> graph node */
    int *mi;             /* graph node -> modelled index, -1 */
    double *mem, *cost;  /* MiB, microseconds */
    int *pos, *fwd_last; /* step of the node; last step before the backward reading it */
    ivec *deps, *users;  /* per modelled node, modelled indices */
    int fr_end;          /* the first backward step */
    int n_steps;
    double *base;        /* MiB live per step outside the model */
    int T;               /* stages */
    ivec stage_step, read_start, read, cand_start, cand;
    int *last_t;         /* the last stage where a node is a candidate */
} model;

static void model_free(model *m) {
    for (int i = 0; i < m->n && m->deps; i++) free(m->deps[i].a);
    for (int i = 0; i < m->n && m->users; i++) free(m->users[i].a);
    free(m->deps); free(m->users);
    free(m->node); free(m->mi); free(m->mem); free(m->cost); free(m->pos); free(m->fwd_last); free(m->base);
    free(m->stage_step.a); free(m->read_start.a); free(m->read.a); free(m->cand_start.a); free(m->cand.a);
    free(m->last_t);
}

static int root_of(const vp_plan *p, int b) {
    while (p->buffers[b].alias_of >= 0) b = p->buffers[b].alias_of;
    return b;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Which nodes are modelled: forward nodes the backward reads and their forward
 * ancestors, stopping at nodes whose outputs outlive the step (graph outputs). */
static int pick_nodes(model *m, const vp_graph *g, const vp_plan *p0, const int *step_of) {
    int nn = g->n_nodes;
    char *pinned = calloc((size_t)nn + 1, 1), *want = calloc((size_t)nn + 1, 1);
    int *stack = malloc(((size_t)nn + 1) * sizeof *stack), top = 0;
    int ok = pinned && want && stack;
    for (int i = 0; ok && i < nn; i++) {
        const vp_node *n = &g->nodes[i];
        pinned[i] = n->folded || n->phase != VP_PHASE_FORWARD || step_of[i] < 0;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && (g->values[n->outputs[k]].flags & VP_VAL_OUTPUT)) pinned[i] = 1;
    }
    for (int k = m->fr_end; ok && k < p0->n_steps; k++) {
        const vp_node *b = &g->nodes[p0->steps[k]];
        for (int j = 0; b->phase == VP_PHASE_BACKWARD && j < b->n_inputs; j++) {
            int f = b->inputs[j] >= 0 ? g->values[b->inputs[j]].producer : -1;
            if (f >= 0 && !pinned[f] && !want[f]) want[f] = 1, stack[top++] = f;
        }
    }
    while (ok && top > 0) {
        const vp_node *n = &g->nodes[stack[--top]];
        for (int j = 0; j < n->n_inputs; j++) {
            int f = n->inputs[j] >= 0 ? g->values[n->inputs[j]].producer : -1;
            if (f >= 0 && !pinned[f] && !want[f]) want[f] = 1, stack[top++] = f;
        }
    }
    for (int i = 0; ok && i < nn; i++) m->n += want[i];
    m->node = ok ? malloc(((size_t)m->n + 1) * sizeof *m->node) : NULL;
    ok = ok && m->node;
    /* the graph keeps forward nodes in forward (topological) order */
    for (int i = 0, k = 0; ok && i < nn; i++)
        if (want[i]) m->mi[i] = k, m->node[k++] = i;
    free(pinned);
    free(want);
    free(stack);
    return ok;
}

static vp_status model_build(model *m, const vp_graph *g, const vp_plan *p0, const vp_training *t,
                             const vp_device_profile *dev, vp_ilp_status *too_large, vp_error *err) {
    memset(m, 0, sizeof *m);
    *too_large = VP_ILP_NOT_RUN;
    int nn = g->n_nodes, nv = g->n_values, ns = p0->n_steps;
    m->n_steps = ns;
    int *step_of = malloc(((size_t)nn + 1) * sizeof *step_of);
    char *carried = calloc((size_t)nv + 1, 1), *counted = calloc((size_t)nv + 1, 1);
    m->mi = malloc(((size_t)nn + 1) * sizeof *m->mi);
    double *diff = calloc((size_t)ns + 2, sizeof *diff);
    int *stamp = NULL, *stack = NULL;
    if (!step_of || !carried || !counted || !m->mi || !diff) goto nomem;
    for (int i = 0; i < nn; i++) step_of[i] = -1, m->mi[i] = -1;
    for (int k = 0; k < ns; k++) step_of[p0->steps[k]] = k;
    for (int c = 0; t && c < t->n_carry; c++)
        if (t->carry[c].to >= 0) carried[t->carry[c].to] = 1;
    m->fr_end = ns;
    for (int k = 0; k < ns && m->fr_end == ns; k++)
        if (g->nodes[p0->steps[k]].phase == VP_PHASE_BACKWARD) m->fr_end = k;
    if (!pick_nodes(m, g, p0, step_of)) goto nomem;

    int n = m->n;
    m->mem = calloc((size_t)n + 1, sizeof *m->mem);
    m->cost = calloc((size_t)n + 1, sizeof *m->cost);
    m->pos = malloc(((size_t)n + 1) * sizeof *m->pos);
    m->fwd_last = malloc(((size_t)n + 1) * sizeof *m->fwd_last);
    m->deps = calloc((size_t)n + 1, sizeof *m->deps);
    m->users = calloc((size_t)n + 1, sizeof *m->users);
    m->base = calloc((size_t)ns + 1, sizeof *m->base);
    m->last_t = malloc(((size_t)n + 1) * sizeof *m->last_t);
    if (!m->mem || !m->cost || !m->pos || !m->fwd_last || !m->deps || !m->users || !m->base || !m->last_t) goto nomem;
    const double mib = 1.0 / 1048576.0;
    for (int i = 0; i < n; i++) {
        const vp_node *nd = &g->nodes[m->node[i]];
        vp_node_cost c = vp_cost_node(g, nd);
        m->cost[i] = 1e6 * vp_cost_seconds(&c, dev, 0);
        m->pos[i] = m->fwd_last[i] = step_of[m->node[i]];
        m->last_t[i] = -1;
        /* carried state (BatchNorm's running statistics) lives the whole step anyway */
        for (int k = 0; k < nd->n_outputs; k++) {
            int v = nd->outputs[k];
            if (v < 0 || carried[v] || p0->buffer_of[v] < 0) continue;
            counted[v] = 1;
            m->mem[i] += (double)p0->buffers[p0->buffer_of[v]].size * mib;
            for (int c2 = 0; c2 < g->values[v].n_consumers; c2++) {
                int cs = step_of[g->values[v].consumers[c2]];
                if (cs >= 0 && cs < m->fr_end && cs > m->fwd_last[i]) m->fwd_last[i] = cs;
            }
        }
        for (int j = 0; j < nd->n_inputs; j++) {
            int f = nd->inputs[j] >= 0 ? g->values[nd->inputs[j]].producer : -1;
            int d = f >= 0 ? m->mi[f] : -1, seen = 0;
            for (int q = 0; d >= 0 && q < m->deps[i].n; q++) seen |= m->deps[i].a[q] == d;
            if (d >= 0 && !seen && (!ivec_push(&m->deps[i], d) || !ivec_push(&m->users[d], i))) goto nomem;
        }
    }
    /* the rest of the memory, step by step: every buffer the model does not count (an
     * in-place output over a modelled activation counts on its own lifetime) */
    for (int b = 0; b < p0->n_buffers; b++) {
        const vp_buffer *bf = &p0->buffers[b];
        if (counted[bf->value]) continue;
        if (bf->alias_of >= 0 && !counted[p0->buffers[root_of(p0, b)].value]) continue;
        diff[bf->first] += (double)bf->size * mib;
        diff[bf->last + 1] -= (double)bf->size * mib;
    }
    for (int k = 0; k < ns; k++) m->base[k] = (k ? m->base[k - 1] : 0) + diff[k];

    /* stages: backward nodes reading modelled nodes; candidates: the reads' ancestors */
    stamp = malloc(((size_t)n + 1) * sizeof *stamp);
    stack = malloc(((size_t)n + 1) * sizeof *stack);
    if (!stamp || !stack) goto nomem;
    for (int i = 0; i < n; i++) stamp[i] = -1;
    long binaries = 0;
    for (int k = m->fr_end; k < ns; k++) {
        const vp_node *b = &g->nodes[p0->steps[k]];
        if (b->phase != VP_PHASE_BACKWARD) continue;
        int t0 = m->T, r0 = m->read.n, top = 0;
        for (int j = 0; j < b->n_inputs; j++) {
            int f = b->inputs[j] >= 0 ? g->values[b->inputs[j]].producer : -1;
            int d = f >= 0 ? m->mi[f] : -1;
            if (d < 0 || stamp[d] == t0) continue;
            stamp[d] = t0;
            stack[top++] = d;
            if (!ivec_push(&m->read, d)) goto nomem;
        }
        if (m->read.n == r0) continue;
        if (!ivec_push(&m->stage_step, k) || !ivec_push(&m->read_start, r0) || !ivec_push(&m->cand_start, m->cand.n))
            goto nomem;
        while (top > 0) {
            int i = stack[--top];
            if (!ivec_push(&m->cand, i)) goto nomem;
            m->last_t[i] = t0;
            for (int q = 0; q < m->deps[i].n; q++) {
                int d = m->deps[i].a[q];
                if (stamp[d] != t0) stamp[d] = t0, stack[top++] = d;
            }
        }
        int c0 = m->cand_start.a[t0];
        qsort(m->cand.a + c0, (size_t)(m->cand.n - c0), sizeof *m->cand.a, cmp_int);
        m->T++;
        binaries += 2L * (m->cand.n - c0);
        if (binaries > MAX_BINARIES || (long)m->T * n > MAX_CELLS || (long)n * m->fr_end > MAX_CELLS) {
            *too_large = VP_ILP_TOO_LARGE;
            break;
        }
    }
    if (!ivec_push(&m->read_start, m->read.n) || !ivec_push(&m->cand_start, m->cand.n)) goto nomem;
    free(step_of); free(carried); free(counted); free(diff); free(stamp); free(stack);
    return VP_OK;
nomem:
    free(step_of); free(carried); free(counted); free(diff); free(stamp); free(stack);
    return vp_fail(err, VP_ERR_NOMEM, "out of memory building the checkpointing MILP");
}

/* ---- the MILP in GLPK's triplet form ---- */

typedef struct lp {
    glp_prob *p;
    int *ia, *ja;
    double *ar;
    int ne, cap;
    int ok;
} lp;

static int lp_col(lp *l, int binary, double ub, double obj) {
    int j = glp_add_cols(l->p, 1);
    if (binary) glp_set_col_kind(l->p, j, GLP_BV);
    else glp_set_col_bnds(l->p, j, ub == 1.0 ? GLP_DB : GLP_UP, 0.0, ub);
    glp_set_obj_coef(l->p, j, obj);
    return j;
}

static int lp_row(lp *l, int type, double lb, double ub) {
    int i = glp_add_rows(l->p, 1);
    glp_set_row_bnds(l->p, i, type, lb, ub);
    return i;
}

static void lp_coef(lp *l, int row, int col, double v) {
    if (!l->ok || v == 0.0 || col <= 0) return;
    if (l->ne + 1 >= l->cap) {
        int cap = l->cap ? 2 * l->cap : 4096;
        int *ia = realloc(l->ia, (size_t)cap * sizeof *ia);
        if (ia) l->ia = ia;
        int *ja = realloc(l->ja, (size_t)cap * sizeof *ja);
        if (ja) l->ja = ja;
        double *ar = realloc(l->ar, (size_t)cap * sizeof *ar);
        if (ar) l->ar = ar;
        if (!ia || !ja || !ar) {
            l->ok = 0;
            return;
        }
        l->cap = cap;
    }
    l->ne++; /* GLPK's arrays are 1-based */
    l->ia[l->ne] = row;
    l->ja[l->ne] = col;
    l->ar[l->ne] = v;
}

typedef struct cols {
    int *s;  /* S[t,i] = s[i] + t for t <= last_t[i] */
    int *r;  /* parallel to cand */
    int *rmap; /* the current stage's R column per node, 0 */
} cols;

static int s_col(const model *m, const cols *c, int t, int i) { return t <= m->last_t[i] ? c->s[i] + t : 0; }

/* Rows of the forward pass: what is live at each forward step, the kept outputs
 * (S[0,i]) staying on after their last forward reader.  Returns 0 when a step is over
 * the budget whatever is kept. */
static int add_forward_rows(lp *l, const model *m, const cols *c, double M) {
    for (int k = 0; k < m->fr_end; k++) {
        double fixed = m->base[k];
        int row = 0;
        for (int i = 0; i < m->n; i++) {
            if (m->pos[i] > k) continue;
            if (k <= m->fwd_last[i]) fixed += m->mem[i];
            else {
                if (!row) row = lp_row(l, GLP_UP, 0, 0);
                lp_coef(l, row, s_col(m, c, 0, i), m->mem[i]);
            }
        }
        if (fixed > M) return 0;
        if (row) glp_set_row_bnds(l->p, row, GLP_UP, 0, M - fixed);
    }
    return 1;
}

static int add_stage_rows(lp *l, const model *m, cols *c, int t, double M, char *reads) {
    int c0 = m->cand_start.a[t], c1 = m->cand_start.a[t + 1];
    int st = m->stage_step.a[t], prev = t ? m->stage_step.a[t - 1] : m->fr_end - 1;
    double cap = M - m->base[st];
    if (cap < 0) return 0;
    for (int q = c0; q < c1; q++) c->rmap[m->cand.a[q]] = c->r[q];
    for (int q = m->read_start.a[t]; q < m->read_start.a[t + 1]; q++) {
        int j = m->read.a[q], row = lp_row(l, GLP_LO, 1, 0);
        reads[j] = 1;
        lp_coef(l, row, c->rmap[j], 1);
        lp_coef(l, row, s_col(m, c, t, j), 1);
    }
    for (int q = c0; q < c1; q++) {
        int k = m->cand.a[q], row = lp_row(l, GLP_UP, 0, 1);
        lp_coef(l, row, c->rmap[k], 1);
        lp_coef(l, row, s_col(m, c, t, k), 1);
        for (int d = 0; d < m->deps[k].n; d++) {
            int j = m->deps[k].a[d];
            row = lp_row(l, GLP_UP, 0, 0);
            lp_coef(l, row, c->rmap[k], 1);
            lp_coef(l, row, c->rmap[j], -1);
            lp_coef(l, row, s_col(m, c, t, j), -1);
        }
    }
    /* residency into the next stage, and the gap before this one */
    double gap = -1;
    for (int k = prev + 1; k < st; k++)
        if (m->base[k] > gap) gap = m->base[k];
    if (gap > M) return 0;
    int gap_row = gap >= 0 ? lp_row(l, GLP_UP, 0, M - gap) : 0;
    int p_row = lp_row(l, GLP_FX, 0, 0); /* P_0 = resident + the first candidate */
    for (int i = 0; i < m->n; i++) {
        if (t > m->last_t[i]) continue;
        if (gap_row) lp_coef(l, gap_row, s_col(m, c, t, i), m->mem[i]);
        lp_coef(l, p_row, s_col(m, c, t, i), -m->mem[i]);
        if (t + 1 <= m->last_t[i]) {
            int row = lp_row(l, GLP_UP, 0, 0);
            lp_coef(l, row, s_col(m, c, t + 1, i), 1);
            lp_coef(l, row, s_col(m, c, t, i), -1);
            if (c->rmap[i]) lp_coef(l, row, c->rmap[i], -1);
        }
    }
    /* the chain of P: computing candidate q adds its outputs (to the row that defines the
     * P it is computed under), then frees what it was the last in the stage to need */
    int p = lp_col(l, 0, cap, 0);
    lp_coef(l, p_row, p, 1);
    for (int q = c0; q < c1; q++) {
        int k = m->cand.a[q];
        lp_coef(l, p_row, c->rmap[k], -m->mem[k]);
        int next = lp_col(l, 0, cap, 0);
        int chain = lp_row(l, GLP_FX, 0, 0); /* next = p - freed + mem(next candidate) */
        lp_coef(l, chain, next, 1);
        lp_coef(l, chain, p, -1);
        for (int d = -1; d < m->deps[k].n; d++) {
            int i = d < 0 ? k : m->deps[k].a[d];
            if (reads[i]) continue; /* the backward node still needs it */
            int f = lp_col(l, 0, 1.0, 0);
            lp_coef(l, chain, f, m->mem[i]);
            int row = lp_row(l, GLP_UP, 0, 0);
            lp_coef(l, row, f, 1);
            lp_coef(l, row, c->rmap[k], -1);
            if (t + 1 <= m->last_t[i]) {
                row = lp_row(l, GLP_UP, 0, 1);
                lp_coef(l, row, f, 1);
                lp_coef(l, row, s_col(m, c, t + 1, i), 1);
            }
            for (int u = 0; u < m->users[i].n; u++) {
                int j = m->users[i].a[u];
                if (j <= k || !c->rmap[j]) continue;
                row = lp_row(l, GLP_UP, 0, 1);
                lp_coef(l, row, f, 1);
                lp_coef(l, row, c->rmap[j], 1);
            }
        }
        p_row = chain;
        p = next;
    }
    for (int q = m->read_start.a[t]; q < m->read_start.a[t + 1]; q++) reads[m->read.a[q]] = 0;
    for (int q = c0; q < c1; q++) c->rmap[m->cand.a[q]] = 0;
    return 1;
}

typedef struct bound_watch {
    double bound;
} bound_watch;

/* The best bound among the open branch-and-bound nodes: a proven lower bound. */
static void watch_bound(glp_tree *tree, void *info) {
    bound_watch *w = info;
    int r = glp_ios_reason(tree);
    if (r != GLP_ISELECT && r != GLP_IBINGO && r != GLP_IROWGEN) return;
    int best = glp_ios_best_node(tree);
    if (best) w->bound = glp_ios_node_bound(tree, best);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

vp_status vp_remat_ilp_solve(const vp_graph *g, const vp_plan *p0, const vp_training *t, const vp_device_profile *dev,
                             int64_t budget, double time_limit, vp_remat_schedule *out, vp_ilp_stats *st, vp_error *err) {
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    model m;
    vp_ilp_status size_status;
    vp_status s = model_build(&m, g, p0, t, dev, &size_status, err);
    if (s || size_status == VP_ILP_TOO_LARGE) {
        st->status = size_status;
        st->n_binary = 2 * m.cand.n;
        model_free(&m);
        return s;
    }
    lp l = {glp_create_prob(), NULL, NULL, NULL, 0, 0, 1};
    cols c = {malloc(((size_t)m.n + 1) * sizeof *c.s), malloc(((size_t)m.cand.n + 1) * sizeof *c.r),
              calloc((size_t)m.n + 1, sizeof *c.rmap)};
    char *reads = calloc((size_t)m.n + 1, 1);
    if (!c.s || !c.r || !c.rmap || !reads) l.ok = 0;
    glp_set_obj_dir(l.p, GLP_MIN);
    double M = (double)budget / 1048576.0;
    int feasible = 1;
    for (int i = 0; l.ok && i < m.n; i++) {
        c.s[i] = 0;
        for (int tt = 0; tt <= m.last_t[i]; tt++) {
            int j = lp_col(&l, 1, 1, 0);
            if (!tt) c.s[i] = j;
        }
    }
    for (int q = 0; l.ok && q < m.cand.n; q++) c.r[q] = 0;
    for (int tt = 0; l.ok && tt < m.T; tt++)
        for (int q = m.cand_start.a[tt]; q < m.cand_start.a[tt + 1]; q++) c.r[q] = lp_col(&l, 1, 1, m.cost[m.cand.a[q]]);
    if (l.ok) feasible = add_forward_rows(&l, &m, &c, M);
    for (int tt = 0; l.ok && feasible && tt < m.T; tt++) feasible = add_stage_rows(&l, &m, &c, tt, M, reads);
    /* after the last stage only unmodelled memory is live */
    for (int k = m.T ? m.stage_step.a[m.T - 1] + 1 : m.fr_end; feasible && k < m.n_steps; k++)
        if (m.base[k] > M) feasible = 0;
    st->n_binary = glp_get_num_int(l.p);
    st->n_continuous = glp_get_num_cols(l.p) - st->n_binary;
    st->n_rows = glp_get_num_rows(l.p);
    st->n_nonzeros = l.ne;
    if (!l.ok) s = vp_fail(err, VP_ERR_NOMEM, "out of memory building the checkpointing MILP");
    else if (!feasible) st->status = VP_ILP_INFEASIBLE;
    else {
        glp_load_matrix(l.p, l.ne, l.ia, l.ja, l.ar);
        bound_watch w = {0};
        /* the root relaxation first, under the time limit too (glp_intopt's own limit
         * starts counting only at branch and bound) */
        glp_smcp lpp;
        glp_init_smcp(&lpp);
        lpp.presolve = GLP_ON;
        lpp.msg_lev = GLP_MSG_OFF;
        double left = time_limit - seconds_since(&t0);
        lpp.tm_lim = left > 0.001 ? (int)(left * 1000) : 1;
        int was = glp_term_out(GLP_OFF);
        int ret = glp_simplex(l.p, &lpp);
        if (!ret && glp_get_status(l.p) == GLP_OPT) {
            w.bound = glp_get_obj_val(l.p); /* the root relaxation bounds the optimum */
            glp_iocp parm;
            glp_init_iocp(&parm);
            parm.msg_lev = GLP_MSG_OFF;
            parm.mir_cuts = GLP_ON;
            parm.gmi_cuts = GLP_ON;
            parm.cov_cuts = GLP_ON;
            parm.clq_cuts = GLP_ON;
            parm.fp_heur = GLP_ON;
            left = time_limit - seconds_since(&t0);
            parm.tm_lim = left > 0.001 ? (int)(left * 1000) : 1;
            parm.cb_func = watch_bound;
            parm.cb_info = &w;
            ret = glp_intopt(l.p, &parm);
        } else if (!ret && (glp_get_status(l.p) == GLP_NOFEAS || glp_get_prim_stat(l.p) == GLP_NOFEAS)) {
            ret = GLP_ENOPFS;
        }
        glp_term_out(was);
        int mip = glp_mip_status(l.p);
        if (mip == GLP_OPT) st->status = VP_ILP_OPTIMAL;
        else if (mip == GLP_FEAS) st->status = VP_ILP_FEASIBLE;
        else if (ret == GLP_ENOPFS || mip == GLP_NOFEAS) st->status = VP_ILP_INFEASIBLE;
        else if (ret == GLP_ETMLIM) st->status = VP_ILP_NO_SOLUTION;
        else s = vp_fail(err, VP_ERR_RUNTIME, "GLPK failed solving the checkpointing MILP (code %d)", ret);
        if (st->status == VP_ILP_OPTIMAL || st->status == VP_ILP_FEASIBLE) {
            st->objective_seconds = glp_mip_obj_val(l.p) * 1e-6;
            st->bound_seconds = (st->status == VP_ILP_OPTIMAL ? glp_mip_obj_val(l.p) : w.bound) * 1e-6;
            if (st->bound_seconds > st->objective_seconds) st->bound_seconds = st->objective_seconds;
            out->stage_node = malloc(((size_t)m.T + 1) * sizeof *out->stage_node);
            out->start = malloc(((size_t)m.T + 2) * sizeof *out->start);
            out->nodes = malloc(((size_t)m.cand.n + 1) * sizeof *out->nodes);
            if (!out->stage_node || !out->start || !out->nodes)
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory reading the MILP's solution");
            if (!s) out->start[0] = 0;
            for (int tt = 0; !s && tt < m.T; tt++) {
                out->stage_node[tt] = p0->steps[m.stage_step.a[tt]];
                int w = out->start[tt];
                for (int q = m.cand_start.a[tt]; q < m.cand_start.a[tt + 1]; q++)
                    if (glp_mip_col_val(l.p, c.r[q]) > 0.5) out->nodes[w++] = m.node[m.cand.a[q]];
                out->start[tt + 1] = w;
            }
            if (!s) out->n_stages = m.T;
            else vp_remat_schedule_free(out);
        }
    }
    st->solve_seconds = seconds_since(&t0);
    glp_delete_prob(l.p);
    free(l.ia); free(l.ja); free(l.ar);
    free(c.s); free(c.r); free(c.rmap); free(reads);
    model_free(&m);
    return s;
}
