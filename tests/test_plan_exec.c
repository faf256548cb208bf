/* Planned execution against naive execution, for every model in models/:
 * - with gradients as outputs (no optimizer): every gradient bit-identical;
 * - with an optimizer: 3 steps of losses bit-identical, with fused and separate updates;
 * - the plan verifies, its arena is at least the lower bound, a plan file round trip
 *   runs to the same losses, and a plan corrupted on purpose fails verification with
 *   the two buffers and the step named;
 * - views (Reshape, Flatten, ...) share their input's storage, and a plan that writes
 *   another value over that storage while the view is still read fails verification. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cpu_host.h"
#include "cpu_util.h"
#include "exec.h"
#include "check.h"
#include "model_util.h"
#include "memory/plan.h"
#include "plan_exec.h"
#include "plan/plan_file.h"
#include "plan/plan_load.h"
#include "memory/verify.h"


/* Runs `steps` steps planned and naive and compares the loss and every value in ids. */
static void compare(const char *name, const char *what, test_model *m, const vp_plan *p, int steps, const int *ids, int n_ids) {
    char why[1024];
    int r = test_compare_planned(m, p, steps, ids, n_ids, why, sizeof why);
    if (r < 0) check(0, "%s %s: %s", name, what, why);
    else check(r, "%s %s: planned execution bit-identical to naive over %d step(s), %d values compared%s%s", name, what, steps,
               n_ids + steps, r ? "" : "; ", r ? "" : why);
}

static void check_plan(const char *name, const vp_plan *p) {
    vp_verify_report rep;
    vp_error err;
    vp_status s = vp_plan_verify(p, &rep, &err);
    check(!s, "%s verify: %s", name, s ? err.msg : "sound");
    check(p->arena_bytes >= p->lower_bound_bytes && rep.max_live_bytes == p->lower_bound_bytes,
          "%s arena %lld >= lower bound %lld (verifier re-derives %lld), ratio %.4f", name, (long long)p->arena_bytes,
          (long long)p->lower_bound_bytes, (long long)rep.max_live_bytes,
          (double)p->arena_bytes / (double)(p->lower_bound_bytes ? p->lower_bound_bytes : 1));
}

static void gradients_case(const char *name) {
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, &err);
    spec.no_optimizer = 1;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_status s = test_model_load(&m, name, &spec, &err);
    if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("cpu"), 1, &p, &err);
    if (s) check(0, "%s gradients plan: %s", name, err.msg);
    else {
        check_plan(name, &p);
        compare(name, "gradients", &m, &p, 1, m.t.grads, m.t.n_params);
    }
    vp_plan_free(&p);
    test_model_free(&m);
}

static void optimizer_case(const char *name, const char *opt, int fused) {
    test_model m;
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    char what[64];
    snprintf(what, sizeof what, "%s %s update", opt, fused ? "fused" : "separate");
    vp_status s = test_model_load_step(&m, name, opt, &err);
    if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("cpu"), fused, &p, &err);
    if (s) {
        check(0, "%s %s: %s", name, what, err.msg);
    } else {
        check_plan(name, &p);
        compare(name, what, &m, &p, 3, m.t.params, m.t.n_params);
    }
    vp_plan_free(&p);
    test_model_free(&m);
}

/* Write, read back, verify, corrupt. */
static void file_case(const char *name) {
    test_model m;
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    char path[4400];
    snprintf(path, sizeof path, "%s/tests/plan_exec_%.100s_%d.vplan", VP_BINARY_DIR, name, (int)getpid());
    vp_status s = test_model_load_step(&m, name, "adamw", &err);
    if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("h200"), 1, &p, &err);
    if (!s) s = vp_plan_write(&p, name, NULL, 0, path, &err);
    vp_loaded_plan lp;
    memset(&lp, 0, sizeof lp);
    if (!s) s = vp_plan_read(path, &lp, &err);
    if (s) {
        check(0, "%s plan file: %s", name, err.msg);
    } else {
        vp_verify_report rep;
        s = vp_plan_verify(&lp.plan, &rep, &err);
        check(!s && lp.plan.arena_bytes == p.arena_bytes && lp.plan.n_steps == p.n_steps,
              "%s plan file round trip: %d steps, %d buffers, arena %lld, verify %s", name, lp.plan.n_steps,
              lp.plan.n_buffers, (long long)lp.plan.arena_bytes, s ? err.msg : "sound");
        /* each update dropped from the steps in turn: its gradient is written and never
         * read, and the parameter would stop training without a word */
        int dropped = 0, refused = 0;
        for (int st = 0; st < lp.plan.n_steps; st++) {
            if (lp.plan.g->nodes[lp.plan.steps[st]].phase != VP_PHASE_OPTIMIZER) continue;
            int node = lp.plan.steps[st];
            memmove(lp.plan.steps + st, lp.plan.steps + st + 1, (size_t)(lp.plan.n_steps - st - 1) * sizeof *lp.plan.steps);
            lp.plan.n_steps--;
            s = vp_plan_verify(&lp.plan, &rep, &err);
            dropped++;
            refused += s == VP_ERR_INVALID && strstr(err.msg, "no step reads");
            lp.plan.n_steps++;
            memmove(lp.plan.steps + st + 1, lp.plan.steps + st, (size_t)(lp.plan.n_steps - st - 1) * sizeof *lp.plan.steps);
            lp.plan.steps[st] = node;
        }
        check(dropped > 0 && refused == dropped, "%s: each of %d updates dropped from the steps is refused (%d)", name, dropped,
              refused);
        /* move the largest non-aliased buffer onto another one live at the same time */
        int victim = -1, other = -1;
        for (int b = 0; b < lp.plan.n_buffers; b++) {
            const vp_buffer *x = &lp.plan.buffers[b];
            if (x->alias_of >= 0 || !x->size) continue;
            for (int c = 0; c < lp.plan.n_buffers && victim < 0; c++) {
                const vp_buffer *y = &lp.plan.buffers[c];
                if (c == b || y->alias_of >= 0 || !y->size || y->offset == x->offset) continue;
                if (y->first <= x->last && x->first <= y->last) {
                    victim = b;
                    other = c;
                }
            }
            if (victim >= 0) break;
        }
        if (victim >= 0) {
            lp.plan.buffers[victim].offset = lp.plan.buffers[other].offset;
            for (int b = 0; b < lp.plan.n_buffers; b++)
                if (lp.plan.buffers[b].alias_of == victim) lp.plan.buffers[b].offset = lp.plan.buffers[other].offset;
            s = vp_plan_verify(&lp.plan, &rep, &err);
            check(s == VP_ERR_INVALID && strstr(err.msg, "overlap") && strstr(err.msg, "step"),
                  "%s corrupted plan rejected: %s", name, s ? err.msg : "accepted!");
        }
        vp_loaded_plan_free(&lp);
    }
    unlink(path);
    vp_plan_free(&p);
    test_model_free(&m);
}

