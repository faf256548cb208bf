/* The plan as a Graphviz digraph.
 *
 * In: a built plan.  Out: a DOT file with one node per step, coloured by phase, edges
 * producer -> consumer labelled with the tensor size, the peak step in bold red.  Steps
 * are grouped in clusters by block ("blocks.0", "layer1.0") and phase group (forward,
 * backward, optimizer), derived from the names torch exports, so a real model reads as
 * a stack of blocks instead of a hairball.  Parameters are not drawn (every block has
 * dozens); each cluster notes their count and size instead.  Backward steps share the
 * rank of the forward step they differentiate (the ladder, below), which keeps edges
 * short and dot fast.  Past DOT_COLLAPSE_STEPS steps, or past DOT_LOOSE_STEPS when no
 * ladder can be found, each cluster becomes one summary node: dot's layout is
 * superlinear and a 10,000-node drawing is unreadable anyway. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_artifacts.h"
#include "report.h"

#define DOT_COLLAPSE_STEPS 2000 /* more steps than this: one node per cluster */
#define DOT_MAX_SUMMARY 400     /* more summary nodes than this: coarser block keys */
/* Without the ladder (see below) long edges make dot slow from a few hundred steps on,
 * measured: 136 steps 4 s, 266 steps 80 s; 240 summary nodes 12 s. */
#define DOT_LOOSE_STEPS 100
#define DOT_LOOSE_SUMMARY 100
#define DOT_KEY_LEN 200
#define DOT_SHORT_LEN 28

enum { GROUP_FWD, GROUP_BWD, GROUP_OPT, GROUP_COMM, GROUP_COUNT };

typedef struct dot_cluster {
    char *key;                /* dotted block path, "" for the top level */
    int group;
    int n_steps;
    int n_params, n_state;    /* producerless values first used here */
    int64_t param_bytes, state_bytes;
    int has_peak;
} dot_cluster;

typedef struct dot_ctx {
    const vp_plan *p;
    const vp_graph *g;
    FILE *f;
    int bucket;               /* block indices per key: 1 exact, 0 none (see cut_key) */
    int collapsed;
    int *producer_step;       /* value -> the step writing it, -1 */
    int *first_use;           /* value -> first non-optimizer step reading it, or first step at all */
    int *cluster_of;          /* step -> cluster, -1 when drawn at the top level */
    int *anchor;              /* step -> the forward step whose rank it shares, -1 */
    int ladder;               /* most backward steps found their forward step */
    dot_cluster *cl;
    int n_cl;
    int *slots;               /* open addressing: (group, key) -> cluster */
    int n_slots;
} dot_ctx;

/* ---- names -> block keys ---- */

