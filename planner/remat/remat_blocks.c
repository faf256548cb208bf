/* The chain of blocks: cut at articulation points, identical blocks found, what each
 * option keeps.  The menus are built in remat_menu.c.  See remat_chain.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remat/cost.h"
#include "remat/remat_chain.h"

int vp_chain_read_by_backward(const vp_graph *g, int v) {
    const vp_value *val = &g->values[v];
    for (int c = 0; c < val->n_consumers; c++)
        if (g->nodes[val->consumers[c]].phase == VP_PHASE_BACKWARD) return 1;
    return 0;
}

int64_t vp_chain_value_bytes(const vp_graph *g, int v) {
    return vp_value_numel(&g->values[v]) * (int64_t)vp_dtype_size(g->values[v].dtype);
}

/* Values the layers share, kept for the whole step: a forward activation read by the
 * forward nodes of two layers or more (T5's encoder output, which every decoder layer
 * attends to; its relative position bias, computed in the first layer and added in
 * each).  They cross every layer edge between their readers, so with them counted no
 * edge would be a cut.  The residual stream is read by the next layer alone. */
static void pin_shared(const vp_graph *g, const int *fwd, int nf, const int *pos, const int *layer_of, char *pinned) {
    for (int i = 0; i < nf; i++) {
        const vp_node *n = &g->nodes[fwd[i]];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k], first = -1;
            for (int c = 0; v >= 0 && c < g->values[v].n_consumers && !pinned[v]; c++) {
                int cp = pos[g->values[v].consumers[c]], l = cp >= 0 ? layer_of[cp] : -1;
                if (l < 0) continue;
                if (first < 0) first = l;
                else if (l != first) pinned[v] = 1;
            }
        }
    }
}

/* A block's layer: the one layer its nodes with a path are in, -1 for none, -2 for
 * several (a layer edge that is no cut: they cannot be parted). */
static int block_layer(const block *bk, const int *layer_of) {
    int layer = -1;
    for (int i = bk->first; i <= bk->last; i++) {
        if (layer_of[i] < 0 || layer_of[i] == layer) continue;
        if (layer >= 0) return -2;
        layer = layer_of[i];
    }
    return layer;
}

/* The blocks of one layer joined into one: a transformer layer's attention and MLP halves
 * meet at a cut (the residual stream), but checkpointing chooses per layer, as Megatron
 * and PyTorch's checkpoint_sequential do, and the menu of the whole layer holds every
 * choice the halves had (their shared cut is a value like any other in it).  A piece
 * with no path (a cast the precision pass added) between two pieces of one layer is in
 * that layer; before the first layer or after the last it stays on its own.  Counts the
 * layers that end up as one block of their own. */
