/* The fused attention op (vplan.Attention, planner/ops/attention.c) and the pass that
 * puts it in place of the exporters' decomposed form (planner/train/fuse_attention.c);
 * its gradients against finite differences are test_attention_grad's.
 *
 *   masks      the kernel's explicit mask path: a causal -inf mask against causal=1, a
 *              mask one entry off changes one row; at plan time, nanoGPT's mask (a
 *              frozen float buffer, Slice, Equal, Where) folds to causal=1 with no
 *              mask op left, the buffer one entry off either way stays a mask (and
 *              the fused step computes the plain one's results), a trainable buffer
 *              folds nothing: it is fused as a mask with a gradient, which matches the
 *              plain graph's.
 *   models     for the bundled GPT and the torch.onnx exports in tests/data/attention:
 *              the pattern count the pass must find; the fused step's loss, logits and
 *              every parameter's gradient against the plain (unfused) step's within
 *              1e-5 relative (float32), and against the PyTorch fixtures; the fused
 *              step planned is bit-identical to the fused step run naively; the saved
 *              activations and the arena shrink by the probabilities' bytes.
 */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "cpu_host.h"
#include "dn.h"
#include "exec.h"
#include "k_attention.h"
#include "ir/dtype_conv.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "model_util.h"
#include "onnx/onnx_load.h"
#include "pipeline/pipeline.h"

#define ATTENTION_DATA VP_SOURCE_DIR "/tests/data/attention"

/* ---- models: fused against plain, PyTorch and the planned executor ---- */

static int count_ops(const vp_graph *g, const char *op) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, op);
    return n;
}

/* Loads dir/model.onnx (meta.json beside it, fixtures below): dims bound, shapes
 * inferred, as test_model_load does for models/. */
static vp_status load_graph(test_model *m, const char *dir, vp_error *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", strrchr(dir, '/') + 1);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    if (!(m->meta = mj_parse_file(path))) return vp_fail(err, VP_ERR_IO, "%s: cannot read", path);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    vp_dim_binding dims[8];
    int nd = 0;
    const mj *md = mj_get(m->meta, "dims");
    for (int i = 0; md && i < md->n && nd < 8; i++) dims[nd++] = (vp_dim_binding){md->items[i].key, (int64_t)md->items[i].num};
    vp_pipeline_opts po = {.model = path, .dims = dims, .n_dims = nd, .until = VP_PIPELINE_INFER};
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&po, &r, err);
    m->g = r.g;
    return s;
}

/* Builds m's training step: the loss ce:logits, the meta's buffers frozen (freeze). */
static vp_status build_step(test_model *m, vp_attention_form form, const char *opt, int freeze, vp_error *err) {
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, err);
    spec.attention = form;
    vp_status s = VP_OK;
    if (opt) s = vp_opt_parse(opt, &spec.opt, err);
    else spec.no_optimizer = 1;
    const mj *bufs = mj_get(m->meta, "buffers");
    size_t used = (size_t)snprintf(m->freeze, sizeof m->freeze, "^(");
    for (int i = 0; bufs && i < bufs->n && used < sizeof m->freeze; i++)
        used += (size_t)snprintf(m->freeze + used, sizeof m->freeze - used, "%s%s", i ? "|" : "", bufs->items[i].str);
    if (used < sizeof m->freeze) snprintf(m->freeze + used, sizeof m->freeze - used, ")$");
    spec.freeze = bufs && bufs->n && freeze ? m->freeze : NULL;
    return s ? s : vp_training_build(m->g, &spec, &m->t, err);
}

/* Loads dir as a training step, as test_model_load does for models/. */
static vp_status load_as(test_model *m, const char *dir, vp_attention_form form, const char *opt, int freeze,
                         vp_error *err) {
    vp_status s = load_graph(m, dir, err);
    return s ? s : build_step(m, form, opt, freeze, err);
}

static vp_status load(test_model *m, const char *dir, vp_attention_form form, const char *opt, vp_error *err) {
    return load_as(m, dir, form, opt, 1, err);
}

/* Runs m's step naively on the fixture batch; *vals receives the loss, the logits and
 * the gradients (in m->t.params order), each malloc'd. */
