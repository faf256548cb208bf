/* The oneDNN fast path: engine and stream, the per-node primitive cache, and running
 * one cached op (reorders in, the primitive, reorders out).  See dn.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_par.h"
#include "cpu_profile.h"
#include "dn_impl.h"
#include "dn_memo.h"

struct vp_dn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dn_entry **table; /* open addressing on the node pointer */
    size_t cap, used;
    void *buf;        /* reordered copies and scratchpads of a node run without a planned
                         workspace that holds them: one node at a time */
    size_t buf_bytes;
    int threads;      /* the threads a large node gets (OpenMP's, when the backend started) */
};

/* Work (floating-point operations) below which a node runs on one thread: a parallel
 * region and its barriers cost more than they save on a small convolution, and much
 * more on a loaded machine, where a descheduled thread stalls the others. */
#define DN_PAR_MIN_WORK ((int64_t)4 << 20)

typedef struct dn_kind {
    const char *domain, *op_type;
    int (*sig)(const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int64_t *sig, int64_t *work);
    int (*build)(vp_dn *d, dn_entry *e, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out);
} dn_kind;

static const dn_kind kinds[] = {
    {"", "Conv", vp_dn_conv_sig, vp_dn_conv_build},
    {"com.microsoft", "ConvGrad", vp_dn_conv_grad_sig, vp_dn_conv_grad_build},
};

vp_dn *vp_dn_new(void) {
    vp_dn *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->threads = vp_par_threads();
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        return NULL;
    }
    if (dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(d->engine);
        free(d);
        return NULL;
    }
    return d;
}

dnnl_engine_t vp_dn_engine(vp_dn *d) { return d->engine; }

static void op_free(dn_op *op) {
    for (int k = 0; k < op->n_args; k++) {
        dn_arg *a = &op->args[k];
        if (a->user) dnnl_memory_destroy(a->user);
        if (a->inner) dnnl_memory_destroy(a->inner);
        if (a->reorder) dnnl_primitive_destroy(a->reorder);
    }
    if (op->scratchpad) dnnl_memory_destroy(op->scratchpad);
    if (op->prim) dnnl_primitive_destroy(op->prim);
    memset(op, 0, sizeof *op);
}

static void entry_clear(dn_entry *e) {
    for (int k = 0; k < e->n_ops; k++) op_free(&e->ops[k]);
    e->n_ops = 0;
    e->uncovered = 0;
}

void vp_dn_free(vp_dn *d) {
    if (!d) return;
    for (size_t i = 0; i < d->cap; i++)
        if (d->table[i]) {
            entry_clear(d->table[i]);
            free(d->table[i]);
        }
    free(d->table);
    free(d->buf);
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->engine);
    free(d);
}

static _Thread_local int gemm_on;

void vp_dn_gemm_select(int on) { gemm_on = on; }
int vp_dn_gemm_selected(void) { return gemm_on; }

size_t vp_dn_scratch_bytes(const vp_dn *d) { return d->buf_bytes; }

int vp_dn_plain_md(dnnl_memory_desc_t *md, int rank, const int64_t *dims) {
    static const dnnl_format_tag_t tags[] = {dnnl_format_tag_undef, dnnl_a, dnnl_ab, dnnl_abc, dnnl_abcd, dnnl_abcde,
                                             dnnl_abcdef};
    if (rank < 1 || rank > 6) return 1;
    dnnl_dims_t dd;
    for (int i = 0; i < rank; i++) dd[i] = dims[i];
    return dnnl_memory_desc_init_by_tag(md, rank, dd, dnnl_f32, tags[rank]) != dnnl_success;
}

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

/* An argument of e's ops so far that reordered input tensor `tensor` into layout md. */
static const dn_arg *reordered_before(const dn_entry *e, int tensor, const dnnl_memory_desc_t *md) {
    for (int j = 0; j < e->n_ops; j++)
        for (int k = 0; k < e->ops[j].n_args; k++) {
            const dn_arg *a = &e->ops[j].args[k];
            const dnnl_memory_desc_t *inner = NULL;
            if (a->tensor != tensor || !a->reorder || dnnl_memory_get_memory_desc(a->inner, &inner)) continue;
            if (dnnl_memory_desc_equal(inner, md)) return a;
        }
    return NULL;
}

