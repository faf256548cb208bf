/* How the drawing looks: DOT string escaping, the colours per phase and phase group,
 * the graph header with the plan's numbers, the legend of the phases present, and the
 * label pieces both drawings share (weights notes, input nodes), so the full drawing
 * (dot_full.c) and the collapsed one (dot_collapsed.c) read alike. */
#include <stdint.h>
#include <stdio.h>

#include "dot_internal.h"
#include "memory/workspace.h"
#include "report.h"

const char *const vp_dot_group_name[GROUP_COUNT] = {"forward", "backward", "optimizer", "comm"};
/* Fill and border per phase, the same hues as the timeline's phase strip. */
const char *const vp_dot_phase_fill[] = {"#dbe9f6", "#fde9c9", "#f9d5d3", "#dff0d8", "#e6dcef", "#eeeeee"};
const char *const vp_dot_phase_line[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#888888"};
const char *const vp_dot_group_fill[GROUP_COUNT] = {"#f5f9fd", "#fdf6f5", "#f9f5fc", "#f6f6f6"};
const char *const vp_dot_group_line[GROUP_COUNT] = {"#9ab8d6", "#dba7a3", "#c2a9d3", "#bbbbbb"};

int vp_dot_phase_index(vp_phase ph) { return (int)ph >= 0 && ph <= VP_PHASE_COMM ? (int)ph : 0; }

/* A DOT double-quoted string body: quotes and backslashes escaped, control bytes dropped. */
void vp_dot_put_esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

static const char *model_name(const vp_graph *g) {
    if (g->path && g->path[0]) return g->path;
    if (g->graph_name && g->graph_name[0]) return g->graph_name;
    return "plan";
}

void vp_dot_write_header(const dot_ctx *c) {
    const vp_plan *p = c->p;
    char a[32], lb[32], bud[32];
    FILE *f = c->f;
    fprintf(f, "digraph plan {\n  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, labelloc=t, newrank=true,\n");
    fprintf(f, "         nodesep=0.15, ranksep=0.3, outputorder=edgesfirst");
    if (p->n_steps > 300) fprintf(f, ", nslimit=4, nslimit1=4, mclimit=0.5"); /* bound dot's time on big plans */
    fprintf(f, ",\n         label=\"");
    vp_dot_put_esc(f, model_name(c->g));
    fprintf(f, ": %d steps, %d buffers\\narena %s, lower bound %s", p->n_steps, p->n_buffers,
            vp_human_bytes(p->arena_bytes, a, sizeof a), vp_human_bytes(p->lower_bound_bytes, lb, sizeof lb));
    if (p->budget_bytes > 0) fprintf(f, ", budget %s", vp_human_bytes(p->budget_bytes, bud, sizeof bud));
    if (p->n_steps > 0) fprintf(f, "; peak at step %d", p->peak_step);
    vp_workspace_summary ws = vp_plan_workspace_summary(p);
    if (ws.steps) fprintf(f, "\\nworkspaces: %d steps, the largest %s", ws.steps, vp_human_bytes(ws.largest, a, sizeof a));
    if (c->collapsed && p->n_steps > DOT_COLLAPSE_STEPS)
        fprintf(f, "\\ncollapsed: more than %d steps, one node per block and phase (%d nodes)", DOT_COLLAPSE_STEPS,
                c->n_cl);
    else if (c->collapsed)
        fprintf(f, "\\ncollapsed: backward steps not matched to forward steps, one node per block and phase (%d nodes)",
                c->n_cl);
    fprintf(f, "\"];\n");
    fprintf(f, "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=9, height=0.3, "
               "margin=\"0.08,0.03\", penwidth=0.8];\n");
    fprintf(f, "  edge [fontname=\"Helvetica\", fontsize=7, fontcolor=\"#555555\", color=\"#8a8a8a\", "
               "arrowsize=0.5, penwidth=0.7];\n");
}

/* The phases the plan has, and the peak mark. */
void vp_dot_write_legend(const dot_ctx *c) {
    static const char *const names[] = {"forward", "loss", "backward", "recompute", "optimizer", "comm"};
    int seen[VP_PHASE_COMM + 1] = {0};
    for (int s = 0; s < c->p->n_steps; s++) seen[vp_dot_phase_index(c->g->nodes[c->p->steps[s]].phase)] = 1;
    FILE *f = c->f;
    fprintf(f, "  subgraph cluster_legend {\n    label=\"phases\"; fontsize=10; style=\"rounded\"; color=\"#cccccc\";\n");
    for (int i = 0; i <= VP_PHASE_COMM; i++)
        if (seen[i])
            fprintf(f, "    legend_%d [label=\"%s\", fillcolor=\"%s\", color=\"%s\"];\n", i, names[i], vp_dot_phase_fill[i],
                    vp_dot_phase_line[i]);
    fprintf(f, "    legend_peak [label=\"peak step\", fillcolor=\"#ffffff\", color=\"#d62728\", penwidth=3];\n");
    fprintf(f, "  }\n");
}

void vp_dot_write_weights_note(FILE *f, const dot_cluster *k) {
    char b[32];
    if (k->n_params)
        fprintf(f, "\\n%d param%s, %s", k->n_params, k->n_params == 1 ? "" : "s", vp_human_bytes(k->param_bytes, b, sizeof b));
    if (k->n_state) fprintf(f, "\\n%d state, %s", k->n_state, vp_human_bytes(k->state_bytes, b, sizeof b));
}

void vp_dot_write_input(const dot_ctx *c, int v) {
    const vp_value *val = &c->g->values[v];
    char shape[128];
    fprintf(c->f, "  in%d [shape=box, style=\"filled\", fillcolor=\"#e8f4e5\", color=\"#59a14f\", fontsize=8, label=\"", v);
    vp_dot_put_esc(c->f, val->name);
    fprintf(c->f, "\\n%s %s\"];\n", vp_dtype_name(val->dtype),
            val->rank >= 0 ? vp_shape_str(val->rank, val->dims, shape, sizeof shape) : "?");
}
