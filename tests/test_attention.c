/* The fused attention op (vplan.Attention, planner/ops/attention.c) and the pass that
 * puts it in place of the exporters' decomposed form (planner/train/fuse_attention.c).
 *
 *   gradcheck  Attention's gradients (Q, K, V) against five-point finite differences in
 *              float64, then float32, float16 and bfloat16 against float64 twins
 *              (tests/gradcheck_harness.c): causal, additive masks of several
 *              broadcast shapes, S != T both ways, Dv != D, the LSE output omitted,
 *              Y in the heads-merged layout [B, S, H, Dv] (y_bshd).
 *   refusals   a mask that depends on a parameter is refused, never differentiated.
 *   models     for the bundled GPT and the torch.onnx exports in tests/data/attention:
 *              the pattern count the pass must find; the fused step's loss, logits and
 *              every parameter's gradient against the plain (unfused) step's within
 *              1e-5 relative (float32), and against the PyTorch fixtures; the fused
 *              step planned is bit-identical to the fused step run naively; the saved
 *              activations and the arena shrink by the probabilities' bytes.
 *
 * usage: test_attention [SUBSTR]   (only the gradient cases whose label contains SUBSTR) */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "dn.h"
#include "exec.h"
#include "gradcheck_harness.h"
#include "k_attention.h"
#include "ir/infer.h"
#include "memory/plan.h"
#include "model_util.h"
#include "onnx/onnx_load.h"

#define ATTENTION_DATA VP_SOURCE_DIR "/tests/data/attention"

/* ---- finite differences ---- */

typedef struct att_case {
    const char *what;
    int64_t b, h, s, t, d, dv;
    int causal;
    int mask_rank; /* 0: none */
    int64_t mask[4];
    int lse_out;   /* the node declares output 1 */
    int bshd;      /* attribute y_bshd: Y laid out [B, S, H, Dv] */
} att_case;

static void case_attention(const att_case *a) {
    gc_case k;
    if (!gc_begin(&k, 17, "Attention %s B%lld H%lld S%lld T%lld D%lld Dv%lld%s%s", a->what, (long long)a->b,
                  (long long)a->h, (long long)a->s, (long long)a->t, (long long)a->d, (long long)a->dv,
                  a->causal ? " causal" : "", a->bshd ? " y_bshd" : ""))
        return;
    int in[4];
    in[0] = gc_param(&k, UNI, DIMS(a->b, a->h, a->s, a->d));
    in[1] = gc_param(&k, UNI, DIMS(a->b, a->h, a->t, a->d));
    in[2] = gc_param(&k, UNI, DIMS(a->b, a->h, a->t, a->dv));
    if (a->mask_rank) in[3] = gc_const(&k, UNI, a->mask_rank, a->mask);
    int out[2];
    int n = gc_node(&k, "Attention", "vplan", a->mask_rank ? 4 : 3, in, a->lse_out ? 2 : 1, out);
    gc_loss_on(&k, out[0]);
    attr_f(&k, n, "scale", 0.7);
    if (a->causal) attr_i(&k, n, "causal", 1);
    if (a->bshd) attr_i(&k, n, "y_bshd", 1);
    gc_run(&k);
}

static void gradient_cases(void) {
    static const att_case cases[] = {
        {"plain", 1, 1, 4, 4, 3, 3, 0, 0, {0}, 1, 0},
        {"causal", 2, 2, 5, 5, 3, 2, 1, 0, {0}, 1, 0},
        {"causal S<T", 1, 2, 3, 5, 4, 3, 1, 0, {0}, 1, 0},
        {"causal S>T", 1, 2, 5, 3, 2, 4, 1, 0, {0}, 0, 0},
        {"mask [S,T]", 2, 1, 3, 4, 3, 2, 0, 2, {3, 4}, 1, 0},
        {"mask [1,1,S,T] S>T", 1, 2, 6, 4, 3, 3, 0, 4, {1, 1, 6, 4}, 1, 0},
        {"mask [B,1,1,T]", 2, 3, 4, 5, 2, 3, 0, 4, {2, 1, 1, 5}, 0, 0},
        {"mask [B,H,S,T] causal", 2, 2, 4, 4, 3, 3, 1, 4, {2, 2, 4, 4}, 1, 0},
        {"mask [T] causal S<T", 1, 1, 3, 6, 2, 2, 1, 1, {6}, 1, 0},
        {"rows past one block", 1, 1, 70, 9, 2, 2, 1, 2, {70, 9}, 1, 0},
        {"heads merged", 2, 3, 4, 4, 3, 2, 1, 0, {0}, 1, 1},
        {"heads merged, mask [B,1,1,T] S<T", 2, 2, 3, 5, 2, 3, 0, 4, {2, 1, 1, 5}, 0, 1},
        {"heads merged, rows past one block", 1, 2, 70, 9, 2, 2, 1, 0, {0}, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) case_attention(&cases[i]);
    gc_case k;
    if (gc_begin(&k, 17, "Attention refuses a trainable mask")) {
        int in[4] = {gc_param(&k, UNI, DIMS(1, 1, 2, 2)), gc_param(&k, UNI, DIMS(1, 1, 2, 2)),
                     gc_param(&k, UNI, DIMS(1, 1, 2, 2)), gc_param(&k, UNI, DIMS(2, 2))};
        int y;
        gc_node(&k, "Attention", "vplan", 4, in, 1, &y);
        gc_loss_on(&k, y);
        k.refusal = "masks carry no gradient";
        gc_run(&k);
    }
}

/* ---- models: fused against plain, PyTorch and the planned executor ---- */

static int count_ops(const vp_graph *g, const char *op) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, op);
    return n;
}

