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

/* The same from bytes in memory (the fuzz target's entry); base_dir resolves external
 * data and may be NULL to refuse it. */
vp_status vp_onnx_load_bytes(const uint8_t *buf, size_t len, const char *name, const char *base_dir,
                             vp_graph **out, vp_error *err);

/* The value of the model's metadata_props entry named key, or NULL (no such entry, or
 * a graph not loaded from an ONNX file).  Owned by the graph. */
const char *vp_onnx_metadata(const vp_graph *g, const char *key);

#endif
