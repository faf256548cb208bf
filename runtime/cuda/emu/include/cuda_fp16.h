/* The emulator in place of the CUDA toolkit's cuda_fp16.h (see ../cuda_emu.h). */
#include "../cuda_emu.h"