static vp_status run_naive(test_model *m, vp_tensor *vals, vp_error *err) {
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x = NULL;
    vp_status s = vp_exec_new(m->g, b, &x, err);
    if (!s) s = test_model_feed(x, m, err);
    if (!s) s = vp_exec_run(x, err);
    if (!s) s = vp_exec_get(x, m->t.loss, &vals[0], err);
    if (!s) s = vp_exec_get(x, vp_graph_find_value(m->g, "logits"), &vals[1], err);
    for (int i = 0; i < m->t.n_params && !s; i++)
        if (m->t.grads[i] >= 0) s = vp_exec_get(x, m->t.grads[i], &vals[2 + i], err);
    vp_exec_free(x);
    vp_backend_free(b);
    return s;
}

/* max |a - b| / max |b|, the normwise relative difference; 1 on a shape mismatch. */
static double normwise(const vp_tensor *a, const vp_tensor *b) {
    int64_t n = vp_tensor_numel(b);
    if (!a->data || !b->data || vp_tensor_numel(a) != n || a->dtype != VP_F32 || b->dtype != VP_F32) return 1;
    double diff = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
        if (fabs(x - y) > diff || x != x) diff = x != x ? INFINITY : fabs(x - y);
        if (fabs(y) > scale) scale = fabs(y);
    }
    return diff / (scale > 0 ? scale : 1);
}

/* Fused against plain (1e-5), both against PyTorch's fixtures (loss 1e-5, gradients 1e-4). */
static void compare_forms(const char *dir, int want_patterns) {
    test_model f, p;
    vp_error err;
    vp_status s = load(&f, dir, VP_ATTENTION_FUSED, NULL, &err);
    if (!s) s = load(&p, dir, VP_ATTENTION_PLAIN, NULL, &err);
    if (s) {
        check(0, "%s: %s", dir, err.msg);
        test_model_free(&f);
        return;
    }
    const char *name = f.name;
    check(f.t.n_attention == want_patterns && count_ops(f.g, "Attention") == want_patterns &&
              count_ops(f.g, "Softmax") == count_ops(p.g, "Softmax") - want_patterns,
          "%s: %d attention cores fused (%d expected), %d Softmax left of %d; plain keeps them all (%d fused)", name,
          f.t.n_attention, want_patterns, count_ops(f.g, "Softmax"), count_ops(p.g, "Softmax"), p.t.n_attention);
    int n = 2 + f.t.n_params;
    vp_tensor *vf = calloc((size_t)n, sizeof *vf), *vp = calloc((size_t)n, sizeof *vp);
    s = run_naive(&f, vf, &err);
    if (!s) s = run_naive(&p, vp, &err);
    if (s) check(0, "%s run: %s", name, err.msg);
    double worst = 0, worst_torch = 0;
    const char *worst_at = "loss", *worst_torch_at = "loss";
    for (int i = 0; !s && i < n; i++) {
        /* parameters in the same order in both graphs: the same initializers, the same selection */
        double d = normwise(&vf[i], &vp[i]);
        const char *what = i == 0 ? "loss" : i == 1 ? "logits" : f.g->values[f.t.params[i - 2]].name;
        if (d > worst) worst = d, worst_at = what;
        vp_tensor ref = {0};
        char file[512];
        if (i == 1) continue;
        snprintf(file, sizeof file, i ? "grads/%s.pb" : "loss.pb", what);
        if (test_model_fixture(&f, file, &ref, &err)) {
            check(0, "%s fixture %s: %s", name, file, err.msg);
            continue;
        }
        d = normwise(&vf[i], &ref);
        if (d > worst_torch) worst_torch = d, worst_torch_at = what;
        free(ref.data);
    }
    if (!s) {
        check(worst <= 1e-5, "%s: fused loss, logits and %d gradients match the plain graph's, worst %.1e (%s)", name,
              f.t.n_params, worst, worst_at);
        check(worst_torch <= 1e-4, "%s: fused loss and gradients match PyTorch's, worst %.1e (%s)", name, worst_torch,
              worst_torch_at);
    }
    for (int i = 0; i < n; i++) free(vf[i].data), free(vp[i].data);
    free(vf);
    free(vp);
    test_model_free(&f);
    test_model_free(&p);
}

