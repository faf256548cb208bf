/* The arena solver.  See arena.h for the contract: this file splits the timeline into
 * pieces (after stacking the items live throughout), runs the greedy portfolio of
 * arena_portfolio.c on each, then the complete search of arena_exact.c on the pieces
 * left above their bound; and reads MiniMalloc's CSV format. */
#include "memory/arena/arena.h"
#include "memory/arena/arena_alloc.h"
#include "ir/file_read.h"
#include "memory/arena/arena_exact.h"
#include "memory/arena/arena_portfolio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lower bound ---- */

static int64_t bound_of(const vp_arena_item *items, const int *idx, int n) {
    vp_arena_event *ev = malloc((size_t)(2 * n + 1) * sizeof *ev);
    if (!ev) return -1;
    for (int i = 0; i < n; i++) {
        const vp_arena_item *it = &items[idx ? idx[i] : i];
        ev[2 * i] = (vp_arena_event){it->start, it->size};
        ev[2 * i + 1] = (vp_arena_event){it->end, -it->size};
    }
    qsort(ev, (size_t)(2 * n), sizeof *ev, vp_arena_event_cmp);
    int64_t live = 0, best = 0;
    for (int i = 0; i < 2 * n; i++) {
        live += ev[i].delta;
        if (live > best) best = live;
    }
    free(ev);
    return best;
}

int64_t vp_arena_lower_bound(const vp_arena_item *items, int n) { return bound_of(items, NULL, n); }

const char *vp_arena_outcome(const vp_arena_result *r) {
    if (r->arena <= r->lower_bound) return "reached the lower bound";
    return r->proven_lower >= r->arena ? "proven optimal" : "best found";
}

/* ---- pieces ---- */

