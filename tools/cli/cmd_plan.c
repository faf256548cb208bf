/* onnx-vplan plan: the training step's memory, decided ahead of time. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_search.h"
#include "cli_train.h"
#include "plan_artifacts.h"
#include "plan/plan_file.h"
#include "ir/atomic_file.h"
#include "ir/op_registry.h"
#include "remat/cost.h"
#include "remat/remat.h"
#include "report.h"

/* The pipeline through the verified plan of the step o describes. */
static void plan_opts(vp_pipeline_opts *po, const char *model, const cli_pairs *dims, const cli_train_opts *o,
                      const vp_device_profile *dev, int fused, int64_t budget, vp_remat_kind remat, const vp_remat_opts *ro) {
    cli_pipeline_train(po, model, dims, o);
    po->until = VP_PIPELINE_PLAN;
    po->device = dev;
    po->fused_update = fused;
    po->budget = budget;
    po->remat = remat;
    po->remat_opts = ro;
}

static int is_plan_pass(const char *name) {
    for (int i = 0; i < vp_pipeline_pass_count(); i++) {
        vp_pipeline_pass p = vp_pipeline_pass_at(i);
        if (!strcmp(p.name, name)) return p.stage == VP_PIPELINE_PLAN;
    }
    return 0;
}

/* Plans the model at the given dims; *fits and *arena report the outcome.  With a
 * search space (--auto) any knobs may serve: the smallest arena of the candidates. */
static vp_status try_plan(const char *model, const cli_pairs *dims, const cli_train_opts *o, const vp_device_profile *dev,
                          int fused, int64_t budget, vp_remat_kind remat, const vp_remat_opts *ro, const vp_search_space *sp,
                          int *fits, int64_t *arena, vp_error *err) {
    if (sp) {
        static vp_search_result r; /* 30 KiB: not on the stack */
        vp_status s = cli_search(model, dims, &o->spec, sp, dev, budget, 1, &r, err);
        *fits = !s && r.best >= 0;
        *arena = INT64_MAX;
        for (int i = 0; !s && i < r.n; i++)
            if (!r.c[i].status && r.c[i].arena_bytes < *arena) *arena = r.c[i].arena_bytes;
        return s;
    }
    vp_pipeline_opts po;
    plan_opts(&po, model, dims, o, dev, fused, budget, remat, ro);
    /* the memory passes are shown of the plan made at the end, not of each try */
    if (po.dump_after && is_plan_pass(po.dump_after)) po.dump_after = NULL;
    vp_pipeline_result r;
    vp_status s = vp_pipeline_run(&po, &r, err);
    if (!s) {
        *fits = r.p.arena_bytes <= budget;
        *arena = r.p.arena_bytes;
    }
    vp_pipeline_result_free(&r);
    return s;
}

/* Doubling then bisection on the value of dims->b[k]; leaves the largest that fits. */
static vp_status search_max_dim(const char *model, cli_pairs *dims, int k, const cli_train_opts *o, const vp_device_profile *dev,
                                int fused, int64_t budget, vp_remat_kind remat, const vp_remat_opts *ro,
                                const vp_search_space *sp, vp_error *err) {
    int64_t lo = 0, hi = 0, arena = 0, lo_arena = 0, hi_arena = 0;
    int fits = 0;
    vp_status s = VP_OK;
    for (int64_t v = 1; v <= (1 << 24); v *= 2) {
        dims->b[k].value = v;
        s = try_plan(model, dims, o, dev, fused, budget, remat, ro, sp, &fits, &arena, err);
        if (s) return s;
        fprintf(stderr, "  %s=%lld: arena %lld bytes, %s\n", dims->b[k].name, (long long)v, (long long)arena, fits ? "fits" : "over");
        if (!fits) {
            hi = v;
            hi_arena = arena;
            break;
        }
        lo = v;
        lo_arena = arena;
    }
    if (!lo) return vp_fail(err, VP_ERR_INVALID, "%s: even %s=1 does not fit the budget (arena %lld bytes)", model,
                            dims->b[k].name, (long long)arena);
    if (!hi) return vp_fail(err, VP_ERR_INVALID, "%s: %s fits the budget at every value tried (up to %lld)", model,
                            dims->b[k].name, (long long)lo);
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        dims->b[k].value = mid;
        s = try_plan(model, dims, o, dev, fused, budget, remat, ro, sp, &fits, &arena, err);
        if (s) return s;
        fprintf(stderr, "  %s=%lld: arena %lld bytes, %s\n", dims->b[k].name, (long long)mid, (long long)arena, fits ? "fits" : "over");
        if (fits) lo = mid, lo_arena = arena;
        else hi = mid, hi_arena = arena;
    }
    printf("max %s under the budget: %lld (arena %lld bytes); %lld needs %lld bytes\n", dims->b[k].name, (long long)lo,
           (long long)lo_arena, (long long)hi, (long long)hi_arena);
    dims->b[k].value = lo;
    return VP_OK;
}

