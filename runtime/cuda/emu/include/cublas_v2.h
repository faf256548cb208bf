/* The emulator in place of the CUDA toolkit's cublas_v2.h (see ../cuda_emu.h). */
#include "../cuda_emu.h"
