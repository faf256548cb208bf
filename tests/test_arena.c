/* The arena solver's properties on random instances, checked independently of it:
 * - no two items live at once share a byte (a sweep over time keeping the live items
 *   sorted by offset, checking each new one against its neighbours);
 * - the arena is the highest end offset and at least the lower bound;
 * - the lower bound equals the most bytes live at one step, summed by brute force;
 * - the same for every algorithm of the portfolio run alone.
 * Instances: 1 to 5,000 items with ties, zero sizes, identical lifetimes, pieces
 * disjoint in time, and (checked pairwise) lifetimes of no steps.  Then the CSV
 * reader: a good file, and the errors a user can make, with their messages.
 *
 * Prints one line per failure and a final "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena_check.h"
#include "cpu_host.h"
#include "memory/arena/arena.h"
#include "memory/arena/arena_alloc.h"
#include "memory/arena/arena_exact.h"
#include "memory/arena/arena_exact_search.h"
#include "memory/arena/arena_portfolio.h"
#include "ir/rng.h"

static int passed, failed;

static void check(int ok, const char *what, const char *detail) {
    if (ok) passed++;
    else {
        failed++;
        printf("FAIL %s: %s\n", what, detail);
    }
}

/* ---- independent checks ---- */

typedef struct ev {
    int64_t t;
    int start; /* 0: end, 1: start; ends first at one time */
    int i;
} ev;

static int by_ev(const void *a, const void *b) {
    const ev *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->start != y->start) return x->start - y->start;
    return x->i - y->i;
}

/* Items live at once (lifetimes of at least one step, sizes above zero) must not share
 * a byte.  Returns 1 when valid, else 0 with the offending pair in why. */
static int valid_sweep(const vp_arena_item *it, int n, char *why, size_t len) {
    ev *e = malloc((size_t)(2 * n + 1) * sizeof *e);
    int *live = malloc((size_t)(n + 1) * sizeof *live), n_live = 0, m = 0, ok = 1;
    for (int i = 0; i < n; i++) {
        if (it[i].size == 0 || it[i].start == it[i].end) continue;
        if (it[i].offset < 0) {
            snprintf(why, len, "item %d has offset %lld", i, (long long)it[i].offset);
            ok = 0;
        }
        e[m++] = (ev){it[i].start, 1, i};
        e[m++] = (ev){it[i].end, 0, i};
    }
    qsort(e, (size_t)m, sizeof *e, by_ev);
    for (int k = 0; k < m && ok; k++) {
        int i = e[k].i;
        int lo = 0, hi = n_live; /* first live item with offset >= it[i].offset */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (it[live[mid]].offset < it[i].offset) lo = mid + 1;
            else hi = mid;
        }
        if (!e[k].start) { /* live offsets are distinct (the items are disjoint), so this finds i */
            if (lo < n_live && live[lo] == i) {
                memmove(live + lo, live + lo + 1, (size_t)(n_live - lo - 1) * sizeof *live);
                n_live--;
            }
            continue;
        }
        int prev = lo > 0 ? live[lo - 1] : -1, next = lo < n_live ? live[lo] : -1;
        if (prev >= 0 && it[prev].offset + it[prev].size > it[i].offset) ok = 0, next = prev;
        else if (next >= 0 && it[i].offset + it[i].size > it[next].offset) ok = 0;
        if (!ok) {
            snprintf(why, len, "items %d [%lld, %lld) at %lld+%lld and %d [%lld, %lld) at %lld+%lld overlap", i,
                     (long long)it[i].start, (long long)it[i].end, (long long)it[i].offset, (long long)it[i].size, next,
                     (long long)it[next].start, (long long)it[next].end, (long long)it[next].offset,
                     (long long)it[next].size);
            break;
        }
        memmove(live + lo + 1, live + lo, (size_t)(n_live - lo) * sizeof *live);
        live[lo] = i;
        n_live++;
    }
    free(e);
    free(live);
    return ok;
}

/* The most bytes live at one step: at each start time, the sum over every item. */
static int64_t brute_bound(const vp_arena_item *it, int n) {
    int64_t best = 0;
    for (int i = 0; i < n; i++) {
        int64_t t = it[i].start, live = 0;
        for (int j = 0; j < n; j++)
            if (it[j].start <= t && t < it[j].end) live += it[j].size;
        if (live > best) best = live;
    }
    return best;
}

