/* The naive executor: every value its own buffer, nodes run in graph order.
 *
 * This is the baseline that planned execution (one arena, checkpointing, reuse) must
 * match bit for bit.  Values known ahead of time (initializers, constants, folded
 * values, bound inputs) are copied to the backend once, at creation. */
#ifndef VP_EXEC_H
#define VP_EXEC_H

#include "backend.h"
#include "ir/ir.h"

typedef struct vp_exec vp_exec;

vp_status vp_exec_new(const vp_graph *g, vp_backend *b, vp_exec **out, vp_error *err);
void vp_exec_free(vp_exec *x);

/* Copies host data into a graph input; dtype and shape must match the graph's. */
vp_status vp_exec_set_input(vp_exec *x, const char *name, const vp_tensor *t, vp_error *err);

/* Runs every node that was not folded.  Fails naming the first graph input never set. */
vp_status vp_exec_run(vp_exec *x, vp_error *err);

/* Runs node `node` alone on what its inputs hold now (set, written or computed): how a
 * test compares one kernel across backends on the same inputs.  Fails naming an input
 * that holds nothing yet. */
vp_status vp_exec_run_node(vp_exec *x, int node, vp_error *err);

/* Copies a value to the host: out gets the value's dtype and shape and a heap buffer
 * the caller frees. */
vp_status vp_exec_get(vp_exec *x, int value_id, vp_tensor *out, vp_error *err);

/* *finite: whether every element of value v is a finite number (integers and bools
 * always are).  Read in place on a backend whose memory is the host's, else through a
 * copy.  Fails when v holds nothing yet. */
vp_status vp_exec_value_finite(vp_exec *x, int v, int *finite, vp_error *err);

/* Copies value src's buffer into value dst's (same dtype and shape): how a training
 * step's updated parameters and state become the next step's. */
vp_status vp_exec_copy_value(vp_exec *x, int dst, int src, vp_error *err);

/* Overwrites a value's buffer from host data of its size (initial weights, state). */
vp_status vp_exec_write_value(vp_exec *x, int id, const void *host, vp_error *err);

#endif
