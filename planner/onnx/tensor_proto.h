/* TensorProto <-> vp_tensor: initializers, Constant attributes, test data files, and
 * the outputs `eval` writes.  Every storage form ONNX allows is read: the typed
 * fields, little-endian raw_data, and external data (a file beside the model,
 * memory-mapped so weights are never read into memory twice). */
#ifndef VP_TENSOR_PROTO_H
#define VP_TENSOR_PROTO_H

#include "ir/ir.h"
#include "onnx.pb-c.h"

/* Where external data may come from: files relative to base_dir, mapped into g. */
typedef struct vp_extdata_ctx {
    const char *base_dir;
    vp_graph *g;
} vp_extdata_ctx;

/* Fills out (dtype, shape, data).  The data is borrowed from the proto or from an
 * external-data mapping when its layout already matches, else heap-allocated; *owner
 * says which.  what names the tensor in messages ("initializer 'w'").
 * ext may be NULL, and then external data is refused. */
vp_status vp_tensor_from_proto(const Onnx__TensorProto *tp, const vp_extdata_ctx *ext,
                               const char *what, vp_tensor *out, vp_data_owner *owner,
                               vp_error *err);

/* Reads a serialized TensorProto file; out->data is heap-allocated (caller frees).
 * name_out, when not NULL, gets a heap copy of the tensor's name (may be ""). */
vp_status vp_tensor_read_pb(const char *path, vp_tensor *out, char **name_out, vp_error *err);

/* Writes t as a TensorProto (raw_data) named name. */
vp_status vp_tensor_write_pb(const char *path, const vp_tensor *t, const char *name, vp_error *err);

/* Reads a whole file into a heap buffer (binary). */
vp_status vp_read_file(const char *path, uint8_t **buf, size_t *len, vp_error *err);

#endif
