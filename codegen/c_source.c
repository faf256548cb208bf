/* NAME_step.c: one static function per plan step and NAME_step, which calls them in
 * plan order.  Each function rebuilds nothing: its node record (attributes included)
 * is static data written here from the plan, its tensors carry the plan's shapes and
 * point at the plan's offsets in the arena, and it calls the kernel the CPU backend
 * runs, by name.  The kernel's symbol is found from the kernel table's function pointer
 * (runtime/cpu/cpu_kernels.h; dladdr: the command exports its symbols), so that table
 * stays the one place that says which function runs an op. */
#include "c_source.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "dn.h"
#include "ir/atomic_file.h"
#include "ir/op_registry.h"
#include "vplanrt.h"
#include "weights_file.h"

static vp_status kernel_symbol(const vp_node *n, const char **out, vp_error *err) {
    Dl_info info;
    vp_cpu_fn kernel = vp_cpu_kernel_of(n->op);
    if (!kernel) return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "no CPU kernel for this op");
    if (!dladdr((void *)(uintptr_t)kernel, &info) || !info.dli_sname || info.dli_saddr != (void *)(uintptr_t)kernel)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n,
                            "the CPU kernel of %s has no exported symbol to call from generated code", n->op_type);
    *out = info.dli_sname;
    return VP_OK;
}

/* Whether `run` skips the step: a view whose output already shares its input's
 * storage (plan_exec.c's rule, on offsets instead of pointers). */
static int skipped(const vp_plan *p, const vp_node *n) {
    int extra_out = 0;
    for (int k = 1; k < n->n_outputs; k++) extra_out |= n->outputs[k] >= 0;
    if (!vp_node_is_view(p->g, n) || extra_out || n->n_inputs < 1 || n->n_outputs < 1) return 0;
    if (n->inputs[0] < 0 || n->outputs[0] < 0) return 0;
    return p->buffers[p->buffer_of[n->inputs[0]]].offset == p->buffers[p->buffer_of[n->outputs[0]]].offset;
}

static void bytes_array(FILE *f, const uint8_t *data, size_t n) {
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%u,", i % 24 ? "" : "\n    ", data[i]);
    if (!n) fputs("0", f);
    fputc('\n', f);
}

static vp_status emit_attr_data(FILE *f, const char *id, int a, const vp_attr *at, vp_error *err) {
    switch (at->type) {
    case VP_ATTR_FLOATS:
        fprintf(f, "static float %s_a%d[] = {", id, a);
        for (int i = 0; i < at->n; i++) fputs(i ? ", " : "", f), vp_c_float(f, at->floats[i]);
        fprintf(f, "%s};\n", at->n ? "" : "0");
        break;
    case VP_ATTR_INTS:
        fprintf(f, "static int64_t %s_a%d[] = {", id, a);
        for (int i = 0; i < at->n; i++) fputs(i ? ", " : "", f), vp_c_i64(f, at->ints[i]);
        fprintf(f, "%s};\n", at->n ? "" : "0");
        break;
    case VP_ATTR_STRINGS:
        fprintf(f, "static char *%s_a%d[] = {", id, a);
        for (int i = 0; i < at->n; i++) fputs(i ? ", " : "", f), vp_c_string(f, at->strings[i]);
        fprintf(f, "%s};\n", at->n ? "" : "0");
        break;
    case VP_ATTR_TENSOR: {
        const vp_tensor *t = at->t;
        if (!t || (!t->data && vp_tensor_nbytes(t)) || !vp_c_dtype(t->dtype))
            return vp_fail(err, VP_ERR_UNSUPPORTED, "attribute '%s': a tensor codegen cannot write", at->name);
        fprintf(f, "static _Alignas(16) unsigned char %s_a%d_data[] = {", id, a);
        bytes_array(f, t->data, vp_tensor_nbytes(t));
        fprintf(f, "};\nstatic vp_tensor %s_a%d = {%s, %d, ", id, a, vp_c_dtype(t->dtype), t->rank);
        vp_c_dims(f, t->rank, t->dims);
        fprintf(f, ", %s_a%d_data};\n", id, a);
        break;
    }
    case VP_ATTR_FLOAT: case VP_ATTR_INT: case VP_ATTR_STRING: break;
    default: return vp_fail(err, VP_ERR_UNSUPPORTED, "attribute '%s': type %d is not written by codegen", at->name, at->type);
    }
    return VP_OK;
}

