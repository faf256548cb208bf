/* The memo of oneDNN workspace sizes (runtime/cpu/dn.h, vp_dn_workspace_bytes_memo) on
 * models/cnn's training step, on the cpu profile:
 *   - each plan's workspaces are what a fresh context, without the memo, builds for its
 *     convolutions: the memo cold, warm, and under dp checkpointing;
 *   - the first plan asks oneDNN once per distinct primitive (every miss held as a size);
 *     a second plan of the same graph, and dp's candidate plans, ask it nothing;
 *   - a convolution changed in what oneDNN's answer depends on (a pad moved from one end
 *     of an axis to the other, another thread count) misses, and is answered as a fresh
 *     context answers it;
 *   - plans made on two threads at once get the sizes a plan made alone gets. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_par.h"
#include "dn.h"
#include "memory/workspace.h"
#include "model_util.h"
#include "remat/remat.h"

/* Checks p's workspace of every step oneDNN takes against a fresh context's answer;
 * returns how many steps were right, *convs how many oneDNN takes. */
static int sizes_right(const vp_plan *p, int *convs) {
    vp_error err = {{0}};
    vp_dn *dn = vp_dn_new();
    vp_io_args io;
    int right = 0;
    *convs = 0;
    if (!dn || vp_io_args_init(&io, p->g, &err)) {
        vp_dn_free(dn);
        return -1;
    }
    for (int st = 0; st < p->n_steps; st++) {
        const vp_node *n = &p->g->nodes[p->steps[st]];
        if (!vp_dn_may_cover(n)) continue;
        vp_io_args_describe(&io, p->g, n);
        int64_t want = -1;
        if (vp_dn_workspace_bytes(dn, n, io.pin, io.pout, &want, &err)) continue;
        int ws = p->workspace ? p->workspace[st] : -1;
        (*convs)++;
        right += want > 0 ? ws >= 0 && p->buffers[ws].bytes == want : ws < 0;
    }
    vp_io_args_free(&io);
    vp_dn_free(dn);
    return right;
}

/* One node's size through the memo and through a fresh context: 0 when they agree. */
static int node_sizes(const vp_graph *g, const vp_node *n, int64_t *memo, int64_t *fresh) {
    vp_error err = {{0}};
    vp_io_args io;
    if (vp_io_args_init(&io, g, &err)) return 1;
    vp_io_args_describe(&io, g, n);
    vp_dn *d = NULL, *own = vp_dn_new();
    int bad = vp_dn_workspace_bytes_memo(&d, n, io.pin, io.pout, memo, &err) || !own ||
              vp_dn_workspace_bytes(own, n, io.pin, io.pout, fresh, &err);
    vp_dn_free(d);
    vp_dn_free(own);
    vp_io_args_free(&io);
    return bad || *memo != *fresh;
}

static vp_status plan_cpu(test_model *m, vp_plan *p, vp_error *err) {
    return test_plan_step(m->g, &m->t, vp_device_find("cpu"), 1, p, err);
}

/* The first Conv whose first spatial axis is padded, or NULL. */
static vp_attr *padded_conv(vp_graph *g, vp_node **node) {
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        if (strcmp(n->op_type, "Conv")) continue;
        for (int a = 0; a < n->n_attrs; a++)
            if (!strcmp(n->attrs[a].name, "pads") && n->attrs[a].n >= 4 && n->attrs[a].ints[0] > 0) {
                *node = n;
                return &n->attrs[a];
            }
    }
    return NULL;
}

static void changed_signatures(test_model *m) {
    vp_node *n = NULL;
    vp_attr *pads = padded_conv(m->g, &n);
    check(pads != NULL, "cnn has a padded Conv");
    if (!pads) return;
    int64_t memo, fresh;
    vp_dn_memo_counts c0 = vp_dn_memo_count();
    int bad = node_sizes(m->g, n, &memo, &fresh);
    vp_dn_memo_counts c1 = vp_dn_memo_count();
    check(!bad && c1.hits == c0.hits + 1 && c1.misses == c0.misses,
          "Conv '%s' as planned: a hit (%lld B, fresh %lld B)", n->name, (long long)memo, (long long)fresh);
    /* the same output shape, the padding moved from the top to the bottom */
    int half = pads->n / 2;
    pads->ints[0]--;
    pads->ints[half]++;
    bad = node_sizes(m->g, n, &memo, &fresh);
    vp_dn_memo_counts c2 = vp_dn_memo_count();
    check(!bad && c2.misses == c1.misses + 1 && c2.sizes == c1.sizes + 1,
          "Conv '%s' with pads %lld..%lld moved: a miss, sized as a fresh context sizes it (%lld B, fresh %lld B)",
          n->name, (long long)pads->ints[0], (long long)pads->ints[half], (long long)memo, (long long)fresh);
    pads->ints[0]++;
    pads->ints[half]--;

    /* another thread count: a miss for every convolution large enough to get them all */
    int threads = vp_par_threads();
    vp_par_set_threads(threads + 1);
    vp_plan p;
    vp_error err = {{0}};
    vp_status s = plan_cpu(m, &p, &err);
    vp_dn_memo_counts c3 = vp_dn_memo_count();
    int convs = 0, right = s ? -1 : sizes_right(&p, &convs);
    check(!s && c3.misses > c2.misses && right == convs,
          "%d threads instead of %d: %lld of the %d convolutions miss, every size as a fresh context's (%d right)",
          threads + 1, threads, (long long)(c3.misses - c2.misses), convs, right);
    if (!s) vp_plan_free(&p);
    vp_par_set_threads(threads);
}

