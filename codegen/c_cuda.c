/* `codegen --target cuda`: what differs from the CPU target.  The step functions are the
 * same (node records, tensors at constant offsets) but call vp_backend_cuda_run with an
 * entry NAME_kernels_init resolved once, on the caller's CUDA backend; the arena is
 * device memory, so init and save stage the weights through one host buffer of the
 * largest tensor's size (allocated by them, never by a step). */
#include <stdlib.h>
#include <string.h>

#include "c_source.h"
#include "weights_file.h"

void vp_codegen_cuda_field(const vp_node *n, char *dst, size_t size) {
    char dom[64], op[64];
    vp_c_ident(dom, sizeof dom, n->domain, 40);
    vp_c_ident(op, sizeof op, n->op_type, 48);
    if (n->domain[0] && strcmp(n->domain, "ai.onnx")) snprintf(dst, size, "k_%.40s_%.48s", dom, op);
    else snprintf(dst, size, "k_%s", op);
}

/* Calls fn for each distinct op the steps run, once, in first-use order. */
static void foreach_op(const vp_plan *p, FILE *f, const char *P,
                       void (*fn)(FILE *f, const vp_node *n, const char *field, const char *P)) {
    /* each distinct field once, however many there are (a repeated member would not
     * compile); k_, 40, _, 48: a field is never cut */
    typedef char field_name[96];
    field_name *seen = malloc(((size_t)p->n_steps + 1) * sizeof *seen);
    int n_seen = 0;
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &p->g->nodes[p->steps[s]];
        field_name field;
        vp_codegen_cuda_field(n, field, sizeof field);
        int dup = 0;
        for (int i = 0; seen && i < n_seen && !dup; i++) dup = !strcmp(seen[i], field);
        if (dup) continue;
        if (seen) memcpy(seen[n_seen++], field, sizeof field);
        fn(f, n, field, P);
    }
    free(seen);
}

static void member(FILE *f, const vp_node *n, const char *field, const char *P) {
    (void)P;
    fprintf(f, "    const vp_cuda_kernel *%s; /* %s%s%s */\n", field, n->domain, n->domain[0] ? "." : "", n->op_type);
}

void vp_codegen_cuda_header(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o) {
    const char *P = o->prefix;
    fprintf(f, "/* The CUDA backend's entry for each op the step runs, resolved once by %s_kernels_init. */\n"
               "typedef struct %s_kernels {\n",
            P, P);
    foreach_op(&lp->plan, f, P, member);
    fprintf(f, "} %s_kernels;\n\n", P);
    fprintf(f, "/* Resolves every entry; fails naming an op the CUDA backend has no kernel for. */\n"
               "int %s_kernels_init(%s_kernels *k, char *error, size_t error_size);\n",
            P, P);
    fprintf(f, "/* Zeroes the device arena and loads the initial weights (%s) through the backend. */\n"
               "int %s_init(vp_backend *b, void *arena, size_t arena_bytes, const char *weights_path, char *error,\n"
               "            size_t error_size);\n",
            o->embed_weights ? "compiled in: weights_path is ignored" : "from weights_path", P);
    fprintf(f, "/* One training step on the device: inputs (host memory) copied in, the steps enqueued, the loss\n"
               " * copied back, the stream synchronized. 0 or a vp_status. */\n"
               "int %s_step(void *arena, const %s_io *io);\n",
            P, P);
    fprintf(f, "/* Writes the persistent tensors, copied from the device, as a weights file. */\n"
               "int %s_save(vp_backend *b, const void *arena, size_t arena_bytes, const char *weights_path, char *error,\n"
               "            size_t error_size);\n",
            P);
}

static void resolve(FILE *f, const vp_node *n, const char *field, const char *P) {
    fprintf(f, "    k->%s = vp_backend_cuda_kernel(", field);
    vp_c_string(f, n->domain);
    fputs(", ", f);
    vp_c_string(f, n->op_type);
    fprintf(f, ");\n    if (!k->%s) return %s_fail(error, error_size, VP_ERR_UNSUPPORTED, \"%s_kernels_init: the CUDA backend has no kernel for %s%s%s\");\n",
            field, P, P, n->domain, n->domain[0] ? "." : "", n->op_type);
}

