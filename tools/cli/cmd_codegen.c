/* onnx-vplan codegen: a plan becomes C source that trains (codegen/c_source.c). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "c_source.h"
#include "cli.h"
#include "ir/atomic_file.h"
#include "plan/plan_load.h"

static int is_ident(const char *s) {
    if (!s[0] || isdigit((unsigned char)s[0]) || strlen(s) > 48) return 0;
    for (const char *c = s; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_') return 0;
    return 1;
}

/* The plan file's name without its folder and extension, as an identifier. */
static void default_prefix(const char *path, char *dst, size_t size) { /* size >= 48 */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char stem[128];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot && dot != stem) *dot = 0;
    char id[44];
    vp_c_ident(id, sizeof id, stem, 40);
    dst[0] = 'm';
    /* isdigit says "true" with any nonzero int (2048 in glibc): an offset needs 0 or 1 */
    vp_c_ident(dst + (isdigit((unsigned char)id[0]) ? 1 : 0), size - 1, id, 40);
}

static int run_codegen(int argc, char **argv) {
    const char *path = NULL, *out = NULL, *prefix = NULL, *target = "c";
    int embed = 0, reference = 0;
    const cli_opt table[] = {
        {"PLAN", CLI_POS, &path, NULL, NULL},
        {"-o|--output", CLI_STR, &out, "DIR", "where NAME_step.c, NAME_step.h and NAME.weights go (created)"},
        {"--prefix", CLI_STR, &prefix, "NAME",
         "the C name of the step: NAME_step(), NAME_io, NAME_step.c\n(default: the plan file's name)"},
        {"--target", CLI_ENUM, &target, "c|cuda",
         "c: the CPU kernels on a host arena (default); cuda: the CUDA\n"
         "backend's kernels, resolved once, on an arena in device memory"},
        {"--embed-weights", CLI_SET, &embed, NULL, "compile the initial weights into NAME_step.c (no .weights file)"},
        {"--reference", CLI_SET, &reference, NULL,
         "c: call the reference kernels and OpenBLAS, as `run --reference`\n"
         "(default: what `run` calls: oneDNN convolutions and sgemm)"},
        {0}};
    int rc = cli_parse(&cli_cmd_codegen, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    char pfx[64];
    if (!out) return cli_report(vp_fail(&err, VP_ERR_USAGE, "codegen: -o DIR is required"), &err);
    if (prefix && !is_ident(prefix))
        return cli_report(vp_fail(&err, VP_ERR_USAGE, "codegen: --prefix '%s' is not a C identifier of at most 48 characters", prefix),
                          &err);
    if (prefix) snprintf(pfx, sizeof pfx, "%s", prefix);
    else default_prefix(path, pfx, sizeof pfx);
    /* the command line as typed, for the provenance header */
    size_t len = strlen("onnx-vplan") + 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    char *cmd = malloc(len);
    if (!cmd) return cli_report(vp_fail(&err, VP_ERR_NOMEM, "out of memory"), &err);
    strcpy(cmd, "onnx-vplan");
    for (int i = 0; i < argc; i++) strcat(strcat(cmd, " "), argv[i]);

    vp_loaded_plan lp;
    vp_status s = vp_plan_read_sound(path, &lp, &err);
    if (s) {
        free(cmd);
        return cli_report(s, &err);
    }
    /* everything goes into a temporary folder beside DIR, renamed into place once whole:
     * a refusal or a failed write leaves DIR as it was (or absent) */
    vp_atomic_dir ad;
    s = vp_atomic_dir_open(&ad, out, &err);
    vp_codegen_opts o = {.plan_path = path, .out_dir = ad.tmp, .prefix = pfx, .embed_weights = embed, .command_line = cmd,
                         .cuda = !strcmp(target, "cuda"), .reference = reference};
    if (!s) {
        s = vp_codegen_c(&lp, &o, &err);
        vp_atomic_dir_error_path(&ad, &err);
        if (s) vp_atomic_dir_abort(&ad);
        else s = vp_atomic_dir_commit(&ad, &err);
    }
    char weights[80] = "";
    if (!embed) snprintf(weights, sizeof weights, " and %s.weights", pfx);
    if (!s)
        printf("wrote %s/%s_step.c and %s_step.h%s: %d steps, arena %lld bytes\n", out, pfx, pfx, weights, lp.plan.n_steps,
               (long long)lp.plan.arena_bytes);
    vp_loaded_plan_free(&lp);
    free(cmd);
    return cli_report(s, &err);
}

const cli_cmd cli_cmd_codegen = {
    "codegen", run_codegen, "PLAN -o DIR [--target c|cuda] [--prefix NAME] [--embed-weights] [--reference]", "write a plan's training step as C source",
    "Writes the plan's training step as C: NAME_step.h (the io struct, arena size and\n"
    "alignment, NAME_init, NAME_step, NAME_save) and NAME_step.c, one function per plan\n"
    "step calling what `run`'s CPU backend calls for it (oneDNN's primitive, built once by\n"
    "NAME_init, for a convolution; else libvplanrt's kernel, its products on oneDNN's sgemm)\n"
    "with the plan's constant offsets and shapes, in plan order: no interpreter, no\n"
    "allocation during a step, and losses and weights bit-identical to `onnx-vplan run`\n"
    "of the same plan (to `run --reference` with --reference).  The initial weights go to\n"
    "NAME.weights beside them, or into the source with --embed-weights.  Build with\n"
    "  cc -std=c17 -c NAME_step.c $(pkg-config --cflags vplanrt)\n"
    "and link with $(pkg-config --libs vplanrt).\n",
    NULL};
