#include "onnx/attr_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/tensor_proto.h"

static char *dup_bytes(const uint8_t *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

vp_status vp_attr_from_proto(const Onnx__AttributeProto *ap, vp_attr *a, const char *node_desc, vp_error *err) {
    memset(a, 0, sizeof *a);
    a->name = strdup(ap->name ? ap->name : "");
    if (!a->name) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_attr_type t = ap->has_type ? (vp_attr_type)ap->type : VP_ATTR_UNDEFINED;
    if (t == VP_ATTR_UNDEFINED) { /* IR version 1: the field that is set says the type */
        if (ap->has_f) t = VP_ATTR_FLOAT;
        else if (ap->has_i) t = VP_ATTR_INT;
        else if (ap->has_s) t = VP_ATTR_STRING;
        else if (ap->t) t = VP_ATTR_TENSOR;
        else if (ap->g) t = VP_ATTR_GRAPH;
        else if (ap->n_floats) t = VP_ATTR_FLOATS;
        else if (ap->n_ints) t = VP_ATTR_INTS;
        else if (ap->n_strings) t = VP_ATTR_STRINGS;
    }
    if (ap->ref_attr_name && ap->ref_attr_name[0])
        return vp_fail(err, VP_ERR_INVALID, "%s: attribute '%s' refers to a function attribute outside a function",
                       node_desc, a->name);
    a->type = t;
    switch (t) {
    case VP_ATTR_FLOAT: a->f = ap->f; break;
    case VP_ATTR_INT: a->i = ap->i; break;
    case VP_ATTR_STRING:
        a->s = dup_bytes(ap->s.data, ap->s.len);
        if (!a->s) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        break;
    case VP_ATTR_FLOATS:
        a->n = (int)ap->n_floats;
        a->floats = malloc((ap->n_floats ? ap->n_floats : 1) * sizeof(float));
        if (!a->floats) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if (ap->n_floats) memcpy(a->floats, ap->floats, ap->n_floats * sizeof(float));
        break;
    case VP_ATTR_INTS:
        a->n = (int)ap->n_ints;
        a->ints = malloc((ap->n_ints ? ap->n_ints : 1) * sizeof(int64_t));
        if (!a->ints) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if (ap->n_ints) memcpy(a->ints, ap->ints, ap->n_ints * sizeof(int64_t));
        break;
    case VP_ATTR_STRINGS:
        a->strings = calloc(ap->n_strings ? ap->n_strings : 1, sizeof(char *));
        if (!a->strings) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        a->n = (int)ap->n_strings;
        for (size_t i = 0; i < ap->n_strings; i++) {
            a->strings[i] = dup_bytes(ap->strings[i].data, ap->strings[i].len);
            if (!a->strings[i]) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        }
        break;
    case VP_ATTR_TENSOR: {
        if (!ap->t) return vp_fail(err, VP_ERR_INVALID, "%s: tensor attribute '%s' has no tensor", node_desc, a->name);
        char what[512];
        snprintf(what, sizeof what, "%s: attribute '%s'", node_desc, a->name);
        vp_tensor t0;
        vp_data_owner owner;
        vp_status s = vp_tensor_from_proto(ap->t, NULL, what, &t0, &owner, err);
        if (s) return s;
        a->t = malloc(sizeof *a->t);
        if (!a->t) {
            if (owner == VP_DATA_HEAP) free(t0.data);
            return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        }
        *a->t = t0;
        if (owner != VP_DATA_HEAP) { /* attributes own their bytes: the proto goes away */
            size_t n = vp_tensor_nbytes(&t0);
            a->t->data = malloc(n ? n : 1);
            if (!a->t->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            if (n) memcpy(a->t->data, t0.data, n);
        }
        break;
    }
    default: break; /* graphs, sparse tensors, type protos: kept by type only; ops using them are unsupported */
    }
    return VP_OK;
}


vp_status vp_attr_to_proto(const vp_attr *a, Onnx__AttributeProto *ap, vp_error *err) {
    onnx__attribute_proto__init(ap);
    ap->name = strdup(a->name);
    if (!ap->name) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    ap->has_type = 1;
    ap->type = (Onnx__AttributeProto__AttributeType)a->type;
    switch (a->type) {
    case VP_ATTR_FLOAT: ap->has_f = 1; ap->f = a->f; break;
    case VP_ATTR_INT: ap->has_i = 1; ap->i = a->i; break;
    case VP_ATTR_STRING:
        ap->has_s = 1;
        ap->s.len = strlen(a->s);
        ap->s.data = (uint8_t *)strdup(a->s);
        if (!ap->s.data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        break;
    case VP_ATTR_FLOATS:
        ap->n_floats = (size_t)a->n;
        ap->floats = malloc((size_t)(a->n ? a->n : 1) * sizeof(float));
        if (!ap->floats) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if (a->n) memcpy(ap->floats, a->floats, (size_t)a->n * sizeof(float));
        break;
    case VP_ATTR_INTS:
        ap->n_ints = (size_t)a->n;
        ap->ints = malloc((size_t)(a->n ? a->n : 1) * sizeof(int64_t));
        if (!ap->ints) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        if (a->n) memcpy(ap->ints, a->ints, (size_t)a->n * sizeof(int64_t));
        break;
    case VP_ATTR_STRINGS:
        ap->n_strings = (size_t)a->n;
        ap->strings = calloc((size_t)(a->n ? a->n : 1), sizeof *ap->strings);
        if (!ap->strings) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int i = 0; i < a->n; i++) {
            ap->strings[i].len = strlen(a->strings[i]);
            ap->strings[i].data = (uint8_t *)strdup(a->strings[i]);
            if (!ap->strings[i].data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        }
        break;
    case VP_ATTR_TENSOR: {
        Onnx__TensorProto *tp = malloc(sizeof *tp);
        if (!tp) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        onnx__tensor_proto__init(tp);
        ap->t = tp;
        tp->n_dims = (size_t)a->t->rank;
        tp->dims = malloc((size_t)(a->t->rank ? a->t->rank : 1) * sizeof(int64_t));
        size_t n = vp_tensor_nbytes(a->t);
        tp->raw_data.data = malloc(n ? n : 1);
        if (!tp->dims || !tp->raw_data.data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        for (int d = 0; d < a->t->rank; d++) tp->dims[d] = a->t->dims[d];
        tp->has_data_type = 1;
        tp->data_type = (int32_t)a->t->dtype;
        tp->has_raw_data = 1;
        tp->raw_data.len = n;
        if (n) memcpy(tp->raw_data.data, a->t->data, n);
        break;
    }
    default:
        return vp_fail(err, VP_ERR_UNSUPPORTED, "attribute '%s' of type %d cannot be written", a->name, (int)a->type);
    }
    return VP_OK;
}

void vp_attr_proto_clear(Onnx__AttributeProto *ap) {
    free(ap->name);
    if (ap->has_s) free(ap->s.data);
    free(ap->floats);
    free(ap->ints);
    for (size_t i = 0; ap->strings && i < ap->n_strings; i++) free(ap->strings[i].data);
    free(ap->strings);
    if (ap->t) {
        free(ap->t->dims);
        free(ap->t->raw_data.data);
        free(ap->t);
    }
    onnx__attribute_proto__init(ap);
}
