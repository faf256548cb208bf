/* Tensor parallelism (planner/parallel, runtime/comm).
 *
 * Run alone: the splits found in models/gpt (a fused QKV projection) and the torch.onnx
 * export tests/data/tp/gpt_qkv (separate Q, K, V projections, 4 heads): products split,
 * communication ops inserted (two all-reduces forward and two backward per layer; the
 * embedding's forward, the LM head's backward and the cross-entropy's three forward),
 * weights sliced, the embedding and the LM head by vocabulary, and no tensor of the full
 * logits' width anywhere in a rank's step; the refusals naming the node when n does not
 * divide the heads or the hidden size; slicing of a fused QKV weight.
 *
 * Run under mpirun -np N (ctest does for N = 2 and 4): each rank builds its split step
 * and the one-rank step, and checks against the one-rank step
 *   - every parameter's gradient (its slice for split weights) within 1e-5 relative,
 *   - the losses of 5 SGD-with-momentum steps, run from the rank's plan in one arena
 *     with MPI_Allreduce, within 1e-5 relative, and every weight after them,
 *   - the bytes the runtime counted sending equal to the plan's figure.
 * Models whose heads n does not divide are skipped there (models/gpt at n = 4: its
 * refusal is checked alone).  tests/data/tp/gpt_drop trains with Dropout(0.1) on the
 * attention probabilities (fused into the attention core, split by heads) and between the regions (split along the
 * sequence under --sp): each rank's masks are the one-rank masks at its positions, so
 * its gradients and losses are the one-rank step's too.  models/mlp (torch.onnx's
 * nn.Linear, Gemm with a bias) has its second Gemm row-parallel, the bias added once.
 * Under --sp the column regions' inputs are all-gathered again in the backward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#ifdef VP_HAVE_CUDA
#include "cpu_host.h"
#include "cuda_backend.h"
#endif
#include "comm.h"
#include "exec.h"
#include "memory/plan.h"
#include "model_util.h"
#include "plan_exec.h"

#define TP_DATA VP_SOURCE_DIR "/tests/data/tp"
#define MODELS_DIR VP_SOURCE_DIR "/models"

typedef struct model_ref {
    const char *dir, *name, *input;
    int layers, heads, vocab; /* layers 0: no transformer (the structure checks skip it) */
    int widths_unique; /* no other tensor of a rank's step is vocab wide (models/gpt's MLP
                          at n = 2 is 128 / 2 = 64 = its vocab: there only the loss's and
                          the LM head's tensors are looked at) */
    int sp;            /* under mpirun: 1 with --sp, 0 without, 2 both */
} model_ref;

static const model_ref models[] = {
    {MODELS_DIR, "gpt", "tokens", 2, 2, 64, 0, 2},
    {TP_DATA, "gpt_qkv", "x", 2, 4, 48, 1, 2},
    /* Dropouts on the attention probabilities (split by heads) and, under --sp, between
     * the regions (split along the sequence): each rank keeps the one-rank mask's
     * positions */
    {TP_DATA, "gpt_drop", "x", 2, 4, 48, 1, 2},
    /* torch.onnx's nn.Linear at opset 14: Gemm with a bias, the second one row-parallel */
    {MODELS_DIR, "mlp", "x", 0, 64, 10, 1, 0}, /* "heads": its hidden features */
};

static vp_status load(test_model *m, const model_ref *r, int n, int rank, int no_opt, int sp, vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_status s = vp_loss_parse("ce:logits", &spec.loss, err);
    if (!s) s = vp_opt_parse("momentum", &spec.opt, err);
    spec.opt.lr = 0.05;
    spec.no_optimizer = no_opt;
    spec.tp = (vp_tp_opts){n, rank, NULL, sp};
    return s ? s : test_model_load_in(m, r->dir, r->name, &spec, err);
}

static int count_op(const vp_graph *g, const char *op) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += !strcmp(g->nodes[i].op_type, op);
    return k;
}

