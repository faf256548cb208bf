/* Gradient checks of the ops that move data: Reshape and its kin, Transpose, Expand,
 * Tile, Trilu, Concat/Split, Slice, Gather, GatherElements, TopK, CumSum, Pad. */
#include "gradcheck_cases.h"

#include <stdint.h>

#include "gradcheck_harness.h"
#include "ir/graph_build.h"

static void case_shape_op(const char *label, const char *op, int opset, int n_ints, const int64_t *ints,
                          const char *attr, int n_attr, const int64_t *attr_v) {
    gc_case k;
    if (!gc_begin(&k, opset, "%s opset %d", label, opset)) return;
    int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 4)), -1};
    if (n_ints) in[1] = gc_ints(&k, n_ints, ints);
    int n = gc_op(&k, op, n_ints ? 2 : 1, in);
    if (attr && n_attr >= 0) attr_is(&k, n, attr, n_attr, attr_v);
    else if (attr) attr_i(&k, n, attr, attr_v[0]);
    gc_run(&k);
}

static void cases_reshape(void) {
    case_shape_op("Reshape[2,3,4]->[6,4]", "Reshape", 13, 2, (int64_t[]){6, -1}, NULL, 0, NULL);
    case_shape_op("Flatten[2,3,4] axis=2", "Flatten", 13, 0, NULL, "axis", -1, (int64_t[]){2});
    case_shape_op("Flatten[2,3,4] axis=0", "Flatten", 13, 0, NULL, "axis", -1, (int64_t[]){0});
    case_shape_op("Unsqueeze[2,3,4] axes=[0,4]", "Unsqueeze", 11, 0, NULL, "axes", 2, (int64_t[]){0, 4});
    case_shape_op("Unsqueeze[2,3,4] axes=[-1]", "Unsqueeze", 13, 1, (int64_t[]){-1}, NULL, 0, NULL);
    case_shape_op("Transpose[2,3,4] default perm", "Transpose", 13, 0, NULL, NULL, 0, NULL);
    case_shape_op("Transpose[2,3,4] perm=[1,2,0]", "Transpose", 13, 0, NULL, "perm", 3, (int64_t[]){1, 2, 0});
    case_shape_op("Expand[2,3,4]->[2,2,3,4]", "Expand", 13, 4, (int64_t[]){2, 2, 3, 4}, NULL, 0, NULL);
    case_shape_op("Tile[2,3,4] x [2,1,3]", "Tile", 13, 3, (int64_t[]){2, 1, 3}, NULL, 0, NULL);
    case_shape_op("Trilu[2,3,4] upper", "Trilu", 14, 0, NULL, NULL, 0, NULL);
    case_shape_op("Trilu[2,3,4] lower", "Trilu", 14, 0, NULL, "upper", -1, (int64_t[]){0});
    case_shape_op("Trilu[2,3,4] k=-1", "Trilu", 14, 1, (int64_t[]){-1}, NULL, 0, NULL);
    case_shape_op("Tile[2,3,4] x [1,1,1]", "Tile", 13, 3, (int64_t[]){1, 1, 1}, NULL, 0, NULL);
    gc_case k;
    if (gc_begin(&k, 13, "Squeeze[2,1,3,1] axes=[1,3] opset 13")) {
        int x = gc_param(&k, UNI, DIMS(2, 1, 3, 1));
        gc_op(&k, "Squeeze", 2, (int[]){x, gc_ints(&k, 2, (int64_t[]){1, 3})});
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Squeeze[2,1,3,1] all opset 11")) {
        int x = gc_param(&k, UNI, DIMS(2, 1, 3, 1));
        gc_op(&k, "Squeeze", 1, &x);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Expand[3,1]->[2,3,4]")) {
        int x = gc_param(&k, UNI, DIMS(3, 1));
        gc_op(&k, "Expand", 2, (int[]){x, gc_ints(&k, 3, (int64_t[]){2, 3, 4})});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Tile[3] x [4]")) {
        int x = gc_param(&k, UNI, DIMS(3));
        gc_op(&k, "Tile", 2, (int[]){x, gc_ints(&k, 1, (int64_t[]){4})});
        gc_run(&k);
    }
}

