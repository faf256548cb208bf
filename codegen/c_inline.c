/* Steps the C codegen writes as their own loop instead of a kernel call: where an
 * interpreter pays per step for what a compiled step knows ahead (the attributes parsed
 * each call, a generic loop that no compiler could specialise or widen), and the
 * arithmetic can stay the kernel's own.
 *
 * In: a plan step.  Out: a function with the node's constants compiled in, calling the
 * kernel's per-element code from libvplanrt's headers (so the operations are the
 * kernel's, by construction), on the arena at the plan's offsets.  Keeps true: the
 * step's bits equal the kernel's (cli_codegen compares every generated step with `run`);
 * only correctly rounded operations run in vector lanes, and only where no element reads
 * another.
 *
 * Today: vplan.Adam (Adam and AdamW) on float32, the optimizer update of every parameter,
 * whose kernel parses six attributes per call and whose fmaf and sqrtf calls the
 * library, built for any x86-64, cannot issue as vector instructions; here its loop has
 * the node's attributes and flags as constants and is also compiled for AVX2 and FMA,
 * taken where the CPU has them (vectorised where the step is compiled with
 * -fno-math-errno, as vplan.mk, the CMake package and the tests compile it). */
#include <string.h>

#include "c_source.h"
#include "cpu_kernels.h"
#include "k_train.h"

/* The plan's offset of a node's input or output k, or -1 when absent. */
static long long offset_of(const vp_plan *p, const int *ids, int count, int k) {
    if (k >= count || ids[k] < 0) return -1;
    return (long long)p->buffers[p->buffer_of[ids[k]]].offset;
}

static int is_f32(const vp_plan *p, int value, int64_t numel) {
    const vp_value *v = &p->g->values[value];
    return v->dtype == VP_F32 && vp_value_numel(v) == numel;
}

static int adam_f32(const vp_plan *p, const vp_node *n) {
    if (!n->op || vp_cpu_kernel_of(n->op) != vp_cpu_adam || n->n_inputs < 5) return 0;
    /* an fp16 step's update reads do_update (input 5): the library kernel honours it */
    if (n->n_inputs > 5 && n->inputs[5] >= 0) return 0;
    for (int k = 0; k < 5; k++)
        if (n->inputs[k] < 0) return 0;
    int64_t count = vp_value_numel(&p->g->values[n->inputs[0]]);
    for (int k = 0; k < 4; k++)
        if (!is_f32(p, n->inputs[k], count)) return 0;
    if (!is_f32(p, n->inputs[4], 1)) return 0;
    for (int k = 0; k < n->n_outputs && k < 4; k++)
        if (n->outputs[k] >= 0 && !is_f32(p, n->outputs[k], k < 3 ? count : 1)) return 0;
    return 1;
}

int vp_codegen_c_inline(const vp_codegen_opts *o, const vp_plan *p, const vp_node *n) {
    return !o->cuda && !o->reference && adam_f32(p, n);
}

void vp_codegen_c_inline_prelude(FILE *f, const vp_plan *p, const vp_codegen_opts *o) {
    int any = 0;
    for (int s = 0; s < p->n_steps && !any; s++) any = vp_codegen_c_inline(o, p, &p->g->nodes[p->steps[s]]);
    if (!any) return;
    const char *P = o->prefix;
    fprintf(f, "\n/* Adam's update: libvplanrt's own loop (cpu/k_adam.h) with each node's attributes\n"
               " * and flags compiled in, built a second time for AVX2 and FMA (GCC), which issue its\n"
               " * correctly rounded fmaf, sqrtf and divisions in vector lanes (sqrtf under\n"
               " * -fno-math-errno): the same bits, taken where the CPU has them */\n"
               "typedef struct %s_adam_job {\n    const vp_opt_hyper *h;\n    vp_adam_scalars st;\n    vp_adam_io io;\n} %s_adam_job;\n"
               "/* no contraction: p * decay fused into the last add would round differently */\n"
               "#if defined(__GNUC__) && !defined(__clang__)\n"
               "#define %s_EXACT __attribute__((optimize(\"fp-contract=off\")))\n"
               "#else\n#define %s_EXACT\n#endif\n"
               "#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)\n"
               "#define %s_WIDE __attribute__((target(\"avx2,fma\"), optimize(\"O3\", \"fp-contract=off\")))\n"
               "#define %s_WIDE_OK() (__builtin_cpu_supports(\"avx2\") && __builtin_cpu_supports(\"fma\"))\n"
               "#endif\n",
            P, P, P, P, P, P);
}

