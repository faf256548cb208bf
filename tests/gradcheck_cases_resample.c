/* Gradient checks of the resample family: Resize in each mode and coordinate rule
 * (scales and sizes, up and down, 2-D and 3-D, opset 18's axes), Upsample and
 * Resize-10's fixed rule (Upsample-7's scales attribute only loads from files),
 * ScatterND (none and add, duplicate rows, partial rows), ScatterElements (none, add
 * with duplicates off a smaller index shape) and GatherND (with batch_dims), and the
 * variants whose gradients are refused. */
#include "gradcheck_cases.h"

#include <stdint.h>

#include "gradcheck_harness.h"
#include "ir/graph_build.h"

static int floats(gc_case *k, int n, const float *v) {
    return vp_build_const(k->g, "scales", VP_F32, 1, (int64_t[]){n}, v);
}

/* Resize(x[4-D], roi, scales | sizes) with mode and coordinate rule; n_scales or n_sizes is 0. */
static void case_resize(const char *mode, const char *coord, const char *nearest, int opset, int rank,
                        const int64_t *dims, int n_scales, const float *scales, int n_sizes, const int64_t *sizes) {
    gc_case k;
    if (!gc_begin(&k, opset, "Resize %s %s%s%s %s [%d-D] opset %d", mode, coord, nearest ? " " : "",
                  nearest ? nearest : "", n_scales ? "scales" : "sizes", rank, opset))
        return;
    int x = gc_param(&k, UNI, rank, dims);
    int roi = opset >= 13 ? -1 : vp_build_const(k.g, "roi", VP_F32, 1, (int64_t[]){0}, NULL);
    int in[4] = {x, roi, n_scales ? floats(&k, n_scales, scales) : -1, n_sizes ? gc_ints(&k, n_sizes, sizes) : -1};
    if (opset < 13 && !n_scales) in[2] = vp_build_const(k.g, "scales", VP_F32, 1, (int64_t[]){0}, NULL);
    int n = gc_op(&k, "Resize", n_sizes ? 4 : 3, in);
    attr_s(&k, n, "mode", mode);
    attr_s(&k, n, "coordinate_transformation_mode", coord);
    if (nearest) attr_s(&k, n, "nearest_mode", nearest);
    gc_run(&k);
}

