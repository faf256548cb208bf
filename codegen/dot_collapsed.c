/* The collapsed drawing: past DOT_COLLAPSE_STEPS steps (or DOT_LOOSE_STEPS without the
 * ladder) each cluster becomes one summary node saying its block, phase group, step
 * count and weights, and the edges between clusters are summed into one per pair,
 * labelled with how many tensors and bytes cross it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dot_internal.h"
#include "report.h"

typedef struct dot_link {
    int from, to;   /* cluster ids; from < -1 is input value -from-2 */
    int64_t bytes;
    int count;
} dot_link;

static int link_cmp(const void *a, const void *b) {
    const dot_link *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return x->to < y->to ? -1 : x->to > y->to;
}

static void write_summary_node(const dot_ctx *c, int k) {
    const dot_cluster *cl = &c->cl[k];
    int ph = cl->group == GROUP_BWD ? VP_PHASE_BACKWARD : cl->group == GROUP_OPT ? VP_PHASE_OPTIMIZER
             : cl->group == GROUP_COMM ? VP_PHASE_COMM : VP_PHASE_FORWARD;
    fprintf(c->f, "  c%d [label=\"", k);
    vp_dot_put_esc(c->f, cl->key[0] ? cl->key : "(top level)");
    fprintf(c->f, "\\n%s: %d step%s", vp_dot_group_name[cl->group], cl->n_steps, cl->n_steps == 1 ? "" : "s");
    vp_dot_write_weights_note(c->f, cl);
    if (cl->has_peak) fprintf(c->f, "\\npeak (step %d)", c->p->peak_step);
    fprintf(c->f, "\", fillcolor=\"%s\", color=\"%s\"", vp_dot_phase_fill[ph], vp_dot_phase_line[ph]);
    if (cl->has_peak) fprintf(c->f, ", color=\"#d62728\", penwidth=3, fontcolor=\"#d62728\"");
    fprintf(c->f, "];\n");
}

/* Edges between clusters, summed; returns how many links went into *out. */
static int collect_links(const dot_ctx *c, dot_link **out) {
    size_t cap = 16, n = 0;
    dot_link *l = malloc(cap * sizeof *l);
    for (int s = 0; l && s < c->p->n_steps; s++) {
        const vp_node *nd = &c->g->nodes[c->p->steps[s]];
        for (int k = 0; k < nd->n_inputs; k++) {
            int v = nd->inputs[k], ps = v >= 0 ? c->producer_step[v] : -1;
            if (v < 0 || vp_dot_seen_before(nd, k) || (ps < 0 && !vp_dot_drawn_input(c, v))) continue;
            int from = ps >= 0 ? c->cluster_of[ps] : -v - 2;
            if (from == c->cluster_of[s]) continue;
            if (n == cap) {
                dot_link *nl = realloc(l, (cap *= 2) * sizeof *l);
                if (!nl) break;
                l = nl;
            }
            int64_t b = vp_dot_value_bytes(c, v);
            l[n++] = (dot_link){from, c->cluster_of[s], b > 0 ? b : 0, 1};
        }
    }
    if (!l) return -1;
    qsort(l, n, sizeof *l, link_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && l[m - 1].from == l[i].from && l[m - 1].to == l[i].to) {
            l[m - 1].bytes += l[i].bytes;
            l[m - 1].count++;
        } else {
            l[m++] = l[i];
        }
    }
    *out = l;
    return (int)m;
}

vp_status vp_dot_write_collapsed(const dot_ctx *c) {
    for (int k = 0; k < c->n_cl; k++) write_summary_node(c, k);
    dot_link *l;
    int n = collect_links(c, &l);
    if (n < 0) return VP_ERR_NOMEM;
    char b[32];
    for (int i = 0; i < n; i++) {
        if (l[i].from < -1 && (i == 0 || l[i - 1].from != l[i].from)) vp_dot_write_input(c, -l[i].from - 2);
        if (l[i].from < -1) fprintf(c->f, "  in%d -> c%d", -l[i].from - 2, l[i].to);
        else fprintf(c->f, "  c%d -> c%d", l[i].from, l[i].to);
        fprintf(c->f, " [label=\"");
        if (l[i].count > 1) fprintf(c->f, "%d tensors, ", l[i].count);
        fprintf(c->f, "%s", vp_human_bytes(l[i].bytes, b, sizeof b));
        int loose = !c->ladder && l[i].from >= 0 && c->cl[l[i].from].group != c->cl[l[i].to].group;
        fprintf(c->f, "\", penwidth=%.2f%s];\n", l[i].count > 8 ? 2.0 : 0.7 + l[i].count * 0.15,
                loose ? ", constraint=false" : "");
    }
    free(l);
    return VP_OK;
}
