/* ONNX's sequence ops expanded statically during shape inference.
 *
 * In: a graph whose node `node` is an ai.onnx sequence op (SplitToSequence,
 * SequenceConstruct, SequenceEmpty, SequenceInsert, SequenceErase, SequenceAt,
 * SequenceLength, ConcatFromSequence), every tensor input of it inferred.
 * Out: the node replaced by ordinary tensor ops at its place in the order, each inferred
 * and folded as it is made: SplitToSequence by a Split (and a Squeeze per element where
 * keepdims is 0), SequenceAt by an Identity of the element it names, SequenceLength by a
 * constant, ConcatFromSequence by a Concat (each element Unsqueezed first with new_axis).
 * The ops that only build a sequence (Construct, Empty, Insert, Erase) leave no node: the
 * table remembers which tensor values each sequence value stands for.
 * Keeps true: what reads a sequence gets the tensors ONNX's semantics give it, so autodiff,
 * plans and executors never see a sequence.  Refused with VP_ERR_UNSUPPORTED, naming the
 * node: a position or split that is not known ahead of time, a sequence that is not built
 * by the ops above (a graph input, a Loop's carried sequence), a position out of range.
 * On failure the graph is as it was.
 *
 * torch 2.x's dynamo exporter writes torch.split as SplitToSequence and its items as
 * SequenceAt (GPT-2's Conv1D splitting q, k and v). */
#ifndef VP_SEQUENCE_H
#define VP_SEQUENCE_H

#include "ir/ir.h"

/* The element values each sequence value stands for, while one inference runs. */
typedef struct vp_seq_table {
    int cap;       /* entries allocated: value ids below cap */
    int *count;    /* count[v]: elements of sequence v, -1 when v is not a sequence */
    int **elems;   /* elems[v]: their value ids, heap */
} vp_seq_table;

/* Whether n is a node this pass expands. */
int vp_sequence_is(const vp_node *n);
/* Whether value v is a sequence the table holds. */
int vp_sequence_holds(const vp_seq_table *t, int v);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood (0 for
 * the ops that leave none: the next node then stands at `node`). */
vp_status vp_sequence_expand(vp_graph *g, int node, vp_seq_table *t, int *n_new, vp_error *err);

void vp_seq_table_free(vp_seq_table *t);

#endif
