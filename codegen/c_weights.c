/* NAME_step.h, and the parts of NAME_step.c that are about the arena rather than the
 * step: the tables of persistent tensors and inputs, NAME_init (zero the arena, load
 * the weights from the file or from the bytes compiled in) and NAME_save. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "c_source.h"
#include "ir/atomic_file.h"
#include "vplanrt.h"
#include "weights_file.h"

static const char *reserved[] = {"arena_bytes", "loss", "error", "error_size"};

void vp_codegen_io_field(const vp_loaded_plan *lp, int k, char *dst, size_t size) {
    char mine[64];
    vp_c_ident(mine, sizeof mine, lp->g->values[lp->g->inputs[k]].name, 48);
    int clash = isdigit((unsigned char)mine[0]);
    for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++) clash |= !strcmp(mine, reserved[r]);
    for (int j = 0; j < k && !clash; j++) {
        char other[64];
        vp_c_ident(other, sizeof other, lp->g->values[lp->g->inputs[j]].name, 48);
        clash = !strcmp(mine, other);
    }
    if (clash) snprintf(dst, size, "in%d_%s", k, mine);
    else snprintf(dst, size, "%s", mine);
}

static const char *io_type(vp_dtype t) {
    switch (t) {
    case VP_F32: return "const float *";
    case VP_F64: return "const double *";
    case VP_I64: return "const int64_t *";
    case VP_I32: return "const int32_t *";
    case VP_U8: case VP_BOOL: return "const uint8_t *";
    default: return "const void *";
    }
}

static void upper(char *dst, size_t size, const char *s) {
    size_t i = 0;
    for (; s[i] && i + 1 < size; i++) dst[i] = (char)toupper((unsigned char)s[i]);
    dst[i] = 0;
}

static int n_persistent(const vp_plan *p) {
    int n = 0;
    for (int b = 0; b < p->n_buffers; b++) n += vp_weights_persistent(p, b);
    return n;
}

static int64_t alignment(const vp_plan *p) { return p->device.alignment > 64 ? p->device.alignment : 64; }

vp_status vp_codegen_c_header(const vp_loaded_plan *lp, const vp_codegen_opts *o, const char *path, vp_error *err) {
    const vp_plan *p = &lp->plan;
    const vp_graph *g = lp->g;
    const char *P = o->prefix;
    char U[80];
    upper(U, sizeof U, P);
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (s) return s;
    FILE *f = af.f;
    vp_c_provenance(f, lp, o, "The interface of a generated training step (libvplanrt's vplanrt.h shows its use).");
    fprintf(f, "#ifndef %s_STEP_H\n#define %s_STEP_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n#include \"vplanrt.h\"\n%s\n", U, U,
            o->cuda ? "#include \"cuda_backend.h\"\n" : "");
    fprintf(f, "#define %s_ARENA_BYTES ((size_t)%lld) /* the arena NAME_init and NAME_step need, at least */\n", U,
            (long long)(p->arena_bytes ? p->arena_bytes : 1));
    fprintf(f, "#define %s_ARENA_ALIGN %lld /* its start's alignment */\n", U, (long long)alignment(p));
    fprintf(f, "#define %s_PLAN_CHECKSUM UINT64_C(0x%016llx) /* a weights file is for this plan only */\n", U,
            (unsigned long long)lp->checksum);
    fprintf(f, "#define %s_WEIGHTS_BYTES ((size_t)%lld) /* the weights file's payload */\n", U,
            (long long)vp_weights_payload_bytes(p));
    fprintf(f, "#define %s_N_TENSORS %d /* persistent tensors: parameters, state, constants */\n", U, n_persistent(p));
    fprintf(f, "#define %s_N_INPUTS %d\n\n", U, g->n_inputs);
    if (o->cuda) {
        fprintf(f, "typedef struct %s_io %s_io;\n", P, P);
        vp_codegen_cuda_header(f, lp, o);
        fputc('\n', f);
    }
    fprintf(f, "typedef struct %s_io {\n    size_t arena_bytes; /* in: the arena's size (a smaller one is refused) */\n", P);
    if (o->cuda)
        fprintf(f, "    vp_backend *backend; /* in: vp_backend_cuda_new's, the arena on its device */\n"
                   "    const %s_kernels *kernels; /* in: from %s_kernels_init */\n",
                P, P);
    for (int k = 0; k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        char field[80], shape[256];
        vp_codegen_io_field(lp, k, field, sizeof field);
        fprintf(f, "    %s%s; /* in: '", io_type(v->dtype), field);
        vp_c_comment_text(f, v->name);
        fprintf(f, "', %s %s%s */\n", vp_dtype_name(v->dtype), vp_shape_str(v->rank, v->dims, shape, sizeof shape),
                p->buffer_of[g->inputs[k]] < 0 ? " (no step reads it)" : "");
    }
    fputs("    double *loss;       /* out: the step's loss (NULL: not wanted) */\n"
          "    char *error;        /* out: why a step failed (NULL: not wanted) */\n"
          "    size_t error_size;\n",
          f);
    fprintf(f, "} %s_io;\n\n", P);
    fprintf(f, "extern const vp_rt_tensor %s_tensors[]; /* %s_N_TENSORS, in the weights file's order */\n", P, U);
    fprintf(f, "extern const vp_rt_input %s_inputs[];   /* %s_N_INPUTS */\n\n", P, U);
    if (o->cuda) {
        fprintf(f, "\n#endif\n");
        return vp_atomic_file_commit(&af, err);
    }
    fprintf(f, "/* Zeroes the arena and loads the initial weights (%s). 0 or a vp_status. */\n"
               "int %s_init(void *arena, size_t arena_bytes, const char *weights_path, char *error, size_t error_size);\n",
            o->embed_weights ? "compiled in: weights_path is ignored and may be NULL"
                             : "from weights_path, the .weights file codegen wrote or NAME_save",
            P);
    fprintf(f, "/* One training step: inputs in, forward, loss, backward, optimizer update. 0 or a vp_status. */\n"
               "int %s_step(void *arena, const %s_io *io);\n",
            P, P);
    fprintf(f, "/* Frees what the steps keep between calls (%s); NAME_init makes it again. */\n"
               "void %s_fini(void);\n",
            o->reference ? "nothing: the reference kernels" : "oneDNN's engine and primitives, one set per program", P);
    fprintf(f, "/* Writes the persistent tensors (trained weights, optimizer state) as a weights file. */\n"
               "int %s_save(const void *arena, size_t arena_bytes, const char *weights_path, char *error, size_t error_size);\n",
            P);
    fprintf(f, "\n#endif\n");
    return vp_atomic_file_commit(&af, err);
}