void vp_codegen_cuda_source(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o) {
    const vp_plan *p = &lp->plan;
    const char *P = o->prefix;
    char U[80];
    size_t i = 0;
    for (; P[i] && i + 1 < sizeof U; i++) U[i] = (char)(P[i] >= 'a' && P[i] <= 'z' ? P[i] - 32 : P[i]);
    U[i] = 0;
    int64_t largest = 1;
    for (int b = 0; b < p->n_buffers; b++)
        if (vp_weights_persistent(p, b) && p->buffers[b].bytes > largest) largest = p->buffers[b].bytes;
    fprintf(f, "\nint %s_kernels_init(%s_kernels *k, char *error, size_t error_size) {\n", P, P);
    foreach_op(p, f, P, resolve);
    fputs("    return VP_OK;\n}\n", f);
    /* init: zero, then each tensor through the staging buffer */
    fprintf(f, "\nint %s_init(vp_backend *b, void *arena, size_t arena_bytes, const char *weights_path, char *error,\n"
               "            size_t error_size) {\n"
               "    int s = %s_arena_ok(arena, arena_bytes, error, error_size, \"%s_init\");\n    if (s) return s;\n"
               "    char *A = arena;\n    vp_error err;\n"
               "    if ((s = vp_backend_zero(b, A, %s_ARENA_BYTES, &err))) return %s_fail(error, error_size, s, \"%s_init: %%s\", err.msg);\n",
            P, P, P, U, P, P);
    if (o->embed_weights) {
        fprintf(f, "    (void)weights_path;\n    size_t at = 0;\n"
                   "    for (int i = 0; i < %s_N_TENSORS && !s; i++) {\n"
                   "        s = b->iface->copy_to_device(b, A + %s_tensors[i].offset, %s_weights + at, %s_tensors[i].bytes, &err);\n"
                   "        at += %s_tensors[i].bytes;\n    }\n"
                   "    return s ? %s_fail(error, error_size, s, \"%s_init: %%s\", err.msg) : VP_OK;\n}\n",
                U, P, P, P, P, P, P);
    } else {
        fprintf(f, "    FILE *f = weights_path ? fopen(weights_path, \"rb\") : NULL;\n"
                   "    if (!f) return %s_fail(error, error_size, VP_ERR_IO, \"%s_init: %%s: cannot open\", weights_path ? weights_path : \"(null)\");\n"
                   "    unsigned char h[VP_WEIGHTS_HEADER_BYTES];\n"
                   "    unsigned char *stage = malloc(%lld);\n"
                   "    int ok = stage && fread(h, 1, sizeof h, f) == sizeof h && !memcmp(h, VP_WEIGHTS_MAGIC, 6) &&\n"
                   "             (h[6] | h[7] << 8) == VP_WEIGHTS_VERSION;\n"
                   "    if (!ok) s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: not an onnx-vplan weights file\", weights_path);\n"
                   "    else if (%s_u64(h + 8) != %s_PLAN_CHECKSUM)\n"
                   "        s = %s_fail(error, error_size, VP_ERR_INVALID, \"%s_init: %%s: written for another plan\", weights_path);\n"
                   "    else if (%s_u64(h + 16) != %s_WEIGHTS_BYTES)\n"
                   "        s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: wrong payload size\", weights_path);\n"
                   "    for (int i = 0; i < %s_N_TENSORS && !s; i++) {\n"
                   "        if (fread(stage, 1, %s_tensors[i].bytes, f) != %s_tensors[i].bytes)\n"
                   "            s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: truncated at '%%s'\", weights_path, %s_tensors[i].name);\n"
                   "        else if ((s = b->iface->copy_to_device(b, A + %s_tensors[i].offset, stage, %s_tensors[i].bytes, &err)))\n"
                   "            %s_fail(error, error_size, s, \"%s_init: %%s\", err.msg);\n"
                   "    }\n"
                   "    if (!s && fgetc(f) != EOF)\n"
                   "        s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: bytes after the payload\", weights_path);\n"
                   "    free(stage);\n    fclose(f);\n    return s;\n}\n",
                P, P, (long long)largest, P, P, P, U, P, P, P, U, P, P, U, P, P, P, P, P, P, P, P, P, P, P);
    }
    fprintf(f, "\nint %s_save(vp_backend *b, const void *arena, size_t arena_bytes, const char *weights_path, char *error,\n"
               "            size_t error_size) {\n"
               "    int s = %s_arena_ok(arena, arena_bytes, error, error_size, \"%s_save\");\n    if (s) return s;\n"
               "    const char *A = arena;\n    vp_error err;\n"
               "    unsigned char h[VP_WEIGHTS_HEADER_BYTES] = {0};\n"
               "    memcpy(h, VP_WEIGHTS_MAGIC, 6);\n    h[6] = VP_WEIGHTS_VERSION;\n"
               "    for (int i = 0; i < 8; i++) {\n"
               "        h[8 + i] = (unsigned char)(%s_PLAN_CHECKSUM >> 8 * i);\n"
               "        h[16 + i] = (unsigned char)((uint64_t)%s_WEIGHTS_BYTES >> 8 * i);\n    }\n"
               "    unsigned char *stage = malloc(%lld);\n"
               "    FILE *f = weights_path && stage ? fopen(weights_path, \"wb\") : NULL;\n"
               "    if (!f) {\n        free(stage);\n"
               "        return %s_fail(error, error_size, VP_ERR_IO, \"%s_save: %%s: cannot create\", weights_path ? weights_path : \"(null)\");\n    }\n"
               "    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;\n"
               "    for (int i = 0; i < %s_N_TENSORS && ok && !s; i++) {\n"
               "        s = b->iface->copy_to_host(b, stage, A + %s_tensors[i].offset, %s_tensors[i].bytes, &err);\n"
               "        ok = !s && fwrite(stage, 1, %s_tensors[i].bytes, f) == %s_tensors[i].bytes;\n    }\n"
               "    ok &= fclose(f) == 0;\n    free(stage);\n"
               "    if (s) return %s_fail(error, error_size, s, \"%s_save: %%s\", err.msg);\n"
               "    return ok ? VP_OK : %s_fail(error, error_size, VP_ERR_IO, \"%s_save: %%s: write failed\", weights_path);\n}\n",
            P, P, P, U, U, (long long)largest, P, P, U, P, P, P, P, P, P, P, P);
}