static void emit_attr(FILE *f, const char *id, int a, const vp_attr *at) {
    fputs("    {.name = ", f);
    vp_c_string(f, at->name);
    fprintf(f, ", .type = %d", (int)at->type);
    switch (at->type) {
    case VP_ATTR_FLOAT: fputs(", .f = (float)", f), vp_c_float(f, at->f); break;
    case VP_ATTR_INT: fputs(", .i = ", f), vp_c_i64(f, at->i); break;
    case VP_ATTR_STRING: fputs(", .s = ", f), vp_c_string(f, at->s); break;
    case VP_ATTR_FLOATS: fprintf(f, ", .n = %d, .floats = %s_a%d", at->n, id, a); break;
    case VP_ATTR_INTS: fprintf(f, ", .n = %d, .ints = %s_a%d", at->n, id, a); break;
    case VP_ATTR_STRINGS: fprintf(f, ", .n = %d, .strings = %s_a%d", at->n, id, a); break;
    case VP_ATTR_TENSOR: fprintf(f, ", .t = &%s_a%d", id, a); break;
    default: break;
    }
    fputs("},\n", f);
}

static void emit_tensor(FILE *f, const vp_plan *p, int value, const char *role, int k) {
    const vp_value *v = &p->g->values[value];
    fprintf(f, "        {%s, %d, ", vp_c_dtype(v->dtype), v->rank);
    vp_c_dims(f, v->rank, v->dims);
    fprintf(f, ", A + %lld}, /* %s %d: ", (long long)p->buffers[p->buffer_of[value]].offset, role, k);
    vp_c_comment_text(f, v->name);
    fputs(" */\n", f);
}

/* Whether step n goes through the oneDNN context first, as the CPU backend's run_node
 * sends it (the fast path only). */
static int via_dn(const vp_codegen_opts *o, const vp_node *n) {
    return !o->cuda && !o->reference && vp_dn_may_cover(n) && !vp_node_attr(n, VP_CAST_ATTR);
}

