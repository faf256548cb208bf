/* The training graph written as ONNX (codegen/onnx_write.c) and read back: for every
 * model in models/, with SGD-momentum, AdamW and no optimizer, the step is written,
 * loaded with the ordinary loader, inferred, and run two steps on the naive executor
 * beside the in-memory step it came from.  Every graph output of the file (the loss,
 * the model's outputs, the updated parameters and state, or the gradients) must equal
 * the in-memory value of the same name bit for bit, at both steps; the metadata's
 * carry pairs drive the second step of the reloaded graph. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "backend.h"
#include "cpu_host.h"
#include "exec.h"
#include "ir/infer.h"
#include "model_util.h"
#include "onnx.pb-c.h"
#include "onnx/onnx_load.h"
#include "onnx_write.h"
#include "onnx/tensor_proto.h"



/* The "vplan.carry" metadata of the written file as pairs of value ids of g. */
static vp_status read_carry(const char *path, const vp_graph *g, vp_carry **out, int *n, vp_error *err) {
    uint8_t *buf;
    size_t len;
    *out = NULL;
    *n = 0;
    vp_status s = vp_read_file(path, &buf, &len, err);
    if (s) return s;
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    if (!mp) return vp_fail(err, VP_ERR_PARSE, "%s: not an ONNX model", path);
    const char *carry = "";
    for (size_t i = 0; i < mp->n_metadata_props; i++)
        if (!strcmp(mp->metadata_props[i]->key, "vplan.carry")) carry = mp->metadata_props[i]->value;
    int lines = 0;
    for (const char *p = carry; *p; p++) lines += *p == '\n';
    *out = calloc((size_t)lines + 1, sizeof **out);
    if (!*out) s = vp_fail(err, VP_ERR_NOMEM, "out of memory");
    for (const char *p = carry; *p && !s;) {
        const char *tab = strchr(p, '\t'), *nl = strchr(p, '\n');
        if (!tab || !nl || tab > nl) {
            s = vp_fail(err, VP_ERR_PARSE, "%s: bad vplan.carry line", path);
            break;
        }
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%.*s", (int)(tab - p), p);
        snprintf(b, sizeof b, "%.*s", (int)(nl - tab - 1), tab + 1);
        int from = vp_graph_find_value(g, a), to = vp_graph_find_value(g, b);
        if (from < 0 || to < 0) s = vp_fail(err, VP_ERR_INVALID, "%s: carry '%s' -> '%s' names no value", path, a, b);
        else (*out)[(*n)++] = (vp_carry){from, to};
        p = nl + 1;
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    return s;
}

/* The in-memory value a written name stands for: its own, or a gradient written as
 * "<param>_grad". */
static int find_written(const vp_graph *g1, const vp_training *t, const char *name) {
    int v = vp_graph_find_value(g1, name);
    size_t len = strlen(name);
    if (v >= 0 || len < 5 || strcmp(name + len - 5, "_grad")) return v;
    for (int i = 0; i < t->n_params; i++) {
        const char *p = g1->values[t->params[i]].name;
        if (strlen(p) == len - 5 && !strncmp(p, name, len - 5)) return t->grads[i];
    }
    return -1;
}

/* Every graph output of g2 against g1's value of the same name: the count that differ. */
static int compare_outputs(vp_exec *x1, const vp_graph *g1, const vp_training *t, vp_exec *x2, const vp_graph *g2,
                           char *what, size_t wlen, vp_error *err) {
    int bad = 0;
    for (int i = 0; i < g2->n_outputs; i++) {
        const char *name = g2->values[g2->outputs[i]].name;
        int v1 = find_written(g1, t, name);
        vp_tensor a = {0}, b = {0};
        vp_status s = v1 < 0 ? vp_fail(err, VP_ERR_INVALID, "no value '%s' in memory", name) : VP_OK;
        if (!s) s = vp_exec_get(x1, v1, &a, err);
        if (!s) s = vp_exec_get(x2, g2->outputs[i], &b, err);
        int same = !s && a.dtype == b.dtype && vp_tensor_nbytes(&a) == vp_tensor_nbytes(&b) &&
                   !memcmp(a.data, b.data, vp_tensor_nbytes(&a));
        if (!same && !bad++) snprintf(what, wlen, "%s%s%s", name, s ? ": " : "", s ? err->msg : "");
        free(a.data);
        free(b.data);
    }
    return bad;
}

typedef struct variant {
    const char *label;
    const char *opt; /* NULL: no optimizer */
} variant;

static void check_model(const char *name, const variant *var) {
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&m, 0, sizeof m);
    memset(&spec, 0, sizeof spec);
    char path[512];
    snprintf(path, sizeof path, "%.300s/vp_export_%d_%.60s_%.60s.onnx", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(),
             name, var->label);
    vp_graph *g2 = NULL;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x1 = NULL, *x2 = NULL;
    vp_carry *carry2 = NULL;
    int n_carry2 = 0;

    vp_status s = vp_loss_parse("ce:logits", &spec.loss, &err);
    if (!s && var->opt) s = vp_opt_parse(var->opt, &spec.opt, &err);
    if (!s && var->opt && !strcmp(var->opt, "momentum")) spec.opt.lr = 0.1;
    spec.no_optimizer = var->opt == NULL;
    if (!s) s = test_model_load(&m, name, &spec, &err);
    vp_onnx_write_opts wo = {.training = &m.t, .doc_string = "test_onnx_export"};
    if (!s) s = vp_onnx_write_graph(m.g, path, &wo, &err);
    if (!s) s = vp_onnx_load(path, &g2, &err);
    if (!s) s = vp_infer(g2, NULL, NULL, &err);
    if (!s) s = read_carry(path, g2, &carry2, &n_carry2, &err);
    if (!s && n_carry2 != m.t.n_carry)
        s = vp_fail(&err, VP_ERR_INVALID, "the file carries %d values, the step %d", n_carry2, m.t.n_carry);
    if (!s && !b) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(m.g, b, &x1, &err);
    if (!s) s = vp_exec_new(g2, b, &x2, &err);
    if (!s) s = test_model_feed(x1, &m, &err);
    if (!s) s = test_model_feed(x2, &m, &err);
    int bad = 0, n_float_init = 0;
    char what[1200] = "";
    /* the float initializers of the file are exactly the parameters and the state */
    for (int v = 0; !s && v < g2->n_values; v++) {
        const vp_value *val = &g2->values[v];
        if (!(val->flags & VP_VAL_INITIALIZER) || !vp_dtype_is_float(val->dtype)) continue;
        n_float_init++;
        int v1 = vp_graph_find_value(m.g, val->name);
        if (v1 < 0 || !(m.g->values[v1].flags & (VP_VAL_PARAM | VP_VAL_STATE)))
            if (!bad++) snprintf(what, sizeof what, "float initializer '%s' is neither a parameter nor state", val->name);
    }
    for (int i = 0; !s && i < m.t.n_params; i++) {
        int v2 = vp_graph_find_value(g2, m.g->values[m.t.params[i]].name);
        if ((v2 < 0 || !(g2->values[v2].flags & VP_VAL_INITIALIZER)) && !bad++)
            snprintf(what, sizeof what, "parameter '%s' is not an initializer", m.g->values[m.t.params[i]].name);
    }
    for (int step = 0; step < 2 && !s && !bad; step++) {
        s = vp_exec_run(x1, &err);
        if (!s) s = vp_exec_run(x2, &err);
        if (!s) bad = compare_outputs(x1, m.g, &m.t, x2, g2, what, sizeof what, &err);
        if (bad) snprintf(what + strlen(what), sizeof what - strlen(what), " (step %d)", step + 1);
        for (int c = 0; c < m.t.n_carry && !s; c++) s = vp_exec_copy_value(x1, m.t.carry[c].from, m.t.carry[c].to, &err);
        for (int c = 0; c < n_carry2 && !s; c++) s = vp_exec_copy_value(x2, carry2[c].from, carry2[c].to, &err);
    }
    if (s) check(0, "%s %s: %s", name, var->label, err.msg);
    else
        check(!bad, "%s %s: %d nodes written, reloaded as %d; %d float initializers (parameters, state); %d outputs, "
                    "2 steps%s%s", name, var->label, m.g->n_nodes, g2->n_nodes, n_float_init, g2->n_outputs,
              bad ? ", differ: " : " bit for bit", bad ? what : "");
    vp_exec_free(x1);
    vp_exec_free(x2);
    vp_backend_free(b);
    free(carry2);
    vp_graph_free(g2);
    test_model_free(&m);
    remove(path);
}

