/* Softmax, LogSoftmax, Hardmax, SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss
 * on the CPU.
 *
 * Each normalised fiber is gathered into a double buffer, transformed there and
 * written back, so every storage type shares one numerically careful path: the max is
 * subtracted before exp, sums are in double, and LogSoftmax is (x - max) - log(sum)
 * rather than log(softmax), which would lose tiny probabilities to zero.  The losses
 * view their scores as [N, C, D] (D the product of the trailing dims) and share the
 * weighting, ignore_index and reduction logic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_util.h"
#include "cpu_par.h"
#include "k_reduce.h"

enum { LABEL_CHUNK = 256 };

/* ---- Softmax, LogSoftmax, Hardmax ---- */

typedef enum softmax_kind { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_HARDMAX } softmax_kind;

static double fiber_max(const double *v, int64_t n) {
    double m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (v[i] > m) m = v[i];
    return m;
}

/* The sum of exp(v[i] - m), storing each term in e when e is not NULL.  Results kept
 * in float32 or narrower need only expf, several times faster than exp and accurate to
 * an ulp of float; the sum is still taken in double. */
static double sum_exp_shifted(const double *v, int64_t n, double m, int single, double *e) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double t = single ? (double)expf((float)(v[i] - m)) : exp(v[i] - m);
        if (e) e[i] = t;
        sum += t;
    }
    return sum;
}

/* Transforms one fiber in place. */
static void softmax_fiber(softmax_kind k, double *v, int64_t n, int single) {
    double m = fiber_max(v, n);
    if (k == SM_HARDMAX) {
        int64_t first = 0;
        while (first < n - 1 && v[first] != m) first++;
        for (int64_t i = 0; i < n; i++) v[i] = i == first;
    } else if (k == SM_SOFTMAX) {
        double inv = 1.0 / sum_exp_shifted(v, n, m, single, v);
        for (int64_t i = 0; i < n; i++) v[i] *= inv;
    } else {
        double log_sum = log(sum_exp_shifted(v, n, m, single, NULL));
        for (int64_t i = 0; i < n; i++) v[i] = (v[i] - m) - log_sum;
    }
}

/* Rows [o0, o1) of the outer axes, for the threads: each fiber on one thread. */
typedef struct sm_job {
    const vp_tensor *x;
    vp_tensor *y;
    softmax_kind k;
    int64_t len, inner;
    _Atomic int nomem; /* a thread out of memory for its fiber */
} sm_job;

static void softmax_rows(int64_t o0, int64_t o1, void *ctx) {
    sm_job *j = ctx;
    double *fiber = malloc((size_t)j->len * sizeof *fiber);
    if (!fiber) {
        j->nomem = 1;
        return;
    }
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t i = 0; i < j->inner; i++) {
            int64_t off = o * j->len * j->inner + i;
            vp_red_load_f64(j->x->data, j->x->dtype, off, j->inner, j->len, fiber);
            softmax_fiber(j->k, fiber, j->len, j->y->dtype != VP_F64);
            vp_red_store_f64(j->y->data, j->y->dtype, off, j->inner, j->len, fiber);
        }
    }
    free(fiber);
}

static vp_status softmax_run(const vp_node *n, const vp_tensor *x, vp_tensor *y, softmax_kind k, vp_error *err) {
    int64_t outer, len, inner;
    vp_status s = vp_softmax_split(n, x->rank, x->dims, &outer, &len, &inner, err);
    if (s) return s == VP_ERR_INVALID ? VP_ERR_RUNTIME : s;
    if (!y || !vp_tensor_numel(x)) return VP_OK;
    sm_job j = {x, y, k, len, inner, 0};
    vp_par_for(outer, 4 * len * inner, softmax_rows, &j);
    if (j.nomem) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    return VP_OK;
}

vp_status vp_cpu_softmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    return softmax_run(n, in[0], out[0], SM_SOFTMAX, err);
}

vp_status vp_cpu_log_softmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    return softmax_run(n, in[0], out[0], SM_LOG_SOFTMAX, err);
}

vp_status vp_cpu_hardmax(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    return softmax_run(n, in[0], out[0], SM_HARDMAX, err);
}

/* ---- losses ---- */

/* Scores (log-probabilities for NLL) as [batch, classes, spatial], labels as
 * [batch, spatial]. */
typedef struct loss_args {
    const vp_node *n;
    const vp_tensor *x, *labels, *weights; /* weights may be NULL */
    int64_t batch, classes, spatial;
    int has_ignore;
    int64_t ignore_index;
} loss_args;

static void loss_args_init(const vp_node *n, const vp_tensor *const *in, loss_args *a) {
    *a = (loss_args){.n = n, .x = in[0], .labels = in[1], .weights = n->n_inputs > 2 ? in[2] : NULL};
    a->batch = a->x->dims[0];
    a->classes = a->x->dims[1];
    a->spatial = 1;
    for (int d = 2; d < a->x->rank; d++) a->spatial *= a->x->dims[d];
    a->has_ignore = vp_node_attr(n, "ignore_index") != NULL;
    a->ignore_index = vp_attr_int(n, "ignore_index", 0);
}

