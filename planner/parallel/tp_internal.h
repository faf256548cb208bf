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
} vp_tp_find;

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

/* Gives Dropout node `node`, whose input is split along axis among n ranks, the
 * attributes that make it keep rank's chunk of the one-rank step's mask (vplan_axis,
 * vplan_ranks, vplan_rank: the kernels draw the whole tensor's stream; tp_seq.c). */
vp_status vp_tp_dropout_part(vp_graph *g, int node, int axis, int n, int rank, vp_error *err);

/* Products by a 2-D weight: the weight's input index, its output-feature axis and its
 * contraction axis; 0 when node is no such product. */
int vp_tp_product(const vp_graph *g, const vp_node *n, int *w, int *out_axis, int *in_axis);

#endif
