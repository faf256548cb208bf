#include "plan/plan_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/atomic_file.h"
#include "onnx/attr_proto.h"
#include "vplan.pb-c.h"

uint64_t vp_fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Everything the message points at is owned by these arrays and freed at the end. */
typedef struct builder {
    Vplan__Buffer *buffers;
    Vplan__Buffer **buffer_ptrs;
    Vplan__Step *steps;
    Vplan__Step **step_ptrs;
    int32_t *io;                     /* step inputs and outputs, one array for all */
    Onnx__AttributeProto *attrs;
    Onnx__AttributeProto **attr_ptrs;
    int n_attrs;
    Vplan__Knob *knobs;
    Vplan__Knob **knob_ptrs;
} builder;

static void builder_free(builder *b) {
    for (int i = 0; i < b->n_attrs; i++) vp_attr_proto_clear(&b->attrs[i]);
    free(b->buffers); free(b->buffer_ptrs); free(b->steps); free(b->step_ptrs); free(b->io);
    free(b->attrs); free(b->attr_ptrs); free(b->knobs); free(b->knob_ptrs);
}

vp_status vp_plan_write(const vp_plan *p, const char *model, const vp_knob *knobs, int n_knobs, const char *path,
                        vp_error *err) {
    const vp_graph *g = p->g;
    builder b = {0};
    vp_status s = VP_OK;
    size_t n_io = 0, n_attr = 0;
    for (int i = 0; i < p->n_steps; i++) {
        const vp_node *n = &g->nodes[p->steps[i]];
        n_io += (size_t)(n->n_inputs + n->n_outputs);
        n_attr += (size_t)n->n_attrs;
    }
    b.buffers = calloc((size_t)p->n_buffers + 1, sizeof *b.buffers);
    b.buffer_ptrs = calloc((size_t)p->n_buffers + 1, sizeof *b.buffer_ptrs);
    b.steps = calloc((size_t)p->n_steps + 1, sizeof *b.steps);
    b.step_ptrs = calloc((size_t)p->n_steps + 1, sizeof *b.step_ptrs);
    b.io = calloc(n_io + 1, sizeof *b.io);
    b.attrs = calloc(n_attr + 1, sizeof *b.attrs);
    b.attr_ptrs = calloc(n_attr + 1, sizeof *b.attr_ptrs);
    b.knobs = calloc((size_t)n_knobs + 1, sizeof *b.knobs);
    b.knob_ptrs = calloc((size_t)n_knobs + 1, sizeof *b.knob_ptrs);
    if (!b.buffers || !b.buffer_ptrs || !b.steps || !b.step_ptrs || !b.io || !b.attrs || !b.attr_ptrs || !b.knobs ||
        !b.knob_ptrs) {
        builder_free(&b);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory writing %s", path);
    }
    for (int i = 0; i < p->n_buffers; i++) {
        const vp_buffer *buf = &p->buffers[i];
        const vp_value *v = &g->values[buf->value];
        Vplan__Buffer *m = &b.buffers[i];
        vplan__buffer__init(m);
        m->name = v->name;
        m->has_dtype = 1, m->dtype = (int32_t)v->dtype;
        m->n_dims = (size_t)v->rank;
        m->dims = (int64_t *)v->dims;
        m->has_category = 1, m->category = (int32_t)buf->cat;
        m->has_bytes = 1, m->bytes = buf->bytes;
        m->has_size = 1, m->size = buf->size;
        m->has_offset = 1, m->offset = buf->offset;
        m->has_first_step = 1, m->first_step = buf->first;
        m->has_last_step = 1, m->last_step = buf->last;
        m->has_alias_of = 1, m->alias_of = buf->alias_of;
        m->has_flags = 1, m->flags = v->flags;
        if (buf->tp_blocks > 0) m->has_tp_axis = m->has_tp_blocks = 1, m->tp_axis = buf->tp_axis, m->tp_blocks = buf->tp_blocks;
        if (v->data && buf->alias_of < 0 && !(v->flags & VP_VAL_INPUT)) {
            m->has_init = 1;
            m->init.data = v->data;
            m->init.len = (size_t)buf->bytes;
        }
        b.buffer_ptrs[i] = m;
    }
    int32_t *io = b.io;
    for (int i = 0; i < p->n_steps && !s; i++) {
        const vp_node *n = &g->nodes[p->steps[i]];
        Vplan__Step *m = &b.steps[i];
        vplan__step__init(m);
        m->name = n->name;
        m->op_type = n->op_type;
        m->domain = n->domain;
        m->has_opset = 1, m->opset = n->opset;
        m->has_phase = 1, m->phase = (int32_t)n->phase;
        m->n_inputs = (size_t)n->n_inputs;
        m->inputs = io;
        for (int k = 0; k < n->n_inputs; k++) *io++ = n->inputs[k] >= 0 ? p->buffer_of[n->inputs[k]] : -1;
        m->n_outputs = (size_t)n->n_outputs;
        m->outputs = io;
        for (int k = 0; k < n->n_outputs; k++) *io++ = n->outputs[k] >= 0 ? p->buffer_of[n->outputs[k]] : -1;
        if (p->workspace && p->workspace[i] >= 0) m->has_workspace = 1, m->workspace = p->workspace[i];
        m->n_attribute = (size_t)n->n_attrs;
        m->attribute = b.attr_ptrs + b.n_attrs;
        for (int a = 0; a < n->n_attrs && !s; a++) {
            b.attr_ptrs[b.n_attrs] = &b.attrs[b.n_attrs];
            s = vp_attr_to_proto(&n->attrs[a], &b.attrs[b.n_attrs], err);
            b.n_attrs++;
            if (s) vp_error_prefix(err, "step %d ('%s'): ", i, n->name);
        }
        b.step_ptrs[i] = m;
    }
    for (int k = 0; k < n_knobs; k++) {
        vplan__knob__init(&b.knobs[k]);
        b.knobs[k].name = (char *)knobs[k].name;
        b.knobs[k].value = (char *)knobs[k].value;
        b.knob_ptrs[k] = &b.knobs[k];
    }
    Vplan__Device dev = VPLAN__DEVICE__INIT;
    dev.name = (char *)p->device.name;
    dev.has_alignment = 1, dev.alignment = p->device.alignment;
    dev.has_peak_flops_fp32 = 1, dev.peak_flops_fp32 = p->device.peak_flops_fp32;
    dev.has_peak_flops_fp16 = 1, dev.peak_flops_fp16 = p->device.peak_flops_fp16;
    dev.has_mem_bandwidth = 1, dev.mem_bandwidth = p->device.mem_bandwidth;
    dev.has_launch_overhead = 1, dev.launch_overhead = p->device.launch_overhead;
    Vplan__Summary sum = VPLAN__SUMMARY__INIT;
    sum.has_arena_bytes = 1, sum.arena_bytes = p->arena_bytes;
    sum.has_lower_bound_bytes = 1, sum.lower_bound_bytes = p->lower_bound_bytes;
    sum.has_budget_bytes = 1, sum.budget_bytes = p->budget_bytes;
    sum.n_category_bytes = VP_CAT_COUNT;
    sum.category_bytes = (int64_t *)p->category_bytes;
    sum.has_peak_step = 1, sum.peak_step = p->peak_step;
    sum.has_planning_seconds = 1, sum.planning_seconds = p->planning_seconds;
    sum.algorithm = (char *)p->arena.kept;
    sum.has_host_bytes = p->host_bytes > 0, sum.host_bytes = p->host_bytes;
    Vplan__Plan plan = VPLAN__PLAN__INIT;
    plan.model = (char *)(model ? model : "");
    plan.producer = "onnx-vplan 0.1.0";
    plan.n_knobs = (size_t)n_knobs;
    plan.knobs = b.knob_ptrs;
    plan.device = &dev;
    plan.n_buffers = (size_t)p->n_buffers;
    plan.buffers = b.buffer_ptrs;
    plan.n_steps = (size_t)p->n_steps;
    plan.steps = b.step_ptrs;
    plan.summary = &sum;
    plan.has_loss_buffer = 1, plan.loss_buffer = p->loss_buffer;
    plan.has_opset_onnx = 1, plan.opset_onnx = g->opset_onnx;
    plan.has_opset_ms = 1, plan.opset_ms = g->opset_ms;
    if (!s) {
        size_t len = vplan__plan__get_packed_size(&plan);
        uint8_t *buf = malloc(len + VP_PLAN_HEADER_BYTES);
        if (!buf) s = vp_fail(err, VP_ERR_NOMEM, "out of memory writing %s", path);
        else {
            vplan__plan__pack(&plan, buf + VP_PLAN_HEADER_BYTES);
            memcpy(buf, VP_PLAN_MAGIC, 6);
            buf[6] = VP_PLAN_VERSION & 0xff;
            buf[7] = VP_PLAN_VERSION >> 8;
            put_u64(buf + 8, len);
            put_u64(buf + 16, vp_fnv1a64(buf + VP_PLAN_HEADER_BYTES, len));
            vp_atomic_file af; /* a failed or concurrent write never leaves a torn plan */
            s = vp_atomic_file_open(&af, path, err);
            if (!s) {
                fwrite(buf, 1, len + VP_PLAN_HEADER_BYTES, af.f);
                s = vp_atomic_file_commit(&af, err);
            }
            free(buf);
        }
    }
    builder_free(&b);
    return s;
}
