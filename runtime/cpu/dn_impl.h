/* Inside the oneDNN fast path: the cache entry and the "op" (one primitive with the
 * reorders around it) that dn.c runs and the per-family files (dn_conv.c) build. */
#ifndef VP_DN_IMPL_H
#define VP_DN_IMPL_H

#include <oneapi/dnnl/dnnl.h>

#include "dn.h"

enum { DN_MAX_ARGS = 6, DN_MAX_OPS = 2, DN_MAX_SIG = 48 };

/* Which tensor an argument binds: in[k] for k >= 0, out[~k] for k < 0. */
#define DN_IN(k) (k)
#define DN_OUT(k) (~(k))

typedef struct dn_arg {
    int arg;                 /* DNNL_ARG_* */
    int tensor;              /* DN_IN(k) or DN_OUT(k) */
    dnnl_memory_t user;      /* our plain layout, handle set at each run */
    dnnl_memory_t inner;     /* the primitive's layout; NULL when the same */
    dnnl_primitive_t reorder; /* NULL for an input an earlier op of the node reordered */
    size_t off;              /* of inner in the shared buffer */
} dn_arg;

typedef struct dn_op {
    dnnl_primitive_t prim;
    int n_args;
    dn_arg args[DN_MAX_ARGS];
    dnnl_memory_t scratchpad; /* NULL when the primitive needs none */
    size_t scratch_off, bytes; /* bytes: where this op's parts of the shared buffer end */
} dn_op;

typedef struct dn_entry {
    const vp_node *node;
    int n_sig;
    int64_t sig[DN_MAX_SIG];
    int uncovered;            /* oneDNN refused it: the reference runs */
    int64_t work;             /* floating-point operations, roughly: sets the threads */
    int threads;              /* OpenMP threads its primitives are created and run with */
    size_t need;              /* bytes of reordered copies and scratchpad its largest op uses */
    int n_ops;
    dn_op ops[DN_MAX_OPS];
} dn_entry;

/* What one argument of a primitive is: its query in the primitive descriptor, our
 * plain layout, the tensor it binds. */
typedef struct dn_spec {
    int arg;
    dnnl_query_t what;
    int index;
    const dnnl_memory_desc_t *user_md;
    int tensor;
} dn_spec;

dnnl_engine_t vp_dn_engine(vp_dn *d);

/* Appends an op to e: its primitive from pd (which it takes over) and the reorders its
 * specs need.  An input an earlier op of e already reordered into the same layout
 * (ConvGrad's dY, for its data and weight gradients) is read from that op's copy rather
 * than reordered again; this op's own parts of the shared buffer follow that copy.
 * 0 on success, else nonzero with nothing left allocated in the new op. */
int vp_dn_op_init(vp_dn *d, dn_entry *e, dnnl_primitive_desc_t pd, int n_specs, const dn_spec *specs);

/* A plain (row-major) float32 memory descriptor; 0 on success. */
int vp_dn_plain_md(dnnl_memory_desc_t *md, int rank, const int64_t *dims);

/* The families: signature (0 when uncovered; else the number of sig values, and *work
 * the node's floating-point operations, roughly) and build (0 on success). */
int vp_dn_conv_sig(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int64_t *sig,
                   int64_t *work);
int vp_dn_conv_build(vp_dn *d, dn_entry *e, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out);
int vp_dn_conv_grad_sig(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int64_t *sig,
                        int64_t *work);
int vp_dn_conv_grad_build(vp_dn *d, dn_entry *e, const vp_node *n, const vp_tensor *const *in,
                          vp_tensor *const *out);

#endif
