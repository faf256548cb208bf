#include "report.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json_writer.h"
#include "memory/workspace.h"

int vp_parse_size(const char *s, int64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || !isfinite(v)) return 0;
    while (*end == ' ') end++;
    static const struct { const char *u; double m; } units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}, {"T", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].u) == 0) {
            double b = v * units[i].m;
            /* a size given as above zero that rounds to no bytes (1e-300) is not the 0 it
             * would be reported as */
            if (b > 9.0e18 || (b > 0 && b < 0.5)) return 0;
            *out = (int64_t)llround(b);
            return 1;
        }
    }
    return 0;
}

const char *vp_human_bytes(int64_t b, char *buf, size_t len) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)b;
    int k = 0;
    while (x >= 1024 && k < 4) {
        x /= 1024;
        k++;
    }
    snprintf(buf, len, k ? "%.2f %s" : "%.0f %s", x, u[k]);
    return buf;
}

static const char *phase_name(vp_phase p) {
    static const char *n[] = {"forward", "loss", "backward", "recompute", "optimizer", "comm"};
    return (int)p >= 0 && p <= VP_PHASE_COMM ? n[p] : "?";
}

typedef struct live_item {
    int buffer;
    int64_t size;
} live_item;

static int by_size_desc(const void *a, const void *b) {
    const live_item *x = a, *y = b;
    return x->size < y->size ? 1 : x->size > y->size ? -1 : x->buffer - y->buffer;
}

/* Roots live at the peak step, largest first; returns their count (caller frees). */
static int live_at_peak(const vp_plan *p, live_item **out) {
    live_item *it = malloc(((size_t)p->n_buffers + 1) * sizeof *it);
    int n = 0;
    for (int b = 0; it && b < p->n_buffers; b++) {
        const vp_buffer *buf = &p->buffers[b];
        if (buf->alias_of >= 0 || buf->first > p->peak_step || buf->last < p->peak_step) continue;
        it[n++] = (live_item){b, buf->size};
    }
    if (it) qsort(it, (size_t)n, sizeof *it, by_size_desc);
    *out = it;
    return n;
}

/* Buffers with no storage of their own, by why: views of their input, in-place writes
 * over a dead input, updates of a parameter or state (carried). */
typedef struct shared_counts {
    int views, in_place, updates;
    int64_t bytes;
} shared_counts;

/* Bytes of storage by the dtype of the value owning it (each alias group once, by its
 * root, as the categories count): what mixed precision moved to 2-byte types. */
void vp_report_dtype_bytes(const vp_plan *p, int64_t by[VP_DTYPE_COUNT_]) {
    memset(by, 0, sizeof(int64_t) * VP_DTYPE_COUNT_);
    for (int b = 0; b < p->n_buffers; b++) {
        const vp_buffer *buf = &p->buffers[b];
        vp_dtype t = p->g->values[buf->value].dtype;
        if (buf->alias_of < 0 && (unsigned)t < VP_DTYPE_COUNT_) by[t] += buf->size;
    }
}

/* The model states per trainable parameter element (the way the mixed-precision
 * literature counts them: Adam with fp16 copies is 4 + 2 + 2 + 8 = 16 bytes with fp16
 * gradients; ours reach the update in float32, 4).  Sizes are the values' own, without
 * the arena's alignment padding; frozen parameters count in the bytes, not the elements. */
static const vp_category model_states[] = {VP_CAT_PARAMETERS, VP_CAT_WEIGHT_COPIES, VP_CAT_GRADIENTS, VP_CAT_OPTIMIZER_STATE};

static int64_t per_param(const vp_plan *p, double out[4]) {
    int64_t elems = 0, bytes[VP_CAT_COUNT] = {0};
    for (int v = 0; v < p->g->n_values; v++)
        if (p->g->values[v].flags & VP_VAL_PARAM) elems += vp_value_numel(&p->g->values[v]);
    for (int b = 0; b < p->n_buffers; b++) {
        const vp_buffer *buf = &p->buffers[b];
        const vp_value *v = &p->g->values[buf->value];
        if (buf->alias_of < 0 && (unsigned)buf->cat < VP_CAT_COUNT)
            bytes[buf->cat] += vp_value_numel(v) * (int64_t)vp_dtype_size(v->dtype);
    }
    for (int k = 0; k < 4; k++) out[k] = elems ? (double)bytes[model_states[k]] / (double)elems : 0;
    return elems;
}

