/* The arena solver.  See arena.h for the contract. */
#include "arena.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- lower bound ---- */

typedef struct event {
    int64_t t;
    int64_t delta;
} event;

static int by_time(const void *a, const void *b) {
    const event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta < y->delta ? -1 : x->delta > y->delta; /* ends before starts at one time */
}

static int64_t bound_of(const vp_arena_item *items, const int *idx, int n) {
    event *ev = malloc((size_t)(2 * n + 1) * sizeof *ev);
    if (!ev) return -1;
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx ? idx[i] : i];
        ev[2 * i] = (event){it->start, it->size};
        ev[2 * i + 1] = (event){it->end, -it->size};
    }
    qsort(ev, (size_t)(2 * n), sizeof *ev, by_time);
    int64_t live = 0, best = 0;
    for (int i = 0; i < 2 * n; i++) {
        live += ev[i].delta;
        if (live > best) best = live;
    }
    free(ev);
    return best;
}

int64_t vp_arena_lower_bound(const vp_arena_item *items, int n) { return bound_of(items, NULL, n); }

/* ---- orders ---- */

typedef struct keyed {
    int idx;
    int64_t k1, k2, k3; /* compared descending, descending, ascending */
} keyed;

static int by_keys(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->k1 != y->k1) return x->k1 > y->k1 ? -1 : 1;
    if (x->k2 != y->k2) return x->k2 > y->k2 ? -1 : 1;
    if (x->k3 != y->k3) return x->k3 < y->k3 ? -1 : 1;
    return x->idx - y->idx;
}

enum { ORDER_SIZE, ORDER_LIFETIME, ORDER_AREA, ORDER_CONFLICT, ORDER_START, N_ORDERS };
static const char *const order_names[N_ORDERS] = {"size", "lifetime", "area", "conflicts", "start"};
static const char *const fit_names[2] = {"best-fit", "first-fit"};

int vp_arena_algo_count(void) { return N_ORDERS * 2; }

const char *vp_arena_algo_name(int i) {
    static char names[N_ORDERS * 2][48];
    if (i < 0 || i >= N_ORDERS * 2) return "?";
    snprintf(names[i], sizeof names[i], "%s/%s", order_names[i / 2], fit_names[i % 2]);
    return names[i];
}

/* For ORDER_CONFLICT: the most live bytes at any step of an item's lifetime, i.e. how
 * crowded the steps it must fit into are (the tightest items go first). */
static void crowding(const vp_arena_item *items, const int *idx, int n, int64_t *out) {
    event *ev = malloc((size_t)(2 * n + 1) * sizeof *ev);
    int64_t *times = malloc((size_t)(2 * n + 1) * sizeof *times), *live = malloc((size_t)(2 * n + 1) * sizeof *live);
    if (!ev || !times || !live) {
        for (int i = 0; i < n; i++) out[i] = items[idx[i]].size;
        free(ev); free(times); free(live);
        return;
    }
    for (int i = 0; i < n; i++) {
        ev[2 * i] = (event){items[idx[i]].start, items[idx[i]].size};
        ev[2 * i + 1] = (event){items[idx[i]].end, -items[idx[i]].size};
    }
    qsort(ev, (size_t)(2 * n), sizeof *ev, by_time);
    /* live[k] = bytes live on [times[k], times[k+1]) */
    int m = 0;
    int64_t cur = 0;
    for (int i = 0; i < 2 * n;) {
        int64_t t = ev[i].t;
        while (i < 2 * n && ev[i].t == t) cur += ev[i++].delta;
        times[m] = t;
        live[m++] = cur;
    }
    /* sparse table of maxima over live[] */
    int levels = 1;
    while ((1 << levels) <= m) levels++;
    int64_t **st = malloc((size_t)levels * sizeof *st);
    st[0] = live;
    for (int l = 1; l < levels; l++) {
        st[l] = malloc((size_t)m * sizeof **st);
        for (int k = 0; k + (1 << l) <= m; k++) {
            int64_t a = st[l - 1][k], b = st[l - 1][k + (1 << (l - 1))];
            st[l][k] = a > b ? a : b;
        }
    }
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        int lo = 0, hi = m; /* first k with times[k] >= start */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (times[mid] < it->start) lo = mid + 1;
            else hi = mid;
        }
        int a = lo;
        lo = a, hi = m; /* first k with times[k] >= end */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (times[mid] < it->end) lo = mid + 1;
            else hi = mid;
        }
        int b = lo; /* range [a, b) */
        if (b <= a) {
            out[i] = it->size;
            continue;
        }
        int l = 0;
        while ((1 << (l + 1)) <= b - a) l++;
        int64_t x = st[l][a], y = st[l][b - (1 << l)];
        out[i] = x > y ? x : y;
    }
    for (int l = 1; l < levels; l++) free(st[l]);
    free(st);
    free(ev);
    free(times);
    free(live);
}

