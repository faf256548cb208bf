/* Codegen: a plan becomes C source that trains, with no interpreter and no allocation
 * during a step (`onnx-vplan codegen`).
 *
 * In: a plan read back from its file.  Out, in DIR: NAME_step.h (the io struct, the
 * arena size, the tensor tables, init, step and save), NAME_step.c (one function per
 * step, named after its node, calling what `run`'s CPU backend calls for it (oneDNN's
 * primitive, built once at init, for a convolution it takes; else the op's kernel, its
 * products on oneDNN's sgemm) on tensors at the plan's constant offsets and shapes, in
 * plan order; with reference, the reference kernels and OpenBLAS, as `run --reference`) and NAME.weights (the initial
 * persistent buffers; compiled into NAME_step.c instead with embed_weights).
 * Keeps true: the generated step computes exactly what `run` computes on the same plan
 * (same kernels, same node records, same order, views skipped where `run` skips them),
 * so losses and weights are bit-identical; it refuses an arena smaller than the plan's.
 * With cuda, the same steps call the CUDA backend's entries (resolved once into a
 * NAME_kernels) on an arena in device memory, as `run --backend cuda` does. */
#ifndef VP_C_SOURCE_H
#define VP_C_SOURCE_H

#include <stdio.h>

#include "plan/plan_load.h"

typedef struct vp_codegen_opts {
    const char *plan_path;    /* for the provenance header */
    const char *out_dir;
    const char *prefix;       /* C identifier: NAME_step, NAME_io, NAME_step.c */
    int embed_weights;
    int cuda;                 /* --target cuda: the CUDA backend's kernels on a device arena */
    int reference;            /* --reference: the reference kernels and OpenBLAS, as `run --reference`
                               * (else the CPU backend's fast path: oneDNN, its sgemm, as `run`) */
    const char *command_line; /* as typed, for the provenance header */
} vp_codegen_opts;

vp_status vp_codegen_c(const vp_loaded_plan *lp, const vp_codegen_opts *o, vp_error *err);

/* ---- shared by the writers (c_emit.c) ---- */

/* A C string literal of s (quotes included). */
void vp_c_string(FILE *f, const char *s);
/* s as comment text: printable ASCII, no comment terminator. */
void vp_c_comment_text(FILE *f, const char *s);
/* s reduced to [A-Za-z0-9_], at most max characters (never empty). */
void vp_c_ident(char *dst, size_t size, const char *s, size_t max);
void vp_c_i64(FILE *f, int64_t v);
/* An exact float literal (hex), or INFINITY/NAN. */
void vp_c_float(FILE *f, double v);
/* "{d0, d1, ...}" */
void vp_c_dims(FILE *f, int rank, const int64_t *dims);
/* The enumerator name of a dtype: VP_F32 ... */
const char *vp_c_dtype(vp_dtype t);
/* The provenance comment every generated file opens with. */
void vp_c_provenance(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o, const char *what);
/* "VP_VAL_PARAM | VP_VAL_STATE" for a value's flags. */
void vp_c_flags(FILE *f, unsigned flags);

/* ---- steps written as their own loop (c_inline.c) ---- */
/* Whether step n is written as its own loop rather than a kernel call. */
int vp_codegen_c_inline(const vp_codegen_opts *o, const vp_plan *p, const vp_node *n);
/* What those steps share, once per file, before them. */
void vp_codegen_c_inline_prelude(FILE *f, const vp_plan *p, const vp_codegen_opts *o);
/* The function fn of such a step (id: its "sN" prefix for static data). */
void vp_codegen_c_inline_step(FILE *f, const vp_plan *p, const vp_codegen_opts *o, const vp_node *n, const char *id,
                              const char *fn);

/* ---- the header and the weights (c_weights.c) ---- */
vp_status vp_codegen_c_header(const vp_loaded_plan *lp, const vp_codegen_opts *o, const char *path, vp_error *err);
/* The tensor tables, init and save in NAME_step.c. */
void vp_codegen_c_weights(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o);
/* The io struct's field name for graph input k (unique, not a reserved field). */
void vp_codegen_io_field(const vp_loaded_plan *lp, int k, char *dst, size_t size);


/* ---- the CUDA target's differences (c_cuda.c) ---- */
/* The NAME_kernels member of a node's op: k_Gemm, k_com_microsoft_ReluGrad. */
void vp_codegen_cuda_field(const vp_node *n, char *dst, size_t size);
/* NAME_kernels and the prototypes of NAME_kernels_init, NAME_init and NAME_save. */
void vp_codegen_cuda_header(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o);
/* Their definitions. */
void vp_codegen_cuda_source(FILE *f, const vp_loaded_plan *lp, const vp_codegen_opts *o);

#endif