static void emit_tables(FILE *f, const vp_loaded_plan *lp, const char *P) {
    const vp_plan *p = &lp->plan;
    const vp_graph *g = lp->g;
    fprintf(f, "\nconst vp_rt_tensor %s_tensors[] = {\n", P);
    for (int b = 0; b < p->n_buffers; b++) {
        if (!vp_weights_persistent(p, b)) continue;
        const vp_value *v = &g->values[p->buffers[b].value];
        fputs("    {", f);
        vp_c_string(f, v->name);
        fprintf(f, ", %s, %d, ", vp_c_dtype(v->dtype), v->rank);
        vp_c_dims(f, v->rank, v->dims);
        fprintf(f, ", %lld, %lld, ", (long long)p->buffers[b].offset, (long long)p->buffers[b].bytes);
        vp_c_flags(f, v->flags);
        fputs("},\n", f);
    }
    fprintf(f, "    {0}};\n\nconst vp_rt_input %s_inputs[] = {\n", P);
    for (int k = 0; k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        char field[80];
        vp_codegen_io_field(lp, k, field, sizeof field);
        fputs("    {", f);
        vp_c_string(f, v->name);
        fprintf(f, ", %s, %d, ", vp_c_dtype(v->dtype), v->rank);
        vp_c_dims(f, v->rank, v->dims);
        fprintf(f, ", %zu, offsetof(%s_io, %s)},\n", (size_t)vp_value_numel(v) * vp_dtype_size(v->dtype), P, field);
    }
    fputs("    {0}};\n", f);
}

static void emit_embedded(FILE *f, const vp_loaded_plan *lp, const char *P) {
    const vp_plan *p = &lp->plan;
    fprintf(f, "\n/* the initial persistent tensors, in %s_tensors' order */\nstatic const unsigned char %s_weights[] = {", P, P);
    size_t col = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        if (!vp_weights_persistent(p, b)) continue;
        const uint8_t *d = p->g->values[p->buffers[b].value].data;
        for (int64_t i = 0; i < p->buffers[b].bytes; i++, col++)
            fprintf(f, "%s%u,", col % 24 ? "" : "\n    ", d ? d[i] : 0u);
    }
    fprintf(f, "%s};\n", col ? "" : "0");
}