/* The GPT with its causal_mask left trainable (not frozen): the cores are fused all the
 * same, the mask's gradient coming from AttentionGrad, and the loss, the logits and every
 * gradient, the mask's included, are the plain graph's within 1e-5. */
static void trainable_mask_fused(void) {
    test_model f, p;
    vp_error err;
    const char *dir = VP_SOURCE_DIR "/models/gpt";
    vp_status s = load_as(&f, dir, VP_ATTENTION_FUSED, NULL, 0, &err);
    if (!s) s = load_as(&p, dir, VP_ATTENTION_PLAIN, NULL, 0, &err);
    if (s) {
        check(0, "gpt with causal_mask trainable: %s", err.msg);
        test_model_free(&f);
        return;
    }
    int mask_grad = -1;
    for (int i = 0; i < f.t.n_params; i++)
        if (strstr(f.g->values[f.t.params[i]].name, "causal_mask")) mask_grad = i;
    check(f.t.n_attention == 2 && count_ops(f.g, "Softmax") == 0 && count_ops(f.g, "AttentionGrad") == 2 && mask_grad >= 0,
          "gpt with causal_mask trainable: %d fused, %d Softmax left, %d AttentionGrad, the mask %s a parameter",
          f.t.n_attention, count_ops(f.g, "Softmax"), count_ops(f.g, "AttentionGrad"), mask_grad >= 0 ? "is" : "is not");
    int n = 2 + f.t.n_params;
    vp_tensor *vf = calloc((size_t)n, sizeof *vf), *vp = calloc((size_t)n, sizeof *vp);
    s = run_naive(&f, vf, &err);
    if (!s) s = run_naive(&p, vp, &err);
    if (s) check(0, "gpt with causal_mask trainable, run: %s", err.msg);
    double worst = 0, mask_norm = 0;
    const char *worst_at = "loss";
    for (int i = 0; !s && i < n; i++) {
        double d = normwise(&vf[i], &vp[i]);
        if (d > worst) worst = d, worst_at = i == 0 ? "loss" : i == 1 ? "logits" : f.g->values[f.t.params[i - 2]].name;
    }
    for (int64_t e = 0; !s && mask_grad >= 0 && e < vp_tensor_numel(&vf[2 + mask_grad]); e++)
        mask_norm += fabs(vp_load(vf[2 + mask_grad].data, vf[2 + mask_grad].dtype, e));
    if (!s)
        check(worst <= 1e-5 && mask_norm > 0,
              "gpt with causal_mask trainable: fused loss, logits and %d gradients (the mask's: |g|_1 %.3g) match the "
              "plain graph's, worst %.1e (%s)", f.t.n_params, mask_norm, worst, worst_at);
    for (int i = 0; i < n; i++) free(vf[i].data), free(vp[i].data);
    free(vf);
    free(vp);
    test_model_free(&f);
    test_model_free(&p);
}