static const char *const group_name[GROUP_COUNT] = {"forward", "backward", "optimizer", "comm"};
/* Fill and border per phase, the same hues as the timeline's phase strip. */
static const char *const phase_fill[] = {"#dbe9f6", "#fde9c9", "#f9d5d3", "#dff0d8", "#e6dcef", "#eeeeee"};
static const char *const phase_line[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#888888"};
static const char *const group_fill[GROUP_COUNT] = {"#f5f9fd", "#fdf6f5", "#f9f5fc", "#f6f6f6"};
static const char *const group_line[GROUP_COUNT] = {"#9ab8d6", "#dba7a3", "#c2a9d3", "#bbbbbb"};

static int phase_index(vp_phase ph) { return (int)ph >= 0 && ph <= VP_PHASE_COMM ? (int)ph : 0; }

static int group_of(vp_phase ph) {
    switch (ph) {
    case VP_PHASE_BACKWARD:
    case VP_PHASE_RECOMPUTE: return GROUP_BWD;
    case VP_PHASE_OPTIMIZER: return GROUP_OPT;
    case VP_PHASE_COMM: return GROUP_COMM;
    default: return GROUP_FWD;
    }
}

static int all_digits(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* Cuts a dotted module path after its first numeric segment ("blocks.0.attn" ->
 * "blocks.0"), or to its first segment when it has none ("layer1.conv1" -> "layer1"):
 * the numbered module is the repeated block a reader wants as one box.  With bucket > 1
 * the index becomes a range ("blocks.4-7"), with bucket 0 it is dropped: both keep the
 * collapsed drawing of a very deep model to a few hundred nodes. */
static void cut_key(char *key, int bucket) {
    char *first_dot = strchr(key, '.');
    if (!first_dot) return;
    for (char *seg = first_dot + 1; bucket;) {
        char *next = strchr(seg, '.');
        size_t n = next ? (size_t)(next - seg) : strlen(seg);
        if (all_digits(seg, n)) {
            long i = n < 9 ? strtol(seg, NULL, 10) : 0;
            if (bucket > 1)
                snprintf(seg, DOT_KEY_LEN - (size_t)(seg - key), "%ld-%ld", i / bucket * bucket, i / bucket * bucket + bucket - 1);
            else if (next)
                *next = 0;
            return;
        }
        if (!next) break;
        seg = next + 1;
    }
    *first_dot = 0;
}

static void key_append(char *key, const char *comp, size_t n) {
    size_t len = strlen(key);
    const char *last = strrchr(key, '.');
    size_t last_at = last ? (size_t)(last + 1 - key) : 0;
    /* torch repeats the parent's path in indexed children ("/layer1/layer1.0/conv1") or
     * its last name ("/layer2/downsample/downsample.0"): the child replaces it */
    if (len && n > len && !strncmp(comp, key, len) && comp[len] == '.') len = 0;
    else if (len && n > len - last_at && !strncmp(comp, key + last_at, len - last_at) && comp[len - last_at] == '.')
        len = last_at;
    else if (len && len + 1 < DOT_KEY_LEN) key[len++] = '.';
    if (len + n >= DOT_KEY_LEN) n = DOT_KEY_LEN - 1 - len;
    memcpy(key + len, comp, n);
    key[len + n] = 0;
}

/* "/blocks.0/attn/MatMul" (first len bytes of name) -> "blocks.0.attn": the module path
 * without the op.  A name without '/' has no module path. */
static void slash_path(const char *name, size_t len, char *key) {
    key[0] = 0;
    const char *end = name + len;
    while (name < end) {
        while (name < end && *name == '/') name++;
        const char *slash = memchr(name, '/', (size_t)(end - name));
        if (!slash) return; /* the last component is the op */
        key_append(key, name, (size_t)(slash - name));
        name = slash + 1;
    }
}

/* "blocks.0.attn.c_attn.weight" -> "blocks.0.attn.c_attn": a parameter's module path. */
static void dotted_path(const char *name, size_t len, char *key) {
    const char *dot = NULL;
    for (size_t i = 0; i < len; i++)
        if (name[i] == '.') dot = name + i;
    size_t n = dot ? (size_t)(dot - name) : 0;
    if (n >= DOT_KEY_LEN) n = DOT_KEY_LEN - 1;
    if (n) memcpy(key, name, n);
    key[n] = 0;
}

/* Backward nodes are named "<forward name>_grad/<Op>_<k>" (planner/autodiff.c) and sit
 * in their forward node's block; the gradient seed is "loss_grad/...". */
static void forward_key(const char *name, char *key, int bucket) {
    const char *grad = strstr(name, "_grad/");
    size_t len = grad ? (size_t)(grad - name) : strlen(name);
    if (grad && len == 4 && !strncmp(name, "loss", 4)) strcpy(key, "loss");
    else slash_path(name, len, key);
    cut_key(key, bucket);
}

/* Optimizer nodes ("<param>_update/<Op>") sit in the block of the first step that reads
 * their parameter; the parameter's own dotted name is the fallback. */
static void optimizer_key(const dot_ctx *c, const vp_node *n, char *key) {
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k];
        int s = v >= 0 ? c->first_use[v] : -1;
        if (s >= 0 && c->g->nodes[c->p->steps[s]].phase != VP_PHASE_OPTIMIZER) {
            forward_key(c->g->nodes[c->p->steps[s]].name, key, c->bucket);
            return;
        }
    }
    const char *upd = n->name ? strstr(n->name, "_update/") : NULL;
    dotted_path(n->name, upd ? (size_t)(upd - n->name) : 0, key);
    cut_key(key, c->bucket);
}

static void step_key(const dot_ctx *c, int s, char *key) {
    const vp_node *n = &c->g->nodes[c->p->steps[s]];
    if (n->phase == VP_PHASE_OPTIMIZER) optimizer_key(c, n, key);
    else forward_key(n->name ? n->name : "", key, c->bucket);
}

/* ---- clusters ---- */

static uint32_t key_hash(const char *key, int group) {
    uint32_t h = 2166136261u ^ (uint32_t)group;
    for (; *key; key++) h = (h ^ (uint8_t)*key) * 16777619u;
    return h;
}

/* The cluster of (key, group), made on first sight; -1 when out of memory. */
static int cluster_get(dot_ctx *c, const char *key, int group) {
    uint32_t i = key_hash(key, group) & (uint32_t)(c->n_slots - 1);
    for (; c->slots[i] >= 0; i = (i + 1) & (uint32_t)(c->n_slots - 1)) {
        const dot_cluster *k = &c->cl[c->slots[i]];
        if (k->group == group && !strcmp(k->key, key)) return c->slots[i];
    }
    dot_cluster *k = &c->cl[c->n_cl];
    memset(k, 0, sizeof *k);
    k->key = strdup(key);
    if (!k->key) return -1;
    k->group = group;
    c->slots[i] = c->n_cl;
    return c->n_cl++;
}

