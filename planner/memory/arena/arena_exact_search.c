/* One decision of the complete offset search: do the items fit a capacity?
 *
 * In: the items of one piece as arena_exact.c builds them (sizes, spans of sections,
 * overlaps, a rank each), a capacity, a budget of work.  Out: an assignment that fits,
 * a proof that none does, or "undecided" when the work runs out.  Keeps true: an
 * assignment returned fits; "none" is returned only when the whole canonical tree was
 * exhausted, so it proves infeasibility.  The method is described in arena_exact.c.
 *
 * Cost: a node is the sort of its unplaced items (linear: the previous order mostly
 * holds), and for each candidate an O(1) check of the sections outside its span plus a
 * read of its own span; only candidates that pass are placed (their overlaps and the
 * sections whose floors move).  Profiled on MiniMalloc's D to K: before these checks,
 * nine in ten placements failed and the re-sort was half the time. */
#include "memory/arena/arena_exact_search.h"

#include <stdlib.h>
#include <string.h>

static int undo_push(vp_exact *x, int what, int64_t old) {
    if (x->undo_top == x->undo_cap) {
        int64_t cap = x->undo_cap * 2 + 64;
        undo_rec *u = realloc(x->undo, (size_t)cap * sizeof *u);
        if (!u) return 0;
        x->undo = u;
        x->undo_cap = cap;
    }
    x->undo[x->undo_top++] = (undo_rec){what, old};
    return 1;
}

static void undo_to(vp_exact *x, int64_t mark) {
    while (x->undo_top > mark) {
        undo_rec r = x->undo[--x->undo_top];
        if (r.what >= 0) x->minoff[r.what] = r.old;
        else x->floor_[-1 - r.what] = r.old;
    }
}

/* Places item i at its floor and propagates; returns 1 when every section whose floor
 * it raised can still hold what is left there, 0 when not, -1 out of memory.  The
 * caller has checked the rest (search).  *hatless: i overlaps no unplaced item. */
static int place(vp_exact *x, int i, int *hatless) {
    int64_t o = x->minoff[i], top = o + x->size[i], c = x->capacity;
    x->off[i] = o;
    x->mark_of[i] = x->undo_top;
    x->placed[x->n_placed++] = i;
    *hatless = 1;
    int nt = 0, fail = 0;
    int64_t work = (x->ov_at[i + 1] - x->ov_at[i]) + 2 * (x->hi[i] - x->lo[i]);
    x->new_cut = 0;
    for (int s = x->lo[i]; s + 1 < x->hi[i]; s++)
        if (--x->cuts[s] == 0) x->new_cut = 1;
    for (int s = x->lo[i]; s < x->hi[i]; s++) {
        if (!undo_push(x, -1 - s, x->floor_[s])) return -1;
        x->floor_[s] = top;
        x->total[s] -= x->size[i];
        if (x->total[s] && top + x->total[s] > c) fail = 1;
        /* out of the section's unplaced items: swapped to the end of them (unplace,
         * undoing in reverse, only has to count it back in) */
        int p = x->pos[x->span_at[i] + s - x->lo[i]], q = x->sec_at[s] + --x->sec_left[s], j = x->sec[q];
        x->sec[p] = j;
        x->pos[x->span_at[j] + s - x->lo[j]] = p;
        x->sec[q] = i;
        x->pos[x->span_at[i] + s - x->lo[i]] = q;
    }
    x->stamp_now++;
    for (int k = x->ov_at[i]; k < x->ov_at[i + 1]; k++) {
        int j = x->ov[k];
        if (x->off[j] >= 0) continue;
        *hatless = 0;
        if (x->minoff[j] >= top) continue;
        int64_t was = x->minoff[j];
        if (!undo_push(x, j, was)) return -1;
        x->minoff[j] = top;
        /* Sections whose floor may rise: those below top.  Not only those whose floor
         * was j's old floor: a section a placement set to its top may hold only items
         * already above it, so its floor can sit below its lowest item, and a later
         * raise must read it too (reading only the floors equal to j's old one left
         * MiniMalloc's I undecided: each branch ran on ten times deeper).  i's own
         * sections are at top already, so only j's sections outside i's span are read. */
        int a = x->lo[j], b = x->hi[j];
        work += (x->lo[i] > a ? x->lo[i] - a : 0) + (b > x->hi[i] ? b - x->hi[i] : 0);
        for (int s = a; s < b; s++) {
            if (s == x->lo[i]) s = x->hi[i];
            if (s >= b) break;
            if (x->floor_[s] < top && x->stamp[s] != x->stamp_now) {
                x->stamp[s] = x->stamp_now;
                x->touched[nt++] = s;
            }
        }
    }
    /* a section's floor is at least the lowest floor of the items still to place there */
    for (int t = 0; t < nt; t++) {
        int s = x->touched[t];
        int64_t low = INT64_MAX, f = x->floor_[s];
        int k = x->sec_at[s];
        for (int e = k + x->sec_left[s]; k < e && low > f; k++)
            if (x->minoff[x->sec[k]] < low) low = x->minoff[x->sec[k]];
        work += k - x->sec_at[s];
        if (low != INT64_MAX && low > f) {
            if (!undo_push(x, -1 - s, f)) return -1;
            x->floor_[s] = low;
            if (low + x->total[s] > c) fail = 1;
        }
    }
    /* What is left in a section sits above its floor (checked above where floors
     * changed) and above o (the canonical order; search checked that before placing). */
    x->work += work;
    return !fail;
}