/* Values of a rank's step as wide as the whole vocabulary (last axis): none may be. */
static int full_width_values(const vp_graph *g, const model_ref *r, char *first, size_t len) {
    int k = 0;
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *x = &g->values[v];
        /* a float tensor of rank 2 or more that the step holds (not a name fusion left behind) */
        if (x->rank < 2 || x->dims[x->rank - 1] != r->vocab || !vp_dtype_is_float(x->dtype) ||
            (x->producer < 0 && !x->n_consumers))
            continue;
        const char *by = x->producer >= 0 ? g->nodes[x->producer].name : "";
        if (!r->widths_unique && strncmp(by, "loss/", 5) && !strstr(by, "lm_head") && !strstr(x->name, "logits")) continue;
        if (!k++) snprintf(first, len, "%s", x->name);
    }
    return k;
}

static const vp_tp_sliced *sliced_of(const vp_training *t, int value) {
    for (int i = 0; i < t->tp.n_sliced; i++)
        if (t->tp.sliced[i].value == value) return &t->tp.sliced[i];
    return NULL;
}

/* The one-rank tensor as this rank holds it (heap data). */
static vp_status as_rank(const test_model *tp, int value, const vp_tensor *full, vp_tensor *out, vp_error *err) {
    const vp_tp_sliced *sl = sliced_of(&tp->t, value);
    if (sl) return vp_tp_slice_tensor(full, sl->axis, sl->blocks, tp->t.tp.n, tp->t.tp.rank, out, err);
    *out = *full;
    size_t bytes = vp_tensor_nbytes(full);
    out->data = malloc(bytes + 1);
    if (!out->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(out->data, full->data, bytes);
    return VP_OK;
}

static void check_structure(void) {
    vp_error err;
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) { /* the check sees full logits where they are */
        if (!models[k].layers) continue;
        test_model m;
        char first[256] = "";
        vp_status s = load(&m, &models[k], 1, 0, 0, 0, &err);
        check(!s && full_width_values(m.g, &models[k], first, sizeof first) > 0,
              "%s on one rank: the logits are %d wide (%s), as the checks below would see", models[k].name, models[k].vocab,
              first);
        test_model_free(&m);
    }
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        for (int n = 2; n <= 4 && models[k].layers; n += 2) {
            const model_ref *r = &models[k];
            test_model m;
            vp_status s = load(&m, r, n, n - 1, 0, 0, &err);
            if (r->heads % n) {
                check(s == VP_ERR_USAGE && strstr(err.msg, "Reshape") && strstr(err.msg, "heads"),
                      "%s --tp %d refused naming the Reshape and the heads: %s", r->name, n, s ? err.msg : "built");
                test_model_free(&m);
                continue;
            }
            check(!s, "%s --tp %d builds%s%s", r->name, n, s ? ": " : "", s ? err.msg : "");
            if (!s) {
                int qkv = strcmp(r->name, "gpt") ? 3 : 1;
                const vp_tp_result *tr = &m.t.tp;
                /* the LM head is one more column product, with its own TPCopy */
                int want_col = r->layers * (qkv + 1) + 1, want_copy = 2 * r->layers + 1;
                check(tr->n_column == want_col && tr->n_row == 2 * r->layers && tr->n_copy == want_copy,
                      "%s --tp %d: %d column and %d row products, %d TPCopy (want %d, %d, %d)", r->name, n, tr->n_column,
                      tr->n_row, tr->n_copy, want_col, 2 * r->layers, want_copy);
                int ar = count_op(m.g, "TPAllReduce"), mx = count_op(m.g, "TPAllReduceMax");
                check(ar == 4 * r->layers + 4 && mx == 1,
                      "%s --tp %d: %d all-reduces and %d of the maximum: two forward and two backward per layer, the "
                      "embedding's, the LM head's input gradient, the cross-entropy's sum and label logit, its maximum",
                      r->name, n, ar, mx);
                check(tr->n_embedding == 1 && tr->vocab_logits >= 0 && tr->vocab == r->vocab &&
                          count_op(m.g, "SoftmaxCrossEntropyLoss") == 0,
                      "%s --tp %d: the embedding and the LM head split by vocabulary (%d, %lld), the loss across ranks",
                      r->name, n, tr->n_embedding, (long long)tr->vocab);
                int drops = 0, want_drops = strcmp(r->name, "gpt_drop") ? 0 : r->layers;
                for (int i = 0; i < m.g->n_nodes; i++) { /* fused into the attention core, whose dropout it is */
                    const vp_node *d = &m.g->nodes[i];
                    drops += (!strcmp(d->op_type, "Dropout") || (!strcmp(d->op_type, "Attention") &&
                                                                 vp_attr_float(d, "dropout", 0.0f) > 0)) &&
                             vp_attr_int(d, "vplan_ranks", 1) == n && vp_attr_int(d, "vplan_axis", -1) == 1;
                }
                check(drops == want_drops, "%s --tp %d: %d dropouts of the attention probabilities draw their heads' part "
                      "of the one-rank mask (want %d)", r->name, n, drops, want_drops);
                char first[256] = "";
                int wide = full_width_values(m.g, r, first, sizeof first);
                check(wide == 0, "%s --tp %d: no tensor of the rank's step is %d wide (the full logits)%s%s", r->name, n,
                      r->vocab, wide ? ": " : "", first);
            }
            test_model_free(&m);
        }
    /* --sp: every all-reduce between the regions a reduce-scatter or an all-gather along
     * the sequence, the activations between them s/n long */
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++)
        for (int n = 2; n <= 4 && models[k].layers; n += 2) {
            const model_ref *r = &models[k];
            if (r->heads % n) continue;
            test_model m;
            vp_status s = load(&m, r, n, n - 1, 0, 1, &err);
            check(!s, "%s --tp %d --sp builds%s%s", r->name, n, s ? ": " : "", s ? err.msg : "");
            if (!s) {
                const vp_tp_result *tr = &m.t.tp;
                int ends = 2 * r->layers + 1; /* the regions' inputs (and the LM head's), their outputs (and the embedding's) */
                int ag = count_op(m.g, "TPAllGather"), rs = count_op(m.g, "TPReduceScatter"), ar = count_op(m.g, "TPAllReduce");
                check(tr->n_gather == ends && tr->n_scatter == ends && ag == 3 * ends && rs == 2 * ends &&
                          ar == 2 + tr->n_param_copy && tr->n_param_copy > 0 && tr->n_regather == ends,
                      "%s --tp %d --sp: %d all-gathers and %d reduce-scatters (want %d: forward, backward and gathered "
                      "again for the weight gradients; %d: forward and backward), %d all-reduces: the loss's 2 and the "
                      "gradients of %d parameters read whole in the split region",
                      r->name, n, ag, rs, 3 * ends, 2 * ends, ar, tr->n_param_copy);
                /* the forward's gathered values die in the forward: no backward node reads one */
                int late = 0;
                for (int i = 0; i < m.g->n_nodes; i++) {
                    const vp_node *nd = &m.g->nodes[i];
                    if (strcmp(nd->op_type, "TPAllGather") || nd->phase != VP_PHASE_FORWARD) continue;
                    const vp_value *y = &m.g->values[nd->outputs[0]];
                    for (int c = 0; c < y->n_consumers; c++) late += m.g->nodes[y->consumers[c]].phase != VP_PHASE_FORWARD;
                }
                check(late == 0, "%s --tp %d --sp: no backward node reads a forward all-gather's output (%d do)", r->name,
                      n, late);
                int drops = 0, marked = 0;
                for (int i = 0; i < m.g->n_nodes; i++)
                    if (!strcmp(m.g->nodes[i].op_type, "Dropout") && m.g->nodes[i].phase == VP_PHASE_FORWARD) {
                        drops++;
                        marked += vp_attr_int(&m.g->nodes[i], "vplan_ranks", 1) == n &&
                                  vp_attr_int(&m.g->nodes[i], "vplan_rank", -1) == n - 1;
                    }
                check(marked == drops, "%s --tp %d --sp: %d of %d Dropouts draw rank %d's part of the one-rank mask",
                      r->name, n, marked, drops, n - 1);
                int short_seq = 0, seq = 0;
                for (int i = 0; i < m.g->n_nodes; i++)
                    if (!strcmp(m.g->nodes[i].op_type, "TPReduceScatter") && m.g->nodes[i].phase == VP_PHASE_FORWARD) {
                        const vp_value *x = &m.g->values[m.g->nodes[i].inputs[0]], *y = &m.g->values[m.g->nodes[i].outputs[0]];
                        seq = (int)x->dims[1];
                        short_seq += y->dims[1] * n == x->dims[1];
                    }
                check(short_seq == ends, "%s --tp %d --sp: the residual stream is %d of %d positions on each rank", r->name,
                      n, seq / n, seq);
            }
            test_model_free(&m);
        }
    /* a row-parallel Gemm with a bias: the bias added once, after the all-reduce */
    for (int n = 2; n <= 4; n += 2) {
        test_model m;
        vp_status s = load(&m, &models[3], n, 1, 0, 0, &err);
        int gemm_bias = 0, added = 0;
        for (int i = 0; !s && i < m.g->n_nodes; i++) {
            const vp_node *nd = &m.g->nodes[i];
            if (strcmp(nd->op_type, "TPAllReduce") || nd->phase != VP_PHASE_FORWARD) continue;
            const vp_value *y = &m.g->values[nd->outputs[0]], *x = &m.g->values[nd->inputs[0]];
            added += y->n_consumers == 1 && !strcmp(m.g->nodes[y->consumers[0]].op_type, "Add") &&
                     (m.g->values[m.g->nodes[y->consumers[0]].inputs[1]].flags & VP_VAL_PARAM);
            const vp_node *row = x->producer >= 0 ? &m.g->nodes[x->producer] : NULL; /* the partial sums' Gemm */
            gemm_bias += !row || strcmp(row->op_type, "Gemm") || (row->n_inputs > 2 && row->inputs[2] >= 0);
        }
        check(!s && m.t.tp.n_row == 1 && added == 1 && gemm_bias == 0,
              "mlp --tp %d: the second Gemm row-parallel (%d) without its bias, added once after the all-reduce (%d)%s%s", n,
              s ? 0 : m.t.tp.n_row, added, s ? ": " : "", s ? err.msg : "");
        test_model_free(&m);
    }
    test_model m;
    vp_status s = load(&m, &models[1], 3, 0, 0, 0, &err);
    check(s == VP_ERR_USAGE && strstr(err.msg, "FusedMatMul") && strstr(err.msg, "does not divide"),
          "gpt_qkv --tp 3 refused naming the product: %s", s ? err.msg : "built");
    test_model_free(&m);
    /* a fused [3h, h] QKV weight, h = 4, two ranks: rank 1 keeps rows 2-3, 6-7, 10-11 */
    float w[12 * 2];
    for (int i = 0; i < 24; i++) w[i] = (float)i;
    vp_tensor full = {VP_F32, 2, {12, 2}, w}, part;
    s = vp_tp_slice_tensor(&full, 0, 3, 2, 1, &part, &err);
    int ok = !s && part.dims[0] == 6;
    static const int rows[6] = {2, 3, 6, 7, 10, 11};
    for (int i = 0; ok && i < 12; i++) ok = ((float *)part.data)[i] == w[rows[i / 2] * 2 + i % 2];
    check(ok, "a fused QKV weight sliced per Q, K and V block");
    if (!s) free(part.data);
    /* and every rank's slices, gathered in rank order, put back whole */
    float parts[24];
    for (int r = 0; r < 2 && !s; r++) {
        s = vp_tp_slice_tensor(&full, 0, 3, 2, r, &part, &err);
        if (!s) memcpy(parts + 12 * r, part.data, 12 * sizeof(float));
        free(part.data);
    }
    vp_tensor back = {0};
    part.dims[0] = 6;
    if (!s) s = vp_tp_unslice_tensor(&part, parts, 0, 3, 2, &back, &err);
    check(!s && back.dims[0] == 12 && !memcmp(back.data, w, sizeof w), "the slices of every rank gathered back whole");
    free(back.data);
}

