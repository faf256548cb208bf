/* Planned workspaces (planner/memory/workspace.h) on the models in models/:
 *   - the CPU profile gives each convolution oneDNN takes the bytes oneDNN says it uses
 *     (reordered copies, scratchpad), no other step any; its planned run allocates no
 *     scratch of its own and matches naive execution bit for bit;
 *   - a GPU profile gives every Conv, ConvGrad and matrix product step one buffer, of
 *     the size the rule says (recomputed here from the shapes, not by the planner's
 *     code), live during that step only, category workspace, and no other step one;
 *   - the verifier accepts those plans and refuses them broken (a workspace serving two
 *     steps, overlapping a live buffer, a step naming a tensor as its workspace);
 *   - a plan file keeps them; the report, JSON and DOT name them;
 *   - the CPU backend runs a GPU-profile plan bit-identically to naive execution. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "dn.h"
#include "exec.h"
#include "memory/verify.h"
#include "memory/workspace.h"
#include "model_util.h"
#include "plan_artifacts.h"
#include "plan/plan_file.h"
#include "plan/plan_load.h"
#include "report.h"

static int is(const vp_node *n, const char *domain, const char *op) {
    return !strcmp(n->op_type, op) && !strcmp(n->domain, domain);
}

/* The rule, written out again: im2col of the batch for convolutions, four float32
 * copies of the largest output for products, each capped by the profile. */
static int64_t expected_bytes(const vp_graph *g, const vp_node *n, const vp_device_profile *dev) {
    int conv = is(n, "", "Conv"), grad = is(n, "com.microsoft", "ConvGrad");
    if (conv || grad) {
        const vp_value *x = &g->values[n->inputs[grad ? 1 : 0]], *w = &g->values[n->inputs[grad ? 2 : 1]];
        const vp_value *y = &g->values[grad ? n->inputs[0] : n->outputs[0]];
        int64_t e = x->dims[0] * x->dims[1] * (int64_t)vp_dtype_size(x->dtype);
        for (int d = 2; d < x->rank; d++) e *= y->dims[d] * w->dims[d];
        return e < dev->conv_workspace ? e : dev->conv_workspace;
    }
    if (is(n, "", "MatMul") || is(n, "", "Gemm") || is(n, "com.microsoft", "FusedMatMul") || is(n, "vplan", "GeluMatMul") ||
        is(n, "vplan", "GeluMatMulGrad") || is(n, "vplan", "SwiGluMatMul") || is(n, "vplan", "SwiGluMatMulGrad")) {
        int64_t e = 0;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0 && 16 * vp_value_numel(&g->values[n->outputs[k]]) > e)
                e = 16 * vp_value_numel(&g->values[n->outputs[k]]);
        return e < dev->blas_workspace ? e : dev->blas_workspace;
    }
    return 0;
}

static int64_t count_workspace_buffers(const vp_plan *p) {
    int64_t n = 0;
    for (int b = 0; b < p->n_buffers; b++) n += p->buffers[b].cat == VP_CAT_WORKSPACE;
    return n;
}

/* On the CPU profile a step has a workspace exactly when oneDNN takes its convolution,
 * of the bytes the library says its primitives use (asked here of a context of our own);
 * a plan run with them leaves the backend no scratch of its own to allocate, and runs
 * bit-identically to naive execution, which does allocate one. */