/* ---- instances ---- */

enum { K_MIXED, K_TIES, K_ZERO_SIZES, K_SAME_LIFE, K_PIECES, K_NESTED, K_ZERO_LIFE, N_KINDS };
static const char *const kind_names[N_KINDS] = {"mixed", "ties", "zero sizes", "identical lifetimes", "disjoint pieces",
                                                "nested", "zero-step lifetimes"};

static int64_t rnd(vp_rng *r, int64_t n) { return n > 0 ? (int64_t)(vp_rng_next(r) % (uint64_t)n) : 0; }

static void make_instance(vp_rng *r, int kind, int n, vp_arena_item *it) {
    int64_t steps = kind == K_TIES ? 6 : 2 * (int64_t)n + 2;
    for (int i = 0; i < n; i++) {
        int64_t size = rnd(r, 4) == 0 ? 64 * (1 + rnd(r, 3)) : 1 + rnd(r, 1 << 20);
        if (kind == K_ZERO_SIZES && rnd(r, 3) == 0) size = 0;
        int64_t start = rnd(r, steps), len = 1 + rnd(r, rnd(r, 2) ? steps / 8 + 1 : steps);
        if (kind == K_SAME_LIFE && i && rnd(r, 2)) start = it[i - 1].start, len = it[i - 1].end - it[i - 1].start;
        if (kind == K_PIECES) { /* blocks of 10 steps with a gap of 5 between */
            int64_t block = rnd(r, n / 20 + 1);
            start = block * 15 + rnd(r, 10);
            len = 1 + rnd(r, 10 - (start - block * 15));
        }
        if (kind == K_NESTED) {
            int64_t half = n / 2 + 1, k = i % half;
            start = i < half ? k : 2 * half - k - 1;
            len = i < half ? 2 * half - 2 * k : 1 + rnd(r, 3);
        }
        if (kind == K_ZERO_LIFE && rnd(r, 4) == 0) len = 0;
        it[i] = (vp_arena_item){size, start, start + len, -1};
    }
}

static void check_solution(const char *what, const vp_arena_item *it, int n, const vp_arena_result *res, int64_t bound,
                           int zero_life) {
    char why[400];
    int ok = zero_life ? arena_check_pairs(it, n, why, sizeof why) : valid_sweep(it, n, why, sizeof why);
    check(ok, what, why);
    snprintf(why, sizeof why, "arena %lld, highest end %lld, lower bound %lld (expected %lld)", (long long)res->arena,
             (long long)arena_check_top(it, n), (long long)res->lower_bound, (long long)bound);
    check(res->arena == arena_check_top(it, n) && res->arena >= bound && res->lower_bound == bound, what, why);
}

static void test_random_instances(void) {
    vp_rng r = {20261129};
    int sizes[] = {1, 2, 3, 5, 10, 30, 47, 48, 60, 100, 200, 500, 1000, 2000, 5000};
    int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    int cap = 5000;
    vp_arena_item *orig = malloc((size_t)cap * sizeof *orig), *it = malloc((size_t)cap * sizeof *it);
    for (int round = 0; round < 3; round++)
        for (int si = 0; si < n_sizes; si++)
            for (int kind = 0; kind < N_KINDS; kind++) {
                int n = sizes[si];
                if (kind == K_ZERO_LIFE && n > 1000) continue; /* checked pairwise */
                if (n >= 2000 && round) continue;
                make_instance(&r, kind, n, orig);
                int64_t bound = brute_bound(orig, n);
                char what[160];
                snprintf(what, sizeof what, "%s, %d items, round %d", kind_names[kind], n, round);
                check(vp_arena_lower_bound(orig, n) == bound, what, "vp_arena_lower_bound differs from brute force");
                /* the default solver, a short search */
                memcpy(it, orig, (size_t)n * sizeof *it);
                vp_arena_opts o = {.search_seconds = 0.002, .only = -1, .exact_seconds = 0.01};
                vp_arena_result res;
                vp_error err;
                vp_status s = vp_arena_solve(it, n, &o, &res, &err);
                check(!s, what, s ? err.msg : "");
                if (!s) check_solution(what, it, n, &res, bound, kind == K_ZERO_LIFE);
                /* each algorithm alone */
                for (int a = 0; a < vp_arena_algo_count() && !s; a++) {
                    memcpy(it, orig, (size_t)n * sizeof *it);
                    vp_arena_opts oa = {.search_seconds = -1, .only = a};
                    char w2[220];
                    snprintf(w2, sizeof w2, "%s, %s", what, vp_arena_algo_name(a));
                    vp_status sa = vp_arena_solve(it, n, &oa, &res, &err);
                    check(!sa, w2, sa ? err.msg : "");
                    if (!sa) check_solution(w2, it, n, &res, bound, kind == K_ZERO_LIFE);
                    if (!sa && n) check(res.algos[a].arena == res.arena, w2, "the algorithm's own arena differs");
                }
            }
    free(orig);
    free(it);
}

