/* Drives a generated step (compiled with it by tests/cli_codegen.sh):
 *     cc -DPREFIX=mlp -DUPREFIX=MLP -include mlp_step.h codegen_harness.c mlp_step.c ...
 * usage: harness WEIGHTS DATA_DIR STEPS OUT.weights
 * Loads WEIGHTS, feeds DATA_DIR/<input>.bin to every step, prints each loss (%.17g, as
 * `run --json` writes them), saves the weights after the last step.  Before training it
 * checks the refusals: an arena one byte short, for init and for step, fails with a
 * message and leaves the arena's bytes past the short size untouched. */
#include "codegen_harness.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s WEIGHTS DATA_DIR STEPS OUT.weights\n", argv[0]);
        return 2;
    }
    size_t bytes = (U(_ARENA_BYTES) + U(_ARENA_ALIGN) - 1) / U(_ARENA_ALIGN) * U(_ARENA_ALIGN);
    unsigned char *arena = aligned_alloc(U(_ARENA_ALIGN), bytes + U(_ARENA_ALIGN));
    char msg[512] = "";
    if (!arena) return 1;
    /* the refusals, on a canary past the short size */
    memset(arena, 0xa5, bytes + U(_ARENA_ALIGN));
    F(_io) io;
    memset(&io, 0, sizeof io);
    io.error = msg;
    io.error_size = sizeof msg;
    io.arena_bytes = U(_ARENA_BYTES) - 1;
    if (F(_init)(arena, U(_ARENA_BYTES) - 1, argv[1], msg, sizeof msg) == 0 || !strstr(msg, "the arena has")) {
        fprintf(stderr, "FAIL: init accepted a short arena (%s)\n", msg);
        return 1;
    }
    msg[0] = 0;
    if (F(_step)(arena, &io) == 0 || !strstr(msg, "the arena has")) {
        fprintf(stderr, "FAIL: step accepted a short arena (%s)\n", msg);
        return 1;
    }
    for (size_t i = 0; i < bytes + U(_ARENA_ALIGN); i++)
        if (arena[i] != 0xa5) {
            fprintf(stderr, "FAIL: a refused call wrote byte %zu of the arena\n", i);
            return 1;
        }
    printf("refused: %s\n", msg);

    if (F(_init)(arena, U(_ARENA_BYTES), argv[1], msg, sizeof msg)) {
        fprintf(stderr, "init: %s\n", msg);
        return 1;
    }
    io.arena_bytes = U(_ARENA_BYTES);
    void *inputs[U(_N_INPUTS) + 1];
    double loss = 0;
    io.loss = &loss;
    if (harness_feed(&io, argv[2], inputs) || harness_steps(arena, &io, atoi(argv[3]))) return 1;
    if (F(_save)(arena, U(_ARENA_BYTES), argv[4], msg, sizeof msg)) {
        fprintf(stderr, "save: %s\n", msg);
        return 1;
    }
    for (int k = 0; k < U(_N_INPUTS); k++) free(inputs[k]);
    F(_fini)();
    free(arena);
    return 0;
}
