/* The op registry: one entry per op, grouped by family (planner/ops/<family>.c).
 *
 * An entry holds what the planner's passes need of an op side by side: the shape
 * function, the flags (in place, view, folding), the gradient rule.  Adding an op is
 * one entry plus its functions, and its CPU kernel's row in the runtime's table
 * (runtime/cpu/cpu_kernels.c), which tests/test_cpu_kernels.c holds to this registry.
 *
 * Shape functions read the node's input values (dtype, shape and, where the op needs
 * it, constant data) and set its outputs with vp_shape_set_output().  They are also
 * where an unsupported variant (attribute value, dtype) is refused with
 * VP_ERR_UNSUPPORTED, so a model we cannot run fails at load, never with a wrong
 * answer.
 *
 * CPU kernels (vp_cpu_fn, declared here, where the planner's constant folding and the
 * runtime both see it) get dense row-major tensors whose shapes the shape function
 * decided; omitted optional inputs are NULL.  Outputs are allocated by the caller.
 * The planner reaches them only through the host the program installs (ir/host.h). */
#ifndef VP_OP_REGISTRY_H
#define VP_OP_REGISTRY_H

#include "ir/ir.h"

typedef vp_status (*vp_shape_fn)(vp_graph *g, vp_node *n, vp_error *err);
typedef vp_status (*vp_cpu_fn)(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                               vp_error *err);

enum {
    VP_OP_FOLD_SHAPE_ONLY = 1u << 0, /* output depends on input shapes only (Shape, Size) */
    VP_OP_NO_FOLD = 1u << 1,         /* never fold (random ops, training-mode side effects) */
    VP_OP_INPLACE = 1u << 2,         /* output 0 may share input 0's or input 1's memory when
                                        they have its size and dtype: the CPU and CUDA kernels
                                        read each element (or each row, channel or fiber whole)
                                        of inputs 0 and 1 before they write it; inputs 2 on
                                        (a variadic Sum's) may be read after, so they never
                                        share the output's storage */
    VP_OP_VIEW = 1u << 3,            /* output 0 is input 0's bytes under another shape (Reshape,
                                        Identity): the planner may give it the input's storage,
                                        and the kernel then has nothing to do */
    VP_OP_COLLECTIVE = 1u << 4,      /* communicates across tensor-parallel ranks: a backend with a
                                        communicator (runtime/comm.h) runs it there; the CPU
                                        kernel is the one-rank case */
    VP_OP_COLLECTIVE_MAX = 1u << 5,  /* with VP_OP_COLLECTIVE: the all-reduce takes the maximum
                                        across ranks, not the sum */
    VP_OP_COLLECTIVE_GATHER = 1u << 7,  /* with VP_OP_COLLECTIVE: an all-gather along attribute
                                           `axis` (sequence parallelism), not an all-reduce */
    VP_OP_COLLECTIVE_SCATTER = 1u << 8, /* with VP_OP_COLLECTIVE: a reduce-scatter along `axis` */
    VP_OP_STOP_GRADIENT = 1u << 6,   /* its outputs carry no gradient (autodiff treats them as
                                        constants): a value the result does not depend on, as
                                        the shift of a softmax */
    VP_OP_OUTPUT0_OPTIONAL = 1u << 9, /* ONNX lets a model leave output 0 unnamed (LSTM's and
                                         GRU's Y); for every other ai.onnx op the loader
                                         refuses that, as ONNX's checker does */
};

struct vp_grad_ctx;
/* Gradient builder: emits the nodes that compute the gradients of a forward node's
 * inputs from the gradients of its outputs (see planner/grad.h). */
typedef vp_status (*vp_grad_fn)(struct vp_grad_ctx *c, int node, const int *dy, int *dx, vp_error *err);

typedef struct vp_op_def {
    const char *name;     /* ONNX op_type */
    const char *domain;   /* "" for ai.onnx */
    int min_opset;        /* oldest opset version whose semantics we implement */
    vp_shape_fn shape;
    unsigned flags;
    vp_grad_fn grad;      /* NULL: not differentiable (or no rule yet) */
} vp_op_def;