/* run_all reports every algorithm, and the kept arena is the smallest of them or better. */
static void test_run_all(void) {
    vp_rng r = {7};
    int n = 800;
    vp_arena_item *it = malloc((size_t)n * sizeof *it);
    make_instance(&r, K_MIXED, n, it);
    vp_arena_opts o = {.run_all = 1, .search_seconds = -1, .only = -1, .exact_seconds = -1};
    vp_arena_result res;
    vp_error err;
    vp_status s = vp_arena_solve(it, n, &o, &res, &err);
    check(!s, "run_all", s ? err.msg : "");
    int64_t smallest = INT64_MAX;
    for (int a = 0; a < res.n_algos; a++) {
        check(res.algos[a].arena >= res.lower_bound, "run_all", res.algos[a].name);
        if (res.algos[a].arena < smallest) smallest = res.algos[a].arena;
    }
    check(res.arena <= smallest, "run_all keeps the smallest", res.kept);
    free(it);
}

/* The checker itself catches an overlap. */
static void test_checker(void) {
    vp_arena_item it[3] = {{100, 0, 5, 0}, {50, 3, 8, 100}, {10, 5, 9, 0}};
    char why[400];
    check(valid_sweep(it, 3, why, sizeof why), "checker accepts a valid assignment", why);
    it[1].offset = 99; /* shares byte 99 with item 0 during steps 3 and 4 */
    check(!valid_sweep(it, 3, why, sizeof why), "checker finds an overlap", "accepted");
    it[1].offset = 100;
    it[2].offset = 140; /* inside item 1 during steps 5 to 7 */
    check(!valid_sweep(it, 3, why, sizeof why), "checker finds an overlap above", "accepted");
    check(!arena_check_pairs(it, 3, why, sizeof why), "pairwise checker finds it too", "accepted");
    check(brute_bound(it, 3) == 150, "brute-force bound", "not 150");
}

static void test_bad_items(void) {
    vp_arena_item it[2] = {{64, 0, 2, 0}, {-1, 0, 2, 0}};
    vp_arena_result res;
    vp_error err;
    vp_status s = vp_arena_solve(it, 2, NULL, &res, &err);
    check(s == VP_ERR_INVALID && strstr(err.msg, "item 1") && strstr(err.msg, "size -1"), "negative size rejected",
          s ? err.msg : "accepted");
    vp_arena_item back[1] = {{64, 5, 3, 0}};
    s = vp_arena_solve(back, 1, NULL, &res, &err);
    check(s == VP_ERR_INVALID && strstr(err.msg, "[5, 3)"), "end before start rejected", s ? err.msg : "accepted");
    s = vp_arena_solve(NULL, 0, NULL, &res, &err);
    check(!s && res.arena == 0 && res.lower_bound == 0, "no items", s ? err.msg : "");
}

/* ---- CSV ---- */

static const char *write_tmp(const char *name, const char *text) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/test_arena_%s.csv", VP_BINARY_DIR, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static void csv_error(const char *name, const char *text, vp_status want, const char *msg_part) {
    const char *path = write_tmp(name, text);
    vp_arena_item *it = NULL;
    int n = 0;
    vp_error err;
    vp_status s = vp_arena_read_csv(path, &it, &n, NULL, &err);
    char what[128], why[1200];
    snprintf(what, sizeof what, "csv %s", name);
    snprintf(why, sizeof why, "status %d, message '%s' (want %d and '%s')", (int)s, s ? err.msg : "", (int)want, msg_part);
    check(s == want && strstr(err.msg, msg_part) != NULL, what, why);
    if (!s) free(it);
    remove(path);
}

