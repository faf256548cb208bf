/* What torch 2.x's exporter says about a node in its metadata_props, read from the text
 * of two entries:
 *
 *   pkg.torch.onnx.name_scopes  the module stack: "['', 'm', 'm.model.layers.0', 'mul_3']"
 *   pkg.torch.onnx.fx_node      the FX node: "%embedding : [...] = call_function[target=
 *                               torch.ops.aten.embedding.default](args = (%p_w, %ids, 1), ...)"
 *
 * In: those strings (NULL where the exporter wrote none).  Out: the innermost module path,
 * and for a Gather that is nn.Embedding its padding_idx and scale_grad_by_freq, which the
 * ONNX graph cannot say (Gather has no gradient semantics) but torch's training has: the
 * padding row's gradient is 0.  Both are hints: text that does not parse gives none. */
#ifndef VP_TORCH_META_H
#define VP_TORCH_META_H

#include "ir/ir.h"

/* The innermost module of a name_scopes list ("m.model.layers.0"): a heap string, or NULL
 * (no module below the root, not such a list, or no memory). */
char *vp_torch_module_path(const char *name_scopes);

/* *e from an fx_node text: from_embedding set where it calls aten.embedding, with its
 * padding_idx (-1: none) and scale_grad_by_freq; all 0 otherwise. */
void vp_torch_embedding_of(const char *fx_node, vp_embedding_hint *e);

#endif
