#include "onnx_save.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/atomic_file.h"
#include "onnx.pb-c.h"
#include "onnx/tensor_proto.h"

static vp_status replace(Onnx__TensorProto *tp, const vp_tensor *t, const char *dst, vp_error *err) {
    int same = tp->data_type == (int32_t)t->dtype && tp->n_dims == (size_t)t->rank;
    for (int d = 0; same && d < t->rank; d++) same = tp->dims[d] == t->dims[d];
    if (!same) return vp_fail(err, VP_ERR_INVALID, "%s: initializer '%s' changed dtype or shape", dst, tp->name);
    /* the unpacked message owns its buffers: free what we drop, allocate what we set */
    free(tp->float_data); tp->float_data = NULL; tp->n_float_data = 0;
    free(tp->int32_data); tp->int32_data = NULL; tp->n_int32_data = 0;
    free(tp->int64_data); tp->int64_data = NULL; tp->n_int64_data = 0;
    free(tp->double_data); tp->double_data = NULL; tp->n_double_data = 0;
    free(tp->uint64_data); tp->uint64_data = NULL; tp->n_uint64_data = 0;
    for (size_t i = 0; i < tp->n_external_data; i++) onnx__string_string_entry_proto__free_unpacked(tp->external_data[i], NULL);
    free(tp->external_data); tp->external_data = NULL; tp->n_external_data = 0;
    tp->has_data_location = 0;
    size_t n = vp_tensor_nbytes(t);
    uint8_t *p = malloc(n ? n : 1);
    if (!p) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (n) memcpy(p, t->data, n);
    if (tp->has_raw_data) free(tp->raw_data.data);
    tp->raw_data.data = p;
    tp->raw_data.len = n;
    tp->has_raw_data = 1;
    return VP_OK;
}

static char *dup(const char *s) {
    char *d = malloc(strlen(s) + 1);
    return d ? strcpy(d, s) : NULL;
}