static void test_csv(void) {
    const char *path = write_tmp("good", "id,lower,upper,size\n40,0,3,128\n# a comment\n\n-7, 2, 5, 64\n2,4,6,0\r\n");
    vp_arena_item *it = NULL;
    int64_t *ids = NULL;
    int n = 0;
    vp_error err;
    vp_status s = vp_arena_read_csv(path, &it, &n, &ids, &err);
    check(!s && n == 3 && it[0].size == 128 && it[1].start == 2 && it[1].end == 5 && it[2].size == 0, "csv good",
          s ? err.msg : "wrong items");
    /* the file's ids, not line numbers: `arena -o` writes them back */
    check(!s && ids[0] == 40 && ids[1] == -7 && ids[2] == 2, "csv ids", s ? err.msg : "wrong ids");
    free(it);
    free(ids);
    remove(path);
    csv_error("bad_line", "0,0,3,128\n1,2,x,64\n", VP_ERR_PARSE, ":2: expected 'id,lower,upper,size', got '1,2,x,64");
    csv_error("short_line", "0,0,3\n", VP_ERR_PARSE, ":1: expected 'id,lower,upper,size'");
    csv_error("extra_field", "0,0,3,128,9\n", VP_ERR_PARSE, ":1: expected");
    csv_error("negative_size", "id,lower,upper,size\n7,0,3,-128\n", VP_ERR_INVALID, ":2: buffer 7 has size -128");
    csv_error("upper_below_lower", "0,5,3,128\n", VP_ERR_INVALID, ":1: buffer 0 has size 128 and lifetime [5, 3)");
    csv_error("size_past_int64", "0,0,3,99999999999999999999\n", VP_ERR_INVALID, ":1: size is out of range");
    csv_error("sizes_past_2_62", "0,0,3,4611686018427387904\n1,0,3,1\n", VP_ERR_INVALID, ":2: the sizes up to buffer 1");
    it = NULL;
    s = vp_arena_read_csv(VP_BINARY_DIR "/no_such_file.csv", &it, &n, NULL, &err);
    check(s == VP_ERR_IO && strstr(err.msg, "no_such_file.csv: cannot open"), "csv missing file", s ? err.msg : "read");
}

/* ---- the complete search against brute force ---- */

/* The smallest arena of items it[0..n) by exhaustion: every offset of every item in
 * index order, capacity raised from the bound until one fits; independent of the
 * solver's canonical orders and pruning (offsets that clash with an item placed before
 * are skipped a run at a time, which leaves out none that fits). */
static int fits_from(const vp_arena_item *it, int n, int64_t cap, int64_t *off, int k) {
    if (k == n) return 1;
    for (int64_t o = 0; o + it[k].size <= cap;) {
        int clash = -1;
        for (int j = 0; j < k && clash < 0; j++)
            if (it[j].start < it[k].end && it[k].start < it[j].end && off[j] < o + it[k].size && o < off[j] + it[j].size)
                clash = j;
        if (clash >= 0) { /* every offset below the clash's top clashes too: skip them, no others */
            o = off[clash] + it[clash].size;
            continue;
        }
        off[k] = o;
        if (fits_from(it, n, cap, off, k + 1)) return 1;
        o++;
    }
    return 0;
}

static int64_t brute_optimum(const vp_arena_item *it, int n) {
    int64_t off[16];
    for (int64_t cap = brute_bound(it, n);; cap++)
        if (fits_from(it, n, cap, off, 0)) return cap;
}

/* Small instances (sizes 1 to 9, heavy overlap) where the greedy orders often miss the
 * optimum: the default solver with a complete search reaches the brute-force optimum
 * and says it is optimal, is never worse than the portfolio alone, and every result
 * passes the checker.  Also: the same limit gives the same offsets twice.  Starts in
 * [0, steps), lifetimes 1 to max_len: a long timeline of short lifetimes splits the
 * search into independent groups as items are placed (the decomposition). */
