/* The full drawing: one node per step inside its cluster, labelled with its op and a
 * short caption of what it works on, and one edge per value read, from its producer
 * (or its input node), labelled with the value's size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot_internal.h"
#include "report.h"

/* The last DOT_SHORT_LEN bytes of the last two '/' components: "attn/MatMul". */
static void short_name(const char *name, size_t len, char *out, size_t cap) {
    size_t start = len, seen = 0;
    while (start > 0 && !(name[start - 1] == '/' && ++seen == 2)) start--;
    if (len - start > DOT_SHORT_LEN) {
        start = len - DOT_SHORT_LEN;
        snprintf(out, cap, "...%.*s", (int)(len - start), name + start);
    } else {
        snprintf(out, cap, "%.*s", (int)(len - start), name + start);
    }
}

/* What the second label line says: the module for forward nodes, the forward node for
 * backward ones, the parameter for updates. */
static void node_caption(const vp_node *n, char *out, size_t cap) {
    const char *name = n->name ? n->name : "";
    const char *grad = strstr(name, "_grad/"), *upd = strstr(name, "_update/");
    char buf[64];
    if (grad) {
        short_name(name, (size_t)(grad - name), buf, sizeof buf);
        snprintf(out, cap, "grad %.58s", buf);
    } else if (upd) {
        const char *start = upd;
        int dots = 0;
        while (start > name && !(start[-1] == '.' && ++dots == 2)) start--;
        short_name(start, (size_t)(upd - start), out, cap);
    } else {
        short_name(name, strlen(name), out, cap);
    }
}

/* The low dtype a node computes in (mixed precision), or 0: its first fp16/bf16 input. */
static vp_dtype low_dtype(const vp_graph *g, const vp_node *n) {
    for (int k = 0; k < n->n_inputs; k++) {
        vp_dtype t = n->inputs[k] >= 0 ? g->values[n->inputs[k]].dtype : VP_UNDEFINED;
        if (t == VP_F16 || t == VP_BF16) return t;
    }
    return VP_UNDEFINED;
}

static void write_step(const dot_ctx *c, int s, const char *indent) {
    const vp_node *n = &c->g->nodes[c->p->steps[s]];
    char cap[64];
    node_caption(n, cap, sizeof cap);
    int ph = vp_dot_phase_index(n->phase);
    fprintf(c->f, "%ss%d [label=\"%d ", indent, s, s);
    vp_dot_put_esc(c->f, n->op_type);
    fprintf(c->f, "\\n");
    vp_dot_put_esc(c->f, cap);
    if (s == c->p->peak_step) fprintf(c->f, "\\npeak");
    vp_dtype low = low_dtype(c->g, n);
    if (low) fprintf(c->f, "\\n%s", low == VP_BF16 ? "bf16" : "fp16");
    int ws = c->p->workspace ? c->p->workspace[s] : -1;
    char wb[32];
    if (ws >= 0) fprintf(c->f, "\\nworkspace %s", vp_human_bytes(c->p->buffers[ws].size, wb, sizeof wb));
    fprintf(c->f, "\", tooltip=\"");
    vp_dot_put_esc(c->f, n->name);
    /* low precision: shaded (the phase's fill darkening to its outline colour) and dashed */
    if (low)
        fprintf(c->f, "\", fillcolor=\"%s;0.6:%s\", gradientangle=270, color=\"%s\", style=\"rounded,filled,dashed\"",
                vp_dot_phase_fill[ph], vp_dot_phase_line[ph], vp_dot_phase_line[ph]);
    else fprintf(c->f, "\", fillcolor=\"%s\", color=\"%s\"", vp_dot_phase_fill[ph], vp_dot_phase_line[ph]);
    if (s == c->p->peak_step) fprintf(c->f, ", color=\"#d62728\", penwidth=3, fontcolor=\"#d62728\"");
    fprintf(c->f, "];\n");
}

static void write_cluster_open(const dot_ctx *c, int k) {
    const dot_cluster *cl = &c->cl[k];
    fprintf(c->f, "  subgraph cluster_%d {\n    label=\"", k);
    vp_dot_put_esc(c->f, cl->key);
    if (cl->group != GROUP_FWD) fprintf(c->f, " (%s)", vp_dot_group_name[cl->group]);
    vp_dot_write_weights_note(c->f, cl);
    fprintf(c->f, "\"; fontsize=10; style=\"rounded,filled\"; fillcolor=\"%s\"; color=\"%s\";\n", vp_dot_group_fill[cl->group],
            vp_dot_group_line[cl->group]);
}