/* Errors name the file and the reason. */
static void check_errors(void) {
    test_model m;
    vp_error err;
    vp_train_spec spec;
    memset(&m, 0, sizeof m);
    memset(&spec, 0, sizeof spec);
    vp_status s = vp_loss_parse("ce:logits", &spec.loss, &err);
    if (!s) s = vp_opt_parse("sgd", &spec.opt, &err);
    if (!s) s = test_model_load(&m, "mlp", &spec, &err);
    if (s) {
        check(0, "errors: %s", err.msg);
        test_model_free(&m);
        return;
    }
    const char *bad_path = "/nonexistent-dir/train.onnx";
    s = vp_onnx_write_graph(m.g, bad_path, NULL, &err);
    check(s == VP_ERR_IO && strstr(err.msg, bad_path) && strstr(err.msg, "cannot create"),
          "unwritable path: %s", s ? err.msg : "no error");
    /* a value nothing defines */
    int v = vp_graph_add_value(m.g, "orphan");
    int id = v < 0 ? -1 : vp_graph_add_node(m.g, "Relu", "", "uses_orphan", 1, &v, 1, &v);
    if (id >= 0) {
        m.g->values[v].dtype = VP_F32;
        m.g->values[v].rank = 0;
        int out = vp_graph_add_value(m.g, "orphan_relu");
        m.g->nodes[id].outputs[0] = out;
        m.g->values[out].dtype = VP_F32;
        m.g->values[out].rank = 0;
        vp_graph_link(m.g, &err);
        s = vp_onnx_write_graph(m.g, "/tmp/never-written.onnx", NULL, &err);
        check(s == VP_ERR_INVALID && strstr(err.msg, "'orphan'") && strstr(err.msg, "no producer"),
              "undefined value: %s", s ? err.msg : "no error");
    }
    /* default-domain nodes at two opsets cannot share one import */
    test_model_free(&m);
    if ((s = test_model_load(&m, "mlp", &spec, &err))) check(0, "mixed opsets: %s", err.msg);
    else {
        int first = -1;
        for (int i = 0; i < m.g->n_nodes && first < 0; i++)
            if (!m.g->nodes[i].folded && !m.g->nodes[i].domain[0]) first = i;
        m.g->nodes[first].opset = 11;
        s = vp_onnx_write_graph(m.g, "/tmp/never-written.onnx", NULL, &err);
        check(s == VP_ERR_UNSUPPORTED && strstr(err.msg, "at opset 11") && strstr(err.msg, "re-export the model"),
              "mixed opsets: %s", s ? err.msg : "no error");
    }
    test_model_free(&m);
}

