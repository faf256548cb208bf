/* Memory categories mean what they say, for every model in models/, planned plainly,
 * with gradients only, and with checkpointing:
 * - every forward value still live when the backward pass starts (read by a backward or
 *   recompute node, or after the step, directly or through a view sharing its storage)
 *   is in storage counted as activations, unless that storage exists before the step
 *   (a parameter viewed);
 * - storage counted as activations holds such a value;
 * - the category bytes add up exactly to the bytes the buffers hold, each alias group
 *   counted once;
 * - in mixed precision (bf16, fp16), a parameter's low copy (a Cast of it) is counted as
 *   weight copies, saved for the backward or not, and nothing else is.
 * Liveness is re-derived here from the steps, not read from the planner's buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "model_util.h"
#include "memory/plan.h"
#include "remat/remat.h"

static int root_of(const vp_plan *p, int b) {
    while (p->buffers[b].alias_of >= 0) b = p->buffers[b].alias_of;
    return b;
}

/* Whether value v, produced before step start, is read at start or later: by a step,
 * through a view that shares its storage, or after the step (an output, the loss). */
static int read_from(const vp_plan *p, const int *step_of, int v, int start, int depth) {
    const vp_graph *g = p->g;
    const vp_value *val = &g->values[v];
    if ((val->flags & VP_VAL_OUTPUT) || p->buffer_of[v] == p->loss_buffer) return 1;
    for (int c = 0; c < val->n_consumers; c++) {
        int r = val->consumers[c];
        if (step_of[r] < 0) continue;
        if (step_of[r] >= start) return 1;
        const vp_node *n = &g->nodes[r];
        if (depth < 64 && vp_node_is_view(g, n) && n->inputs[0] == v && p->buffer_of[n->outputs[0]] >= 0 &&
            root_of(p, p->buffer_of[n->outputs[0]]) == root_of(p, p->buffer_of[v]) &&
            read_from(p, step_of, n->outputs[0], start, depth + 1))
            return 1;
    }
    return 0;
}

/* Whether v is the output of a Cast of a trainable parameter. */
static int weight_copy(const vp_graph *g, int v) {
    int pr = g->values[v].producer;
    if (pr < 0 || strcmp(g->nodes[pr].op_type, "Cast") || g->nodes[pr].inputs[0] < 0) return 0;
    return (g->values[g->nodes[pr].inputs[0]].flags & VP_VAL_PARAM) != 0;
}

static void check_categories(const char *what, const vp_plan *p) {
    const vp_graph *g = p->g;
    int *step_of = malloc(((size_t)g->n_nodes + 1) * sizeof *step_of);
    char *saved = calloc((size_t)p->n_buffers + 1, 1); /* per root: holds a value saved for the backward */
    for (int i = 0; i < g->n_nodes; i++) step_of[i] = -1;
    int start = p->n_steps;
    for (int s = 0; s < p->n_steps; s++) {
        step_of[p->steps[s]] = s;
        vp_phase ph = g->nodes[p->steps[s]].phase;
        if (start == p->n_steps && (ph == VP_PHASE_BACKWARD || ph == VP_PHASE_RECOMPUTE)) start = s;
    }
    int n_saved = 0, wrong = 0;
    char first_wrong[512] = "";
    for (int b = 0; b < p->n_buffers; b++) {
        int v = p->buffers[b].value, pr = g->values[v].producer;
        if (pr < 0 || step_of[pr] < 0 || step_of[pr] >= start) continue;
        vp_phase ph = g->nodes[pr].phase;
        if ((ph != VP_PHASE_FORWARD && ph != VP_PHASE_LOSS) || !read_from(p, step_of, v, start, 0)) continue;
        int r = root_of(p, b);
        int rp = g->values[p->buffers[r].value].producer;
        if (rp < 0 || step_of[rp] < 0) continue; /* a view of storage that exists before the step */
        saved[r] = 1;
        n_saved++;
        vp_category want = weight_copy(g, p->buffers[r].value) ? VP_CAT_WEIGHT_COPIES : VP_CAT_ACTIVATIONS;
        if (p->buffers[r].cat != want && !wrong++)
            snprintf(first_wrong, sizeof first_wrong, "'%s' (storage '%s') is live at step %d but counted as %s",
                     g->values[v].name, g->values[p->buffers[r].value].name, start, vp_category_name(p->buffers[r].cat));
    }
    check(n_saved > 0 && !wrong,
          "%s: %d forward values live when the backward pass starts (step %d) are activations (or weight copies)%s%s",
          what, n_saved - wrong, start, wrong ? "; " : "", first_wrong);
    int extra = 0;
    char first_extra[512] = "";
    int64_t by_cat[VP_CAT_COUNT] = {0}, total = 0, counted = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        if (p->buffers[b].alias_of >= 0) continue;
        by_cat[p->buffers[b].cat] += p->buffers[b].size;
        total += p->buffers[b].size;
        if (p->buffers[b].cat == VP_CAT_ACTIVATIONS && !saved[b] && !extra++)
            snprintf(first_extra, sizeof first_extra, "'%s'", g->values[p->buffers[b].value].name);
    }
    check(!extra, "%s: storage counted as activations holds a value saved for the backward%s%s", what,
          extra ? ", but not " : "", first_extra);
    int copies = 0, wrong_copies = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        if (p->buffers[b].alias_of >= 0) continue;
        int is_copy = weight_copy(g, p->buffers[b].value);
        copies += is_copy;
        wrong_copies += is_copy != (p->buffers[b].cat == VP_CAT_WEIGHT_COPIES);
    }
    check(!wrong_copies, "%s: %d weight copies, each counted as weight_copies (%lld bytes), nothing else (%d wrong)", what,
          copies, (long long)p->category_bytes[VP_CAT_WEIGHT_COPIES], wrong_copies);
    int same = 1;
    for (int c = 0; c < VP_CAT_COUNT; c++) {
        same &= by_cat[c] == p->category_bytes[c];
        counted += p->category_bytes[c];
    }
    check(same && counted == total && total >= p->lower_bound_bytes,
          "%s: categories add up to the %lld bytes the alias groups hold (counted %lld; lower bound %lld)", what,
          (long long)total, (long long)counted, (long long)p->lower_bound_bytes);
    free(step_of);
    free(saved);
}