static vp_status feed_exec(vp_exec *x, const test_model *m, const char *input, vp_error *err) {
    vp_tensor a = {0}, b = {0};
    vp_status s = test_model_fixture(m, "x.pb", &a, err);
    if (!s) s = test_model_fixture(m, "labels.pb", &b, err);
    if (!s) s = vp_exec_set_input(x, input, &a, err);
    if (!s) s = vp_exec_set_input(x, "labels", &b, err);
    free(a.data);
    free(b.data);
    return s;
}

static vp_status feed_plan(vp_plan_exec *x, const test_model *m, const char *input, vp_error *err) {
    vp_tensor a = {0}, b = {0};
    vp_status s = test_model_fixture(m, "x.pb", &a, err);
    if (!s) s = test_model_fixture(m, "labels.pb", &b, err);
    if (!s) s = vp_plan_exec_set_input(x, input, &a, err);
    if (!s) s = vp_plan_exec_set_input(x, "labels", &b, err);
    free(a.data);
    free(b.data);
    return s;
}

static double max_abs(const vp_tensor *t) {
    double m = 0;
    for (int64_t i = 0; i < vp_tensor_numel(t); i++) m = fmax(m, fabs(((const float *)t->data)[i]));
    return m;
}

/* max |got - want| / max(max |want|, floor): the key bias's gradient is zero in exact
 * arithmetic (softmax is shift-invariant along a row), rounding noise on both sides, so
 * gradients are compared relative to the largest gradient of the model at least. */