static shared_counts count_shared(const vp_plan *p) {
    shared_counts sc = {0, 0, 0, 0};
    for (int b = 0; b < p->n_buffers; b++) {
        const vp_buffer *buf = &p->buffers[b];
        if (buf->alias_of < 0) continue;
        int prod = p->g->values[buf->value].producer;
        const vp_node *n = prod >= 0 ? &p->g->nodes[prod] : NULL;
        if (n && vp_node_is_view(p->g, n) && n->outputs[0] == buf->value) sc.views++;
        else if (n && n->phase != VP_PHASE_OPTIMIZER && !(p->g->values[buf->value].flags & (VP_VAL_PARAM | VP_VAL_STATE)) &&
                 !(p->g->values[p->buffers[buf->alias_of].value].flags & (VP_VAL_PARAM | VP_VAL_STATE)))
            sc.in_place++;
        else sc.updates++;
        sc.bytes += buf->size;
    }
    return sc;
}

static void phase_counts(const vp_plan *p, int *counts) {
    memset(counts, 0, sizeof(int) * (VP_PHASE_COMM + 1));
    for (int s = 0; s < p->n_steps; s++) counts[p->g->nodes[p->steps[s]].phase]++;
}

void vp_report_text(FILE *f, const vp_plan *p, const vp_report_ctx *c) {
    char b1[32], b2[32], b3[32];
    int counts[VP_PHASE_COMM + 1];
    phase_counts(p, counts);
    fprintf(f, "plan of %s\n", c->model ? c->model : "(model)");
    if (c->knobs && c->knobs[0]) fprintf(f, "  %s\n", c->knobs);
    fprintf(f, "  device %s (alignment %lld B), %s update\n", p->device.name, (long long)p->device.alignment,
            p->fused_update ? "fused" : "separate");
    fprintf(f, "steps: %d (forward %d, loss %d, backward %d, recompute %d, optimizer %d)\n", p->n_steps,
            counts[VP_PHASE_FORWARD], counts[VP_PHASE_LOSS], counts[VP_PHASE_BACKWARD], counts[VP_PHASE_RECOMPUTE],
            counts[VP_PHASE_OPTIMIZER]);
    fprintf(f, "memory by category (each buffer counted once):\n");
    int64_t total = 0;
    for (int k = 0; k < VP_CAT_COUNT; k++) total += p->category_bytes[k];
    for (int k = 0; k < VP_CAT_COUNT; k++)
        fprintf(f, "  %-16s %12s  %5.1f%%\n", vp_category_name((vp_category)k), vp_human_bytes(p->category_bytes[k], b1, sizeof b1),
                total ? 100.0 * (double)p->category_bytes[k] / (double)total : 0.0);
    double pp[4];
    int64_t elems = per_param(p, pp);
    if (elems)
        fprintf(f, "per trainable parameter (%lld): parameters %.2f B, weight copies %.2f B, gradients %.2f B, optimizer "
                   "state %.2f B; %.2f B in all\n", (long long)elems, pp[0], pp[1], pp[2], pp[3], pp[0] + pp[1] + pp[2] + pp[3]);
    int64_t by[VP_DTYPE_COUNT_];
    vp_report_dtype_bytes(p, by);
    fprintf(f, "memory by dtype:");
    for (int t = 0; t < VP_DTYPE_COUNT_; t++)
        if (by[t]) fprintf(f, " %s %s", vp_dtype_name((vp_dtype)t), vp_human_bytes(by[t], b1, sizeof b1));
    fprintf(f, "\n");
    shared_counts sc = count_shared(p);
    fprintf(f, "shared storage: %d views, %d in-place writes, %d updates in place (%s of buffers without storage of "
               "their own)\n", sc.views, sc.in_place, sc.updates, vp_human_bytes(sc.bytes, b1, sizeof b1));
    vp_workspace_summary ws = vp_plan_workspace_summary(p);
    if (ws.steps)
        fprintf(f, "workspaces: %d steps (%d cuBLAS products, %d %s convolutions), the largest %s, live one step "
                   "at a time (%s summed)\n", ws.steps, ws.blas_steps, ws.conv_steps, p->device.host_dnn ? "oneDNN" : "cuDNN",
                vp_human_bytes(ws.largest, b1, sizeof b1), vp_human_bytes(ws.total, b2, sizeof b2));
    double ratio = p->lower_bound_bytes ? (double)p->arena_bytes / (double)p->lower_bound_bytes : 1.0;
    fprintf(f, "arena:       %s (%lld bytes)\n", vp_human_bytes(p->arena_bytes, b1, sizeof b1), (long long)p->arena_bytes);
    if (p->host_bytes)
        fprintf(f, "host:        %s (%lld bytes) beside the arena: the offloaded optimizer state and its update\n",
                vp_human_bytes(p->host_bytes, b1, sizeof b1), (long long)p->host_bytes);
    fprintf(f, "lower bound: %s (%lld bytes); arena / bound = %.4f, kept %s over %d piece%s; %s\n",
            vp_human_bytes(p->lower_bound_bytes, b2, sizeof b2), (long long)p->lower_bound_bytes, ratio, p->arena.kept,
            p->arena.n_pieces, p->arena.n_pieces == 1 ? "" : "s", vp_arena_outcome(&p->arena));
    if (p->n_steps) {
        const vp_node *n = &p->g->nodes[p->steps[p->peak_step]];
        live_item *it;
        int nl = live_at_peak(p, &it);
        fprintf(f, "peak at step %d, '%s' (%s, %s): %d buffers live; the largest:\n", p->peak_step, n->name, n->op_type,
                phase_name(n->phase), nl);
        for (int i = 0; i < nl && i < c->top_live; i++) {
            const vp_buffer *buf = &p->buffers[it[i].buffer];
            fprintf(f, "  %-40s %-16s %12s\n", p->g->values[buf->value].name, vp_category_name(buf->cat),
                    vp_human_bytes(buf->size, b1, sizeof b1));
        }
        free(it);
    }
    if (p->budget_bytes > 0) {
        if (p->arena_bytes <= p->budget_bytes) {
            fprintf(f, "budget %s: fits, %s to spare\n", vp_human_bytes(p->budget_bytes, b1, sizeof b1),
                    vp_human_bytes(p->budget_bytes - p->arena_bytes, b2, sizeof b2));
        } else {
            /* what fills the peak, by category */
            int64_t at_peak[VP_CAT_COUNT] = {0};
            for (int b = 0; b < p->n_buffers; b++) {
                const vp_buffer *buf = &p->buffers[b];
                if (buf->alias_of < 0 && buf->first <= p->peak_step && buf->last >= p->peak_step) at_peak[buf->cat] += buf->size;
            }
            int top = 0, second = -1;
            for (int k = 1; k < VP_CAT_COUNT; k++)
                if (at_peak[k] > at_peak[top]) top = k;
            for (int k = 0; k < VP_CAT_COUNT; k++)
                if (k != top && (second < 0 || at_peak[k] > at_peak[second])) second = k;
            char b4[32];
            fprintf(f, "budget %s: does NOT fit, over by %s; at the peak: %s %s, %s %s\n",
                    vp_human_bytes(p->budget_bytes, b1, sizeof b1), vp_human_bytes(p->arena_bytes - p->budget_bytes, b2, sizeof b2),
                    vp_category_name((vp_category)top), vp_human_bytes(at_peak[top], b3, sizeof b3),
                    vp_category_name((vp_category)second), vp_human_bytes(at_peak[second], b4, sizeof b4));
            if (c->remat && c->remat->kind != VP_REMAT_NONE && c->remat->kind != VP_REMAT_ILP)
                fprintf(f, "the smallest peak %s checkpointing reaches is this plan's arena, %s\n", vp_remat_name(c->remat->kind),
                        vp_human_bytes(p->arena_bytes, b1, sizeof b1));
        }
    }
    if (c->remat) {
        const vp_remat_result *r = c->remat;
        fprintf(f, "checkpointing: %s", vp_remat_name(r->kind));
        if (r->kind == VP_REMAT_ILP) fprintf(f, ", %d recompute nodes", r->n_recompute);
        else if (r->kind != VP_REMAT_NONE) {
            fprintf(f, ", %d blocks (%d distinct", r->n_blocks, r->n_distinct_blocks);
            if (r->n_layers) fprintf(f, "; %d of the model's %d layers one block each", r->n_layer_blocks, r->n_layers);
            fprintf(f, "), %d recompute nodes%s%s", r->n_recompute, r->choice[0] ? ", options " : "", r->choice);
        }
        fprintf(f, "\n");
        if (r->kind == VP_REMAT_ILP && r->ilp.status != VP_ILP_NOT_RUN)
            fprintf(f, "MILP (Checkmate, GLPK): %s; %d binaries, %d continuous, %d rows; recompute %.4f ms, lower bound "
                       "%.4f ms; %d solve%s in %.2f s\n",
                    vp_ilp_status_name(r->ilp.status), r->ilp.n_binary, r->ilp.n_continuous, r->ilp.n_rows,
                    1e3 * r->ilp.objective_seconds, 1e3 * r->ilp.bound_seconds, r->iterations, r->iterations == 1 ? "" : "s",
                    r->ilp.solve_seconds);
        double base = r->step_seconds - r->recompute_seconds;
        fprintf(f, "estimated step time on %s: %.3f ms; recompute +%.1f%% (one extra forward pass would be +%.1f%%)\n",
                p->device.name, 1e3 * r->step_seconds, base > 0 ? 100.0 * r->recompute_seconds / base : 0.0,
                base > 0 ? 100.0 * r->forward_seconds / base : 0.0);
    }
    fprintf(f, "planned in %.3f s\n", p->planning_seconds);
}

