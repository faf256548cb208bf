/* libvplanrt: the runtime as a library, for programs that train with a generated step.
 *
 * `onnx-vplan codegen PLAN -o DIR --prefix NAME` writes NAME_step.c and NAME_step.h:
 * one function per plan step, each calling what `onnx-vplan run`'s CPU backend calls
 * for it (a convolution's oneDNN primitive, built once by NAME_init; else the op's
 * kernel, its products on oneDNN's sgemm), on tensors at the plan's constant offsets in
 * one arena the caller allocates once.  Nothing is looked up, interpreted or allocated
 * during a step, and a step's losses and weights are bit-identical to `onnx-vplan run`
 * of the plan under the same OMP_NUM_THREADS (to `run --reference` with codegen
 * --reference).  NAME_init and NAME_fini hold one oneDNN context per program: run one
 * step at a time.
 *
 * A program's whole use of it (mlp_step.h from `--prefix mlp`):
 *
 *     void *arena = aligned_alloc(MLP_ARENA_ALIGN, MLP_ARENA_BYTES);
 *     char msg[256];
 *     if (mlp_init(arena, MLP_ARENA_BYTES, "mlp.weights", msg, sizeof msg)) die(msg);
 *     mlp_io io = {.arena_bytes = MLP_ARENA_BYTES, .x = x, .labels = labels, .loss = &loss,
 *                  .error = msg, .error_size = sizeof msg};
 *     for (int i = 0; i < steps; i++)
 *         if (mlp_step(arena, &io)) die(msg);
 *     mlp_save(arena, MLP_ARENA_BYTES, "trained.weights", msg, sizeof msg);
 *     mlp_fini();
 *
 * Link with `pkg-config --cflags --libs vplanrt` (or tools/vplan.mk, or the CMake
 * package Vplan).  This header gives generated code the IR's tensor and node records
 * (ir/ir.h), the oneDNN context (cpu/dn.h) and the kernels' signature; the kernels
 * themselves are declared by the generated code, one line each, with VP_RT_KERNEL. */
#ifndef VPLANRT_H
#define VPLANRT_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/dn.h"
#include "ir/ir.h"

#define VPLANRT_VERSION "0.1.0"

/* A CPU kernel, as the kernel table holds it (cpu/cpu_kernels.c): dense row-major tensors, outputs
 * preallocated, omitted optional inputs NULL. */
#define VP_RT_KERNEL(fn) vp_status fn(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err)

/* Runs kernel on a node whose outputs a fused Cast converts on store (VP_CAST_ATTR in
 * ir/ir.h): the kernel writes the dtype it computes, the output gets the Cast's bits
 * (runtime/cpu/cpu_store_cast.c). */
/* The same in two halves around a dispatch of one's own (the CPU backend's oneDNN or
 * kernel): begin points pout (VP_STORE_CAST_MAX_OUT entries, as scratch) at out, or at
 * a scratch tensor of the computed dtype for each fused output; end converts (when ran)
 * and frees them. */
#define VP_STORE_CAST_MAX_OUT 16
vp_status vp_cpu_store_cast_begin(const vp_node *n, vp_tensor *const *out, vp_tensor *scratch, vp_tensor **pout,
                                  vp_error *err);
void vp_cpu_store_cast_end(const vp_node *n, int ran, vp_tensor *const *out, vp_tensor *scratch, vp_tensor **pout);
vp_status vp_cpu_store_cast(vp_status (*kernel)(const vp_node *, const vp_tensor *const *, vp_tensor *const *, vp_error *),
                            const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err);

/* A persistent tensor of a generated step (parameter, optimizer state, constant): where
 * it lives in the arena, for programs that read or write weights themselves. */
typedef struct vp_rt_tensor {
    const char *name;
    vp_dtype dtype;
    int rank;
    int64_t dims[VP_MAX_RANK];
    size_t offset; /* bytes from the arena's start */
    size_t bytes;
    unsigned flags; /* VP_VAL_PARAM, VP_VAL_STATE, VP_VAL_CONST, ... */
} vp_rt_tensor;

/* An input of a generated step: where its pointer sits in the NAME_io struct. */
typedef struct vp_rt_input {
    const char *name;
    vp_dtype dtype;
    int rank;
    int64_t dims[VP_MAX_RANK];
    size_t bytes;
    size_t io_offset; /* offsetof(NAME_io, the field) */
} vp_rt_input;

/* The weights file, as codegen writes it beside the step and NAME_save rewrites it:
 * the magic, a little-endian u16 version, the plan's u64 checksum, the u64 payload
 * length, then every persistent tensor's bytes in the plan's buffer order. */
#define VP_WEIGHTS_MAGIC "VPWTS\n"
#define VP_WEIGHTS_VERSION 1
#define VP_WEIGHTS_HEADER_BYTES 24

#endif
