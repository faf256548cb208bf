/* The nesting depth of an ONNX model's protobuf, measured before it is unpacked.
 *
 * protobuf-c unpacks a sub-message by recursion, so a model of a few thousand nested If
 * branches (GraphProto -> NodeProto -> AttributeProto -> GraphProto ...) overflows the
 * stack inside onnx__model_proto__unpack().  vp_onnx_check_depth() walks the wire format
 * iteratively (an explicit stack on the heap, no recursion) along every
 * field where ONNX messages nest: ModelProto.graph / functions / training_info,
 * GraphProto.node / input / output / value_info, NodeProto.attribute, AttributeProto.g /
 * graphs / tp / type_protos, FunctionProto.node, ValueInfoProto.type and TypeProto's
 * sequence / map / optional element types.  Other fields are skipped unread. */
#ifndef VP_WIRE_DEPTH_H
#define VP_WIRE_DEPTH_H

#include <stddef.h>
#include <stdint.h>

#include "ir/vp_status.h"

#define VP_WIRE_MAX_GRAPH_DEPTH 64 /* graphs inside graphs (the model's graph is 1) */
#define VP_WIRE_MAX_DEPTH 512      /* messages inside messages, of any type */

/* VP_OK, or VP_ERR_UNSUPPORTED naming the file (name) and the depth reached when graphs
 * nest deeper than VP_WIRE_MAX_GRAPH_DEPTH or messages deeper than VP_WIRE_MAX_DEPTH.
 * Bytes that are not a valid protobuf stop the walk with VP_OK: the unpacker refuses
 * them with its own message. */
vp_status vp_onnx_check_depth(const uint8_t *buf, size_t len, const char *name, vp_error *err);

#endif
