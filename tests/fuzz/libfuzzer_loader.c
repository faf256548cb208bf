/* libFuzzer entry for the loader: cmake -DVP_FUZZ=ON -DCMAKE_C_COMPILER=clang, then
 * ./tests/fuzz_loader_libfuzzer -max_total_time=600 CORPUS_DIR */
#include "cpu_host.h"
#include "fuzz_loader.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    vp_cpu_host_install(); /* loading infers shapes, folding on the CPU kernels */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return vp_fuzz_load_one(data, size); }