static void test_exact_brute_force(uint64_t seed, int steps, int max_len) {
    vp_rng r = {seed};
    int misses = 0, cases = 0, above = 0;
    for (int round = 0; round < 300; round++) {
        int n = 5 + (int)rnd(&r, 5);
        vp_arena_item orig[16], it[16], again[16];
        for (int i = 0; i < n; i++) {
            int64_t start = rnd(&r, steps), len = 1 + rnd(&r, max_len);
            orig[i] = (vp_arena_item){1 + rnd(&r, 9), start, start + len, -1};
        }
        int64_t best = brute_optimum(orig, n), bound = brute_bound(orig, n);
        char what[160];
        snprintf(what, sizeof what, "brute force, %d steps, %d items, round %d", steps, n, round);
        vp_error err;
        vp_arena_result port, res, res2;
        memcpy(it, orig, sizeof orig);
        vp_arena_opts po = {.search_seconds = -1, .only = -1, .exact_seconds = -1};
        vp_status s = vp_arena_solve(it, n, &po, &port, &err);
        check(!s, what, s ? err.msg : "");
        if (!s) check_solution(what, it, n, &port, bound, 0);
        misses += !s && port.arena > best;
        above += best > bound;
        vp_arena_opts eo = {.search_seconds = -1, .only = -1, .exact_seconds = 1};
        memcpy(it, orig, sizeof orig);
        s = vp_arena_solve(it, n, &eo, &res, &err);
        check(!s, what, s ? err.msg : "");
        if (s) continue;
        cases++;
        check_solution(what, it, n, &res, bound, 0);
        char why[200];
        snprintf(why, sizeof why, "arena %lld, brute-force optimum %lld, portfolio %lld, proven %lld (%s)",
                 (long long)res.arena, (long long)best, (long long)port.arena, (long long)res.proven_lower,
                 vp_arena_outcome(&res));
        check(res.arena == best && res.arena <= port.arena, what, why);
        check(res.proven_lower == res.arena && strcmp(vp_arena_outcome(&res), "best found"), what, why);
        memcpy(again, orig, sizeof orig);
        s = vp_arena_solve(again, n, &eo, &res2, &err);
        int same = !s && res2.arena == res.arena && res2.exact_work == res.exact_work;
        for (int i = 0; i < n && same; i++) same = again[i].offset == it[i].offset;
        check(same, what, "a second run with the same limit differs");
    }
    /* the search must find what the portfolio missed (on instances this small the
     * optimum is almost always the bound: `above` is reported, not required) */
    char why[120];
    snprintf(why, sizeof why, "of %d, the portfolio missed the optimum in %d, the optimum is above the bound in %d", cases,
             misses, above);
    check(misses >= 2, "brute force instances are hard enough", why);
}

/* The search alone (vp_arena_exact_piece) from the worst incumbent, every item stacked on
 * the last: on a long timeline of short lifetimes placing items leaves groups that
 * share no step with the rest, searched apart.  It must reach the brute-force optimum,
 * prove it, and leave offsets the checker accepts. */
static void test_exact_piece_groups(void) {
    vp_rng r = {41};
    for (int round = 0; round < 200; round++) {
        int n = 6 + (int)rnd(&r, 4), idx[16];
        vp_arena_item orig[16], it[16];
        int64_t stack = 0;
        for (int i = 0; i < n; i++) {
            int64_t start = rnd(&r, 10), len = 1 + rnd(&r, 3);
            orig[i] = (vp_arena_item){1 + rnd(&r, 9), start, start + len, stack};
            stack += orig[i].size;
            idx[i] = i;
        }
        int64_t best = brute_optimum(orig, n), bound = brute_bound(orig, n);
        memcpy(it, orig, sizeof orig);
        vp_arena_exact_result er;
        vp_error err;
        char what[120], why[200];
        snprintf(what, sizeof what, "search alone, %d items, round %d", n, round);
        vp_status s = vp_arena_exact_piece(it, idx, n, bound, 0, 1000000000, &er, &err);
        check(!s, what, s ? err.msg : "");
        if (s) continue;
        vp_arena_result res = {.arena = er.arena, .lower_bound = bound, .proven_lower = er.proven_lower};
        check_solution(what, it, n, &res, bound, 0);
        snprintf(why, sizeof why, "arena %lld, brute-force optimum %lld, proven %lld", (long long)er.arena, (long long)best,
                 (long long)er.proven_lower);
        check(er.arena == best && er.proven_lower == best, what, why);
    }
}

/* The floors of the search's sections: a section a placement set to its top can hold
 * only items already above it, and a later raise of one of them must lift that floor
 * too.  Reading only sections whose floor equalled the raised item's old floor missed
 * those prunes: on this instance (60 items, 20 steps, seed 151) the search then needed
 * 133k units of work to reach the bound; with the floors read it takes about 8k.  A
 * budget of 30k must reach the bound, prove it optimal, and pass the checker. */
