#include "cli_search.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli_train.h"
#include "report.h"
#include "search/task_pool.h"

static void print_table(const vp_search_result *r, const vp_device_profile *dev, int64_t budget) {
    char b1[32], b2[32];
    printf("joint search under %s on %s: %d candidates\n", vp_human_bytes(budget, b1, sizeof b1), dev->name, r->n);
    printf("   #  tp  prec  update    offload  remat   arena        host         est. step  recompute    comm       casts      host       fits\n");
    for (int i = 0; i < r->n; i++) {
        const vp_candidate *c = &r->c[i];
        printf("  %2d  %2d  %-4s  %-8s  %-7s  ", i, c->tp, vp_precision_name(c->precision), c->fused ? "fused" : "separate",
               c->offload ? "host" : "no");
        if (c->status) {
            printf("not built: %s\n", c->note);
            continue;
        }
        if (c->pruned) {
            printf("none    %-11s  %s\n", vp_human_bytes(c->arena_bytes, b2, sizeof b2), c->note);
            continue;
        }
        char b3[32];
        printf("%-6s  %-11s  %-11s  %7.4f ms %8.4f ms %8.4f ms %8.4f ms %8.4f ms  %s%s\n", c->remat == VP_REMAT_NONE ? "none" : "dp",
               vp_human_bytes(c->arena_bytes, b2, sizeof b2), c->host_bytes ? vp_human_bytes(c->host_bytes, b3, sizeof b3) : "-",
               1e3 * c->step_seconds, 1e3 * c->recompute_seconds, 1e3 * c->comm_seconds, 1e3 * c->cast_seconds,
               1e3 * c->host_seconds, c->fits ? "yes" : "no", i == r->best ? "  <- chosen" : "");
    }
    printf("%s\n", r->why);
    printf("searched in %.3f s on %d thread%s: %d candidates planned as they are, %d of them checkpointed by dp, %d not "
           "(they could not fit or win)\n", r->seconds, r->threads, r->threads == 1 ? "" : "s", r->n, r->n_dp, r->n_pruned);
}

vp_status cli_search(const char *model, const cli_pairs *dims, const vp_train_spec *spec, const vp_search_space *sp,
                     const vp_device_profile *dev, int64_t budget, int quiet, vp_search_result *r, vp_error *err) {
    vp_pipeline_opts base;
    cli_pipeline_init(&base, model, dims);
    base.spec = spec;
    base.device = dev;
    if (!vp_search_threads_valid())
        fprintf(stderr, "onnx-vplan: warning: VP_SEARCH_THREADS='%s' is not a positive number; planning on the %d "
                "processors online\n", getenv("VP_SEARCH_THREADS"), vp_search_threads());
    vp_status s = vp_search_run(sp, &base, budget, r, err);
    if (!s && !quiet) print_table(r, dev, budget);
    return s;
}

void cli_search_json(vp_json *j, const void *arg) {
    const vp_search_result *r = arg;
    vp_json_key(j, "search");
    vp_json_begin_object(j);
    vp_json_key(j, "chosen");
    vp_json_int(j, r->best);
    vp_json_key(j, "why");
    vp_json_string(j, r->why);
    vp_json_key(j, "seconds");
    vp_json_double(j, r->seconds);
    vp_json_key(j, "checkpointed");
    vp_json_int(j, r->n_dp);
    vp_json_key(j, "pruned");
    vp_json_int(j, r->n_pruned);
    vp_json_key(j, "candidates");
    vp_json_begin_array(j);
    for (int i = 0; i < r->n; i++) {
        const vp_candidate *c = &r->c[i];
        vp_json_begin_object(j);
        vp_json_key(j, "tp");
        vp_json_int(j, c->tp);
        vp_json_key(j, "precision");
        vp_json_string(j, vp_precision_name(c->precision));
        vp_json_key(j, "fused_update");
        vp_json_bool(j, c->fused);
        vp_json_key(j, "offload");
        vp_json_bool(j, c->offload);
        vp_json_key(j, "built");
        vp_json_bool(j, !c->status);
        vp_json_key(j, "pruned");
        vp_json_bool(j, c->pruned);
        if (c->pruned) {
            vp_json_key(j, "why_not_checkpointed");
            vp_json_string(j, c->note);
        }
        if (c->status) {
            vp_json_key(j, "note");
            vp_json_string(j, c->note);
        } else {
            vp_json_key(j, "remat");
            vp_json_string(j, vp_remat_name(c->remat));
            vp_json_key(j, "arena_bytes");
            vp_json_int(j, c->arena_bytes);
            vp_json_key(j, "estimated_step_seconds");
            vp_json_double(j, c->step_seconds);
            vp_json_key(j, "recompute_seconds");
            vp_json_double(j, c->recompute_seconds);
            vp_json_key(j, "comm_seconds");
            vp_json_double(j, c->comm_seconds);
            vp_json_key(j, "cast_seconds");
            vp_json_double(j, c->cast_seconds);
            vp_json_key(j, "host_seconds");
            vp_json_double(j, c->host_seconds);
            vp_json_key(j, "host_bytes");
            vp_json_int(j, c->host_bytes);
            vp_json_key(j, "recompute_nodes");
            vp_json_int(j, c->n_recompute);
            vp_json_key(j, "fits");
            vp_json_bool(j, c->fits);
        }
        vp_json_end_object(j);
    }
    vp_json_end_array(j);
    vp_json_end_object(j);
}
