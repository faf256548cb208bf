#include "plan_exec.h"

#include "ir/op_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prof_table.h"

/* VP_PLAN_PROFILE=1 in the environment: time every step (the backend synchronized after
 * each) and print, when the executor is freed, the time per op type, largest first, on
 * stderr: per training step the mean, the least over the steps run (what a loaded
 * machine distorts least) and the mean CPU time of the process (every thread's: the
 * work done); VP_PLAN_PROFILE=2 keys by op type and input shapes.  Off, it costs a
 * branch per step; on, it only reads clocks, so no result changes a bit.  The rows are
 * runtime/prof_table.h's, a round per training step. */
struct vp_plan_exec {
    const vp_plan *p;
    vp_backend *b;
    void *arena;
    int64_t arena_bytes;
    void *host;      /* the host block (optimizer-state offload), or NULL */
    int profile;     /* VP_PLAN_PROFILE: 0 off, 1 per op type, 2 per op type and shapes */
    vp_prof_table prof;
};

static void prof_add(vp_plan_exec *x, const vp_node *n, const vp_tensor *const *in, double sec, double cpu) {
    char key[200];
    int at = snprintf(key, sizeof key, "%s", n->op ? n->op->name : "?");
    for (int k = 0; x->profile > 1 && k < n->n_inputs && at < (int)sizeof key - 1; k++) {
        char sh[128];
        at += snprintf(key + at, sizeof key - (size_t)at, " %s",
                       in[k] ? vp_shape_str(in[k]->rank, in[k]->dims, sh, sizeof sh) : "-");
    }
    vp_prof_table_add(&x->prof, key, NULL, sec, cpu);
}

static void prof_line(FILE *f, const vp_prof_row *r, void *ctx) {
    const double *sums = ctx; /* total, runs */
    double total = sums[0], runs = sums[1];
    fprintf(f, "%10.2f %10.2f %10.2f %6.2f %6ld  %s\n", 1e3 * r->total / runs, 1e3 * r->least, 1e3 * r->cpu / runs,
            total > 0 ? 100 * r->total / total : 0, r->count / (long)runs, r->key);
}

static void prof_print(vp_plan_exec *x) {
    double total = 0, least = 0;
    int runs = x->prof.rounds ? x->prof.rounds : 1;
    for (int i = 0; i < x->prof.n; i++) total += x->prof.rows[i].total, least += x->prof.rows[i].least;
    vp_prof_table_sort(&x->prof);
    fprintf(stderr, "profile (VP_PLAN_PROFILE) of %d training steps: per step %.2f ms mean, %.2f ms summing each op's least\n",
            runs, 1e3 * total / runs, 1e3 * least);
    fprintf(stderr, "%10s %10s %10s %6s %6s  %s\n", "mean ms", "least ms", "cpu ms", "%", "calls", "op");
    double sums[2] = {total, runs};
    vp_prof_table_print(&x->prof, stderr, prof_line, sums);
}

static void *ptr_of(const vp_plan_exec *x, int buffer) {
    const vp_buffer *b = &x->p->buffers[buffer];
    return (char *)(b->cat == VP_CAT_HOST ? x->host : x->arena) + b->offset;
}

/* A buffer of the host block on a backend whose own memory is not the host's. */
static int on_host_block(const vp_plan_exec *x, int buffer) {
    return x->p->buffers[buffer].cat == VP_CAT_HOST && !x->b->iface->host_memory;
}

/* Where a step's buffers live, on a backend that runs offload's steps itself: -1 for a
 * device step, else its vp_host_step; a step that mixes them otherwise is refused. */
static int host_step_kind(const vp_plan_exec *x, const vp_node *n, vp_error *err) {
    int host_in = 0, dev_in = 0, host_out = 0, dev_out = 0;
    for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0) on_host_block(x, x->p->buffer_of[n->inputs[k]]) ? host_in++ : dev_in++;
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k] >= 0) on_host_block(x, x->p->buffer_of[n->outputs[k]]) ? host_out++ : dev_out++;
    if (!host_in && !host_out) return -1;
    if (!dev_in && !dev_out) return VP_STEP_ON_HOST;
    if (host_out == 1 && dev_in == 1 && !host_in && !dev_out) return VP_STEP_TO_HOST;
    if (host_in == 1 && dev_out == 1 && !dev_in && !host_out) return VP_STEP_TO_DEVICE;
    vp_node_fail(err, VP_ERR_INVALID, n, "reads and writes both the host block and the device arena");
    return -2;
}

