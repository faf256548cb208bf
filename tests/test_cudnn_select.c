/* The CUDA backend's cuDNN decisions, which run on any host (runtime/cuda/cudnn_select.h):
 * convolution geometry from ONNX attributes (1-, 2-, 3-D, groups, auto_pad, pads at both
 * ends), the descriptors cuDNN is given (and when it is not: asymmetric padding that
 * changes the output), the algorithm chosen under a planned workspace, and the switch
 * that forces our kernels.  The convolutions of models/cnn (a torch.onnx export) are
 * mapped too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_host.h"
#include "cudnn_select.h"
#include "model_util.h"

/* A one-node graph: Conv over x, w -> y with the attributes set by the caller. */
typedef struct conv_case {
    vp_graph *g;
    int node;
    vp_tensor x, w, y;
} conv_case;

static void tensor(vp_tensor *t, int rank, const int64_t *dims) {
    memset(t, 0, sizeof *t);
    t->dtype = VP_F32;
    t->rank = rank;
    memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
}

static conv_case make(int rank, const int64_t *x, const int64_t *w, const int64_t *y) {
    conv_case c;
    c.g = vp_graph_new();
    int ids[3] = {vp_graph_add_value(c.g, "x"), vp_graph_add_value(c.g, "w"), vp_graph_add_value(c.g, "y")};
    c.node = vp_graph_add_node(c.g, "Conv", "", "conv", 2, ids, 1, ids + 2);
    tensor(&c.x, rank, x);
    tensor(&c.w, rank, w);
    tensor(&c.y, rank, y);
    return c;
}

static void ints(conv_case *c, const char *name, const int64_t *v, int n) { vp_node_add_attr_ints(c->g, c->node, name, v, n); }

