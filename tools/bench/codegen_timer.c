/* Times a generated step (compiled with it by bench_codegen.py):
 *     cc -O2 -DPREFIX=mlp -DUPREFIX=MLP -include mlp_step.h codegen_timer.c mlp_step.c ...
 * usage: timer WEIGHTS DATA_DIR WARMUP STEPS
 * Feeds DATA_DIR/<input>.bin (written by `run --save-inputs`) to every step and prints
 * each step's milliseconds, inputs in and loss out included, as `run` times its steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define F(x) CAT(PREFIX, x)
#define U(x) CAT(UPREFIX, x)

static double now_ms(void) {
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char **argv) {
    if (argc != 5) return 2;
    size_t bytes = (U(_ARENA_BYTES) + U(_ARENA_ALIGN) - 1) / U(_ARENA_ALIGN) * U(_ARENA_ALIGN);
    void *arena = aligned_alloc(U(_ARENA_ALIGN), bytes);
    char msg[512] = "";
    if (!arena || F(_init)(arena, bytes, argv[1], msg, sizeof msg)) {
        fprintf(stderr, "init: %s\n", msg);
        return 1;
    }
    F(_io) io;
    memset(&io, 0, sizeof io);
    double loss;
    io.arena_bytes = bytes;
    io.loss = &loss;
    io.error = msg;
    io.error_size = sizeof msg;
    void *inputs[U(_N_INPUTS) + 1];
    for (int k = 0; k < U(_N_INPUTS); k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", argv[2], F(_inputs)[k].name);
        FILE *f = fopen(path, "rb");
        inputs[k] = malloc(F(_inputs)[k].bytes + 1);
        if (!f || !inputs[k] || fread(inputs[k], 1, F(_inputs)[k].bytes, f) != F(_inputs)[k].bytes) {
            fprintf(stderr, "%s: cannot read\n", path);
            return 1;
        }
        fclose(f);
        memcpy((char *)&io + F(_inputs)[k].io_offset, &inputs[k], sizeof inputs[k]);
    }
    int warmup = atoi(argv[3]), steps = atoi(argv[4]);
    for (int i = 0; i < warmup + steps; i++) {
        double t0 = now_ms();
        if (F(_step)(arena, &io)) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        double t1 = now_ms();
        if (i >= warmup) printf("%.6f\n", t1 - t0);
    }
    for (int k = 0; k < U(_N_INPUTS); k++) free(inputs[k]);
    F(_fini)();
    free(arena);
    return 0;
}