static void clusters_clear(dot_ctx *c) {
    for (int i = 0; i < c->n_cl; i++) free(c->cl[i].key);
    c->n_cl = 0;
    for (int i = 0; c->slots && i < c->n_slots; i++) c->slots[i] = -1;
}

static int is_param(const dot_ctx *c, int v) {
    int b = c->p->buffer_of ? c->p->buffer_of[v] : -1;
    if (b >= 0) return c->p->buffers[b].cat == VP_CAT_PARAMETERS;
    return (c->g->values[v].flags & VP_VAL_PARAM) != 0;
}

static int is_state(const dot_ctx *c, int v) {
    int b = c->p->buffer_of ? c->p->buffer_of[v] : -1;
    if (b >= 0) return c->p->buffers[b].cat == VP_CAT_OPTIMIZER_STATE;
    return (c->g->values[v].flags & VP_VAL_STATE) != 0;
}

static int64_t value_bytes(const dot_ctx *c, int v) {
    int b = c->p->buffer_of ? c->p->buffer_of[v] : -1;
    if (b >= 0) return c->p->buffers[b].bytes;
    const vp_value *val = &c->g->values[v];
    return val->rank >= 0 ? vp_value_numel(val) * (int64_t)vp_dtype_size(val->dtype) : -1;
}

/* Weights are not drawn; each cluster says how many it reads and their size. */
static void clusters_count_weights(dot_ctx *c) {
    for (int v = 0; v < c->g->n_values; v++) {
        int s = c->first_use[v];
        if (c->producer_step[v] >= 0 || s < 0 || c->cluster_of[s] < 0) continue;
        dot_cluster *k = &c->cl[c->cluster_of[s]];
        int64_t b = value_bytes(c, v);
        if (is_param(c, v)) {
            k->n_params++;
            k->param_bytes += b > 0 ? b : 0;
        } else if (is_state(c, v)) {
            k->n_state++;
            k->state_bytes += b > 0 ? b : 0;
        }
    }
}

static vp_status clusters_build(dot_ctx *c) {
    char key[DOT_KEY_LEN];
    clusters_clear(c);
    for (int s = 0; s < c->p->n_steps; s++) {
        step_key(c, s, key);
        int k = cluster_get(c, key, group_of(c->g->nodes[c->p->steps[s]].phase));
        if (k < 0) return VP_ERR_NOMEM;
        c->cluster_of[s] = k;
        c->cl[k].n_steps++;
        if (s == c->p->peak_step) c->cl[k].has_peak = 1;
    }
    /* A box around one step, or around steps with no block name, adds only noise. */
    for (int s = 0; s < c->p->n_steps && !c->collapsed; s++) {
        const dot_cluster *k = &c->cl[c->cluster_of[s]];
        if (k->n_steps < 2 || !k->key[0]) c->cluster_of[s] = -1;
    }
    clusters_count_weights(c);
    return VP_OK;
}

/* ---- per-value maps ---- */

static vp_status maps_build(dot_ctx *c) {
    const vp_plan *p = c->p;
    size_t nv = (size_t)c->g->n_values + 1, ns = (size_t)p->n_steps + 1;
    c->producer_step = malloc(nv * sizeof(int));
    c->first_use = malloc(nv * sizeof(int));
    c->cluster_of = malloc(ns * sizeof(int));
    c->cl = calloc(ns, sizeof *c->cl);
    for (c->n_slots = 16; c->n_slots < 2 * (int)ns; c->n_slots *= 2) {}
    c->slots = malloc((size_t)c->n_slots * sizeof(int));
    if (!c->producer_step || !c->first_use || !c->cluster_of || !c->cl || !c->slots) return VP_ERR_NOMEM;
    for (int v = 0; v < c->g->n_values; v++) c->producer_step[v] = c->first_use[v] = -1;
    for (int i = 0; i < c->n_slots; i++) c->slots[i] = -1;
    for (int s = 0; s < p->n_steps; s++) {
        const vp_node *n = &c->g->nodes[p->steps[s]];
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) c->producer_step[n->outputs[k]] = s;
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) continue;
            /* prefer a forward reader, so a parameter counts in its block, not its update's */
            int prev = c->first_use[v];
            if (prev < 0 || (c->g->nodes[p->steps[prev]].phase == VP_PHASE_OPTIMIZER && n->phase != VP_PHASE_OPTIMIZER))
                c->first_use[v] = s;
        }
    }
    return VP_OK;
}

static void ctx_free(dot_ctx *c) {
    clusters_clear(c);
    free(c->producer_step);
    free(c->first_use);
    free(c->cluster_of);
    free(c->anchor);
    free(c->cl);
    free(c->slots);
}

