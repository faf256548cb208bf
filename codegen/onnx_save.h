/* Writing trained weights back: the user's own model file with its initializers
 * replaced by new values (everything else, graph and metadata, untouched). */
#ifndef VP_ONNX_SAVE_H
#define VP_ONNX_SAVE_H

#include "ir/ir.h"

/* Copies the model at src to dst, replacing each initializer named names[i] by t[i]
 * (same dtype and shape required), stored inline as raw_data. */
vp_status vp_onnx_save_initializers(const char *src, const char *dst, int n, const char *const *names,
                                    const vp_tensor *t, vp_error *err);

/* The same, and each metadata_props entry keys[i] set to values[i] (replaced where the
 * model has it, added where not). */
vp_status vp_onnx_save_model(const char *src, const char *dst, int n, const char *const *names, const vp_tensor *t,
                             int n_meta, const char *const *keys, const char *const *values, vp_error *err);

/* Writes a model of initializers only (no nodes): names[i] holding t[i], and the
 * metadata_props keys[i] = values[i].  LoRA's adapters are written so, apart from the
 * base model, and load back with vp_onnx_load. */
vp_status vp_onnx_save_tensors(const char *dst, int n, const char *const *names, const vp_tensor *t, int n_meta,
                               const char *const *keys, const char *const *values, vp_error *err);

#endif
