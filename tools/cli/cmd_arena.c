/* onnx-vplan arena: the offset assignment alone, on a plain list of buffers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory/arena.h"
#include "cli.h"
#include "report.h"

static const char arena_usage[] =
    "usage: onnx-vplan arena FILE.csv [-o OUT.csv] [--all] [--search-seconds S]\n"
    "\n"
    "Assigns offsets to the buffers of FILE.csv, one per line 'id,lower,upper,size'\n"
    "(lifetime [lower, upper), the MiniMalloc benchmark format; a header line is\n"
    "allowed), and prints the arena, the lower bound (the most bytes live at once),\n"
    "their ratio, the time, and what each algorithm of the portfolio reached.\n"
    "  -o OUT.csv            write 'id,lower,upper,size,offset'\n"
    "  --all                 run every algorithm on every piece (for comparisons)\n"
    "  --search-seconds S    budget of the improving search (default 0.2)\n";

int cmd_arena(int argc, char **argv) {
    const char *path = NULL, *out = NULL;
    vp_arena_opts opts = {0, 0, -1};
    vp_error err;
    vp_status s = VP_OK;
    for (int i = 1; i < argc && !s; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(arena_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--all")) opts.run_all = 1;
        else if (!strcmp(a, "-o") || !strcmp(a, "--search-seconds")) {
            if (i + 1 >= argc) s = vp_fail(&err, VP_ERR_USAGE, "%s needs a value", a);
            else if (!strcmp(a, "-o")) out = argv[++i];
            else {
                char *end;
                opts.search_seconds = strtod(argv[++i], &end);
                if (*end || opts.search_seconds < 0)
                    s = vp_fail(&err, VP_ERR_USAGE, "--search-seconds expects a non-negative number");
                if (opts.search_seconds == 0) opts.search_seconds = -1;
            }
        } else if (a[0] == '-') s = vp_fail(&err, VP_ERR_USAGE, "arena: unknown option '%s' (see --help)", a);
        else path = a;
    }
    if (!s && !path) {
        fputs(arena_usage, stderr);
        return 2;
    }
    if (s) return cli_report(s, &err);
    vp_arena_item *items = NULL;
    int n = 0;
    s = vp_arena_read_csv(path, &items, &n, &err);
    vp_arena_result res;
    if (!s) s = vp_arena_solve(items, n, &opts, &res, &err);
    if (!s) {
        char b1[32], b2[32];
        printf("%s: %d buffers in %d pieces\n", path, n, res.n_pieces);
        printf("arena:       %lld bytes (%s)\n", (long long)res.arena, vp_human_bytes(res.arena, b1, sizeof b1));
        printf("lower bound: %lld bytes (%s)\n", (long long)res.lower_bound, vp_human_bytes(res.lower_bound, b2, sizeof b2));
        printf("ratio:       %.5f, kept %s, %.3f s\n", res.lower_bound ? (double)res.arena / (double)res.lower_bound : 1.0,
               res.kept, res.seconds);
        printf("algorithms%s:\n", opts.run_all ? "" : " (stopped early once one reached the bound; --all runs every one)");
        for (int a = 0; a < res.n_algos; a++)
            if (res.algos[a].arena)
                printf("  %-22s %14lld  %.5f  %.3f s\n", res.algos[a].name, (long long)res.algos[a].arena,
                       res.lower_bound ? (double)res.algos[a].arena / (double)res.lower_bound : 1.0, res.algos[a].seconds);
    }
    if (!s && out) {
        FILE *f = fopen(out, "w");
        if (!f) s = vp_fail(&err, VP_ERR_IO, "%s: cannot create: %s", out, strerror(errno));
        else {
            fprintf(f, "id,lower,upper,size,offset\n");
            for (int i = 0; i < n; i++)
                fprintf(f, "%d,%lld,%lld,%lld,%lld\n", i, (long long)items[i].start, (long long)items[i].end,
                        (long long)items[i].size, (long long)items[i].offset);
            if (fclose(f)) s = vp_fail(&err, VP_ERR_IO, "%s: write failed", out);
        }
    }
    free(items);
    return cli_report(s, &err);
}