static vp_status join_layers(block *b, int *nb, const int *layer_of, int nf, int n_layers, int *whole, vp_error *err) {
    int *label = malloc(((size_t)*nb + 1) * sizeof *label), *span = malloc(((size_t)n_layers + 1) * 2 * sizeof *span);
    if (!label || !span) {
        free(label);
        free(span);
        return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    for (int k = 0; k < *nb; k++) label[k] = block_layer(&b[k], layer_of);
    int m = 0;
    for (int k = 0; k < *nb; k++) {
        int cur = m > 0 ? b[m - 1].layer : -1, join = 0;
        if (cur >= 0 && label[k] == cur) join = 1;
        if (cur >= 0 && label[k] == -1) { /* no path: joins when the layer goes on after it */
            int next = k + 1;
            while (next < *nb && label[next] == -1) next++;
            join = next < *nb && label[next] == cur;
        }
        if (join) {
            b[m - 1].last = b[k].last;
            b[m - 1].cut = b[k].cut;
            continue;
        }
        b[m] = b[k];
        b[m++].layer = label[k] >= 0 ? label[k] : -1;
    }
    *nb = m;
    /* a layer is whole in a block when all its nodes are inside it */
    for (int l = 0; l < n_layers; l++) span[2 * l] = nf, span[2 * l + 1] = -1;
    for (int i = 0; i < nf; i++)
        if (layer_of[i] >= 0) {
            int l = layer_of[i];
            if (i < span[2 * l]) span[2 * l] = i;
            if (i > span[2 * l + 1]) span[2 * l + 1] = i;
        }
    *whole = 0;
    for (int k = 0; k < m; k++) {
        int l = b[k].layer;
        *whole += l >= 0 && b[k].first <= span[2 * l] && span[2 * l + 1] <= b[k].last;
    }
    free(label);
    free(span);
    return VP_OK;
}

vp_status vp_chain_find(const vp_graph *g, const vp_device_profile *dev, chain *out, vp_error *err) {
    memset(out, 0, sizeof *out);
    int *fwd = malloc(((size_t)g->n_nodes + 1) * sizeof *fwd), *pos = malloc(((size_t)g->n_nodes + 1) * sizeof *pos);
    int *cross = NULL;
    block *b = NULL;
    int nf = 0, nb = 0;
    vp_status s = fwd && pos ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (int i = 0; !s && i < g->n_nodes; i++) {
        pos[i] = -1;
        const vp_node *n = &g->nodes[i];
        if (!n->folded && n->phase == VP_PHASE_FORWARD) {
            pos[i] = nf;
            fwd[nf++] = i;
        }
    }
    int *layer_of = NULL, *piece_cut = NULL; /* piece_cut: see vp_chain_build_menu */
    if (!s) {
        cross = calloc((size_t)nf + 1, sizeof *cross);
        b = calloc((size_t)nf + 1, sizeof *b);
        layer_of = malloc(((size_t)nf + 1) * sizeof *layer_of);
        piece_cut = malloc(((size_t)nf + 1) * sizeof *piece_cut);
        out->piece_cuts = malloc(((size_t)nf + 1) * sizeof *out->piece_cuts);
        out->pinned = calloc((size_t)g->n_values + 1, 1);
        if (!cross || !b || !layer_of || !piece_cut || !out->piece_cuts || !out->pinned) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    if (!s) {
        out->n_layers = vp_chain_layers(g, fwd, nf, layer_of);
        pin_shared(g, fwd, nf, pos, layer_of, out->pinned);
    }
    /* cross[i]: forward activations live across the boundary after position i */
    for (int i = 0; !s && i < nf; i++) {
        const vp_node *n = &g->nodes[fwd[i]];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0 || out->pinned[v]) continue;
            int last = i;
            const vp_value *val = &g->values[v];
            for (int c = 0; c < val->n_consumers; c++) {
                const vp_node *cn = &g->nodes[val->consumers[c]];
                int cp = pos[val->consumers[c]];
                if (cp < 0 && cn->phase == VP_PHASE_LOSS) cp = nf; /* the loss reads past the end */
                if (cp > last) last = cp;
            }
            for (int j = i; j < last && j < nf; j++) cross[j]++;
        }
    }
    int start = 0;
    for (int i = 0; !s && i < nf; i++) {
        int cut = -1;
        if (cross[i] == 1 && i + 1 < nf) {
            const vp_node *n = &g->nodes[fwd[i]];
            for (int k = 0; k < n->n_outputs; k++) {
                int v = n->outputs[k];
                if (v < 0 || out->pinned[v]) continue;
                for (int c = 0; c < g->values[v].n_consumers; c++)
                    if (pos[g->values[v].consumers[c]] > i) cut = v;
            }
        }
        piece_cut[i] = -2;
        if (cut < 0 && i + 1 < nf) continue;
        piece_cut[i] = cut;
        out->piece_cuts[out->n_pieces++] = cut;
        block *bk = &b[nb++];
        bk->first = start;
        bk->last = i;
        bk->cut = cut;
        start = i + 1;
    }
    if (!s) s = join_layers(b, &nb, layer_of, nf, out->n_layers, &out->n_layer_blocks, err);
    /* a block's signature: its ops, output sizes and which outputs the backward reads;
     * identical blocks (transformer layers) get their menu once and share it */
    for (int k = 0; !s && k < nb; k++) {
        block *bk = &b[k];
        uint64_t h = 1469598103934665603ull;
        for (int i = bk->first; i <= bk->last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            for (const char *p = n->op_type; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
            for (int k2 = 0; k2 < n->n_inputs; k2++) /* the shapes read decide the cost */
                if (n->inputs[k2] >= 0) h = (h ^ (uint64_t)vp_chain_value_bytes(g, n->inputs[k2])) * 1099511628211ull;
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o];
                if (v < 0) continue;
                h = (h ^ (uint64_t)vp_chain_value_bytes(g, v) ^ ((uint64_t)(v == bk->cut) << 62) ^
                     ((uint64_t)out->pinned[v] << 61) ^
                     ((uint64_t)vp_chain_read_by_backward(g, v) << 63)) * 1099511628211ull;
            }
        }
        h = (h ^ (uint64_t)(bk->last - bk->first)) * 1099511628211ull;
        bk->signature = h;
        bk->cut_bytes = bk->cut >= 0 ? vp_chain_value_bytes(g, bk->cut) : 0;
        int same = -1;
        for (int j = k - 1; j >= 0 && same < 0; j--)
            if (b[j].signature == h) same = j;
        if (same >= 0) {
            block *o = &b[same];
            bk->all_bytes = o->all_bytes;
            bk->fwd_seconds = o->fwd_seconds;
            bk->menu_owner = o->menu_owner;
            bk->n_opts = o->n_opts;
            bk->kept = o->kept;
            bk->peak = o->peak;
            bk->time = o->time;
            bk->drop_start = o->drop_start;
            bk->drops_cut = o->drops_cut;
            bk->none = o->none;
            bk->drops = o->drops;
            continue;
        }
        bk->menu_owner = k;
        for (int i = bk->first; i <= bk->last; i++) {
            const vp_node *n = &g->nodes[fwd[i]];
            vp_node_cost c = vp_cost_node(g, n);
            bk->fwd_seconds += vp_cost_seconds(&c, dev, 0);
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o];
                if (v < 0 || v == bk->cut || out->pinned[v] || !vp_chain_read_by_backward(g, v)) continue;
                bk->all_bytes += vp_chain_value_bytes(g, v);
            }
        }
        s = vp_chain_build_menu(g, dev, fwd, pos, out->pinned, piece_cut, bk, err);
    }
    free(pos);
    free(cross);
    free(layer_of);
    free(piece_cut);
    out->fwd = fwd;
    out->nf = nf;
    out->b = b;
    out->nb = nb;
    if (s) vp_chain_free(out);
    return s;
}


