/* What tp_find.c decides and tp_split.c applies (planner/parallel only). */
#ifndef VP_TP_INTERNAL_H
#define VP_TP_INTERNAL_H

#include "parallel/parallel.h"

typedef struct vp_tp_slice {
    int value;  /* a weight or bias: this rank keeps 1/n of it along axis */
    int axis;
    int origin; /* the column node whose output it belongs to, or -1 */
} vp_tp_slice;

typedef struct vp_tp_edit {
    int node, input;     /* a shape constant input (Reshape's shape, Split's sizes) */
    int n;
    int64_t vals[8];     /* its per-rank contents */
} vp_tp_edit;

/* A whole value read by an op that takes a split (GQA's repeated keys and values at the
 * attention): a Slice in front of it keeps this rank's share. */
typedef struct vp_tp_cut {
    int node, input;
    int axis;
    int64_t full; /* the axis's length, which n divides */
    int origin;   /* the whole product it comes from, or -1 */
} vp_tp_cut;

/* A replicated value that a gradient reaches, read beside a split or whole one (a whole
 * product's weight and bias, rotary tables computed from a trained parameter): read
 * through a TPCopy, so its gradient, each rank's part from its share, is summed. */
typedef struct vp_tp_wrap {
    int node, input;
    int origin; /* the column or whole product the value it meets comes from, or -1 */
} vp_tp_wrap;

typedef struct vp_tp_find {
    char *is_column;     /* per node: column-parallel product */
    char *is_row;        /* per node: row-parallel product */
    char *is_embedding;  /* per node: a Gather split by vocabulary rows (tp_vocab.c) */
    int logits_split;    /* an LM head's columns reach the loss's logits */
    int *blocks;         /* per node (column ones): the output splits into this many
                            blocks (Q, K, V) each divided among the ranks */
    int *drop_axis;      /* per node: a Dropout on a split value, the axis split (-1: none) */
    int *drop_origin;    /* its column node, or -1 */
    int n_slices, n_edits;
    vp_tp_slice *slices;
    vp_tp_edit *edits;
    int *stop_at;        /* per node (products left replicated): where its columns' split stopped,
                            the node that cannot take them; -1: at the graph's outputs, or untried */
    char *is_whole;      /* per node: a product computed whole on every rank inside a region (tp_whole.c) */
    int *whole_at;       /* per node (whole ones): the node that reads each rank's share of it, or -1 */
    int n_cuts, n_wraps;
    vp_tp_cut *cuts;
    vp_tp_wrap *wraps;
} vp_tp_find;

/* The finder's dataflow (tp_find.c, tp_whole.c): each value replicated, split along one
 * axis, or whole inside a region (computed alike on every rank from a region's input,
 * each rank's gradient of it only its share's part). */
enum { VP_TP_REPLICATED = -1, VP_TP_WHOLE = -2 };

typedef struct vp_tp_state {
    signed char axis; /* VP_TP_REPLICATED, VP_TP_WHOLE, or the axis split */
    int origin;       /* the column (or whole) product it comes from, -1 after a Split or a merge */
} vp_tp_state;

typedef struct vp_tp_walk {
    vp_graph *g;
    int n;
    const char *column; /* per node: 0, a column candidate (1, 2), a whole one (3, 4) */
    const char *grad;   /* per value: a gradient reaches it (a parameter or computed from one) */
    vp_tp_state *st;    /* per value */
    vp_tp_find *f;      /* rows, blocks, slices, edits, cuts and wraps found */
    int cap_slices, cap_edits, cap_cuts, cap_wraps;
    int logits;         /* the loss's logits, or -1 */
    int allow_logits;   /* a split may end there (an LM head's vocabulary columns) */
    int stop;           /* the node the last walk stopped at, -1: none */
    vp_error div_err;   /* the first place n does not divide */
    int div_failed;
    int nomem;
} vp_tp_walk;

/* One more element of *arr (n of cap, grown by doubling), or NULL (w->nomem set). */
void *vp_tp_walk_push(vp_tp_walk *w, void **arr, int *n, int *cap, size_t size);
/* Records the first place n does not divide dim. */
void vp_tp_divides(vp_tp_walk *w, const vp_node *n, int64_t dim, const char *what);
/* Input k of node id, replicated, read beside a split or whole value: nothing to do where
 * no gradient reaches it, else a wrap; 0 when it is not replicated. */
int vp_tp_wrap_input(vp_tp_walk *w, int id, int k, int origin);
/* A candidate computed whole (tp_whole.c): its input replicated, its output whole. */
int vp_tp_whole_product(vp_tp_walk *w, int id);
/* Node id reading a whole value and no split one: 0 when it cannot. */
int vp_tp_whole_step(vp_tp_walk *w, int id);
/* Input k of node id, whole, read where its axis is split (of length full): a cut. */
int vp_tp_cut_whole(vp_tp_walk *w, int id, int k, int axis, int64_t full);
/* The output of x's TPCopy, added the first time (copy_of: per value, that node, or
 * -1); -1 when out of memory (tp_split.c). */
int vp_tp_copy(vp_graph *g, int x, int *copy_of, int ranks);
/* Applies what the finder decided at node `node` of the original graph: the wraps'
 * TPCopy nodes and the cuts' Slices, appended (all go in front of it); copy_of: per
 * value, its TPCopy's output (-1: none yet). */
vp_status vp_tp_whole_node(vp_graph *g, const vp_tp_find *f, int node, int n, int rank, int *copy_of, vp_tp_result *r,
                           vp_error *err);

/* Per value: whether a gradient reaches it (a parameter, or computed from one); heap. */
char *vp_tp_gradients(const vp_graph *g);

/* Decides the regions for n ranks (n > 1); logits: the loss's logits value, or -1. */
vp_status vp_tp_find_regions(vp_graph *g, int n, int logits, vp_tp_find *f, vp_error *err);
void vp_tp_find_free(vp_tp_find *f);

/* A Gather that may be split by vocabulary rows among ranks: a trainable [V, h] table
 * read only there, by a graph input of token ids, V divisible by ranks. */
int vp_tp_vocab_gather(const vp_graph *g, const vp_node *n, int ranks);
/* Rewrites that Gather (its table already this rank's slice) into the masked lookup and
 * the all-reduce that writes its original output; the nodes are appended, the first
 * *n_before of them go in front of it, the rest after. */
vp_status vp_tp_vocab_embedding(vp_graph *g, int node, int n, int rank, int *n_before, vp_error *err);

/* Sequence parallelism on rank's split graph (tp_seq.c): the all-reduces between
 * regions become reduce-scatters and all-gathers along the sequence. */
vp_status vp_tp_sequence(vp_graph *g, int n, int rank, vp_tp_result *r, vp_error *err);

/* Before it (tp_seq_flat.c): each region's collectives on the [batch, seq, hidden] side
 * of a Reshape that flattens the tokens for its products; *n_moved: how many moved. */
vp_status vp_tp_seq_unflatten(vp_graph *g, int *n_moved, vp_error *err);

/* Gives Dropout node `node`, whose input is split along axis among n ranks, the
 * attributes that make it keep rank's chunk of the one-rank step's mask (vplan_axis,
 * vplan_ranks, vplan_rank: the kernels draw the whole tensor's stream; tp_seq.c). */
vp_status vp_tp_dropout_part(vp_graph *g, int node, int axis, int n, int rank, vp_error *err);

/* Products by a 2-D weight: the weight's input index, its output-feature axis and its
 * contraction axis; 0 when node is no such product. */
int vp_tp_product(const vp_graph *g, const vp_node *n, int *w, int *out_axis, int *in_axis);

#endif