vp_status vp_plan_exec_new(const vp_plan *p, vp_backend *b, vp_plan_exec **out, vp_error *err) {
    *out = NULL;
    vp_plan_exec *x = calloc(1, sizeof *x);
    if (!x) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    x->p = p;
    x->b = b;
    x->arena_bytes = p->arena_bytes;
    const char *prof = getenv("VP_PLAN_PROFILE");
    x->profile = prof && prof[0] && strcmp(prof, "0") ? (prof[0] == '2' ? 2 : 1) : 0;
    vp_status s = b->iface->alloc(b, (size_t)(p->arena_bytes ? p->arena_bytes : 1), &x->arena, err);
    if (s) {
        free(x);
        vp_error_prefix(err, "allocating the %lld-byte arena: ", (long long)p->arena_bytes);
        return s;
    }
    /* the host block: on a backend whose memory is the host's (the CPU, which emulates
     * offload exactly) one more allocation; elsewhere the backend's page-locked memory,
     * its copies and its host update (run_host_step), or a refusal */
    if (p->host_bytes > 0 && b->iface->host_memory)
        s = b->iface->alloc(b, (size_t)p->host_bytes, &x->host, err);
    else if (p->host_bytes > 0 && b->iface->alloc_host && b->iface->run_host_step)
        s = b->iface->alloc_host(b, (size_t)p->host_bytes, &x->host, err);
    else if (p->host_bytes > 0)
        s = vp_fail(err, VP_ERR_UNSUPPORTED, "the plan keeps %lld bytes on the host (optimizer-state offload), which the %s backend does not run",
                    (long long)p->host_bytes, b->iface->name);
    for (int i = 0; i < p->n_buffers && !s; i++) {
        const vp_buffer *buf = &p->buffers[i];
        const vp_value *v = &p->g->values[buf->value];
        if (buf->alias_of >= 0 || (v->flags & VP_VAL_INPUT) || !buf->bytes) continue;
        if (on_host_block(x, i)) { /* host memory whatever the backend: filled here */
            if (v->data) memcpy(ptr_of(x, i), v->data, (size_t)buf->bytes);
            else memset(ptr_of(x, i), 0, (size_t)buf->bytes);
        } else if (v->data) s = b->iface->copy_to_device(b, ptr_of(x, i), v->data, (size_t)buf->bytes, err);
        else if (v->flags & VP_VAL_STATE) s = vp_backend_zero(b, ptr_of(x, i), (size_t)buf->bytes, err);
    }
    if (s) {
        vp_plan_exec_free(x);
        return s;
    }
    *out = x;
    return VP_OK;
}

void vp_plan_exec_free(vp_plan_exec *x) {
    if (!x) return;
    if (x->profile && x->prof.n) prof_print(x);
    vp_prof_table_clear(&x->prof);
    if (x->arena) x->b->iface->free(x->b, x->arena);
    if (x->host) (x->b->iface->host_memory ? x->b->iface->free : x->b->iface->free_host)(x->b, x->host);
    free(x);
}

vp_status vp_plan_exec_set_input(vp_plan_exec *x, const char *name, const vp_tensor *t, vp_error *err) {
    const vp_graph *g = x->p->g;
    int id = vp_graph_find_value(g, name);
    if (id < 0 || !(g->values[id].flags & VP_VAL_INPUT))
        return vp_fail(err, VP_ERR_USAGE, "the plan has no input named '%s'", name);
    const vp_value *v = &g->values[id];
    char s1[256], s2[256];
    int same = v->dtype == t->dtype && v->rank == t->rank;
    for (int d = 0; same && d < t->rank; d++) same = v->dims[d] == t->dims[d];
    if (!same)
        return vp_fail(err, VP_ERR_INVALID, "input '%s' expects %s %s, got %s %s", name, vp_dtype_name(v->dtype),
                       vp_shape_str(v->rank, v->dims, s1, sizeof s1), vp_dtype_name(t->dtype),
                       vp_shape_str(t->rank, t->dims, s2, sizeof s2));
    int b = x->p->buffer_of[id];
    if (b < 0) return VP_OK; /* no step reads it */
    return x->b->iface->copy_to_device(x->b, ptr_of(x, b), t->data, vp_tensor_nbytes(t), err);
}

