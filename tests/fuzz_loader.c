/* The loader's fuzz entry, shared by libFuzzer (tests/fuzz/libfuzzer_loader.c, built
 * with -DVP_FUZZ=ON and clang) and the bounded mutation run in CI (test_fuzz_loader). */
#include "fuzz_loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/infer.h"
#include "onnx/onnx_load.h"

int vp_fuzz_load_one(const uint8_t *data, size_t size) {
    vp_graph *g;
    vp_error err;
    if (vp_onnx_load_bytes(data, size, "fuzz.onnx", NULL, &g, &err)) return 0;
    /* bind whatever symbolic dims there are to a small value, so inference runs */
    vp_dim_binding b[32];
    char names[32][64]; /* copies: binding frees the graph's dim_param strings */
    int nb = 0;
    for (int k = 0; k < g->n_inputs; k++) {
        const vp_value *v = &g->values[g->inputs[k]];
        for (int d = 0; d < v->rank && nb < 32; d++)
            if (v->dim_param[d]) {
                int seen = 0;
                for (int i = 0; i < nb; i++) seen |= !strcmp(b[i].name, v->dim_param[d]);
                if (!seen) {
                    snprintf(names[nb], sizeof names[nb], "%s", v->dim_param[d]);
                    b[nb] = (vp_dim_binding){names[nb], 2};
                    nb++;
                }
            }
    }
    if (!vp_bind_dims(g, b, nb, &err)) {
        vp_infer_opts o = {.keep_going = 1, .fold_max_elems = 4096};
        vp_infer_result r;
        if (vp_infer(g, &o, &r, &err) != VP_ERR_NOMEM) free(r.unsupported);
    }
    vp_graph_free(g);
    return 0;
}