/* The forward graph alone (no training step): folded shape arithmetic becomes
 * constants, and the reloaded model's outputs equal the original's bit for bit. */
static void check_forward(const char *name) {
    test_model m;
    vp_error err;
    char path[512];
    snprintf(path, sizeof path, "%.300s/vp_export_%d_%.60s_forward.onnx", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), name);
    vp_graph *g2 = NULL;
    vp_backend *b = vp_backend_cpu_new();
    vp_exec *x1 = NULL, *x2 = NULL;
    vp_training none;
    memset(&none, 0, sizeof none);
    vp_status s = test_model_load(&m, name, NULL, &err);
    if (!s) s = vp_onnx_write_graph(m.g, path, NULL, &err);
    if (!s) s = vp_onnx_load(path, &g2, &err);
    if (!s) s = vp_infer(g2, NULL, NULL, &err);
    if (!s && !b) s = vp_fail(&err, VP_ERR_NOMEM, "out of memory");
    if (!s) s = vp_exec_new(m.g, b, &x1, &err);
    if (!s) s = vp_exec_new(g2, b, &x2, &err);
    const mj *in = mj_get(m.meta, "input");
    vp_tensor xin = {0};
    if (!s) s = test_model_fixture(&m, "x.pb", &xin, &err);
    if (!s) s = vp_exec_set_input(x1, in ? in->str : "x", &xin, &err);
    if (!s) s = vp_exec_set_input(x2, in ? in->str : "x", &xin, &err);
    free(xin.data);
    if (!s) s = vp_exec_run(x1, &err);
    if (!s) s = vp_exec_run(x2, &err);
    char what[1200] = "";
    int bad = s ? 0 : compare_outputs(x1, m.g, &none, x2, g2, what, sizeof what, &err);
    int folded = 0;
    for (int i = 0; !s && i < m.g->n_nodes; i++) folded += m.g->nodes[i].folded;
    if (s) check(0, "%s forward only: %s", name, err.msg);
    else
        check(!bad && g2->n_outputs == m.g->n_outputs, "%s forward only: %d nodes (%d folded), reloaded as %d; outputs %s%s",
              name, m.g->n_nodes, folded, g2->n_nodes, bad ? "differ: " : "bit for bit", what);
    vp_exec_free(x1);
    vp_exec_free(x2);
    vp_backend_free(b);
    vp_graph_free(g2);
    test_model_free(&m);
    remove(path);
}

int main(void) {
    vp_cpu_host_install();
    char names[32][64];
    int n = test_model_list(names, 32);
    static const variant vars[] = {{"momentum", "momentum"}, {"adamw", "adamw"}, {"no-optimizer", NULL}};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) check_model(names[i], &vars[k]);
    for (int i = 0; i < n; i++) check_forward(names[i]);
    check_errors();
    return check_summary();
}
