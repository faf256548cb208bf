/* What the two harnesses of a generated step share (codegen_harness.c for the C target,
 * codegen_cuda_harness.c for the CUDA one): the name macros over PREFIX/UPREFIX, reading
 * the step's inputs from DATA_DIR/<input>.bin into the io struct, and the steps
 * themselves with their losses printed as `run --json` writes them (%.17g).  Included
 * after the generated header (-include NAME_step.h), so F(_io) is known. */
#ifndef VP_CODEGEN_HARNESS_H
#define VP_CODEGEN_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define F(x) CAT(PREFIX, x)
#define U(x) CAT(UPREFIX, x)

/* path's bytes when it holds exactly want of them, else NULL */
static void *harness_read_all(const char *path, size_t want) {
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

/* Reads every input of the step into inputs[] and points io's fields at them. */
static int harness_feed(F(_io) *io, const char *dir, void **inputs) {
    for (int k = 0; k < U(_N_INPUTS); k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.bin", dir, F(_inputs)[k].name);
        inputs[k] = harness_read_all(path, F(_inputs)[k].bytes);
        if (!inputs[k]) {
            fprintf(stderr, "%s: missing or not %zu bytes\n", path, F(_inputs)[k].bytes);
            return 1;
        }
        memcpy((char *)io + F(_inputs)[k].io_offset, &inputs[k], sizeof inputs[k]);
    }
    return 0;
}

/* Runs `steps` steps, printing each loss (io->loss, which the caller points at its
 * own double); io->error holds the message of a failure. */
static int harness_steps(void *arena, F(_io) *io, int steps) {
    for (int i = 0; i < steps; i++) {
        if (F(_step)(arena, io)) {
            fprintf(stderr, "step %d: %s\n", i + 1, io->error);
            return 1;
        }
        printf("loss %.17g\n", *io->loss);
    }
    return 0;
}

#endif