static void make_order(const vp_arena_item *items, const int *idx, int n, int which, const int64_t *crowd, int *order,
                       keyed *scratch) {
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx[i]];
        int64_t life = it->end - it->start;
        keyed *k = &scratch[i];
        k->idx = idx[i];
        switch (which) {
        case ORDER_SIZE: k->k1 = it->size; k->k2 = life; k->k3 = it->start; break;
        case ORDER_LIFETIME: k->k1 = life; k->k2 = it->size; k->k3 = it->start; break;
        case ORDER_AREA: k->k1 = it->size * (life > 0 ? life : 1); k->k2 = it->size; k->k3 = it->start; break;
        case ORDER_CONFLICT: k->k1 = crowd[i]; k->k2 = it->size; k->k3 = it->start; break;
        default: k->k1 = -it->start; k->k2 = it->size; k->k3 = 0; break; /* execution order */
        }
    }
    qsort(scratch, (size_t)n, sizeof *scratch, by_keys);
    for (int i = 0; i < n; i++) order[i] = scratch[i].idx;
}

/* ---- greedy placement ---- */

/* Places items in order; placed[] is kept sorted by offset so one pass finds the gaps
 * among the items that overlap in time.  Returns the arena (max end offset). */
static int64_t place(vp_arena_item *items, const int *order, int n, int best_fit, int *placed) {
    int n_placed = 0;
    int64_t arena = 0;
    for (int oi = 0; oi < n; oi++) {
        vp_arena_item *it = &items[order[oi]];
        int64_t cursor = 0, best_off = -1, best_gap = INT64_MAX;
        for (int p = 0; p < n_placed; p++) {
            const vp_arena_item *q = &items[placed[p]];
            if (q->start >= it->end || q->end <= it->start) continue; /* disjoint in time */
            if (q->offset > cursor) {
                int64_t gap = q->offset - cursor;
                if (gap >= it->size) {
                    if (!best_fit) {
                        best_off = cursor;
                        break;
                    }
                    if (gap < best_gap) {
                        best_gap = gap;
                        best_off = cursor;
                    }
                }
            }
            int64_t qend = q->offset + q->size;
            if (qend > cursor) cursor = qend;
        }
        it->offset = best_off >= 0 ? best_off : cursor;
        if (it->offset + it->size > arena) arena = it->offset + it->size;
        /* insert by offset */
        int lo = 0, hi = n_placed;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (items[placed[mid]].offset <= it->offset) lo = mid + 1;
            else hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, (size_t)(n_placed - lo) * sizeof *placed);
        placed[lo] = order[oi];
        n_placed++;
    }
    return arena;
}

/* ---- pieces ---- */