static void cases_concat_split(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Concat axis=1 [2,1,3],[2,4,3],[2,2,3]")) {
        int in[3] = {gc_param(&k, UNI, DIMS(2, 1, 3)), gc_param(&k, UNI, DIMS(2, 4, 3)),
                     gc_param(&k, UNI, DIMS(2, 2, 3))};
        attr_i(&k, gc_op(&k, "Concat", 3, in), "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Concat axis=-1 [3,2],[3,5] opset 11")) {
        int in[2] = {gc_param(&k, UNI, DIMS(3, 2)), gc_param(&k, UNI, DIMS(3, 5))};
        attr_i(&k, gc_op(&k, "Concat", 2, in), "axis", -1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Concat(x, x) axis=0 [2,3]")) {
        int x = gc_param(&k, UNI, DIMS(2, 3));
        attr_i(&k, gc_op(&k, "Concat", 2, (int[]){x, x}), "axis", 0);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Concat axis=1 of 20 inputs, 4 parameters each 5 times [2,1] (no fan-in limit)")) {
        int in[20];
        for (int j = 0; j < 4; j++) in[j] = gc_param(&k, UNI, DIMS(2, 1));
        for (int j = 4; j < 20; j++) in[j] = in[j % 4];
        attr_i(&k, gc_op(&k, "Concat", 20, in), "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Split[2,20] axis=1 into 20, 15 outputs in the loss (no fan-out limit)")) {
        int x = gc_param(&k, UNI, DIMS(2, 20)), y[20];
        attr_i(&k, gc_node(&k, "Split", "", 1, &x, 20, y), "axis", 1);
        for (int j = 0; j < 15; j++) gc_loss_on(&k, y[j]);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Split[2,6] axis=1 split=[1,3,2], all outputs in the loss")) {
        int x = gc_param(&k, UNI, DIMS(2, 6)), y[3];
        int n = gc_node(&k, "Split", "", 2, (int[]){x, gc_ints(&k, 3, (int64_t[]){1, 3, 2})}, 3, y);
        attr_i(&k, n, "axis", 1);
        for (int j = 0; j < 3; j++) gc_loss_on(&k, y[j]);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Split[6,2] equal, output 1 only in the loss")) {
        int x = gc_param(&k, UNI, DIMS(6, 2)), y[3];
        gc_node(&k, "Split", "", 1, &x, 3, y);
        gc_loss_on(&k, y[1]);
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "Split[7,2] num_outputs=3 opset 18, outputs 0 and 2")) {
        int x = gc_param(&k, UNI, DIMS(7, 2)), y[3];
        attr_i(&k, gc_node(&k, "Split", "", 1, &x, 3, y), "num_outputs", 3);
        gc_loss_on(&k, y[0]);
        gc_loss_on(&k, y[2]);
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Split[4,5] axis=-1 split=[2,3] attr opset 11, output 0 only")) {
        int x = gc_param(&k, UNI, DIMS(4, 5)), y[2];
        int n = gc_node(&k, "Split", "", 1, &x, 2, y);
        attr_i(&k, n, "axis", -1);
        attr_is(&k, n, "split", 2, (int64_t[]){2, 3});
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
}

/* Slice of a [5,6,4] parameter with constant starts/ends/axes/steps (opset 13). */
static void case_slice(int n, const int64_t *starts, const int64_t *ends, const int64_t *axes, const int64_t *steps,
                       const char *what) {
    gc_case k;
    if (!gc_begin(&k, 13, "Slice[5,6,4] %s", what)) return;
    int in[5] = {gc_param(&k, UNI, DIMS(5, 6, 4)), gc_ints(&k, n, starts), gc_ints(&k, n, ends), -1, -1};
    int n_in = 3;
    if (axes) in[n_in++] = gc_ints(&k, n, axes);
    if (steps) {
        if (!axes) in[n_in++] = -1;
        in[n_in++] = gc_ints(&k, n, steps);
    }
    gc_op(&k, "Slice", n_in, in);
    gc_run(&k);
}