/* Every step, inside its cluster; clusters in order of first appearance. */
vp_status vp_dot_write_steps(const dot_ctx *c) {
    int n = c->p->n_steps;
    int *order = malloc(((size_t)n + 1) * sizeof *order), *start = calloc((size_t)c->n_cl + 2, sizeof *start);
    if (!order || !start) {
        free(order);
        free(start);
        return VP_ERR_NOMEM;
    }
    /* counting sort by cluster (top level last) keeps execution order within each */
    for (int s = 0; s < n; s++) start[(c->cluster_of[s] < 0 ? c->n_cl : c->cluster_of[s]) + 1]++;
    for (int k = 0; k <= c->n_cl; k++) start[k + 1] += start[k];
    for (int s = 0; s < n; s++) order[start[c->cluster_of[s] < 0 ? c->n_cl : c->cluster_of[s]]++] = s;
    for (int i = 0; i < n; i++) {
        int k = c->cluster_of[order[i]];
        int opens = k >= 0 && (i == 0 || c->cluster_of[order[i - 1]] != k);
        if (opens) write_cluster_open(c, k);
        write_step(c, order[i], k >= 0 ? "    " : "  ");
        if (k >= 0 && (i + 1 == n || c->cluster_of[order[i + 1]] != k)) fprintf(c->f, "  }\n");
    }
    free(order);
    free(start);
    return VP_OK;
}

static int rank_group(const dot_ctx *c, int s) { return c->anchor[s] >= 0 ? c->anchor[s] : s; }

/* An edge within one rank gets its size as an xlabel: dot places those after layout,
 * where a flat edge's label would need an extra rank and routes badly in clusters. */
static void write_edge_label(const dot_ctx *c, int64_t bytes, int flat, int loose, int quantised) {
    char b[32];
    fprintf(c->f, " [%s=\"%s%s\"%s%s];\n", flat ? "xlabel" : "label", quantised ? "int8 " : "",
            bytes >= 0 ? vp_human_bytes(bytes, b, sizeof b) : "", loose ? ", constraint=false" : "",
            quantised ? ", color=\"#b07aa1\", penwidth=1.6, style=bold" : "");
}

/* v is a fake-quantised value (QAT): its edges are drawn bold, labelled int8. */
static int quantised_value(const vp_graph *g, int v) {
    int p = g->values[v].producer;
    return p >= 0 && !strcmp(g->nodes[p].domain, "vplan") && !strcmp(g->nodes[p].op_type, "FakeQuant");
}

/* Without the ladder, an edge from one phase group to another (a saved activation read
 * in backward) would span the whole drawing; it is drawn but does not rank its ends. */
static int edge_loose(const dot_ctx *c, int from_step, int to_step) {
    return !c->ladder && vp_dot_group_of(c->g->nodes[c->p->steps[from_step]].phase) != vp_dot_group_of(c->g->nodes[c->p->steps[to_step]].phase);
}

vp_status vp_dot_write_edges(const dot_ctx *c) {
    char *drawn = calloc((size_t)c->g->n_values + 1, 1);
    if (!drawn) return VP_ERR_NOMEM;
    for (int s = 0; s < c->p->n_steps; s++) {
        const vp_node *n = &c->g->nodes[c->p->steps[s]];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || vp_dot_seen_before(n, k)) continue;
            int flat = 0, loose = 0;
            if (c->producer_step[v] >= 0) {
                fprintf(c->f, "  s%d -> s%d", c->producer_step[v], s);
                flat = rank_group(c, c->producer_step[v]) == rank_group(c, s);
                loose = edge_loose(c, c->producer_step[v], s);
            } else if (vp_dot_drawn_input(c, v)) {
                if (!drawn[v]) vp_dot_write_input(c, v);
                drawn[v] = 1;
                fprintf(c->f, "  in%d -> s%d", v, s);
            } else {
                continue;
            }
            write_edge_label(c, vp_dot_value_bytes(c, v), flat, loose, quantised_value(c->g, v));
        }
    }
    free(drawn);
    return VP_OK;
}