static int by_start_idx(const void *a, const void *b, void *ctx) {
    const vp_arena_item *items = ctx;
    const vp_arena_item *x = &items[*(const int *)a], *y = &items[*(const int *)b];
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* The highest end offset of the items idx[lo..hi). */
static int64_t piece_top(const vp_arena_item *items, const int *idx, int lo, int hi) {
    int64_t top = 0;
    for (int i = lo; i < hi; i++)
        if (items[idx[i]].offset + items[idx[i]].size > top) top = items[idx[i]].offset + items[idx[i]].size;
    return top;
}

vp_status vp_arena_solve(vp_arena_item *items, int n, const vp_arena_opts *opts, vp_arena_result *res, vp_error *err) {
    vp_arena_opts dflt = {.only = -1};
    if (!opts) opts = &dflt;
    memset(res, 0, sizeof *res);
    double t_start = vp_arena_clock();
    res->n_algos = VP_ARENA_N_ALGOS;
    for (int a = 0; a < res->n_algos; a++) snprintf(res->algos[a].name, sizeof res->algos[a].name, "%.47s", vp_arena_algo_name(a));
    for (int i = 0; i < n; i++) {
        if (items[i].size < 0 || items[i].end < items[i].start)
            return vp_fail(err, VP_ERR_INVALID, "arena item %d has size %lld and lifetime [%lld, %lld)", i,
                           (long long)items[i].size, (long long)items[i].start, (long long)items[i].end);
        items[i].offset = 0;
    }
    if (n <= 0) return VP_OK;
    vp_portfolio *st = vp_portfolio_new(items, n, opts, res);
    int *idx = malloc((size_t)n * sizeof *idx);
    int64_t *piece_algo = calloc(VP_ARENA_N_ALGOS, sizeof *piece_algo);
    int (*open)[2] = NULL;                    /* pieces left above their bound: [lo, hi) */
    int64_t *open_bound = NULL, *held = NULL; /* their bounds; a piece's offsets set aside */
    vp_status s = VP_OK;
    if (!st || !idx || !piece_algo) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory assigning %d buffers", n);
        goto done;
    }
    for (int i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, (size_t)n, sizeof *idx, by_start_idx, items);
    res->lower_bound = vp_arena_lower_bound(items, n);
    double budget = opts->search_seconds > 0 ? opts->search_seconds : opts->search_seconds < 0 ? 0 : 0.2;
    const char *kept_all = NULL;
    /* Items live over the whole timeline (parameters, optimizer state) overlap every
     * other item, so any assignment keeps them apart from all: stacking them at the
     * bottom costs nothing, and without them the rest splits into pieces. */
    int64_t t_min = INT64_MAX, t_max = INT64_MIN, pinned_bytes = 0;
    for (int i = 0; i < n; i++) {
        if (items[i].start < t_min) t_min = items[i].start;
        if (items[i].end > t_max) t_max = items[i].end;
    }
    int rest = 0;
    for (int i = 0; i < n; i++) {
        vp_arena_item *it = &items[idx[i]];
        if (it->start == t_min && it->end == t_max && it->size > 0 && t_max > t_min) {
            it->offset = pinned_bytes;
            pinned_bytes += it->size;
            res->n_pinned++;
        } else {
            idx[rest++] = idx[i];
        }
    }
    /* pieces the portfolio left above their bound, for the complete search after it */
    int n_open = 0;
    open = malloc((size_t)(rest + 1) * sizeof *open);
    open_bound = malloc((size_t)(rest + 1) * sizeof *open_bound);
    held = malloc((size_t)(rest + 1) * sizeof *held);
    if (!open || !open_bound || !held) {
        s = vp_fail(err, VP_ERR_NOMEM, "out of memory assigning %d buffers", n);
        goto done;
    }
    int64_t proven = 0;
    double exact_s = opts->exact_seconds > 0 ? opts->exact_seconds : opts->exact_seconds < 0 ? 0 : 1.0;
    int64_t work_total = opts->only < 0 ? (int64_t)(exact_s * VP_ARENA_EXACT_WORK_PER_SECOND) : 0;
    int64_t quick_pool = work_total / 4; /* the short searches at the bound below, all together */
    for (int lo = 0; lo < rest;) {
        /* a piece ends where no item spans the boundary */
        int hi = lo + 1;
        int64_t reach = items[idx[lo]].end;
        while (hi < rest && items[idx[hi]].start < reach) {
            if (items[idx[hi]].end > reach) reach = items[idx[hi]].end;
            hi++;
        }
        int64_t bound = bound_of(items, idx + lo, hi - lo);
        const char *kept = NULL;
        for (int a = 0; a < VP_ARENA_N_ALGOS; a++) piece_algo[a] = -1;
        /* A small piece the greedy orders leave above its bound gets a short complete
         * search at the bound before the improving search: where it decides the bound
         * (models/cnn's step on the cpu profile, its convolution workspaces in one piece
         * of 67 buffers: 1.4M units) the improving search's 0.2 s would only have been
         * spent before the complete search got there anyway (plan 0.18 -> 0.012 s).  At
         * most 512 units per pair of buffers, VP_ARENA_QUICK_WORK a piece, a quarter of
         * the complete search's work over all pieces. */
        int64_t quick = (int64_t)(hi - lo) * (hi - lo) * 512;
        if (quick > VP_ARENA_QUICK_WORK) quick = VP_ARENA_QUICK_WORK;
        if (quick > quick_pool) quick = quick_pool;
        if (hi - lo > VP_ARENA_EXACT_MAX_ITEMS || budget <= 0 || quick < 0) quick = 0;
        /* the greedy orders read every pair of items live at one step: where that would
         * outrun the limits (a CSV of 10^6 buffers), the allocator's replay, n log n,
         * places the piece alone (arena_alloc.h) */
        int64_t pairs = opts->only < 0 ? vp_arena_overlap_pairs(items, idx + lo, hi - lo) : 0;
        double greedy_s = (double)VP_ARENA_N_ALGOS * (double)pairs / VP_ARENA_GREEDY_PAIRS_PER_SECOND;
        if (pairs < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory assigning %d buffers", n);
            goto done;
        }
        double left_s = budget + (double)work_total / VP_ARENA_EXACT_WORK_PER_SECOND;
        if (greedy_s > (left_s > 1.0 ? left_s : 1.0)) {
            int64_t arena = vp_place_alloc(items, idx + lo, hi - lo);
            if (arena < 0) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory assigning %d buffers", n);
                goto done;
            }
            kept = "first-fit replay";
            if (bound > proven) proven = bound;
            if (arena > res->arena) res->arena = arena;
            if (!kept_all) kept_all = kept;
            else if (strcmp(kept_all, kept)) kept_all = "mixed";
            res->n_replayed++;
            res->n_pieces++;
            lo = hi;
            continue;
        }
        /* greedy orders that take a noticeable share of the limits are charged against
         * them: the improving search's seconds and the complete search's units shrink by
         * what they are estimated to take, so the limits cover them too (a piece of 400
         * buffers, some 1e5 pairs, is far below the share and keeps its searches whole) */
        if (greedy_s > VP_ARENA_GREEDY_CHARGED_FROM) {
            res->greedy_charged += greedy_s;
            budget = budget > greedy_s ? budget - greedy_s : 0;
            int64_t charge = (int64_t)(greedy_s * VP_ARENA_EXACT_WORK_PER_SECOND);
            work_total = work_total > charge ? work_total - charge : 0;
            if (quick_pool > work_total / 4) quick_pool = work_total / 4;
            if (quick > quick_pool || budget <= 0) quick = 0;
        }
        int64_t arena = vp_portfolio_piece(st, idx + lo, hi - lo, bound, piece_algo, &kept, quick ? 0 : budget);
        if (arena > bound && quick) {
            vp_arena_exact_result er = {0};
            s = vp_arena_exact_piece(items, idx + lo, hi - lo, bound, bound, quick, &er, err);
            if (s) goto done;
            work_total -= er.work;
            quick_pool -= er.work;
            res->exact_work += er.work;
            if (er.arena <= bound) {
                arena = er.arena;
                kept = "exact";
                snprintf(res->kept, sizeof res->kept, "exact");
            } else {
                /* the improving search from the greedy orders' best; the short search's
                 * assignment, where lower, is put back after it */
                int lowered = er.arena < arena;
                for (int i = lo; i < hi && lowered; i++) held[i - lo] = items[idx[i]].offset;
                int64_t walked = vp_portfolio_improve(st, idx + lo, hi - lo, bound, &kept, budget);
                if (walked >= 0 && lowered && er.arena < walked) {
                    for (int i = lo; i < hi; i++) items[idx[i]].offset = held[i - lo];
                    snprintf(res->kept, sizeof res->kept, "exact");
                    walked = er.arena;
                }
                arena = walked;
            }
        }
        if (arena < 0) {
            s = vp_fail(err, VP_ERR_NOMEM, "out of memory assigning %d buffers", n);
            goto done;
        }
        if (arena > bound) {
            open[n_open][0] = lo;
            open[n_open][1] = hi;
            open_bound[n_open++] = bound;
        }
        if (bound > proven) proven = bound; /* every piece's bound bounds the whole arena */
        if (arena > res->arena) res->arena = arena;
        for (int a = 0; a < VP_ARENA_N_ALGOS; a++) {
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
    /* The complete search on what is left above its bound, the budget shared evenly.  A
     * piece whose arena is no more than what another piece is proved to need is left as
     * it is (it cannot lower the total); the widest pieces go first.  Not run when one
     * algorithm was asked for alone (comparisons, the remat's quick plans). */
    for (int k = 0; k < n_open; k++) { /* widest first: insertion sort by arena */
        for (int q = k; q > 0; q--) {
            int64_t a = piece_top(items, idx, open[q][0], open[q][1]), b = piece_top(items, idx, open[q - 1][0], open[q - 1][1]);
            if (a <= b) break;
            int t0 = open[q][0], t1 = open[q][1];
            int64_t tb = open_bound[q];
            open[q][0] = open[q - 1][0], open[q][1] = open[q - 1][1], open_bound[q] = open_bound[q - 1];
            open[q - 1][0] = t0, open[q - 1][1] = t1, open_bound[q - 1] = tb;
        }
    }
    for (int k = 0; k < n_open && !s; k++) {
        vp_arena_exact_result er = {0};
        int plo = open[k][0], phi = open[k][1];
        int64_t before = piece_top(items, idx, plo, phi);
        if (work_total > 0 && before > proven)
            s = vp_arena_exact_piece(items, idx + plo, phi - plo, open_bound[k] > proven ? open_bound[k] : proven, proven,
                                     work_total / (n_open - k), &er, err);
        else er.arena = before, er.proven_lower = open_bound[k];
        if (s) break;
        work_total -= er.work;
        res->exact_work += er.work;
        if (er.arena < before) snprintf(res->kept, sizeof res->kept, "exact");
        if (er.proven_lower > proven) proven = er.proven_lower;
    }
    if (s) goto done;
    if (n_open) { /* the widest piece decides: recompute the arena over all pieces */
        int64_t top = 0;
        for (int i = 0; i < rest; i++)
            if (items[idx[i]].offset + items[idx[i]].size > top) top = items[idx[i]].offset + items[idx[i]].size;
        res->arena = top;
    }
    /* the pieces sit on top of the whole-step items */
    for (int i = 0; i < rest; i++) items[idx[i]].offset += pinned_bytes;
    res->arena += pinned_bytes;
    res->proven_lower = proven + pinned_bytes > res->lower_bound ? proven + pinned_bytes : res->lower_bound;
    if (res->proven_lower > res->arena) res->proven_lower = res->arena;
    for (int a = 0; a < VP_ARENA_N_ALGOS; a++) {
        if (res->algos[a].arena) res->algos[a].arena += pinned_bytes;
        else if (!rest && (opts->only < 0 || opts->only == a)) res->algos[a].arena = pinned_bytes; /* every order stacks them */
    }
    if (strcmp(res->kept, "exact")) snprintf(res->kept, sizeof res->kept, "%s", kept_all ? kept_all : rest ? "none" : "stacked");
done:
    free(open);
    free(open_bound);
    free(held);
    free(idx);
    vp_portfolio_free(st);
    free(piece_algo);
    res->seconds = vp_arena_clock() - t_start;
    return s;
}

/* A CSV's sizes add up to at most 2^CSV_MAX_LOG2 bytes and its steps lie within
 * +-2^(CSV_MAX_LOG2 - 1): the searches add sizes and subtract steps in int64_t, which
 * these bounds keep from overflowing (an arena of 2^62 bytes is beyond any machine). */
#define CSV_MAX_LOG2 62

/* "id, lower, upper, size" (spaces allowed around the commas, a line end after): -2 when
 * read, -1 when the line is not four integers, else the field out of range */
static int parse_fields(const char *p, long long v[4]) {
    for (int k = 0; k < 4; k++) {
        while (*p == ' ' || *p == '\t') p++;
        if (k && *p++ != ',') return -1;
        while (*p == ' ' || *p == '\t') p++;
        if (!(*p == '-' || *p == '+' || (*p >= '0' && *p <= '9'))) return -1;
        char *end;
        errno = 0;
        v[k] = strtoll(p, &end, 10);
        if (end == p) return -1;
        int64_t lim = INT64_C(1) << (k == 3 ? CSV_MAX_LOG2 : CSV_MAX_LOG2 - 1);
        if (errno == ERANGE || (k && (v[k] > lim || v[k] < -lim))) return k;
        p = end;
    }
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
    return *p ? -1 : -2;
}

/* At most max bytes of s for a message, a control or non-ASCII byte as \xNN and the
 * line end dropped: raw binary from a file is never echoed to the terminal. */
static const char *printable(const char *s, size_t max, char *dst, size_t size) {
    size_t o = 0;
    for (size_t i = 0; s[i] && s[i] != '\n' && i < max && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f) dst[o++] = (char)c;
        else o += (size_t)snprintf(dst + o, size - o, "\\x%02x", c);
    }
    dst[o] = 0;
    return dst;
}