void vp_chain_free(chain *c) {
    for (int k = 0; c->b && k < c->nb; k++)
        if (c->b[k].menu_owner == k) vp_chain_free_menu(&c->b[k]);
    free(c->b);
    free(c->fwd);
    free(c->pinned);
    free(c->piece_cuts);
    memset(c, 0, sizeof *c);
}

void vp_chain_keep(const vp_graph *g, const chain *c, const int *choice, char *keep) {
    for (int v = 0; v < g->n_values; v++) keep[v] = 1; /* pinned values stay so */
    for (int k = 0; k < c->nb; k++) {
        const block *b = &c->b[k];
        int o = choice ? choice[k] : vp_chain_none(b);
        int from = o == OPT_DROPPED ? 0 : b->drop_start[o], to = o == OPT_DROPPED ? b->last - b->first + 1 : b->drop_start[o + 1];
        if ((o == OPT_DROPPED || (o >= 0 && b->drops_cut[o])) && b->cut >= 0) keep[b->cut] = 0;
        for (int i = from; i < to; i++) { /* a dropped segment block recomputes all its nodes */
            const vp_node *n = &g->nodes[c->fwd[b->first + (o == OPT_DROPPED ? i : b->drops[i])]];
            for (int j = 0; j < n->n_outputs; j++)
                if (n->outputs[j] >= 0 && n->outputs[j] != b->cut && !c->pinned[n->outputs[j]]) keep[n->outputs[j]] = 0;
        }
    }
}

char vp_chain_letter(const block *b, int o) {
    char c = o == OPT_DROPPED ? 'D' : o == OPT_ALL ? 'A' : o == vp_chain_none(b) ? 'N' : 'S';
    return o >= 0 && b->drops_cut[o] ? (char)(c - 'A' + 'a') : c;
}
