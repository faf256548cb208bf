/* The attention fusion's matching (fuse_attention_match.h): from each MatMul up through
 * the Softmax, the optional mask and scale ops, to the MatMul of Q and K^T, every
 * condition checked on the way; the graph is only read. */
#include "train/fuse_attention_match.h"

#include <math.h>

#include "ir/dtype_conv.h"

static int scalar_const(const vp_graph *g, int v, double *out) { return vp_pattern_fixed_scalar(g, v, out); }

/* A shape that broadcasts to full [4] without growing it. */
static int fits(const vp_value *m, const int64_t *full) {
    if (m->rank > 4) return 0;
    for (int d = 0; d < m->rank; d++) {
        int64_t md = m->dims[m->rank - 1 - d];
        if (md != 1 && md != full[3 - d]) return 0;
    }
    return 1;
}

/* The mask stage: Add(S, M) / Add(M, S), or Where(C, S, f) / Where(C, f, S) with f
 * -inf or at most -1e30 (there S + f rounds to f for any score under 1e22, so the
 * additive form computes the same).  Sets *chain to the scores before it. */
static int match_mask(const vp_graph *g, const vp_node *n, match *m, int *chain) {
    if (!strcmp(n->op_type, "Add") && n->n_inputs == 2) {
        for (int side = 0; side < 2; side++) {
            int c = n->inputs[side];
            if (producer(g, c, "MatMul") || producer(g, c, "Mul") || producer(g, c, "Div")) {
                *chain = c;
                m->mask = n->inputs[1 - side];
                return 1;
            }
        }
        return 0;
    }
    if (!strcmp(n->op_type, "Where") && n->n_inputs == 3) {
        double f;
        for (int then = 0; then < 2; then++) {
            int fill = n->inputs[then ? 1 : 2];
            if (!scalar_const(g, fill, &f) || !(f <= -1e30)) continue;
            m->cond = n->inputs[0];
            m->fill = fill;
            m->fill_then = then;
            *chain = n->inputs[then ? 2 : 1];
            return g->values[m->cond].dtype == VP_BOOL;
        }
    }
    return 0;
}

/* Add(Add(S, M1), M2) (either order at either Add): T5 adds its trained position bias,
 * then the padding or causal mask.  The inner Add is read only by the outer one. */
static int match_two_masks(const vp_graph *g, const vp_node *outer, match *m, int *chain, const vp_node **inner) {
    if (strcmp(outer->op_type, "Add") || outer->n_inputs != 2) return 0;
    for (int side = 0; side < 2; side++) {
        int c = outer->inputs[side];
        const vp_node *a = producer(g, c, "Add");
        if (!a || !only_use(g, c, node_id(g, outer)) || !match_mask(g, a, m, chain)) continue;
        m->mask2 = outer->inputs[1 - side];
        m->mask2_node = node_id(g, outer);
        *inner = a;
        return 1;
    }
    return 0;
}

/* Add(Where(C, S, f), M) (either order): GPT-Neo fills the causal window's outside with
 * torch.finfo.min, then adds the padding mask.  The Where is read only by the Add; C
 * and f become the mask as in match_mask, M a second mask added to it (f + M where C
 * masks, S + M where it keeps: the same sums as the fused core's S + (where-mask + M)). */
static int match_fill_then_mask(const vp_graph *g, const vp_node *add, match *m, int *chain, const vp_node **where) {
    if (strcmp(add->op_type, "Add") || add->n_inputs != 2) return 0;
    for (int side = 0; side < 2; side++) {
        int c = add->inputs[side], scores;
        const vp_node *w = producer(g, c, "Where");
        if (!w || !only_use(g, c, node_id(g, add)) || !match_mask(g, w, m, &scores)) continue;
        if (!producer(g, scores, "MatMul") && !producer(g, scores, "Mul") && !producer(g, scores, "Div")) {
            m->cond = m->fill = -1;
            continue;
        }
        *chain = scores;
        m->mask2 = add->inputs[1 - side];
        m->mask2_node = node_id(g, add);
        *where = w;
        return 1;
    }
    return 0;
}

