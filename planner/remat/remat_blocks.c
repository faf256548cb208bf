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
    if (!s) {
        cross = calloc((size_t)nf + 1, sizeof *cross);
        b = calloc((size_t)nf + 1, sizeof *b);
        if (!cross || !b) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    }
    /* cross[i]: forward activations live across the boundary after position i */
    for (int i = 0; !s && i < nf; i++) {
        const vp_node *n = &g->nodes[fwd[i]];
        for (int k = 0; k < n->n_outputs; k++) {
            int v = n->outputs[k];
            if (v < 0) continue;
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
                if (v < 0) continue;
                for (int c = 0; c < g->values[v].n_consumers; c++)
                    if (pos[g->values[v].consumers[c]] > i) cut = v;
            }
        }
        if (cut < 0 && i + 1 < nf) continue;
        block *bk = &b[nb++];
        bk->first = start;
        bk->last = i;
        bk->cut = cut;
        start = i + 1;
    }
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
                if (v < 0 || v == bk->cut || !vp_chain_read_by_backward(g, v)) continue;
                bk->all_bytes += vp_chain_value_bytes(g, v);
            }
        }
        s = vp_chain_build_menu(g, dev, fwd, pos, bk, err);
    }
    free(pos);
    free(cross);
    out->fwd = fwd;
    out->nf = nf;
    out->b = b;
    out->nb = nb;
    if (s) vp_chain_free(out);
    return s;
}


void vp_chain_free(chain *c) {
    for (int k = 0; c->b && k < c->nb; k++)
        if (c->b[k].menu_owner == k) {
            free(c->b[k].kept);
            free(c->b[k].peak);
            free(c->b[k].time);
            free(c->b[k].drop_start);
            free(c->b[k].drops_cut);
            free(c->b[k].drops);
        }
    free(c->b);
    free(c->fwd);
    memset(c, 0, sizeof *c);
}

void vp_chain_keep(const vp_graph *g, const chain *c, const int *choice, char *keep) {
    for (int v = 0; v < g->n_values; v++) keep[v] = 1;
    for (int k = 0; k < c->nb; k++) {
        const block *b = &c->b[k];
        int o = choice ? choice[k] : vp_chain_none(b);
        int from = o == OPT_DROPPED ? 0 : b->drop_start[o], to = o == OPT_DROPPED ? b->last - b->first + 1 : b->drop_start[o + 1];
        if ((o == OPT_DROPPED || (o >= 0 && b->drops_cut[o])) && b->cut >= 0) keep[b->cut] = 0;
        for (int i = from; i < to; i++) { /* a dropped segment block recomputes all its nodes */
            const vp_node *n = &g->nodes[c->fwd[b->first + (o == OPT_DROPPED ? i : b->drops[i])]];
            for (int j = 0; j < n->n_outputs; j++)
                if (n->outputs[j] >= 0 && n->outputs[j] != b->cut) keep[n->outputs[j]] = 0;
        }
    }
}

char vp_chain_letter(const block *b, int o) {
    char c = o == OPT_DROPPED ? 'D' : o == OPT_ALL ? 'A' : o == vp_chain_none(b) ? 'N' : 'S';
    return o >= 0 && b->drops_cut[o] ? (char)(c - 'A' + 'a') : c;
}