/* The node record and the function of step s, named into fn. */
static vp_status emit_step(FILE *f, const vp_plan *p, const vp_codegen_opts *o, int s, char *fn, size_t fn_size,
                           vp_error *err) {
    static const char *phases[] = {"forward", "loss", "backward", "recompute", "optimizer", "comm"};
    const vp_node *n = &p->g->nodes[p->steps[s]];
    const char *kernel = NULL;
    int own_loop = vp_codegen_c_inline(o, p, n);
    vp_status st = o->cuda || own_loop ? VP_OK : kernel_symbol(n, &kernel, err);
    if (st) return st;
    char id[16], name[64];
    snprintf(id, sizeof id, "s%d", s);
    vp_c_ident(name, sizeof name, n->name, 48);
    snprintf(fn, fn_size, "%s_%s", id, name + (name[0] == '_' && name[1])); /* "/fc1/Gemm": s0_fc1_Gemm */
    fprintf(f, "\n/* step %d, %s: %s%s%s '", s, n->phase <= VP_PHASE_COMM ? phases[n->phase] : "?", n->domain,
            n->domain[0] ? "." : "", n->op_type);
    vp_c_comment_text(f, n->name);
    fputs("' */\n", f);
    if (own_loop) {
        vp_codegen_c_inline_step(f, p, o, n, id, fn);
        return VP_OK;
    }
    for (int a = 0; a < n->n_attrs; a++) {
        st = emit_attr_data(f, id, a, &n->attrs[a], err);
        if (st) return vp_node_fail(err, st, n, "%s", err->msg);
    }
    if (n->n_attrs) {
        fprintf(f, "static vp_attr %s_attrs[] = {\n", id);
        for (int a = 0; a < n->n_attrs; a++) emit_attr(f, id, a, &n->attrs[a]);
        fputs("};\n", f);
    }
    /* the kernels test only whether an optional input or output is present (>= 0) */
    for (int io = 0; io < 2; io++) {
        int cnt = io ? n->n_outputs : n->n_inputs;
        const int *ids = io ? n->outputs : n->inputs;
        fprintf(f, "static int %s_%s[] = {", id, io ? "out" : "in");
        for (int k = 0; k < cnt; k++) fprintf(f, "%s%d", k ? ", " : "", ids[k] >= 0 ? p->buffer_of[ids[k]] : -1);
        fprintf(f, "%s};\n", cnt ? "" : "-1");
    }
    fprintf(f, "static const vp_node %s_node = {.name = ", id);
    vp_c_string(f, n->name);
    fputs(", .op_type = ", f);
    vp_c_string(f, n->op_type);
    fputs(", .domain = ", f);
    vp_c_string(f, n->domain);
    fprintf(f, ",\n    .opset = %d, .n_inputs = %d, .inputs = %s_in, .n_outputs = %d, .outputs = %s_out, .n_attrs = %d, "
               ".attrs = %s%s, .phase = %d};\n",
            n->opset, n->n_inputs, id, n->n_outputs, id, n->n_attrs, n->n_attrs ? id : "NULL", n->n_attrs ? "_attrs" : "",
            (int)n->phase);
    int n_t = 0;
    for (int k = 0; k < n->n_inputs; k++) n_t += n->inputs[k] >= 0;
    for (int k = 0; k < n->n_outputs; k++) n_t += n->outputs[k] >= 0;
    int dn = via_dn(o, n);
    if (o->cuda) fprintf(f, "static vp_status %s(const %s_io *io, char *A, vp_error *err) {\n", fn, o->prefix);
    else if (dn) fprintf(f, "static vp_status %s(char *A, int prepare, vp_error *err) {\n", fn);
    else fprintf(f, "static vp_status %s(char *A, vp_error *err) {\n", fn);
    if (n_t) {
        fputs("    vp_tensor t[] = {\n", f);
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) emit_tensor(f, p, n->inputs[k], "in", k);
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) emit_tensor(f, p, n->outputs[k], "out", k);
        fputs("    };\n", f);
    } else {
        fputs("    (void)A;\n", f);
    }
    int at = 0;
    for (int io = 0; io < 2; io++) {
        int cnt = io ? n->n_outputs : n->n_inputs;
        const int *ids = io ? n->outputs : n->inputs;
        fputs(io ? "    vp_tensor *const out[] = {" : "    const vp_tensor *const in[] = {", f);
        for (int k = 0; k < cnt; k++) {
            if (ids[k] >= 0) fprintf(f, "%s&t[%d]", k ? ", " : "", at++);
            else fprintf(f, "%sNULL", k ? ", " : "");
        }
        fprintf(f, "%s};\n", cnt ? "" : "NULL");
    }
    if (o->cuda) {
        char field[96];
        vp_codegen_cuda_field(n, field, sizeof field);
        /* the step's planned workspace (cuBLAS, cuDNN), as the planned executor hands it */
        int ws = p->workspace ? p->workspace[s] : -1;
        if (ws < 0) {
            fprintf(f, "    return vp_backend_cuda_run(io->backend, io->kernels->%s, &%s_node, in, out, err);\n}\n", field, id);
        } else {
            fprintf(f, "    io->backend->workspace = A + %lld;\n    io->backend->workspace_bytes = %lld;\n",
                    (long long)p->buffers[ws].offset, (long long)p->buffers[ws].bytes);
            fprintf(f, "    vp_status s = vp_backend_cuda_run(io->backend, io->kernels->%s, &%s_node, in, out, err);\n", field, id);
            fputs("    io->backend->workspace = NULL;\n    io->backend->workspace_bytes = 0;\n    return s;\n}\n", f);
        }
    } else if (dn) {
        /* run_node's order: oneDNN when it takes the node (its reorders and scratchpad
         * in the step's planned workspace), else the op's kernel (cpu_kernels.h) */
        int ws = p->workspace ? p->workspace[s] : -1;
        char wsarg[96] = "NULL, 0";
        if (ws >= 0)
            snprintf(wsarg, sizeof wsarg, "A + %lld, %lld", (long long)p->buffers[ws].offset, (long long)p->buffers[ws].bytes);
        fprintf(f, "    if (%s_dn) {\n"
                   "        if (prepare) return vp_dn_prepare(%s_dn, &%s_node, in, out, err);\n"
                   "        int handled;\n"
                   "        vp_status s = vp_dn_run(%s_dn, &%s_node, in, out, %s, &handled, err);\n"
                   "        if (s || handled) return s;\n"
                   "    }\n"
                   "    return prepare ? VP_OK : %s(&%s_node, in, out, err);\n}\n",
                o->prefix, o->prefix, id, o->prefix, id, wsarg, kernel, id);
    } else if (vp_node_attr(n, VP_CAST_ATTR)) { /* a fused cast: the kernel's output converted on store */
        fprintf(f, "    return vp_cpu_store_cast(%s, &%s_node, in, out, err);\n}\n", kernel, id);
    } else {
        fprintf(f, "    return %s(&%s_node, in, out, err);\n}\n", kernel, id);
    }
    return VP_OK;
}

