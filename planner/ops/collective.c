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
 *   TPAllGather(X) -> Y       forward: every rank's X in rank order along `axis`
 *                             backward: dX = TPReduceScatter(dY); with `vplan_rank` set
 *                             (Y read by replicated ops, dY the same on every rank: the
 *                             residual stream's end, a classifier's first token) dX =
 *                             this rank's chunk of dY, a Slice, no communication
 *   TPReduceScatter(X) -> Y   forward: the sum over ranks of X, of which this rank keeps
 *                             the rank-th of `ranks` chunks along `axis`
 *                             backward: dX = TPAllGather(dY)
 *
 * The last two are sequence parallelism's (--sp, Korthikanti et al. 2022): between
 * tensor-parallel regions the activations are split along the sequence, so TPCopy
 * becomes an all-gather and TPAllReduce a reduce-scatter, the same bytes on the wire.
 *
 * TPCopy sits where a replicated value enters a column-parallel region (each rank's
 * part of the gradient comes back from its slice of the weight and the parts must be
 * summed); TPAllReduce where a row-parallel product leaves it (each rank holds a partial
 * sum).  So a transformer layer has two of each: two all-reduces forward (after the
 * attention and MLP output projections) and two backward (at the two TPCopy).
 *
 * The CPU kernel is the one-rank case (a copy; runtime/cpu/cpu_kernels.c).  The
 * all-reduces carry VP_OP_COLLECTIVE:
 * a backend with a communicator (runtime/comm.h) runs it there instead, over MPI or
 * NCCL.  It may write in place (the all-reduce reads its whole input before writing). */
#include <string.h>

#include "ops/grad_macros.h"
#include "train/grad.h"

static vp_status shape_same(vp_graph *g, vp_node *n, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    const vp_value *x = s ? NULL : vp_shape_in(g, n, 0);
    if (!s) s = vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, 4, err);
    if (!s) s = vp_shape_same_as_input(g, n, 0, 0, err);
    return s;
}

/* Gather and scatter along `axis`: the output is `ranks` times the input there, or a
 * `ranks`-th of it. */
static vp_status shape_axis(vp_graph *g, vp_node *n, int gather, vp_error *err) {
    vp_status s = vp_shape_check_arity(n, 1, 1, 1, 1, err);
    const vp_value *x = s ? NULL : vp_shape_in(g, n, 0);
    if (!s) s = vp_shape_check_dtype(n, 0, x->dtype, vp_float_types, 4, err);
    if (s) return s;
    int64_t ranks = vp_attr_int(n, "ranks", 1), axis = vp_attr_int(n, "axis", 0);
    if (axis < 0) axis += x->rank;
    if (ranks < 1 || axis < 0 || axis >= x->rank || (!gather && x->dims[axis] % ranks))
        return vp_node_fail(err, VP_ERR_INVALID, n, "axis %lld of %d ranks does not fit the input", (long long)axis, (int)ranks);
    int64_t dims[VP_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[axis] = gather ? dims[axis] * ranks : dims[axis] / ranks;
    return vp_shape_set_output(g, n, 0, x->dtype, x->rank, dims, err);
}

static vp_status shape_gather(vp_graph *g, vp_node *n, vp_error *err) { return shape_axis(g, n, 1, err); }
static vp_status shape_scatter(vp_graph *g, vp_node *n, vp_error *err) { return shape_axis(g, n, 0, err); }

static vp_status grad_conjugate(vp_grad_ctx *c, int node, const int *dy, int *dx, const char *op, vp_error *err) {
    if (dy[0] < 0 || !vp_grad_needs(c, node, 0)) return VP_OK;
    int b = vp_grad_begin(c, node, op, "vplan", 1, &dy[0], 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err)); /* ranks, axis */
    return vp_grad_end(c, b, &dx[0], err);
}

/* Megatron-LM's gather_from_sequence_parallel_region without tensor_parallel_output_grad:
 * what reads Y is the same on every rank, and so is dY. */
static vp_status grad_gather_whole(vp_grad_ctx *c, int node, const int *dy, int *dx, vp_error *err) {
    const vp_node *n = &vp_grad_graph(c)->nodes[node];
    const vp_value *x = &vp_grad_graph(c)->values[n->inputs[0]];
    int64_t axis = vp_attr_int(n, "axis", 0), rank = vp_attr_int(n, "vplan_rank", 0);
    if (axis < 0) axis += x->rank;
    int64_t v[3] = {rank * x->dims[axis], (rank + 1) * x->dims[axis], axis};
    int in[4] = {dy[0], -1, -1, -1};
    for (int j = 0; j < 3; j++) TRY(vp_gr_ints(c, &v[j], 1, &in[j + 1], err));
    int b = vp_grad_begin(c, node, "Slice", "", 4, in, 1);
    if (b < 0) return vp_gr_nomem(err);
    return vp_grad_end(c, b, &dx[0], err);
}

static VP_GRAD_RULE(grad_all_gather) {
    if (dy[0] >= 0 && vp_grad_needs(c, node, 0) && vp_attr_int(&vp_grad_graph(c)->nodes[node], "vplan_rank", -1) >= 0)
        return grad_gather_whole(c, node, dy, dx, err);
    return grad_conjugate(c, node, dy, dx, "TPReduceScatter", err);
}
static VP_GRAD_RULE(grad_reduce_scatter) { return grad_conjugate(c, node, dy, dx, "TPAllGather", err); }

static VP_GRAD_RULE(grad_tp_copy) {
    if (dy[0] < 0 || !vp_grad_needs(c, node, 0)) return VP_OK;
    int b = vp_grad_begin(c, node, "TPAllReduce", "vplan", 1, &dy[0], 1);
    if (b < 0) return vp_gr_nomem(err);
    TRY(vp_gr_copy_attrs(c, node, b, err)); /* ranks */
    return vp_grad_end(c, b, &dx[0], err);
}

const vp_op_def vp_ops_collective[] = {
    {.name = "TPCopy", .domain = "vplan", .shape = shape_same, .flags = VP_OP_VIEW | VP_OP_NO_FOLD,
     .grad = grad_tp_copy},
    {.name = "TPAllReduce", .domain = "vplan", .shape = shape_same,
     .flags = VP_OP_INPLACE | VP_OP_NO_FOLD | VP_OP_COLLECTIVE, .grad = vp_grad_identity},
    {.name = "TPAllGather", .domain = "vplan", .shape = shape_gather,
     .flags = VP_OP_NO_FOLD | VP_OP_COLLECTIVE | VP_OP_COLLECTIVE_GATHER, .grad = grad_all_gather},
    {.name = "TPReduceScatter", .domain = "vplan", .shape = shape_scatter,
     .flags = VP_OP_NO_FOLD | VP_OP_COLLECTIVE | VP_OP_COLLECTIVE_SCATTER, .grad = grad_reduce_scatter},
    {.name = "TPAllReduceMax", .domain = "vplan", .shape = shape_same,
     .flags = VP_OP_INPLACE | VP_OP_NO_FOLD | VP_OP_COLLECTIVE | VP_OP_COLLECTIVE_MAX | VP_OP_STOP_GRADIENT},
    {0},
};
