/* Quantisation parameters from an observed range, shared by the QuantParams kernel
 * (runtime/cpu/k_fake_quant.c) and the QDQ exporter (codegen/onnx_qdq.c), so the
 * scale a trained step used is the scale the exported model carries.
 *
 * In: the observed [lo, hi] of one tensor or channel, the integer range [qmin, qmax]
 * and the scheme.  Out: scale > 0 and an integer-valued zero point in [qmin, qmax].
 * PyTorch's rule (torch.ao.quantization observers' _calculate_qparams), in float32:
 * the range always holds 0 (so 0 is exact); symmetric: scale = max(-lo, hi) /
 * ((qmax - qmin) / 2), zero point the middle of an unsigned range and 0 of a signed
 * one; affine: scale = (hi - lo) / (qmax - qmin), zero point qmin - round(lo / scale)
 * clamped; the scale never below float32's epsilon. */
#ifndef VP_QUANT_QPARAMS_H
#define VP_QUANT_QPARAMS_H

#include <float.h>
#include <math.h>

#ifdef __CUDACC__
#define VP_QPARAMS_FN __host__ __device__ static inline
#else
#define VP_QPARAMS_FN static inline
#endif

VP_QPARAMS_FN void vp_quant_params(float lo, float hi, int qmin, int qmax, int symmetric, float *scale,
                                   float *zero_point) {
    float neg = lo < 0 ? lo : 0, pos = hi > 0 ? hi : 0;
    float s, z = 0;
    if (symmetric) {
        float m = -neg > pos ? -neg : pos;
        s = m / ((float)(qmax - qmin) / 2.0f);
        if (qmin == 0) z = (float)((qmax + 1) / 2); /* unsigned symmetric: 128 for uint8 */
    } else {
        s = (pos - neg) / (float)(qmax - qmin);
    }
    if (!(s >= FLT_EPSILON)) s = FLT_EPSILON; /* and a NaN range gets the smallest scale */
    if (!symmetric) {
        z = (float)qmin - nearbyintf(neg / s);
        z = z < qmin ? (float)qmin : z > qmax ? (float)qmax : z;
    }
    *scale = s;
    *zero_point = z;
}

#endif