/* Views share storage; writing over it while a view is read is caught. */
static void views_case(const char *name) {
    test_model m;
    vp_error err;
    vp_plan p;
    memset(&p, 0, sizeof p);
    vp_status s = test_model_load_step(&m, name, "adamw", &err);
    if (!s) s = test_plan_step(m.g, &m.t, vp_device_find("cpu"), 1, &p, &err);
    if (s) {
        check(0, "%s views: %s", name, err.msg);
        test_model_free(&m);
        return;
    }
    int n_views = 0, shared = 0, victim = -1, view = -1;
    for (int st = 0; st < p.n_steps; st++) {
        const vp_node *n = &m.g->nodes[p.steps[st]];
        if (!vp_node_is_view(m.g, n)) continue;
        n_views++;
        int ob = p.buffer_of[n->outputs[0]], ib = p.buffer_of[n->inputs[0]];
        if (p.buffers[ob].offset != p.buffers[ib].offset || p.buffers[ob].alias_of < 0) continue;
        shared++;
        if (view < 0 && p.buffers[ob].last > st + 1) view = ob;
    }
    check(n_views == 0 || shared > 0, "%s: %d of %d views share their input's storage", name, shared, n_views);
    if (view >= 0) {
        /* a value some step writes while the view is still to be read, moved onto its storage */
        int root = view;
        while (p.buffers[root].alias_of >= 0) root = p.buffers[root].alias_of;
        for (int b = 0; b < p.n_buffers && victim < 0; b++) {
            const vp_buffer *x = &p.buffers[b];
            const vp_value *v = &m.g->values[x->value];
            int aliased = 0;
            for (int c = 0; c < p.n_buffers; c++) aliased |= p.buffers[c].alias_of == b;
            /* (one that reads the view's storage itself would be an in-place write) */
            const vp_node *w = v->producer >= 0 ? &m.g->nodes[v->producer] : NULL;
            for (int k = 0; w && k < w->n_inputs; k++)
                aliased |= w->inputs[k] >= 0 && p.buffer_of[w->inputs[k]] >= 0 &&
                           p.buffers[p.buffer_of[w->inputs[k]]].offset == p.buffers[root].offset;
            if (x->alias_of < 0 && !aliased && b != root && v->producer >= 0 && x->first > p.buffers[view].first &&
                x->first < p.buffers[view].last && x->bytes <= p.buffers[root].size)
                victim = b;
        }
    }
    if (victim >= 0) {
        p.buffers[victim].alias_of = view;
        p.buffers[victim].offset = p.buffers[view].offset;
        vp_verify_report rep;
        s = vp_plan_verify(&p, &rep, &err);
        check(s == VP_ERR_INVALID && strstr(err.msg, "still reads"), "%s: a value written over storage a view still reads is rejected: %s",
              name, s ? err.msg : "accepted!");
    }
    vp_plan_free(&p);
    test_model_free(&m);
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n = test_model_list(names, 32);
    for (int i = 0; i < n; i++) {
        gradients_case(names[i]);
        optimizer_case(names[i], "momentum", 1);
        optimizer_case(names[i], "adamw", 1);
        optimizer_case(names[i], "sgd", 0);
        file_case(names[i]);
        views_case(names[i]);
    }
    return check_summary();
}