/* ---- the ladder: backward beside forward ----
 *
 * Drawn top to bottom in step order, a saved activation's edge would run from its
 * forward node down past the loss and back up to its backward reader: N^2 long edges
 * that make dot's crossing minimisation take minutes at a few hundred steps.  Putting
 * each backward node on the rank of the forward node it differentiates (and each update
 * on the rank of its parameter's first reader) keeps every edge short and reads as a
 * ladder: forward going down on the left, backward coming up beside it. */

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* Forward step named exactly name[0..n), or -1. */
static int forward_find(const dot_ctx *c, const int *slots, int n_slots, const char *name, size_t n) {
    for (uint32_t i = name_hash(name, n) & (uint32_t)(n_slots - 1); slots[i] >= 0; i = (i + 1) & (uint32_t)(n_slots - 1)) {
        const char *other = c->g->nodes[c->p->steps[slots[i]]].name;
        if (!strncmp(other, name, n) && other[n] == 0) return slots[i];
    }
    return -1;
}

static int is_forward(const dot_ctx *c, int s) {
    vp_phase ph = c->g->nodes[c->p->steps[s]].phase;
    return ph == VP_PHASE_FORWARD || ph == VP_PHASE_LOSS;
}

/* A backward step whose name does not say its forward step (graphs from other tools)
 * sits by the latest forward step whose output it reads: the activation it was saved for. */
static int saved_input_anchor(const dot_ctx *c, const vp_node *n) {
    int best = -1;
    for (int k = 0; k < n->n_inputs; k++) {
        int v = n->inputs[k], ps = v >= 0 ? c->producer_step[v] : -1;
        if (ps > best && is_forward(c, ps)) best = ps;
    }
    return best;
}

static void anchor_fill(dot_ctx *c, const int *slots, int n_slots) {
    for (int s = 0; s < c->p->n_steps; s++) {
        const vp_node *n = &c->g->nodes[c->p->steps[s]];
        const char *grad = n->name ? strstr(n->name, "_grad/") : NULL;
        c->anchor[s] = -1;
        if (n->phase == VP_PHASE_BACKWARD && grad) c->anchor[s] = forward_find(c, slots, n_slots, n->name, (size_t)(grad - n->name));
        if (n->phase == VP_PHASE_BACKWARD && c->anchor[s] < 0) c->anchor[s] = saved_input_anchor(c, n);
        for (int k = 0; n->phase == VP_PHASE_OPTIMIZER && k < n->n_inputs && c->anchor[s] < 0; k++) {
            int v = n->inputs[k], u = v >= 0 ? c->first_use[v] : -1;
            if (u >= 0 && is_forward(c, u)) c->anchor[s] = u;
        }
    }
}

static vp_status anchors_build(dot_ctx *c) {
    int n_slots = 16;
    while (n_slots < 2 * c->p->n_steps + 2) n_slots *= 2;
    int *slots = malloc((size_t)n_slots * sizeof *slots);
    c->anchor = malloc(((size_t)c->p->n_steps + 1) * sizeof *c->anchor);
    if (!slots || !c->anchor) {
        free(slots);
        return VP_ERR_NOMEM;
    }
    for (int i = 0; i < n_slots; i++) slots[i] = -1;
    for (int s = 0; s < c->p->n_steps; s++) {
        const char *name = c->g->nodes[c->p->steps[s]].name;
        if (!is_forward(c, s) || !name || forward_find(c, slots, n_slots, name, strlen(name)) >= 0) continue;
        uint32_t i = name_hash(name, strlen(name)) & (uint32_t)(n_slots - 1);
        while (slots[i] >= 0) i = (i + 1) & (uint32_t)(n_slots - 1);
        slots[i] = s;
    }
    anchor_fill(c, slots, n_slots);
    free(slots);
    int n_bwd = 0, n_pinned = 0;
    for (int s = 0; s < c->p->n_steps; s++) {
        if (c->g->nodes[c->p->steps[s]].phase != VP_PHASE_BACKWARD) continue;
        n_bwd++;
        n_pinned += c->anchor[s] >= 0;
    }
    c->ladder = 2 * n_pinned >= n_bwd;
    return VP_OK;
}

/* One "rank=same" group per forward step that has anchored steps. */
static vp_status write_ranks(const dot_ctx *c) {
    int n = c->p->n_steps;
    int *head = malloc(((size_t)n + 1) * sizeof *head), *next = malloc(((size_t)n + 1) * sizeof *next);
    if (!head || !next) {
        free(head);
        free(next);
        return VP_ERR_NOMEM;
    }
    for (int s = 0; s < n; s++) head[s] = -1;
    for (int s = n - 1; s >= 0; s--)
        if (c->anchor[s] >= 0) next[s] = head[c->anchor[s]], head[c->anchor[s]] = s;
    for (int s = 0; s < n; s++) {
        if (head[s] < 0) continue;
        fprintf(c->f, "  { rank=same; s%d;", s);
        for (int t = head[s]; t >= 0; t = next[t]) fprintf(c->f, " s%d;", t);
        fprintf(c->f, " }\n");
    }
    free(head);
    free(next);
    return VP_OK;
}

