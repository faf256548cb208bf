/* onnx-vplan arena: the offset assignment alone, on a plain list of buffers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/atomic_file.h"
#include "memory/arena/arena.h"
#include "cli.h"
#include "report.h"

static int run_arena(int argc, char **argv) {
    const char *path = NULL, *out = NULL;
    vp_arena_opts opts = {.only = -1};
    double search = NAN, limit = NAN;
    const cli_opt table[] = {
        {"FILE.csv", CLI_POS, &path, NULL, NULL},
        {"-o", CLI_STR, &out, "OUT.csv", "write 'id,lower,upper,size,offset'"},
        {"--all", CLI_SET, &opts.run_all, NULL, "run every algorithm on every piece (for comparisons)"},
        {"--search-seconds", CLI_NUM, &search, "S", "budget of the improving search (default 0.2; 0: no search)"},
        {"--time-limit", CLI_NUM, &limit, "S",
         "limit of the complete search on pieces the portfolio left above\n"
         "their bound (default 1; 0: none); counted in units of work, so a\n"
         "limit gives the same arena on any machine"},
        {0}};
    int rc = cli_parse(&cli_cmd_arena, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!isnan(search)) opts.search_seconds = search == 0 ? -1 : search; /* 0 here: no search */
    if (!isnan(limit)) opts.exact_seconds = limit == 0 ? -1 : limit;
    vp_error err;
    vp_arena_item *items = NULL;
    int n = 0;
    int64_t *ids = NULL;
    vp_status s = vp_arena_read_csv(path, &items, &n, &ids, &err);
    vp_arena_result res;
    if (!s) s = vp_arena_solve(items, n, &opts, &res, &err);
    if (!s) {
        char b1[32], b2[32];
        printf("%s: %d buffer%s in %d piece%s", path, n, n == 1 ? "" : "s", res.n_pieces, res.n_pieces == 1 ? "" : "s");
        if (res.n_pinned) printf(", and %d live at every step, at the bottom", res.n_pinned);
        printf("\n");
        if (res.n_replayed)
            printf("%d piece%s too large for the greedy orders within the limits: placed by a first-fit allocator's "
                   "replay (n log n; a larger --time-limit lets the greedy orders and the searches run)\n",
                   res.n_replayed, res.n_replayed == 1 ? "" : "s");
        printf("arena:       %lld bytes (%s)\n", (long long)res.arena, vp_human_bytes(res.arena, b1, sizeof b1));
        printf("lower bound: %lld bytes (%s)\n", (long long)res.lower_bound, vp_human_bytes(res.lower_bound, b2, sizeof b2));
        if (res.greedy_charged > 0)
            printf("greedy orders: about %.2f s by their %s, taken off the searches' limits\n", res.greedy_charged,
                   "pairs of buffers live at once");
        printf("ratio:       %.5f, kept %s, %.3f s\n", res.lower_bound ? (double)res.arena / (double)res.lower_bound : 1.0,
               res.kept, res.seconds);
        printf("outcome:     %s", vp_arena_outcome(&res));
        if (res.arena > res.lower_bound && res.proven_lower < res.arena)
            printf(" (no assignment below %lld bytes, ratio %.5f)", (long long)res.proven_lower,
                   res.lower_bound ? (double)res.proven_lower / (double)res.lower_bound : 1.0);
        printf("; complete search: %lld units of work\n", (long long)res.exact_work);
        printf("algorithms%s:\n", opts.run_all ? "" : " (stopped early once one reached the bound; --all runs every one)");
        for (int a = 0; a < res.n_algos; a++)
            if (res.algos[a].arena)
                printf("  %-22s %14lld  %.5f  %.3f s\n", res.algos[a].name, (long long)res.algos[a].arena,
                       res.lower_bound ? (double)res.algos[a].arena / (double)res.lower_bound : 1.0, res.algos[a].seconds);
    }
    if (!s && out) {
        vp_atomic_file af;
        s = vp_atomic_file_open(&af, out, &err);
        if (!s) {
            fprintf(af.f, "id,lower,upper,size,offset\n");
            for (int i = 0; i < n; i++)
                fprintf(af.f, "%lld,%lld,%lld,%lld,%lld\n", (long long)ids[i], (long long)items[i].start, (long long)items[i].end,
                        (long long)items[i].size, (long long)items[i].offset);
            s = vp_atomic_file_commit(&af, &err);
        }
    }
    free(items);
    free(ids);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_arena = {
    "arena", run_arena, "FILE.csv [-o OUT.csv] [--all] [--search-seconds S] [--time-limit S]",
    "the offset assignment alone on id,lower,upper,size",
    "Assigns offsets to the buffers of FILE.csv, one per line 'id,lower,upper,size'\n"
    "(lifetime [lower, upper), the MiniMalloc benchmark format; a header line is\n"
    "allowed), and prints the arena, the lower bound (the most bytes live at once),\n"
    "their ratio, the time, and what each algorithm of the portfolio reached.\n"
    "Where the portfolio misses the bound, a complete search (arena_exact.c)\n"
    "looks for a smaller arena; the outcome line says whether the arena reached\n"
    "the lower bound, is proven optimal above it, or is the best found.\n",
    NULL};