static void report(int ok, const char *fmt, ...) {
    (void)ok;
    va_list ap;
    va_start(ap, fmt);
    printf("INFO ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* Bytes of the activation buffers that hold as many elements as one layer's
 * probabilities (B*H*S*T) and their count. */
static int64_t probability_bytes(const vp_plan *pl, int64_t elems, int *count) {
    int64_t bytes = 0;
    *count = 0;
    for (int i = 0; i < pl->n_buffers; i++) {
        const vp_buffer *b = &pl->buffers[i];
        const vp_value *v = &pl->g->values[b->value];
        if (b->cat == VP_CAT_ACTIVATIONS && b->alias_of < 0 && vp_value_numel(v) == elems) {
            bytes += b->bytes;
            ++*count;
        }
    }
    return bytes;
}

/* The fused step planned runs bit-identically to its naive run (gradients, then three
 * AdamW steps); the plan's saved activations lose the probabilities. */
static void plan_forms(const char *dir, int64_t prob_elems, int layers) {
    test_model f, p;
    vp_error err;
    vp_plan pf, pp, pg;
    memset(&pf, 0, sizeof pf);
    memset(&pp, 0, sizeof pp);
    memset(&pg, 0, sizeof pg);
    vp_status s = load(&f, dir, VP_ATTENTION_FUSED, "adamw", &err);
    if (!s) s = load(&p, dir, VP_ATTENTION_PLAIN, "adamw", &err);
    if (!s) s = test_plan_step(f.g, &f.t, vp_device_find("cpu"), 1, &pf, &err);
    if (!s) s = test_plan_step(p.g, &p.t, vp_device_find("cpu"), 1, &pp, &err);
    if (s) {
        check(0, "%s plans: %s", dir, err.msg);
    } else {
        char why[1024];
        int r = test_compare_planned(&f, &pf, 3, f.t.params, f.t.n_params, why, sizeof why);
        check(r == 1, "%s: fused step planned is bit-identical to naive over 3 AdamW steps%s%s", f.name, r == 1 ? "" : ": ",
              r == 1 ? "" : why);
        int nf, np;
        int64_t bf = probability_bytes(&pf, prob_elems, &nf), bp = probability_bytes(&pp, prob_elems, &np);
        int64_t af = pf.category_bytes[VP_CAT_ACTIVATIONS], ap = pp.category_bytes[VP_CAT_ACTIVATIONS];
        /* where a layer's probabilities are as large as its other tensors (the bundled
         * GPT: S = head size = 16) Y and LSE cost what P did: report, do not judge */
        (layers ? check : report)(nf == 0 && np >= layers && af < ap,
              "%s: saved activations %lld B fused vs %lld B plain (%+.1f%%), arena %lld vs %lld B (%+.1f%%); "
              "probability-sized saved buffers %d (%lld B) fused vs %d (%lld B) plain",
              f.name, (long long)af, (long long)ap, 100.0 * (double)(af - ap) / (double)ap, (long long)pf.arena_bytes,
              (long long)pp.arena_bytes, 100.0 * (double)(pf.arena_bytes - pp.arena_bytes) / (double)pp.arena_bytes, nf,
              (long long)bf, np, (long long)bp);
    }
    vp_plan_free(&pf);
    vp_plan_free(&pp);
    test_model_free(&f);
    test_model_free(&p);
    /* gradients alone (no optimizer), planned against naive */
    s = load(&f, dir, VP_ATTENTION_FUSED, NULL, &err);
    if (!s) s = test_plan_step(f.g, &f.t, vp_device_find("cpu"), 1, &pg, &err);
    if (s) check(0, "%s gradients plan: %s", dir, err.msg);
    else {
        char why[1024];
        int r = test_compare_planned(&f, &pg, 1, f.t.grads, f.t.n_params, why, sizeof why);
        check(r == 1, "%s: fused gradients planned bit-identical to naive%s%s", f.name, r == 1 ? "" : ": ", r == 1 ? "" : why);
    }
    vp_plan_free(&pg);
    test_model_free(&f);
}

static void model_cases(void) {
    /* the bundled GPT: 2 layers, batch 4, 2 heads, S = T = 16 */
    compare_forms(VP_SOURCE_DIR "/models/gpt", 2);
    plan_forms(VP_SOURCE_DIR "/models/gpt", 4 * 2 * 16 * 16, 0);
    trainable_mask_fused();
    DIR *d = opendir(ATTENTION_DATA);
    if (!d) {
        check(0, "%s: cannot open", ATTENTION_DATA);
        return;
    }
    char names[32][256];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 32;)
        if (e->d_name[0] != '.') snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    for (int i = 0; i < n; i++) {
        char dir[4200], path[4300];
        snprintf(dir, sizeof dir, "%s/%.255s", ATTENTION_DATA, names[i]);
        snprintf(path, sizeof path, "%s/meta.json", dir);
        mj *meta = mj_parse_file(path);
        const mj *pat = meta ? mj_get(meta, "patterns") : NULL;
        int want = pat ? (int)pat->num : -1;
        mj_free(meta);
        compare_forms(dir, want);
        if (!strcmp(names[i], "long_seq")) plan_forms(dir, 4 * 4 * 128 * 128, 1);
    }
    check(n >= 8, "%d torch.onnx exports in %s", n, ATTENTION_DATA);
}

/* ---- an explicit causal mask on the kernel ----
 *
 * The kernel takes a mask as it is given: an additive mask of 0 on and below the
 * diagonal and -inf above gives causal=1's results within float32 rounding (the masked
 * columns are computed and added, not skipped), as does the same mask written with
 * -1e30; a mask with one more -inf changes row 2 of Y alone.  On the reference and the
 * fast path.  That such a mask becomes causal=1 is the planner's business (below). */
enum { MB = 2, MH = 2, MS = 6, MD = 4, M_IO = 5 * MB * MH * MS * MD };

/* Y, then dQ, dK, dV (dY all ones) into r; causal attribute and/or mask */
static int run_masked(int causal, const float *mask, float *r) {
    static float io[M_IO];
    for (int i = 0; i < M_IO; i++) io[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    int64_t d4[4] = {MB, MH, MS, MD}, m4[4] = {1, 1, MS, MS}, l3[3] = {MB, MH, MS};
    int64_t n = MB * MH * MS * MD;
    float lse[MB * MH * MS], ones[MB * MH * MS * MD];
    for (int64_t i = 0; i < n; i++) ones[i] = 1;
    vp_tensor q = {.dtype = VP_F32, .rank = 4, .data = io}, k = q, v = q, y = q, dy = q, dq = q, dk = q, dv = q;
    vp_tensor m = {.dtype = VP_F32, .rank = 4, .data = (void *)mask}, l = {.dtype = VP_F32, .rank = 3, .data = lse};
    memcpy(q.dims, d4, sizeof d4);
    k = v = y = dy = dq = dk = dv = q;
    k.data = io + n, v.data = io + 2 * n, y.data = r, dy.data = ones;
    dq.data = r + n, dk.data = r + 2 * n, dv.data = r + 3 * n;
    memcpy(m.dims, m4, sizeof m4);
    memcpy(l.dims, l3, sizeof l3);
    vp_attr at = {.name = (char *)"causal", .type = VP_ATTR_INT, .i = 1};
    vp_node fw = {.op_type = (char *)"Attention", .domain = (char *)"vplan", .n_inputs = mask ? 4 : 3,
                  .n_outputs = 2, .n_attrs = causal, .attrs = &at};
    vp_node bw = fw;
    bw.op_type = (char *)"AttentionGrad", bw.n_inputs = mask ? 7 : 6, bw.n_outputs = 3;
    const vp_tensor *fin[4] = {&q, &k, &v, &m}, *bin[7] = {&dy, &q, &k, &v, &y, &l, &m};
    vp_tensor *fout[2] = {&y, &l}, *bout[3] = {&dq, &dk, &dv};
    vp_error err;
    return vp_cpu_attention(&fw, fin, fout, &err) || vp_cpu_attention_grad(&bw, bin, bout, &err);
}

/* max over i of |a - b| / (|b| + 1e-3) */
static double worst_rel(const float *a, const float *b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-3);
        if (e > worst || e != e) worst = e != e ? INFINITY : e;
    }
    return worst;
}