static int by_start_idx(const void *a, const void *b, void *ctx) {
    const vp_arena_item *items = ctx;
    const vp_arena_item *x = &items[*(const int *)a], *y = &items[*(const int *)b];
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

typedef struct solve_state {
    vp_arena_item *items;
    const vp_arena_opts *opts;
    vp_arena_result *res;
    int *order, *best_order, *placed;
    keyed *scratch;
    int64_t *offsets_best;
    int64_t *crowd;
    vp_rng rng;
} solve_state;

static void record_offsets(const vp_arena_item *items, const int *idx, int n, int64_t *out) {
    for (int i = 0; i < n; i++) out[i] = items[idx[i]].offset;
}

static void restore_offsets(vp_arena_item *items, const int *idx, int n, const int64_t *in) {
    for (int i = 0; i < n; i++) items[idx[i]].offset = in[i];
}

/* Solves one piece (items idx[0..n)); returns its arena. */
static int64_t solve_piece(solve_state *st, const int *idx, int n, int64_t bound, int64_t *piece_algo_arena,
                           const char **kept, double search_budget) {
    vp_arena_item *items = st->items;
    int64_t best = INT64_MAX;
    int best_algo = -1;
    int have_crowd = 0;
    /* placement scans the placed items, so a piece of n items costs O(n^2): past
     * LARGE_PIECE items only the order that is best in practice runs, unless asked */
    enum { LARGE_PIECE = 20000 };
    int large = n > LARGE_PIECE && !st->opts->run_all;
    for (int a = 0; a < N_ORDERS * 2; a++) {
        if (st->opts->only >= 0 && a != st->opts->only) continue;
        if (large && st->opts->only < 0 && a != ORDER_SIZE * 2) continue;
        int which = a / 2;
        double t0 = now_seconds();
        if (which == ORDER_CONFLICT && !have_crowd) {
            crowding(items, idx, n, st->crowd);
            have_crowd = 1;
        }
        make_order(items, idx, n, which, st->crowd, st->order, st->scratch);
        int64_t arena = place(items, st->order, n, a % 2 == 0, st->placed);
        st->res->algos[a].seconds += now_seconds() - t0;
        piece_algo_arena[a] = arena;
        if (arena < best) {
            best = arena;
            best_algo = a;
            memcpy(st->best_order, st->order, (size_t)n * sizeof *st->order);
            record_offsets(items, idx, n, st->offsets_best);
        }
        if (best <= bound && !st->opts->run_all) break;
    }
    *kept = vp_arena_algo_name(best_algo);
    /* bounded search: perturb the best order (move one item earlier) and keep improvements */
    double deadline = now_seconds() + (large ? 0 : search_budget);
    int fit = best_algo % 2 == 0;
    while (best > bound && n > 2 && now_seconds() < deadline) {
        memcpy(st->order, st->best_order, (size_t)n * sizeof *st->order);
        int i = (int)(vp_rng_next(&st->rng) % (uint64_t)n), j = (int)(vp_rng_next(&st->rng) % (uint64_t)n);
        if (i == j) continue;
        int moved = st->order[i];
        if (i < j) {
            memmove(st->order + i, st->order + i + 1, (size_t)(j - i) * sizeof *st->order);
        } else {
            memmove(st->order + j + 1, st->order + j, (size_t)(i - j) * sizeof *st->order);
        }
        st->order[j] = moved;
        int64_t arena = place(items, st->order, n, fit, st->placed);
        if (arena < best) {
            best = arena;
            memcpy(st->best_order, st->order, (size_t)n * sizeof *st->order);
            record_offsets(items, idx, n, st->offsets_best);
            *kept = "search";
        }
    }
    restore_offsets(items, idx, n, st->offsets_best);
    return best;
}

vp_status vp_arena_solve(vp_arena_item *items, int n, const vp_arena_opts *opts, vp_arena_result *res, vp_error *err) {
    vp_arena_opts dflt = {0, 0, -1};
    if (!opts) opts = &dflt;
    memset(res, 0, sizeof *res);
    double t_start = now_seconds();
    res->n_algos = N_ORDERS * 2;
    for (int a = 0; a < res->n_algos; a++) snprintf(res->algos[a].name, sizeof res->algos[a].name, "%s", vp_arena_algo_name(a));
    for (int i = 0; i < n; i++) {
        if (items[i].size < 0 || items[i].end < items[i].start)
            return vp_fail(err, VP_ERR_INVALID, "arena item %d has size %lld and lifetime [%lld, %lld)", i,
                           (long long)items[i].size, (long long)items[i].start, (long long)items[i].end);
        items[i].offset = 0;
    }
    if (!n) return VP_OK;
    solve_state st = {items, opts, res, NULL, NULL, NULL, NULL, NULL, NULL, {0x5eed}};
    int *idx = malloc((size_t)n * sizeof *idx);
    st.order = malloc((size_t)n * sizeof *st.order);
    st.best_order = malloc((size_t)n * sizeof *st.best_order);
    st.placed = malloc((size_t)n * sizeof *st.placed);
    st.scratch = malloc((size_t)n * sizeof *st.scratch);
    st.offsets_best = malloc((size_t)n * sizeof *st.offsets_best);
    st.crowd = malloc((size_t)n * sizeof *st.crowd);
    int64_t *piece_algo = calloc(N_ORDERS * 2, sizeof *piece_algo);
    vp_status s = VP_OK;
    if (!idx || !st.order || !st.best_order || !st.placed || !st.scratch || !st.offsets_best || !st.crowd || !piece_algo) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory assigning %d buffers", n);
        goto done;
    }
    for (int i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, (size_t)n, sizeof *idx, by_start_idx, items);
    res->lower_bound = vp_arena_lower_bound(items, n);
    double budget = opts->search_seconds > 0 ? opts->search_seconds : opts->search_seconds < 0 ? 0 : 0.2;
    const char *kept_all = NULL;
    for (int lo = 0; lo < n;) {
        /* a piece ends where no item spans the boundary */
        int hi = lo + 1;
        int64_t reach = items[idx[lo]].end;
        while (hi < n && items[idx[hi]].start < reach) {
            if (items[idx[hi]].end > reach) reach = items[idx[hi]].end;
            hi++;
        }
        int64_t bound = bound_of(items, idx + lo, hi - lo);
        const char *kept = NULL;
        for (int a = 0; a < N_ORDERS * 2; a++) piece_algo[a] = -1;
        int64_t arena = solve_piece(&st, idx + lo, hi - lo, bound, piece_algo, &kept, budget);
        if (arena > res->arena) res->arena = arena;
        for (int a = 0; a < N_ORDERS * 2; a++) {
            /* an algorithm skipped on a piece (stopped early) is charged the kept result */
            int64_t v = piece_algo[a] >= 0 ? piece_algo[a] : -1;
            if (v < 0) continue;
            if (v > res->algos[a].arena) res->algos[a].arena = v;
        }
        if (!kept_all) kept_all = kept;
        else if (strcmp(kept_all, kept)) kept_all = "mixed";
        res->n_pieces++;
        lo = hi;
    }
    snprintf(res->kept, sizeof res->kept, "%s", kept_all ? kept_all : "none");
done:
    free(idx);
    free(st.order);
    free(st.best_order);
    free(st.placed);
    free(st.scratch);
    free(st.offsets_best);
    free(st.crowd);
    free(piece_algo);
    res->seconds = now_seconds() - t_start;
    return s;
}