/* Where(IsNaN(P), 0, P) with P read by those two nodes only. */
static int match_nan_guard(const vp_graph *g, const vp_node *gw, match *m) {
    double zero;
    int p = in(gw, 2);
    const vp_node *isnan = producer(g, in(gw, 0), "IsNaN");
    if (gw->n_inputs != 3 || !isnan || in(isnan, 0) != p || !scalar_const(g, in(gw, 1), &zero) || zero != 0) return 0;
    if (!only_use(g, in(gw, 0), node_id(g, gw))) return 0;
    const vp_value *pv = &g->values[p];
    if ((pv->flags & VP_VAL_OUTPUT) || pv->n_consumers != 2) return 0;
    for (int c = 0; c < 2; c++)
        if (pv->consumers[c] != node_id(g, gw) && pv->consumers[c] != node_id(g, isnan)) return 0;
    m->guard_isnan = node_id(g, isnan);
    m->guard_where = node_id(g, gw);
    return 1;
}

/* Mul(P, R) (either order), R a constant of ones: ONNX's Attention (opset 23), as
 * planner/ir/attention_op.c expands it, zeroes the rows its mask keeps no key of by
 * multiplying the probabilities by whether each row keeps any; with a constant mask that
 * keeps a key in every row (a causal one), R is all ones and the product changes nothing.
 * Sets *p to P. */
static int match_rows_kept(const vp_graph *g, const vp_node *mul, int *p, int *cond) {
    if (mul->n_inputs != 2) return 0;
    for (int k = 0; k < 2; k++) {
        int rv = in(mul, 1 - k);
        const vp_value *r = &g->values[rv];
        if (!producer(g, in(mul, k), "Softmax") || !vp_dtype_is_float(r->dtype)) continue;
        if (fixed_data(r)) {
            int64_t n = vp_value_numel(r), i = 0;
            while (i < n && vp_load(r->data, r->dtype, i) == 1.0) i++;
            if (i < n) return 0;
            *p = in(mul, k);
            *cond = -1;
            return 1;
        }
        /* R = ReduceMax(Cast(C), axes = the last, keepdims): whether row i keeps a key */
        const vp_node *rm = producer(g, rv, "ReduceMax"), *cast = rm ? producer(g, in(rm, 0), "Cast") : NULL;
        const vp_value *a = rm && in(rm, 1) >= 0 ? &g->values[in(rm, 1)] : NULL;
        const vp_value *cv = cast ? &g->values[in(cast, 0)] : NULL;
        if (!cast || !a || !fixed_data(a) || vp_value_numel(a) != 1 || vp_attr_int(rm, "keepdims", 1) != 1 ||
            cv->dtype != VP_BOOL)
            return 0;
        int64_t axis = (int64_t)vp_load(a->data, a->dtype, 0);
        if (axis != -1 && axis != cv->rank - 1) return 0;
        *p = in(mul, k);
        *cond = in(cast, 0);
        return 1;
    }
    return 0;
}

/* *x = Mul(x0, c) (or Mul(c, x0)), c a scalar constant, read only by `user`: *x becomes x0,
 * *scale is multiplied by c; returns the Mul's id, or -1 (nothing changed). */
static int split_scale(const vp_graph *g, int *x, int user, double *scale) {
    const vp_node *mul = producer(g, *x, "Mul");
    double c;
    if (!mul || mul->n_inputs != 2 || !only_use(g, *x, user)) return -1;
    for (int k = 0; k < 2; k++)
        if (scalar_const(g, in(mul, 1 - k), &c)) {
            *scale *= c;
            *x = in(mul, k);
            return node_id(g, mul);
        }
    return -1;
}

/* Mul(Tanh(Div(X, c)), c) at *chain (the Mul's operands either way round; the Div may be
 * Mul(X, 1/c)), c > 0 a scalar constant, each output read only by the next node and
 * *chain only by *after: Gemma 2's soft-capping of the scores, before the mask.  Sets
 * *chain to X and *after to the Div. */