static double rel_error(const vp_tensor *got, const vp_tensor *want, double floor) {
    double scale = floor, diff = 0;
    int64_t n = vp_tensor_numel(want);
    const float *a = got->data, *b = want->data;
    for (int64_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(b[i]));
        diff = fmax(diff, fabs((double)a[i] - b[i]));
    }
    return vp_tensor_numel(got) == n ? diff / scale : INFINITY;
}

/* Worst relative error of this rank's values against the one-rank ones, by name. */
static vp_status compare_params(const test_model *ref, vp_exec *rx, const test_model *tp, vp_exec *tx, vp_plan_exec *tpx,
                                int grads, double *worst, vp_error *err) {
    vp_status s = VP_OK;
    double floor = 0;
    for (int j = 0; grads && j < ref->t.n_params && !s; j++) {
        vp_tensor t = {0};
        s = vp_exec_get(rx, ref->t.grads[j], &t, err);
        if (!s) floor = fmax(floor, max_abs(&t));
        free(t.data);
    }
    for (int i = 0; i < tp->t.n_params && !s; i++) {
        int p = tp->t.params[i];
        int rp = test_value_named(ref->g, tp->g->values[p].name);
        int ri = -1;
        for (int j = 0; j < ref->t.n_params; j++)
            if (ref->t.params[j] == rp) ri = j;
        if (ri < 0) return vp_fail(err, VP_ERR_INVALID, "'%s' is no parameter of the one-rank step", tp->g->values[p].name);
        int tv = grads ? tp->t.grads[i] : p, rv = grads ? ref->t.grads[ri] : rp;
        vp_tensor full = {0}, want = {0}, got = {0};
        s = vp_exec_get(rx, rv, &full, err);
        if (!s) s = as_rank(tp, p, &full, &want, err);
        if (!s) s = tx ? vp_exec_get(tx, tv, &got, err) : vp_plan_exec_get(tpx, tv, &got, err);
        double e = s ? 0 : rel_error(&got, &want, floor);
        if (e > 1e-5)
            fprintf(stderr, "rank %d: '%s' %s differs by %.2e\n", tp->t.tp.rank, tp->g->values[p].name,
                    grads ? "gradient" : "value", e);
        *worst = fmax(*worst, e);
        free(full.data);
        free(want.data);
        free(got.data);
    }
    return s;
}