/* The same ladder for summary nodes: a backward or optimizer cluster shares the rank of
 * the forward cluster its first anchored step points into. */
static vp_status write_cluster_ranks(const dot_ctx *c) {
    int *anchor = malloc(((size_t)c->n_cl + 1) * sizeof *anchor);
    if (!anchor) return VP_ERR_NOMEM;
    for (int k = 0; k < c->n_cl; k++) anchor[k] = -1;
    for (int s = 0; s < c->p->n_steps; s++) {
        int k = c->cluster_of[s], a = c->anchor[s] >= 0 ? c->cluster_of[c->anchor[s]] : -1;
        if (anchor[k] < 0 && a >= 0 && a != k && c->cl[a].group == GROUP_FWD) anchor[k] = a;
    }
    for (int a = 0; a < c->n_cl; a++) {
        int any = 0;
        for (int k = 0; k < c->n_cl; k++) {
            if (anchor[k] != a) continue;
            if (!any++) fprintf(c->f, "  { rank=same; c%d;", a);
            fprintf(c->f, " c%d;", k);
        }
        if (any) fprintf(c->f, " }\n");
    }
    free(anchor);
    return VP_OK;
}

/* ---- writing ---- */

/* A DOT double-quoted string body: quotes and backslashes escaped, control bytes dropped. */
static void put_esc(FILE *f, const char *s) {
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

/* The last DOT_SHORT_LEN bytes of the last two '/' components: "attn/MatMul". */
static void short_name(const char *name, size_t len, char *out, size_t cap) {
    size_t start = len, seen = 0;
    while (start > 0 && !(name[start - 1] == '/' && ++seen == 2)) start--;
    if (len - start > DOT_SHORT_LEN) {
        start = len - DOT_SHORT_LEN;
        snprintf(out, cap, "...%.*s", (int)(len - start), name + start);
    } else {
        snprintf(out, cap, "%.*s", (int)(len - start), name + start);
    }
}

/* What the second label line says: the module for forward nodes, the forward node for
 * backward ones, the parameter for updates. */
static void node_caption(const vp_node *n, char *out, size_t cap) {
    const char *name = n->name ? n->name : "";
    const char *grad = strstr(name, "_grad/"), *upd = strstr(name, "_update/");
    char buf[64];
    if (grad) {
        short_name(name, (size_t)(grad - name), buf, sizeof buf);
        snprintf(out, cap, "grad %.58s", buf);
    } else if (upd) {
        const char *start = upd;
        int dots = 0;
        while (start > name && !(start[-1] == '.' && ++dots == 2)) start--;
        short_name(start, (size_t)(upd - start), out, cap);
    } else {
        short_name(name, strlen(name), out, cap);
    }
}

static const char *model_name(const vp_graph *g) {
    if (g->path && g->path[0]) return g->path;
    if (g->graph_name && g->graph_name[0]) return g->graph_name;
    return "plan";
}

static void write_header(const dot_ctx *c) {
    const vp_plan *p = c->p;
    char a[32], lb[32], bud[32];
    FILE *f = c->f;
    fprintf(f, "digraph plan {\n  graph [rankdir=TB, fontname=\"Helvetica\", fontsize=12, labelloc=t, newrank=true,\n");
    fprintf(f, "         nodesep=0.15, ranksep=0.3, outputorder=edgesfirst");
    if (p->n_steps > 300) fprintf(f, ", nslimit=4, nslimit1=4, mclimit=0.5"); /* bound dot's time on big plans */
    fprintf(f, ",\n         label=\"");
    put_esc(f, model_name(c->g));
    fprintf(f, ": %d steps, %d buffers\\narena %s, lower bound %s", p->n_steps, p->n_buffers,
            vp_human_bytes(p->arena_bytes, a, sizeof a), vp_human_bytes(p->lower_bound_bytes, lb, sizeof lb));
    if (p->budget_bytes > 0) fprintf(f, ", budget %s", vp_human_bytes(p->budget_bytes, bud, sizeof bud));
    if (p->n_steps > 0) fprintf(f, "; peak at step %d", p->peak_step);
    if (c->collapsed && p->n_steps > DOT_COLLAPSE_STEPS)
        fprintf(f, "\\ncollapsed: more than %d steps, one node per block and phase (%d nodes)", DOT_COLLAPSE_STEPS,
                c->n_cl);
    else if (c->collapsed)
        fprintf(f, "\\ncollapsed: backward steps not matched to forward steps, one node per block and phase (%d nodes)",
                c->n_cl);
    fprintf(f, "\"];\n");
    fprintf(f, "  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=9, height=0.3, "
               "margin=\"0.08,0.03\", penwidth=0.8];\n");
    fprintf(f, "  edge [fontname=\"Helvetica\", fontsize=7, fontcolor=\"#555555\", color=\"#8a8a8a\", "
               "arrowsize=0.5, penwidth=0.7];\n");
}

/* The phases the plan has, and the peak mark. */
static void write_legend(const dot_ctx *c) {
    static const char *const names[] = {"forward", "loss", "backward", "recompute", "optimizer", "comm"};
    int seen[VP_PHASE_COMM + 1] = {0};
    for (int s = 0; s < c->p->n_steps; s++) seen[phase_index(c->g->nodes[c->p->steps[s]].phase)] = 1;
    FILE *f = c->f;
    fprintf(f, "  subgraph cluster_legend {\n    label=\"phases\"; fontsize=10; style=\"rounded\"; color=\"#cccccc\";\n");
    for (int i = 0; i <= VP_PHASE_COMM; i++)
        if (seen[i])
            fprintf(f, "    legend_%d [label=\"%s\", fillcolor=\"%s\", color=\"%s\"];\n", i, names[i], phase_fill[i],
                    phase_line[i]);
    fprintf(f, "    legend_peak [label=\"peak step\", fillcolor=\"#ffffff\", color=\"#d62728\", penwidth=3];\n");
    fprintf(f, "  }\n");
}

static void write_weights_note(FILE *f, const dot_cluster *k) {
    char b[32];
    if (k->n_params)
        fprintf(f, "\\n%d param%s, %s", k->n_params, k->n_params == 1 ? "" : "s", vp_human_bytes(k->param_bytes, b, sizeof b));
    if (k->n_state) fprintf(f, "\\n%d state, %s", k->n_state, vp_human_bytes(k->state_bytes, b, sizeof b));
}

static void write_step(const dot_ctx *c, int s, const char *indent) {
    const vp_node *n = &c->g->nodes[c->p->steps[s]];
    char cap[64];
    node_caption(n, cap, sizeof cap);
    int ph = phase_index(n->phase);
    fprintf(c->f, "%ss%d [label=\"%d ", indent, s, s);
    put_esc(c->f, n->op_type);
    fprintf(c->f, "\\n");
    put_esc(c->f, cap);
    if (s == c->p->peak_step) fprintf(c->f, "\\npeak");
    fprintf(c->f, "\", tooltip=\"");
    put_esc(c->f, n->name);
    fprintf(c->f, "\", fillcolor=\"%s\", color=\"%s\"", phase_fill[ph], phase_line[ph]);
    if (s == c->p->peak_step) fprintf(c->f, ", color=\"#d62728\", penwidth=3, fontcolor=\"#d62728\"");
    fprintf(c->f, "];\n");
}

static void write_cluster_open(const dot_ctx *c, int k) {
    const dot_cluster *cl = &c->cl[k];
    fprintf(c->f, "  subgraph cluster_%d {\n    label=\"", k);
    put_esc(c->f, cl->key);
    if (cl->group != GROUP_FWD) fprintf(c->f, " (%s)", group_name[cl->group]);
    write_weights_note(c->f, cl);
    fprintf(c->f, "\"; fontsize=10; style=\"rounded,filled\"; fillcolor=\"%s\"; color=\"%s\";\n", group_fill[cl->group],
            group_line[cl->group]);
}

/* Every step, inside its cluster; clusters in order of first appearance. */
static vp_status write_steps(const dot_ctx *c) {
    int n = c->p->n_steps;
    int *order = malloc(((size_t)n + 1) * sizeof *order), *start = calloc((size_t)c->n_cl + 2, sizeof *start);
    if (!order || !start) {
        free(order);
        free(start);
        return VP_ERR_NOMEM;
    }
    /* counting sort by cluster (top level last) keeps execution order within each */
    for (int s = 0; s < n; s++) start[(c->cluster_of[s] < 0 ? c->n_cl : c->cluster_of[s]) + 1]++;
    for (int k = 0; k <= c->n_cl; k++) start[k + 1] += start[k];
    for (int s = 0; s < n; s++) order[start[c->cluster_of[s] < 0 ? c->n_cl : c->cluster_of[s]]++] = s;
    for (int i = 0; i < n; i++) {
        int k = c->cluster_of[order[i]];
        int opens = k >= 0 && (i == 0 || c->cluster_of[order[i - 1]] != k);
        if (opens) write_cluster_open(c, k);
        write_step(c, order[i], k >= 0 ? "    " : "  ");
        if (k >= 0 && (i + 1 == n || c->cluster_of[order[i + 1]] != k)) fprintf(c->f, "  }\n");
    }
    free(order);
    free(start);
    return VP_OK;
}

static void write_input(const dot_ctx *c, int v) {
    const vp_value *val = &c->g->values[v];
    char shape[128];
    fprintf(c->f, "  in%d [shape=box, style=\"filled\", fillcolor=\"#e8f4e5\", color=\"#59a14f\", fontsize=8, label=\"", v);
    put_esc(c->f, val->name);
    fprintf(c->f, "\\n%s %s\"];\n", vp_dtype_name(val->dtype),
            val->rank >= 0 ? vp_shape_str(val->rank, val->dims, shape, sizeof shape) : "?");
}

static int rank_group(const dot_ctx *c, int s) { return c->anchor[s] >= 0 ? c->anchor[s] : s; }

/* An edge within one rank gets its size as an xlabel: dot places those after layout,
 * where a flat edge's label would need an extra rank and routes badly in clusters. */
static void write_edge_label(const dot_ctx *c, int64_t bytes, int flat, int loose) {
    char b[32];
    fprintf(c->f, " [%s=\"%s\"%s];\n", flat ? "xlabel" : "label", bytes >= 0 ? vp_human_bytes(bytes, b, sizeof b) : "",
            loose ? ", constraint=false" : "");
}

/* Without the ladder, an edge from one phase group to another (a saved activation read
 * in backward) would span the whole drawing; it is drawn but does not rank its ends. */
static int edge_loose(const dot_ctx *c, int from_step, int to_step) {
    return !c->ladder && group_of(c->g->nodes[c->p->steps[from_step]].phase) != group_of(c->g->nodes[c->p->steps[to_step]].phase);
}

/* Fed inputs are drawn (there are few); parameters, state and constants are not. */
static int drawn_input(const dot_ctx *c, int v) {
    return c->producer_step[v] < 0 && (c->g->values[v].flags & VP_VAL_INPUT) && !is_param(c, v);
}

static int seen_before(const vp_node *n, int k) {
    for (int j = 0; j < k; j++)
        if (n->inputs[j] == n->inputs[k]) return 1;
    return 0;
}

static vp_status write_edges(const dot_ctx *c) {
    char *drawn = calloc((size_t)c->g->n_values + 1, 1);
    if (!drawn) return VP_ERR_NOMEM;
    for (int s = 0; s < c->p->n_steps; s++) {
        const vp_node *n = &c->g->nodes[c->p->steps[s]];
        for (int k = 0; k < n->n_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0 || seen_before(n, k)) continue;
            int flat = 0, loose = 0;
            if (c->producer_step[v] >= 0) {
                fprintf(c->f, "  s%d -> s%d", c->producer_step[v], s);
                flat = rank_group(c, c->producer_step[v]) == rank_group(c, s);
                loose = edge_loose(c, c->producer_step[v], s);
            } else if (drawn_input(c, v)) {
                if (!drawn[v]) write_input(c, v);
                drawn[v] = 1;
                fprintf(c->f, "  in%d -> s%d", v, s);
            } else {
                continue;
            }
            write_edge_label(c, value_bytes(c, v), flat, loose);
        }
    }
    free(drawn);
    return VP_OK;
}