static int match_softcap(const vp_graph *g, int *chain, int *after, match *m) {
    const vp_node *mul = producer(g, *chain, "Mul"), *th = NULL, *dv;
    double c = 0, c_in = 0;
    if (!mul || mul->n_inputs != 2 || !only_use(g, *chain, *after)) return 0;
    int t = -1;
    for (int k = 0; k < 2 && t < 0; k++)
        if ((th = producer(g, in(mul, k), "Tanh")) && scalar_const(g, in(mul, 1 - k), &c)) t = in(mul, k);
    if (t < 0 || !(c > 0) || isinf(c) || !only_use(g, t, node_id(g, mul))) return 0;
    int x = in(th, 0), inner = -1;
    if (!only_use(g, x, node_id(g, th))) return 0;
    if ((dv = producer(g, x, "Div")) && dv->n_inputs == 2 && scalar_const(g, in(dv, 1), &c_in) && c_in == c) {
        inner = in(dv, 0);
    } else if ((dv = producer(g, x, "Mul")) && dv->n_inputs == 2) {
        for (int k = 0; k < 2 && inner < 0; k++) /* 1/c as the exporter rounded it */
            if (scalar_const(g, in(dv, 1 - k), &c_in) && fabs(c_in * c - 1.0) < 1e-6) inner = in(dv, k);
    }
    if (inner < 0) return 0;
    m->softcap = c;
    m->cap_mul = node_id(g, mul);
    m->cap_tanh = node_id(g, th);
    m->cap_div = node_id(g, dv);
    *chain = inner;
    *after = m->cap_div;
    return 1;
}

/* Max(S, c) (either order), c a scalar constant at most -1e30 and finite: XGLM clamps its
 * masked scores at torch.finfo.min.  A score the clamp raises to c has probability
 * exp(c - max) = 0 either way in a row that keeps a key (a finite score above -1e30), and
 * no gradient; so the clamp changes nothing where every row keeps a key, which the caller
 * checks (a row masked whole is where it would: its ties at c halve the gradient).  Sets
 * *s to S. */
static int match_clamp(const vp_graph *g, const vp_node *mx, int *s) {
    double c;
    if (mx->n_inputs != 2) return 0;
    for (int k = 0; k < 2; k++)
        if (scalar_const(g, in(mx, 1 - k), &c) && c <= -1e30 && c > -INFINITY) {
            *s = in(mx, k);
            return 1;
        }
    return 0;
}

/* Whether the mask keeps at least one key in every row: none, or a constant one. */
static int mask_keeps_every_row(const vp_graph *g, const match *m) {
    int v = m->mask >= 0 ? m->mask : m->cond;
    if (v < 0) return 1;
    const vp_value *x = &g->values[v];
    if (!fixed_data(x) || x->rank < 1) return 0;
    int64_t t = x->dims[x->rank - 1], rows = t ? vp_value_numel(x) / t : 0;
    for (int64_t r = 0; r < rows; r++) {
        int kept = 0;
        for (int64_t j = 0; j < t && !kept; j++) {
            if (m->mask >= 0) kept = !(vp_load(x->data, x->dtype, r * t + j) <= -1e30);
            else kept = (((const unsigned char *)x->data)[r * t + j] != 0) != m->fill_then;
        }
        if (!kept) return 0;
    }
    return 1;
}

/* Dropout(P, r, true) as our training steps draw it (train/train_mode.c: a seed, the
 * counter-based masks of runtime/dropout_rng.h, which the fused kernels draw alike),
 * r a constant in (0, 1), its mask read by nothing yet (autodiff comes later). */
static int match_dropout(const vp_graph *g, const vp_node *d, match *m) {
    double r;
    if (d->opset < 12 || d->n_inputs != 3 || vp_attr_int(d, "vplan_step", 0) != 1 || !vp_node_attr(d, "seed") ||
        vp_attr_int(d, "vplan_ranks", 1) != 1 || !scalar_const(g, in(d, 1), &r) || !(r > 0 && r < 1) || in(d, 2) < 0)
        return 0;
    if ((double)(float)r != r) return 0; /* the fused op's float attribute must draw the same threshold */
    const vp_value *mode = &g->values[in(d, 2)];
    if (!fixed_data(mode) || mode->dtype != VP_BOOL || vp_value_numel(mode) != 1 || !((const uint8_t *)mode->data)[0])
        return 0;
    if (d->n_outputs > 1 && d->outputs[1] >= 0) {
        const vp_value *mk = &g->values[d->outputs[1]];
        if (mk->n_consumers || (mk->flags & VP_VAL_OUTPUT)) return 0;
    }
    m->dropout = node_id(g, d);
    m->dropout_ratio = r;
    m->dropout_seed = vp_attr_int(d, "seed", 0);
    return 1;
}

