/* The IR as text between passes (ir_dump.c): `plan|train|train-graph --dump-after PASS`. */
#ifndef VP_IR_DUMP_H
#define VP_IR_DUMP_H

#include <stdio.h>

#include "ir/ir.h"

/* Prints g's nodes, in `order` (n_order node indices: a plan's steps) or in graph order
 * when order is NULL, under a header naming `title`. */
void vp_ir_dump(FILE *f, const vp_graph *g, const int *order, int n_order, const char *title);

#endif