/* Takes back the last item placed. */
static void unplace(vp_exact *x) {
    int i = x->placed[--x->n_placed];
    for (int s = x->lo[i]; s < x->hi[i]; s++) {
        x->total[s] += x->size[i];
        x->sec_left[s]++;
    }
    for (int s = x->lo[i]; s + 1 < x->hi[i]; s++) x->cuts[s]++;
    undo_to(x, x->mark_of[i]);
    x->off[i] = -1;
}

static int search(vp_exact *x, const int *prev, int pu, int *cur, int u, int slo, int shi, int64_t last_off, int last_rank,
                  int64_t raised);

int vp_exact_key_cmp(const void *pa, const void *pb, void *ctx) {
    const vp_exact *x = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    int64_t wa = x->width[a], wb = x->width[b], aa = x->size[a] * wa, ab = x->size[b] * wb;
    int64_t ta = x->dyn[a], tb = x->dyn[b], ka[3], kb[3];
    if (x->heur == 0) ka[0] = wa, ka[1] = aa, ka[2] = ta, kb[0] = wb, kb[1] = ab, kb[2] = tb;
    else if (x->heur == 1) ka[0] = ta, ka[1] = aa, ka[2] = wa, kb[0] = tb, kb[1] = ab, kb[2] = wb;
    else ka[0] = ta, ka[1] = wa, ka[2] = aa, kb[0] = tb, kb[1] = wb, kb[2] = ab;
    for (int k = 0; k < 3; k++)
        if (ka[k] != kb[k]) return ka[k] > kb[k] ? -1 : 1;
    return x->rank[a] - x->rank[b];
}

static int by_rank(const void *pa, const void *pb, void *ctx) {
    const vp_exact *x = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    return x->rank[a] - x->rank[b];
}

static int by_floor(const void *pa, const void *pb, void *ctx) {
    const vp_exact *x = ctx;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (x->minoff[a] != x->minoff[b]) return x->minoff[a] < x->minoff[b] ? -1 : 1;
    return x->rank[a] - x->rank[b];
}

/* A group of a decomposition ranked again by the attempt's keys, the crowd now read from
 * what is left unplaced in the group's sections (MiniMalloc ranks each subproblem anew;
 * without it MiniMalloc's I stays undecided at 1048576, with it the third rank decides
 * it in 1,800 nodes); ties keep the old order.  The group takes its own old rank values
 * in the new order, so ranks stay distinct and no item outside it is compared
 * differently; saved[k] gets g[k]'s old rank for the caller to put back.  g ends
 * sorted by (floor, rank), the order search expects of prev.  Any rank keeps the group's
 * search complete: the canonical argument holds for any fixed order of its items. */
static void rerank(vp_exact *x, int *g, int gs, int *saved) {
    int64_t work = gs;
    for (int k = 0; k < gs; k++) {
        int j = g[k];
        int64_t most = 0;
        for (int s = x->lo[j]; s < x->hi[j]; s++)
            if (x->total[s] > most) most = x->total[s];
        x->dyn[j] = most;
        work += x->hi[j] - x->lo[j];
    }
    qsort_r(g, (size_t)gs, sizeof *g, by_rank, x);
    for (int k = 0; k < gs; k++) saved[k] = x->rank[g[k]]; /* the group's rank values, ascending */
    qsort_r(g, (size_t)gs, sizeof *g, vp_exact_key_cmp, x);
    for (int k = 0; k < gs; k++) { /* dyn is done with: it keeps each item's old rank */
        x->dyn[g[k]] = x->rank[g[k]];
        x->rank[g[k]] = saved[k];
    }
    qsort_r(g, (size_t)gs, sizeof *g, by_floor, x);
    for (int k = 0; k < gs; k++) saved[k] = (int)x->dyn[g[k]];
    x->work += 3 * work;
}