/* ---- the collapsed drawing ---- */

typedef struct dot_link {
    int from, to;   /* cluster ids; from < -1 is input value -from-2 */
    int64_t bytes;
    int count;
} dot_link;

static int link_cmp(const void *a, const void *b) {
    const dot_link *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    return x->to < y->to ? -1 : x->to > y->to;
}

static void write_summary_node(const dot_ctx *c, int k) {
    const dot_cluster *cl = &c->cl[k];
    int ph = cl->group == GROUP_BWD ? VP_PHASE_BACKWARD : cl->group == GROUP_OPT ? VP_PHASE_OPTIMIZER
             : cl->group == GROUP_COMM ? VP_PHASE_COMM : VP_PHASE_FORWARD;
    fprintf(c->f, "  c%d [label=\"", k);
    put_esc(c->f, cl->key[0] ? cl->key : "(top level)");
    fprintf(c->f, "\\n%s: %d step%s", group_name[cl->group], cl->n_steps, cl->n_steps == 1 ? "" : "s");
    write_weights_note(c->f, cl);
    if (cl->has_peak) fprintf(c->f, "\\npeak (step %d)", c->p->peak_step);
    fprintf(c->f, "\", fillcolor=\"%s\", color=\"%s\"", phase_fill[ph], phase_line[ph]);
    if (cl->has_peak) fprintf(c->f, ", color=\"#d62728\", penwidth=3, fontcolor=\"#d62728\"");
    fprintf(c->f, "];\n");
}

