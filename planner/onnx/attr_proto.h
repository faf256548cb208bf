/* Node attributes <-> onnx.AttributeProto, for the loader, the plan file and the
 * ONNX writers. */
#ifndef VP_ATTR_PROTO_H
#define VP_ATTR_PROTO_H

#include "ir/ir.h"
#include "onnx.pb-c.h"

/* Fills a (zeroed first) from ap; node_desc names the node in messages. */
vp_status vp_attr_from_proto(const Onnx__AttributeProto *ap, vp_attr *a, const char *node_desc, vp_error *err);
/* Fills ap (initialised here) with heap copies; release with vp_attr_proto_clear. */
vp_status vp_attr_to_proto(const vp_attr *a, Onnx__AttributeProto *ap, vp_error *err);
void vp_attr_proto_clear(Onnx__AttributeProto *ap);

#endif