int vp_dn_op_init(vp_dn *d, dn_entry *e, dnnl_primitive_desc_t pd, int n_specs, const dn_spec *specs) {
    if (e->n_ops >= DN_MAX_OPS) {
        dnnl_primitive_desc_destroy(pd);
        return 1;
    }
    dn_op *op = &e->ops[e->n_ops];
    memset(op, 0, sizeof *op);
    /* this op's own parts go past the copies it reads from earlier ops, and may reuse
     * the rest of their parts (scratchpads, outputs' copies): those ops have run */
    for (int k = 0; k < n_specs; k++) {
        const dnnl_memory_desc_t *inner = dnnl_primitive_desc_query_md(pd, specs[k].what, specs[k].index);
        const dn_arg *same = inner && specs[k].tensor >= 0 ? reordered_before(e, specs[k].tensor, inner) : NULL;
        if (same && same->off + align64(dnnl_memory_desc_get_size(inner)) > op->bytes)
            op->bytes = same->off + align64(dnnl_memory_desc_get_size(inner));
    }
    int bad = dnnl_primitive_create(&op->prim, pd) != dnnl_success;
    for (int k = 0; k < n_specs && !bad; k++) {
        const dn_spec *s = &specs[k];
        dn_arg *a = &op->args[op->n_args++];
        a->arg = s->arg;
        a->tensor = s->tensor;
        const dnnl_memory_desc_t *inner = dnnl_primitive_desc_query_md(pd, s->what, s->index);
        bad = !inner || dnnl_memory_create(&a->user, s->user_md, d->engine, DNNL_MEMORY_NONE) != dnnl_success;
        if (bad || dnnl_memory_desc_equal(inner, s->user_md)) continue;
        const dn_arg *same = s->tensor >= 0 ? reordered_before(e, s->tensor, inner) : NULL;
        if (same) { /* the earlier op's copy stays intact: later ops' parts follow it */
            bad = dnnl_memory_create(&a->inner, inner, d->engine, DNNL_MEMORY_NONE) != dnnl_success;
            a->off = same->off;
            continue;
        }
        int is_out = s->tensor < 0;
        dnnl_primitive_desc_t rpd = NULL;
        bad = dnnl_memory_create(&a->inner, inner, d->engine, DNNL_MEMORY_NONE) != dnnl_success ||
              dnnl_reorder_primitive_desc_create(&rpd, is_out ? inner : s->user_md, d->engine,
                                                 is_out ? s->user_md : inner, d->engine, NULL) != dnnl_success ||
              dnnl_primitive_create(&a->reorder, rpd) != dnnl_success;
        if (rpd) dnnl_primitive_desc_destroy(rpd);
        a->off = op->bytes;
        op->bytes += align64(dnnl_memory_desc_get_size(inner));
    }
    const dnnl_memory_desc_t *smd = bad ? NULL : dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (smd && dnnl_memory_desc_get_size(smd)) {
        bad = dnnl_memory_create(&op->scratchpad, smd, d->engine, DNNL_MEMORY_NONE) != dnnl_success;
        op->scratch_off = op->bytes;
        op->bytes += align64(dnnl_memory_desc_get_size(smd));
    }
    dnnl_primitive_desc_destroy(pd);
    if (bad) op_free(op);
    else e->n_ops++;
    return bad;
}

static void *tensor_data(const vp_tensor *const *in, vp_tensor *const *out, int which) {
    return which >= 0 ? in[which]->data : out[~which]->data;
}

/* VP_PROFILE's row for a reorder of argument arg. */
static const char *reorder_key(int arg) {
    switch (arg) {
    case DNNL_ARG_SRC: return "(reorder src)";
    case DNNL_ARG_WEIGHTS: return "(reorder weights)";
    case DNNL_ARG_DST: return "(reorder dst)";
    case DNNL_ARG_DIFF_SRC: return "(reorder diff_src)";
    case DNNL_ARG_DIFF_DST: return "(reorder diff_dst)";
    case DNNL_ARG_DIFF_WEIGHTS: return "(reorder diff_weights)";
    default: return "(reorder other)";
    }
}