static vp_status check_plan(const vp_plan *p, vp_error *err) {
    /* the generated step owns one arena and calls the kernels on it; offload's host block,
     * its copies and its host update (pinned memory and a copy stream on CUDA) are the
     * runtime's, not written here yet */
    if (p->host_bytes > 0)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "the plan keeps %lld bytes on the host (optimizer-state offload, --offload): codegen writes steps "
                       "on one arena and does not generate the host block; run the plan with `onnx-vplan run`, or re-plan "
                       "without --offload",
                       (long long)p->host_bytes);
    for (int b = 0; b < p->n_buffers; b++) {
        const vp_value *v = &p->g->values[p->buffers[b].value];
        if (!vp_c_dtype(v->dtype))
            return vp_fail(err, VP_ERR_UNSUPPORTED, "buffer %d ('%s'): dtype %s is not written by codegen", b, v->name,
                           vp_dtype_name(v->dtype));
    }
    if (p->loss_buffer >= 0) {
        vp_dtype t = p->g->values[p->buffers[p->loss_buffer].value].dtype;
        if (t != VP_F32 && t != VP_F64)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "the loss is %s; codegen reports float32 or float64 losses", vp_dtype_name(t));
    }
    return VP_OK;
}

/* Kernel prototypes, each once, in first-use order. */
static vp_status emit_prototypes(FILE *f, const vp_plan *p, const vp_codegen_opts *o, vp_error *err) {
    const char **seen = calloc((size_t)p->n_steps + 1, sizeof *seen);
    if (!seen) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    int n_seen = 0;
    vp_status st = VP_OK;
    for (int s = 0; s < p->n_steps && !st; s++) {
        const vp_node *n = &p->g->nodes[p->steps[s]];
        if (skipped(p, n) || vp_codegen_c_inline(o, p, n)) continue;
        const char *k = NULL;
        st = kernel_symbol(n, &k, err);
        int dup = 0;
        for (int i = 0; !st && i < n_seen && !dup; i++) dup = !strcmp(seen[i], k);
        if (!st && !dup) {
            seen[n_seen++] = k;
            fprintf(f, "VP_RT_KERNEL(%s);\n", k);
        }
    }
    free(seen);
    return st;
}

/* The fast path's context: the oneDNN engine and every step's primitives, one per
 * program, made by NAME_init (or the first step) and freed by NAME_fini.  NULL when
 * oneDNN cannot start: the reference kernels and OpenBLAS then run, as in `run`. */
static void emit_context(FILE *f, const vp_codegen_opts *o) {
    const char *P = o->prefix;
    if (o->reference) {
        fprintf(f, "\nvoid %s_fini(void) {} /* the reference kernels keep nothing between steps */\n", P);
        return;
    }
    fprintf(f, "\n/* oneDNN's engine and the steps' primitives (NULL where oneDNN cannot start: the\n"
               " * reference kernels and OpenBLAS run then, as in `run`); one per program */\n"
               "static vp_dn *%s_dn;\nstatic int %s_dn_tried;\n\n"
               "static void %s_context(void) {\n"
               "    if (%s_dn_tried) return;\n    %s_dn = vp_dn_new();\n    %s_dn_tried = 1;\n}\n\n"
               "void %s_fini(void) {\n    vp_dn_free(%s_dn);\n    %s_dn = NULL;\n    %s_dn_tried = 0;\n}\n",
            P, P, P, P, P, P, P, P, P, P);
}

