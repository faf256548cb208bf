/* Cast fusion (planner/precision/cast_fuse.h) against the step without it.
 *
 * For every model in models/, in bf16 and fp16 (AdamW, the fixture batch): the step
 * built with fusion has exactly `fused` fewer Casts than the one built with
 * --no-cast-fusion, some of them fused; two naive steps of each, on the CPU backend and
 * on the CUDA backend where one is present (the host emulation in CI, its blocks in
 * index order so that atomics add in one order), give the same
 * losses and leave every value the two graphs share (parameters, optimizer state, every
 * activation and gradient, each fused producer's output among them) with the same bits;
 * and the fused step planned runs bit-identically to its naive execution. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "exec.h"
#include "memory/plan.h"
#include "model_util.h"
#ifdef VP_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

static int count_casts(const vp_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, "Cast") && !g->nodes[i].domain[0];
    return n;
}

static int count_fused_nodes(const vp_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += vp_node_attr(&g->nodes[i], VP_CAST_ATTR) != NULL;
    return n;
}

static vp_status load(test_model *m, const char *name, vp_precision prec, int no_fusion, vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_status s = vp_loss_parse("ce:logits", &spec.loss, err);
    if (!s) s = vp_opt_parse("adamw", &spec.opt, err);
    spec.precision = prec;
    spec.no_cast_fusion = no_fusion;
    spec.keep_weight_copies = 1; /* the Casts counted are those of the placement alone */
    spec.keep_norm_outputs = 1;  /* (a norm run again for the backward runs its fused Cast again) */
    if (s) {
        memset(m, 0, sizeof *m);
        return s;
    }
    return test_model_load(m, name, &spec, err);
}

/* Two naive steps of each graph on backend b; 1 when every loss and every shared value
 * has the same bits, 0 when not (why says which), -1 on an error. */
static int compare_naive(test_model *f, test_model *n, vp_backend *b, int *compared, char *why, size_t len) {
    vp_error err;
    vp_exec *xf = NULL, *xn = NULL;
    vp_status s = vp_exec_new(f->g, b, &xf, &err);
    if (!s) s = vp_exec_new(n->g, b, &xn, &err);
    if (!s) s = test_model_feed(xf, f, &err);
    if (!s) s = test_model_feed(xn, n, &err);
    int same = 1;
    *compared = 0;
    why[0] = 0;
    for (int step = 0; step < 2 && !s; step++) {
        s = vp_exec_run(xf, &err);
        if (!s) s = vp_exec_run(xn, &err);
        for (int v = 0; v < f->g->n_values && !s; v++) {
            const vp_value *a = &f->g->values[v];
            int u = vp_graph_find_value(n->g, a->name);
            /* what the steps compute: not inputs, parameters, or what inference folded */
            if (a->producer < 0 || f->g->nodes[a->producer].folded || u < 0 || n->g->values[u].producer < 0) continue;
            if (n->g->values[u].dtype != a->dtype) {
                snprintf(why, len, "'%s' is %s fused, %s not", a->name, vp_dtype_name(a->dtype),
                         vp_dtype_name(n->g->values[u].dtype));
                same = 0;
                break;
            }
            vp_tensor ta = {0}, tb = {0};
            s = vp_exec_get(xf, v, &ta, &err);
            if (!s) s = vp_exec_get(xn, u, &tb, &err);
            if (!s && same &&
                (vp_tensor_nbytes(&ta) != vp_tensor_nbytes(&tb) || memcmp(ta.data, tb.data, vp_tensor_nbytes(&ta)))) {
                snprintf(why, len, "step %d: '%s' differs", step + 1, a->name);
                same = 0;
            }
            *compared += !s;
            free(ta.data);
            free(tb.data);
        }
        for (int c = 0; c < f->t.n_carry && !s; c++) s = vp_exec_copy_value(xf, f->t.carry[c].from, f->t.carry[c].to, &err);
        for (int c = 0; c < n->t.n_carry && !s; c++) s = vp_exec_copy_value(xn, n->t.carry[c].from, n->t.carry[c].to, &err);
    }
    /* the state carried into a third step: parameters, moments, the loss scale */
    for (int c = 0; c < f->t.n_carry && !s && same; c++) {
        const vp_value *a = &f->g->values[f->t.carry[c].from];
        int u = vp_graph_find_value(n->g, a->name);
        vp_tensor ta = {0}, tb = {0};
        if (u < 0) {
            snprintf(why, len, "'%s' is carried fused only", a->name);
            same = 0;
            break;
        }
        s = vp_exec_get(xf, f->t.carry[c].from, &ta, &err);
        if (!s) s = vp_exec_get(xn, u, &tb, &err);
        if (!s && (vp_tensor_nbytes(&ta) != vp_tensor_nbytes(&tb) || memcmp(ta.data, tb.data, vp_tensor_nbytes(&ta)))) {
            snprintf(why, len, "carried '%s' differs after 2 steps", a->name);
            same = 0;
        }
        free(ta.data);
        free(tb.data);
    }
    if (s) snprintf(why, len, "%.400s", err.msg);
    vp_exec_free(xf);
    vp_exec_free(xn);
    return s ? -1 : same;
}

