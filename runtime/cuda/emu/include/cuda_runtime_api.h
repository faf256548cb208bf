/* The emulator in place of the CUDA toolkit's cuda_runtime_api.h (see ../cuda_emu.h). */
#include "../cuda_emu.h"
