/* Trains the bundled MLP with its generated step (mlp_step.c, made by `onnx-vplan
 * codegen` through vplan.mk or the CMake package) on data files, and writes the trained
 * weights; `onnx-vplan export` then writes them into the model as ONNX.
 *
 * usage: train DATA_DIR INITIAL.weights TRAINED.weights EPOCHS
 * DATA_DIR/x.bin is float32 [n, 32] and DATA_DIR/labels.bin int64 [n] (make_data.py);
 * each step takes the next MLP_BATCH samples.  The arena is allocated once, here; the
 * steps allocate nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp_step.h"

#define MLP_BATCH 16 /* the plan's --dim batch: x is [batch, 32] */
#define FEATURES 32

_Static_assert(sizeof(((mlp_io *)0)->x[0]) == sizeof(float), "x is float32");

static void *read_file(const char *dir, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    void *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf ? (size_t)n : 0;
    if (!buf) fprintf(stderr, "%s: cannot read\n", path);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s DATA_DIR INITIAL.weights TRAINED.weights EPOCHS\n", argv[0]);
        return 2;
    }
    size_t x_len, y_len;
    float *x = read_file(argv[1], "x.bin", &x_len);
    int64_t *labels = read_file(argv[1], "labels.bin", &y_len);
    size_t n = y_len / sizeof *labels;
    if (!x || !labels || x_len != n * FEATURES * sizeof *x || n < MLP_BATCH) {
        fprintf(stderr, "%s: x.bin and labels.bin do not hold the same number (>= %d) of samples\n", argv[1], MLP_BATCH);
        return 2;
    }
    /* aligned_alloc wants a multiple of the alignment */
    size_t bytes = (MLP_ARENA_BYTES + MLP_ARENA_ALIGN - 1) / MLP_ARENA_ALIGN * MLP_ARENA_ALIGN;
    void *arena = aligned_alloc(MLP_ARENA_ALIGN, bytes);
    char msg[512];
    if (!arena) return 1;
    if (mlp_init(arena, bytes, argv[2], msg, sizeof msg)) {
        fprintf(stderr, "%s\n", msg);
        return 1;
    }
    double loss = 0;
    mlp_io io = {.arena_bytes = bytes, .loss = &loss, .error = msg, .error_size = sizeof msg};
    int epochs = atoi(argv[4]);
    size_t batches = n / MLP_BATCH;
    printf("training on %zu samples, %zu steps of %d per epoch, in a %zu-byte arena\n", n, batches, MLP_BATCH,
           (size_t)MLP_ARENA_BYTES);
    for (int e = 0; e < epochs; e++) {
        double sum = 0;
        for (size_t b = 0; b < batches; b++) {
            io.x = x + b * MLP_BATCH * FEATURES;
            io.labels = labels + b * MLP_BATCH;
            if (mlp_step(arena, &io)) {
                fprintf(stderr, "%s\n", msg);
                return 1;
            }
            sum += loss;
        }
        printf("epoch %d  mean loss %.6f\n", e + 1, sum / (double)batches);
    }
    int rc = mlp_save(arena, bytes, argv[3], msg, sizeof msg);
    if (rc) fprintf(stderr, "%s\n", msg);
    else printf("wrote %s\n", argv[3]);
    mlp_fini();
    free(arena);
    free(x);
    free(labels);
    return rc ? 1 : 0;
}
