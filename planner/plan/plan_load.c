#include "plan/plan_load.h"

#include "ir/infer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/attr_proto.h"
#include "ir/op_registry.h"
#include "memory/verify.h"
#include "plan/plan_file.h"
#include "onnx/tensor_proto.h"
#include "vplan.pb-c.h"

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static vp_status unpack(const char *path, Vplan__Plan **out, uint64_t *checksum, unsigned *version_out, vp_error *err) {
    uint8_t *buf;
    size_t len;
    vp_status s = vp_read_file(path, &buf, &len, err);
    if (s) return s;
    if (len < VP_PLAN_HEADER_BYTES || memcmp(buf, VP_PLAN_MAGIC, 6)) {
        free(buf);
        return vp_fail(err, VP_ERR_PARSE, "%s: not an onnx-vplan plan file (bad magic)", path);
    }
    unsigned version = buf[6] | (unsigned)buf[7] << 8;
    if (version < VP_PLAN_VERSION_OLDEST || version > VP_PLAN_VERSION) {
        free(buf);
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: plan format version %u, this onnx-vplan reads versions %d to %d (re-plan the model)",
                       path, version, VP_PLAN_VERSION_OLDEST, VP_PLAN_VERSION);
    }
    *version_out = version;
    uint64_t n = get_u64(buf + 8), sum = get_u64(buf + 16);
    if (n != len - VP_PLAN_HEADER_BYTES) {
        size_t have = len - VP_PLAN_HEADER_BYTES;
        free(buf);
        return vp_fail(err, VP_ERR_PARSE, "%s: %s plan file (header says %llu payload bytes, the file has %zu%s)", path,
                       n > have ? "truncated" : "corrupt", (unsigned long long)n, have,
                       n > have ? "" : ": bytes after the payload");
    }
    if (vp_fnv1a64(buf + VP_PLAN_HEADER_BYTES, (size_t)n) != sum) {
        free(buf);
        return vp_fail(err, VP_ERR_PARSE, "%s: plan file checksum mismatch (the file is corrupt)", path);
    }
    *checksum = sum;
    *out = vplan__plan__unpack(NULL, (size_t)n, buf + VP_PLAN_HEADER_BYTES);
    free(buf);
    if (!*out) return vp_fail(err, VP_ERR_PARSE, "%s: the plan payload does not parse", path);
    return VP_OK;
}