/* What the tensor-parallel split made of this rank: regions, all-reduces, the bytes it
 * sends a step and their estimated time (the forward's and the loss's all-reduces count
 * as forward). */
static vp_report_tp tp_facts(const vp_plan *p, const vp_training *t, int64_t sent) {
    vp_report_tp r = {.ranks = t->tp.n, .rank = t->tp.rank, .n_column = t->tp.n_column, .n_row = t->tp.n_row,
                      .n_sliced = t->tp.n_sliced, .n_embedding = t->tp.n_embedding,
                      .vocab_parallel_loss = t->tp.vocab_logits >= 0, .bytes_sent = sent,
                      .n_gather = t->tp.n_gather, .n_scatter = t->tp.n_scatter, .n_param_copy = t->tp.n_param_copy,
                      .n_regather = t->tp.n_regather, .n_seq_share = t->tp.n_seq_share,
                      .n_seq_gather = t->tp.n_seq_gather, .n_replicated = t->tp.n_replicated,
                      .replicated = t->tp.replicated};
    r.vocab = r.vocab_parallel_loss || r.n_embedding ? t->tp.vocab : 0;
    for (int i = 0; i < p->n_steps; i++) {
        const vp_node *n = &p->g->nodes[p->steps[i]];
        if (!n->op || !(n->op->flags & VP_OP_COLLECTIVE)) continue;
        vp_node_cost c = vp_cost_node(p->g, n);
        r.comm_seconds += vp_cost_seconds(&c, &p->device, 0);
        const vp_value *x = &p->g->values[n->inputs[0]], *y = &p->g->values[n->outputs[0]];
        int64_t bx = vp_value_numel(x) * (int64_t)vp_dtype_size(x->dtype), by = vp_value_numel(y) * (int64_t)vp_dtype_size(y->dtype);
        r.payload_bytes += bx > by ? bx : by; /* a reduce-scatter's or all-gather's whole */
        if (n->phase == VP_PHASE_FORWARD || n->phase == VP_PHASE_LOSS) r.allreduces_forward++;
        else r.allreduces_backward++;
    }
    return r;
}

/* A product computed whole inside a split region (GQA's key/value projections where n
 * does not divide their heads): why, where each rank's share is taken, what it costs. */