static void cases_resize(void) {
    static const float up2[4] = {1, 1, 2, 2}, up_odd[4] = {1, 1, 2, 1.5f}, down[4] = {1, 1, 0.6f, 0.8f};
    static const int64_t grow[4] = {1, 2, 5, 7}, shrink[4] = {1, 2, 2, 3};
    const int64_t *d = (int64_t[]){1, 2, 3, 4}, *big = (int64_t[]){1, 2, 4, 5};
    case_resize("nearest", "asymmetric", "floor", 13, 4, d, 4, up2, 0, NULL);
    case_resize("nearest", "half_pixel", "round_prefer_ceil", 13, 4, d, 4, up_odd, 0, NULL);
    case_resize("nearest", "half_pixel", "round_prefer_floor", 13, 4, big, 0, NULL, 4, shrink);
    case_resize("nearest", "align_corners", "round_prefer_floor", 11, 4, d, 0, NULL, 4, grow);
    case_resize("nearest", "tf_half_pixel_for_nearest", "ceil", 13, 4, d, 4, up_odd, 0, NULL);
    case_resize("linear", "half_pixel", NULL, 13, 4, d, 4, up2, 0, NULL);
    case_resize("linear", "half_pixel", NULL, 11, 4, big, 4, down, 0, NULL);
    case_resize("linear", "pytorch_half_pixel", NULL, 13, 4, d, 4, up2, 0, NULL);
    case_resize("linear", "pytorch_half_pixel", NULL, 13, 4, big, 0, NULL, 4, shrink);
    case_resize("linear", "align_corners", NULL, 13, 4, d, 0, NULL, 4, grow);
    case_resize("linear", "align_corners", NULL, 13, 4, big, 4, down, 0, NULL);
    case_resize("linear", "asymmetric", NULL, 13, 4, d, 4, up_odd, 0, NULL);
    case_resize("linear", "half_pixel_symmetric", NULL, 19, 4, big, 4, down, 0, NULL);
    gc_case k;
    if (gc_begin(&k, 13, "Resize linear half_pixel trilinear [1,1,2,3,2] x [1,1,2,2,1.5]")) {
        int x = gc_param(&k, UNI, DIMS(1, 1, 2, 3, 2));
        int n = gc_op(&k, "Resize", 3, (int[]){x, -1, floats(&k, 5, (float[]){1, 1, 2, 2, 1.5f})});
        attr_s(&k, n, "mode", "linear");
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "Resize linear tf_crop_and_resize roi, extrapolation 10")) {
        static const float roi[8] = {0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 0.7f};
        int x = gc_param(&k, UNI, DIMS(1, 1, 4, 4));
        int r = vp_build_const(k.g, "roi", VP_F32, 1, (int64_t[]){8}, roi);
        int n = gc_op(&k, "Resize", 4, (int[]){x, r, -1, gc_ints(&k, 4, (int64_t[]){1, 1, 3, 3})});
        attr_s(&k, n, "mode", "linear");
        attr_s(&k, n, "coordinate_transformation_mode", "tf_crop_and_resize");
        attr_f(&k, n, "extrapolation_value", 10);
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "Resize linear axes [3, 2] scales [1.5, 2] opset 18")) {
        int x = gc_param(&k, UNI, DIMS(1, 2, 3, 4));
        int n = gc_op(&k, "Resize", 3, (int[]){x, -1, floats(&k, 2, (float[]){1.5f, 2})});
        attr_s(&k, n, "mode", "linear");
        attr_is(&k, n, "axes", 2, (int64_t[]){3, 2});
        gc_run(&k);
    }
    if (gc_begin(&k, 10, "Resize-10 linear scales [1,1,2,1.5] (asymmetric)")) {
        int x = gc_param(&k, UNI, DIMS(1, 2, 3, 4));
        attr_s(&k, gc_op(&k, "Resize", 2, (int[]){x, floats(&k, 4, up_odd)}), "mode", "linear");
        gc_run(&k);
    }
    if (gc_begin(&k, 9, "Upsample-9 nearest scales [1,1,2,3]")) {
        int x = gc_param(&k, UNI, DIMS(1, 2, 3, 2));
        gc_op(&k, "Upsample", 2, (int[]){x, floats(&k, 4, (float[]){1, 1, 2, 3})});
        gc_run(&k);
    }
}

