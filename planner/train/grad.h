/* The interface gradient builders use to emit backward nodes.
 *
 * A builder is called once per forward node on the path from a trainable parameter to
 * the loss, in reverse order.  dy[k] is the value id of d(loss)/d(output k), or -1 when
 * no gradient reaches that output.  The builder sets dx[k] to the value id of
 * d(loss)/d(input k) for every input where vp_grad_needs() is true, with exactly that
 * input's shape and dtype (so broadcasting is reduced away by the builder: see
 * vp_grad_sum_to).  Every emitted node is shape-inferred at once, so a builder may
 * read the shapes of what it just made.
 *
 * Standard ops a builder emits get the model's opset or 13, whichever is newer, so
 * ReduceSum, Squeeze, Unsqueeze and Split take their axes or splits as inputs.
 *
 * Gradient nodes use standard ONNX ops where they exist and ONNX Runtime's
 * com.microsoft gradient ops where they do not, so the training graph we write loads in
 * ONNX Runtime and theirs load here. */
#ifndef VP_GRAD_H
#define VP_GRAD_H

#include "ir/ir.h"
#include "ir/op_registry.h"

typedef struct vp_grad_ctx vp_grad_ctx;

vp_graph *vp_grad_graph(vp_grad_ctx *c);
/* Whether input k of the node needs a gradient (it depends on a trainable parameter). */
int vp_grad_needs(vp_grad_ctx *c, int node, int input);

/* Starts a backward node for the forward node `node` (for its name and phase); set its
 * attributes with vp_node_add_attr_* on the returned id, then call vp_grad_end. */
int vp_grad_begin(vp_grad_ctx *c, int node, const char *op, const char *domain, int n_in, const int *in,
                  int n_out);
/* Infers the node; out (may be NULL) receives its n_out output value ids. */
vp_status vp_grad_end(vp_grad_ctx *c, int bnode, int *out, vp_error *err);

/* One-call forms for attribute-free nodes: *out is the first output. */
vp_status vp_grad_op1(vp_grad_ctx *c, int node, const char *op, int a, int *out, vp_error *err);
vp_status vp_grad_op2(vp_grad_ctx *c, int node, const char *op, int a, int b, int *out, vp_error *err);

/* Constants: a scalar of a float dtype, a 1-D int64 vector. */
int vp_grad_const_scalar(vp_grad_ctx *c, vp_dtype dt, double v);
int vp_grad_const_ints(vp_grad_ctx *c, const int64_t *v, int n);

/* Sums g (broadcast result) down to the shape of value `like`: ReduceSum over the
 * broadcast axes, then Reshape.  Returns g itself when the shapes already match. */
vp_status vp_grad_sum_to(vp_grad_ctx *c, int node, int g, int like, int *out, vp_error *err);

#endif
