/* Drives a step generated with --target cuda (compiled with it by tests/cli_codegen.sh,
 * linked with the CUDA backend: the real one, or its host emulation where no GPU is):
 *     cc -DPREFIX=mlp -DUPREFIX=MLP -include mlp_step.h codegen_cuda_harness.c mlp_step.c ...
 * usage: harness WEIGHTS DATA_DIR STEPS OUT.weights
 * As codegen_harness.c, on a device arena from the backend: a short arena refused,
 * then the steps' losses (%.17g) and the weights after them. */
#include "codegen_harness.h"

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
    double loss = 0;
    io.loss = &loss;
    if (harness_feed(&io, argv[2], inputs) || harness_steps(arena, &io, atoi(argv[3]))) return 1;
    if (F(_save)(b, arena, U(_ARENA_BYTES), argv[4], msg, sizeof msg)) {
        fprintf(stderr, "save: %s\n", msg);
        return 1;
    }
    for (int k = 0; k < U(_N_INPUTS); k++) free(inputs[k]);
    b->iface->free(b, arena);
    vp_backend_free(b);
    return 0;
}
