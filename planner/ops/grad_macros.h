/* Shorthands shared by the gradient rules (planner/ops/grad_*.c only): a rule's
 * arguments are always named c and node. */
#ifndef VP_GRAD_MACROS_H
#define VP_GRAD_MACROS_H

#include "ops/grad_rules.h"

#define IN(k) vp_gr_in(c, node, k)
#define OUT(k) vp_gr_out(c, node, k)
#define DT(v) (vp_gr_val(c, v)->dtype)
#define TRY(call)              \
    do {                       \
        vp_status s_ = (call); \
        if (s_) return s_;     \
    } while (0)

#endif