/* Each sequence-parallel Dropout's mask against the one-rank mask of the same name,
 * sliced along its axis as the rank holds it: *same of *n equal, *dropped zeros in all. */
static vp_status compare_masks(const test_model *ref, vp_exec *rx, const test_model *tp, vp_exec *tx, int *n, int *same,
                               int64_t *dropped, vp_error *err) {
    vp_status s = VP_OK;
    for (int i = 0; i < tp->g->n_nodes && !s; i++) {
        const vp_node *nd = &tp->g->nodes[i];
        if (strcmp(nd->op_type, "Dropout") || nd->n_outputs < 2 || nd->outputs[1] < 0 ||
            vp_attr_int(nd, "vplan_ranks", 1) < 2)
            continue;
        int rv = test_value_named(ref->g, tp->g->values[nd->outputs[1]].name);
        vp_tensor full = {0}, want = {0}, got = {0};
        s = rv < 0 ? vp_fail(err, VP_ERR_INVALID, "no one-rank mask named '%s'", tp->g->values[nd->outputs[1]].name)
                   : vp_exec_get(rx, rv, &full, err);
        if (!s) s = vp_tp_slice_tensor(&full, (int)vp_attr_int(nd, "vplan_axis", 1), 1, tp->t.tp.n, tp->t.tp.rank, &want, err);
        if (!s) s = vp_exec_get(tx, nd->outputs[1], &got, err);
        if (!s) {
            size_t bytes = vp_tensor_nbytes(&got);
            (*n)++;
            *same += bytes == vp_tensor_nbytes(&want) && !memcmp(got.data, want.data, bytes);
            for (size_t b = 0; b < bytes; b++) *dropped += !((const uint8_t *)got.data)[b];
        }
        free(full.data);
        free(want.data);
        free(got.data);
    }
    return s;
}