/* Walks up from the MatMul `node`; fills m and returns 1 when every condition holds. */
int vp_attention_match(const vp_graph *g, int node, match *m) {
    const vp_node *mm2 = &g->nodes[node], *sm, *mk = NULL, *sc = NULL, *mm1;
    memset(m, -1, sizeof *m);
    m->scale = 1.0;
    m->softcap = 0;
    m->dropout_ratio = 0;
    if (strcmp(mm2->op_type, "MatMul") || mm2->domain[0] || mm2->n_inputs != 2) return 0;
    int p = mm2->inputs[0], p_user = node;
    const vp_node *drop = producer(g, p, "Dropout"); /* scaled_dot_product_attention's dropout_p in train() */
    if (drop && only_use(g, p, node) && match_dropout(g, drop, m)) {
        p_user = m->dropout;
        p = in(drop, 0);
    }
    const vp_node *cast = producer(g, p, "Cast"); /* softmax(..., dtype=float32).to(dtype): Gemma 2, XGLM */
    if (cast && only_use(g, p, p_user) && vp_attr_int(cast, "to", 0) == (int64_t)g->values[in(cast, 0)].dtype &&
        g->values[in(cast, 0)].dtype == g->values[p].dtype) {
        m->p_cast = p_user = node_id(g, cast);
        p = in(cast, 0);
    }
    const vp_node *gw = producer(g, p, "Where");
    const vp_node *keep = producer(g, p, "Mul");
    if (gw && only_use(g, p, p_user) && match_nan_guard(g, gw, m)) { /* torch 2.x's guard of fully masked rows */
        p_user = -1;
        p = in(gw, 2);
    } else if (keep && only_use(g, p, p_user) && match_rows_kept(g, keep, &p, &m->rows_kept_cond)) {
        m->rows_kept = p_user = node_id(g, keep); /* ONNX Attention's, expanded */
    }
    if (!(sm = producer(g, p, "Softmax")) || (p_user >= 0 && !only_use(g, p, p_user))) return 0;
    const vp_value *pv = &g->values[p];
    int64_t axis = vp_attr_int(sm, "axis", sm->opset >= 13 ? -1 : 1);
    if (pv->rank != 4 || (axis != -1 && axis != 3)) return 0;
    int x = in(sm, 0), x_user = node_id(g, sm), fill_first = 0;
    const vp_node *mx = producer(g, x, "Max");
    if (mx && only_use(g, x, x_user) && match_clamp(g, mx, &x)) { /* XGLM */
        m->clamp = x_user = node_id(g, mx);
    }
    int chain = x;
    const vp_node *up = g->values[x].producer >= 0 ? &g->nodes[g->values[x].producer] : NULL;
    if (up && !up->domain[0] && (!strcmp(up->op_type, "Add") || !strcmp(up->op_type, "Where"))) {
        if (!only_use(g, x, x_user)) return 0;
        if (!match_mask(g, up, m, &chain)) {
            m->mask = m->cond = -1;
            fill_first = match_fill_then_mask(g, up, m, &chain, &mk); /* the Where reads the scores */
            if (!fill_first && !match_two_masks(g, up, m, &chain, &mk)) return 0;
        } else {
            mk = up;
            /* masked_fill over the scores plus a bias (DeBERTa's relative position terms,
             * computed from parameters): the bias a second mask, under the Where's */
            const vp_node *inner = m->cond >= 0 ? producer(g, chain, "Add") : NULL;
            for (int side = 0; inner && inner->n_inputs == 2 && only_use(g, chain, node_id(g, up)) && side < 2; side++) {
                int c = inner->inputs[side];
                if (!producer(g, c, "MatMul") && !producer(g, c, "Mul") && !producer(g, c, "Div")) continue;
                m->mask2 = inner->inputs[1 - side];
                m->mask2_node = node_id(g, inner);
                chain = c;
                break;
            }
        }
    }
    /* the node reading the scores: the Add under DeBERTa's Where, else the mask stage */
    int after = m->mask2_node >= 0 && m->cond >= 0 && !fill_first ? m->mask2_node : mk ? node_id(g, mk) : x_user;
    match_softcap(g, &chain, &after, m); /* before the scale stage: its outer Mul is no scale */
    if ((sc = producer(g, chain, "Mul")) || (sc = producer(g, chain, "Div"))) {
        double c;
        int div = !strcmp(sc->op_type, "Div"), k;
        if (!only_use(g, chain, after)) return 0;
        if (scalar_const(g, in(sc, 1), &c)) k = 0;
        else if (!div && scalar_const(g, in(sc, 0), &c)) k = 1;
        else return 0;
        if (div && c == 0) return 0;
        m->scale = div ? 1.0 / c : c;
        chain = in(sc, k);
        after = node_id(g, sc);
    }
    if (!(mm1 = producer(g, chain, "MatMul")) || !only_use(g, chain, after)) return 0;
    m->q = in(mm1, 0);
    m->kt = in(mm1, 1);
    /* torch 2.x scales Q and K^T each by sqrt(scale) before their product */
    m->q_scale = split_scale(g, &m->q, node_id(g, mm1), &m->scale);
    m->k_scale = split_scale(g, &m->kt, node_id(g, mm1), &m->scale);
    m->v = mm2->inputs[1];
    const vp_value *q = &g->values[m->q], *kt = &g->values[m->kt], *v = &g->values[m->v], *s = &g->values[chain];
    if (q->rank != 4 || kt->rank != 4 || v->rank != 4 || !vp_dtype_is_float(q->dtype)) return 0;
    if (kt->dtype != q->dtype || v->dtype != q->dtype || s->dtype != q->dtype) return 0;
    int64_t B = q->dims[0], H = q->dims[1], S = q->dims[2], T = kt->dims[3];
    if (kt->dims[0] != B || kt->dims[1] != H || kt->dims[2] != q->dims[3]) return 0;
    if (v->dims[0] != B || v->dims[1] != H || v->dims[2] != T) return 0;
    int64_t full[4] = {B, H, S, T};
    for (int k = 0; k < 2; k++) { /* masks that depend on a parameter get their gradient from AttentionGrad */
        int mv = k ? m->mask2 : m->mask;
        if (mv >= 0 && (g->values[mv].dtype != q->dtype || !fits(&g->values[mv], full))) return 0;
    }
    if (m->cond >= 0 && (!fits(&g->values[m->cond], full) || g->values[m->fill].dtype != q->dtype)) return 0;
    /* the guard turns a row masked whole (-inf everywhere) into 0s: unless no row can be
     * (no mask, or a constant one keeping a key in every row), Attention does the same
     * under zero_masked_rows */
    m->zero_rows = m->guard_where >= 0 && (m->mask2 >= 0 || !mask_keeps_every_row(g, m)); /* (one mask checked) */
    /* the clamp goes only where every row keeps a key: a row that keeps none ties every
     * score at c, which halves its gradient */
    if (m->clamp >= 0 && (m->mask2 >= 0 || !mask_keeps_every_row(g, m))) return 0;
    /* ONNX Attention's zeroing, computed from the Where's own condition C (the keep
     * side in its then branch): C keeping no key of a row is every score -inf once the
     * fill is -inf, which changes no row that keeps one */
    if (m->rows_kept_cond >= 0) {
        if (m->rows_kept_cond != m->cond || m->fill_then || m->mask2 >= 0) return 0;
        m->zero_rows = 1;
    }
    m->mm1 = node_id(g, mm1);
    m->scale_node = node_id(g, sc);
    m->mask_node = node_id(g, mk);
    m->softmax = node_id(g, sm);
    m->mm2 = node;
    return 1;
}
