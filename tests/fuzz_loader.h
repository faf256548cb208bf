#ifndef VP_FUZZ_LOADER_H
#define VP_FUZZ_LOADER_H

#include <stddef.h>
#include <stdint.h>

/* Loads bytes as a model, binds every symbolic dim to 2 and infers shapes; any
 * outcome but a crash, a leak or undefined behaviour is fine. */
int vp_fuzz_load_one(const uint8_t *data, size_t size);

#endif