static void check_cpu_profile(test_model *m) {
    vp_plan p;
    vp_error err = {{0}};
    vp_status s = test_plan_step(m->g, &m->t, vp_device_find("cpu"), 1, &p, &err);
    check(!s, "%s: cpu plan builds%s%s", m->name, s ? ": " : "", s ? err.msg : "");
    if (s) return;
    vp_dn *dn = vp_dn_new();
    vp_io_args io;
    int convs = 0, right = 0, others = 0;
    if (dn && !vp_io_args_init(&io, p.g, &err)) {
        for (int st = 0; st < p.n_steps; st++) {
            const vp_node *n = &p.g->nodes[p.steps[st]];
            int ws = p.workspace ? p.workspace[st] : -1;
            if (!vp_dn_may_cover(n)) {
                others += ws >= 0;
                continue;
            }
            vp_io_args_describe(&io, p.g, n);
            int64_t want = -1;
            if (vp_dn_workspace_bytes(dn, n, io.pin, io.pout, &want, &err)) continue;
            convs++;
            right += want > 0 ? ws >= 0 && p.buffers[ws].bytes == want && p.buffers[ws].cat == VP_CAT_WORKSPACE &&
                                    p.buffers[ws].first == st && p.buffers[ws].last == st
                              : ws < 0;
        }
        vp_io_args_free(&io);
    }
    vp_dn_free(dn);
    vp_workspace_summary w = vp_plan_workspace_summary(&p);
    printf("  %s on cpu: %d oneDNN convolution steps, %d workspaces (largest %lld B, %lld B summed), arena %lld B\n",
           m->name, convs, w.steps, (long long)w.largest, (long long)w.total, (long long)p.arena_bytes);
    check(dn && right == convs && !others && w.conv_steps == w.steps,
          "%s: on the cpu profile each of the %d oneDNN convolution steps has the workspace oneDNN sizes (%d right), "
          "no other step one (%d)", m->name, convs, right, others);
    if (w.steps) {
        /* the same profile without them: what the arena held before they were planned */
        vp_device_profile bare = p.device;
        bare.host_dnn = 0;
        vp_plan q0;
        if (!test_plan_step(m->g, &m->t, &bare, 1, &q0, &err)) {
            int64_t grew = p.lower_bound_bytes - q0.lower_bound_bytes;
            printf("  %s on cpu without oneDNN's workspaces: arena %lld B, lower bound %lld B; with them %lld B, %lld B\n",
                   m->name, (long long)q0.arena_bytes, (long long)q0.lower_bound_bytes, (long long)p.arena_bytes,
                   (long long)p.lower_bound_bytes);
            check(!q0.workspace && grew >= 0 && grew <= w.largest,
                  "%s on cpu: oneDNN's workspaces raise the lower bound by %lld B, at most the largest (%lld B)", m->name,
                  (long long)grew, (long long)w.largest);
            vp_plan_free(&q0);
        }
        vp_backend *planned = vp_backend_cpu_new_with(0), *naive = vp_backend_cpu_new_with(0);
        double lp[2];
        char why[1024] = "";
        int bad = test_plan_losses(m, &p, planned, 2, lp, why, sizeof why);
        size_t own = vp_backend_cpu_own_scratch(planned);
        check(!bad && own == 0, "%s: the planned cpu step keeps oneDNN's reorders and scratchpads in its workspaces "
              "(backend's own scratch %zu B)%s%s", m->name, own, bad ? ": " : "", why);
        /* the naive step, which has no workspaces, needs the backend's own: oneDNN ran */
        vp_exec *x = NULL;
        s = vp_exec_new(m->g, naive, &x, &err);
        if (!s) s = test_model_feed(x, m, &err);
        if (!s) s = vp_exec_run(x, &err);
        own = vp_backend_cpu_own_scratch(naive);
        check(!s && own == (size_t)w.largest, "%s: naive, the backend holds the largest workspace itself (%zu B of %lld B)%s%s",
              m->name, own, (long long)w.largest, s ? ": " : "", s ? err.msg : "");
        vp_exec_free(x);
        char why2[1024];
        int r = test_compare_planned(m, &p, 2, m->t.params, m->t.n_params, why2, sizeof why2);
        check(r == 1, "%s: the cpu plan with workspaces runs bit-identically to naive execution%s%s", m->name,
              r == 1 ? "" : ": ", r == 1 ? "" : why2);
        vp_backend_free(planned);
        vp_backend_free(naive);
    } else {
        int uint8 = 0;
        for (int b = 0; b < p.n_buffers; b++) uint8 += p.g->values[p.buffers[b].value].dtype == VP_U8;
        check(!p.workspace && !p.category_bytes[VP_CAT_WORKSPACE] && !uint8,
              "%s: without convolutions the cpu profile plans no workspace", m->name);
    }
    vp_plan_free(&p);
}

/* Each step's workspace as the rule says; returns how many steps have one. */
static int check_rule(const test_model *m, const vp_plan *p) {
    const vp_device_profile *dev = &p->device;
    int with = 0, bad = 0;
    for (int st = 0; st < p->n_steps; st++) {
        const vp_node *n = &p->g->nodes[p->steps[st]];
        int64_t want = expected_bytes(p->g, n, dev);
        int b = p->workspace ? p->workspace[st] : -1;
        if (!want) {
            if (b >= 0) bad++, printf("  step %d (%s) has a workspace it should not\n", st, n->op_type);
            continue;
        }
        with++;
        const vp_buffer *buf = b >= 0 ? &p->buffers[b] : NULL;
        int ok = buf && buf->bytes == want && buf->first == st && buf->last == st && buf->cat == VP_CAT_WORKSPACE &&
                 buf->alias_of < 0 && buf->size % dev->alignment == 0 &&
                 (p->g->values[buf->value].flags & VP_VAL_WORKSPACE);
        if (!ok) {
            bad++;
            printf("  step %d (%s): workspace %lld bytes [%d, %d], want %lld bytes at that step only\n", st, n->op_type,
                   buf ? (long long)buf->bytes : -1LL, buf ? buf->first : -1, buf ? buf->last : -1, (long long)want);
        }
    }
    check(!bad && with > 0 && count_workspace_buffers(p) == with,
          "%s on %s: %d steps with a workspace, each sized by the rule and live during its step only", m->name,
          dev->name, with);
    return with;
}