static void cases_nd(void) {
    gc_case k;
    if (gc_begin(&k, 13, "ScatterND[4,3] rows [[1],[3]] updates[2,3]")) {
        int in[3] = {gc_param(&k, UNI, DIMS(4, 3)), vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){2, 1},
                                                                   (int64_t[]){1, 3}),
                     gc_param(&k, UNI, DIMS(2, 3))};
        gc_op(&k, "ScatterND", 3, in);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "ScatterND[3,3,2] elements [[0,1],[2,-1]] updates[2,2]")) {
        int in[3] = {gc_param(&k, UNI, DIMS(3, 3, 2)),
                     vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){2, 2}, (int64_t[]){0, 1, 2, -1}),
                     gc_param(&k, UNI, DIMS(2, 2))};
        gc_op(&k, "ScatterND", 3, in);
        gc_run(&k);
    }
    if (gc_begin(&k, 16, "ScatterND add [5,2] duplicate rows [[4],[0],[4]] updates[3,2] opset 16")) {
        int in[3] = {gc_param(&k, UNI, DIMS(5, 2)),
                     vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){3, 1}, (int64_t[]){4, 0, 4}),
                     gc_param(&k, UNI, DIMS(3, 2))};
        attr_s(&k, gc_op(&k, "ScatterND", 3, in), "reduction", "add");
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GatherND[3,4] rows [[1,2],[0,0],[1,2]] (repeats)")) {
        int in[2] = {gc_param(&k, UNI, DIMS(3, 4)),
                     vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){3, 2}, (int64_t[]){1, 2, 0, 0, 1, 2})};
        gc_op(&k, "GatherND", 2, in);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "GatherND[2,3,2] batch_dims 1 indices[2,2,1] (negative)")) {
        int in[2] = {gc_param(&k, UNI, DIMS(2, 3, 2)),
                     vp_build_const(k.g, "i", VP_I64, 3, (int64_t[]){2, 2, 1}, (int64_t[]){2, 0, -1, 1})};
        attr_i(&k, gc_op(&k, "GatherND", 2, in), "batch_dims", 1);
        gc_run(&k);
    }
    if (gc_begin(&k, 13, "ScatterElements[3,4] axis 0 indices[2,4] (negative)")) {
        int in[3] = {gc_param(&k, UNI, DIMS(3, 4)),
                     vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){2, 4}, (int64_t[]){0, 2, -1, 1, 1, 0, 0, -3}),
                     gc_param(&k, UNI, DIMS(2, 4))};
        gc_op(&k, "ScatterElements", 3, in);
        gc_run(&k);
    }
    if (gc_begin(&k, 16, "ScatterElements add [2,5,3] axis 1 indices[2,3,2] int32 (duplicates, smaller off the axis)")) {
        int32_t idx[12] = {4, 0, 4, 4, 1, 2, 0, 0, 3, 1, 2, 3};
        int in[3] = {gc_param(&k, UNI, DIMS(2, 5, 3)), vp_build_const(k.g, "i", VP_I32, 3, (int64_t[]){2, 3, 2}, idx),
                     gc_param(&k, UNI, DIMS(2, 3, 2))};
        int n = gc_op(&k, "ScatterElements", 3, in);
        attr_i(&k, n, "axis", 1);
        attr_s(&k, n, "reduction", "add");
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "refused: ScatterElements reduction max")) {
        int in[3] = {gc_param(&k, UNI, DIMS(4, 3)),
                     vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){1, 3}, (int64_t[]){1, 3, 0}),
                     gc_param(&k, UNI, DIMS(1, 3))};
        attr_s(&k, gc_op(&k, "ScatterElements", 3, in), "reduction", "max");
        k.refusal = "reduction 'max' has no gradient rule";
        gc_run(&k);
    }
    if (gc_begin(&k, 16, "refused: ScatterND reduction mul")) {
        int in[3] = {gc_param(&k, UNI, DIMS(4, 3)),
                     vp_build_const(k.g, "i", VP_I64, 2, (int64_t[]){2, 1}, (int64_t[]){1, 3}),
                     gc_param(&k, UNI, DIMS(2, 3))};
        attr_s(&k, gc_op(&k, "ScatterND", 3, in), "reduction", "mul");
        k.refusal = "reduction 'mul' has no gradient rule";
        gc_run(&k);
    }
    if (gc_begin(&k, 18, "refused: Resize sizes keep_aspect_ratio_policy not_larger")) {
        int x = gc_param(&k, UNI, DIMS(1, 1, 3, 4));
        int n = gc_op(&k, "Resize", 4, (int[]){x, -1, -1, gc_ints(&k, 2, (int64_t[]){6, 6})});
        attr_is(&k, n, "axes", 2, (int64_t[]){2, 3});
        attr_s(&k, n, "keep_aspect_ratio_policy", "not_larger");
        k.refusal = "keep_aspect_ratio_policy 'not_larger' has no gradient rule";
        gc_run(&k);
    }
}

void gc_cases_resample(void) {
    cases_resize();
    cases_nd();
}