/* Item i, just placed, left no unplaced item across some boundaries of [slo, shi): the
 * other u unplaced items of the group, cur[0..u) less i, fall into independent groups,
 * each searched on its own (so the work adds up over the groups instead of multiplying;
 * MiniMalloc's dynamic decomposition).  They keep the canonical order's last (offset,
 * rank): every item after i in a canonical assignment is still after it, whatever group
 * it is in.  A group that fails fails them all; the groups solved before it are taken
 * back.  Groups are laid out at out[] as [size, items...] ending with 0, then the old
 * ranks of a group's items (rerank), then the groups' searches.  Returns as search does; without two groups, searches on as usual. */
static int decompose(vp_exact *x, const int *cur, int u, int i, int *out, int slo, int shi) {
    /* group of an unplaced item: the count of emptied boundaries at or before its start */
    int ng = 1;
    for (int s = x->lo[i]; s + 1 < x->hi[i]; s++)
        if (!x->cuts[s]) x->gcount[ng++] = s + 1; /* the cuts, ascending */
    int nonempty = 0;
    for (int k = 0; k < u; k++) {
        int j = cur[k];
        if (x->off[j] >= 0) continue;
        int a = 1, b = ng; /* groups: the first cut after lo[j] */
        while (a < b) {
            int mid = (a + b) / 2;
            if (x->gcount[mid] <= x->lo[j]) a = mid + 1;
            else b = mid;
        }
        x->gkey[j] = a - 1;
    }
    for (int g = 0; g < ng; g++) x->gcount[g] = 0;
    for (int k = 0; k < u; k++)
        if (x->off[cur[k]] < 0 && !x->gcount[x->gkey[cur[k]]]++) nonempty++;
    x->work += u;
    int64_t top = x->off[i] + x->size[i];
    if (nonempty < 2) return search(x, cur, u, out, u - 1, slo, shi, x->off[i], x->rank[i], top);
    /* starts of the groups in out[], keeping the (floor, rank) order inside each */
    int at = 0;
    for (int g = 0; g < ng; g++) {
        int c = x->gcount[g];
        x->gcount[g] = c ? at + 1 : -1;
        if (c) out[at] = c, at += c + 1;
    }
    out[at++] = 0;
    for (int k = 0; k < u; k++) {
        int j = cur[k];
        if (x->off[j] < 0) out[x->gcount[x->gkey[j]]++] = j;
    }
    int *saved = out + at, *sub = saved + u, depth = x->n_placed - 1; /* i stays placed */
    for (int *p = out; *p; p += 1 + *p) {
        int gs = *p, glo = x->m, ghi = 0;
        for (int k = 1; k <= gs; k++) {
            if (x->lo[p[k]] < glo) glo = x->lo[p[k]];
            if (x->hi[p[k]] > ghi) ghi = x->hi[p[k]];
        }
        rerank(x, p + 1, gs, saved);
        int r = search(x, p + 1, gs, sub, gs, glo, ghi, x->off[i], -1, top);
        for (int k = 1; k <= gs; k++) x->rank[p[k]] = saved[k - 1];
        if (r != 1) {
            while (x->n_placed > depth + 1) unplace(x);
            return r;
        }
    }
    return 1;
}

/* Depth-first over canonical orders of one group of items, those whose sections lie in
 * [slo, shi).  prev[0..pu) held its unplaced items at the parent (one of them perhaps
 * placed since); cur gets the u unplaced ones sorted by (floor, rank).  Returns 1 found
 * (the items stay placed), 0 none in this branch (or the work ran out; all taken back),
 * -1 out of memory.  Stack: cur and what follows take at most u * u + 2u entries (u +
 * f(u - 1) going down a level, u + 2u - 1 + u + f(u - 2) decomposing into groups of at
 * most u - 2, f the bound). */
