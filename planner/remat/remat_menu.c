/* A block's menu of what to keep: the Pareto frontier of kept bytes against recompute
 * time over the sets of its nodes to recompute, with each option's own backward peak.
 * See remat_chain.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remat/cost.h"
#include "remat/remat_chain.h"

static int is_expensive(const char *op) {
    return !strcmp(op, "MatMul") || !strcmp(op, "Gemm") || !strcmp(op, "Conv") || !strcmp(op, "ConvTranspose");
}

/* One block's nodes as the menu search sees them. */
typedef struct local {
    int n;
    const vp_graph *g;
    const int *node;   /* graph node per block position */
    const int *pos;    /* graph node -> forward position */
    int first, cut;
    int cut_free;      /* the cut is dropped like any value (an option that recomputes it) */
    const char *pinned; /* values every option keeps (the layers share them) */
    double *cost;
    char *dropped, *rc;
} local;

/* The cut, and values pinned for the whole step, are kept apart from the options. */
static int is_cut(const local *l, int v) { return (!l->cut_free && v == l->cut) || l->pinned[v]; }

/* What dropping the marked nodes costs: the nodes actually recomputed (those whose
 * outputs the backward reads, or a recomputed node reads; the cut is kept apart) and
 * their time, and the bytes still kept: outputs of nodes not dropped that the backward
 * reads or that a recompute reads as its source. */
static void evaluate(local *l, int64_t *kept, double *time) {
    const vp_graph *g = l->g;
    *time = 0;
    *kept = 0;
    for (int x = l->n - 1; x >= 0; x--) {
        const vp_node *n = &g->nodes[l->node[x]];
        l->rc[x] = 0;
        if (!l->dropped[x]) continue;
        for (int o = 0; o < n->n_outputs && !l->rc[x]; o++) {
            int v = n->outputs[o];
            if (v < 0 || is_cut(l, v)) continue;
            if (vp_chain_read_by_backward(g, v)) l->rc[x] = 1;
            for (int c = 0; c < g->values[v].n_consumers && !l->rc[x]; c++) {
                int y = l->pos[g->values[v].consumers[c]] - l->first;
                if (y > x && y < l->n && l->rc[y]) l->rc[x] = 1;
            }
        }
        if (l->rc[x]) *time += l->cost[x];
    }
    for (int x = 0; x < l->n; x++) {
        if (l->dropped[x]) continue;
        const vp_node *n = &g->nodes[l->node[x]];
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o], read = 0;
            if (v < 0 || is_cut(l, v)) continue;
            read = vp_chain_read_by_backward(g, v);
            for (int c = 0; c < g->values[v].n_consumers && !read; c++) {
                int y = l->pos[g->values[v].consumers[c]] - l->first;
                read = y > x && y < l->n && l->rc[y];
            }
            if (read) *kept += vp_chain_value_bytes(g, v);
        }
    }
}

/* The first and last backward node (graph ids: the backward runs in graph order) that
 * read v; INT32_MAX / -1 when none does. */
static void backward_reads(const vp_graph *g, int v, int *first, int *last) {
    *first = INT32_MAX;
    *last = -1;
    for (int c = 0; c < g->values[v].n_consumers; c++) {
        int r = g->values[v].consumers[c];
        if (g->nodes[r].phase != VP_PHASE_BACKWARD) continue;
        if (r < *first) *first = r;
        if (r > *last) *last = r;
    }
}

/* The block's own peak during its backward under the option evaluate() last saw: kept
 * values live until their last reader (a backward node, or a recompute reading them as
 * a source), recomputed ones from the first backward node that needs them, directly or
 * through another recompute, to their last reader.  The cut is counted apart. */
