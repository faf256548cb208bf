/* The ONNX loader: ModelProto file -> vp_graph.
 *
 * In: a model file (and its external data files).  Out: a graph whose nodes are in a
 * topological order, every value defined exactly once, initializers carrying their
 * data, graph inputs carrying their declared dtype and (possibly symbolic) shape.
 * Shapes of everything else are left for vp_infer(). */
#ifndef VP_ONNX_LOAD_H
#define VP_ONNX_LOAD_H

#include "ir/ir.h"

vp_status vp_onnx_load(const char *path, vp_graph **out, vp_error *err);

/* How strictly a model is read.  Whatever these say, a file that is not a regular file, a
 * model over 2 GiB, graphs nested more than 64 deep (onnx/wire_depth.h), external data
 * outside the model's folder and an attribute of the wrong type are refused. */
typedef struct vp_onnx_load_opts {
    int lenient; /* unknown attributes and an opset above the schema table's
                    (ir/attr_schema.h): a warning on stderr, not a refusal */
} vp_onnx_load_opts;

/* vp_onnx_load with options; o NULL is the default (strict). */
vp_status vp_onnx_load_with(const char *path, const vp_onnx_load_opts *o, vp_graph **out, vp_error *err);

/* The same from bytes in memory (the fuzz target's entry); base_dir resolves external
 * data and may be NULL to refuse it. */
vp_status vp_onnx_load_bytes(const uint8_t *buf, size_t len, const char *name, const char *base_dir,
                             vp_graph **out, vp_error *err);

/* The value of the model's metadata_props entry named key, or NULL (no such entry, or
 * a graph not loaded from an ONNX file).  Owned by the graph. */
const char *vp_onnx_metadata(const vp_graph *g, const char *key);

/* The graph's metadata_props entry for key (torch 2.x's exporter writes its
 * `pkg.torch.export.ExportedProgram.graph_signature` there): a heap copy the caller
 * frees, or NULL. */
char *vp_onnx_graph_metadata(const vp_graph *g, const char *key);

#endif
