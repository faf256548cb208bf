/* The collective family: the conjugate communication ops of Megatron-style tensor
 * parallelism (domain "vplan"), inserted by planner/parallel/tp_split.c.
 *
 * Both carry an int attribute `ranks` (the cost model's ring size).
 *
 *   TPCopy(X) -> Y            forward: Y = X on every rank (a view: no work, no bytes)
 *                             backward: dX = TPAllReduce(dY)
 *   TPAllReduce(X) -> Y       forward: Y = sum over ranks of X
 *                             backward: dX = dY
 *   TPAllReduceMax(X) -> Y    forward: Y = maximum over ranks of X
 *                             no gradient (VP_OP_STOP_GRADIENT): the shift of the
 *                             softmax in the vocabulary-parallel cross-entropy, which the
 *                             loss does not depend on (planner/parallel/tp_vocab.c)
 *
 * TPCopy sits where a replicated value enters a column-parallel region (each rank's
 * part of the gradient comes back from its slice of the weight and the parts must be
 * summed); TPAllReduce where a row-parallel product leaves it (each rank holds a partial
 * sum).  So a transformer layer has two of each: two all-reduces forward (after the
 * attention and MLP output projections) and two backward (at the two TPCopy).
 *
 * The CPU kernel is the one-rank case (a copy).  The all-reduces carry VP_OP_COLLECTIVE:
 * a backend with a communicator (runtime/comm.h) runs it there instead, over MPI or
 * NCCL.  It may write in place (the all-reduce reads its whole input before writing). */
#include "k_elementwise.h"
#include "ops/grad_macros.h"
#include "train/grad.h"

static vp_status shape_same(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    const vp_value *x = s ? NULL : vp_shape_in(g, n, 0);
    if (!s) s = vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, 4, err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    return s;
}

static VP_GRAD_RULE(grad_tp_copy) {
    if (dy[0] < 0 || !vp_grad_needs(c, node, 0)) return VP_OK;
    int b = vp_grad_begin(c, node, "TPAllReduce", "vplan", 1, &dy[0], 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err)); /* ranks */
    return vp_grad_end(c, b, &dx[0], err);
}

const vp_op_def vp_ops_collective[] = {
    {.name = "TPCopy", .domain = "vplan", .shape = shape_same, .cpu = vp_cpu_identity, .flags = VP_OP_VIEW | VP_OP_NO_FOLD,
     .grad = grad_tp_copy},
    {.name = "TPAllReduce", .domain = "vplan", .shape = shape_same, .cpu = vp_cpu_identity,
     .flags = VP_OP_INPLACE | VP_OP_NO_FOLD | VP_OP_COLLECTIVE, .grad = vp_grad_identity},
    {.name = "TPAllReduceMax", .domain = "vplan", .shape = shape_same, .cpu = vp_cpu_identity,
     .flags = VP_OP_INPLACE | VP_OP_NO_FOLD | VP_OP_COLLECTIVE | VP_OP_COLLECTIVE_MAX | VP_OP_STOP_GRADIENT},
    {0},
};