static int op_run(vp_dn *d, const dn_op *op, char *base, const vp_tensor *const *in, vp_tensor *const *out) {
    dnnl_exec_arg_t args[DN_MAX_ARGS + 1];
    int st = 0;
    for (int k = 0; k < op->n_args && !st; k++) {
        const dn_arg *a = &op->args[k];
        st |= dnnl_memory_set_data_handle(a->user, tensor_data(in, out, a->tensor));
        args[k].arg = a->arg;
        args[k].memory = a->user;
        if (!a->inner) continue;
        st |= dnnl_memory_set_data_handle(a->inner, base + a->off);
        args[k].memory = a->inner;
        if (a->tensor >= 0 && a->reorder) {
            dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->inner}};
            double t0 = vp_prof_on() ? vp_prof_now() : 0;
            st |= dnnl_primitive_execute(a->reorder, d->stream, 2, r);
            if (vp_prof_on()) vp_prof_add(reorder_key(a->arg), "onednn", vp_prof_now() - t0);
        }
    }
    int n = op->n_args;
    if (op->scratchpad) {
        st |= dnnl_memory_set_data_handle(op->scratchpad, base + op->scratch_off);
        args[n].arg = DNNL_ARG_SCRATCHPAD;
        args[n++].memory = op->scratchpad;
    }
    if (!st) st = dnnl_primitive_execute(op->prim, d->stream, n, args);
    for (int k = 0; k < op->n_args && !st; k++) {
        const dn_arg *a = &op->args[k];
        if (!a->inner || a->tensor >= 0) continue;
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->inner}, {DNNL_ARG_TO, a->user}};
        double t0 = vp_prof_on() ? vp_prof_now() : 0;
        st |= dnnl_primitive_execute(a->reorder, d->stream, 2, r);
        if (vp_prof_on()) vp_prof_add(reorder_key(a->arg), "onednn", vp_prof_now() - t0);
    }
    if (!st) st = dnnl_stream_wait(d->stream);
    return st;
}

static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* The slot of node's entry, or the empty slot where it goes. */
static dn_entry **slot_of(vp_dn *d, const vp_node *n) {
    size_t i = hash_ptr(n, d->cap);
    while (d->table[i] && d->table[i]->node != n) i = (i + 1) & (d->cap - 1);
    return &d->table[i];
}

static int grow_table(vp_dn *d) {
    size_t old_cap = d->cap, cap = old_cap ? old_cap * 2 : 64;
    dn_entry **old = d->table;
    d->table = calloc(cap, sizeof *d->table);
    if (!d->table) {
        d->table = old;
        return 1;
    }
    d->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) *slot_of(d, old[i]->node) = old[i];
    free(old);
    return 0;
}

/* The entry of node n with signature sig, built when new or when sig changed; NULL on
 * out of memory. */
static dn_entry *entry_for(vp_dn *d, const dn_kind *k, const vp_node *n, const vp_tensor *const *in,
                           vp_tensor *const *out, const int64_t *sig, int n_sig, int64_t work) {
    if ((d->used + 1) * 2 > d->cap && grow_table(d)) return NULL;
    dn_entry **slot = slot_of(d, n), *e = *slot;
    if (e && e->n_sig == n_sig && !memcmp(e->sig, sig, (size_t)n_sig * sizeof *sig)) return e;
    if (!e) {
        if (!(e = calloc(1, sizeof *e))) return NULL;
        e->node = n;
        *slot = e;
        d->used++;
    }
    entry_clear(e);
    e->n_sig = n_sig;
    memcpy(e->sig, sig, (size_t)n_sig * sizeof *sig);
    e->work = work;
    /* some primitives size their scratchpad by the threads they are created for: run
     * them with the same count */
    e->threads = e->work < DN_PAR_MIN_WORK ? 1 : d->threads;
    if (e->threads != d->threads) vp_par_set_threads(e->threads);
    int bad = k->build(d, e, n, in, out);
    if (e->threads != d->threads) vp_par_set_threads(d->threads);
    if (bad) {
        entry_clear(e);
        e->uncovered = 1;
        return e;
    }
    e->need = 0;
    for (int j = 0; j < e->n_ops; j++)
        if (e->ops[j].bytes > e->need) e->need = e->ops[j].bytes;
    return e;
}

/* Where e's copies and scratchpad go (*base; NULL when it needs none): the caller's
 * workspace when it holds them (a planned step's, in the arena), else the context's
 * buffer, grown to fit.  Returns 1 when that cannot grow. */
static int scratch_for(vp_dn *d, const dn_entry *e, void *ws, size_t ws_bytes, char **base) {
    *base = NULL;
    if (!e->need) return 0;
    if (ws && ws_bytes >= e->need && !((uintptr_t)ws & 63)) {
        *base = ws;
        return 0;
    }
    if (e->need > d->buf_bytes) {
        void *buf = aligned_alloc(64, align64(e->need));
        if (!buf) return 1;
        free(d->buf);
        d->buf = buf;
        d->buf_bytes = align64(e->need);
    }
    *base = d->buf;
    return 0;
}