static int same_ints(const int *a, const int *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static void geometry(void) {
    vp_error err = {{0}};
    vp_conv_shape s;
    vp_cudnn_desc d;
    /* 2-D, stride 2, pads 1 on both ends: cuDNN's own case */
    {
        conv_case c = make(4, (int64_t[]){2, 3, 7, 9}, (int64_t[]){4, 3, 3, 3}, (int64_t[]){2, 4, 4, 5});
        ints(&c, "strides", (int64_t[]){2, 2}, 2);
        ints(&c, "pads", (int64_t[]){1, 1, 1, 1}, 4);
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        const char *why = st ? "shape" : vp_cudnn_desc_of(&s, &d);
        check(!st && !why && d.nb_dims == 4 && same_ints(d.x, (int[]){2, 3, 7, 9}, 4) && same_ints(d.w, (int[]){4, 3, 3, 3}, 4) &&
                  same_ints(d.y, (int[]){2, 4, 4, 5}, 4) && same_ints(d.x_stride, (int[]){189, 63, 9, 1}, 4) &&
                  same_ints(d.y_stride, (int[]){80, 20, 5, 1}, 4) && same_ints(d.pad, (int[]){1, 1}, 2) &&
                  same_ints(d.stride, (int[]){2, 2}, 2) && d.groups == 1,
              "2-D strided, padded convolution maps to 4-D descriptors%s%s", why ? ": " : "", why ? why : "");
        vp_graph_free(c.g);
    }
    /* 1-D: a 2-D convolution of height 1 */
    {
        conv_case c = make(3, (int64_t[]){1, 2, 13}, (int64_t[]){2, 2, 3}, (int64_t[]){1, 2, 4});
        ints(&c, "strides", (int64_t[]){3}, 1);
        ints(&c, "dilations", (int64_t[]){1}, 1);
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        const char *why = st ? "shape" : vp_cudnn_desc_of(&s, &d);
        check(!st && !why && d.nb_dims == 4 && same_ints(d.x, (int[]){1, 2, 1, 13}, 4) && same_ints(d.w, (int[]){2, 2, 1, 3}, 4) &&
                  same_ints(d.y, (int[]){1, 2, 1, 4}, 4) && same_ints(d.stride, (int[]){1, 3}, 2) && same_ints(d.pad, (int[]){0, 0}, 2),
              "1-D convolution maps to a 2-D one of height 1%s%s", why ? ": " : "", why ? why : "");
        vp_graph_free(c.g);
    }
    /* 3-D, dilated, depthwise (group = channels) */
    {
        conv_case c = make(5, (int64_t[]){2, 6, 5, 8, 8}, (int64_t[]){6, 1, 3, 3, 3}, (int64_t[]){2, 6, 1, 4, 4});
        vp_node_add_attr_int(c.g, c.node, "group", 6);
        ints(&c, "dilations", (int64_t[]){2, 2, 2}, 3);
        ints(&c, "pads", (int64_t[]){0, 0, 0, 0, 0, 0}, 6);
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        const char *why = st ? "shape" : vp_cudnn_desc_of(&s, &d);
        check(!st && !why && s.spatial == 3 && d.nb_dims == 5 && d.groups == 6 && same_ints(d.w, (int[]){6, 1, 3, 3, 3}, 5) &&
                  same_ints(d.dil, (int[]){2, 2, 2}, 3) && same_ints(d.y, (int[]){2, 6, 1, 4, 4}, 5),
              "3-D dilated depthwise convolution maps to 5-D descriptors, 6 groups%s%s", why ? ": " : "", why ? why : "");
        vp_graph_free(c.g);
    }
    /* SAME_UPPER with an even kernel: pads 0 before, 1 after; cuDNN's symmetric 0 gives
     * one output fewer, so it is declined */
    {
        conv_case c = make(4, (int64_t[]){1, 1, 4, 4}, (int64_t[]){1, 1, 2, 2}, (int64_t[]){1, 1, 4, 4});
        vp_node_add_attr_string(c.g, c.node, "auto_pad", "SAME_UPPER");
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        const char *why = st ? NULL : vp_cudnn_desc_of(&s, &d);
        check(!st && s.pad[0] == 0 && s.pad_end[0] == 1 && s.pad[1] == 0 && s.pad_end[1] == 1 && why &&
                  strstr(why, "padding"),
              "SAME_UPPER with an even kernel pads (0, 1) and cuDNN declines it (%s)", why ? why : "taken");
        vp_graph_free(c.g);
    }
    /* pads (1, 0) that do not reach another output: cuDNN's symmetric 1 gives the same y */
    {
        conv_case c = make(4, (int64_t[]){1, 1, 6, 6}, (int64_t[]){1, 1, 3, 3}, (int64_t[]){1, 1, 3, 3});
        ints(&c, "strides", (int64_t[]){2, 2}, 2);
        ints(&c, "pads", (int64_t[]){1, 1, 0, 0}, 4);
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        const char *why = st ? "shape" : vp_cudnn_desc_of(&s, &d);
        check(!st && !why && same_ints(d.pad, (int[]){1, 1}, 2),
              "asymmetric pads that leave the output unchanged are taken as symmetric%s%s", why ? ": " : "", why ? why : "");
        vp_graph_free(c.g);
    }
    /* a group that does not divide the channels, and rank 6, are refused with a reason */
    {
        conv_case c = make(4, (int64_t[]){1, 3, 4, 4}, (int64_t[]){4, 1, 1, 1}, (int64_t[]){1, 4, 4, 4});
        vp_node_add_attr_int(c.g, c.node, "group", 2);
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        check(st == VP_ERR_INVALID && strstr(err.msg, "group 2"), "group 2 over 3 channels is refused: %s", err.msg);
        vp_graph_free(c.g);
        c = make(6, (int64_t[]){1, 1, 2, 2, 2, 2}, (int64_t[]){1, 1, 1, 1, 1, 1}, (int64_t[]){1, 1, 2, 2, 2, 2});
        st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        check(st == VP_ERR_UNSUPPORTED, "a 4-D convolution is refused: %s", err.msg);
        vp_graph_free(c.g);
    }
    /* sizes past int are declined, not truncated */
    {
        conv_case c = make(4, (int64_t[]){1, 1, 1, 3000000000LL}, (int64_t[]){1, 1, 1, 1}, (int64_t[]){1, 1, 1, 3000000000LL});
        vp_status st = vp_conv_shape_of(&c.g->nodes[c.node], &c.x, &c.w, &c.y, &s, &err);
        const char *why = st ? NULL : vp_cudnn_desc_of(&s, &d);
        check(!st && why && strstr(why, "INT_MAX"), "a width of 3e9 is declined (%s)", why ? why : "taken");
        vp_graph_free(c.g);
    }
}

static void choice(void) {
    /* cuDNN's order: fastest first */
    const vp_cudnn_perf perf[] = {
        {6, 1, 64 << 20, 1}, /* fastest, wants 64 MiB */
        {1, 0, 0, 1},        /* did not run */
        {3, 1, 1 << 20, 0},  /* 1 MiB, not deterministic */
        {5, 1, 2 << 20, 1},  /* 2 MiB */
        {0, 1, 0, 1},        /* no workspace */
    };
    check(vp_cudnn_pick(perf, 5, 64 << 20, 0) == 0, "a 64 MiB workspace runs the fastest algorithm");
    check(vp_cudnn_pick(perf, 5, 1 << 20, 0) == 2, "1 MiB: the fastest that fits");
    check(vp_cudnn_pick(perf, 5, 1 << 20, 1) == 4, "1 MiB, deterministic: the first deterministic that fits");
    check(vp_cudnn_pick(perf, 5, 3 << 20, 1) == 3, "3 MiB, deterministic: algorithm 5");
    check(vp_cudnn_pick(perf, 5, 0, 0) == 4, "no workspace: the algorithm that needs none");
    check(vp_cudnn_pick(perf, 4, 0, 0) == -1, "none fits: -1 (our kernels run)");
    check(vp_cudnn_pick(perf, 0, 1 << 30, 0) == -1, "no ranking: -1");
}

static void env_switch(void) {
    unsetenv("VP_CUDA_NO_CUDNN");
    int unset = vp_cudnn_env_off();
    setenv("VP_CUDA_NO_CUDNN", "1", 1);
    int one = vp_cudnn_env_off();
    setenv("VP_CUDA_NO_CUDNN", "0", 1);
    int zero = vp_cudnn_env_off();
    unsetenv("VP_CUDA_NO_CUDNN");
    check(!unset && one && !zero, "VP_CUDA_NO_CUDNN=1 switches cuDNN off, unset or 0 leaves it on");
}

/* Every convolution of the torch.onnx ResNet-style export maps to cuDNN descriptors
 * that describe the tensors the step holds. */
static void model_convs(void) {
    test_model m;
    vp_error err = {{0}};
    vp_status st = test_model_load(&m, "cnn", NULL, &err);
    if (st) {
        check(0, "cnn: %s", err.msg);
        return;
    }
    int convs = 0, mapped = 0;
    for (int i = 0; i < m.g->n_nodes; i++) {
        const vp_node *n = &m.g->nodes[i];
        if (strcmp(n->op_type, "Conv")) continue;
        convs++;
        vp_tensor x = vp_value_tensor(&m.g->values[n->inputs[0]]), w = vp_value_tensor(&m.g->values[n->inputs[1]]),
                  y = vp_value_tensor(&m.g->values[n->outputs[0]]);
        vp_conv_shape s;
        vp_cudnn_desc d;
        if (vp_conv_shape_of(n, &x, &w, &y, &s, &err) || vp_cudnn_desc_of(&s, &d)) continue;
        int64_t xn = 1, yn = 1;
        for (int k = 0; k < d.nb_dims; k++) xn *= d.x[k], yn *= d.y[k];
        mapped += xn == vp_tensor_numel(&x) && yn == vp_tensor_numel(&y) && d.w[1] * d.groups == d.x[1] &&
                  d.x_stride[0] * d.x[0] == xn;
    }
    check(convs > 0 && mapped == convs, "cnn: %d of %d convolutions map to cuDNN descriptors of the step's tensors", mapped,
          convs);
    test_model_free(&m);
}

int main(void) {
    vp_cpu_host_install();
    geometry();
    choice();
    env_switch();
    model_convs();
    return check_summary();
}