static void tp_whole_line(const vp_tp_replicated *q, int ranks) {
    char b1[32], why[400];
    if (q->heads % ranks)
        snprintf(why, sizeof why, "--tp %d does not divide its key/value heads (%lld)", ranks, (long long)q->heads);
    else if (q->stop[0])
        snprintf(why, sizeof why, "its columns' split stops at '%s' (%s)", q->stop, q->stop_op);
    else
        snprintf(why, sizeof why, "--tp %d does not divide what its columns' split cuts", ranks);
    static const char *const unit[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    for (double f = q->flops; f >= 1000 && u < 5; f /= 1000) u++;
    double scale = pow(1000, u);
    printf("    the product by '%s': %s;\n"
           "      computed whole on every rank; '%s' (%s) reads each rank's share of its heads;\n"
           "      costs its gradients' all-reduce (%s a step) and %.3g %sFLOP a step on every rank (%.3g were it split)\n",
           q->node, why, q->at[0] ? q->at : "?", q->at[0] ? q->at_op : "?", vp_human_bytes(q->grad_bytes, b1, sizeof b1),
           q->flops / scale, unit[u], q->flops / ranks / scale);
}

static void tp_summary(const vp_plan *p, const vp_report_tp *r, const vp_remat_result *rr) {
    char b1[32], b2[32], b3[32];
    if (r->rank == 0) {
        printf("tensor parallel over %d ranks: %d column- and %d row-parallel products, %d weights sliced; %d collectives a\n"
               "  step (%d forward, %d backward); each rank sends %s a step (ring: 2(n-1)/n of an all-reduce, (n-1)/n of\n"
               "  an all-gather or reduce-scatter, of %s), about %.3f ms over the %s link (%.0f GB/s) of an estimated\n"
               "  %.3f ms step\n",
               r->ranks, r->n_column, r->n_row, r->n_sliced, r->allreduces_forward + r->allreduces_backward,
               r->allreduces_forward, r->allreduces_backward, vp_human_bytes(r->bytes_sent, b1, sizeof b1),
               vp_human_bytes(r->payload_bytes, b2, sizeof b2), 1e3 * r->comm_seconds, p->device.name,
               p->device.link_bandwidth / 1e9, 1e3 * rr->step_seconds);
        if (r->n_gather)
            printf("  sequence-parallel: between the regions each rank holds 1/%d of the sequence; %d all-gathers and %d\n"
                   "  reduce-scatters forward in place of all-reduces, %d parameters' gradients all-reduced;\n"
                   "  %d all-gathers run again in the backward for the weight gradients (gathered inputs not kept)\n",
                   r->ranks, r->n_gather, r->n_scatter, r->n_param_copy, r->n_regather);
        if (r->n_seq_share || r->n_seq_gather)
            printf("  %d value%s whole on every rank (an embedding left replicated, a constant) cut to each rank's positions;\n"
                   "  %d gathered whole for ops that mix tokens (a classifier's first token, a head left replicated)\n",
                   r->n_seq_share, r->n_seq_share == 1 ? "" : "s", r->n_seq_gather);
        for (int i = 0; i < r->n_replicated; i++) {
            const vp_tp_replicated *q = &r->replicated[i];
            if (!i) printf("  left replicated (every rank computes it whole): %d product%s\n", r->n_replicated,
                           r->n_replicated == 1 ? "" : "s");
            if (q->whole) tp_whole_line(q, r->ranks);
            else if (q->stop[0])
                printf("    the product by '%s': its columns' split stops at '%s' (%s), which cannot take them\n", q->node,
                       q->stop, q->stop_op);
            else
                printf("    the product by '%s': its columns' split would reach the graph's outputs\n", q->node);
        }
        if (r->vocab)
            printf("  vocabulary-parallel (%lld tokens, %lld a rank): %d embedding%s split by rows%s\n", (long long)r->vocab,
                   (long long)(r->vocab / r->ranks), r->n_embedding, r->n_embedding == 1 ? "" : "s",
                   r->vocab_parallel_loss ? ", the LM head by columns, the\n  cross-entropy computed across ranks (no rank holds the full logits)"
                                          : "; the LM head replicated");
    }
    printf("rank %d: arena %s, parameters %s, communication %s, sends %lld bytes a step\n", r->rank,
           vp_human_bytes(p->arena_bytes, b1, sizeof b1), vp_human_bytes(p->category_bytes[VP_CAT_PARAMETERS], b2, sizeof b2),
           vp_human_bytes(p->category_bytes[VP_CAT_COMM], b3, sizeof b3), (long long)r->bytes_sent);
}

/* Plans rank `rank` of o->spec.tp.n (the whole step when 1): the report for rank 0,
 * one line for the others, the plan file (PLAN, or PLAN.<rank> for several ranks). */
/* given: the step and plan the joint search already made for these knobs (taken over),
 * or NULL to run the pipeline. */
static vp_status plan_rank(const char *model, const cli_pairs *dims, cli_train_opts *o_, const vp_device_profile *dev,
                           int fused, int64_t budget, vp_remat_kind remat, const vp_remat_opts *ro_, const char *json,
                           const char *dot, const char *timeline, const char *out, const vp_search_result *search,
                           vp_pipeline_result *given, int *over_, vp_error *err_) {
    cli_train_opts o = *o_; /* its table points into o_: only spec and the strings are read here */
    const vp_remat_opts ro = *ro_;
    vp_error err;
    vp_status s;
    int rank = o.spec.tp.rank, ranks = o.spec.tp.n;
    vp_pipeline_opts po;
    plan_opts(&po, model, dims, &o, dev, fused, budget, remat, &ro);
    vp_pipeline_result r;
    if (given) {
        r = *given;
        memset(given, 0, sizeof *given);
        s = VP_OK;
    } else {
        s = vp_pipeline_run(&po, &r, &err);
    }
    const vp_graph *g = r.g;
    const vp_training *t = &r.t;
    vp_plan *p = &r.p;
    const vp_remat_result *rr = &r.remat;
    char knobs[1800], fusion[400] = "", prec[256] = "", qat[320] = "", lora[300] = "";
    if (!s) cli_fusion_summary(t, rr->n_renorm, fusion, sizeof fusion);
    if (!s) cli_precision_summary(&o.spec, t, prec, sizeof prec);
    if (!s) cli_qat_summary(&o.spec, t, qat, sizeof qat);
    if (!s) cli_lora_summary(&o.spec, t, g, lora, sizeof lora);
    if (!s && t->n_offloaded) {
        size_t used = strlen(lora);
        cli_offload_summary(t, lora + used + (used ? 2 : 0), sizeof lora - used - 2);
        if (used) memcpy(lora + used, "; ", 2);
    }
    static const char *const loss_kinds[] = {"", "ce", "mse", "output"};
    char loss_arg[300];
    snprintf(loss_arg, sizeof loss_arg, "%s:%s", loss_kinds[o.spec.loss.kind], o.spec.loss.value);
    snprintf(knobs, sizeof knobs, "loss %s, optimizer %s (lr %g)%s%s%s%s%s%s%s%s%s%s", loss_arg, vp_opt_name(o.spec.opt.kind),
             o.spec.opt.lr, o.spec.freeze ? ", frozen " : "", o.spec.freeze ? o.spec.freeze : "", fusion[0] ? "; " : "",
             fusion, prec[0] ? "; " : "", prec, qat[0] ? "; " : "", qat, lora[0] ? "; " : "", lora);
    int64_t sent = s ? 0 : vp_tp_step_bytes(p->g, p->steps, p->n_steps, ranks);
    vp_report_tp tpr;
    if (!s && ranks > 1) tpr = tp_facts(p, t, sent);
    vp_report_ctx ctx = {model, knobs, 8, s ? NULL : rr, !s && ranks > 1 ? &tpr : NULL,
                         search ? cli_search_json : NULL, search};
    if (!s) p->budget_bytes = budget;
    if (!s && rank == 0) vp_report_text(stdout, p, &ctx);
    if (!s && ranks > 1) tp_summary(p, &tpr, rr);
    if (!s && json) { /* one report a rank, as one plan a rank: JSON.<rank> */
        char jpath[4096];
        snprintf(jpath, sizeof jpath, ranks > 1 ? "%s.%d" : "%s", json, rank);
        vp_atomic_file af;
        s = vp_atomic_file_open(&af, jpath, &err);
        if (!s) {
            vp_report_json(af.f, p, &ctx);
            s = vp_atomic_file_commit(&af, &err);
        }
    }
    if (!s && dot) {
        s = vp_dot_write(p, dot, &err);
        if (!s) printf("wrote %s\n", dot);
    }
    if (!s && timeline) {
        s = vp_timeline_write(p, timeline, &err);
        if (!s) printf("wrote %s\n", timeline);
    }
    if (!s && out) {
        char lr[32], fu[8];
        snprintf(lr, sizeof lr, "%g", o.spec.opt.lr);
        snprintf(fu, sizeof fu, "%d", fused);
        char tp[16], tp_rank[16], tp_sent[32], path[4096];
        snprintf(tp, sizeof tp, "%d", ranks);
        snprintf(tp_rank, sizeof tp_rank, "%d", rank);
        snprintf(tp_sent, sizeof tp_sent, "%lld", (long long)sent);
        vp_knob knob[] = {{"loss", loss_arg}, {"optimizer", vp_opt_name(o.spec.opt.kind)}, {"lr", lr},
                          {"fused_update", fu}, {"freeze", o.spec.freeze ? o.spec.freeze : ""},
                          {"remat", vp_remat_name(remat)}, {"fusion", fusion[0] ? fusion : "none"},
                          {"tp", tp}, {"tp_rank", tp_rank}, {"tp_bytes_sent", tp_sent}};
        int n_knobs = (int)(sizeof knob / sizeof knob[0]) - (ranks > 1 ? 0 : 3);
        snprintf(path, sizeof path, ranks > 1 ? "%s.%d" : "%s", out, rank);
        s = vp_plan_write(p, model, knob, n_knobs, path, &err);
        if (!s) printf("wrote %s\n", path);
    }
    *over_ |= !s && budget > 0 && p->arena_bytes > budget;
    vp_pipeline_result_free(&r);
    if (s) *err_ = err;
    return s;
}

static int run_plan(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *json = NULL, *device = "cpu", *remat_arg = NULL;
    const char *max_dim = NULL, *dot = NULL, *timeline = NULL;
    int fused = -1, automatic = 0;
    int64_t budget = -1, max_tp = 0; /* -1: no --budget */
    double ilp_limit = NAN, arena_limit = NAN;
    cli_pairs dims = {0};
    cli_train_opts o;
    cli_train_init(&o);
    const cli_opt table[] = {
        {"MODEL", CLI_POS, &model, NULL, NULL},
        {"", CLI_TABLE, o.table, NULL, NULL},
        {"", CLI_TABLE, cli_load_table, NULL, NULL},
        {"--dim", CLI_DIM, &dims, "NAME=VALUE", "bind a symbolic dim (repeatable)"},
        {"--budget", CLI_SIZE, &budget, "SIZE",
         "memory budget: 16GiB, 800MB, 1.5G, or bytes (KB, MB, GB are\n"
         "powers of 1000; KiB, MiB, GiB and K, M, G powers of 1024)"},
        {"--device", CLI_ENUM, &device, "cpu|a100|h100|h200", "alignment and cost profile (default cpu)"},
        {"--remat", CLI_ENUM, &remat_arg, "none|sqrtn|dp|ilp",
         "which activations to recompute in the backward pass instead of\n"
         "keeping them: dp (default with --budget) chooses per block of the\n"
         "forward chain by a dynamic program under the budget; sqrtn keeps\n"
         "every sqrt(n)-th block boundary (Chen et al. 2016); ilp solves\n"
         "Checkmate's MILP (Jain et al. 2020) exactly with GLPK, the optimum\n"
         "to measure dp against on small graphs; none keeps all"},
        {"--ilp-time-limit", CLI_NUM, &ilp_limit, "S",
         "seconds GLPK may spend on --remat ilp (default 60); when it runs\n"
         "out the best schedule found is used and the report says so"},
        {"--arena-time-limit", CLI_NUM, &arena_limit, "S",
         "limit of the arena's complete search where the greedy offsets\n"
         "miss the lower bound (default 1; 0: none); counted in units of\n"
         "work, so a limit gives the same plan on any machine"},
        {"--no-fused-update", CLI_CLEAR, &fused, NULL,
         "run every optimizer update after the whole backward pass\n"
         "(default: each update right after its gradient is final)"},
        {"--fused-update", CLI_SET, &fused, NULL, "each update right after its gradient is final (the default)"},
        {"--auto", CLI_SET, &automatic, NULL,
         "with --budget: choose the knobs left free (--tp up to --max-tp,\n"
         "--precision among the device's, fused or separate updates,\n"
         "--offload with Adam) and\n"
         "checkpointing together: every combination planned and costed,\n"
         "the fastest that fits kept; prints the candidates and why;\n"
         "candidates of different knob sets are planned side by side on\n"
         "the processors online (VP_SEARCH_THREADS=N sets how many; the\n"
         "result is the same on any number)"},
        {"--max-tp", CLI_INT, &max_tp, "N", "with --auto: the largest tensor-parallel degree tried (default 1)"},
        {"--max-batch", CLI_STR, &max_dim, "DIM",
         "with --budget: find the largest value of the symbolic dim DIM\n"
         "(a batch size) whose plan fits, then plan at that value (with\n"
         "--auto: whose plan fits with any knobs)"},
        {"-o", CLI_STR, &out, "PLAN", "write the plan file (run it with 'onnx-vplan run PLAN')"},
        {"--dot", CLI_STR, &dot, "FILE", "the plan as a Graphviz graph (render: dot -Tsvg FILE -o plan.svg)"},
        {"--timeline", CLI_STR, &timeline, "FILE",
         "an SVG of live bytes over the steps by category, with the\n"
         "budget and arena lines, and the arena layout beneath"},
        {"--json", CLI_STR, &json, "FILE",
         "write the report as JSON (arena_bytes, lower_bound_bytes,\n"
         "arena_outcome, budget_bytes, fits, categories, steps, buffers,\n"
         "planning_seconds; under --tp N one file a rank, FILE.<rank>, with\n"
         "tensor_parallel)"},
        {0}};
    int rc = cli_parse(&cli_cmd_plan, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_remat_opts ro = {0};
    o.planning = 1;
    vp_status s = cli_train_finish(&o, &err);
    if (!s && o.dump_after && automatic)
        s = vp_fail(&err, VP_ERR_USAGE, "--dump-after shows one build of the step; --auto makes many (leave one out)");
    /* a budget of nothing is a typo, not "no budget": no plan fits in 0 bytes */
    if (!s && budget == 0) s = vp_fail(&err, VP_ERR_USAGE, "--budget 0: a budget must be more than 0 bytes (leave --budget out for none)");
    if (budget < 0) budget = 0;
    const vp_device_profile *dev = vp_device_find(device);
    if (!s && !dev) s = vp_fail(&err, VP_ERR_INVALID, "--device %s: no profile", device);
    vp_remat_kind remat = budget > 0 ? VP_REMAT_DP : VP_REMAT_NONE;
    if (!s && remat_arg) s = vp_remat_parse(remat_arg, &remat, &err);
    if (!s && !isnan(ilp_limit)) {
        ro.ilp_time_limit = ilp_limit;
        if (!(ilp_limit > 0) || ilp_limit > 1e6)
            s = vp_fail(&err, VP_ERR_USAGE, "--ilp-time-limit must be more than 0 and at most 1e6 seconds, got %g", ilp_limit);
        else if (remat != VP_REMAT_ILP)
            s = vp_fail(&err, VP_ERR_USAGE, "--ilp-time-limit applies to --remat ilp only");
    }
    int adam = o.spec.opt.kind == VP_OPT_ADAM || o.spec.opt.kind == VP_OPT_ADAMW;
    vp_search_space sp = {(int)max_tp, o.tp > 0, o.precision != NULL, fused >= 0, fused >= 0 ? fused : 1,
                          adam && !o.spec.offload, 0, 0};
    if (fused < 0) fused = 1;
    if (!s && automatic && budget <= 0) s = vp_fail(&err, VP_ERR_USAGE, "--auto needs --budget");
    if (!s && automatic && remat_arg) s = vp_fail(&err, VP_ERR_USAGE, "--auto chooses the checkpointing: it does not take --remat");
    if (!s && max_tp && !automatic) s = vp_fail(&err, VP_ERR_USAGE, "--max-tp applies to --auto only");
    if (!s && (max_tp < 0 || max_tp > 64)) s = vp_fail(&err, VP_ERR_USAGE, "--max-tp must be between 1 and 64");
    if (!s && max_tp > 1 && o.lora) s = vp_fail(&err, VP_ERR_USAGE, "--lora does not take tensor parallelism (--max-tp)");
    if (!s && !isnan(arena_limit)) ro.arena_time_limit = arena_limit == 0 ? -1 : arena_limit;
    if (!s && max_dim) {
        if (budget <= 0) s = vp_fail(&err, VP_ERR_USAGE, "--max-batch needs --budget");
        int k = -1;
        for (int i = 0; i < dims.n; i++)
            if (!strcmp(dims.b[i].name, max_dim)) k = i;
        if (!s && k < 0) {
            if (dims.n == CLI_MAX_PAIRS) s = vp_fail(&err, VP_ERR_USAGE, "too many dims");
            else dims.b[k = dims.n++] = (vp_dim_binding){max_dim, 1};
        }
        if (!s) s = search_max_dim(model, &dims, k, &o, dev, fused, budget, remat, &ro, automatic ? &sp : NULL, &err);
    }
    static vp_search_result search; /* 30 KiB: not on the stack */
    if (!s && automatic) {
        /* the winner's plan comes back with the search, as the pipeline below would make
         * it again, unless this run plans differently from the search: shows a planning
         * pass, or sets the arena's time limit */
        vp_search_space final = sp;
        final.keep_winner = !o.dump_after && ro.arena_time_limit == 0;
        s = cli_search(model, &dims, &o.spec, &final, dev, budget, 0, &search, &err);
        if (!s && search.best < 0) {
            printf("nothing fits: the plan below is the smallest candidate's\n");
            int small = -1;
            for (int i = 0; i < search.n; i++)
                if (!search.c[i].status && (small < 0 || search.c[i].arena_bytes < search.c[small].arena_bytes)) small = i;
            search.best = small;
        }
        if (!s) {
            vp_search_apply(&search.c[search.best], &o.spec, &fused);
            remat = search.c[search.best].remat;
        }
    }
    if (s) return cli_report(s, &err);

    int ranks = o.spec.tp.n, over = 0;
    for (int rank = 0; rank < ranks && !s; rank++) {
        o.spec.tp.rank = rank;
        vp_pipeline_result *given = automatic && rank == 0 && search.winner && search.winner->g ? search.winner : NULL;
        s = plan_rank(model, &dims, &o, dev, fused, budget, remat, &ro, json, rank ? NULL : dot,
                      rank ? NULL : timeline, out, automatic ? &search : NULL, given, &over, &err);
    }
    if (automatic) vp_search_result_free(&search);
    if (s) return cli_report(s, &err);
    return over ? 3 : 0;
}

const cli_cmd cli_cmd_plan = {
    "plan", run_plan, "MODEL --loss SPEC [--optimizer NAME] [options]",
    "order the step, derive every buffer's lifetime, give each an offset in one\n"
    "      arena, and report the memory by category, the peak and the budget",
    "Builds the training step, orders it, derives every buffer's lifetime and gives each\n"
    "a fixed offset in one arena; prints the memory report (bytes per category, the\n"
    "peak step and what is live there, arena against its lower bound, the budget).\n",
    "exit codes: 0 planned (and fits the budget), 3 planned but over the budget,\n"
    "            1 failure, 2 bad input or usage\n"};