static void test_exact_floors(void) {
    vp_rng r = {151};
    enum { N = 60 };
    vp_arena_item it[N];
    int idx[N];
    int64_t stack = 0;
    for (int i = 0; i < N; i++) {
        int64_t start = rnd(&r, 20), len = 1 + rnd(&r, 8);
        it[i] = (vp_arena_item){1 + rnd(&r, 100), start, start + len, stack};
        stack += it[i].size;
        idx[i] = i;
    }
    int64_t bound = brute_bound(it, N);
    vp_arena_exact_result er;
    vp_error err;
    vp_status s = vp_arena_exact_piece(it, idx, N, bound, 0, 30000, &er, &err);
    check(!s, "search floors", s ? err.msg : "");
    if (s) return;
    vp_arena_result res = {.arena = er.arena, .lower_bound = bound, .proven_lower = er.proven_lower};
    check_solution("search floors", it, N, &res, bound, 0);
    char why[160];
    snprintf(why, sizeof why, "arena %lld, bound %lld, work %lld of 30000", (long long)er.arena, (long long)bound,
             (long long)er.work);
    check(er.arena == bound && er.proven_lower == bound, "search floors: the bound within 30k work", why);
}

/* The neighbourhood search (arena_exact_lns.c) alone, from the greedy portfolio's
 * assignment of random instances (120 items, 40 steps, lifetimes 1 to 12, sizes 1 to
 * 100): what it writes passes the checker (the fixed items' skyline is the freed ones'
 * floor: a wrong skyline overlaps them), is never larger, is the same twice, and is
 * lower in nearly every case within 400k units of work (measured: all 12, 6 of them at
 * the bound).  On these the decision search alone also finds the arena the
 * neighbourhood search reaches, within a third of that work per rank: the neighbourhood
 * pays where the decision stays undecided near the optimum (MiniMalloc's D and J,
 * RESULTS.md), instances too large for a unit test. */
static void test_exact_lns(void) {
    enum { N = 120, CASES = 12 };
    static vp_arena_item orig[N], it[N], again[N];
    int idx[N], lowered = 0;
    for (int c = 0; c < CASES; c++) {
        vp_rng r = {900 + (uint64_t)c};
        for (int i = 0; i < N; i++) {
            int64_t start = rnd(&r, 40), len = 1 + rnd(&r, 12);
            orig[i] = (vp_arena_item){1 + rnd(&r, 100), start, start + len, -1};
            idx[i] = i;
        }
        vp_arena_result port;
        vp_error err;
        vp_arena_opts po = {.search_seconds = -1, .only = -1, .exact_seconds = -1};
        char what[80];
        snprintf(what, sizeof what, "neighbourhood search, case %d", c);
        vp_status s = vp_arena_solve(orig, N, &po, &port, &err);
        check(!s, what, s ? err.msg : "");
        if (s) return;
        int64_t bound = brute_bound(orig, N), hi = port.arena, hi2 = port.arena, used = 0, used2 = 0, budget = 400000;
        int att = 0;
        memcpy(it, orig, sizeof orig);
        memcpy(again, orig, sizeof orig);
        check(vp_exact_lns(it, idx, idx, N, 1, bound, &hi, budget, &used, &att) == 0, what, "out of memory");
        check(vp_exact_lns(again, idx, idx, N, 1, bound, &hi2, budget, &used2, &att) == 0, what, "out of memory");
        vp_arena_result res = {.arena = hi, .lower_bound = bound, .proven_lower = bound};
        check_solution(what, it, N, &res, bound, 0);
        int same = hi == hi2 && used == used2;
        for (int i = 0; i < N && same; i++) same = it[i].offset == again[i].offset;
        check(same, what, "a second run with the same budget differs");
        check(hi <= port.arena, what, "larger than its start");
        lowered += hi < port.arena;
    }
    char why[80];
    snprintf(why, sizeof why, "lowered %d of %d", lowered, CASES);
    check(lowered >= CASES - 2, "the neighbourhood search lowers the portfolio's arenas", why);
}

/* The allocator's replay (memory/arena/arena_alloc.c): a valid assignment on every kind of
 * instance (pairwise where lifetimes of no steps make the sweep's rule differ), its pair
 * count against brute force; and the solver gives it a piece exactly when the greedy
 * orders' pairs would outrun the limits. */
