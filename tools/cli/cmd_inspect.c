/* onnx-vplan inspect: what a model holds and whether we can handle it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "train/signature.h"
#include "train/training.h"
#include "json_writer.h"

typedef struct op_count {
    const char *domain, *op;
    int count;
    int n_nodes;
    const char **nodes; /* unsupported ones only */
} op_count;

typedef struct histogram {
    op_count *ops;
    int n;
} histogram;

static op_count *hist_get(histogram *h, const vp_node *n) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->ops[i].op, n->op_type) && !strcmp(h->ops[i].domain, n->domain)) return &h->ops[i];
    op_count *o = realloc(h->ops, (size_t)(h->n + 1) * sizeof *o);
    if (!o) return NULL;
    h->ops = o;
    o = &h->ops[h->n++];
    memset(o, 0, sizeof *o);
    o->domain = n->domain;
    o->op = n->op_type;
    return o;
}

static int by_count(const void *a, const void *b) {
    const op_count *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return strcmp(x->op, y->op);
}

static void hist_free(histogram *h) {
    for (int i = 0; i < h->n; i++) free(h->ops[i].nodes);
    free(h->ops);
}

static void json_values(vp_json *j, const vp_graph *g, const int *ids, int n) {
    vp_json_begin_array(j);
    for (int i = 0; i < n; i++) {
        const vp_value *v = &g->values[ids[i]];
        vp_json_begin_object(j);
        vp_json_key(j, "name");
        vp_json_string(j, v->name);
        vp_json_key(j, "dtype");
        vp_json_string(j, vp_dtype_name(v->dtype));
        vp_json_key(j, "shape");
        if (v->rank < 0) vp_json_null(j);
        else {
            vp_json_begin_array(j);
            for (int d = 0; d < v->rank; d++) vp_json_int(j, v->dims[d]);
            vp_json_end_array(j);
        }
        vp_json_end_object(j);
    }
    vp_json_end_array(j);
}

static void print_values(const char *title, const vp_graph *g, const int *ids, int n) {
    printf("%s:\n", title);
    for (int i = 0; i < n; i++) {
        const vp_value *v = &g->values[ids[i]];
        char buf[256];
        printf("  %-24s %-8s %s\n", v->name, vp_dtype_name(v->dtype), vp_shape_str(v->rank, v->dims, buf, sizeof buf));
    }
}

static const char *human_bytes(double b, char *buf, size_t len) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
    return buf;
}

/* Counts nodes ids[0..n) by op and keeps their names. */
static void hist_add_nodes(histogram *h, const vp_graph *g, const int *ids, int n) {
    for (int i = 0; i < n; i++) {
        const vp_node *node = &g->nodes[ids[i]];
        op_count *o = hist_get(h, node);
        if (!o) continue;
        const char **nn = realloc(o->nodes, (size_t)(o->n_nodes + 1) * sizeof *nn);
        if (!nn) continue;
        o->nodes = nn;
        o->nodes[o->n_nodes++] = node->name;
        o->count++;
    }
}

static void print_op_nodes(const histogram *h) {
    for (int i = 0; i < h->n; i++) {
        printf("  %s%s%s (%d):", h->ops[i].domain, h->ops[i].domain[0] ? "." : "", h->ops[i].op, h->ops[i].n_nodes);
        for (int k = 0; k < h->ops[i].n_nodes && k < 8; k++) printf(" %s", h->ops[i].nodes[k]);
        if (h->ops[i].n_nodes > 8) printf(" ...");
        printf("\n");
    }
}

static void json_op_nodes(vp_json *j, const histogram *h) {
    vp_json_begin_array(j);
    for (int i = 0; i < h->n; i++) {
        vp_json_begin_object(j);
        vp_json_key(j, "op");
        vp_json_string(j, h->ops[i].op);
        vp_json_key(j, "domain");
        vp_json_string(j, h->ops[i].domain);
        vp_json_key(j, "nodes");
        vp_json_begin_array(j);
        for (int k = 0; k < h->ops[i].n_nodes; k++) vp_json_string(j, h->ops[i].nodes[k]);
        vp_json_end_array(j);
        vp_json_end_object(j);
    }
    vp_json_end_array(j);
}