/* NAME_prepare, which NAME_init calls: every oneDNN primitive built before the first step. */
static void emit_prepare(FILE *f, const vp_plan *p, const vp_codegen_opts *o, const char (*fns)[80]) {
    const char *P = o->prefix;
    fprintf(f, "\nstatic vp_status %s_prepare(char *A, vp_error *err) {\n", P);
    if (o->reference) {
        fputs("    (void)A;\n    (void)err;\n    return VP_OK;\n}\n", f);
        return;
    }
    fprintf(f, "    %s_context();\n    (void)A;\n    (void)err;\n", P);
    int any = 0;
    for (int s = 0; s < p->n_steps; s++) {
        if (!fns[s][0] || !via_dn(o, &p->g->nodes[p->steps[s]])) continue;
        if (!any++) fprintf(f, "    if (!%s_dn) return VP_OK;\n    vp_status s;\n", P);
        fprintf(f, "    if ((s = %s(A, 1, err))) return vp_error_prefix(err, \"step %d: \"), s;\n", fns[s], s);
    }
    fputs("    return VP_OK;\n}\n", f);
}

static vp_status emit_source(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o, vp_error *err) {
    const vp_plan *p = &lp->plan;
    const char *P = o->prefix;
    vp_c_provenance(f, lp, o, "The training step of a plan as C: one function per step, called in plan order.");
    fprintf(f, "#include <math.h>\n#include <stdarg.h>\n#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n"
                  "#include <stdlib.h>\n#include <string.h>\n\n#include \"%s_step.h\"\n%s\n",
            P, o->cuda ? "" : "#include \"cpu/cpu_par.h\"\n#include \"cpu/k_adam.h\"\n");
    vp_status st = o->cuda ? VP_OK : emit_prototypes(f, p, o, err);
    if (st) return st;
    if (!o->cuda) emit_context(f, o);
    if (!o->cuda) vp_codegen_c_inline_prelude(f, p, o);
    char (*fns)[80] = calloc((size_t)p->n_steps + 1, sizeof *fns);
    if (!fns) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int s = 0; s < p->n_steps && !st; s++) {
        const vp_node *n = &p->g->nodes[p->steps[s]];
        if (skipped(p, n)) {
            fprintf(f, "\n/* step %d: %s '", s, n->op_type);
            vp_c_comment_text(f, n->name);
            fputs("' is a view sharing its input's storage: nothing to do */\n", f);
            continue;
        }
        st = emit_step(f, p, o, s, fns[s], sizeof fns[s], err);
    }
    if (!st && !o->cuda) emit_prepare(f, p, o, (const char(*)[80])fns);
    if (!st) {
        vp_codegen_c_weights(f, lp, o);
        fprintf(f, "\nint %s_step(void *arena, const %s_io *io) {\n", P, P);
        fprintf(f, "    if (!io) return VP_ERR_USAGE;\n"
                   "    int s0 = %s_arena_ok(arena, io->arena_bytes, io->error, io->error_size, \"%s_step\");\n"
                   "    if (s0) return s0;\n"
                   "    char *A = arena;\n"
                   "    vp_error err;\n    vp_status s;\n    int at = -1;\n",
                P, P);
        if (!o->cuda) fputs("    int gemm0 = vp_dn_gemm_selected();\n", f);
        if (o->cuda)
            fprintf(f, "    if (!io->backend || !io->kernels)\n"
                       "        return %s_fail(io->error, io->error_size, VP_ERR_USAGE, \"%s_step: io->backend and io->kernels are required\");\n"
                       "    vp_backend *b = io->backend;\n",
                    P, P);
        const vp_graph *g = lp->g;
        for (int k = 0; k < g->n_inputs; k++) {
            int b = p->buffer_of[g->inputs[k]];
            char field[80];
            vp_codegen_io_field(lp, k, field, sizeof field);
            if (b < 0) continue;
            fprintf(f, "    if (!io->%s) return %s_fail(io->error, io->error_size, VP_ERR_USAGE, \"%s_step: io->%s is NULL\");\n",
                    field, P, P, field);
            if (o->cuda)
                fprintf(f, "    if ((s = b->iface->copy_to_device(b, A + %lld, io->%s, %lld, &err))) goto fail;\n",
                        (long long)p->buffers[b].offset, field, (long long)p->buffers[b].bytes);
            else
                fprintf(f, "    memcpy(A + %lld, io->%s, %lld);\n", (long long)p->buffers[b].offset, field,
                        (long long)p->buffers[b].bytes);
        }
        if (!o->cuda && o->reference) fputs("    vp_dn_gemm_select(0); /* OpenBLAS, as run --reference */\n", f);
        else if (!o->cuda)
            fprintf(f, "    %s_context();\n"
                       "    vp_dn_gemm_select(%s_dn != NULL); /* oneDNN's sgemm where oneDNN started, as run */\n",
                    P, P);
        fputs("#define STEP(i, call) if ((s = call) != VP_OK) { at = i; goto fail; }\n", f);
        for (int s = 0; s < p->n_steps; s++)
            if (fns[s][0])
                fprintf(f, "    STEP(%d, %s(%sA, %s&err))\n", s, fns[s], o->cuda ? "io, " : "",
                        via_dn(o, &p->g->nodes[p->steps[s]]) ? "0, " : "");
        fputs("#undef STEP\n", f);
        if (p->loss_buffer >= 0) {
            const vp_buffer *lb = &p->buffers[p->loss_buffer];
            int f32 = p->g->values[lb->value].dtype == VP_F32;
            if (o->cuda)
                fprintf(f, "    if (io->loss) {\n        %s l;\n"
                           "        if ((s = b->iface->copy_to_host(b, &l, A + %lld, sizeof l, &err))) goto fail;\n"
                           "        *io->loss = l;\n    }\n",
                        f32 ? "float" : "double", (long long)lb->offset);
            else
                fprintf(f, "    if (io->loss) {\n        %s l;\n        memcpy(&l, A + %lld, sizeof l);\n        *io->loss = l;\n    }\n",
                        f32 ? "float" : "double", (long long)lb->offset);
        }
        if (o->cuda) fputs("    if ((s = b->iface->synchronize(b, &err))) goto fail;\n", f);
        else fputs("    vp_dn_gemm_select(gemm0);\n", f);
        fprintf(f, "    return VP_OK;\nfail:\n%s",
                o->cuda ? "" : "    vp_dn_gemm_select(gemm0);\n");
        fprintf(f, ""
                   "    if (at < 0) return %s_fail(io->error, io->error_size, s, \"%s_step: %%s\", err.msg);\n"
                   "    return %s_fail(io->error, io->error_size, s, \"%s_step: step %%d: %%s\", at, err.msg);\n}\n",
                P, P, P, P);
    }
    free(fns);
    return st;
}