/* The weighted loss at position j (of batch * spatial) whose label is t: -w[t] times
 * the log-probability of class t, which is x - lse for scores, x itself for NLL. */
static vp_status loss_at(const loss_args *a, int64_t j, int64_t t, const double *lse, double *loss, double *w,
                         vp_error *err) {
    *loss = *w = 0;
    if (a->has_ignore && t == a->ignore_index) return VP_OK;
    if (t < 0 || t >= a->classes)
        return vp_node_fail(err, VP_ERR_RUNTIME, a->n,
                            "label %lld at position %lld is outside [0, %lld) and is not ignore_index", (long long)t,
                            (long long)j, (long long)a->classes);
    int64_t b = j / a->spatial, d = j % a->spatial;
    double log_prob = vp_load(a->x->data, a->x->dtype, (b * a->classes + t) * a->spatial + d);
    if (lse) log_prob -= lse[j];
    *w = a->weights ? vp_load(a->weights->data, a->weights->dtype, t) : 1;
    *loss = -log_prob * *w;
    return VP_OK;
}

/* Per-position losses into y (reduction none), or their sum or weighted mean. */
static vp_status loss_reduce(const loss_args *a, const double *lse, vp_tensor *y, vp_error *err) {
    const char *reduction = vp_attr_string(a->n, "reduction", "mean");
    int per_position = !strcmp(reduction, "none");
    int64_t count = a->batch * a->spatial, labels[LABEL_CHUNK];
    double losses[LABEL_CHUNK], total = 0, weight_sum = 0;
    for (int64_t c = 0; c < count; c += LABEL_CHUNK) {
        int64_t m = count - c < LABEL_CHUNK ? count - c : LABEL_CHUNK;
        vp_red_load_i64(a->labels->data, a->labels->dtype, c, 1, m, labels);
        for (int64_t i = 0; i < m; i++) {
            double w;
            vp_status s = loss_at(a, c + i, labels[i], lse, &losses[i], &w, err);
            if (s) return s;
            total += losses[i];
            weight_sum += w;
        }
        if (per_position && y) vp_red_store_f64(y->data, y->dtype, c, 1, m, losses);
    }
    if (per_position || !y) return VP_OK;
    /* mean divides by the weights of the positions counted, as ONNX specifies */
    double result = !strcmp(reduction, "sum") ? total : total / weight_sum;
    vp_red_store_f64(y->data, y->dtype, 0, 1, 1, &result);
    return VP_OK;
}

/* log-sum-exp of each [b, :, d] score fiber into lse; log-probabilities into log_prob
 * when the node asks for them. */
typedef struct lse_job {
    const loss_args *a;
    double *lse;
    vp_tensor *log_prob;
    _Atomic int nomem; /* a thread out of memory for its fiber */
} lse_job;

/* Images [b0, b1), for the threads: each fiber on one thread. */
static void lse_images(int64_t b0, int64_t b1, void *ctx) {
    lse_job *j = ctx;
    const loss_args *a = j->a;
    double *lse = j->lse;
    vp_tensor *log_prob = j->log_prob;
    double *fiber = malloc((size_t)(a->classes ? a->classes : 1) * sizeof *fiber);
    if (!fiber) {
        j->nomem = 1;
        return;
    }
    for (int64_t b = b0; b < b1; b++) {
        for (int64_t d = 0; d < a->spatial; d++) {
            int64_t off = b * a->classes * a->spatial + d;
            vp_red_load_f64(a->x->data, a->x->dtype, off, a->spatial, a->classes, fiber);
            double m = fiber_max(fiber, a->classes);
            double log_sum = log(sum_exp_shifted(fiber, a->classes, m, a->x->dtype != VP_F64, NULL));
            lse[b * a->spatial + d] = m + log_sum;
            if (!log_prob) continue;
            for (int64_t c = 0; c < a->classes; c++) fiber[c] = (fiber[c] - m) - log_sum;
            vp_red_store_f64(log_prob->data, log_prob->dtype, off, a->spatial, a->classes, fiber);
        }
    }
    free(fiber);
}

static vp_status scores_log_softmax(const loss_args *a, double *lse, vp_tensor *log_prob, vp_error *err) {
    lse_job j = {a, lse, log_prob, 0};
    vp_par_for(a->batch, 4 * a->classes * a->spatial, lse_images, &j);
    if (j.nomem) return vp_node_fail(err, VP_ERR_NOMEM, a->n, "out of memory");
    return VP_OK;
}

vp_status vp_cpu_softmax_cross_entropy_loss(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                            vp_error *err) {
    loss_args a;
    loss_args_init(n, in, &a);
    int64_t positions = a.batch * a.spatial;
    double *lse = malloc((size_t)(positions ? positions : 1) * sizeof *lse);
    if (!lse) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory");
    vp_status s = scores_log_softmax(&a, lse, n->n_outputs > 1 ? out[1] : NULL, err);
    if (!s) s = loss_reduce(&a, lse, out[0], err);
    free(lse);
    return s;
}

vp_status vp_cpu_nll_loss(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    loss_args a;
    loss_args_init(n, in, &a);
    return loss_reduce(&a, NULL, out[0], err);
}