static vp_status build_values(const char *path, const Vplan__Plan *m, vp_loaded_plan *lp, vp_error *err) {
    vp_graph *g = lp->g;
    vp_plan *p = &lp->plan;
    for (size_t i = 0; i < m->n_buffers; i++) {
        const Vplan__Buffer *b = m->buffers[i];
        char fallback[32];
        snprintf(fallback, sizeof fallback, "buffer_%zu", i);
        int id = vp_graph_add_value(g, b->name && b->name[0] ? b->name : fallback);
        if (id < 0) return vp_fail(err, VP_ERR_INVALID, "%s: buffer %zu: duplicate name '%s'", path, i, b->name);
        vp_value *v = &g->values[id];
        if (b->n_dims > VP_MAX_RANK || !vp_dtype_size((vp_dtype)b->dtype))
            return vp_fail(err, VP_ERR_INVALID, "%s: buffer %zu ('%s'): bad dtype or rank", path, i, v->name);
        v->dtype = (vp_dtype)b->dtype;
        v->rank = (int)b->n_dims;
        int64_t numel = 1;
        for (int d = 0; d < v->rank; d++) {
            if (b->dims[d] < 0 || (b->dims[d] && numel > INT64_MAX / 16 / b->dims[d]))
                return vp_fail(err, VP_ERR_INVALID, "%s: buffer %zu ('%s'): bad dim", path, i, v->name);
            v->dims[d] = b->dims[d];
            numel *= b->dims[d];
        }
        v->flags = b->flags;
        vp_buffer *pb = &p->buffers[i];
        pb->value = id;
        pb->cat = b->category >= 0 && b->category < VP_CAT_COUNT ? (vp_category)b->category : VP_CAT_TEMPORARIES;
        pb->bytes = numel * (int64_t)vp_dtype_size(v->dtype);
        pb->size = b->size;
        pb->offset = b->offset;
        pb->first = b->first_step;
        pb->last = b->last_step;
        pb->alias_of = b->alias_of;
        if (b->has_tp_blocks) { /* a rank's slice: each block's chunk whole along the axis */
            if (b->tp_blocks < 1 || b->tp_axis < 0 || b->tp_axis >= v->rank || v->dims[b->tp_axis] % b->tp_blocks)
                return vp_fail(err, VP_ERR_INVALID, "%s: buffer %zu ('%s'): tensor-parallel slice (axis %d, %d blocks) "
                               "does not fit its shape", path, i, v->name, b->tp_axis, b->tp_blocks);
            pb->tp_axis = b->tp_axis;
            pb->tp_blocks = b->tp_blocks;
        }
        if (b->bytes != pb->bytes || b->size < pb->bytes || b->offset < 0 ||
            (b->alias_of != -1 && (b->alias_of < 0 || (size_t)b->alias_of >= m->n_buffers)))
            return vp_fail(err, VP_ERR_INVALID, "%s: buffer %zu ('%s'): size, offset or alias inconsistent", path, i, v->name);
        if (b->has_init) {
            if (b->init.len != (size_t)pb->bytes)
                return vp_fail(err, VP_ERR_INVALID, "%s: buffer %zu ('%s'): initial data has %zu bytes, needs %lld", path, i,
                               v->name, b->init.len, (long long)pb->bytes);
            void *data = malloc(b->init.len ? b->init.len : 1);
            if (!data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            if (b->init.len) memcpy(data, b->init.data, b->init.len);
            vp_value_set_data(g, id, data, VP_DATA_HEAP);
        }
        p->buffer_of[id] = (int)i;
    }
    p->n_buffers = (int)m->n_buffers;
    return VP_OK;
}

/* The host block (version 2, optimizer-state offload): every host buffer inside it,
 * every alias group wholly on one side, and a block only where a host buffer is.  What
 * would otherwise fail later (a write past the host allocation, a device kernel handed a
 * host pointer) is refused here, naming the buffer. */
static vp_status check_host_block(const char *path, unsigned version, const vp_plan *p, vp_error *err) {
    const vp_graph *g = p->g;
    if (p->host_bytes < 0 || (version < 2 && p->host_bytes > 0))
        return vp_fail(err, VP_ERR_INVALID, "%s: host block of %lld bytes in a version-%u plan (corrupt)", path,
                       (long long)p->host_bytes, version);
    int64_t used = 0;
    for (int b = 0; b < p->n_buffers; b++) {
        const vp_buffer *buf = &p->buffers[b];
        const char *name = g->values[buf->value].name;
        int host = buf->cat == VP_CAT_HOST, flagged = (g->values[buf->value].flags & VP_VAL_HOST) != 0;
        int root = b, hops = 0;
        while (p->buffers[root].alias_of >= 0 && hops++ <= p->n_buffers) root = p->buffers[root].alias_of;
        if (hops > p->n_buffers) return vp_fail(err, VP_ERR_INVALID, "%s: buffer %d ('%s'): its alias chain has a cycle", path, b, name);
        if (host != flagged || host != (p->buffers[root].cat == VP_CAT_HOST))
            return vp_fail(err, VP_ERR_INVALID,
                           "%s: buffer %d ('%s'): host block and arena disagree (category %s, %s value, storage of '%s' in the %s)",
                           path, b, name, vp_category_name(buf->cat), flagged ? "a host" : "a device",
                           g->values[p->buffers[root].value].name, p->buffers[root].cat == VP_CAT_HOST ? "host block" : "arena");
        if (!host) continue;
        if (buf->offset + buf->size > p->host_bytes)
            return vp_fail(err, VP_ERR_INVALID,
                           "%s: host buffer %d ('%s', %lld bytes at offset %lld) is past the end of the %lld-byte host block (truncated or corrupt)",
                           path, b, name, (long long)buf->size, (long long)buf->offset, (long long)p->host_bytes);
        used++;
    }
    if (p->host_bytes > 0 && !used)
        return vp_fail(err, VP_ERR_INVALID, "%s: a %lld-byte host block but no buffer in it (corrupt)", path, (long long)p->host_bytes);
    return VP_OK;
}

static vp_status build_steps(const char *path, const Vplan__Plan *m, vp_loaded_plan *lp, vp_error *err) {
    vp_graph *g = lp->g;
    vp_plan *p = &lp->plan;
    int nb = p->n_buffers;
    for (size_t i = 0; i < m->n_steps; i++) {
        const Vplan__Step *st = m->steps[i];
        int ins[64], outs[64];
        if (st->n_inputs > 64 || st->n_outputs > 64)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: step %zu has too many inputs or outputs", path, i);
        for (size_t k = 0; k < st->n_inputs; k++) {
            if (st->inputs[k] < -1 || st->inputs[k] >= nb)
                return vp_fail(err, VP_ERR_INVALID, "%s: step %zu reads buffer %d, which does not exist", path, i, st->inputs[k]);
            ins[k] = st->inputs[k];
        }
        for (size_t k = 0; k < st->n_outputs; k++) {
            if (st->outputs[k] < -1 || st->outputs[k] >= nb)
                return vp_fail(err, VP_ERR_INVALID, "%s: step %zu writes buffer %d, which does not exist", path, i, st->outputs[k]);
            outs[k] = st->outputs[k];
        }
        int id = vp_graph_add_node(g, st->op_type ? st->op_type : "", st->domain ? st->domain : "",
                                   st->name ? st->name : "", (int)st->n_inputs, ins, (int)st->n_outputs, outs);
        if (id < 0) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
        vp_node *n = &g->nodes[id];
        n->opset = st->opset;
        n->phase = (vp_phase)st->phase;
        if (st->n_attribute) {
            n->attrs = calloc(st->n_attribute, sizeof *n->attrs);
            if (!n->attrs) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
            char desc[600];
            snprintf(desc, sizeof desc, "%s: step %zu ('%s')", path, i, n->name);
            for (size_t a = 0; a < st->n_attribute; a++) {
                n->n_attrs++;
                vp_status s = vp_attr_from_proto(st->attribute[a], &n->attrs[a], desc, err);
                if (s) return s;
            }
        }
        p->steps[i] = id;
        if (st->has_workspace) {
            if (st->workspace < 0 || st->workspace >= nb)
                return vp_fail(err, VP_ERR_INVALID, "%s: step %zu's workspace is buffer %d, which does not exist", path, i,
                               st->workspace);
            /* scratch the device libraries write freely: never a tensor's storage */
            if (p->buffers[st->workspace].cat != VP_CAT_WORKSPACE || p->buffers[st->workspace].alias_of >= 0)
                return vp_fail(err, VP_ERR_INVALID, "%s: step %zu's workspace is buffer %d ('%s'), which is not a workspace",
                               path, i, st->workspace, g->values[p->buffers[st->workspace].value].name);
            if (!p->workspace) {
                p->workspace = malloc((m->n_steps + 1) * sizeof *p->workspace);
                if (!p->workspace) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
                for (size_t j = 0; j < m->n_steps; j++) p->workspace[j] = -1;
            }
            p->workspace[i] = st->workspace;
        }
    }
    p->n_steps = (int)m->n_steps;
    return vp_graph_link(g, err);
}

/* Re-derives every step's output shapes from its inputs and compares with the file. */
static vp_status check_steps(const char *path, vp_loaded_plan *lp, vp_error *err) {
    vp_graph *g = lp->g;
    for (int i = 0; i < g->n_nodes; i++) {
        vp_node *n = &g->nodes[i];
        n->op = vp_op_find(n->domain, n->op_type);
        if (!n->op)
            return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: step %d ('%s'): op %s%s%s is not supported by this build", path, i,
                           n->name, n->domain, n->domain[0] ? "." : "", n->op_type);
        int saved_rank[64];
        int64_t saved[64][VP_MAX_RANK];
        vp_dtype saved_dt[64];
        for (int k = 0; k < n->n_outputs; k++) {
            if (n->outputs[k] < 0) continue;
            const vp_value *v = &g->values[n->outputs[k]];
            saved_rank[k] = v->rank;
            saved_dt[k] = v->dtype;
            memcpy(saved[k], v->dims, sizeof saved[k]);
        }
        vp_error e;
        vp_status s = n->op->shape(g, n, &e);
        if (!s) s = vp_infer_store_casts(g, n, &e);
        if (s) return vp_fail(err, s, "%s: step %d: %s", path, i, e.msg);
        for (int k = 0; k < n->n_outputs; k++) {
            if (n->outputs[k] < 0) continue;
            vp_value *v = &g->values[n->outputs[k]];
            int same = v->rank == saved_rank[k] && v->dtype == saved_dt[k];
            for (int d = 0; same && d < v->rank; d++) same = v->dims[d] == saved[k][d];
            if (!same)
                return vp_fail(err, VP_ERR_INVALID, "%s: step %d ('%s'): output %d ('%s') does not have the shape the plan says",
                               path, i, n->name, k, v->name);
        }
    }
    return VP_OK;
}

