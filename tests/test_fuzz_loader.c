/* A bounded mutation fuzz of the loader and shape inference, run in CI (under ASan and
 * UBSan in the sanitizer build).  Seeds are real models; each round flips bits,
 * overwrites bytes with interesting values, truncates, duplicates or deletes a span.
 *
 * usage: test_fuzz_loader [SECONDS] [SEED_MODEL...]   (default 20 s) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_host.h"
#include "fuzz_loader.h"
#include "ir/rng.h"
#include "onnx/tensor_proto.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t mutate(vp_rng *r, const uint8_t *src, size_t n, uint8_t *dst, size_t cap) {
    size_t len = n < cap ? n : cap;
    memcpy(dst, src, len);
    int rounds = 1 + (int)(vp_rng_next(r) % 4);
    for (int k = 0; k < rounds && len; k++) {
        size_t at = (size_t)(vp_rng_next(r) % len);
        switch (vp_rng_next(r) % 6) {
        case 0: dst[at] ^= (uint8_t)(1u << (vp_rng_next(r) % 8)); break;
        case 1: {
            static const uint8_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, 0x08, 0x10, 0x12, 0x1a, 0x22, 0x3a};
            dst[at] = interesting[vp_rng_next(r) % sizeof interesting];
            break;
        }
        case 2: len = at; break; /* truncate */
        case 3: {                /* delete a span */
            size_t span = 1 + (size_t)(vp_rng_next(r) % 16);
            if (at + span > len) span = len - at;
            memmove(dst + at, dst + at + span, len - at - span);
            len -= span;
            break;
        }
        case 4: { /* duplicate a span */
            size_t span = 1 + (size_t)(vp_rng_next(r) % 16);
            if (at + span > len) span = len - at;
            if (len + span > cap) break;
            memmove(dst + at + span, dst + at, len - at);
            len += span;
            break;
        }
        default: dst[at] = (uint8_t)vp_rng_next(r); break;
        }
    }
    return len;
}

int main(int argc, char **argv) {
    vp_cpu_host_install();
    double seconds = argc > 1 ? atof(argv[1]) : 20.0;
    const char *dflt[] = {
        VP_SOURCE_DIR "/tests/data/bad/good_relu.onnx",
        VP_SOURCE_DIR "/tests/data/bad/symbolic_dim.onnx",
        VP_ONNX_TESTS "/light/light_squeezenet.onnx",
        VP_ONNX_TESTS "/node/test_reshape_negative_dim/model.onnx",
        VP_ONNX_TESTS "/node/test_conv_with_strides_padding/model.onnx",
        VP_ONNX_TESTS "/node/test_slice/model.onnx",
        VP_ONNX_TESTS "/simple/test_expand_shape_model1/model.onnx",
        VP_SOURCE_DIR "/models/mlp/model.onnx",
        /* subgraphs: a Loop unrolled (nn.EmbeddingBag), one refused at its second iteration, an If */
        VP_SOURCE_DIR "/tests/data/arch/embbag_mean_op13/model.onnx",
        VP_SOURCE_DIR "/tests/data/bad/loop_data_cond.onnx",
        VP_ONNX_TESTS "/node/test_if/model.onnx",
        /* found by this fuzzer: a Constant whose output name was cut, folded at load */
        VP_SOURCE_DIR "/tests/data/bad/fuzz_constant_unnamed_output.onnx",
    };
    const char **seeds = argc > 2 ? (const char **)argv + 2 : dflt;
    int n_seeds = argc > 2 ? argc - 2 : (int)(sizeof dflt / sizeof dflt[0]);
    uint8_t *bufs[64];
    size_t lens[64];
    int n = 0;
    for (int i = 0; i < n_seeds && n < 64; i++) {
        vp_error err;
        if (vp_read_file(seeds[i], &bufs[n], &lens[n], &err) == VP_OK) n++;
        else printf("skipping seed: %s\n", err.msg);
    }
    if (!n) {
        printf("no seed models found\n");
        return 1;
    }
    size_t cap = 0;
    for (int i = 0; i < n; i++)
        if (lens[i] > cap) cap = lens[i];
    cap += 64;
    uint8_t *work = malloc(cap);
    vp_rng rng = {12345};
    long iters = 0;
    double t0 = now();
    for (int i = 0; i < n; i++) vp_fuzz_load_one(bufs[i], lens[i]); /* the seeds themselves */
    while (now() - t0 < seconds) {
        int s = (int)(vp_rng_next(&rng) % (uint64_t)n);
        size_t len = mutate(&rng, bufs[s], lens[s], work, cap);
        vp_fuzz_load_one(work, len);
        iters++;
    }
    printf("fuzzed the loader with %ld mutated models from %d seeds in %.1f s: no crash\n", iters, n, now() - t0);
    printf("1 passed, 0 failed\n");
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(work);
    return 0;
}