static int run_inspect(int argc, char **argv) {
    const char *model = NULL;
    int json = 0;
    cli_pairs dims = {0};
    const cli_opt table[] = {
        {"MODEL", CLI_POS, &model, NULL, NULL},
        {"--dim", CLI_DIM, &dims, "NAME=VALUE", "bind a symbolic dim (repeatable), e.g. --dim batch=32"},
        {"--json", CLI_SET, &json, NULL,
         "print one JSON object: nodes, params (float initializer\n"
         "elements), trainable_params (less BatchNorm statistics),\n"
         "param_bytes, ops, inputs, outputs (name, dtype, shape), unsupported,\n"
         "no_gradient_rule"},
        {"", CLI_TABLE, cli_load_table, NULL, NULL},
        {0}};
    int rc = cli_parse(&cli_cmd_inspect, table, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    vp_error err;
    vp_graph *g;
    vp_status s = cli_load(model, &dims, &g, &err);
    if (s) return cli_report(s, &err);
    vp_infer_opts opts = {.keep_going = 1};
    vp_infer_result res;
    s = vp_infer(g, &opts, &res, &err);
    if (s && s != VP_ERR_UNSUPPORTED) {
        vp_graph_free(g);
        return cli_report(s, &err);
    }

    /* BatchNorm running statistics are float initializers too, but no optimizer
     * trains them: counted apart so the trainable count matches the framework's */
    char *is_stat = calloc((size_t)g->n_values + 1, 1);
    for (int i = 0; is_stat && i < g->n_nodes; i++) {
        const vp_node *n = &g->nodes[i];
        if (!strcmp(n->op_type, "BatchNormalization") && n->n_inputs == 5)
            for (int k = 3; k < 5; k++)
                if (n->inputs[k] >= 0) is_stat[n->inputs[k]] = 1;
    }
    int64_t params = 0, param_bytes = 0, stats = 0;
    int param_tensors = 0;
    for (int v = 0; v < g->n_values; v++) {
        const vp_value *val = &g->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || !vp_dtype_is_float(val->dtype)) continue;
        params += vp_value_numel(val);
        param_bytes += vp_value_numel(val) * (int64_t)vp_dtype_size(val->dtype);
        param_tensors++;
        if (is_stat && is_stat[v]) stats += vp_value_numel(val);
    }
    free(is_stat);
    histogram h = {0}, uh = {0};
    for (int i = 0; i < g->n_nodes; i++) {
        op_count *o = hist_get(&h, &g->nodes[i]);
        if (o) o->count++;
    }
    hist_add_nodes(&uh, g, res.unsupported, res.n_unsupported);
    qsort(h.ops, (size_t)h.n, sizeof *h.ops, by_count);
    /* what train would refuse: ops without a gradient rule between a weight and an output */
    histogram gh = {0};
    int *blockers = NULL, n_blockers = 0;
    vp_error berr;
    if (!s && !vp_autodiff_blockers(g, &blockers, &n_blockers, &berr)) hist_add_nodes(&gh, g, blockers, n_blockers);
    free(blockers);

    /* torch 2.x: what the exporter's signature lists against what the graph holds */
    vp_signature_facts sf;
    vp_error serr;
    if (vp_signature_facts_of(g, NULL, NULL, &sf, &serr)) memset(&sf, 0, sizeof sf);
    int lost = sf.n_missing && (sf.n_own || sf.n_folded);
    if (json) {
        vp_json j;
        vp_json_init(&j, stdout, 1);
        vp_json_begin_object(&j);
        vp_json_key(&j, "model");
        vp_json_string(&j, model);
        vp_json_key(&j, "producer");
        vp_json_string(&j, g->producer ? g->producer : "");
        vp_json_key(&j, "ir_version");
        vp_json_int(&j, g->ir_version);
        vp_json_key(&j, "opset");
        vp_json_int(&j, g->opset_onnx);
        if (sf.present) {
            vp_json_key(&j, "signature");
            vp_json_begin_object(&j);
            vp_json_key(&j, "parameters");
            vp_json_int(&j, sf.n_params);
            vp_json_key(&j, "buffers");
            vp_json_int(&j, sf.n_buffers);
            vp_json_key(&j, "constants");
            vp_json_int(&j, sf.n_constants);
            vp_json_key(&j, "parameters_not_in_graph");
            vp_json_int(&j, sf.n_missing);
            vp_json_key(&j, "exporter_initializers");
            vp_json_int(&j, sf.n_own);
            vp_json_key(&j, "training_structure_lost");
            vp_json_bool(&j, lost);
            vp_json_end_object(&j);
        }
        vp_json_key(&j, "trainable_set");
        vp_json_begin_object(&j);
        vp_json_key(&j, "from");
        vp_json_string(&j, sf.present ? "signature" : "rule");
        vp_json_key(&j, "trained");
        vp_json_int(&j, sf.n_reason[VP_TRAIN_SIGNATURE] + sf.n_reason[VP_TRAIN_RULE]);
        vp_json_key(&j, "not_parameters");
        vp_json_int(&j, sf.n_reason[VP_TRAIN_NOT_PARAMETER]);
        vp_json_key(&j, "scalars");
        vp_json_int(&j, sf.n_reason[VP_TRAIN_SCALAR]);
        vp_json_key(&j, "requires_grad_false");
        vp_json_int(&j, sf.n_reason[VP_TRAIN_FROZEN]);
        vp_json_end_object(&j);
        vp_json_key(&j, "nodes");
        vp_json_int(&j, g->n_nodes);
        vp_json_key(&j, "params");
        vp_json_int(&j, params);
        vp_json_key(&j, "trainable_params");
        vp_json_int(&j, params - stats);
        vp_json_key(&j, "running_statistics");
        vp_json_int(&j, stats);
        vp_json_key(&j, "param_tensors");
        vp_json_int(&j, param_tensors);
        vp_json_key(&j, "param_bytes");
        vp_json_int(&j, param_bytes);
        vp_json_key(&j, "ops");
        vp_json_begin_object(&j);
        for (int i = 0; i < h.n; i++) {
            char key[256];
            snprintf(key, sizeof key, "%s%s%s", h.ops[i].domain, h.ops[i].domain[0] ? "." : "", h.ops[i].op);
            vp_json_key(&j, key);
            vp_json_int(&j, h.ops[i].count);
        }
        vp_json_end_object(&j);
        vp_json_key(&j, "inputs");
        json_values(&j, g, g->inputs, g->n_inputs);
        vp_json_key(&j, "outputs");
        json_values(&j, g, g->outputs, g->n_outputs);
        vp_json_key(&j, "unsupported");
        json_op_nodes(&j, &uh);
        vp_json_key(&j, "no_gradient_rule");
        json_op_nodes(&j, &gh);
        if (s) {
            vp_json_key(&j, "first_error");
            vp_json_string(&j, err.msg);
        }
        vp_json_end_object(&j);
        vp_json_finish(&j);
    } else {
        char b1[64];
        printf("model: %s\n", model);
        printf("producer: %s, ir_version %lld, opset %d\n", g->producer ? g->producer : "unknown",
               (long long)g->ir_version, g->opset_onnx);
        if (sf.present) {
            printf("signature: torch.export's, %d parameters, %d buffers, %d constants", sf.n_params, sf.n_buffers,
                   sf.n_constants);
            if (sf.n_missing) printf("; %d parameters not in the graph under their names (first: %s)", sf.n_missing,
                                     sf.first_missing);
            if (sf.n_own) printf("; %d float initializers of the exporter's own (first: %s)", sf.n_own, sf.first_own);
            if (sf.n_folded)
                printf("; %d of them with their module's buffers gone too (first: %s, %s)", sf.n_folded, sf.first_folded,
                       sf.folded_buffer);
            printf("\n");
            if (lost)
                printf("  the export lost its training structure (the exporter's optimizer folded or merged "
                       "parameters): `train` refuses it; export with torch.onnx.export(..., optimize=False)\n");
            else if (sf.n_missing)
                printf("  parameters missing with nothing of the exporter's beside them: tied to another, or not "
                       "read by the forward\n");
        }
        if (sf.present)
            printf("trainable set: %d float initializers, the signature's parameters (%d buffers, constants and "
                   "initializers it does not list not trained; %d parameters marked requires_grad=False not "
                   "trained)\n",
                   sf.n_reason[VP_TRAIN_SIGNATURE], sf.n_reason[VP_TRAIN_NOT_PARAMETER], sf.n_reason[VP_TRAIN_FROZEN]);
        else
            printf("trainable set: %d float initializers, every one (no exporter signature) but %d scalars, taken "
                   "for constants; train --trainable REGEX overrides\n",
                   sf.n_reason[VP_TRAIN_RULE], sf.n_reason[VP_TRAIN_SCALAR]);
        print_values("inputs", g, g->inputs, g->n_inputs);
        print_values("outputs", g, g->outputs, g->n_outputs);
        printf("nodes: %d (%d folded ahead of time)\n", g->n_nodes, res.n_folded);
        printf("params: %lld in %d tensors, %s", (long long)params, param_tensors,
               human_bytes((double)param_bytes, b1, sizeof b1));
        if (stats) printf(" (%lld trainable, %lld BatchNorm running statistics)", (long long)(params - stats), (long long)stats);
        printf("\n");
        printf("ops:\n");
        for (int i = 0; i < h.n; i++)
            printf("  %-28s %d\n", h.ops[i].op, h.ops[i].count);
        if (!uh.n) {
            printf("unsupported: none\n");
            if (s) printf("but it cannot be planned: %s\n", err.msg); /* a graph-wide reason, no node's */
        } else {
            printf("unsupported:\n");
            print_op_nodes(&uh);
            printf("first reason: %s\n", err.msg);
        }
        if (gh.n) {
            printf("no gradient rule (train refuses these unless the parameters before them are frozen):\n");
            print_op_nodes(&gh);
        }
    }
    hist_free(&gh);
    hist_free(&h);
    hist_free(&uh);
    free(res.unsupported);
    vp_graph_free(g);
    return 0;
}

const cli_cmd cli_cmd_inspect = {
    "inspect", run_inspect, "MODEL [--dim NAME=VALUE]... [--json]",
    "inputs and outputs with shapes, op histogram, parameter count and bytes,\n"
    "      and the ops this tool cannot handle, with the nodes that use them",
    "Prints the model's inputs and outputs with their inferred shapes, a histogram of\n"
    "its ops, the parameter count (float initializer elements) and bytes, and every\n"
    "op this tool cannot handle with the nodes that use it; and the ops without a\n"
    "gradient rule between a weight and an output, which train refuses unless the\n"
    "parameters before them are frozen.\n",
    NULL};
