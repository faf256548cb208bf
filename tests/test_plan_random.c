/* Property tests of the planner on random training graphs: random DAGs of MatMul, Add,
 * Mul, Relu, Tanh, Sigmoid, Softmax, Elu, Concat, Split, Dropout and views (Reshape, Flatten,
 * Unsqueeze, Identity, inference Dropout; of activations, of parameters, of views, as
 * the graph's output) with skip connections, trained with a
 * random optimizer, planned with random checkpointing budgets and strategies (ilp included), fused or separate
 * updates.  Every plan must verify (no overlap, everything fits, nothing read before it
 * is written), its arena must be at least the lower bound, and for a sample of graphs
 * planned execution must equal naive execution bit for bit.
 *
 * usage: test_plan_random [N_GRAPHS] [SEED] */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "backend.h"
#include "cpu_host.h"
#include "exec.h"
#include "ir/graph_build.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "plan_exec.h"
#include "remat/remat.h"
#include "ir/rng.h"
#include "train/training.h"
#include "memory/verify.h"
#include "model_util.h"


static int rnd(vp_rng *r, int n) { return (int)(vp_rng_next(r) % (uint64_t)n); }

static int add_param(vp_graph *g, vp_rng *r, const char *stem, int rank, const int64_t *dims) {
    float *d;
    int id = test_f32_initializer(g, vp_graph_add_unique_value(g, stem), rank, dims, &d);
    for (int64_t i = 0, n = vp_value_numel(&g->values[id]); i < n; i++) d[i] = (float)(vp_rng_uniform(r) - 0.5);
    return id;
}

static int op(vp_graph *g, const char *type, int n_in, const int *in, int n_out, int *outs, vp_error *err) {
    static int counter;
    char name[64];
    snprintf(name, sizeof name, "/layer%d/%s", counter++, type);
    int id = vp_build_node(g, type, "", name, n_in, in, n_out, VP_PHASE_FORWARD, 14);
    if (id < 0) return -1;
    if (!strcmp(type, "Concat") || !strcmp(type, "Split")) vp_node_add_attr_int(g, id, "axis", 1);
    int o[4];
    if (vp_build_finish(g, id, o, err)) return -1;
    for (int k = 0; outs && k < n_out; k++) outs[k] = o[k];
    return o[0];
}