static void check_model(const char *name, vp_precision prec, vp_backend *cuda) {
    const char *pn = vp_precision_name(prec);
    test_model f, n;
    vp_error err;
    vp_status s = load(&f, name, prec, 0, &err);
    if (s) {
        check(0, "%s %s: %s", name, pn, err.msg);
        return;
    }
    s = load(&n, name, prec, 1, &err);
    if (s) {
        check(0, "%s %s --no-cast-fusion: %s", name, pn, err.msg);
        test_model_free(&f);
        return;
    }
    const vp_cast_fuse_counts *c = &f.t.cast_fusion;
    int cf = count_casts(f.g), cn = count_casts(n.g), nodes = count_fused_nodes(f.g);
    check(c->fused > 0 && cn - cf == c->fused && c->casts_before == cn && nodes > 0 && nodes <= c->fused &&
              n.t.cast_fusion.fused == 0 && count_fused_nodes(n.g) == 0,
          "%s %s: %d of %d Casts fused into %d producers (%d Casts left; %d without fusion)", name, pn, c->fused,
          c->casts_before, nodes, cf, cn);
    char why[512];
    int compared = 0;
    vp_backend *cpu = vp_backend_cpu_new();
    int r = compare_naive(&f, &n, cpu, &compared, why, sizeof why);
    check(r == 1, "%s %s cpu: fused and unfused steps bit-identical over 2 steps (%d values compared)%s%s", name, pn,
          compared, r == 1 ? "" : ": ", r == 1 ? "" : why);
    vp_backend_free(cpu);
    if (cuda) {
        r = compare_naive(&f, &n, cuda, &compared, why, sizeof why);
        check(r == 1, "%s %s cuda: fused and unfused steps bit-identical over 2 steps (%d values compared)%s%s", name,
              pn, compared, r == 1 ? "" : ": ", r == 1 ? "" : why);
    }
    vp_plan p;
    s = test_plan_step(f.g, &f.t, vp_device_find("cpu"), 1, &p, &err);
    if (!s) {
        r = test_compare_planned(&f, &p, 2, f.t.params, f.t.n_params, why, sizeof why);
        check(r == 1, "%s %s: the fused step planned (arena %lld B) is bit-identical to naive%s%s", name, pn,
              (long long)p.arena_bytes, r == 1 ? "" : ": ", r == 1 ? "" : why);
        vp_plan_free(&p);
    } else {
        check(0, "%s %s: plan: %s", name, pn, err.msg);
    }
    test_model_free(&f);
    test_model_free(&n);
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int count = test_model_list(names, 32);
    check(count >= 4, "%d models in models/", count);
    vp_backend *cuda = NULL;
#ifdef VP_HAVE_CUDA
    /* GatherGrad and kin add with atomics, whose order a GPU (and the emulation, which
     * permutes blocks from a seed every launch moves on) does not fix: both steps run the
     * emulation's blocks in index order, so what differs is the fusion alone */
    setenv("VP_CUDA_EMU_ORDER", "forward", 1);
    char why[256];
    vp_error err = {{0}};
    if (vp_cuda_device_count(why, sizeof why) > 0) cuda = vp_backend_cuda_new(0, 0, &err);
    if (!cuda) printf("SKIP cuda: %s\n", err.msg[0] ? err.msg : why);
#else
    printf("SKIP cuda: built without CUDA\n");
#endif
    /* VP_CUDA_QUICK (the sanitizer build): the emulated CUDA steps of mlp only */
    int quick = getenv("VP_CUDA_QUICK") && strcmp(getenv("VP_CUDA_QUICK"), "0");
    for (int i = 0; i < count; i++) {
        vp_backend *dev = quick && strcmp(names[i], "mlp") ? NULL : cuda;
        check_model(names[i], VP_PRECISION_BF16, dev);
        check_model(names[i], VP_PRECISION_FP16, dev);
    }
    vp_backend_free(cuda);
    return check_summary();
}
