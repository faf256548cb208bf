/* The opsets a written model imports and its training metadata (onnx_write.c writes
 * the rest).
 *
 * In: the writer with its graph and training step.  Out: opset_import and ir_version,
 * or an error naming two nodes whose default-domain opsets differ; metadata_props.
 * Keeps true: one default-domain opset, the highest any node was loaded at, and every
 * other domain once in order of first use. */
#include "onnx_write_internal.h"

/* ---- opsets ---- */

/* ONNX IR version a default-domain opset needs (onnx/helper.py's table). */
static int64_t ir_for_opset(int opset) {
    if (opset >= 15) return 8;
    if (opset >= 12) return 7;
    if (opset == 11) return 6;
    if (opset == 10) return 5;
    if (opset == 9) return 4;
    return 4; /* initializers outside the graph inputs need IR 4 */
}

static vp_status add_opset(writer *w, const char *domain, int64_t version) {
    Onnx__OperatorSetIdProto *op = w_calloc(w, 1, sizeof *op);
    if (!op) return VP_OK;
    onnx__operator_set_id_proto__init(op);
    op->domain = w_strdup(w, domain);
    op->has_version = 1;
    op->version = version;
    w->mp->opset_import[w->mp->n_opset_import++] = op;
    return VP_OK;
}

vp_status vp_onnx_write_opsets(writer *w, int any_const) {
    const vp_graph *g = w->g;
    int onnx = 0, onnx_node = -1, any_default = any_const;
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || !is_default_domain(n->domain)) continue;
        any_default = 1;
        if (n->opset > onnx) {
            onnx = n->opset;
            onnx_node = i;
        }
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || !is_default_domain(n->domain) || n->opset == onnx) continue;
        const vp_node *hi = &g->nodes[onnx_node];
        return vp_fail(w->err, VP_ERR_UNSUPPORTED,
                       "%s: node '%s' (%s) is at opset %d and node '%s' (%s) at opset %d; an ONNX model imports one "
                       "opset, and writing both at %d could change what the first computes (re-export the model at "
                       "opset %d or later)",
                       w->path, n->name, n->op_type, n->opset, hi->name, hi->op_type, onnx, onnx, onnx);
    }
    if (!onnx) onnx = g->opset_onnx > 0 ? g->opset_onnx : 13;
    /* every distinct domain once: "" first, then in order of first use */
    int cap = 1;
    for (int i = 0; i < g->n_nodes; i++) cap += !g->nodes[i].folded;
    w->mp->opset_import = w_calloc(w, (size_t)cap, sizeof *w->mp->opset_import);
    if (!w->mp->opset_import) return VP_OK;
    if (any_default) add_opset(w, "", onnx);
    for (int i = 0; i < g->n_nodes && !w->oom; i++) {
        const vp_node *n = &g->nodes[i];
        if (n->folded || is_default_domain(n->domain)) continue;
        int seen = 0;
        for (size_t k = 0; k < w->mp->n_opset_import && !seen; k++) seen = !strcmp(w->mp->opset_import[k]->domain, n->domain);
        if (seen) continue;
        int64_t version = 1; /* com.microsoft and vplan ops are version 1 */
        if (strcmp(n->domain, "com.microsoft") && strcmp(n->domain, "vplan"))
            for (int j = i; j < g->n_nodes; j++)
                if (!g->nodes[j].folded && !strcmp(g->nodes[j].domain, n->domain) && g->nodes[j].opset > version)
                    version = g->nodes[j].opset;
        add_opset(w, n->domain, version);
    }
    int64_t ir = ir_for_opset(onnx);
    int64_t model_ir = g->ir_version > 8 ? 8 : g->ir_version;
    w->mp->has_ir_version = 1;
    w->mp->ir_version = ir > model_ir ? ir : model_ir;
    return VP_OK;
}

/* ---- metadata ---- */

static void add_meta(writer *w, const char *key, const char *value) {
    Onnx__StringStringEntryProto *e = w_calloc(w, 1, sizeof *e);
    if (!e) return;
    onnx__string_string_entry_proto__init(e);
    e->key = w_strdup(w, key);
    e->value = w_strdup(w, value);
    w->mp->metadata_props[w->mp->n_metadata_props++] = e;
}

/* "a\tb\n" lines for pairs of value ids, heap. */
static char *pair_lines(writer *w, int n, const int *from, const int *to) {
    size_t len = 1;
    for (int i = 0; i < n; i++)
        if (from[i] >= 0 && to[i] >= 0) len += strlen(vname(w, from[i])) + strlen(vname(w, to[i])) + 2;
    char *s = w_calloc(w, len, 1);
    if (!s) return NULL;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        int a = from[i], b = to[i];
        if (a < 0 || b < 0) continue;
        at += (size_t)snprintf(s + at, len - at, "%s\t%s\n", vname(w, a), vname(w, b));
    }
    return s;
}

void vp_onnx_write_metadata(writer *w) {
    const vp_training *t = w->t;
    if (!t) return;
    w->mp->metadata_props = w_calloc(w, 3, sizeof *w->mp->metadata_props);
    if (!w->mp->metadata_props) return;
    if (t->loss >= 0) add_meta(w, "vplan.loss", vname(w, t->loss));
    if (t->n_carry) {
        int *from = w_calloc(w, (size_t)t->n_carry, sizeof *from), *to = w_calloc(w, (size_t)t->n_carry, sizeof *to);
        for (int i = 0; i < t->n_carry && from && to; i++) {
            from[i] = t->carry[i].from;
            to[i] = t->carry[i].to;
        }
        char *s = from && to ? pair_lines(w, t->n_carry, from, to) : NULL;
        if (s) add_meta(w, "vplan.carry", s);
        free(s);
        free(from);
        free(to);
    }
    int any_grad = 0;
    for (int i = 0; i < t->n_params && t->grads; i++) any_grad |= t->grads[i] >= 0;
    if (any_grad) {
        char *s = pair_lines(w, t->n_params, t->params, t->grads);
        if (s) add_meta(w, "vplan.gradients", s);
        free(s);
    }
}