/* A random forward graph [batch, width] -> ... -> "y" [batch, width]. */
static vp_graph *random_graph(vp_rng *r, int *y_out, vp_error *err) {
    vp_graph *g = vp_graph_new();
    g->path = strdup("random-graph");
    g->opset_onnx = 14;
    g->opset_ms = 1;
    int64_t batch = 2 + rnd(r, 6), width = 4 * (1 + rnd(r, 6));
    int64_t xd[2] = {batch, width};
    int x;
    if (vp_build_input(g, "x", VP_F32, 2, xd, &x, err)) return NULL;
    int pool[64], np = 0;
    pool[np++] = x;
    int depth = 3 + rnd(r, 14);
    for (int l = 0; l < depth && np < 60; l++) {
        int a = pool[np - 1 - rnd(r, np < 4 ? np : 4)], b = pool[rnd(r, np)], y = -1;
        int64_t wd[2] = {width, width}, bd[1] = {width};
        switch (rnd(r, 12)) {
        case 0: case 1: {
            int in[2] = {a, add_param(g, r, "w", 2, wd)};
            y = op(g, "MatMul", 2, in, 1, NULL, err);
            break;
        }
        case 2: { int in[2] = {a, b}; y = op(g, "Add", 2, in, 1, NULL, err); break; }
        case 3: { int in[2] = {a, add_param(g, r, "scale", 1, bd)}; y = op(g, "Mul", 2, in, 1, NULL, err); break; }
        case 4: { int in[1] = {a}; y = op(g, "Relu", 1, in, 1, NULL, err); break; }
        case 5: {
            static const char *const act[] = {"Tanh", "Sigmoid", "Softmax", "Elu"};
            int in[1] = {a};
            y = op(g, act[rnd(r, 4)], 1, in, 1, NULL, err);
            break;
        }
        case 6: { /* concat two, then split back */
            int in[2] = {a, b}, parts[2];
            int c = op(g, "Concat", 2, in, 1, NULL, err);
            int64_t sp[2] = {width, width}, one[1] = {2};
            int split = vp_build_const(g, "split", VP_I64, 1, one, sp);
            int sin[2] = {c, split};
            if (c >= 0 && op(g, "Split", 2, sin, 2, parts, err) >= 0) y = parts[rnd(r, 2)];
            break;
        }
        case 7: { /* dropout: the training step draws its mask; recomputation must repeat it */
            int64_t none[1] = {0};
            float ratio = 0.3f;
            int in[2] = {a, vp_build_const(g, "ratio", VP_F32, 0, none, &ratio)};
            y = op(g, "Dropout", 2, in, 1, NULL, err);
            break;
        }
        case 8: { /* views of views: the same bytes under other shapes, back to [batch, width] */
            int64_t flat[1] = {batch * width}, two = 2, three[3] = {batch, 2, width / 2};
            int s3 = vp_build_const(g, "shape", VP_I64, 1, &(int64_t){3}, three);
            int in[2] = {a, s3};
            int v = rnd(r, 2) ? op(g, "Reshape", 2, in, 1, NULL, err) : a;
            if (v >= 0 && v != a) {
                int ax[2] = {v, vp_build_const(g, "axes", VP_I64, 1, &(int64_t){1}, &two)};
                v = op(g, "Unsqueeze", 2, ax, 1, NULL, err);
                if (v >= 0) v = op(g, "Flatten", 1, &v, 1, NULL, err); /* axis 1: [batch, width] */
            } else if (v >= 0) {
                int fl[2] = {a, vp_build_const(g, "shape", VP_I64, 1, &(int64_t){1}, flat)};
                v = op(g, "Reshape", 2, fl, 1, NULL, err);
                int64_t back[2] = {batch, width};
                int bk[2] = {v, vp_build_const(g, "shape", VP_I64, 1, &(int64_t){2}, back)};
                if (v >= 0) v = op(g, "Reshape", 2, bk, 1, NULL, err);
            }
            if (v >= 0 && rnd(r, 2)) v = op(g, "Identity", 1, &v, 1, NULL, err);
            if (v >= 0 && rnd(r, 2)) { /* Dropout the model keeps in inference mode: a view too */
                int64_t none[1] = {0};
                float ratio = 0.3f;
                uint8_t no = 0;
                int dr[3] = {v, vp_build_const(g, "ratio", VP_F32, 0, none, &ratio),
                             vp_build_const(g, "training_mode", VP_BOOL, 0, none, &no)};
                v = op(g, "Dropout", 3, dr, 1, NULL, err);
            }
            y = v;
            break;
        }
        case 9: { /* a view of a parameter, read after the backward starts and updated in place */
            int64_t flat[1] = {width * width};
            int in[2] = {add_param(g, r, "w", 2, wd), vp_build_const(g, "shape", VP_I64, 1, &(int64_t){1}, flat)};
            int v = op(g, "Reshape", 2, in, 1, NULL, err);
            int bk[2] = {v, vp_build_const(g, "shape", VP_I64, 1, &(int64_t){2}, wd)};
            if (v >= 0) v = op(g, "Reshape", 2, bk, 1, NULL, err);
            int mm[2] = {a, v};
            y = v >= 0 ? op(g, "MatMul", 2, mm, 1, NULL, err) : -1;
            break;
        }
        case 10: { /* a variadic Sum reading one value twice, once past input 1: in place only
                    * over inputs 0 and 1, and never over storage a later input reads */
            int in[3] = {a, b, a};
            y = op(g, "Sum", 3, in, 1, NULL, err);
            break;
        }
        default: { int in[2] = {a, b}; y = op(g, "Mul", 2, in, 1, NULL, err); break; }
        }
        if (y < 0) {
            vp_graph_free(g);
            return NULL;
        }
        pool[np++] = y;
    }
    *y_out = pool[np - 1];
    g->outputs = malloc(sizeof *g->outputs);
    g->outputs[g->n_outputs++] = *y_out;
    g->values[*y_out].flags |= VP_VAL_OUTPUT;
    if (vp_graph_link(g, err)) {
        vp_graph_free(g);
        return NULL;
    }
    return g;
}