vp_status vp_codegen_c(const vp_loaded_plan *lp, const vp_codegen_opts *o, vp_error *err) {
    vp_status st = check_plan(&lp->plan, err);
    if (st) return st;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_step.h", o->out_dir, o->prefix);
    st = vp_codegen_c_header(lp, o, path, err);
    if (st) return st;
    snprintf(path, sizeof path, "%s/%s_step.c", o->out_dir, o->prefix);
    vp_atomic_file af;
    st = vp_atomic_file_open(&af, path, err);
    if (st) return st;
    st = emit_source(af.f, lp, o, err);
    if (st) vp_atomic_file_abort(&af);
    else st = vp_atomic_file_commit(&af, err);
    if (st) return st;
    if (o->embed_weights) return VP_OK;
    const void **data = calloc((size_t)lp->plan.n_buffers + 1, sizeof *data);
    if (!data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int b = 0; b < lp->plan.n_buffers; b++) data[b] = lp->g->values[lp->plan.buffers[b].value].data;
    snprintf(path, sizeof path, "%s/%s.weights", o->out_dir, o->prefix);
    /* state that starts at zero has no data in the plan: zeroes from one shared block */
    int64_t zbytes = 0;
    for (int b = 0; b < lp->plan.n_buffers; b++)
        if (!data[b] && lp->plan.buffers[b].bytes > zbytes) zbytes = lp->plan.buffers[b].bytes;
    void *zeros = calloc(1, (size_t)zbytes + 1);
    if (!zeros) st = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int b = 0; b < lp->plan.n_buffers && !st; b++)
        if (!data[b]) data[b] = zeros;
    if (!st) st = vp_weights_write(&lp->plan, lp->checksum, data, path, err);
    free(zeros);
    free(data);
    return st;
}
