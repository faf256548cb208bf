/* ModelProto bytes in, a verdict on their nesting depth out (wire_depth.h): a walk of
 * the protobuf wire format with an explicit stack, so that no input, however deep, can
 * exhaust the C stack before protobuf-c's recursive unpacker is called. */
#include "onnx/wire_depth.h"

#include <stdlib.h>

/* The messages on the paths where ONNX nests; every other message is a leaf here. */
typedef enum msg_kind {
    M_LEAF,
    M_MODEL,
    M_GRAPH,
    M_NODE,
    M_ATTR,
    M_FUNCTION,
    M_TRAINING,
    M_VALUE_INFO,
    M_TYPE,
    M_TYPE_ELEM,  /* TypeProto.Sequence and .Optional: elem_type = 1 */
    M_TYPE_MAP,   /* TypeProto.Map: value_type = 2 */
} msg_kind;

/* The kind of the message in field `field` of a `parent`, M_LEAF where it does not nest. */
static msg_kind child_kind(msg_kind parent, uint64_t field) {
    switch (parent) {
    case M_MODEL: return field == 7 ? M_GRAPH : field == 25 ? M_FUNCTION : field == 20 ? M_TRAINING : M_LEAF;
    case M_TRAINING: return field == 1 || field == 2 ? M_GRAPH : M_LEAF;
    case M_GRAPH: return field == 1 ? M_NODE : field >= 11 && field <= 13 ? M_VALUE_INFO : M_LEAF;
    case M_NODE: return field == 5 ? M_ATTR : M_LEAF;
    case M_ATTR: return field == 6 || field == 11 ? M_GRAPH : field == 14 || field == 15 ? M_TYPE : M_LEAF;
    case M_FUNCTION: return field == 7 ? M_NODE : M_LEAF;
    case M_VALUE_INFO: return field == 2 ? M_TYPE : M_LEAF;
    case M_TYPE: return field == 4 || field == 9 ? M_TYPE_ELEM : field == 5 ? M_TYPE_MAP : M_LEAF;
    case M_TYPE_ELEM: return field == 1 ? M_TYPE : M_LEAF;
    case M_TYPE_MAP: return field == 2 ? M_TYPE : M_LEAF;
    default: return M_LEAF;
    }
}

/* A varint at *pos below end; 0 when it runs past end or past 10 bytes. */
static int read_varint(const uint8_t *buf, size_t end, size_t *pos, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && *pos < end; shift += 7) {
        uint8_t b = buf[(*pos)++];
        v |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 0);
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Nesting past this is not measured further (the message then says "at least") */
#define WIRE_MEASURE_CAP (1 << 20)

typedef struct frame {
    msg_kind kind;
    size_t end; /* one past the message's last byte */
} frame;

/* Walks the bytes, recording the deepest graph and message nesting; stops quietly at the
 * first malformed byte, or when the nesting reaches WIRE_MEASURE_CAP (*capped set). */
static vp_status measure(const uint8_t *buf, size_t len, int *max_graphs, int *max_msgs, int *capped) {
    int cap = 64, top = 0, graphs = 0;
    frame *stack = malloc((size_t)cap * sizeof *stack);
    if (!stack) return VP_ERR_NOMEM;
    stack[0] = (frame){M_MODEL, len};
    size_t pos = 0;
    for (;;) {
        while (pos == stack[top].end) { /* this message is done: back to its parent */
            if (top == 0) goto done;
            if (stack[top].kind == M_GRAPH) graphs--;
            top--;
        }
        size_t end = stack[top].end;
        uint64_t tag, n;
        if (!read_varint(buf, end, &pos, &tag)) goto done;
        switch (tag & 7) {
        case 0: /* varint */
            if (!read_varint(buf, end, &pos, &n)) goto done;
            break;
        case 1: /* 64-bit */
            if (end - pos < 8) goto done;
            pos += 8;
            break;
        case 5: /* 32-bit */
            if (end - pos < 4) goto done;
            pos += 4;
            break;
        case 2: { /* length-delimited: a string, bytes, packed numbers or a message */
            if (!read_varint(buf, end, &pos, &n) || n > end - pos) goto done;
            msg_kind k = child_kind(stack[top].kind, tag >> 3);
            if (k == M_LEAF) {
                pos += (size_t)n;
                break;
            }
            if (top + 1 >= WIRE_MEASURE_CAP) {
                *capped = 1;
                goto done;
            }
            if (top + 1 == cap) {
                frame *grown = realloc(stack, (size_t)cap * 2 * sizeof *stack);
                if (!grown) {
                    free(stack);
                    return VP_ERR_NOMEM;
                }
                stack = grown;
                cap *= 2;
            }
            stack[++top] = (frame){k, pos + (size_t)n};
            if (top + 1 > *max_msgs) *max_msgs = top + 1;
            if (k == M_GRAPH && ++graphs > *max_graphs) *max_graphs = graphs;
            break;
        }
        default: /* groups (3, 4) and invalid wire types: protobuf-c refuses them */
            goto done;
        }
    }
done:
    free(stack);
    return VP_OK;
}

vp_status vp_onnx_check_depth(const uint8_t *buf, size_t len, const char *name, vp_error *err) {
    int graphs = 0, msgs = 1, capped = 0;
    if (measure(buf, len, &graphs, &msgs, &capped))
        return vp_fail(err, VP_ERR_NOMEM, "%s: out of memory measuring the nesting depth", name);
    const char *at_least = capped ? "at least " : "";
    if (graphs > VP_WIRE_MAX_GRAPH_DEPTH)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "%s: graphs are nested %s%d deep (If/Loop/Scan bodies inside bodies; at most %d): refused "
                       "before decoding its %zu bytes",
                       name, at_least, graphs, VP_WIRE_MAX_GRAPH_DEPTH, len);
    if (msgs > VP_WIRE_MAX_DEPTH)
        return vp_fail(err, VP_ERR_UNSUPPORTED,
                       "%s: protobuf messages are nested %s%d deep (at most %d): refused before decoding its %zu bytes",
                       name, at_least, msgs, VP_WIRE_MAX_DEPTH, len);
    return VP_OK;
}
