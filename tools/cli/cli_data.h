/* Feeding a model's inputs: from a directory of TensorProto files named after the
 * inputs (DIR/x.pb, DIR/labels.pb), or synthetic, seeded data whose integers stay in
 * range (class labels below the class count, token ids below the embedding size). */
#ifndef VP_CLI_DATA_H
#define VP_CLI_DATA_H

#include <stdint.h>

#include "exec.h"
#include "plan_exec.h"
#include "ir/ir.h"

typedef struct cli_batch {
    int n;
    int *ids;          /* graph input value ids */
    vp_tensor *data;   /* host tensors, heap */
} cli_batch;

/* Reads or draws one batch for every graph input.  label_classes (0 if none) bounds
 * an input named "labels". */
vp_status cli_batch_load(const vp_graph *g, const char *source, uint64_t seed, int64_t label_classes,
                         cli_batch *out, vp_error *err);
vp_status cli_batch_feed(vp_exec *x, const vp_graph *g, const cli_batch *b, vp_error *err);
vp_status cli_batch_feed_plan(vp_plan_exec *x, const vp_graph *g, const cli_batch *b, vp_error *err);
void cli_batch_free(cli_batch *b);

#endif