void vp_report_json(FILE *f, const vp_plan *p, const vp_report_ctx *c) {
    vp_json j;
    vp_json_init(&j, f, 1);
    vp_json_begin_object(&j);
    vp_json_key(&j, "model");
    vp_json_string(&j, c->model ? c->model : "");
    vp_json_key(&j, "device");
    vp_json_string(&j, p->device.name);
    /* the figures the cost model priced the step with (planner/memory/plan_build.c) */
    const vp_device_profile *d = &p->device;
    vp_json_key(&j, "device_profile");
    vp_json_begin_object(&j);
    const struct {
        const char *key;
        double v;
    } figures[] = {{"flops_fp32", d->peak_flops_fp32},      {"flops_low_precision", d->peak_flops_fp16},
                   {"memory_bytes_per_s", d->mem_bandwidth}, {"launch_seconds", d->launch_overhead},
                   {"link_bytes_per_s", d->link_bandwidth},  {"link_step_seconds", d->link_latency},
                   {"host_link_bytes_per_s", d->host_link_bandwidth}, {"host_memory_bytes_per_s", d->host_bandwidth}};
    for (size_t k = 0; k < sizeof figures / sizeof figures[0]; k++) {
        vp_json_key(&j, figures[k].key);
        vp_json_double(&j, figures[k].v);
    }
    vp_json_end_object(&j);
    vp_json_key(&j, "fused_update");
    vp_json_bool(&j, p->fused_update);
    vp_json_key(&j, "arena_bytes");
    vp_json_int(&j, p->arena_bytes);
    vp_json_key(&j, "host_bytes");
    vp_json_int(&j, p->host_bytes);
    vp_json_key(&j, "lower_bound_bytes");
    vp_json_int(&j, p->lower_bound_bytes);
    vp_json_key(&j, "arena_over_bound");
    vp_json_double(&j, p->lower_bound_bytes ? (double)p->arena_bytes / (double)p->lower_bound_bytes : 1.0);
    vp_json_key(&j, "arena_outcome");
    vp_json_string(&j, vp_arena_outcome(&p->arena));
    vp_json_key(&j, "budget_bytes");
    if (p->budget_bytes > 0) vp_json_int(&j, p->budget_bytes);
    else vp_json_null(&j);
    vp_json_key(&j, "fits");
    vp_json_bool(&j, p->budget_bytes <= 0 || p->arena_bytes <= p->budget_bytes);
    vp_json_key(&j, "categories");
    vp_json_begin_object(&j);
    for (int k = 0; k < VP_CAT_COUNT; k++) {
        vp_json_key(&j, vp_category_name((vp_category)k));
        vp_json_int(&j, p->category_bytes[k]);
    }
    vp_json_end_object(&j);
    double pp[4];
    if (per_param(p, pp)) {
        vp_json_key(&j, "bytes_per_trainable_param");
        vp_json_begin_object(&j);
        for (int k = 0; k < 4; k++) {
            vp_json_key(&j, vp_category_name(model_states[k]));
            vp_json_double(&j, pp[k]);
        }
        vp_json_end_object(&j);
    }
    int64_t by[VP_DTYPE_COUNT_];
    vp_report_dtype_bytes(p, by);
    vp_json_key(&j, "dtype_bytes");
    vp_json_begin_object(&j);
    for (int t = 0; t < VP_DTYPE_COUNT_; t++)
        if (by[t]) {
            vp_json_key(&j, vp_dtype_name((vp_dtype)t));
            vp_json_int(&j, by[t]);
        }
    vp_json_end_object(&j);
    shared_counts sc = count_shared(p);
    vp_json_key(&j, "shared_storage");
    vp_json_begin_object(&j);
    vp_json_key(&j, "views");
    vp_json_int(&j, sc.views);
    vp_json_key(&j, "in_place");
    vp_json_int(&j, sc.in_place);
    vp_json_key(&j, "updates");
    vp_json_int(&j, sc.updates);
    vp_json_key(&j, "bytes");
    vp_json_int(&j, sc.bytes);
    vp_json_end_object(&j);
    vp_workspace_summary ws = vp_plan_workspace_summary(p);
    if (ws.steps) {
        vp_json_key(&j, "workspaces");
        vp_json_begin_object(&j);
        vp_json_key(&j, "steps");
        vp_json_int(&j, ws.steps);
        vp_json_key(&j, "blas_steps");
        vp_json_int(&j, ws.blas_steps);
        vp_json_key(&j, "conv_steps");
        vp_json_int(&j, ws.conv_steps);
        vp_json_key(&j, "largest_bytes");
        vp_json_int(&j, ws.largest);
        vp_json_key(&j, "total_bytes");
        vp_json_int(&j, ws.total);
        vp_json_end_object(&j);
    }
    vp_json_key(&j, "steps");
    vp_json_int(&j, p->n_steps);
    vp_json_key(&j, "buffers");
    vp_json_int(&j, p->n_buffers);
    vp_json_key(&j, "peak_step");
    vp_json_int(&j, p->peak_step);
    vp_json_key(&j, "algorithm");
    vp_json_string(&j, p->arena.kept);
    vp_json_key(&j, "algorithms");
    vp_json_begin_array(&j);
    for (int a = 0; a < p->arena.n_algos; a++) {
        if (!p->arena.algos[a].arena) continue;
        vp_json_begin_object(&j);
        vp_json_key(&j, "name");
        vp_json_string(&j, p->arena.algos[a].name);
        vp_json_key(&j, "arena_bytes");
        vp_json_int(&j, p->arena.algos[a].arena);
        vp_json_end_object(&j);
    }
    vp_json_end_array(&j);
    vp_json_key(&j, "planning_seconds");
    vp_json_double(&j, p->planning_seconds);
    if (c->remat) {
        const vp_remat_result *r = c->remat;
        double base = r->step_seconds - r->recompute_seconds;
        vp_json_key(&j, "remat");
        vp_json_string(&j, vp_remat_name(r->kind));
        vp_json_key(&j, "blocks");
        vp_json_int(&j, r->n_blocks);
        vp_json_key(&j, "layers"); /* from the exporter's module paths; 0 when it names none */
        vp_json_int(&j, r->n_layers);
        vp_json_key(&j, "layer_blocks");
        vp_json_int(&j, r->n_layer_blocks);
        vp_json_key(&j, "recompute_nodes");
        vp_json_int(&j, r->n_recompute);
        if (r->kind == VP_REMAT_ILP && r->ilp.status != VP_ILP_NOT_RUN) {
            vp_json_key(&j, "ilp");
            vp_json_begin_object(&j);
            vp_json_key(&j, "status");
            vp_json_string(&j, vp_ilp_status_name(r->ilp.status));
            vp_json_key(&j, "binaries");
            vp_json_int(&j, r->ilp.n_binary);
            vp_json_key(&j, "rows");
            vp_json_int(&j, r->ilp.n_rows);
            vp_json_key(&j, "recompute_seconds");
            vp_json_double(&j, r->ilp.objective_seconds);
            vp_json_key(&j, "lower_bound_seconds");
            vp_json_double(&j, r->ilp.bound_seconds);
            vp_json_key(&j, "solve_seconds");
            vp_json_double(&j, r->ilp.solve_seconds);
            vp_json_end_object(&j);
        }
        vp_json_key(&j, "estimated_step_seconds");
        vp_json_double(&j, r->step_seconds);
        vp_json_key(&j, "recompute_overhead");
        vp_json_double(&j, base > 0 ? r->recompute_seconds / base : 0.0);
        vp_json_key(&j, "forward_fraction");
        vp_json_double(&j, base > 0 ? r->forward_seconds / base : 0.0);
    }
    if (c->tp) {
        const vp_report_tp *t = c->tp;
        vp_json_key(&j, "tensor_parallel");
        vp_json_begin_object(&j);
        vp_json_key(&j, "ranks");
        vp_json_int(&j, t->ranks);
        vp_json_key(&j, "rank");
        vp_json_int(&j, t->rank);
        vp_json_key(&j, "column_products");
        vp_json_int(&j, t->n_column);
        vp_json_key(&j, "row_products");
        vp_json_int(&j, t->n_row);
        vp_json_key(&j, "weights_sliced");
        vp_json_int(&j, t->n_sliced);
        vp_json_key(&j, "vocab_parallel_embeddings");
        vp_json_int(&j, t->n_embedding);
        vp_json_key(&j, "vocab_parallel_loss");
        vp_json_bool(&j, t->vocab_parallel_loss);
        vp_json_key(&j, "vocab");
        vp_json_int(&j, t->vocab);
        vp_json_key(&j, "sequence_parallel");
        vp_json_bool(&j, t->n_gather > 0);
        vp_json_key(&j, "allgathers_forward");
        vp_json_int(&j, t->n_gather);
        vp_json_key(&j, "reduce_scatters_forward");
        vp_json_int(&j, t->n_scatter);
        vp_json_key(&j, "allgathers_again_backward");
        vp_json_int(&j, t->n_regather);
        vp_json_key(&j, "collectives_forward");
        vp_json_int(&j, t->allreduces_forward);
        vp_json_key(&j, "collectives_backward");
        vp_json_int(&j, t->allreduces_backward);
        vp_json_key(&j, "collective_payload_bytes");
        vp_json_int(&j, t->payload_bytes);
        vp_json_key(&j, "bytes_sent_per_step");
        vp_json_int(&j, t->bytes_sent);
        vp_json_key(&j, "comm_seconds");
        vp_json_double(&j, t->comm_seconds);
        vp_json_key(&j, "parameter_bytes");
        vp_json_int(&j, p->category_bytes[VP_CAT_PARAMETERS]);
        vp_json_key(&j, "communication_bytes");
        vp_json_int(&j, p->category_bytes[VP_CAT_COMM]);
        vp_json_end_object(&j);
    }
    if (c->extra) c->extra(&j, c->extra_arg);
    vp_json_end_object(&j);
    vp_json_finish(&j);
}