static int64_t local_peak(local *l, int *need) {
    const vp_graph *g = l->g;
    for (int x = l->n - 1; x >= 0; x--) { /* need[x]: when x's recompute must run */
        need[x] = INT32_MAX;
        if (!l->rc[x]) continue;
        const vp_node *n = &g->nodes[l->node[x]];
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o], f, last;
            if (v < 0 || is_cut(l, v)) continue;
            backward_reads(g, v, &f, &last);
            if (f < need[x]) need[x] = f;
            for (int c = 0; c < g->values[v].n_consumers; c++) {
                int y = l->pos[g->values[v].consumers[c]] - l->first;
                if (y > x && y < l->n && l->rc[y] && need[y] < need[x]) need[x] = need[y];
            }
        }
    }
    int64_t peak = 0;
    int start = INT32_MAX; /* the block's backward begins at its first read */
    for (int pass = 0; pass < 2; pass++)
        for (int x = 0; x < l->n; x++) {
            const vp_node *n = &g->nodes[l->node[x]];
            for (int o = 0; o < n->n_outputs; o++) {
                int v = n->outputs[o], f, last;
                if (v < 0 || is_cut(l, v) || (l->dropped[x] && !l->rc[x])) continue;
                backward_reads(g, v, &f, &last);
                if (!pass) {
                    if (f < start) start = f;
                    continue;
                }
                /* an instant when this value appears: sum what is live then */
                int at = l->rc[x] ? need[x] : start;
                if (at == INT32_MAX) continue;
                int64_t live = 0;
                for (int y = 0; y < l->n; y++) {
                    const vp_node *m = &g->nodes[l->node[y]];
                    if (l->dropped[y] && !l->rc[y]) continue;
                    for (int o2 = 0; o2 < m->n_outputs; o2++) {
                        int u = m->outputs[o2], f2, last2;
                        if (u < 0 || is_cut(l, u)) continue;
                        backward_reads(g, u, &f2, &last2);
                        for (int c = 0; c < g->values[u].n_consumers; c++) {
                            int z = l->pos[g->values[u].consumers[c]] - l->first;
                            if (z > y && z < l->n && l->rc[z] && need[z] != INT32_MAX && need[z] > last2) last2 = need[z];
                        }
                        int from = l->rc[y] ? need[y] : INT32_MIN;
                        if (last2 < 0 || from > at || last2 < at) continue;
                        live += vp_chain_value_bytes(g, u);
                    }
                }
                if (live > peak) peak = live;
            }
        }
    return peak;
}

/* Marks a move dropped: node x alone, or with the nodes that would otherwise be kept
 * only as its recompute sources (producers in the block whose outputs the backward does
 * not read: a Relu is worth dropping only together with the BatchNorm before it).
 * Returns the number of nodes marked, listed in move. */
static int mark_move(local *l, int x, int with_sources, int *move) {
    const vp_graph *g = l->g;
    int m = 0, done = 0;
    l->dropped[x] = 1;
    move[m++] = x;
    while (with_sources && done < m) {
        const vp_node *n = &g->nodes[l->node[move[done++]]];
        for (int j = 0; j < n->n_inputs; j++) {
            int u = n->inputs[j], p = u >= 0 ? g->values[u].producer : -1;
            int y = p >= 0 && l->pos[p] >= 0 ? l->pos[p] - l->first : -1;
            if (y < 0 || y >= l->n || l->dropped[y] || u == l->cut || l->pinned[u] || vp_chain_read_by_backward(g, u)) continue;
            l->dropped[y] = 1;
            move[m++] = y;
        }
    }
    return m;
}

/* Options while the menu is built: each a set of dropped positions. */
typedef struct option {
    int64_t kept;  /* with the cut when the option keeps it */
    double time;
    int start, n;  /* into the shared list of positions */
    int cut_free;  /* the option drops the cut too */
} option;

typedef struct menu_build {
    option *opt;
    int n_opt, cap_opt;
    int *pos;
    int n_pos, cap_pos;
} menu_build;

static int menu_add(menu_build *mb, const local *l, int64_t kept, double time) {
    if (mb->n_opt == mb->cap_opt) {
        int cap = mb->cap_opt ? 2 * mb->cap_opt : 32;
        option *o = realloc(mb->opt, (size_t)cap * sizeof *o);
        if (!o) return 0;
        mb->opt = o;
        mb->cap_opt = cap;
    }
    if (mb->n_pos + l->n > mb->cap_pos) {
        int cap = 2 * (mb->cap_pos + l->n);
        int *p = realloc(mb->pos, (size_t)cap * sizeof *p);
        if (!p) return 0;
        mb->pos = p;
        mb->cap_pos = cap;
    }
    option *o = &mb->opt[mb->n_opt++];
    o->kept = kept + (l->cut_free || l->cut < 0 ? 0 : vp_chain_value_bytes(l->g, l->cut));
    o->time = time;
    o->cut_free = l->cut_free;
    o->start = mb->n_pos;
    for (int x = 0; x < l->n; x++)
        if (l->dropped[x]) mb->pos[mb->n_pos++] = x;
    o->n = mb->n_pos - o->start;
    return 1;
}