static void kernel_mask_cases(void) {
    float mask[MS * MS], off[MS * MS], soft[MS * MS];
    for (int i = 0; i < MS; i++)
        for (int j = 0; j < MS; j++) {
            mask[i * MS + j] = off[i * MS + j] = j <= i ? 0.0f : -INFINITY;
            soft[i * MS + j] = j <= i ? 0.0f : -1e30f;
        }
    off[2 * MS + 1] = -INFINITY;
    enum { N = 4 * MB * MH * MS * MD };
    static float want[N], got[N], other[N], general[N];
    for (int fast = 0; fast <= 1; fast++) {
        vp_dn_gemm_select(fast);
        const char *path = fast ? "fast path" : "reference";
        int bad = run_masked(1, NULL, want) || run_masked(0, mask, got) || run_masked(0, off, other) ||
                  run_masked(0, soft, general);
        check(!bad, "%s: attention with masks runs", path);
        if (bad) continue;
        double w = worst_rel(got, want, N);
        check(w < 1e-5, "%s: a causal -inf mask through the mask path against causal=1: worst %.2g (< 1e-5)", path, w);
        /* Y's rows are independent: the same path with one more -inf differs in row 2 only */
        int rows_changed = 0, elsewhere = 0;
        for (int b = 0; b < MB * MH; b++)
            for (int i = 0; i < MS; i++) {
                int differs = memcmp(got + (b * MS + i) * MD, other + (b * MS + i) * MD, MD * sizeof(float)) != 0;
                if (i == 2) rows_changed += differs;
                else elsewhere += differs;
            }
        check(rows_changed == MB * MH && !elsewhere, "%s: a mask one entry off changes Y's row 2 alone (%d/%d; %d other rows)",
              path, rows_changed, MB * MH, elsewhere);
        w = worst_rel(want, general, N);
        check(w < 1e-5, "%s: causal=1 against a -1e30 causal mask (the general masked path): worst %.2g (< 1e-5)", path, w);
    }
    vp_dn_gemm_select(0);
}