typedef struct planner_job {
    test_model m;
    int convs, right;
    vp_status s;
} planner_job;

static void *plan_alone(void *arg) {
    planner_job *j = arg;
    vp_error err = {{0}};
    vp_plan p;
    j->s = plan_cpu(&j->m, &p, &err);
    if (!j->s) {
        j->right = sizes_right(&p, &j->convs);
        vp_plan_free(&p);
    }
    return NULL;
}

/* Two graphs of the model planned at once (a graph is the planner's to change, so one
 * each), the memo cold: both get fresh contexts' sizes. */
static void concurrent_plans(void) {
    planner_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    vp_error err = {{0}};
    int loaded = 0;
    for (int k = 0; k < 2; k++) loaded += !test_model_load_step(&jobs[k].m, "cnn", "adamw", &err);
    check(loaded == 2, "cnn loads twice%s%s", loaded == 2 ? "" : ": ", loaded == 2 ? "" : err.msg);
    if (loaded == 2) {
        vp_dn_memo_clear();
        pthread_t th[2];
        int started = 0;
        for (int k = 0; k < 2; k++) started += !pthread_create(&th[k], NULL, plan_alone, &jobs[k]);
        for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
        vp_dn_memo_counts c = vp_dn_memo_count();
        check(started == 2 && !jobs[0].s && !jobs[1].s && jobs[0].convs > 0 && jobs[0].right == jobs[0].convs &&
                  jobs[1].right == jobs[1].convs && c.hits + c.misses == jobs[0].convs + jobs[1].convs,
              "two plans at once: %d and %d of %d convolutions sized right; %lld hits, %lld misses, %lld sizes",
              jobs[0].right, jobs[1].right, jobs[0].convs, (long long)c.hits, (long long)c.misses, (long long)c.sizes);
    }
    for (int k = 0; k < 2; k++) test_model_free(&jobs[k].m);
}

int main(void) {
    vp_cpu_host_install();
    test_model m;
    vp_error err = {{0}};
    vp_status s = test_model_load_step(&m, "cnn", "adamw", &err);
    check(!s, "cnn loads%s%s", s ? ": " : "", s ? err.msg : "");
    if (s) return check_summary();
    vp_dn_memo_clear();

    /* cold: one miss per distinct primitive, each held */
    vp_plan p;
    s = plan_cpu(&m, &p, &err);
    vp_dn_memo_counts cold = vp_dn_memo_count();
    int convs = 0, right = s ? -1 : sizes_right(&p, &convs);
    printf("  cold plan: %d oneDNN convolution steps, %lld hits, %lld misses, %lld sizes\n", convs,
           (long long)cold.hits, (long long)cold.misses, (long long)cold.sizes);
    check(!s && convs > 0 && right == convs, "cold memo: each of the %d convolutions' workspaces as a fresh context "
          "sizes it (%d right)%s%s", convs, right, s ? ": " : "", s ? err.msg : "");
    check(cold.misses > 0 && cold.misses == cold.sizes && cold.hits + cold.misses == convs && cold.misses <= convs,
          "cold memo: every lookup a miss or a repeat of one, every miss held");
    if (!s) vp_plan_free(&p);

    /* warm: the same graph planned again asks oneDNN nothing */
    s = plan_cpu(&m, &p, &err);
    vp_dn_memo_counts warm = vp_dn_memo_count();
    right = s ? -1 : sizes_right(&p, &convs);
    check(!s && right == convs && warm.hits == cold.hits + convs && warm.misses == cold.misses,
          "warm memo: %lld hits for the %d convolutions, no miss, the same sizes (%d right)",
          (long long)(warm.hits - cold.hits), convs, right);
    int64_t arena = s ? 0 : p.arena_bytes;
    if (!s) vp_plan_free(&p);

    /* dp's candidates: many plans of checkpointed copies, the same convolutions */
    vp_graph *planned = NULL;
    vp_remat_result r;
    s = test_plan_step_remat(m.g, &m.t, vp_device_find("cpu"), 1, arena * 9 / 10, VP_REMAT_DP, NULL, &planned, &p, &r, &err);
    vp_dn_memo_counts dp = vp_dn_memo_count();
    right = s ? -1 : sizes_right(&p, &convs);
    printf("  dp under %lld B: %d plans built, %d recompute nodes, %lld hits, %lld misses\n",
           (long long)(arena * 9 / 10), r.iterations, r.n_recompute, (long long)(dp.hits - warm.hits),
           (long long)(dp.misses - warm.misses));
    check(!s && right == convs && dp.misses == warm.misses && dp.hits >= warm.hits + (int64_t)convs * 2,
          "dp on the cpu profile: no miss, at least two plans' worth of hits, the kept plan's %d convolutions sized "
          "right (%d)%s%s", convs, right, s ? ": " : "", s ? err.msg : "");
    if (!s) vp_plan_free(&p);
    if (planned && planned != m.g) vp_graph_free(planned);

    changed_signatures(&m);
    test_model_free(&m);
    concurrent_plans();
    vp_dn_memo_clear();
    vp_dn_memo_counts none = vp_dn_memo_count();
    check(!none.hits && !none.misses && !none.sizes, "cleared: nothing held, counters zero");
    return check_summary();
}