void vp_codegen_c_weights(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o) {
    const char *P = o->prefix;
    char U[80];
    upper(U, sizeof U, P);
    emit_tables(f, lp, P);
    fprintf(f, "\nstatic int %s_fail(char *error, size_t size, int code, const char *fmt, ...) {\n"
               "    if (error && size) {\n        va_list ap;\n        va_start(ap, fmt);\n"
               "        vsnprintf(error, size, fmt, ap);\n        va_end(ap);\n    }\n    return code;\n}\n",
            P);
    fprintf(f, "\nstatic int %s_arena_ok(const void *arena, size_t bytes, char *error, size_t size, const char *who) {\n"
               "    if (arena && bytes >= %s_ARENA_BYTES && (uintptr_t)arena %% %s_ARENA_ALIGN == 0) return VP_OK;\n"
               "    return %s_fail(error, size, VP_ERR_USAGE, \"%%s: the arena has %%zu bytes at %%p; the plan needs %%zu bytes aligned to %%d\",\n"
               "                   who, bytes, arena, (size_t)%s_ARENA_BYTES, %s_ARENA_ALIGN);\n}\n",
            P, U, U, P, U, U);
    if (o->embed_weights) emit_embedded(f, lp, P);
    else
        fprintf(f, "\nstatic uint64_t %s_u64(const unsigned char *b) {\n    uint64_t v = 0;\n"
                   "    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];\n    return v;\n}\n",
                P);
    if (o->cuda) {
        vp_codegen_cuda_source(f, lp, o);
        return;
    }
    fprintf(f, "\nint %s_init(void *arena, size_t arena_bytes, const char *weights_path, char *error, size_t error_size) {\n"
               "    int s = %s_arena_ok(arena, arena_bytes, error, error_size, \"%s_init\");\n    if (s) return s;\n"
               "    char *A = arena;\n    memset(A, 0, %s_ARENA_BYTES); /* state that starts at zero, as run's arena */\n",
            P, P, P, U);
    if (o->embed_weights) {
        fprintf(f, "    (void)weights_path;\n    size_t at = 0;\n"
                   "    for (int i = 0; i < %s_N_TENSORS; i++) {\n"
                   "        memcpy(A + %s_tensors[i].offset, %s_weights + at, %s_tensors[i].bytes);\n"
                   "        at += %s_tensors[i].bytes;\n    }\n"
                   "    vp_error err;\n"
                   "    if ((s = %s_prepare(A, &err))) return %s_fail(error, error_size, s, \"%s_init: %%s\", err.msg);\n"
                   "    return VP_OK;\n}\n",
                U, P, P, P, P, P, P, P);
    } else {
        fprintf(f, "    FILE *f = weights_path ? fopen(weights_path, \"rb\") : NULL;\n"
                   "    if (!f) return %s_fail(error, error_size, VP_ERR_IO, \"%s_init: %%s: cannot open\", weights_path ? weights_path : \"(null)\");\n"
                   "    unsigned char h[VP_WEIGHTS_HEADER_BYTES];\n"
                   "    int ok = fread(h, 1, sizeof h, f) == sizeof h && !memcmp(h, VP_WEIGHTS_MAGIC, 6) &&\n"
                   "             (h[6] | h[7] << 8) == VP_WEIGHTS_VERSION;\n"
                   "    if (!ok) s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: not an onnx-vplan weights file\", weights_path);\n"
                   "    else if (%s_u64(h + 8) != %s_PLAN_CHECKSUM)\n"
                   "        s = %s_fail(error, error_size, VP_ERR_INVALID, \"%s_init: %%s: written for another plan\", weights_path);\n"
                   "    else if (%s_u64(h + 16) != %s_WEIGHTS_BYTES)\n"
                   "        s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: wrong payload size\", weights_path);\n"
                   "    for (int i = 0; i < %s_N_TENSORS && !s; i++)\n"
                   "        if (fread(A + %s_tensors[i].offset, 1, %s_tensors[i].bytes, f) != %s_tensors[i].bytes)\n"
                   "            s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: truncated at '%%s'\", weights_path, %s_tensors[i].name);\n"
                   "    if (!s && fgetc(f) != EOF)\n"
                   "        s = %s_fail(error, error_size, VP_ERR_PARSE, \"%s_init: %%s: bytes after the payload\", weights_path);\n"
                   "    fclose(f);\n"
                   "    vp_error err;\n"
                   "    if (!s && (s = %s_prepare(A, &err))) %s_fail(error, error_size, s, \"%s_init: %%s\", err.msg);\n"
                   "    return s;\n}\n",
                P, P, P, P, P, U, P, P, P, U, P, P, U, P, P, P, P, P, P, P, P, P, P, P);
    }
    fprintf(f, "\nint %s_save(const void *arena, size_t arena_bytes, const char *weights_path, char *error, size_t error_size) {\n"
               "    int s = %s_arena_ok(arena, arena_bytes, error, error_size, \"%s_save\");\n    if (s) return s;\n"
               "    const char *A = arena;\n"
               "    unsigned char h[VP_WEIGHTS_HEADER_BYTES] = {0};\n"
               "    memcpy(h, VP_WEIGHTS_MAGIC, 6);\n    h[6] = VP_WEIGHTS_VERSION;\n"
               "    for (int i = 0; i < 8; i++) {\n"
               "        h[8 + i] = (unsigned char)(%s_PLAN_CHECKSUM >> 8 * i);\n"
               "        h[16 + i] = (unsigned char)((uint64_t)%s_WEIGHTS_BYTES >> 8 * i);\n    }\n"
               "    FILE *f = weights_path ? fopen(weights_path, \"wb\") : NULL;\n"
               "    if (!f) return %s_fail(error, error_size, VP_ERR_IO, \"%s_save: %%s: cannot create\", weights_path ? weights_path : \"(null)\");\n"
               "    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;\n"
               "    for (int i = 0; i < %s_N_TENSORS && ok; i++)\n"
               "        ok = fwrite(A + %s_tensors[i].offset, 1, %s_tensors[i].bytes, f) == %s_tensors[i].bytes;\n"
               "    ok &= fclose(f) == 0;\n"
               "    return ok ? VP_OK : %s_fail(error, error_size, VP_ERR_IO, \"%s_save: %%s: write failed\", weights_path);\n}\n",
            P, P, P, U, U, P, P, U, P, P, P, P, P);
}