static void cases_slice(void) {
    case_slice(1, (int64_t[]){1}, (int64_t[]){4}, NULL, NULL, "starts=[1] ends=[4]");
    case_slice(2, (int64_t[]){-4, 1}, (int64_t[]){100, -1}, (int64_t[]){1, 2}, NULL, "negative starts, ends past");
    case_slice(1, (int64_t[]){0}, (int64_t[]){6}, (int64_t[]){1}, (int64_t[]){2}, "axis 1 step 2");
    case_slice(1, (int64_t[]){1}, (int64_t[]){5}, (int64_t[]){0}, (int64_t[]){3}, "axis 0 start 1 step 3");
    case_slice(1, (int64_t[]){-1}, (int64_t[]){INT64_MIN}, (int64_t[]){1}, (int64_t[]){-1}, "reverse axis 1");
    case_slice(1, (int64_t[]){4}, (int64_t[]){0}, (int64_t[]){1}, (int64_t[]){-2}, "axis 1 step -2");
    case_slice(3, (int64_t[]){0, 5, 3}, (int64_t[]){5, 0, 0}, (int64_t[]){0, 1, 2}, (int64_t[]){2, -3, -1},
               "three axes, steps 2,-3,-1");
    case_slice(1, (int64_t[]){2}, (int64_t[]){3}, (int64_t[]){-1}, (int64_t[]){5}, "one element, big step");
    gc_case k;
    if (gc_begin(&k, 10, "Slice[5,6,4] inputs without steps opset 10")) {
        int x = gc_param(&k, UNI, DIMS(5, 6, 4));
        gc_op(&k, "Slice", 4,
              (int[]){x, gc_ints(&k, 1, (int64_t[]){2}), gc_ints(&k, 1, (int64_t[]){-1}),
                      gc_ints(&k, 1, (int64_t[]){1})});
        gc_run(&k);
    }
    if (gc_begin(&k, 9, "Slice[5,6,4] attributes opset 9")) {
        int x = gc_param(&k, UNI, DIMS(5, 6, 4));
        int n = gc_op(&k, "Slice", 1, &x);
        attr_is(&k, n, "starts", 2, (int64_t[]){1, -3});
        attr_is(&k, n, "ends", 2, (int64_t[]){3, 1000});
        attr_is(&k, n, "axes", 2, (int64_t[]){0, 2});
        gc_run(&k);
    }
}

static void cases_gather(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Gather[5,3] axis 0 indices[2,4] (repeats, negative)")) {
        int64_t idx[8] = {0, 4, 2, 4, -1, 1, 0, 0};
        int x = gc_param(&k, UNI, DIMS(5, 3));
        int i = vp_build_const(k.g, "idx", VP_I64, 2, (int64_t[]){2, 4}, idx);
        gc_op(&k, "Gather", 2, (int[]){x, i});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Gather[6,2] axis 0 indices[2,2,2]")) {
        int64_t idx[8] = {5, 0, 5, 5, 2, 3, 0, 1};
        int x = gc_param(&k, UNI, DIMS(6, 2));
        int i = vp_build_const(k.g, "idx", VP_I64, 3, (int64_t[]){2, 2, 2}, idx);
        gc_op(&k, "Gather", 2, (int[]){x, i});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Gather[2,5,3] axis 1 indices[3] int32")) {
        int32_t idx[3] = {3, 3, 1};
        int x = gc_param(&k, UNI, DIMS(2, 5, 3));
        int i = vp_build_const(k.g, "idx", VP_I32, 1, (int64_t[]){3}, idx);
        attr_i(&k, gc_op(&k, "Gather", 2, (int[]){x, i}), "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Gather[4,3] axis -1 scalar index")) {
        int64_t idx = 2;
        int x = gc_param(&k, UNI, DIMS(4, 3));
        int i = vp_build_const(k.g, "idx", VP_I64, 0, NULL, &idx);
        attr_i(&k, gc_op(&k, "Gather", 2, (int[]){x, i}), "axis", -1);
        gc_run(&k);
    }
}

