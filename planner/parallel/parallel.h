/* Tensor parallelism: Megatron-style column/row splits found in the forward graph.
 *
 * In: an inferred forward graph after fusion (attention already one vplan.Attention
 * where it fused) and after the trainable set is chosen, before the loss and autodiff.
 * Out: rank `rank`'s forward graph of `n`: each split weight (and bias) holds this
 * rank's slice of the full one, shape constants that carry head counts or the hidden
 * size divided by n, a vplan.TPCopy where a replicated value enters a column-parallel
 * product, a vplan.TPAllReduce after each row-parallel one (planner/ops/collective.c).
 * Autodiff then gives the conjugates: two all-reduces forward and two backward per
 * transformer layer.
 *
 * What splits: a product by a 2-D trainable weight (MatMul, com.microsoft FusedMatMul,
 * Gemm) whose input is replicated starts a column-parallel region when everything its
 * output reaches is split-friendly (bias Adds, elementwise activations, Split into
 * Q/K/V, Reshape and Transpose to and from heads, attention over whole heads, the
 * attention products and softmax of a plain core) and ends at products by a weight
 * along the split axis (row-parallel).  A region that reaches anything else (a graph
 * output, a LayerNorm) is left replicated.  The exceptions are vocabulary-parallel
 * (tp_vocab.c): a token embedding (Gather of a trainable table by a graph input) keeps
 * V/n rows and all-reduces its masked rows, and an LM head whose columns reach the
 * cross-entropy's logits alone keeps V/n columns, the loss computed across ranks.
 * Grouped-query attention's key and value projections, where n does not divide their
 * heads, are computed whole on every rank inside the region (tp_whole.c): each rank's
 * share of the repeated heads is cut in front of the attention, and their parameters'
 * gradients, each rank's part, are all-reduced.
 * Everything else is replicated: every rank computes it alike, and its gradients agree
 * on every rank with no further communication.
 *
 * Where a region would split but n does not divide what it splits (the heads of a
 * Reshape, the output features of a weight, the Q/K/V sizes of a Split), the pass
 * refuses with VP_ERR_USAGE naming the node. */
#ifndef VP_PARALLEL_H
#define VP_PARALLEL_H

#include "ir/ir.h"

typedef struct vp_tp_opts {
    int n;    /* ranks (tensor-parallel degree), 1 or more */
    int rank; /* this graph's rank, in [0, n) */
    /* the cross-entropy's logits (NULL: none): an LM head may end there split by
     * vocabulary, the loss then computed across ranks (tp_vocab.c) */
    const char *logits;
    int sp;   /* sequence parallelism between the regions (Korthikanti et al.) */
} vp_tp_opts;

/* A weight this rank holds 1/n of: along axis, of each of `blocks` equal blocks (the
 * Q, K and V of a fused projection), the rank-th of n contiguous chunks. */
typedef struct vp_tp_sliced {
    int value;
    int axis;
    int blocks;
} vp_tp_sliced;

/* A product that could be split by columns and is left replicated: where its split
 * stops.  Or one computed whole inside a split region (GQA's key/value projections where
 * n does not divide their heads): the node that reads each rank's share, the cost. */
typedef struct vp_tp_replicated {
    char node[160];     /* the product, by its weight's name */
    char stop[160];     /* the node that cannot take its split columns; "" at the graph's outputs */
    char stop_op[48];
    int whole;          /* computed whole inside a region, its parameters' gradients summed */
    char at[160];       /* whole: the node that reads each rank's share of it ("": unknown) */
    char at_op[48];
    int64_t heads;      /* whole: its heads where the node is an Attention (0: unknown) */
    int64_t grad_bytes; /* whole: its parameters' gradients all-reduced a step, bytes */
    double flops;       /* whole: its product forward and backward a step, on every rank */
} vp_tp_replicated;