/* Edges between clusters, summed; returns how many links went into *out. */
static int collect_links(const dot_ctx *c, dot_link **out) {
    size_t cap = 16, n = 0;
    dot_link *l = malloc(cap * sizeof *l);
    for (int s = 0; l && s < c->p->n_steps; s++) {
        const vp_node *nd = &c->g->nodes[c->p->steps[s]];
        for (int k = 0; k < nd->n_inputs; k++) {
            int v = nd->inputs[k], ps = v >= 0 ? c->producer_step[v] : -1;
            if (v < 0 || seen_before(nd, k) || (ps < 0 && !drawn_input(c, v))) continue;
            int from = ps >= 0 ? c->cluster_of[ps] : -v - 2;
            if (from == c->cluster_of[s]) continue;
            if (n == cap) {
                dot_link *nl = realloc(l, (cap *= 2) * sizeof *l);
                if (!nl) break;
                l = nl;
            }
            int64_t b = value_bytes(c, v);
            l[n++] = (dot_link){from, c->cluster_of[s], b > 0 ? b : 0, 1};
        }
    }
    if (!l) return -1;
    qsort(l, n, sizeof *l, link_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && l[m - 1].from == l[i].from && l[m - 1].to == l[i].to) {
            l[m - 1].bytes += l[i].bytes;
            l[m - 1].count++;
        } else {
            l[m++] = l[i];
        }
    }
    *out = l;
    return (int)m;
}