/* ---- a causal mask recognised at plan time ----
 *
 * where_float is nanoGPT's attention as torch.onnx exports it: a float tril(ones)
 * buffer, Slice, Equal(0), Where(-inf).  The mask is arithmetic over an initializer;
 * once the buffer is frozen the training builder folds it (train/fold_frozen.h), and
 * the fusion sees a constant causal mask: causal=1, no mask input, no mask op left in
 * the step.  Not so when the buffer is one entry off either way (causal=0, the folded
 * mask as an input, the step still the plain graph's), nor when it trains (nothing
 * folded, nothing fused). */
#define WHERE_FLOAT ATTENTION_DATA "/where_float"

typedef struct attn_count {
    int causal, masked, live_mask_ops; /* Attention nodes causal=1, with a mask input; unfolded Equal/Where */
} attn_count;

static attn_count count_attention(const vp_graph *g) {
    attn_count c = {0, 0, 0};
    for (int i = 0; i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (!strcmp(n->op_type, "Attention")) {
            c.causal += vp_attr_int(n, "causal", 0) == 1;
            c.masked += n->n_inputs > 3 && n->inputs[3] >= 0;
        }
        c.live_mask_ops += !n->folded && (!strcmp(n->op_type, "Equal") || !strcmp(n->op_type, "Where"));
    }
    return c;
}

/* Unfolded nodes reading the value named name. */
static int live_readers(const vp_graph *g, const char *name) {
    int v = vp_graph_find_value(g, name), r = 0;
    for (int i = 0; v >= 0 && i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++) r += !g->nodes[i].folded && g->nodes[i].inputs[k] == v;
    return r;
}

/* where_float with its buffer's entry (i, j) set to x (1 sees, 0 masks); i < 0: every
 * entry. */
static vp_status load_edited(test_model *m, vp_attention_form form, int64_t i, int64_t j, float x, vp_error *err) {
    vp_status s = load_graph(m, WHERE_FLOAT, err);
    int v = s ? -1 : vp_graph_find_value(m->g, "blocks.0.mask");
    if (!s && v < 0) s = vp_fail(err, VP_ERR_INVALID, "where_float has no blocks.0.mask");
    if (s) return s;
    const vp_value *mv = &m->g->values[v];
    int64_t n = vp_value_numel(mv), S = mv->dims[mv->rank - 1];
    float *d = malloc((size_t)n * sizeof *d);
    if (!d) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(d, mv->data, (size_t)n * sizeof *d);
    for (int64_t e = 0; e < n; e++)
        if (i < 0 || e == i * S + j) d[e] = x;
    vp_value_set_data(m->g, v, d, VP_DATA_HEAP);
    return build_step(m, form, NULL, 1, err);
}

