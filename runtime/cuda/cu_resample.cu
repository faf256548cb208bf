/* CUDA kernels of Resize and ResizeGrad (float32); the resample family's index ops are
 * cu_scatter.cu's.
 *
 * Resize threads compute their sample positions from the plan the host resolved
 * (cu_resize_plan, mirroring runtime/cpu/k_resample.c's arithmetic in double), so no
 * table is allocated.  The adjoint scatters with atomicAdd: sums are exact up to
 * float32 rounding order. */
#include <math.h>

#include "cu_common.cuh"

/* ---- Resize ---- */

struct cu_tap {
    int64_t i0, i1;
    double w;
    int outside;
};

__device__ static double cu_source(const cu_resize_plan &p, int a, int64_t o) {
    double s = p.scale[a], x = (double)o, lin = (double)p.in[a], lout = p.length[a];
    switch (p.coord) {
    case 0: return (x + 0.5) / s - 0.5;
    case 1: return lin / 2 * (1 - (double)p.out[a] / lout) + (x + 0.5) / s - 0.5;
    case 2: return lout > 1 ? (x + 0.5) / s - 0.5 : 0;
    case 3: return lout == 1 ? 0 : x * (lin - 1) / (lout - 1);
    case 4: return x / s;
    case 5: return (x + 0.5) / s;
    default: {
        double st = p.roi_start[a], en = p.roi_end[a];
        return lout > 1 ? st * (lin - 1) + x * (en - st) * (lin - 1) / (lout - 1) : 0.5 * (st + en) * (lin - 1);
    }
    }
}

__device__ static int64_t cu_clamp(double v, int64_t n) { return v < 0 ? 0 : v > (double)(n - 1) ? n - 1 : (int64_t)v; }

__device__ static cu_tap cu_make_tap(const cu_resize_plan &p, int a, int64_t o) {
    double x = cu_source(p, a, o);
    int64_t n = p.in[a];
    cu_tap t = {0, 0, 0, 0};
    if (p.coord == 6 && (x < 0 || x > (double)(n - 1))) {
        t.outside = 1;
        return t;
    }
    if (!p.linear) {
        double f = floor(x), r;
        switch (p.round) {
        case 0: r = x - f <= 0.5 ? f : f + 1; break;
        case 1: r = x - f < 0.5 ? f : f + 1; break;
        case 2: r = f; break;
        default: r = ceil(x); break;
        }
        t.i0 = t.i1 = cu_clamp(r, n);
        return t;
    }
    x = x < 0 ? 0 : x > (double)(n - 1) ? (double)(n - 1) : x;
    t.i0 = (int64_t)x;
    t.i1 = t.i0 + 1 < n ? t.i0 + 1 : t.i0;
    t.w = t.i1 == t.i0 ? 0 : x - (double)t.i0;
    return t;
}

/* The neighbourhood of output e: corner offset, steps and weights of interpolating axes. */
struct cu_visit {
    int64_t base, step[CU_MAX_RANK];
    double w[CU_MAX_RANK];
    int k, outside;
};

__device__ static cu_visit cu_neighbourhood(const cu_resize_plan &p, int64_t e) {
    cu_visit v;
    v.base = 0;
    v.k = 0;
    v.outside = 0;
    int64_t xs = 1;
    for (int a = p.rank - 1; a >= 0; a--) {
        int64_t o = e % p.out[a];
        e /= p.out[a];
        cu_tap t = cu_make_tap(p, a, o);
        v.outside |= t.outside;
        v.base += t.i0 * xs;
        if (t.w != 0) {
            v.step[v.k] = (t.i1 - t.i0) * xs;
            v.w[v.k++] = t.w;
        }
        xs *= p.in[a];
    }
    return v;
}

__device__ static double cu_corner(const cu_visit &v, unsigned m, int64_t *off) {
    double wt = 1;
    *off = v.base;
    for (int j = 0; j < v.k; j++) {
        if (m >> j & 1) *off += v.step[j], wt *= v.w[j];
        else wt *= 1 - v.w[j];
    }
    return wt;
}

__global__ void k_resize(cu_resize_plan p, int64_t total, const float *x, float *y) {
    CU_FOR(e, total) {
        cu_visit v = cu_neighbourhood(p, e);
        double acc = 0;
        if (v.outside) acc = p.extrapolation;
        else
            for (unsigned m = 0; m < 1u << v.k; m++) {
                int64_t off;
                double wt = cu_corner(v, m, &off);
                acc += wt * x[off];
            }
        y[e] = (float)acc;
    }
}

__global__ void k_resize_grad(cu_resize_plan p, int64_t total, const float *dy, float *dx) {
    CU_FOR(e, total) {
        cu_visit v = cu_neighbourhood(p, e);
        if (v.outside) continue;
        for (unsigned m = 0; m < 1u << v.k; m++) {
            int64_t off;
            double wt = cu_corner(v, m, &off);
            atomicAdd(&dx[off], (float)(wt * dy[e]));
        }
    }
}

static int64_t plan_out(const cu_resize_plan *p) {
    int64_t t = 1;
    for (int a = 0; a < p->rank; a++) t *= p->out[a];
    return t;
}

static int64_t plan_in(const cu_resize_plan *p) {
    int64_t t = 1;
    for (int a = 0; a < p->rank; a++) t *= p->in[a];
    return t;
}

extern "C" cudaError_t cu_resize(const cu_resize_plan *p, const float *x, float *y, cudaStream_t st) {
    int64_t total = plan_out(p);
    if (total == 0) return cudaSuccess;
    k_resize<<<cu_blocks(total), CU_THREADS, 0, st>>>(*p, total, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_resize_grad(const cu_resize_plan *p, const float *dy, float *dx, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(dx, 0, (size_t)plan_in(p) * sizeof(float), st);
    int64_t total = plan_out(p);
    if (e || total == 0) return e;
    k_resize_grad<<<cu_blocks(total), CU_THREADS, 0, st>>>(*p, total, dy, dx);
    return cudaGetLastError();
}