void vp_codegen_c_inline_step(FILE *f, const vp_plan *p, const vp_codegen_opts *o, const vp_node *n, const char *id,
                              const char *fn) {
    const char *P = o->prefix;
    vp_opt_hyper h = vp_train_opt_hyper(n);
    fprintf(f, "static const vp_opt_hyper %s_h = {", id);
    const double hv[] = {h.lr, h.weight_decay, h.momentum, h.beta1, h.beta2, h.eps};
    for (size_t k = 0; k < sizeof hv / sizeof hv[0]; k++) vp_c_float(f, hv[k]), fputs(", ", f);
    fprintf(f, "%d}; /* lr, weight_decay, momentum, beta1, beta2, eps, decoupled */\n", h.decoupled);
    /* vp_adam_range_float's flags, known here */
    char flags[64];
    snprintf(flags, sizeof flags, "%d, %d, %d, %d, %d", h.decoupled != 0, h.weight_decay != 0,
             offset_of(p, n->outputs, n->n_outputs, 0) >= 0, offset_of(p, n->outputs, n->n_outputs, 1) >= 0,
             offset_of(p, n->outputs, n->n_outputs, 2) >= 0);
    fprintf(f, "#ifdef %s_WIDE\n%s_WIDE static void %s_wide(const %s_adam_job *j, int64_t lo, int64_t hi) {\n"
               "    vp_adam_core_float(j->h, &j->st, lo, hi, &j->io, %s);\n}\n#endif\n",
            P, P, id, P, flags);
    fprintf(f, "%s_EXACT static void %s_body(int64_t lo, int64_t hi, void *ctx) {\n    const %s_adam_job *j = ctx;\n"
               "#ifdef %s_WIDE\n    if (%s_WIDE_OK()) {\n        %s_wide(j, lo, hi);\n        return;\n    }\n#endif\n"
               "    vp_adam_core_float(j->h, &j->st, lo, hi, &j->io, %s);\n}\n",
            P, id, P, P, P, id, flags);
    fprintf(f, "static vp_status %s(char *A, vp_error *err) {\n    (void)err;\n", fn);
    /* vp_cpu_adam's order: the count read and incremented, the update, the count written */
    fprintf(f, "    float t = *(const float *)(A + %lld) + 1.0f;\n", offset_of(p, n->inputs, n->n_inputs, 4));
    fprintf(f, "    %s_adam_job j = {&%s_h, vp_adam_scalars_at(&%s_h, t), {", P, id, id);
    for (int k = 0; k < 4; k++) fprintf(f, "A + %lld, ", offset_of(p, n->inputs, n->n_inputs, k));
    for (int k = 0; k < 3; k++) {
        long long off = offset_of(p, n->outputs, n->n_outputs, k);
        if (off < 0) fprintf(f, "NULL%s", k < 2 ? ", " : "");
        else fprintf(f, "A + %lld%s", off, k < 2 ? ", " : "");
    }
    fputs("}};\n", f);
    fprintf(f, "    vp_par_for(%lld, 8, %s_body, &j);\n", (long long)vp_value_numel(&p->g->values[n->inputs[0]]), id);
    long long t_out = offset_of(p, n->outputs, n->n_outputs, 3);
    if (t_out >= 0) fprintf(f, "    *(float *)(A + %lld) = t;\n", t_out);
    fputs("    return VP_OK;\n}\n", f);
}