static void cases_scatter(void) {
    gc_case k;
    if (gc_begin(&k, 13, "GatherElements[3,4] axis 0 indices[2,4] (repeats, negative)")) {
        int64_t idx[8] = {0, 2, -1, 1, 2, 2, 0, -3};
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "GatherElements", 2, (int[]){x, vp_build_const(k.g, "idx", VP_I64, 2, (int64_t[]){2, 4}, idx)});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GatherElements[2,5,3] axis 1 indices[2,3,2] int32 (smaller off the axis)")) {
        int32_t idx[12] = {4, 0, 1, 1, 3, 4, 0, 0, 2, 3, 4, 2};
        int x = gc_param(&k, UNI, DIMS(2, 5, 3));
        int i = vp_build_const(k.g, "idx", VP_I32, 3, (int64_t[]){2, 3, 2}, idx);
        attr_i(&k, gc_op(&k, "GatherElements", 2, (int[]){x, i}), "axis", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GatherElements[2,3,5] axis 2 indices[2,3,4] repeating along axis 0 (as a Gather of one row)")) {
        int64_t idx[24];
        for (int i = 0; i < 24; i++) idx[i] = (int64_t[]){0, 4, -1, 2, 3, 3, 0, -5, 1, 2, 4, 0}[i % 12];
        int x = gc_param(&k, UNI, DIMS(2, 3, 5));
        int i = vp_build_const(k.g, "idx", VP_I64, 3, (int64_t[]){2, 3, 4}, idx);
        attr_i(&k, gc_op(&k, "GatherElements", 2, (int[]){x, i}), "axis", 2);
        gc_run(&k);
    }
    for (int largest = 0; largest < 2; largest++) {
        if (!gc_begin(&k, 11, "TopK[3,5] k=2 axis -1 largest=%d", largest)) continue;
        int x = gc_param(&k, DISTINCT, DIMS(3, 5)), y[2];
        int n = gc_node(&k, "TopK", "", 2, (int[]){x, gc_ints(&k, 1, (int64_t[]){2})}, 2, y);
        attr_i(&k, n, "largest", largest);
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "TopK[4,3,2] k=3 axis 0")) {
        int x = gc_param(&k, DISTINCT, DIMS(4, 3, 2)), y[2];
        attr_i(&k, gc_node(&k, "TopK", "", 2, (int[]){x, gc_ints(&k, 1, (int64_t[]){3})}, 2, y), "axis", 0);
        gc_loss_on(&k, y[0]);
        gc_run(&k);
    }
    static const int64_t flags[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    for (int i = 0; i < 4; i++) {
        if (!gc_begin(&k, 14, "CumSum[3,4] axis 1 exclusive=%d reverse=%d", (int)flags[i][0], (int)flags[i][1]))
            continue;
        int64_t axis = 1;
        int x = gc_param(&k, UNI, DIMS(3, 4));
        int n = gc_op(&k, "CumSum", 2, (int[]){x, vp_build_const(k.g, "axis", VP_I64, 0, NULL, &axis)});
        attr_i(&k, n, "exclusive", flags[i][0]);
        attr_i(&k, n, "reverse", flags[i][1]);
        gc_run(&k);
    }
}

static void cases_pad(void) {
    gc_case k;
    if (gc_begin(&k, 13, "Pad[3,4] pads=[1,0,2,3] constant")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Pad", 2, (int[]){x, gc_ints(&k, 4, (int64_t[]){1, 0, 2, 3})});
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Pad[3,4] pads=[-1,2,1,-2] (crops)")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Pad", 2, (int[]){x, gc_ints(&k, 4, (int64_t[]){-1, 2, 1, -2})});
        gc_run(&k);
    }
    if (gc_begin(&k, 11, "Pad[3,4] trainable constant value opset 11")) {
        int x = gc_param(&k, UNI, DIMS(3, 4));
        gc_op(&k, "Pad", 3, (int[]){x, gc_ints(&k, 4, (int64_t[]){0, 1, 1, 1}), gc_param(&k, UNI, 0, NULL)});
        gc_run(&k);
    }
    if (gc_begin(&k, 2, "Pad[2,3,2] pads attribute opset 2")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 2));
        attr_is(&k, gc_op(&k, "Pad", 1, &x), "pads", 6, (int64_t[]){0, 1, 0, 1, 2, 1});
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "Pad[2,3,2] axes=[2] opset 18")) {
        int x = gc_param(&k, UNI, DIMS(2, 3, 2));
        gc_op(&k, "Pad", 4, (int[]){x, gc_ints(&k, 2, (int64_t[]){1, 2}), -1, gc_ints(&k, 1, (int64_t[]){2})});
        gc_run(&k);
    }
}

void gc_cases_tensor(void) {
    cases_reshape();
    cases_concat_split();
    cases_slice();
    cases_gather();
    cases_scatter();
    cases_pad();
}
