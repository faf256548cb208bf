#include "weights_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/atomic_file.h"
#include "onnx/tensor_proto.h"
#include "vplanrt.h"

int vp_weights_persistent(const vp_plan *p, int b) {
    const vp_buffer *buf = &p->buffers[b];
    const vp_value *v = &p->g->values[buf->value];
    if (buf->alias_of >= 0 || (v->flags & VP_VAL_INPUT) || !buf->bytes) return 0;
    return v->data != NULL || (v->flags & VP_VAL_STATE);
}

int64_t vp_weights_payload_bytes(const vp_plan *p) {
    int64_t n = 0;
    for (int b = 0; b < p->n_buffers; b++)
        if (vp_weights_persistent(p, b)) n += p->buffers[b].bytes;
    return n;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

vp_status vp_weights_write(const vp_plan *p, uint64_t plan_checksum, const void *const *data, const char *path,
                           vp_error *err) {
    uint8_t head[VP_WEIGHTS_HEADER_BYTES];
    memcpy(head, VP_WEIGHTS_MAGIC, 6);
    head[6] = VP_WEIGHTS_VERSION & 0xff;
    head[7] = VP_WEIGHTS_VERSION >> 8;
    put_u64(head + 8, plan_checksum);
    put_u64(head + 16, (uint64_t)vp_weights_payload_bytes(p));
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (s) return s;
    int ok = fwrite(head, 1, sizeof head, af.f) == sizeof head;
    for (int b = 0; ok && b < p->n_buffers; b++)
        if (vp_weights_persistent(p, b))
            ok = fwrite(data[b], 1, (size_t)p->buffers[b].bytes, af.f) == (size_t)p->buffers[b].bytes;
    return vp_atomic_file_commit(&af, err); /* a short write set the stream's error flag */
}

vp_status vp_weights_read(const vp_plan *p, uint64_t plan_checksum, const char *path, uint8_t **blob,
                          const void **data, vp_error *err) {
    size_t len;
    vp_status s = vp_read_file(path, blob, &len, err);
    if (s) return s;
    const uint8_t *h = *blob;
    uint64_t want = (uint64_t)vp_weights_payload_bytes(p);
    if (len < VP_WEIGHTS_HEADER_BYTES || memcmp(h, VP_WEIGHTS_MAGIC, 6) ||
        (h[6] | (unsigned)h[7] << 8) != VP_WEIGHTS_VERSION)
        s = vp_fail(err, VP_ERR_PARSE, "%s: not an onnx-vplan weights file (bad magic or version)", path);
    else if (get_u64(h + 8) != plan_checksum)
        s = vp_fail(err, VP_ERR_INVALID, "%s: written for another plan (plan checksum %016llx, this plan's is %016llx)",
                    path, (unsigned long long)get_u64(h + 8), (unsigned long long)plan_checksum);
    else if (get_u64(h + 16) != want || len - VP_WEIGHTS_HEADER_BYTES != want)
        s = vp_fail(err, VP_ERR_PARSE, "%s: truncated weights file (%zu payload bytes, the plan needs %llu)", path,
                    len - VP_WEIGHTS_HEADER_BYTES, (unsigned long long)want);
    if (s) {
        free(*blob);
        *blob = NULL;
        return s;
    }
    size_t at = VP_WEIGHTS_HEADER_BYTES;
    for (int b = 0; b < p->n_buffers; b++) {
        data[b] = NULL;
        if (!vp_weights_persistent(p, b)) continue;
        data[b] = h + at;
        at += (size_t)p->buffers[b].bytes;
    }
    return VP_OK;
}
