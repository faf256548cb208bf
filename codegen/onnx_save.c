#include "onnx_save.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
            FILE *f = fopen(dst, "wb");
            if (!f) s = vp_fail(err, VP_ERR_IO, "%s: cannot create: %s", dst, strerror(errno));
            else {
                int ok = fwrite(out, 1, size, f) == size;
                ok &= fclose(f) == 0;
                if (!ok) s = vp_fail(err, VP_ERR_IO, "%s: write failed", dst);
            }
            free(out);
        }
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    return s;
}
