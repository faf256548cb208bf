/* Checkpointing as Checkmate's MILP (Jain et al. 2020), solved exactly with GLPK: the
 * optimality reference for dp on graphs small enough for it to finish.
 *
 * The forward pass runs once as scheduled; the backward pass is cut into stages, one per
 * backward node that reads a forward activation.  Per stage t, modelled forward node i
 * and slot q (a node's outputs the backward reads, or those only the forward reads;
 * see remat_ilp.h), node(q) being the node that produces q:
 *   S[t,q]       q is resident when stage t begins (S[0,q]: kept from the forward)
 *   R[t,i]       i is recomputed in stage t, right before the stage's backward node
 *   FREE[t,q,k]  q is freed once k has been recomputed in stage t
 *   P[t,j]       live modelled MiB while the stage's j-th candidate is computed
 * minimise  sum cost_i R[t,i]  subject to
 *   R[t,k] <= R[t,node(q)] + S[t,q]  every slot q that k reads is there to recompute k
 *   R[t,node(q)] + S[t,q] >= 1       the stage's backward node reads q
 *   S[t+1,q] <= S[t,q] + R[t,node(q)] nothing becomes resident without being computed
 *   FREE[t,q,k] <= R[t,k], 1 - S[t+1,q], 1 - R[t,j] for each later recomputed reader j of q
 *   P[t,*] + base(t) <= budget, and likewise the forward pass and the gaps between stages.
 * Checkmate's FREE linearisation is split into one row per hazard so FREE can be
 * continuous: with R and S integral each row pins it to 0 or lets it reach 1.
 *
 * Memory that recomputation does not change is read off the un-checkpointed plan step
 * by step (remat_ilp_model.c).  Like Checkmate's, the model counts every output at its
 * full size without in-place reuse, so the real arena of a schedule is at most the
 * model's peak; the caller plans the schedule and checks the real arena anyway. */
#include <glpk.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "remat/remat_ilp.h"

const char *vp_ilp_status_name(vp_ilp_status s) {
    static const char *n[] = {"not run", "optimal", "time limit, best found", "infeasible", "time limit, no solution",
                              "too large"};
    return (int)s >= 0 && s <= VP_ILP_TOO_LARGE ? n[s] : "?";
}

typedef vp_ilp_model model;

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
    int *s;    /* S[t,slot] = s[slot] + t for t <= last_t of its node */
    int *r;    /* parallel to cand */
    int *rmap; /* the current stage's R column per node, 0 */
} cols;

static int s_col(const model *m, const cols *c, int t, int slot) {
    return t <= m->last_t[m->slot_node[slot]] ? c->s[slot] + t : 0;
}

/* Rows of the forward pass: what is live at each forward step, the slots kept (S[0,.])
 * staying on after their last forward reader.  0 when a step is over the budget
 * whatever is kept. */
static int add_forward_rows(lp *l, const model *m, const cols *c, double M) {
    for (int k = 0; k < m->fr_end; k++) {
        double fixed = m->base[k];
        int row = 0;
        for (int q = 0; q < m->n_slot; q++) {
            if (m->slot_pos[q] > k) continue;
            if (k <= m->slot_fwd_last[q]) fixed += m->slot_mem[q];
            else {
                if (!row) row = lp_row(l, GLP_UP, 0, 0);
                lp_coef(l, row, s_col(m, c, 0, q), m->slot_mem[q]);
            }
        }
        if (fixed > M) return 0;
        if (row) glp_set_row_bnds(l->p, row, GLP_UP, 0, M - fixed);
    }
    return 1;
}

/* FREE[t,q,k] for slot q after candidate k: bounded by each hazard that keeps q. */
static int add_free(lp *l, const model *m, cols *c, int t, int q, int k) {
    int f = lp_col(l, 0, 1.0, 0);
    int row = lp_row(l, GLP_UP, 0, 0);
    lp_coef(l, row, f, 1);
    lp_coef(l, row, c->rmap[k], -1);
    if (t + 1 <= m->last_t[m->slot_node[q]]) {
        row = lp_row(l, GLP_UP, 0, 1);
        lp_coef(l, row, f, 1);
        lp_coef(l, row, s_col(m, c, t + 1, q), 1);
    }
    for (int u = 0; u < m->users[q].n; u++) {
        int j = m->users[q].a[u];
        if (j <= k || !c->rmap[j]) continue;
        row = lp_row(l, GLP_UP, 0, 1);
        lp_coef(l, row, f, 1);
        lp_coef(l, row, c->rmap[j], 1);
    }
    return f;
}