static int same_run(vp_graph *g, const vp_training *t, const vp_plan *p, vp_rng *r, vp_error *err) {
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *nx = NULL;
    vp_plan_exec *px = NULL;
    int same = 1;
    vp_status s = vp_exec_new(g, b, &nx, err);
    if (!s) s = vp_plan_exec_new(p, b, &px, err);
    for (int k = 0; !s && k < g->n_inputs; k++) {
        vp_tensor in = vp_value_tensor(&g->values[g->inputs[k]]);
        int64_t n = vp_tensor_numel(&in);
        in.data = malloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) ((float *)in.data)[i] = (float)vp_rng_uniform(r);
        s = vp_exec_set_input(nx, g->values[g->inputs[k]].name, &in, err);
        if (!s) s = vp_plan_exec_set_input(px, g->values[g->inputs[k]].name, &in, err);
        free(in.data);
    }
    for (int step = 0; step < 2 && !s; step++) {
        s = vp_exec_run(nx, err);
        if (!s) s = vp_plan_exec_run(px, err);
        vp_tensor a = {0}, c = {0};
        if (!s) s = vp_exec_get(nx, t->loss, &a, err);
        if (!s) s = vp_plan_exec_get(px, t->loss, &c, err);
        if (!s && memcmp(a.data, c.data, vp_tensor_nbytes(&a))) same = 0;
        free(a.data);
        free(c.data);
        for (int q = 0; q < t->n_carry && !s; q++) s = vp_exec_copy_value(nx, t->carry[q].from, t->carry[q].to, err);
    }
    vp_exec_free(nx);
    vp_plan_exec_free(px);
    vp_backend_free(b);
    return s ? -1 : same;
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    int n = argc > 1 ? atoi(argv[1]) : 200;
    vp_rng r = {argc > 2 ? (uint64_t)atoll(argv[2]) : 2026};
    int executed = 0, ilp_planned = 0, ilp_refused = 0, n_views = 0, views_shared = 0, in_place = 0;
    for (int gi = 0; gi < n; gi++) {
        vp_error err;
        int y;
        vp_graph *g = random_graph(&r, &y, &err);
        if (!g) {
            check_quiet(0, "graph %d: %s", gi, err.msg);
            continue;
        }
        vp_train_spec spec;
        memset(&spec, 0, sizeof spec);
        char loss[300];
        snprintf(loss, sizeof loss, "mse:%s", g->values[y].name);
        vp_loss_parse(loss, &spec.loss, &err);
        static const char *opts[] = {"sgd", "momentum", "adam", "adamw"};
        vp_opt_parse(opts[rnd(&r, 4)], &spec.opt, &err);
        vp_training t;
        vp_status s = vp_training_build(g, &spec, &t, &err);
        if (s) {
            /* a graph whose loss does not reach a parameter is a fine refusal */
            check_quiet(s == VP_ERR_INVALID, "graph %d: training: %s", gi, err.msg);
            vp_training_free(&t);
            vp_graph_free(g);
            continue;
        }
        vp_plan full;
        memset(&full, 0, sizeof full);
        s = test_plan_step(g, &t, vp_device_find(rnd(&r, 2) ? "cpu" : "h100"), rnd(&r, 2), &full, &err);
        int64_t budget = s ? 0 : full.arena_bytes * (40 + rnd(&r, 61)) / 100;
        vp_plan p;
        memset(&p, 0, sizeof p);
        vp_graph *planned = NULL;
        vp_remat_result rr;
        vp_remat_kind kind = (vp_remat_kind)rnd(&r, 4);
        const vp_remat_opts ilp_quick = {.ilp_time_limit = 0.5};
        if (!s) s = test_plan_step_remat(g, &t, vp_device_find("cpu"), rnd(&r, 2), budget, kind, &ilp_quick, &planned, &p,
                                            &rr, &err);
        /* ilp may prove the budget infeasible in its model, or run out of time */
        int ilp_gave_up = s && kind == VP_REMAT_ILP &&
                          ((s == VP_ERR_INVALID && rr.ilp.status == VP_ILP_INFEASIBLE) ||
                           (s == VP_ERR_UNSUPPORTED && (rr.ilp.status == VP_ILP_NO_SOLUTION || rr.ilp.status == VP_ILP_TOO_LARGE)));
        if (ilp_gave_up) {
            ilp_refused++;
        } else if (s) {
            check_quiet(0, "graph %d: plan: %s", gi, err.msg);
        } else {
            vp_verify_report rep;
            vp_status vs = vp_plan_verify(&p, &rep, &err);
            check_quiet(!vs, "graph %d (%s, %d steps): %s", gi, vp_remat_name(kind), p.n_steps, err.msg);
            check_quiet(p.arena_bytes >= p.lower_bound_bytes && rep.max_live_bytes == p.lower_bound_bytes,
                  "graph %d: arena %lld, lower bound %lld, verifier's max live %lld", gi, (long long)p.arena_bytes,
                  (long long)p.lower_bound_bytes, (long long)rep.max_live_bytes);
            check_quiet(!rr.fits || p.arena_bytes <= budget || kind == VP_REMAT_SQRTN, "graph %d: says it fits %lld but the arena is %lld",
                  gi, (long long)budget, (long long)p.arena_bytes);
            if (kind == VP_REMAT_ILP) ilp_planned++;
            for (int st = 0; st < p.n_steps; st++) {
                const vp_node *vn = &p.g->nodes[p.steps[st]];
                int ob = vn->n_outputs > 0 && vn->outputs[0] >= 0 ? p.buffer_of[vn->outputs[0]] : -1;
                if (ob >= 0 && p.buffers[ob].alias_of >= 0 && vn->phase != VP_PHASE_OPTIMIZER && !vp_node_is_view(p.g, vn))
                    in_place++;
                if (!vp_node_is_view(p.g, vn)) continue;
                n_views++;
                views_shared += p.buffers[p.buffer_of[vn->outputs[0]]].offset == p.buffers[p.buffer_of[vn->inputs[0]]].offset;
            }
            if (gi % 4 == 0 || kind == VP_REMAT_ILP) {
                int same = same_run(g, &t, &p, &r, &err);
                executed++;
                check_quiet(same == 1, "graph %d (%s): planned differs from naive: %s", gi, vp_remat_name(kind),
                      same < 0 ? err.msg : "losses differ");
            }
        }
        vp_plan_free(&p);
        vp_plan_free(&full);
        if (planned && planned != g) vp_graph_free(planned);
        vp_training_free(&t);
        vp_graph_free(g);
    }
    printf("random training graphs: %d, of which %d executed planned vs naive; ilp planned %d, gave up on %d "
           "(infeasible or out of time)\n", n, executed, ilp_planned, ilp_refused);
    check(n < 20 || (n_views > 0 && views_shared == n_views), "%d of %d view steps share their input's storage", views_shared,
          n_views);
    check(n < 20 || in_place > 0, "%d steps write their output over a dead input", in_place);
    return check_summary();
}
