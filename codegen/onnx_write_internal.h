/* The ONNX writer's state, shared by its two files: onnx_write.c (which values and
 * nodes are written, the graph, the file) and onnx_write_meta.c (the opsets imported
 * and the training metadata).  Internal to codegen. */
#ifndef VP_ONNX_WRITE_INTERNAL_H
#define VP_ONNX_WRITE_INTERNAL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_write.h"
#include "onnx.pb-c.h"

enum { ROLE_NONE = 0, ROLE_NODE, ROLE_INPUT, ROLE_INIT, ROLE_CONST };

typedef struct writer {
    const vp_graph *g;
    const vp_training *t;
    const char *path;
    vp_error *err;
    int oom;
    unsigned char *need;  /* per value: read by a written node or a graph output */
    unsigned char *role;  /* per value: ROLE_* */
    unsigned char *is_out;
    char **alias;         /* per value: the name written when not its own (gradients) */
    Onnx__ModelProto *mp;
    Onnx__GraphProto *gp;
    void **zeros;         /* zero-filled bytes of state that starts at zero, freed at the end */
    int n_zeros;
} writer;

static inline void *w_calloc(writer *w, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) w->oom = 1;
    return p;
}

static inline char *w_strdup(writer *w, const char *s) {
    char *p = strdup(s ? s : "");
    if (!p) w->oom = 1;
    return p;
}

/* The name a value is written under. */
static inline const char *vname(const writer *w, int v) { return w->alias[v] ? w->alias[v] : w->g->values[v].name; }

static inline int is_default_domain(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

/* The model's opset_import (one default-domain opset, every other domain once) and its
 * IR version; fails when the graph mixes default-domain opsets.  any_const: constant
 * nodes will be written (they need the default domain). */
vp_status vp_onnx_write_opsets(writer *w, int any_const);

/* vplan.loss, vplan.carry and vplan.gradients metadata of a training step. */
void vp_onnx_write_metadata(writer *w);

#endif