static void check_gradients(const model_ref *r, vp_comm *comm, int sp) {
    vp_error err;
    test_model ref, tp;
    vp_backend *b1 = vp_backend_cpu_new(), *bn = vp_backend_cpu_new();
    bn->comm = comm;
    vp_exec *rx = NULL, *tx = NULL;
    vp_status s = load(&ref, r, 1, 0, 1, 0, &err);
    if (!s) s = load(&tp, r, comm->size, comm->rank, 1, sp, &err);
    if (!s) s = vp_exec_new(ref.g, b1, &rx, &err);
    if (!s) s = vp_exec_new(tp.g, bn, &tx, &err);
    if (!s) s = feed_exec(rx, &ref, r->input, &err);
    if (!s) s = feed_exec(tx, &tp, r->input, &err);
    if (!s) s = vp_exec_run(rx, &err);
    if (!s) s = vp_exec_run(tx, &err);
    double worst = 0;
    if (!s) s = compare_params(&ref, rx, &tp, tx, NULL, 1, &worst, &err);
    check(!s && worst < 1e-5, "%s%s rank %d of %d: every gradient (split ones sliced) matches one rank's, worst %.2e%s%s",
          r->name, sp ? " --sp" : "", comm->rank, comm->size, worst, s ? ": " : "", s ? err.msg : "");
    int n_drop = 0, same = 0;
    int64_t dropped = 0;
    if (!s) s = compare_masks(&ref, rx, &tp, tx, &n_drop, &same, &dropped, &err);
    if (n_drop || s)
        check(!s && same == n_drop && dropped > 0,
              "%s%s rank %d of %d: %d of %d Dropout masks are the one-rank masks at this rank's positions (%lld dropped)%s%s",
              r->name, sp ? " --sp" : "", comm->rank, comm->size, same, n_drop, (long long)dropped, s ? ": " : "",
              s ? err.msg : "");
    vp_exec_free(rx);
    vp_exec_free(tx);
    vp_backend_free(b1);
    vp_backend_free(bn);
    test_model_free(&ref);
    test_model_free(&tp);
}

/* cuda: the rank's plan on the CUDA backend (its host emulation here: the MPI
 * communicator stands in for NCCL, device memory being host memory). */