/* Sets key to value in the unpacked model, which owns (and frees) every string in it. */
static vp_status set_metadata(Onnx__ModelProto *mp, const char *key, const char *value, vp_error *err) {
    for (size_t i = 0; i < mp->n_metadata_props; i++) {
        Onnx__StringStringEntryProto *e = mp->metadata_props[i];
        if (!e->key || strcmp(e->key, key)) continue;
        char *v = dup(value);
        if (!v) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        free(e->value);
        e->value = v;
        return VP_OK;
    }
    Onnx__StringStringEntryProto **grown = realloc(mp->metadata_props, (mp->n_metadata_props + 1) * sizeof *grown);
    if (!grown) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    mp->metadata_props = grown;
    Onnx__StringStringEntryProto *e = malloc(sizeof *e);
    char *k = dup(key), *v = dup(value);
    if (!e || !k || !v) {
        free(e), free(k), free(v);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    onnx__string_string_entry_proto__init(e);
    e->key = k;
    e->value = v;
    mp->metadata_props[mp->n_metadata_props++] = e;
    return VP_OK;
}

vp_status vp_onnx_save_initializers(const char *src, const char *dst, int n, const char *const *names,
                                    const vp_tensor *t, vp_error *err) {
    return vp_onnx_save_model(src, dst, n, names, t, 0, NULL, NULL, err);
}

vp_status vp_onnx_save_model(const char *src, const char *dst, int n, const char *const *names, const vp_tensor *t,
                             int n_meta, const char *const *keys, const char *const *values, vp_error *err) {
    uint8_t *buf;
    size_t len;
    vp_status s = vp_read_file(src, &buf, &len, err);
    if (s) return s;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    if (!mp || !mp->graph) {
        if (mp) onnx__model_proto__free_unpacked(mp, NULL);
        return vp_fail(err, VP_ERR_PARSE, "%s: not an ONNX model", src);
    }
    int replaced = 0;
    for (size_t i = 0; i < mp->graph->n_initializer && !s; i++) {
        Onnx__TensorProto *tp = mp->graph->initializer[i];
        for (int k = 0; k < n && !s; k++)
            if (tp->name && !strcmp(tp->name, names[k])) {
                s = replace(tp, &t[k], dst, err);
                replaced++;
            }
    }
    if (!s && replaced != n)
        s = vp_fail(err, VP_ERR_INVALID, "%s: %d of %d trained values have no initializer of that name", src, n - replaced, n);
    for (int k = 0; k < n_meta && !s; k++) s = set_metadata(mp, keys[k], values[k], err);
    if (!s) {
        size_t size = onnx__model_proto__get_packed_size(mp);
        uint8_t *out = malloc(size ? size : 1);
        if (!out) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        else {
            onnx__model_proto__pack(mp, out);
            vp_atomic_file af;
            s = vp_atomic_file_open(&af, dst, err);
            if (!s) {
                fwrite(out, 1, size, af.f);
                s = vp_atomic_file_commit(&af, err);
            }
            free(out);
        }
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    return s;
}

vp_status vp_onnx_save_tensors(const char *dst, int n, const char *const *names, const vp_tensor *t, int n_meta,
                               const char *const *keys, const char *const *values, vp_error *err) {
    /* every field points at the caller's data or at these arrays: nothing to free but them */
    Onnx__ModelProto mp;
    Onnx__GraphProto gp;
    Onnx__OperatorSetIdProto opset, *opsets[1] = {&opset};
    onnx__model_proto__init(&mp);
    onnx__graph_proto__init(&gp);
    onnx__operator_set_id_proto__init(&opset);
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 17;
    Onnx__TensorProto *tps = calloc((size_t)n + 1, sizeof *tps), **tpp = calloc((size_t)n + 1, sizeof *tpp);
    int64_t *dims = calloc((size_t)n * VP_MAX_RANK + 1, sizeof *dims);
    Onnx__StringStringEntryProto *meta = calloc((size_t)n_meta + 1, sizeof *meta), **metap = calloc((size_t)n_meta + 1, sizeof *metap);
    vp_status s = tps && tpp && dims && meta && metap ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n && !s; i++) {
        Onnx__TensorProto *tp = &tps[i];
        onnx__tensor_proto__init(tp);
        tp->name = (char *)names[i];
        tp->has_data_type = 1;
        tp->data_type = (int32_t)t[i].dtype;
        tp->n_dims = (size_t)t[i].rank;
        tp->dims = dims + (size_t)i * VP_MAX_RANK;
        for (int d = 0; d < t[i].rank; d++) tp->dims[d] = t[i].dims[d];
        tp->has_raw_data = 1;
        tp->raw_data.len = vp_tensor_nbytes(&t[i]);
        tp->raw_data.data = t[i].data;
        tpp[i] = tp;
    }
    for (int i = 0; i < n_meta && !s; i++) {
        onnx__string_string_entry_proto__init(&meta[i]);
        meta[i].key = (char *)keys[i];
        meta[i].value = (char *)values[i];
        metap[i] = &meta[i];
    }
    if (!s) {
        gp.name = "adapters";
        gp.n_initializer = (size_t)n;
        gp.initializer = tpp;
        mp.has_ir_version = 1;
        mp.ir_version = 8;
        mp.producer_name = "onnx-vplan";
        mp.graph = &gp;
        mp.n_opset_import = 1;
        mp.opset_import = opsets;
        mp.n_metadata_props = (size_t)n_meta;
        mp.metadata_props = metap;
        size_t size = onnx__model_proto__get_packed_size(&mp);
        uint8_t *out = malloc(size ? size : 1);
        vp_atomic_file af;
        if (!out) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
        else if (!(s = vp_atomic_file_open(&af, dst, err))) {
            onnx__model_proto__pack(&mp, out);
            fwrite(out, 1, size, af.f);
            s = vp_atomic_file_commit(&af, err);
        }
        free(out);
    }
    free(tps);
    free(tpp);
    free(dims);
    free(meta);
    free(metap);
    return s;
}
