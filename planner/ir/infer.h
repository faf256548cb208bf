/* Shape and dtype inference, with constant folding of shape subgraphs.
 *
 * In: a loaded graph.  Out: every value has a concrete dtype and shape; nodes whose
 * outputs are computable ahead of time from constants (Shape -> Gather -> Concat ->
 * Reshape chains that exporters emit) are folded: their outputs carry data and
 * node->folded is set.  Trainable parameters are never folded into anything; float
 * initializers are folded only once the training builder knows they are frozen
 * (vp_fold_node, train/fold_frozen.h). */
#ifndef VP_INFER_H
#define VP_INFER_H

#include "ir/ir.h"

typedef struct vp_dim_binding {
    const char *name;
    int64_t value;
} vp_dim_binding;

/* Replaces symbolic dims of graph inputs by the bound values.  Every symbolic dim must
 * be bound; the error names the first that is not, and the input. */
vp_status vp_bind_dims(vp_graph *g, const vp_dim_binding *b, int n, vp_error *err);
/* Binds every symbolic dim of the graph's inputs to value (ONNX's reference runner uses 1). */
vp_status vp_bind_all_dims(vp_graph *g, int64_t value, vp_error *err);

/* Attaches data to a graph input so that shape functions may read it (a Reshape's
 * shape fed as an input).  The data is borrowed; the caller keeps it alive. */
vp_status vp_bind_input_data(vp_graph *g, const char *name, const vp_tensor *t, vp_error *err);

/* The largest output folded by default, in elements: an attention mask of a batch of
 * 4 sequences of 1024 tokens ([4, 1, 1024, 1024], which torch 2.x's exporter computes
 * from shapes alone) is a constant, so the attention fusion sees it whole. */
#define VP_FOLD_MAX_ELEMS (1 << 22)

typedef struct vp_infer_opts {
    int keep_going;           /* record unsupported nodes and go on (inspect) */
    int64_t fold_max_elems;   /* largest output folded; 0 means the default */
} vp_infer_opts;

typedef struct vp_infer_result {
    int n_unsupported;
    int *unsupported;         /* node ids, heap (caller frees) */
    int n_folded;
} vp_infer_result;

/* Resolves each node's op and runs its shape function in order.  Without keep_going
 * the first failure is returned.  With it, unsupported nodes are listed in res, their
 * outputs stay unknown, and VP_ERR_UNSUPPORTED is returned at the end naming the first. */
vp_status vp_infer(vp_graph *g, const vp_infer_opts *opts, vp_infer_result *res, vp_error *err);

/* Resolves, infers and (where possible) folds one node whose inputs are all known: the
 * entry point for passes that add nodes (autodiff, recompute).  The error names the
 * node and starts with the model path. */
vp_status vp_infer_node(vp_graph *g, int node, int64_t fold_max_elems, int *folded, vp_error *err);

/* Folds one inferred node, not folded yet, when each input is data known ahead of time:
 * a constant, a folded value, an integer initializer, or a value frozen marks
 * (frozen[v] != 0, with data; NULL marks none), and no output holds more than max_elems
 * elements.  The node's CPU kernel computes the outputs, so they are the bits a step
 * running it would compute.  *folded (may be NULL) says whether it did.  For passes that
 * learn late what is constant (train/fold_frozen.h). */
vp_status vp_fold_node(vp_graph *g, int node, const char *frozen, int64_t max_elems, int *folded, vp_error *err);

/* After an op's shape function: each output a fused Cast converts on store
 * (VP_CAST_ATTR) takes the stored dtype; fails when the op computed another dtype than
 * the attribute says.  vp_infer_node does it; a caller of op->shape itself must. */
vp_status vp_infer_store_casts(vp_graph *g, const vp_node *n, vp_error *err);

#endif