static int by_kept_then_time(const void *x, const void *y) {
    const option *a = x, *b = y;
    if (a->kept != b->kept) return a->kept < b->kept ? -1 : 1;
    return a->time < b->time ? -1 : a->time > b->time;
}

/* Keeps the Pareto frontier of (kept, time) among mb's options, least kept first;
 * returns how many. */
static int pareto(menu_build *mb) {
    qsort(mb->opt, (size_t)mb->n_opt, sizeof *mb->opt, by_kept_then_time);
    double best_time = 1e300;
    int nf = 0;
    for (int i = 0; i < mb->n_opt; i++)
        if (mb->opt[i].time < best_time) {
            best_time = mb->opt[i].time;
            mb->opt[nf++] = mb->opt[i];
        }
    mb->n_opt = nf;
    return nf;
}

/* Every subset of a small block's nodes, evaluated. */
static int enumerate_subsets(local *l, menu_build *mb) {
    for (uint32_t mask = 0; mask < (1u << l->n); mask++) {
        for (int x = 0; x < l->n; x++) l->dropped[x] = (mask >> x) & 1;
        int64_t kept;
        double time;
        evaluate(l, &kept, &time);
        if (!menu_add(mb, l, kept, time)) return 0;
    }
    return 1;
}

/* A chain of options for larger blocks: greedily drop the node (or the node with the
 * sources it would keep alive) that frees the most kept bytes per second of recompute. */
static int greedy_chain(local *l, menu_build *mb, int *move, int *best_move) {
    int64_t kept;
    double time;
    memset(l->dropped, 0, (size_t)l->n);
    evaluate(l, &kept, &time);
    if (!menu_add(mb, l, kept, time)) return 0;
    for (;;) {
        int best = -1, best_m = 0;
        double best_ratio = 0;
        for (int x = 0; x < l->n; x++) {
            for (int with_sources = 0; !l->dropped[x] && with_sources < 2; with_sources++) {
                int m = mark_move(l, x, with_sources, move);
                int64_t k2;
                double t2;
                evaluate(l, &k2, &t2);
                for (int i = 0; i < m; i++) l->dropped[move[i]] = 0;
                if (with_sources && m == 1) break; /* the same move as alone */
                if (k2 >= kept) continue;
                double ratio = (double)(kept - k2) / (t2 - time > 1e-12 ? t2 - time : 1e-12);
                if (best < 0 || ratio > best_ratio) {
                    best = x, best_ratio = ratio, best_m = m;
                    memcpy(best_move, move, (size_t)m * sizeof *move);
                }
            }
        }
        if (best < 0) break;
        for (int i = 0; i < best_m; i++) l->dropped[best_move[i]] = 1;
        evaluate(l, &kept, &time);
        if (!menu_add(mb, l, kept, time)) return 0;
    }
    /* the cheap ops alone, as the selective option of Korthikanti et al. */
    for (int x = 0; x < l->n; x++) l->dropped[x] = !is_expensive(l->g->nodes[l->node[x]].op_type);
    evaluate(l, &kept, &time);
    if (!menu_add(mb, l, kept, time)) return 0;
    for (int x = 0; x < l->n; x++) l->dropped[x] = 1;
    evaluate(l, &kept, &time);
    return menu_add(mb, l, kept, time);
}

void vp_chain_free_menu(block *b) {
    free(b->kept);
    free(b->peak);
    free(b->time);
    free(b->drops_cut);
    free(b->drop_start);
    free(b->drops);
}

/* A block joined from pieces (a layer's halves, each ending at a cut): every choice of
 * one option per piece, the pieces' own menus built as blocks of their own, so the
 * layer's menu holds what the pieces offered apart (the greedy chain over the whole
 * layer finds some of them only).  A piece's option that recomputes its cut drops the
 * value between it and the next piece; the last piece keeps the block's cut (the
 * variants that drop it are made from the frontier after).  At most MAX_COMBOS, each
 * piece's menu thinned evenly when the product is larger. */