/* Loads dir/model.onnx (meta.json beside it, fixtures below) as a training step, as
 * test_model_load does for models/: the meta's buffers frozen, the loss ce:logits. */
static vp_status load_as(test_model *m, const char *dir, vp_attention_form form, const char *opt, int freeze,
                         vp_error *err) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", strrchr(dir, '/') + 1);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    if (!(m->meta = mj_parse_file(path))) return vp_fail(err, VP_ERR_IO, "%s: cannot read", path);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    vp_status s = vp_onnx_load(path, &m->g, err);
    vp_dim_binding dims[8];
    int nd = 0;
    const mj *md = mj_get(m->meta, "dims");
    for (int i = 0; md && i < md->n && nd < 8; i++) dims[nd++] = (vp_dim_binding){md->items[i].key, (int64_t)md->items[i].num};
    if (!s) s = vp_bind_dims(m->g, dims, nd, err);
    if (!s) s = vp_infer(m->g, NULL, NULL, err);
    if (s) return s;
    vp_train_spec spec;
    memset(&spec, 0, sizeof spec);
    vp_loss_parse("ce:logits", &spec.loss, err);
    spec.attention = form;
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

static vp_status load(test_model *m, const char *dir, vp_attention_form form, const char *opt, vp_error *err) {
    return load_as(m, dir, form, opt, 1, err);
}

/* The GPT with its causal_mask left trainable: the mask would need a gradient, so
 * nothing is fused and the step still builds. */
static void trainable_mask_left_alone(void) {
    test_model m;
    vp_error err;
    vp_status s = load_as(&m, VP_SOURCE_DIR "/models/gpt", VP_ATTENTION_FUSED, NULL, 0, &err);
    check(!s && m.t.n_attention == 0 && count_ops(m.g, "Softmax") == 2,
          "gpt with causal_mask trainable: %s, %d fused, %d Softmax kept", s ? err.msg : "built", s ? -1 : m.t.n_attention,
          s ? -1 : count_ops(m.g, "Softmax"));
    test_model_free(&m);
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
    if (!s) s = vp_plan_build(&pf, f.g, &f.t, vp_device_find("cpu"), 1, &err);
    if (!s) s = vp_plan_build(&pp, p.g, &p.t, vp_device_find("cpu"), 1, &err);
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
    if (!s) s = vp_plan_build(&pg, f.g, &f.t, vp_device_find("cpu"), 1, &err);
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
    trainable_mask_left_alone();
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

/* ---- a causal additive mask ----
 *
 * An additive mask of 0 on and below the diagonal and -inf above runs as the causal
 * attribute (runtime/cpu/k_attention.c): Y and the gradients must be the bits of
 * causal=1 without a mask; a mask with one more -inf is not causal and must change row
 * 2 alone; a causal mask written with -1e30 (the general masked path) must agree within
 * float32 rounding.  On the reference and the fast path. */
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

static void causal_mask_cases(void) {
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
        check(!memcmp(want, got, sizeof want), "%s: a causal additive mask gives causal=1's bits (Y, dQ, dK, dV)", path);
        int rows_changed = 0, elsewhere = 0;
        for (int b = 0; b < MB * MH; b++)
            for (int i = 0; i < MS; i++) {
                int differs = memcmp(want + (b * MS + i) * MD, other + (b * MS + i) * MD, MD * sizeof(float)) != 0;
                if (i == 2) rows_changed += differs;
                else elsewhere += differs;
            }
        check(rows_changed == MB * MH && !elsewhere, "%s: a mask one entry off is not causal (Y of row 2 changes, %d/%d; %d other rows)",
              path, rows_changed, MB * MH, elsewhere);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            double e = fabs((double)want[i] - general[i]) / (fabs((double)general[i]) + 1e-3);
            if (e > worst) worst = e;
        }
        check(worst < 1e-5, "%s: causal mask as causal against the general masked path: worst %.2g (< 1e-5)", path, worst);
    }
    vp_dn_gemm_select(0);
}

int main(int argc, char **argv) {
    int rc = gc_check_all(argc > 1 ? argv[1] : NULL, gradient_cases);
    if (argc == 1) causal_mask_cases();
    if (argc == 1) model_cases();
    return rc | check_summary();
}