static int search(vp_exact *x, const int *prev, int pu, int *cur, int u, int slo, int shi, int64_t last_off, int last_rank,
                  int64_t raised) {
    if (!u) return 1;
    x->nodes++;
    x->work += pu;
    if (x->work > x->work_limit) {
        x->out_of_work = 1;
        return 0;
    }
    /* prev was in (floor, rank) order before the last item placed raised some floors,
     * all to its top (raised): those leave prev's order, the others keep it, so cur is
     * the others with the raised (and any already at raised), in rank order, slotted
     * in where the others' floors pass raised. */
    int na = 0, nb = 0, below = 0, *b = x->gkey;
    for (int k = 0; k < pu; k++) {
        int i = prev[k];
        if (x->off[i] >= 0) continue;
        if (x->minoff[i] == raised) {
            int at = nb++;
            while (at > 0 && x->rank[b[at - 1]] > x->rank[i]) {
                b[at] = b[at - 1];
                at--;
            }
            b[at] = i;
        } else {
            below += x->minoff[i] < raised;
            cur[na++] = i;
        }
    }
    memmove(cur + below + nb, cur + below, (size_t)(na - below) * sizeof *cur);
    memcpy(cur + below, b, (size_t)nb * sizeof *cur);
    int64_t min_top = INT64_MAX;
    for (int k = 0; k < u; k++) {
        int64_t t = x->minoff[cur[k]] + x->size[cur[k]];
        if (t < min_top) min_top = t;
    }
    if (min_top > x->capacity) return 0;
    int *next = cur + u;
    int have_most = 0; /* pre and suf hold this node's sections */
    for (int k = 0; k < u; k++) {
        int i = cur[k];
        int64_t o = x->minoff[i];
        if (o < last_off || (o == last_off && x->rank[i] < last_rank)) continue; /* not canonical */
        if (o >= min_top) break;                       /* dominated, and so is every later one */
        if (o + x->size[i] > x->capacity) continue;
        if (x->twin[i] >= 0 && x->off[x->twin[i]] < 0) continue; /* its twin goes first */
        /* What place would check of the sections, read first (placing also costs the
         * overlaps): i's own would hold the rest above o + size, every other one
         * above o. */
        if (!have_most) {
            x->pre[0] = x->suf[shi - slo] = 0;
            for (int s = slo; s < shi; s++) {
                int64_t t = x->total[s], p = x->pre[s - slo];
                x->pre[s - slo + 1] = t > p ? t : p;
                t = x->total[shi - 1 - (s - slo)], p = x->suf[shi - slo - (s - slo)];
                x->suf[shi - slo - 1 - (s - slo)] = t > p ? t : p;
            }
            x->work += 2 * (shi - slo);
            have_most = 1;
        }
        int64_t top = o + x->size[i], a = x->pre[x->lo[i] - slo], b = x->suf[x->hi[i] - slo];
        if (o + (a > b ? a : b) > x->capacity) continue;
        int s = x->lo[i], e = x->hi[i];
        while (s < e && (x->total[s] == x->size[i] || top + x->total[s] - x->size[i] <= x->capacity)) s++;
        x->work += s - x->lo[i];
        if (s < e) continue;
        int hatless;
        int ok = place(x, i, &hatless);
        int r = ok < 0 ? -1 : !ok ? 0 : x->new_cut && u > 2 ? decompose(x, cur, u, i, next, slo, shi)
                                                               : search(x, cur, u, next, u - 1, slo, shi, o, x->rank[i], top);
        if (ok > 0) have_most = 0; /* the search below used pre and suf */
        if (r == 1) return 1;
        unplace(x);
        if (r || x->out_of_work) return r;
        if (hatless) break;
    }
    return 0;
}


int vp_exact_decide(vp_exact *x, int64_t c, int64_t work) {
    x->capacity = c;
    x->work = 0;
    x->nodes = 0;
    x->work_limit = work;
    x->out_of_work = 0;
    x->undo_top = 0;
    if (x->base) memcpy(x->floor_, x->base, (size_t)x->m * sizeof *x->floor_);
    else memset(x->floor_, 0, (size_t)x->m * sizeof *x->floor_);
    memset(x->total, 0, (size_t)x->m * sizeof *x->total);
    for (int i = 0; i < x->n; i++) {
        x->off[i] = -1;
        x->minoff[i] = 0;
        for (int s = x->lo[i]; s < x->hi[i]; s++) {
            x->total[s] += x->size[i];
            if (x->floor_[s] > x->minoff[i]) x->minoff[i] = x->floor_[s];
        }
    }
    for (int s = 0; s < x->m; s++) {
        x->sec_left[s] = x->sec_at[s + 1] - x->sec_at[s];
        if (x->floor_[s] + x->total[s] > c) return 0;
    }
    memset(x->cuts, 0, (size_t)x->m * sizeof *x->cuts);
    for (int i = 0; i < x->n; i++)
        for (int s = x->lo[i]; s + 1 < x->hi[i]; s++) x->cuts[s]++;
    x->n_placed = 0;
    int *root = x->ord; /* (floor, rank) order; the search's levels follow it */
    for (int i = 0; i < x->n; i++) root[x->rank[i]] = i;
    if (x->base) qsort_r(root, (size_t)x->n, sizeof *root, by_floor, x);
    int r = search(x, root, x->n, root + x->n, x->n, 0, x->m, 0, -1, 0);
    if (r < 0) return -1;
    if (r == 0) return x->out_of_work ? 2 : 0;
    int64_t top = 0;
    for (int i = 0; i < x->n; i++)
        if (x->off[i] + x->size[i] > top) top = x->off[i] + x->size[i];
    memcpy(x->best_off, x->off, (size_t)x->n * sizeof *x->off);
    x->found_arena = top;
    return 1;
}
