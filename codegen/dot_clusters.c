/* Steps into clusters: which box of the drawing each step sits in.
 *
 * In: the plan and the per-value maps (dot.c).  Out: c->cl, one cluster per (block key,
 * phase group), and c->cluster_of for every step.  The block key comes from the names
 * torch exports ("/blocks.0/attn/MatMul" -> "blocks.0"); backward steps take their
 * forward step's key and updates their parameter's first reader's, so a block's forward,
 * backward and optimizer clusters carry the same name.  Each cluster counts the weights
 * it reads, since those are not drawn. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot_internal.h"

/* ---- names -> block keys ---- */

int vp_dot_group_of(vp_phase ph) {
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

void vp_dot_clusters_clear(dot_ctx *c) {
    for (int i = 0; i < c->n_cl; i++) free(c->cl[i].key);
    c->n_cl = 0;
    for (int i = 0; c->slots && i < c->n_slots; i++) c->slots[i] = -1;
}

/* Weights are not drawn; each cluster says how many it reads and their size. */
static void clusters_count_weights(dot_ctx *c) {
    for (int v = 0; v < c->g->n_values; v++) {
        int s = c->first_use[v];
        if (c->producer_step[v] >= 0 || s < 0 || c->cluster_of[s] < 0) continue;
        dot_cluster *k = &c->cl[c->cluster_of[s]];
        int64_t b = vp_dot_value_bytes(c, v);
        if (vp_dot_is_param(c, v)) {
            k->n_params++;
            k->param_bytes += b > 0 ? b : 0;
        } else if (vp_dot_is_state(c, v)) {
            k->n_state++;
            k->state_bytes += b > 0 ? b : 0;
        }
    }
}

vp_status vp_dot_clusters_build(dot_ctx *c) {
    char key[DOT_KEY_LEN];
    vp_dot_clusters_clear(c);
    for (int s = 0; s < c->p->n_steps; s++) {
        step_key(c, s, key);
        int k = cluster_get(c, key, vp_dot_group_of(c->g->nodes[c->p->steps[s]].phase));
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