static void check_training(const model_ref *r, vp_comm *comm, int sp, int cuda) {
    enum { STEPS = 5 };
    vp_error err;
    test_model ref, tp;
    vp_backend *b1 = vp_backend_cpu_new(), *bn = vp_backend_cpu_new();
#ifdef VP_HAVE_CUDA
    if (cuda) {
        vp_backend_free(bn);
        bn = vp_backend_cuda_new(0, 0, &err);
        if (!bn) {
            vp_backend_free(b1);
            return;
        }
    }
#endif
    bn->comm = comm;
    vp_exec *rx = NULL;
    vp_plan_exec *px = NULL;
    vp_plan plan;
    memset(&plan, 0, sizeof plan);
    vp_status s = load(&ref, r, 1, 0, 0, 0, &err);
    if (!s) s = load(&tp, r, comm->size, comm->rank, 0, sp, &err);
    if (!s) s = test_plan_step(tp.g, &tp.t, vp_device_find(cuda ? "h100" : "cpu"), 1, &plan, &err);
#ifdef VP_HAVE_CUDA
    if (!s && cuda) vp_backend_cuda_set_graph(bn, plan.g);
#endif
    if (!s) s = vp_exec_new(ref.g, b1, &rx, &err);
    if (!s) s = vp_plan_exec_new(&plan, bn, &px, &err);
    if (!s) s = feed_exec(rx, &ref, r->input, &err);
    double worst_loss = 0;
    int64_t sent = -1;
    for (int k = 0; k < STEPS && !s; k++) {
        s = feed_plan(px, &tp, r->input, &err);
        comm->bytes_sent = 0;
        if (!s) s = vp_exec_run(rx, &err);
        if (!s) s = vp_plan_exec_run(px, &err);
        if (k == 0) sent = comm->bytes_sent;
        vp_tensor l1 = {0}, l2 = {0};
        if (!s) s = vp_exec_get(rx, ref.t.loss, &l1, &err);
        if (!s) s = vp_plan_exec_get(px, tp.t.loss, &l2, &err);
        if (!s) worst_loss = fmax(worst_loss, test_rel_error(&l2, &l1));
        free(l1.data);
        free(l2.data);
        for (int c = 0; c < ref.t.n_carry && !s; c++) s = vp_exec_copy_value(rx, ref.t.carry[c].from, ref.t.carry[c].to, &err);
    }
    const char *how = cuda ? (sp ? " --sp, CUDA backend" : ", CUDA backend") : sp ? " --sp" : "";
    check(!s && worst_loss < 1e-5, "%s%s rank %d of %d: %d momentum steps from the rank's plan, losses within %.2e of one rank's%s%s",
          r->name, how, comm->rank, comm->size, STEPS, worst_loss, s ? ": " : "", s ? err.msg : "");
    double worst = 0;
    if (!s) s = compare_params(&ref, rx, &tp, NULL, px, 0, &worst, &err);
    check(!s && worst < 1e-5, "%s%s rank %d of %d: every weight after %d steps matches one rank's, worst %.2e", r->name,
          how, comm->rank, comm->size, STEPS, worst);
    int64_t planned = s ? -2 : vp_tp_step_bytes(tp.g, plan.steps, plan.n_steps, comm->size);
    check(!s && sent == planned && planned > 0, "%s%s rank %d of %d: bytes sent in a step, counted %lld, planned %lld", r->name,
          how, comm->rank, comm->size, (long long)sent, (long long)planned);
    vp_plan_exec_free(px);
    vp_plan_free(&plan);
    vp_exec_free(rx);
    vp_backend_free(b1);
    vp_backend_free(bn);
    test_model_free(&ref);
    test_model_free(&tp);
}

int main(void) {
    vp_cpu_host_install();
    if (!vp_comm_launched()) {
        check_structure();
        return check_summary();
    }
    vp_error err;
    vp_comm *comm = NULL;
    vp_status s = vp_comm_mpi_new(&comm, &err);
    check(!s, "MPI communicator%s%s", s ? ": " : "", s ? err.msg : "");
    for (size_t k = 0; !s && k < sizeof models / sizeof models[0]; k++) {
        if (models[k].heads % comm->size) continue;
        for (int sp = models[k].sp == 1; sp <= (models[k].sp > 0); sp++) {
            check_gradients(&models[k], comm, sp);
            check_training(&models[k], comm, sp, 0);
        }
    }
#if defined(VP_HAVE_CUDA) && defined(VP_CUDA_EMU)
    /* the CUDA backend's collectives (all-reduce, and --sp's row-wise all-gather and
     * reduce-scatter) on its host emulation: the only run of its TP path without a GPU
     * (two ranks: four add nothing to the dispatch, and the emulation is slow) */
    for (int sp = 0; !s && sp <= 1 && comm->size == 2; sp++) check_training(&models[1], comm, sp, 1);
#endif
    int rc = check_summary();
    vp_comm_free(comm);
    return rc;
}