static int piece_combos(local *l, menu_build *mb, const block *b, const vp_device_profile *dev, const int *fwd,
                        const int *piece_cut, vp_error *err) {
    enum { MAX_PIECES = 8, MAX_COMBOS = 4096 };
    block pc[MAX_PIECES];
    int np = 0, start = b->first, ok = 1;
    for (int i = b->first; i <= b->last && np < MAX_PIECES; i++) {
        if (piece_cut[i] == -2 && i < b->last) continue;
        memset(&pc[np], 0, sizeof pc[np]);
        pc[np].first = start;
        pc[np].last = i;
        pc[np].cut = i == b->last ? b->cut : piece_cut[i];
        start = i + 1;
        np++;
    }
    if (np < 2 || start <= b->last) return 1; /* one piece, or more than MAX_PIECES: the greedy chain alone */
    int built = 0;
    for (; ok && built < np; built++)
        ok = !vp_chain_build_menu(l->g, dev, fwd, l->pos, l->pinned, NULL, &pc[built], err);
    /* how many of each piece's options are combined, thinned evenly */
    int count[MAX_PIECES], per = 1;
    for (;; per++) { /* the largest per with per^np <= MAX_COMBOS */
        long prod = 1;
        for (int k = 0; k < np; k++) prod *= per + 1;
        if (prod > MAX_COMBOS) break;
    }
    long total = 1;
    for (int k = 0; ok && k < np; k++) {
        count[k] = pc[k].n_opts < per ? pc[k].n_opts : per;
        total *= count[k];
    }
    int digit[MAX_PIECES] = {0};
    for (long c = 0; ok && c < total; c++) {
        memset(l->dropped, 0, (size_t)l->n);
        int usable = 1;
        for (int k = 0; k < np; k++) {
            const block *q = &pc[k];
            int o = count[k] > 1 ? (int)((long)digit[k] * (q->n_opts - 1) / (count[k] - 1)) : 0;
            if (k == np - 1 && q->drops_cut[o]) usable = 0;
            for (int d = q->drop_start[o]; d < q->drop_start[o + 1]; d++) l->dropped[q->first - b->first + q->drops[d]] = 1;
        }
        for (int k = 0; k < np && ++digit[k] == count[k]; k++) digit[k] = 0; /* the next combination */
        if (!usable) continue;
        int64_t kept;
        double time;
        evaluate(l, &kept, &time);
        ok = menu_add(mb, l, kept, time);
    }
    for (int k = 0; k < built; k++) vp_chain_free_menu(&pc[k]);
    return ok;
}

/* The menu: the Pareto frontier of kept bytes against recompute time over every subset
 * of the block's nodes when it has at most 12, else over a greedy chain; ordered from
 * keeping the most (option 0, nothing recomputed) to keeping the least; at most 48
 * options, thinned evenly.  Each option's own backward peak is recorded too. */