vp_status vp_plan_exec_run(vp_plan_exec *x, vp_error *err) {
    const vp_plan *p = x->p;
    const vp_graph *g = p->g;
    vp_io_args io;
    vp_status st = vp_io_args_init(&io, g, err);
    const vp_tensor **pin = io.pin;
    vp_tensor *tin = io.tin, *tout = io.tout, **pout = io.pout;
    for (int s = 0; s < p->n_steps && !st; s++) {
        const vp_node *n = &g->nodes[p->steps[s]];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            pin[k] = NULL;
            if (v < 0) continue;
            tin[k] = vp_value_tensor(&g->values[v]);
            tin[k].data = ptr_of(x, p->buffer_of[v]);
            pin[k] = &tin[k];
        }
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            pout[k] = NULL;
            if (v < 0) continue;
            tout[k] = vp_value_tensor(&g->values[v]);
            tout[k].data = ptr_of(x, p->buffer_of[v]);
            pout[k] = &tout[k];
        }
        /* a view sharing its input's storage has nothing to do (a Dropout's mask, when
         * it has one, is still written) */
        int extra_out = 0;
        for (int k = 1; k < n->n_outputs; k++) extra_out |= pout[k] != NULL;
        if (vp_node_is_view(g, n) && !extra_out && pout[0] && pin[0] && pout[0]->data == pin[0]->data) continue;
        int ws = p->workspace ? p->workspace[s] : -1;
        x->b->workspace = ws >= 0 ? ptr_of(x, ws) : NULL;
        x->b->workspace_bytes = ws >= 0 ? (size_t)p->buffers[ws].bytes : 0;
        double t0 = x->profile ? vp_prof_clock(CLOCK_MONOTONIC) : 0;
        double c0 = x->profile ? vp_prof_clock(CLOCK_PROCESS_CPUTIME_ID) : 0;
        int kind = x->host && !x->b->iface->host_memory ? host_step_kind(x, n, err) : -1;
        if (kind == -2) st = VP_ERR_INVALID;
        else if (kind >= 0) st = x->b->iface->run_host_step(x->b, (vp_host_step)kind, n, pin, pout, err);
        else st = x->b->iface->run_node(x->b, n, pin, pout, err);
        x->b->workspace = NULL, x->b->workspace_bytes = 0;
        if (x->profile && !st) st = x->b->iface->synchronize(x->b, err);
        if (x->profile && !st)
            prof_add(x, n, pin, vp_prof_clock(CLOCK_MONOTONIC) - t0, vp_prof_clock(CLOCK_PROCESS_CPUTIME_ID) - c0);
        if (st) vp_error_prefix(err, "step %d: ", s);
    }
    vp_io_args_free(&io);
    if (x->profile && !st) vp_prof_table_end_round(&x->prof);
    return st ? st : x->b->iface->synchronize(x->b, err);
}

vp_status vp_plan_exec_get(vp_plan_exec *x, int value_id, vp_tensor *out, vp_error *err) {
    const vp_value *v = &x->p->g->values[value_id];
    int b = value_id >= 0 ? x->p->buffer_of[value_id] : -1;
    if (b < 0) return vp_fail(err, VP_ERR_USAGE, "value '%s' has no buffer in the plan", v->name);
    *out = vp_value_tensor(v);
    size_t bytes = vp_tensor_nbytes(out);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    vp_status s = VP_OK;
    if (on_host_block(x, b)) { /* written by the backend's queued host steps: wait for them */
        s = x->b->iface->synchronize(x->b, err);
        if (!s) memcpy(out->data, ptr_of(x, b), bytes);
    } else
        s = x->b->iface->copy_to_host(x->b, out->data, ptr_of(x, b), bytes, err);
    if (s) {
        free(out->data);
        out->data = NULL;
    }
    return s;
}

int64_t vp_plan_exec_device_bytes(const vp_plan_exec *x) { return x->arena_bytes; }