static int add_stage_rows(lp *l, const model *m, cols *c, int t, double M, char *reads) {
    int c0 = m->cand_start.a[t], c1 = m->cand_start.a[t + 1];
    int st = m->stage_step.a[t], prev = t ? m->stage_step.a[t - 1] : m->fr_end - 1;
    double cap = M - m->base[st];
    if (cap < 0) return 0;
    for (int q = c0; q < c1; q++) c->rmap[m->cand.a[q]] = c->r[q];
    for (int q = m->read_start.a[t]; q < m->read_start.a[t + 1]; q++) {
        int sl = m->read.a[q], row = lp_row(l, GLP_LO, 1, 0);
        reads[sl] = 1;
        lp_coef(l, row, c->rmap[m->slot_node[sl]], 1);
        lp_coef(l, row, s_col(m, c, t, sl), 1);
    }
    for (int q = c0; q < c1; q++) {
        int k = m->cand.a[q];
        for (int z = 0; z < m->n_slots[k]; z++) { /* recomputing a resident slot is waste */
            int row = lp_row(l, GLP_UP, 0, 1);
            lp_coef(l, row, c->rmap[k], 1);
            lp_coef(l, row, s_col(m, c, t, m->first_slot[k] + z), 1);
        }
        for (int d = 0; d < m->deps[k].n; d++) {
            int sl = m->deps[k].a[d], row = lp_row(l, GLP_UP, 0, 0);
            lp_coef(l, row, c->rmap[k], 1);
            lp_coef(l, row, c->rmap[m->slot_node[sl]], -1);
            lp_coef(l, row, s_col(m, c, t, sl), -1);
        }
    }
    /* residency into the next stage, and the gap before this one */
    double gap = -1;
    for (int k = prev + 1; k < st; k++)
        if (m->base[k] > gap) gap = m->base[k];
    if (gap > M) return 0;
    int gap_row = gap >= 0 ? lp_row(l, GLP_UP, 0, M - gap) : 0;
    int p_row = lp_row(l, GLP_FX, 0, 0); /* P_0 = resident + the first candidate */
    for (int q = 0; q < m->n_slot; q++) {
        int i = m->slot_node[q];
        if (t > m->last_t[i]) continue;
        if (gap_row) lp_coef(l, gap_row, s_col(m, c, t, q), m->slot_mem[q]);
        lp_coef(l, p_row, s_col(m, c, t, q), -m->slot_mem[q]);
        if (t + 1 <= m->last_t[i]) {
            int row = lp_row(l, GLP_UP, 0, 0);
            lp_coef(l, row, s_col(m, c, t + 1, q), 1);
            lp_coef(l, row, s_col(m, c, t, q), -1);
            if (c->rmap[i]) lp_coef(l, row, c->rmap[i], -1);
        }
    }
    /* the chain of P: computing candidate k adds its outputs (to the row that defines the
     * P it is computed under), then frees what it was the last in the stage to need */
    int p = lp_col(l, 0, cap, 0);
    lp_coef(l, p_row, p, 1);
    for (int q = c0; q < c1; q++) {
        int k = m->cand.a[q];
        lp_coef(l, p_row, c->rmap[k], -m->node_mem[k]);
        int next = lp_col(l, 0, cap, 0);
        int chain = lp_row(l, GLP_FX, 0, 0); /* next = p - freed (+ the next candidate) */
        lp_coef(l, chain, next, 1);
        lp_coef(l, chain, p, -1);
        for (int d = -m->n_slots[k]; d < m->deps[k].n; d++) {
            int sl = d < 0 ? m->first_slot[k] + m->n_slots[k] + d : m->deps[k].a[d];
            if (reads[sl]) continue; /* the backward node still needs it */
            lp_coef(l, chain, add_free(l, m, c, t, sl, k), m->slot_mem[sl]);
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
    const double *hint; /* a full solution to offer as the first incumbent, or NULL */
    int offered;
} bound_watch;

/* The best bound among the open branch-and-bound nodes: a proven lower bound.  The
 * hint goes in at the first chance GLPK gives a heuristic. */
static void watch_bound(glp_tree *tree, void *info) {
    bound_watch *w = info;
    int r = glp_ios_reason(tree);
    if (r == GLP_IHEUR && w->hint && !w->offered) {
        w->offered = 1;
        glp_ios_heur_sol(tree, w->hint); /* GLPK checks it and keeps it only if feasible */
    }
    if (r != GLP_ISELECT && r != GLP_IBINGO && r != GLP_IROWGEN) return;
    int best = glp_ios_best_node(tree);
    if (best) w->bound = glp_ios_node_bound(tree, best);
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}

/* GLPK on the loaded problem: the root relaxation under the time limit too (glp_intopt's
 * own limit counts only branch and bound), then branch and bound with cuts. */
static int solve(glp_prob *p, double left, bound_watch *w) {
    glp_smcp lpp;
    glp_init_smcp(&lpp);
    lpp.presolve = GLP_ON;
    lpp.msg_lev = GLP_MSG_OFF;
    lpp.tm_lim = left > 0.001 ? (int)(left * 1000) : 1;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int was = glp_term_out(GLP_OFF);
    int ret = glp_simplex(p, &lpp);
    if (!ret && glp_get_status(p) == GLP_OPT) {
        w->bound = glp_get_obj_val(p); /* the root relaxation bounds the optimum */
        glp_iocp parm;
        glp_init_iocp(&parm);
        parm.msg_lev = GLP_MSG_OFF;
        parm.mir_cuts = GLP_ON;
        parm.gmi_cuts = GLP_ON;
        parm.cov_cuts = GLP_ON;
        parm.clq_cuts = GLP_ON;
        parm.fp_heur = GLP_ON;
        left -= seconds_since(&t0);
        parm.tm_lim = left > 0.001 ? (int)(left * 1000) : 1;
        parm.cb_func = watch_bound;
        parm.cb_info = w;
        ret = glp_intopt(p, &parm);
    } else if (!ret) {
        ret = GLP_ENOPFS; /* the relaxation itself is infeasible */
    }
    glp_term_out(was);
    return ret;
}

/* The MILP's values for a schedule: R from the schedule, S from when each slot is made
 * (forward, or the stage recomputing its node) to the last stage that reads it, FREE and
 * P from an LP with those fixed.  NULL when the schedule does not fit the model (or is
 * not one of its schedules); the binaries' bounds are restored either way. */
static double *hint_values(glp_prob *p, const model *m, const cols *c, const vp_plan *p0, const vp_graph *g,
                           const vp_remat_schedule *h, double left) {
    int *stage_of = malloc(((size_t)g->n_nodes + 1) * sizeof *stage_of);
    char *rv = calloc((size_t)m->cand.n + 1, 1);
    int *made = malloc(((size_t)m->n_slot + 1) * sizeof *made), *last = malloc(((size_t)m->n_slot + 1) * sizeof *last);
    double *x = NULL;
    int ok = stage_of && rv && made && last;
    for (int i = 0; ok && i < g->n_nodes; i++) stage_of[i] = -1;
    for (int t = 0; ok && t < m->T; t++) stage_of[p0->steps[m->stage_step.a[t]]] = t;
    for (int q = 0; ok && q < m->n_slot; q++) made[q] = last[q] = -1;
    for (int k = 0; ok && k < h->n_stages; k++) {
        int t = stage_of[h->stage_node[k]];
        for (int j = h->start[k]; ok && j < h->start[k + 1]; j++) {
            int i = m->mi[h->nodes[j]], at = -1;
            for (int q = m->cand_start.a[t < 0 ? 0 : t]; t >= 0 && i >= 0 && q < m->cand_start.a[t + 1]; q++)
                if (m->cand.a[q] == i) at = q;
            ok = at >= 0;
            if (!ok) break;
            rv[at] = 1;
            for (int z = 0; z < m->n_slots[i]; z++) made[m->first_slot[i] + z] = t;
            for (int d = 0; d < m->deps[i].n; d++)
                if (last[m->deps[i].a[d]] < t) last[m->deps[i].a[d]] = t;
        }
    }
    for (int t = 0; ok && t < m->T; t++)
        for (int q = m->read_start.a[t]; q < m->read_start.a[t + 1]; q++)
            if (last[m->read.a[q]] < t) last[m->read.a[q]] = t;
    int n_cols = glp_get_num_cols(p);
    for (int q = 0; ok && q < m->n_slot; q++)
        for (int t = 0; t <= m->last_t[m->slot_node[q]]; t++) {
            double v = t > made[q] && t <= last[q];
            glp_set_col_bnds(p, c->s[q] + t, GLP_FX, v, v);
        }
    for (int q = 0; ok && q < m->cand.n; q++) glp_set_col_bnds(p, c->r[q], GLP_FX, rv[q], rv[q]);
    if (ok) {
        glp_smcp lpp;
        glp_init_smcp(&lpp);
        lpp.presolve = GLP_ON;
        lpp.msg_lev = GLP_MSG_OFF;
        lpp.tm_lim = left > 0.01 ? (int)(left * 250) : 1; /* a quarter of what is left */
        int was = glp_term_out(GLP_OFF);
        int ret = glp_simplex(p, &lpp);
        glp_term_out(was);
        if (!ret && glp_get_status(p) == GLP_OPT && (x = malloc(((size_t)n_cols + 1) * sizeof *x)))
            for (int j = 1; j <= n_cols; j++) x[j] = glp_get_col_prim(p, j);
    }
    /* back to binaries */
    for (int q = 0; q < m->n_slot; q++)
        for (int t = 0; t <= m->last_t[m->slot_node[q]]; t++) glp_set_col_kind(p, c->s[q] + t, GLP_BV);
    for (int q = 0; q < m->cand.n; q++) glp_set_col_kind(p, c->r[q], GLP_BV);
    for (int j = 1; x && j <= n_cols; j++)
        if (glp_get_col_kind(p, j) == GLP_BV) x[j] = x[j] > 0.5; /* exact 0/1 for the check */
    free(stage_of);
    free(rv);
    free(made);
    free(last);
    return x;
}

vp_status vp_remat_ilp_solve(const vp_graph *g, const vp_plan *p0, const vp_training *t, const vp_device_profile *dev,
                             int64_t budget, double time_limit, vp_remat_schedule *out, vp_ilp_stats *st, vp_error *err) {
    return vp_remat_ilp_solve_hinted(g, p0, t, dev, budget, time_limit, NULL, out, st, err);
}

vp_status vp_remat_ilp_solve_hinted(const vp_graph *g, const vp_plan *p0, const vp_training *t,
                                    const vp_device_profile *dev, int64_t budget, double time_limit,
                                    const vp_remat_schedule *hint, vp_remat_schedule *out, vp_ilp_stats *st,
                                    vp_error *err) {
    memset(out, 0, sizeof *out);
    memset(st, 0, sizeof *st);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    model m;
    int too_large = 0;
    vp_status s = vp_ilp_model_build(&m, g, p0, t, dev, &too_large, err);
    if (s) return s;
    if (too_large) {
        st->status = VP_ILP_TOO_LARGE;
        st->n_binary = m.cand.n + m.n_slot * m.T;
        vp_ilp_model_free(&m);
        return VP_OK;
    }
    lp l = {glp_create_prob(), NULL, NULL, NULL, 0, 0, 1};
    cols c = {malloc(((size_t)m.n_slot + 1) * sizeof *c.s), malloc(((size_t)m.cand.n + 1) * sizeof *c.r),
              calloc((size_t)m.n + 1, sizeof *c.rmap)};
    char *reads = calloc((size_t)m.n_slot + 1, 1);
    if (!c.s || !c.r || !c.rmap || !reads) l.ok = 0;
    glp_set_obj_dir(l.p, GLP_MIN);
    double M = (double)budget / 1048576.0;
    int feasible = 1;
    for (int q = 0; l.ok && q < m.n_slot; q++) {
        c.s[q] = 0;
        for (int tt = 0; tt <= m.last_t[m.slot_node[q]]; tt++) {
            int j = lp_col(&l, 1, 1, 0);
            if (!tt) c.s[q] = j;
        }
    }
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
        bound_watch w = {0, NULL, 0};
        double *x = hint ? hint_values(l.p, &m, &c, p0, g, hint, time_limit - seconds_since(&t0)) : NULL;
        w.hint = x;
        int ret = solve(l.p, time_limit - seconds_since(&t0), &w);
        free(x);
        int mip = glp_mip_status(l.p);
        if (mip == GLP_OPT) st->status = VP_ILP_OPTIMAL;
        else if (mip == GLP_FEAS) st->status = VP_ILP_FEASIBLE;
        else if (ret == GLP_ENOPFS || mip == GLP_NOFEAS) st->status = VP_ILP_INFEASIBLE;
        else if (ret == GLP_ETMLIM) {
            st->status = VP_ILP_NO_SOLUTION;
            st->bound_seconds = w.bound * 1e-6; /* still a proven lower bound */
        }
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
                int w2 = out->start[tt];
                for (int q = m.cand_start.a[tt]; q < m.cand_start.a[tt + 1]; q++)
                    if (glp_mip_col_val(l.p, c.r[q]) > 0.5) out->nodes[w2++] = m.node[m.cand.a[q]];
                out->start[tt + 1] = w2;
            }
            if (!s) out->n_stages = m.T;
            else vp_remat_schedule_free(out);
        }
    }
    st->solve_seconds = seconds_since(&t0);
    glp_delete_prob(l.p);
    free(l.ia); free(l.ja); free(l.ar);
    free(c.s); free(c.r); free(c.rmap); free(reads);
    vp_ilp_model_free(&m);
    return s;
}