vp_status vp_chain_build_menu(const vp_graph *g, const vp_device_profile *dev, const int *fwd, const int *pos,
                              const char *pinned, const int *piece_cut, block *b, vp_error *err) {
    enum { EXHAUSTIVE_MAX = 12, MAX_OPTS = 48 };
    int n = b->last - b->first + 1;
    local l = {n, g, fwd + b->first, pos, b->first, b->cut, 0, pinned, malloc(((size_t)n + 1) * sizeof *l.cost),
               calloc((size_t)n + 1, 1), calloc((size_t)n + 1, 1)};
    int *move = malloc(((size_t)n + 1) * sizeof *move), *best_move = malloc(((size_t)n + 1) * sizeof *best_move);
    int *need = malloc(((size_t)n + 1) * sizeof *need);
    menu_build mb = {0};
    int ok = l.cost && l.dropped && l.rc && move && best_move && need;
    for (int x = 0; ok && x < n; x++) {
        vp_node_cost c = vp_cost_node(g, &g->nodes[l.node[x]]);
        l.cost[x] = vp_cost_seconds(&c, dev, 0);
    }
    ok = ok && (n <= EXHAUSTIVE_MAX ? enumerate_subsets(&l, &mb) : greedy_chain(&l, &mb, move, best_move));
    if (ok && piece_cut && n > EXHAUSTIVE_MAX) ok = piece_combos(&l, &mb, b, dev, fwd, piece_cut, err);
    /* the frontier; then each of its options also with the cut dropped (recomputed for
     * the next block's backward and this one's, freed in between), and the frontier of
     * both, ordered from keeping the most to the least */
    int nf = ok ? pareto(&mb) : 0;
    int cp = -1;
    for (int x = 0; b->cut >= 0 && x < n; x++)
        for (int o = 0; o < g->nodes[l.node[x]].n_outputs; o++)
            if (g->nodes[l.node[x]].outputs[o] == b->cut) cp = x;
    for (int i = 0; ok && cp >= 0 && i < nf; i++) {
        memset(l.dropped, 0, (size_t)n);
        for (int q = 0; q < mb.opt[i].n; q++) l.dropped[mb.pos[mb.opt[i].start + q]] = 1;
        l.dropped[cp] = 1;
        l.cut_free = 1;
        int64_t kept;
        double time;
        evaluate(&l, &kept, &time);
        ok = menu_add(&mb, &l, kept, time);
        l.cut_free = 0;
    }
    if (ok) {
        /* the variants' own frontier, merged: a variant never hides an option that keeps
         * its cut, since segments end on those */
        menu_build var = mb;
        var.opt = mb.opt + nf;
        var.n_opt = mb.n_opt - nf;
        int nv = pareto(&var);
        /* a variant stays only where no option keeping its cut is as good in both */
        int kept_v = 0;
        for (int i = 0; i < nv; i++) {
            int dominated = 0;
            for (int j = 0; j < nf && !dominated; j++)
                dominated = mb.opt[j].kept <= var.opt[i].kept && mb.opt[j].time <= var.opt[i].time;
            if (!dominated) var.opt[kept_v++] = var.opt[i];
        }
        mb.n_opt = nf + kept_v;
        qsort(mb.opt, (size_t)mb.n_opt, sizeof *mb.opt, by_kept_then_time);
        nf = mb.n_opt;
        for (int i = 0; i < nf / 2; i++) {
            option t = mb.opt[i];
            mb.opt[i] = mb.opt[nf - 1 - i];
            mb.opt[nf - 1 - i] = t;
        }
    }
    int keep_n = nf > MAX_OPTS ? MAX_OPTS : nf, total = 0;
    for (int k = 0; ok && k < keep_n; k++) total += mb.opt[keep_n > 1 ? (int)((long)k * (nf - 1) / (keep_n - 1)) : 0].n;
    b->kept = malloc(((size_t)keep_n + 1) * sizeof *b->kept);
    b->peak = malloc(((size_t)keep_n + 1) * sizeof *b->peak);
    b->time = malloc(((size_t)keep_n + 1) * sizeof *b->time);
    b->drops_cut = malloc((size_t)keep_n + 1);
    b->drop_start = malloc(((size_t)keep_n + 2) * sizeof *b->drop_start);
    b->drops = malloc(((size_t)total + 1) * sizeof *b->drops);
    ok = ok && b->kept && b->peak && b->time && b->drops_cut && b->drop_start && b->drops;
    if (ok) b->drop_start[0] = 0;
    b->none = 0;
    for (int k = 0; ok && k < keep_n; k++) {
        const option *o = &mb.opt[keep_n > 1 ? (int)((long)k * (nf - 1) / (keep_n - 1)) : 0];
        memset(l.dropped, 0, (size_t)n);
        for (int i = 0; i < o->n; i++) {
            l.dropped[mb.pos[o->start + i]] = 1;
            b->drops[b->drop_start[k] + i] = mb.pos[o->start + i];
        }
        b->drop_start[k + 1] = b->drop_start[k] + o->n;
        l.cut_free = o->cut_free;
        int64_t kept;
        double time;
        evaluate(&l, &kept, &time);
        b->kept[k] = kept;
        b->time[k] = time;
        b->peak[k] = local_peak(&l, need);
        b->drops_cut[k] = (char)o->cut_free;
        if (!o->cut_free) b->none = k; /* the last that keeps its cut: a segment's end */
        l.cut_free = 0;
    }
    if (ok) b->n_opts = keep_n;
    free(l.cost);
    free(l.dropped);
    free(l.rc);
    free(move);
    free(best_move);
    free(need);
    free(mb.opt);
    free(mb.pos);
    return ok ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory building a checkpointing menu");
}
