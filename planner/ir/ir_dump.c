/* The IR as text, for reading between passes (`--dump-after PASS`).
 *
 * In: a graph and, optionally, an order of its nodes (a plan's steps); a title.  Out:
 * one line per node on the stream: its index, phase, op, outputs with dtype and shape,
 * inputs, and its attributes (lists and tensors abbreviated), after a header that counts
 * nodes and values and lists the graph's inputs, outputs and trainable parameters.
 * Keeps true: it reads the graph only, and prints folded nodes marked as such, so two
 * dumps of the same IR are the same text. */
#include "ir/ir_dump.h"

#include <inttypes.h>
#include <string.h>

static const char *phase_name(vp_phase p) {
    static const char *const names[] = {"forward", "loss", "backward", "recompute", "optimizer", "comm"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

static const char *short_dtype(vp_dtype t) {
    switch (t) {
    case VP_F32: return "f32";
    case VP_F16: return "f16";
    case VP_BF16: return "bf16";
    case VP_F64: return "f64";
    case VP_I64: return "i64";
    case VP_I32: return "i32";
    case VP_I8: return "i8";
    case VP_U8: return "u8";
    case VP_BOOL: return "bool";
    default: return vp_dtype_name(t);
    }
}

static void value(FILE *f, const vp_graph *g, int v) {
    if (v < 0) {
        fputs("_", f);
        return;
    }
    const vp_value *x = &g->values[v];
    fprintf(f, "%s:%s[", x->name, short_dtype(x->dtype));
    for (int d = 0; d < x->rank; d++) fprintf(f, "%s%" PRId64, d ? "," : "", x->dims[d]);
    fputs("]", f);
}

static void attr(FILE *f, const vp_attr *a) {
    fprintf(f, "%s=", a->name);
    int shown = a->n < 6 ? a->n : 6;
    switch (a->type) {
    case VP_ATTR_FLOAT: fprintf(f, "%g", a->f); break;
    case VP_ATTR_INT: fprintf(f, "%" PRId64, a->i); break;
    case VP_ATTR_STRING: fprintf(f, "'%.40s'", a->s ? a->s : ""); break;
    case VP_ATTR_INTS:
        fputs("[", f);
        for (int k = 0; k < shown; k++) fprintf(f, "%s%" PRId64, k ? "," : "", a->ints[k]);
        fprintf(f, "%s]", a->n > shown ? ",..." : "");
        break;
    case VP_ATTR_FLOATS:
        fputs("[", f);
        for (int k = 0; k < shown; k++) fprintf(f, "%s%g", k ? "," : "", a->floats[k]);
        fprintf(f, "%s]", a->n > shown ? ",..." : "");
        break;
    case VP_ATTR_TENSOR: fputs("<tensor>", f); break;
    case VP_ATTR_GRAPH: fputs("<graph>", f); break;
    default: fputs("<...>", f); break;
    }
}

static void node(FILE *f, const vp_graph *g, int i, int at) {
    const vp_node *n = &g->nodes[i];
    fprintf(f, "%5d %-9s ", at, n->folded ? "folded" : phase_name(n->phase));
    for (int k = 0; k < n->n_outputs; k++) {
        if (k) fputs(", ", f);
        value(f, g, n->outputs[k]);
    }
    fprintf(f, " = %s%s%s(", n->domain[0] ? n->domain : "", n->domain[0] ? "." : "", n->op_type);
    for (int k = 0; k < n->n_inputs; k++) {
        if (k) fputs(", ", f);
        if (n->inputs[k] < 0) fputs("_", f);
        else fputs(g->values[n->inputs[k]].name, f);
    }
    fputs(")", f);
    if (n->n_attrs) {
        fputs(" {", f);
        for (int k = 0; k < n->n_attrs; k++) {
            if (k) fputs(", ", f);
            attr(f, &n->attrs[k]);
        }
        fputs("}", f);
    }
    fprintf(f, "  # %s\n", n->name);
}

void vp_ir_dump(FILE *f, const vp_graph *g, const int *order, int n_order, const char *title) {
    int n = order ? n_order : g->n_nodes, params = 0;
    for (int v = 0; v < g->n_values; v++) params += (g->values[v].flags & VP_VAL_PARAM) != 0;
    fprintf(f, "# %s: %d nodes, %d values, %d trainable parameters (%s)\n", title, n, g->n_values, params,
            g->path ? g->path : "");
    fputs("# inputs:", f);
    for (int k = 0; k < g->n_inputs; k++) {
        fputc(' ', f);
        value(f, g, g->inputs[k]);
    }
    fputs("\n# outputs:", f);
    for (int k = 0; k < g->n_outputs; k++) {
        fputc(' ', f);
        value(f, g, g->outputs[k]);
    }
    fputs("\n", f);
    for (int k = 0; k < n; k++) node(f, g, order ? order[k] : k, k);
}