/* Family tables, each ended by an entry with name == NULL. */
extern const vp_op_def vp_ops_elementwise[];
extern const vp_op_def vp_ops_tensor[];   /* shape and data movement */
extern const vp_op_def vp_ops_source[];   /* Shape, Size, Constant, ConstantOfShape, Range */
extern const vp_op_def vp_ops_linalg[];   /* MatMul, Gemm, Conv, pooling, normalisation */
extern const vp_op_def vp_ops_reduce[];   /* reductions, softmax, losses, quantisation */
extern const vp_op_def vp_ops_resample[]; /* Resize, Upsample, ScatterND, GatherND and their adjoints */
extern const vp_op_def vp_ops_train[];    /* gradient ops (com.microsoft) */
extern const vp_op_def vp_ops_update[]; /* optimizer updates (vplan, ONNX preview), accumulation, finite check */
extern const vp_op_def vp_ops_attention[]; /* fused attention and its gradient (vplan) */
extern const vp_op_def vp_ops_recurrent[]; /* LSTM, GRU, their training forms and gradients */
extern const vp_op_def vp_ops_act_matmul[]; /* GELU and the product reading it, and its gradient (vplan) */
extern const vp_op_def vp_ops_collective[]; /* tensor-parallel TPCopy, TPAllReduce (vplan) */
extern const vp_op_def vp_ops_quant[];     /* fake quantisation, observers (vplan) */

const vp_op_def *vp_op_find(const char *domain, const char *op_type);
/* Calls fn for each registered op (for listings and --help). */
void vp_op_foreach(void (*fn)(const vp_op_def *op, void *ctx), void *ctx);

/* ---- helpers for shape functions ---- */

/* The i-th input value, or NULL when omitted or i is past the node's inputs. */
vp_value *vp_shape_in(vp_graph *g, const vp_node *n, int i);
/* Fails unless the node has between lo and hi inputs (non-omitted counted by position). */
vp_status vp_shape_check_arity(const vp_node *n, int lo_in, int hi_in, int lo_out, int hi_out,
                               vp_error *err);
/* The attributes and input of our training steps' draws (Dropout under vplan_step, the
 * fused Attention's dropout): vplan_ranks, vplan_rank and, for a split of a rank-`rank`
 * tensor, vplan_axis must fit; input `step`, where present, is one int64 (the step
 * count, train/train_mode.c).  Fails naming the node. */
vp_status vp_shape_check_draws(vp_graph *g, const vp_node *n, int rank, int step, vp_error *err);
/* Sets output i; checks dims are non-negative and the byte size does not overflow. */
vp_status vp_shape_set_output(vp_graph *g, const vp_node *n, int i, vp_dtype dtype, int rank,
                              const int64_t *dims, vp_error *err);
/* Sets output i to input j's dtype and shape. */
vp_status vp_shape_same_as_input(vp_graph *g, const vp_node *n, int i, int j, vp_error *err);
/* Numpy broadcast of two shapes; fails naming the node when incompatible. */
vp_status vp_shape_broadcast(const vp_node *n, int ra, const int64_t *a, int rb, const int64_t *b,
                             int *rout, int64_t *out, vp_error *err);
/* Reads a constant int64/int32 input (shape, axes, starts, ...) into out[max].
 * Fails naming the node when the input is not known ahead of time. */
vp_status vp_shape_const_ints(vp_graph *g, const vp_node *n, int i, int64_t *out, int max,
                              int *count, vp_error *err);
/* Slice's starts, ends, axes and steps into v[0..3] (attributes before opset 10, constant
 * inputs from it): count[j] entries each (-1 where not given), given[j] whether it was;
 * fails naming the node when starts or ends is missing or the counts disagree.  Shared
 * by Slice's shape function and its gradient. */
vp_status vp_slice_read(vp_graph *g, const vp_node *n, int64_t (*v)[VP_MAX_RANK], int *count, int *given,
                        vp_error *err);
/* Normalises a possibly negative axis against rank; fails when out of range. */
vp_status vp_shape_axis(const vp_node *n, int64_t axis, int rank, int *out, vp_error *err);
/* Fails unless dtype is one of the allowed, naming the node, the input and the dtype. */
vp_status vp_shape_check_dtype(const vp_node *n, int input, vp_dtype dt, const vp_dtype *allowed,
                               int n_allowed, vp_error *err);

/* Whether two values have the same shape. */
int vp_shape_equal(const vp_value *a, const vp_value *b);
/* Fails naming input i's shape and the shape of input j it should have had. */
vp_status vp_shape_fail_like(const vp_node *n, int i, const vp_value *v, const vp_value *ref, int j, vp_error *err);
/* Fails unless input i has input j's dtype and shape. */
vp_status vp_shape_check_like(vp_graph *g, const vp_node *n, int i, int j, vp_error *err);
/* Fails unless optional input i, when present, holds one element of one of the given dtypes. */
vp_status vp_shape_check_scalar(vp_graph *g, const vp_node *n, int i, const vp_dtype *types, int n_types,
                                vp_error *err);

/* Common dtype sets. */
extern const vp_dtype vp_float_types[4]; /* f32 f64 f16 bf16 */
extern const vp_dtype vp_numeric_types[6]; /* + i32 i64 */

#endif
