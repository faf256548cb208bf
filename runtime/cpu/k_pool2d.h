/* Max pooling over two spatial axes, float32, an output row at a time (k_pool2d.c). */
#ifndef VP_K_POOL2D_H
#define VP_K_POOL2D_H

#include <stdint.h>

#include "k_linalg.h"

/* MaxPool of planes planes of x (each w->in[0] x w->in[1]) into y and, when a is not
 * NULL, which kernel offset held each maximum (255 for a window that reads nothing):
 * the same values as k_pool.c's tap walk.  Returns 0 when the window is not one it
 * takes (not 2-D, output rows too long, 255 or more kernel offsets): nothing written. */
int vp_pool2d_max_f32(const vp_window *w, int64_t planes, const float *x, float *y, uint8_t *a);

/* dX of that MaxPool from dY and a: zeroed, then each window's dY added at the offset a
 * recorded, only where y (when not NULL) is positive: k_pool.c's scatter for
 * MaxPoolReluGrad, the same sums in the same order.  Returns 0 as above. */
int vp_pool2d_max_scatter_f32(const vp_window *w, int64_t planes, const float *dy, const uint8_t *a, const float *y,
                              float *dx);

#endif