static void model_case(const char *name) {
    test_model m;
    vp_error err;
    char what[128];
    if (test_model_load_step(&m, name, "adamw", &err)) {
        check(0, "%s: %s", name, err.msg);
        return;
    }
    for (int fused = 0; fused < 2; fused++) {
        vp_plan p;
        memset(&p, 0, sizeof p);
        snprintf(what, sizeof what, "%.64s adamw %s", name, fused ? "fused" : "separate");
        if (test_plan_step(m.g, &m.t, vp_device_find("cpu"), fused, &p, &err)) check(0, "%s: %s", what, err.msg);
        else check_categories(what, &p);
        if (fused) {
            /* checkpointing: values kept for recompute nodes are saved too */
            vp_plan q;
            memset(&q, 0, sizeof q);
            vp_graph *planned = NULL;
            vp_remat_result rr;
            snprintf(what, sizeof what, "%.64s adamw dp at 70%%", name);
            if (test_plan_step_remat(m.g, &m.t, vp_device_find("cpu"), 1, p.arena_bytes * 7 / 10, VP_REMAT_DP, NULL,
                                        &planned, &q, &rr, &err))
                check(0, "%s: %s", what, err.msg);
            else check_categories(what, &q);
            vp_plan_free(&q);
            if (planned && planned != m.g) vp_graph_free(planned);
        }
        vp_plan_free(&p);
    }
    test_model_free(&m);

    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    spec.no_optimizer = 1;
    vp_plan p;
    memset(&p, 0, sizeof p);
    snprintf(what, sizeof what, "%.64s gradients only", name);
    vp_status s = test_model_load(&m, name, &spec, &err);
    if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("h100"), 1, &p, &err);
    if (s) check(0, "%s: %s", what, err.msg);
    else check_categories(what, &p);
    vp_plan_free(&p);
    test_model_free(&m);

    /* mixed precision: the low copies of the weights are a category of their own */
    for (int prec = VP_PRECISION_BF16; prec <= VP_PRECISION_FP16; prec++) {
        memset(&spec, 0, sizeof spec);
        vp_loss_parse("ce:logits", &spec.loss, &err);
        vp_opt_parse("adam", &spec.opt, &err);
        spec.precision = (vp_precision)prec;
        memset(&p, 0, sizeof p);
        snprintf(what, sizeof what, "%.64s adam %s", name, vp_precision_name(spec.precision));
        s = test_model_load(&m, name, &spec, &err);
        if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("h100"), 1, &p, &err);
        if (s) check(0, "%s: %s", what, err.msg);
        else {
            check_categories(what, &p);
            check(m.t.precision.weight_copies > 0 && p.category_bytes[VP_CAT_WEIGHT_COPIES] > 0,
                  "%s: %d weight copies made, %lld bytes of them planned", what, m.t.precision.weight_copies,
                  (long long)p.category_bytes[VP_CAT_WEIGHT_COPIES]);
        }
        vp_plan_free(&p);
        test_model_free(&m);
    }
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n = test_model_list(names, 32);
    for (int i = 0; i < n; i++) model_case(names[i]);
    return check_summary();
}