static int by_id(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Ids name the buffers of -o's output: two lines of one id would give two offsets for
 * one name.  A sorted copy: n log n. */
static vp_status check_unique_ids(const char *path, const int64_t *ids, int n, vp_error *err) {
    int64_t *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    if (!sorted) return vp_fail(err, VP_ERR_NOMEM, "out of memory");
    memcpy(sorted, ids, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_id);
    vp_status s = VP_OK;
    for (int i = 1; i < n && !s; i++)
        if (sorted[i] == sorted[i - 1]) {
            int first = -1, second = -1;
            for (int k = 0; k < n && second < 0; k++)
                if (ids[k] == sorted[i]) {
                    if (first < 0) first = k;
                    else second = k;
                }
            s = vp_fail(err, VP_ERR_INVALID, "%s: buffer id %lld appears twice (buffers #%d and #%d in the file)", path,
                        (long long)sorted[i], first + 1, second + 1);
        }
    free(sorted);
    return s;
}

vp_status vp_arena_read_csv(const char *path, vp_arena_item **items, int *n, int64_t **ids, vp_error *err) {
    /* a FIFO would block, a directory read as no lines ("0 buffers") */
    FILE *f = vp_file_fopen_regular(path, err);
    if (!f) return VP_ERR_IO;
    int cap = 1024, count = 0;
    vp_arena_item *it = malloc((size_t)cap * sizeof *it);
    int64_t *id_of = malloc((size_t)cap * sizeof *id_of);
    char line[512];
    int lineno = 0;
    int64_t total = 0;
    vp_status s = it && id_of ? VP_OK : vp_fail(err, VP_ERR_NOMEM, "out of memory");
    while (!s && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            s = vp_fail(err, VP_ERR_PARSE, "%s:%d: a line of over %zu bytes (expected 'id,lower,upper,size')", path,
                        lineno, sizeof line - 2);
            break;
        }
        if (memchr(line, 0, len + 1) != line + len) { /* a NUL inside: not text */
            s = vp_fail(err, VP_ERR_PARSE, "%s:%d: a NUL byte: not a CSV text file", path, lineno);
            break;
        }
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '\n' || *p == '#') continue;
        if (lineno == 1 && (p[0] < '0' || p[0] > '9') && p[0] != '-') continue; /* header */
        long long v[4];
        int field = parse_fields(p, v);
        if (field == -1) {
            char shown[256];
            s = vp_fail(err, VP_ERR_PARSE, "%s:%d: expected 'id,lower,upper,size', got '%s'", path, lineno,
                        printable(p, 60, shown, sizeof shown));
            break;
        }
        if (field >= 0) {
            static const char *const names[4] = {"id", "lower", "upper", "size"};
            s = vp_fail(err, VP_ERR_INVALID, "%s:%d: %s is out of range (%s)", path, lineno, names[field],
                        field == 0 ? "a 64-bit integer" : field == 3 ? "at most 2^62 bytes" : "steps within +-2^61");
            break;
        }
        long long id = v[0], lower = v[1], upper = v[2], size = v[3];
        if (size < 0 || upper < lower) {
            s = vp_fail(err, VP_ERR_INVALID, "%s:%d: buffer %lld has size %lld and lifetime [%lld, %lld)", path, lineno,
                        id, size, lower, upper);
            break;
        }
        if (size > (INT64_C(1) << CSV_MAX_LOG2) - total) {
            s = vp_fail(err, VP_ERR_INVALID, "%s:%d: the sizes up to buffer %lld add up past 2^%d bytes", path, lineno, id,
                        CSV_MAX_LOG2);
            break;
        }
        total += size;
        if (count == cap) {
            cap *= 2;
            vp_arena_item *m = realloc(it, (size_t)cap * sizeof *it);
            if (m) it = m;
            int64_t *mi = realloc(id_of, (size_t)cap * sizeof *id_of);
            if (mi) id_of = mi;
            if (!m || !mi) {
                s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
                break;
            }
        }
        id_of[count] = id;
        it[count++] = (vp_arena_item){size, lower, upper, 0};
    }
    if (!s && ferror(f)) s = vp_fail(err, VP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    fclose(f);
    if (!s) s = check_unique_ids(path, id_of, count, err);
    if (s) {
        free(it);
        free(id_of);
        return s;
    }
    *items = it;
    *n = count;
    if (ids) *ids = id_of;
    else free(id_of);
    return VP_OK;
}