static vp_status write_collapsed(const dot_ctx *c) {
    for (int k = 0; k < c->n_cl; k++) write_summary_node(c, k);
    dot_link *l;
    int n = collect_links(c, &l);
    if (n < 0) return VP_ERR_NOMEM;
    char b[32];
    for (int i = 0; i < n; i++) {
        if (l[i].from < -1 && (i == 0 || l[i - 1].from != l[i].from)) write_input(c, -l[i].from - 2);
        if (l[i].from < -1) fprintf(c->f, "  in%d -> c%d", -l[i].from - 2, l[i].to);
        else fprintf(c->f, "  c%d -> c%d", l[i].from, l[i].to);
        fprintf(c->f, " [label=\"");
        if (l[i].count > 1) fprintf(c->f, "%d tensors, ", l[i].count);
        fprintf(c->f, "%s", vp_human_bytes(l[i].bytes, b, sizeof b));
        int loose = !c->ladder && l[i].from >= 0 && c->cl[l[i].from].group != c->cl[l[i].to].group;
        fprintf(c->f, "\", penwidth=%.2f%s];\n", l[i].count > 8 ? 2.0 : 0.7 + l[i].count * 0.15,
                loose ? ", constraint=false" : "");
    }
    free(l);
    return VP_OK;
}

static vp_status write_graph(dot_ctx *c) {
    vp_status s = clusters_build(c);
    /* too many blocks even collapsed: group their indices in ranges, then drop them */
    int max_summary = c->ladder ? DOT_MAX_SUMMARY : DOT_LOOSE_SUMMARY;
    while (!s && c->collapsed && c->n_cl > max_summary && c->bucket) {
        c->bucket = c->bucket < 1024 ? c->bucket * 4 : 0;
        s = clusters_build(c);
    }
    if (s) return s;
    write_header(c);
    write_legend(c);
    s = c->collapsed ? write_collapsed(c) : write_steps(c);
    if (!s && !c->collapsed) s = write_edges(c);
    if (!s) s = c->collapsed ? write_cluster_ranks(c) : write_ranks(c);
    fprintf(c->f, "}\n");
    return s;
}

vp_status vp_dot_write(const vp_plan *p, const char *path, vp_error *err) {
    if (!p || !p->g) return vp_fail(err, VP_ERR_INVALID, "%s: no plan to draw", path);
    FILE *f = fopen(path, "w");
    if (!f) return vp_fail(err, VP_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    dot_ctx c = {.p = p, .g = p->g, .f = f, .bucket = 1, .collapsed = p->n_steps > DOT_COLLAPSE_STEPS};
    vp_status s = maps_build(&c);
    if (!s) s = anchors_build(&c);
    if (!c.ladder && p->n_steps > DOT_LOOSE_STEPS) c.collapsed = 1;
    if (!s) s = write_graph(&c);
    ctx_free(&c);
    int bad_write = ferror(f);
    if (fclose(f) != 0) bad_write = 1;
    if (s == VP_ERR_NOMEM) return vp_fail(err, s, "%s: out of memory drawing the plan", path);
    if (!s && bad_write) return vp_fail(err, VP_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return s;
}