static const dn_kind *kind_of(const vp_node *n) {
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(n->op_type, kinds[i].op_type) && !strcmp(n->domain ? n->domain : "", kinds[i].domain))
            return &kinds[i];
    return NULL;
}

int vp_dn_may_cover(const vp_node *n) { return kind_of(n) != NULL; }

/* n's cache entry, built if needed; *e NULL when oneDNN does not cover n. */
static vp_status entry_of(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                          dn_entry **e, vp_error *err) {
    *e = NULL;
    const dn_kind *k = kind_of(n);
    if (!k) return VP_OK;
    int64_t sig[DN_MAX_SIG], work = 0;
    int n_sig = k->sig(n, in, out, sig, &work);
    if (!n_sig) return VP_OK;
    *e = entry_for(d, k, n, in, out, sig, n_sig, work);
    if (!*e) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for the oneDNN primitive cache");
    if ((*e)->uncovered) *e = NULL;
    return VP_OK;
}

vp_status vp_dn_prepare(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, vp_error *err) {
    dn_entry *e;
    return entry_of(d, n, in, out, &e, err);
}

vp_status vp_dn_workspace_bytes(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                int64_t *bytes, vp_error *err) {
    dn_entry *e;
    vp_status s = entry_of(d, n, in, out, &e, err);
    *bytes = !s && e ? (int64_t)e->need : 0;
    return s;
}

vp_status vp_dn_run(vp_dn *d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, void *ws,
                    size_t ws_bytes, int *handled, vp_error *err) {
    *handled = 0;
    dn_entry *e;
    vp_status s = entry_of(d, n, in, out, &e, err);
    if (s || !e) return s;
    char *base;
    if (scratch_for(d, e, ws, ws_bytes, &base)) return vp_node_fail(err, VP_ERR_NOMEM, n, "out of memory for oneDNN's reorders and scratchpad");
    if (e->threads != d->threads) vp_par_set_threads(e->threads);
    int bad = -1;
    for (int j = 0; j < e->n_ops && bad < 0; j++)
        if (op_run(d, &e->ops[j], base, in, out)) bad = j;
    if (e->threads != d->threads) vp_par_set_threads(d->threads);
    if (bad >= 0) return vp_node_fail(err, VP_ERR_RUNTIME, n, "oneDNN failed to execute primitive %d of this node", bad);
    *handled = 1;
    return VP_OK;
}

/* The tensors' dtypes, eight bits each (0: absent), up to eight tensors a word. */
static int64_t dtypes_of(const vp_tensor *const *t, int count) {
    int64_t packed = 0;
    for (int k = 0; k < count && k < 8; k++) packed |= (int64_t)(t[k] ? (t[k]->dtype + 1) & 0xff : 0) << (8 * k);
    return packed;
}

vp_status vp_dn_workspace_bytes_memo(vp_dn **d, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                     int64_t *bytes, vp_error *err) {
    *bytes = 0;
    const dn_kind *k = kind_of(n);
    enum { HEAD = 6 };
    int64_t key[DN_MEMO_MAX_KEY], work = 0;
    _Static_assert(HEAD + DN_MAX_SIG <= DN_MEMO_MAX_KEY, "the memo's key holds a signature");
    int n_sig = k ? k->sig(n, in, out, key + HEAD, &work) : 0;
    if (!n_sig) return VP_OK; /* the reference runs it: no workspace */
    /* what entry_for builds with besides the signature */
    key[0] = work < DN_PAR_MIN_WORK ? 1 : *d ? (*d)->threads : vp_par_threads();
    key[1] = dnnl_get_effective_cpu_isa();
    key[2] = dnnl_get_cpu_isa_hints();
    key[3] = dtypes_of(in, n->n_inputs);
    key[4] = dtypes_of((const vp_tensor *const *)out, n->n_outputs);
    dnnl_fpmath_mode_t fpmath = dnnl_fpmath_mode_strict; /* which down-conversions oneDNN may make */
    key[5] = dnnl_get_default_fpmath_mode(&fpmath) == dnnl_success ? (int64_t)fpmath : -1;
    if (vp_dn_memo_find(key, HEAD + n_sig, bytes)) return VP_OK;
    if (!*d && !(*d = vp_dn_new())) return VP_OK; /* no engine: the reference runs, no workspace */
    dn_entry *e;
    vp_status s = entry_of(*d, n, in, out, &e, err);
    if (s) return s;
    *bytes = e ? (int64_t)e->need : 0;
    vp_dn_memo_put(key, HEAD + n_sig, *bytes);
    return VP_OK;
}