vp_status vp_plan_read(const char *path, vp_loaded_plan *lp, vp_error *err) {
    memset(lp, 0, sizeof *lp);
    Vplan__Plan *m;
    uint64_t checksum = 0;
    unsigned version = 0;
    vp_status s = unpack(path, &m, &checksum, &version, err);
    if (s) return s;
    lp->checksum = checksum;
    vp_plan *p = &lp->plan;
    lp->g = vp_graph_new();
    p->buffers = calloc(m->n_buffers + 1, sizeof *p->buffers);
    p->buffer_of = malloc((m->n_buffers + 1) * sizeof *p->buffer_of);
    p->steps = malloc((m->n_steps + 1) * sizeof *p->steps);
    if (!lp->g || !p->buffers || !p->buffer_of || !p->steps) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    if (!s) {
        vp_graph *g = lp->g;
        g->path = strdup(path);
        g->opset_onnx = m->opset_onnx;
        g->opset_ms = m->opset_ms;
        p->g = g;
        lp->model = strdup(m->model ? m->model : "");
        snprintf(lp->device_name, sizeof lp->device_name, "%s", m->device && m->device->name ? m->device->name : "cpu");
        const vp_device_profile *dev = vp_device_find(lp->device_name);
        if (dev) p->device = *dev;
        p->device.name = lp->device_name;
        if (m->device && m->device->has_alignment) p->device.alignment = m->device->alignment;
        if (m->summary) {
            p->arena_bytes = m->summary->arena_bytes;
            p->lower_bound_bytes = m->summary->lower_bound_bytes;
            p->budget_bytes = m->summary->budget_bytes;
            p->peak_step = m->summary->peak_step;
            p->planning_seconds = m->summary->planning_seconds;
            p->host_bytes = m->summary->host_bytes;
            for (size_t c = 0; c < m->summary->n_category_bytes && c < VP_CAT_COUNT; c++)
                p->category_bytes[c] = m->summary->category_bytes[c];
            snprintf(lp->algorithm, sizeof lp->algorithm, "%s", m->summary->algorithm ? m->summary->algorithm : "");
            snprintf(p->arena.kept, sizeof p->arena.kept, "%s", lp->algorithm);
        }
        p->loss_buffer = m->loss_buffer;
        if (p->loss_buffer < -1 || p->loss_buffer >= (int)m->n_buffers)
            s = vp_fail(err, VP_ERR_INVALID, "%s: loss buffer %d does not exist", path, p->loss_buffer);
        lp->n_knobs = (int)m->n_knobs;
        lp->knob_names = calloc(m->n_knobs + 1, sizeof(char *));
        lp->knob_values = calloc(m->n_knobs + 1, sizeof(char *));
        for (size_t k = 0; k < m->n_knobs && lp->knob_names && lp->knob_values; k++) {
            lp->knob_names[k] = strdup(m->knobs[k]->name ? m->knobs[k]->name : "");
            lp->knob_values[k] = strdup(m->knobs[k]->value ? m->knobs[k]->value : "");
        }
        if (!s) s = build_values(path, m, lp, err);
        if (!s) s = check_host_block(path, version, p, err);
        if (!s) s = build_steps(path, m, lp, err);
        if (!s) s = check_steps(path, lp, err);
        for (int b = 0; !s && b < p->n_buffers; b++) {
            const vp_value *v = &g->values[p->buffers[b].value];
            if (v->flags & VP_VAL_INPUT) {
                int *in = realloc(g->inputs, (size_t)(g->n_inputs + 1) * sizeof *in);
                if (!in) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                else {
                    g->inputs = in;
                    g->inputs[g->n_inputs++] = p->buffers[b].value;
                }
            }
        }
    }
    vplan__plan__free_unpacked(m, NULL);
    if (s) vp_loaded_plan_free(lp);
    return s;
}

vp_status vp_plan_read_sound(const char *path, vp_loaded_plan *lp, vp_error *err) {
    vp_status s = vp_plan_read(path, lp, err);
    if (s) return s;
    vp_verify_report rep;
    s = vp_plan_verify(&lp->plan, &rep, err);
    if (s) {
        vp_error_prefix(err, "%s: unsound plan (refused; `onnx-vplan verify` says the same): ", path);
        vp_loaded_plan_free(lp);
    }
    return s;
}

void vp_loaded_plan_free(vp_loaded_plan *lp) {
    for (int k = 0; k < lp->n_knobs; k++) {
        if (lp->knob_names) free(lp->knob_names[k]);
        if (lp->knob_values) free(lp->knob_values[k]);
    }
    free(lp->knob_names);
    free(lp->knob_values);
    free(lp->model);
    vp_plan_free(&lp->plan);
    vp_graph_free(lp->g);
    memset(lp, 0, sizeof *lp);
}
