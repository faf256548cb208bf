/* The CPU kernels give the same bits on 1 thread as on 2 (runtime/cpu/cpu_par.h): for
 * every model in models/, two Adam training steps run with the kernels' work split as
 * finely as the threads allow, on 1 thread and then on 2, and the losses and every
 * value the step carries (weights, Adam's state) must be bit-identical.  That holds on
 * the reference path (every kernel ours, OpenBLAS's threads untouched).  On the fast
 * path oneDNN's sgemm splits some products' inner dimension by the thread count, so
 * its bits depend on the threads: there the check is that two runs on the same
 * threads agree bit for bit (what planned-against-naive execution relies on). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "cpu_par.h"
#include "exec.h"
#include "model_util.h"

enum { STEPS = 2 };

/* The losses and carried values after STEPS steps, concatenated; NULL on an error. */
static char *run_steps(test_model *m, int reference, int threads, size_t *bytes, vp_error *err) {
    vp_par_set_threads(threads);
    vp_backend *b = vp_backend_cpu_new_with(reference);
    vp_exec *x = NULL;
    char *all = NULL;
    size_t used = 0;
    vp_status s = b ? vp_exec_new(m->g, b, &x, err) : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = test_model_feed(x, m, err);
    for (int k = 0; k < STEPS + 1 && !s; k++) {
        /* after the last step: the carried values; before it: the loss of each step */
        int last = k == STEPS;
        if (!last) s = vp_exec_run(x, err);
        int n_ids = last ? m->t.n_carry : 1;
        for (int i = 0; i < n_ids && !s; i++) {
            vp_tensor t = {0};
            s = vp_exec_get(x, last ? m->t.carry[i].from : m->t.loss, &t, err);
            size_t nb = s ? 0 : vp_tensor_nbytes(&t);
            char *grown = s ? NULL : realloc(all, used + nb + 1);
            if (!s && !grown) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
            if (!s) {
                all = grown;
                memcpy(all + used, t.data, nb);
                used += nb;
            }
            free(t.data);
        }
        for (int c = 0; !last && c < m->t.n_carry && !s; c++)
            s = vp_exec_copy_value(x, m->t.carry[c].from, m->t.carry[c].to, err);
    }
    vp_exec_free(x);
    vp_backend_free(b);
    if (s) {
        free(all);
        return NULL;
    }
    *bytes = used;
    return all;
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n_models = test_model_list(names, 32);
    vp_par_set_min_work(1);
    for (int i = 0; i < n_models; i++)
        for (int reference = 1; reference >= 0; reference--) {
            test_model m;
            vp_error err;
            const char *path = reference ? "reference" : "oneDNN";
            if (test_model_load_step(&m, names[i], "adam", &err)) {
                check(0, "%s: %s", names[i], err.msg);
                continue;
            }
            size_t b1 = 0, b2 = 0;
            int first = reference ? 1 : 2;
            char *one = run_steps(&m, reference, first, &b1, &err);
            char *two = one ? run_steps(&m, reference, 2, &b2, &err) : NULL;
            if (!one || !two) check(0, "%s (%s): %s", names[i], path, err.msg);
            else
                check(b1 == b2 && !memcmp(one, two, b1),
                      "%s (%s path): %d Adam steps on %d and on 2 threads, losses and %d carried values bit-identical",
                      names[i], path, STEPS, first, m.t.n_carry);
            free(one);
            free(two);
            test_model_free(&m);
        }
    vp_par_set_min_work(0);
    return check_summary();
}
