/* A loaded graph's attributes against ONNX's schemas (attr_schema.h).  In: a graph as the
 * loader built it.  Out: VP_OK, or the first attribute of the wrong type, unknown
 * attribute or too new an opset, named (the last two only warned of when lenient). */
#include "ir/attr_schema.h"

#include <stdio.h>
#include <string.h>

#define MAX_WARNINGS 8 /* lenient: the first few said, then a count */

const char *vp_attr_type_name(vp_attr_type t) {
    static const char *const names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS", "INTS",
                                        "STRINGS", "TENSORS", "GRAPHS", "SPARSE_TENSOR", "SPARSE_TENSORS",
                                        "TYPE_PROTO", "TYPE_PROTOS"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "UNKNOWN";
}

const vp_op_schema *vp_op_schema_find(const char *op, int opset) {
    int lo = 0, hi = vp_n_op_schemas; /* first row of op */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(vp_op_schemas[mid].op, op) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo == vp_n_op_schemas || strcmp(vp_op_schemas[lo].op, op)) return NULL;
    const vp_op_schema *best = &vp_op_schemas[lo];
    for (int i = lo + 1; i < vp_n_op_schemas && !strcmp(vp_op_schemas[i].op, op); i++)
        if (vp_op_schemas[i].since <= opset) best = &vp_op_schemas[i];
    return best;
}

typedef struct check_ctx {
    const char *model;
    int lenient;
    int warnings;
    vp_error *err;
} check_ctx;

/* An unknown attribute or too new an opset: refused, or warned of when lenient. */
static vp_status refuse_or_warn(check_ctx *c, const char *msg) {
    if (!c->lenient) return vp_fail(c->err, VP_ERR_UNSUPPORTED, "%s (--lenient goes on with a warning)", msg);
    if (c->warnings++ < MAX_WARNINGS) fprintf(stderr, "onnx-vplan: warning: %s\n", msg);
    return VP_OK;
}

static vp_status check_graph(const vp_graph *g, check_ctx *c) {
    char msg[sizeof c->err->msg];
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        const vp_op_schema *sc =
            !n->domain[0] || !strcmp(n->domain, "ai.onnx") ? vp_op_schema_find(n->op_type, g->opset_onnx) : NULL;
        for (int a = 0; sc && a < n->n_attrs; a++) {
            const vp_attr *at = &n->attrs[a];
            const vp_attr_spec *spec = NULL;
            for (int k = 0; k < sc->n_attrs && !spec; k++)
                if (!strcmp(sc->attrs[k].name, at->name)) spec = &sc->attrs[k];
            if (!spec) {
                int len = snprintf(msg, sizeof msg, "%s: node '%s' (%s): unknown attribute '%s' (%s at opset %d has",
                                   c->model, n->name, n->op_type, at->name, n->op_type, g->opset_onnx);
                for (int k = 0; k < sc->n_attrs && len > 0 && (size_t)len < sizeof msg; k++)
                    len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s", k ? ", " : " ", sc->attrs[k].name);
                if (len > 0 && (size_t)len < sizeof msg)
                    snprintf(msg + len, sizeof msg - (size_t)len, "%s)", sc->n_attrs ? "" : " none");
                vp_status s = refuse_or_warn(c, msg);
                if (s) return s;
                continue;
            }
            /* no type and no value (an IR-1 attribute with an empty list): read as absent */
            if (at->type != spec->type && at->type != VP_ATTR_UNDEFINED)
                return vp_fail(c->err, VP_ERR_INVALID,
                               "%s: node '%s' (%s): attribute '%s' is %s, but ONNX's %s (opset %d) takes %s",
                               c->model, n->name, n->op_type, at->name, vp_attr_type_name(at->type), n->op_type,
                               g->opset_onnx, vp_attr_type_name(spec->type));
        }
        for (int a = 0; a < n->n_attrs; a++)
            if (n->attrs[a].graph) {
                vp_status s = check_graph(n->attrs[a].graph, c);
                if (s) return s;
            }
    }
    return VP_OK;
}

vp_status vp_attr_schema_check(const vp_graph *g, const char *model, int lenient, vp_error *err) {
    check_ctx c = {model, lenient, 0, err};
    if (g->opset_onnx > vp_attr_schema_max_opset) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s: imports ONNX opset %d; onnx-vplan implements opsets up to %d (onnx %s)", model,
                 g->opset_onnx, vp_attr_schema_max_opset, vp_attr_schema_onnx_version);
        vp_status s = refuse_or_warn(&c, msg);
        if (s) return s;
    }
    vp_status s = check_graph(g, &c);
    if (!s && c.warnings > MAX_WARNINGS)
        fprintf(stderr, "onnx-vplan: warning: %s: %d more like these\n", model, c.warnings - MAX_WARNINGS);
    return s;
}