/* The verifier refuses broken copies of p's workspaces. */
static void check_verifier(const test_model *m, vp_plan *p) {
    vp_verify_report rep;
    vp_error err = {{0}};
    vp_status s = vp_plan_verify(p, &rep, &err);
    check(!s, "%s: the plan with workspaces verifies%s%s", m->name, s ? ": " : "", s ? err.msg : "");
    int first = -1, second = -1;
    for (int st = 0; st < p->n_steps && second < 0; st++)
        if (p->workspace && p->workspace[st] >= 0) {
            if (first < 0) first = st;
            else second = st;
        }
    if (second < 0) return;
    /* one buffer serving two steps */
    int keep = p->workspace[second];
    p->workspace[second] = p->workspace[first];
    s = vp_plan_verify(p, &rep, &err);
    check(s && strstr(err.msg, "serves steps"), "%s: a workspace serving two steps is refused (%s)", m->name, s ? err.msg : "accepted");
    p->workspace[second] = keep;
    /* a workspace over a buffer its step reads */
    const vp_node *n = &p->g->nodes[p->steps[first]];
    vp_buffer *ws = &p->buffers[p->workspace[first]];
    int64_t off = ws->offset;
    int r = p->buffer_of[n->inputs[0]];
    while (p->buffers[r].alias_of >= 0) r = p->buffers[r].alias_of;
    ws->offset = p->buffers[r].offset;
    if (ws->offset + ws->size > p->arena_bytes) ws->offset = p->arena_bytes - ws->size;
    s = vp_plan_verify(p, &rep, &err);
    check(s && (strstr(err.msg, "overlap") || strstr(err.msg, "does not fit")),
          "%s: a workspace moved over its step's input is refused (%s)", m->name, s ? err.msg : "accepted");
    ws->offset = off;
    /* a step naming a tensor as its workspace */
    keep = p->workspace[first];
    p->workspace[first] = p->buffer_of[n->inputs[0]];
    s = vp_plan_verify(p, &rep, &err);
    check(s && strstr(err.msg, "not one"), "%s: a tensor named as a workspace is refused (%s)", m->name, s ? err.msg : "accepted");
    p->workspace[first] = keep;
    s = vp_plan_verify(p, &rep, &err);
    check(!s, "%s: restored, the plan verifies again", m->name);
}

/* Written and read back: the same buffers at the same steps, still verified. */
static void check_plan_file(const test_model *m, vp_plan *p) {
    char path[256];
    snprintf(path, sizeof path, "test_workspace_%s.vplan", m->name);
    vp_error err = {{0}};
    vp_loaded_plan lp;
    vp_status s = vp_plan_write(p, m->name, NULL, 0, path, &err);
    if (!s) s = vp_plan_read(path, &lp, &err);
    if (s) {
        check(0, "%s: plan file round trip: %s", m->name, err.msg);
        return;
    }
    int same = lp.plan.n_steps == p->n_steps && lp.plan.workspace != NULL;
    for (int st = 0; same && st < p->n_steps; st++) {
        int a = p->workspace[st], b = lp.plan.workspace[st];
        same = a == b && (a < 0 || (lp.plan.buffers[b].bytes == p->buffers[a].bytes &&
                                    lp.plan.buffers[b].offset == p->buffers[a].offset &&
                                    lp.plan.buffers[b].cat == VP_CAT_WORKSPACE));
    }
    vp_verify_report rep;
    s = vp_plan_verify(&lp.plan, &rep, &err);
    check(same && !s, "%s: the plan file keeps every step's workspace and verifies when read back%s%s", m->name,
          s ? ": " : "", s ? err.msg : "");
    vp_loaded_plan_free(&lp);
    /* a file whose step names a tensor as its workspace is refused when read */
    int st = 0;
    while (st < p->n_steps && p->workspace[st] < 0) st++;
    if (st < p->n_steps) {
        int keep = p->workspace[st];
        p->workspace[st] = p->buffer_of[p->g->nodes[p->steps[st]].inputs[0]];
        s = vp_plan_write(p, m->name, NULL, 0, path, &err);
        if (!s) s = vp_plan_read(path, &lp, &err);
        check(s && strstr(err.msg, "not a workspace"), "%s: a plan file naming a tensor as a workspace is refused (%s)",
              m->name, s ? err.msg : "read");
        if (!s) vp_loaded_plan_free(&lp);
        p->workspace[st] = keep;
    }
    remove(path);
}

static int file_has(const char *path, const char *what) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, what) != NULL;
}