static void test_replay(void) {
    vp_rng r = {20261206};
    int sizes[] = {1, 2, 5, 30, 200, 1000, 3000};
    int cap = 40000;
    vp_arena_item *it = malloc((size_t)cap * sizeof *it);
    int *idx = malloc((size_t)cap * sizeof *idx);
    for (int i = 0; i < cap; i++) idx[i] = i;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int kind = 0; kind < N_KINDS; kind++) {
            int n = sizes[si];
            make_instance(&r, kind, n, it);
            char what[160], why[400] = "";
            snprintf(what, sizeof what, "replay: %s, %d items", kind_names[kind], n);
            int64_t pairs = 0;
            for (int i = 0; i < n && n <= 1000; i++)
                for (int j = i + 1; j < n; j++) pairs += it[i].start < it[j].end && it[j].start < it[i].end;
            if (n <= 1000 && kind != K_ZERO_LIFE)
                check(vp_arena_overlap_pairs(it, idx, n) == pairs, what, "the pair count differs from brute force");
            int64_t arena = vp_place_alloc(it, idx, n);
            int ok = kind == K_ZERO_LIFE ? arena_check_pairs(it, n, why, sizeof why) : valid_sweep(it, n, why, sizeof why);
            check(ok, what, why);
            snprintf(why, sizeof why, "arena %lld, highest end %lld, bound %lld", (long long)arena,
                     (long long)arena_check_top(it, n), (long long)vp_arena_lower_bound(it, n));
            check(arena == arena_check_top(it, n) && arena >= vp_arena_lower_bound(it, n), what, why);
        }
    /* 40,000 buffers some 200 at a time: about 8e6 pairs, 1.6 s of the ten greedy orders
     * by VP_ARENA_GREEDY_PAIRS_PER_SECOND, over the default limits' 1.2 s */
    for (int i = 0; i < cap; i++) {
        int64_t start = rnd(&r, cap);
        it[i] = (vp_arena_item){1 + rnd(&r, 1 << 16), start, start + 1 + rnd(&r, 400), -1};
    }
    int64_t pairs = vp_arena_overlap_pairs(it, idx, cap);
    double greedy_s = VP_ARENA_N_ALGOS * (double)pairs / VP_ARENA_GREEDY_PAIRS_PER_SECOND;
    char why[400];
    snprintf(why, sizeof why, "%lld pairs, %.2f s of greedy orders", (long long)pairs, greedy_s);
    check(greedy_s > 1.2 && greedy_s < 3, "replay: the dense instance's size", why);
    vp_arena_item *copy = malloc((size_t)cap * sizeof *copy);
    memcpy(copy, it, (size_t)cap * sizeof *copy);
    vp_arena_opts dflt = {.only = -1}, room = {.only = -1, .search_seconds = -1, .exact_seconds = greedy_s + 0.2};
    vp_arena_result res;
    vp_error err;
    vp_status s = vp_arena_solve(it, cap, &dflt, &res, &err);
    check(!s && res.n_replayed == 1 && !strcmp(res.kept, "first-fit replay"), "replay: taken under the default limits",
          s ? err.msg : res.kept);
    if (!s) check(valid_sweep(it, cap, why, sizeof why) && res.arena == arena_check_top(it, cap), "replay: dense, valid", why);
    s = vp_arena_solve(copy, cap, &room, &res, &err);
    check(!s && res.n_replayed == 0, "replay: the greedy orders run where the limits leave them room",
          s ? err.msg : res.kept);
    /* ...and are charged against them: the searches get what they leave */
    snprintf(why, sizeof why, "%.3f s charged for %.3f s of greedy orders", res.greedy_charged, greedy_s);
    check(!s && res.greedy_charged == greedy_s, "replay: greedy orders charged against the limits", why);
    /* a model's pieces (a few hundred buffers) are far below the share: nothing charged */
    make_instance(&r, K_MIXED, 300, it);
    s = vp_arena_solve(it, 300, &dflt, &res, &err);
    check(!s && res.greedy_charged == 0, "replay: 300 buffers, nothing charged", s ? err.msg : "");
    free(copy);
    free(it);
    free(idx);
}

int main(void) {
    vp_cpu_host_install();
    test_checker();
    test_bad_items();
    test_csv();
    test_run_all();
    test_random_instances();
    test_replay();
    test_exact_brute_force(17, 6, 5);
    test_exact_brute_force(29, 9, 4);
    test_exact_piece_groups();
    test_exact_floors();
    test_exact_lns();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