static void causal_plan_cases(void) {
    test_model m, p;
    vp_error err;
    vp_status s = load(&m, WHERE_FLOAT, VP_ATTENTION_FUSED, NULL, &err);
    attn_count c = s ? (attn_count){-1, -1, -1} : count_attention(m.g);
    check(!s && m.t.n_attention == 2 && c.causal == 2 && c.masked == 0 && c.live_mask_ops == 0 &&
              m.t.n_frozen_folded > 0 && live_readers(m.g, "blocks.0.mask") == 0,
          "where_float, buffer frozen: %s; %d fused, %d causal=1, %d with a mask, %d Equal/Where left, %d nodes folded "
          "over the buffer, %d step nodes read it", s ? err.msg : "built", s ? -1 : m.t.n_attention, c.causal, c.masked,
          c.live_mask_ops, s ? -1 : m.t.n_frozen_folded, s ? -1 : live_readers(m.g, "blocks.0.mask"));
    test_model_free(&m);

    /* one more -inf (row 2 may not see column 1), one fewer (row 1 sees column 4) */
    static const struct { int64_t i, j; float x; const char *what; } edits[] = {
        {2, 1, 0.0f, "one entry more masked"}, {1, 4, 1.0f, "one entry above the diagonal seen"}};
    for (int e = 0; e < 2; e++) {
        memset(&p, 0, sizeof p);
        s = load_edited(&m, VP_ATTENTION_FUSED, edits[e].i, edits[e].j, edits[e].x, &err);
        if (!s) s = load_edited(&p, VP_ATTENTION_PLAIN, edits[e].i, edits[e].j, edits[e].x, &err);
        if (s) {
            check(0, "where_float, %s: %s", edits[e].what, err.msg);
            test_model_free(&m);
            test_model_free(&p);
            continue;
        }
        c = count_attention(m.g);
        check(m.t.n_attention == 2 && c.causal == 0 && c.masked == 2,
              "where_float, %s: %d fused, %d causal=1 (none), %d with the folded mask (2)", edits[e].what,
              m.t.n_attention, c.causal, c.masked);
        /* each layer folds its own copy of the same mask: the cores read one of them */
        int first = -1, shared = 1;
        for (int i = 0; i < m.g->n_nodes; i++) {
            const vp_node *an = &m.g->nodes[i];
            if (strcmp(an->op_type, "Attention") || an->n_inputs < 4) continue;
            if (first < 0) first = an->inputs[3];
            shared &= an->inputs[3] == first;
        }
        check(first >= 0 && shared, "where_float, %s: both cores read one mask constant", edits[e].what);
        /* the explicit mask through the step: fused as the plain graph computes it */
        int n = 2 + m.t.n_params;
        vp_tensor *vf = calloc((size_t)n, sizeof *vf), *vq = calloc((size_t)n, sizeof *vq);
        s = run_naive(&m, vf, &err);
        if (!s) s = run_naive(&p, vq, &err);
        double worst = s ? 1 : 0;
        for (int i = 0; !s && i < n; i++)
            if (normwise(&vf[i], &vq[i]) > worst) worst = normwise(&vf[i], &vq[i]);
        check(!s && worst <= 1e-5, "where_float, %s: fused loss, logits and gradients match the plain graph's: %s, worst %.1e",
              edits[e].what, s ? err.msg : "ran", worst);
        for (int i = 0; i < n; i++) free(vf[i].data), free(vq[i].data);
        free(vf);
        free(vq);
        test_model_free(&m);
        test_model_free(&p);
    }

    /* every entry seen: the mask folds to zeros, which add nothing, and goes */
    s = load_edited(&m, VP_ATTENTION_FUSED, -1, -1, 1.0f, &err);
    c = s ? (attn_count){-1, -1, -1} : count_attention(m.g);
    check(!s && m.t.n_attention == 2 && c.causal == 0 && c.masked == 0,
          "where_float, every entry seen: %s; %d fused, %d causal=1 (none), %d with a mask (none: zeros)",
          s ? err.msg : "built", s ? -1 : m.t.n_attention, c.causal, c.masked);
    test_model_free(&m);

    /* the buffer trains: nothing folds over it; the fusion still takes the condition
     * (a bool, no gradient passes Equal) as a mask the step computes */
    s = load_as(&m, WHERE_FLOAT, VP_ATTENTION_FUSED, NULL, 0, &err);
    c = s ? (attn_count){-1, -1, -1} : count_attention(m.g);
    check(!s && m.t.n_frozen_folded == 0 && c.causal == 0 && c.masked == m.t.n_attention && c.live_mask_ops > 0 &&
              live_readers(m.g, "blocks.0.mask") > 0,
          "where_float, buffer trainable: %s, %d folded, %d fused, %d causal=1 (none), %d with a mask computed in the "
          "step (%d Equal/Where), %d step nodes read the buffer", s ? err.msg : "built", s ? -1 : m.t.n_frozen_folded,
          s ? -1 : m.t.n_attention, c.causal, c.masked, c.live_mask_ops, s ? -1 : live_readers(m.g, "blocks.0.mask"));
    test_model_free(&m);
}

int main(void) {
    vp_cpu_host_install();
    kernel_mask_cases();
    causal_plan_cases();
    model_cases();
    return check_summary();
}