static void check_reports(const test_model *m, const vp_plan *p) {
    vp_workspace_summary ws = vp_plan_workspace_summary(p);
    char t[256], j[256], d[256];
    snprintf(t, sizeof t, "test_workspace_%s.txt", m->name);
    snprintf(j, sizeof j, "test_workspace_%s.json", m->name);
    snprintf(d, sizeof d, "test_workspace_%s.dot", m->name);
    vp_report_ctx ctx = {.model = m->name, .top_live = 3};
    FILE *ft = fopen(t, "w"), *fj = fopen(j, "w");
    if (ft) vp_report_text(ft, p, &ctx), fclose(ft);
    if (fj) vp_report_json(fj, p, &ctx), fclose(fj);
    vp_error err = {{0}};
    vp_status s = vp_dot_write(p, d, &err);
    char line[128];
    snprintf(line, sizeof line, "\"largest_bytes\": %lld", (long long)ws.largest);
    check(ws.steps > 0 && file_has(t, "workspaces: ") && file_has(j, line) && file_has(j, "\"workspace\": ") && !s &&
              file_has(d, "workspaces: ") && p->category_bytes[VP_CAT_WORKSPACE] == ws.total,
          "%s: text, JSON and DOT report the workspaces (%d steps, the largest %lld bytes)", m->name, ws.steps,
          (long long)ws.largest);
    remove(t), remove(j), remove(d);
}

static void each_model(const char *name) {
    test_model m;
    vp_error err = {{0}};
    vp_status s = test_model_load_step(&m, name, "adam", &err);
    if (s) {
        check(0, "%s: %s", name, err.msg);
        return;
    }
    check_cpu_profile(&m);
    int64_t cpu_arena = 0;
    vp_plan cpu;
    if (!test_plan_step(m.g, &m.t, vp_device_find("cpu"), 1, &cpu, &err)) cpu_arena = cpu.arena_bytes, vp_plan_free(&cpu);
    static const char *const gpus[] = {"a100", "h200"};
    for (int i = 0; i < 2; i++) {
        vp_plan p;
        s = test_plan_step(m.g, &m.t, vp_device_find(gpus[i]), 1, &p, &err);
        if (s) {
            check(0, "%s on %s: %s", name, gpus[i], err.msg);
            continue;
        }
        check_rule(&m, &p);
        vp_workspace_summary ws = vp_plan_workspace_summary(&p);
        printf("  %s on %s: %d workspaces (%d cuBLAS, %d cuDNN), the largest %lld B; arena %lld B (cpu profile %lld B)\n",
               name, gpus[i], ws.steps, ws.blas_steps, ws.conv_steps, (long long)ws.largest, (long long)p.arena_bytes,
               (long long)cpu_arena);
        check(p.arena_bytes >= p.lower_bound_bytes && p.lower_bound_bytes >= ws.largest,
              "%s on %s: the arena holds the largest workspace beside what its step keeps live", name, gpus[i]);
        /* the same profile without workspaces: the lower bound grows by at most the largest */
        vp_device_profile bare = p.device;
        bare.blas_workspace = bare.conv_workspace = 0;
        vp_plan q0;
        if (!test_plan_step(m.g, &m.t, &bare, 1, &q0, &err)) {
            int64_t grew = p.lower_bound_bytes - q0.lower_bound_bytes;
            printf("  %s on %s without workspaces: arena %lld B, lower bound %lld B; with them %lld B, %lld B\n", name,
                   gpus[i], (long long)q0.arena_bytes, (long long)q0.lower_bound_bytes, (long long)p.arena_bytes,
                   (long long)p.lower_bound_bytes);
            check(!q0.workspace && grew >= 0 && grew <= ws.largest,
                  "%s on %s: workspaces raise the lower bound by %lld B, at most the largest (%lld B)", name, gpus[i],
                  (long long)grew, (long long)ws.largest);
            vp_plan_free(&q0);
        }
        /* the same graph planned again reuses the workspace values: the same plan */
        int values = m.g->n_values;
        vp_plan q;
        if (!test_plan_step(m.g, &m.t, vp_device_find(gpus[i]), 1, &q, &err)) {
            check(m.g->n_values == values && q.arena_bytes == p.arena_bytes && q.n_buffers == p.n_buffers,
                  "%s on %s: planning again adds no value and gives the same arena", name, gpus[i]);
            vp_plan_free(&q);
        }
        if (i == 1) {
            check_plan_file(&m, &p);
            check_reports(&m, &p);
            char why[1024];
            int r = test_compare_planned(&m, &p, 2, m.t.params, m.t.n_params, why, sizeof why);
            check(r == 1, "%s: the h200 plan runs on the CPU backend bit-identically to naive execution%s%s", name,
                  r == 1 ? "" : ": ", r == 1 ? "" : why);
            check_verifier(&m, &p);
        }
        vp_plan_free(&p);
    }
    test_model_free(&m);
}

int main(void) {
    vp_cpu_host_install();
    each_model("mlp");
    each_model("cnn");
    each_model("gpt");
    return check_summary();
}
