/* The cost model: floating-point operations and bytes moved per node, and a
 * roofline-plus-launch time estimate on a device profile. */
#ifndef VP_COST_H
#define VP_COST_H

#include "ir/ir.h"
#include "memory/plan.h"

typedef struct vp_node_cost {
    double flops;  /* multiply-adds count as 2 */
    double bytes;  /* inputs read plus outputs written */
    int half;      /* reads float16 or bfloat16 (mixed precision): the device's half-precision peak */
    double comm_bytes; /* a tensor-parallel all-reduce: the bytes one rank sends (ring, 2(n-1)/n) */
    int comm_hops;     /* and its 2(n-1) steps, each paying the link's latency */
    double host_link_bytes; /* optimizer-state offload: bytes moved between device and host memory */
    int on_host;            /* reads and writes host memory only: runs at the host's bandwidth */
} vp_node_cost;

vp_node_cost vp_cost_node(const vp_graph *g, const vp_node *n);
/* max(flops / peak, bytes / bandwidth) + launch overhead; the fp16 peak where
 * half_precision or c->half */
double vp_cost_seconds(const vp_node_cost *c, const vp_device_profile *dev, int half_precision);

#endif