vp_status vp_arena_read_csv(const char *path, vp_arena_item **items, int *n, vp_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return vp_fail(err, VP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int cap = 1024, count = 0;
    vp_arena_item *it = malloc((size_t)cap * sizeof *it);
    char line[512];
    int lineno = 0;
    vp_status s = it ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    while (!s && fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '\n' || *p == '#') continue;
        if (lineno == 1 && (p[0] < '0' || p[0] > '9') && p[0] != '-') continue; /* header */
        long long id, lower, upper, size;
        char tail;
        int got = sscanf(p, "%lld , %lld , %lld , %lld %c", &id, &lower, &upper, &size, &tail);
        if (got != 4 && !(got == 5 && (tail == '\n' || tail == '\r'))) {
            s = vp_fail(err, VP_ERR_PARSE, "%s:%d: expected 'id,lower,upper,size', got '%.60s'", path, lineno, p);
            break;
        }
        if (size < 0 || upper < lower) {
            s = vp_fail(err, VP_ERR_INVALID, "%s:%d: buffer %lld has size %lld and lifetime [%lld, %lld)", path, lineno,
                        id, size, lower, upper);
            break;
        }
        if (count == cap) {
            vp_arena_item *m = realloc(it, (size_t)(cap *= 2) * sizeof *it);
            if (!m) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
            it = m;
        }
        it[count++] = (vp_arena_item){size, lower, upper, 0};
    }
    fclose(f);
    if (s) {
        free(it);
        return s;
    }
    *items = it;
    *n = count;
    return VP_OK;
}
