/* Adding nodes to an inferred graph: passes that grow the graph (loss, optimizer,
 * training mode, recompute) build a node, set attributes, then infer it at once. */
#ifndef VP_GRAPH_BUILD_H
#define VP_GRAPH_BUILD_H

#include "ir/ir.h"

/* Adds a node whose outputs are new values named "<name>:<k>", with the given phase and
 * the given opset (0: the model's).  Returns the node id or -1 when out of memory. */
int vp_build_node(vp_graph *g, const char *op, const char *domain, const char *name, int n_in, const int *in,
                  int n_out, vp_phase phase, int opset);
/* Infers a built node; out (may be NULL) receives its output ids. */
vp_status vp_build_finish(vp_graph *g, int node, int *out, vp_error *err);
/* Adds op (default domain, the model's opset) reading in[0..n_in) into *out (a new value
 * named "<stem>/<op>" when *out < 0), with one int attribute (attr NULL: none), and
 * infers it: the step of the expansions vp_build_replace_node runs. */
vp_status vp_build_op(vp_graph *g, const char *stem, const char *op, int n_in, const int *in, const char *attr,
                      int64_t value, int *out, vp_error *err);
/* vp_build_op's Transpose of x by perm (n values) into *out. */
vp_status vp_build_transpose(vp_graph *g, const char *stem, int x, const int64_t *perm, int n, int *out, vp_error *err);
/* A new graph input of that dtype and shape; fails when the name is taken. */
vp_status vp_build_input(vp_graph *g, const char *name, vp_dtype dt, int rank, const int64_t *dims, int *out,
                         vp_error *err);
/* A constant value (VP_VAL_CONST) owning a copy of data. */
int vp_build_const(vp_graph *g, const char *stem, vp_dtype dt, int rank, const int64_t *dims, const void *data);
/* A value carried across steps that starts at zero (optimizer state); it has no data:
 * executors zero its buffer. */
int vp_build_state(vp_graph *g, const char *name, vp_dtype dt, int rank, const int64_t *dims);

/* Passes that replace one node by several during inference (control.h, sequence.h)
 * append the new nodes, inferring each, then splice: the nodes appended since
 * first_new move to where `node` stands, and `node` goes.  On failure, unsplice drops
 * what was appended, leaving the graph as it was. */
vp_status vp_build_splice(vp_graph *g, int node, int first_new, vp_error *err);
void vp_build_unsplice(vp_graph *g, int first_new);

/* Replaces a node by what fn appends: the node gives up its output 0, `out`, which fn's
 * last node must produce (fn refuses any other output it cannot make); then splices, or unsplices on failure (the node
 * keeps its output).  *n_new: the nodes now standing where it stood. */
typedef vp_status (*vp_build_expand_fn)(vp_graph *g, int node, int out, void *ctx, vp_error *err);
vp_status vp_build_replace_node(vp_graph *g, int node, vp_build_expand_fn fn, void *ctx, int *n_new, vp_error *err);

#endif