typedef struct vp_tp_result {
    int n, rank;
    int n_column, n_row;          /* products split by columns, by rows */
    int n_copy, n_allreduce;      /* TPCopy and TPAllReduce nodes inserted */
    int n_embedding;              /* embeddings split by vocabulary rows */
    int n_gather, n_scatter;      /* --sp: TPCopy made all-gathers, TPAllReduce reduce-scatters */
    int n_param_copy;             /* --sp: parameters read through a TPCopy (gradient all-reduced) */
    int n_regather;               /* --sp: all-gathers run again in the backward (tp_regather.c) */
    int n_seq_share, n_seq_gather; /* --sp: values whole on every rank cut to its positions; split
                                     ones gathered whole for ops that mix tokens */
    int n_whole, n_cut;           /* products computed whole inside a region, Slices of their share */
    int vocab_logits;             /* the logits split by vocabulary (this rank's columns), or -1 */
    int64_t vocab;                /* their full vocabulary */
    int n_sliced;                 /* weights and biases sliced */
    vp_tp_sliced *sliced;         /* heap: vp_tp_result_free */
    int64_t sliced_elems_full;    /* their elements before slicing (all ranks together) */
    int n_replicated;             /* products left whole on every rank, and why */
    vp_tp_replicated *replicated; /* heap: vp_tp_result_free */
} vp_tp_result;

vp_status vp_tp_split(vp_graph *g, const vp_tp_opts *o, vp_tp_result *r, vp_error *err);
/* After autodiff, with --sp: the backward reads the column regions' inputs from a second
 * all-gather of the sequence-split value instead of the forward's gathered one, which
 * then dies after the forward (Korthikanti et al.'s 34/t).  t: the step's carries. */
struct vp_training;
vp_status vp_tp_regather(vp_graph *g, const struct vp_training *t, int *n_regathered, vp_error *err);
void vp_tp_result_free(vp_tp_result *r);

/* The full tensor from every rank's slice (parts: n slices of `part`'s shape, in rank
 * order, as an all-gather leaves them); out->data is heap. */
vp_status vp_tp_unslice_tensor(const vp_tensor *part, const void *parts, int axis, int blocks, int n, vp_tensor *out,
                               vp_error *err);
/* Rank's slice of a full tensor as the split cuts a weight; out->data is heap. */
vp_status vp_tp_slice_tensor(const vp_tensor *full, int axis, int blocks, int n, int rank, vp_tensor *out,
                             vp_error *err);

/* The vocabulary-parallel cross-entropy of logits [N, V/n] (this rank's columns,
 * tp->vocab_logits flattened) against int64 labels [N] of the whole vocabulary: the
 * mean over N, equal on every rank, in *loss.  Nodes of phase LOSS. */
vp_status vp_tp_vocab_ce(vp_graph *g, int logits, int labels, const vp_tp_result *tp, int *loss, vp_error *err);
/* The vocabulary an integer graph input indexes where a vocabulary-parallel embedding
 * or cross-entropy reads it (each rank's tables hold only a slice); 0 otherwise. */
int64_t vp_tp_index_bound(const vp_graph *g, int value);

/* Bytes one rank sends in a ring all-reduce of `bytes` among n ranks: 2 (n - 1) / n of
 * them (reduce-scatter then all-gather).  The planner's figure and the runtime's count. */
static inline int64_t vp_tp_ring_bytes(int64_t bytes, int n) { return n > 1 ? 2 * (int64_t)(n - 1) * bytes / n : 0; }
/* Bytes one rank sends in a ring all-gather or reduce-scatter of a `bytes` whole:
 * (n - 1) / n of it (half an all-reduce). */
static inline int64_t vp_tp_gather_bytes(int64_t bytes, int n) { return n > 1 ? (int64_t)(n - 1) * bytes / n : 0; }
/* The bytes one rank sends running this collective (0 for any other node). */
int64_t vp_tp_node_bytes(const vp_graph *g, const vp_node *nd, int n);
/* The bytes one rank sends running these nodes once (the collectives among them). */
int64_t vp_tp_step_bytes(const vp_graph *g, const int *steps, int n_steps, int n);

#endif
