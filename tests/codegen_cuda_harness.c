/* Drives a step generated with --target cuda (compiled with it by tests/cli_codegen.sh,
 * linked with the CUDA backend: the real one, or its host emulation where no GPU is):
 *     cc -DPREFIX=mlp -DUPREFIX=MLP -include mlp_step.h codegen_cuda_harness.c mlp_step.c ...
 * usage: harness WEIGHTS DATA_DIR STEPS OUT.weights
 * As codegen_harness.c, on a device arena from the backend: a short arena refused,
 * then the steps' losses (%.17g) and the weights after them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define F(x) CAT(PREFIX, x)
#define U(x) CAT(UPREFIX, x)

static void *read_all(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    void *buf = malloc(want + 1);
    size_t got = buf ? fread(buf, 1, want + 1, f) : 0;
    fclose(f);
    if (got != want) {
        free(buf);
        return NULL;
    }
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s WEIGHTS DATA_DIR STEPS OUT.weights\n", argv[0]);
        return 2;
    }
    vp_error err;
    vp_backend *b = vp_backend_cuda_new(0, 0, &err);
    if (!b) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    void *arena = NULL;
    char msg[512] = "";
    F(_kernels) k;
    if (b->iface->alloc(b, U(_ARENA_BYTES), &arena, &err) || F(_kernels_init)(&k, msg, sizeof msg)) {
        fprintf(stderr, "%s %s\n", err.msg, msg);
        return 1;
    }
    F(_io) io;
    memset(&io, 0, sizeof io);
    io.backend = b;
    io.kernels = &k;
    io.error = msg;
    io.error_size = sizeof msg;
    io.arena_bytes = U(_ARENA_BYTES) - 1;
    if (F(_step)(arena, &io) == 0 || !strstr(msg, "the arena has")) {
        fprintf(stderr, "FAIL: step accepted a short arena (%s)\n", msg);
        return 1;
    }
    printf("refused: %s\n", msg);
    if (F(_init)(b, arena, U(_ARENA_BYTES), argv[1], msg, sizeof msg)) {
        fprintf(stderr, "init: %s\n", msg);
        return 1;
    }
    io.arena_bytes = U(_ARENA_BYTES);
    void *inputs[U(_N_INPUTS) + 1];
    for (int i = 0; i < U(_N_INPUTS); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[2], F(_inputs)[i].name);
        inputs[i] = read_all(path, F(_inputs)[i].bytes);
        if (!inputs[i]) {
            fprintf(stderr, "%s: missing or not %zu bytes\n", path, F(_inputs)[i].bytes);
            return 1;
        }
        memcpy((char *)&io + F(_inputs)[i].io_offset, &inputs[i], sizeof inputs[i]);
    }
    double loss = 0;
    io.loss = &loss;
    for (int i = 0; i < atoi(argv[3]); i++) {
        if (F(_step)(arena, &io)) {
            fprintf(stderr, "step %d: %s\n", i + 1, msg);
            return 1;
        }
        printf("loss %.17g\n", loss);
    }
    if (F(_save)(b, arena, U(_ARENA_BYTES), argv[4], msg, sizeof msg)) {
        fprintf(stderr, "save: %s\n", msg);
        return 1;
    }
    for (int i = 0; i < U(_N_INPUTS); i++) free(inputs[i]);
    b->iface->free(b, arena);
    vp_backend_free(b);
    return 0;
}
