/* CUDA ops of the linear-algebra family: MatMul, FusedMatMul and Gemm through cuBLAS (row-major
 * products seen as column-major transposes), convolution and its gradient (cuDNN where the
 * backend has it, cuda_cudnn.c; our kernels, cu_conv.cu, otherwise and as the fallback), and
 * the global pools (cu_reduce.cu); windowed pooling is cuda_ops_pool.c's. */
#include <string.h>

#include "cu_kernels.h"
#include "cuda_internal.h"

/* C[m, n] (row-major) = alpha op(A) op(B) + beta C: cuBLAS sees the transposes.  float32
 * through cublasSgemm (TF32 where the handle allows it); float16 and bfloat16 through
 * cublasGemmEx accumulating in float32, as the CPU widens them (strides in elements). */
static vp_status gemm_rm(cuda_ctx *c, const vp_node *n, vp_dtype dt, int ta, int tb, int64_t m, int64_t nn, int64_t k,
                         float alpha, const void *a, int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb,
                         float beta, void *y, int64_t sy, int64_t batch, vp_error *err) {
    if (m > 2147483647 || nn > 2147483647 || k > 2147483647 || lda > 2147483647 || ldb > 2147483647)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "a matrix dimension over 2^31");
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (m == 0 || nn == 0 || batch == 0) return VP_OK;
    cublasStatus_t st;
    if (dt == VP_F32 && batch == 1)
        st = cublasSgemm(c->blas, opb, opa, (int)nn, (int)m, (int)k, &alpha, b, (int)ldb, a, (int)lda, &beta, y, (int)nn);
    else if (dt == VP_F32)
        st = cublasSgemmStridedBatched(c->blas, opb, opa, (int)nn, (int)m, (int)k, &alpha, b, (int)ldb, sb, a, (int)lda,
                                       sa, &beta, y, (int)nn, sy, (int)batch);
    else {
        cudaDataType t = dt == VP_F16 ? CUDA_R_16F : CUDA_R_16BF;
        if (batch == 1)
            st = cublasGemmEx(c->blas, opb, opa, (int)nn, (int)m, (int)k, &alpha, b, t, (int)ldb, a, t, (int)lda, &beta, y,
                              t, (int)nn, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        else
            st = cublasGemmStridedBatchedEx(c->blas, opb, opa, (int)nn, (int)m, (int)k, &alpha, b, t, (int)ldb, sb, a, t,
                                            (int)lda, sa, &beta, y, t, (int)nn, sy, (int)batch, CUBLAS_COMPUTE_32F,
                                            CUBLAS_GEMM_DEFAULT);
    }
    return vp_cuda_blas_check(st, n, dt == VP_F32 ? "cublasSgemm" : "cublasGemmEx", err);
}

/* float32, float16 or bfloat16 operands, all of one type. */
static vp_status need_gemm_types(const vp_node *n, const vp_tensor *a, const vp_tensor *b, const vp_tensor *cc,
                                 vp_error *err) {
    vp_status s = vp_cuda_need_float(n, a, 0, err);
    if (!s) s = vp_cuda_need_float(n, b, 1, err);
    if (!s && cc) s = vp_cuda_need_float(n, cc, 2, err);
    if (!s && (b->dtype != a->dtype || (cc && cc->dtype != a->dtype)))
        s = vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "operands of mixed dtypes");
    return s;
}

static vp_status op_gemm(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *a = in[0], *b = in[1], *cc = opt_in(n, in, 2);
    vp_tensor *y = out[0];
    vp_status s = need_gemm_types(n, a, b, cc, err);
    if (s) return s;
    int ta = vp_attr_int(n, "transA", 0) != 0, tb = vp_attr_int(n, "transB", 0) != 0;
    float alpha = vp_attr_float(n, "alpha", 1.0f), beta = vp_attr_float(n, "beta", 1.0f);
    int64_t m = y->dims[0], nn = y->dims[1], k = ta ? a->dims[0] : a->dims[1];
    if (cc && beta != 0) {
        int64_t src[VP_MAX_RANK], ys[VP_MAX_RANK];
        broadcast_strides(cc, 2, y->dims, src);
        contiguous_strides(2, y->dims, ys);
        s = LAUNCH(cu_copy_nd((int)vp_dtype_size(y->dtype), 2, y->dims, cc->data, src, y->data, ys, c->stream));
        if (s) return s;
    } else {
        beta = 0;
    }
    return gemm_rm(c, n, a->dtype, ta, tb, m, nn, k, alpha, a->data, ta ? m : k, 0, b->data, tb ? k : nn, 0, beta, y->data, 0,
                   1, err);
}

/* Offset, in matrices, of batch index i of an operand with batch dims bd (rank br)
 * broadcast to the output batch dims od (rank r). */
static int64_t batch_offset(int r, const int64_t *od, int br, const int64_t *bd, int64_t i) {
    int64_t off = 0, stride = 1;
    for (int d = r - 1; d >= 0; d--) {
        int64_t k = i % od[d];
        i /= od[d];
        int j = d - (r - br);
        if (j >= 0) {
            if (bd[j] != 1) off += k * stride;
            stride *= bd[j];
        }
    }
    return off;
}

/* y = alpha op(A) op(B), op a swap of the last two axes where ta or tb says (MatMul:
 * none; FusedMatMul: its attributes). */
static vp_status matmul_run(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out, int ta,
                            int tb, float alpha, vp_error *err) {
    const vp_tensor *a = in[0], *b = in[1];
    vp_tensor *y = out[0];
    vp_status s = need_gemm_types(n, a, b, NULL, err);
    if (s) return s;
    /* a transposed operand has rank 2 or more (FusedMatMul's shape function checks) */
    int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - (ta ? 1 : 2)];
    int64_t k = a->rank == 1 || !ta ? a->dims[a->rank - 1] : a->dims[a->rank - 2];
    int64_t nn = b->rank == 1 ? 1 : b->dims[b->rank - (tb ? 2 : 1)];
    int64_t lda = ta ? m : k, ldb = tb ? k : nn;
    int abr = a->rank > 2 ? a->rank - 2 : 0, bbr = b->rank > 2 ? b->rank - 2 : 0;
    int r = abr > bbr ? abr : bbr;
    int64_t od[VP_MAX_RANK], batch = 1;
    for (int d = 0; d < r; d++) {
        int ja = d - (r - abr), jb = d - (r - bbr);
        int64_t da = ja >= 0 ? a->dims[ja] : 1, db = jb >= 0 ? b->dims[jb] : 1;
        od[d] = da == 1 ? db : da;
        batch *= od[d];
    }
    int64_t na = 1, nb = 1;
    for (int d = 0; d < abr; d++) na *= a->dims[d];
    for (int d = 0; d < bbr; d++) nb *= b->dims[d];
    /* uniform strides: an operand is either fully batched like the output or shared */
    int ua = na == 1 || na == batch, ub = nb == 1 || nb == batch;
    int same_a = 1, same_b = 1;
    for (int d = 0; d < abr && na == batch; d++) same_a &= a->dims[d] == od[d + (r - abr)];
    for (int d = 0; d < bbr && nb == batch; d++) same_b &= b->dims[d] == od[d + (r - bbr)];
    const char *pa = a->data, *pb = b->data;
    char *py = y->data;
    vp_dtype dt = a->dtype;
    int64_t es = (int64_t)vp_dtype_size(dt);
    if (ua && ub && same_a && same_b) {
        /* a shared A with one row per batch folds into one tall product */
        if (na == 1 && nb == 1)
            return gemm_rm(c, n, dt, ta, tb, m, nn, k, alpha, pa, lda, 0, pb, ldb, 0, 0.0f, py, 0, 1, err);
        if (!ta && nb == 1 && na == batch)
            return gemm_rm(c, n, dt, 0, tb, m * batch, nn, k, alpha, pa, lda, 0, pb, ldb, 0, 0.0f, py, 0, 1, err);
        return gemm_rm(c, n, dt, ta, tb, m, nn, k, alpha, pa, lda, na == 1 ? 0 : m * k, pb, ldb, nb == 1 ? 0 : k * nn,
                       0.0f, py, m * nn, batch, err);
    }
    for (int64_t i = 0; i < batch && !s; i++) {
        int64_t oa = batch_offset(r, od, abr, a->dims, i), ob = batch_offset(r, od, bbr, b->dims, i);
        s = gemm_rm(c, n, dt, ta, tb, m, nn, k, alpha, pa + oa * m * k * es, lda, 0, pb + ob * k * nn * es, ldb, 0, 0.0f,
                    py + i * m * nn * es, 0, 1, err);
    }
    return s;
}

static vp_status op_matmul(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                           vp_error *err) {
    return matmul_run(c, n, in, out, 0, 0, 1.0f, err);
}

static vp_status op_fused_matmul(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                 vp_error *err) {
    return matmul_run(c, n, in, out, vp_attr_int(n, "transA", 0) != 0, vp_attr_int(n, "transB", 0) != 0,
                      vp_attr_float(n, "alpha", 1.0f), err);
}

/* Our kernels' geometry (3-D; 2-D as depth 1, 1-D as height 1 too) from the shape. */
static void conv_geom(const vp_conv_shape *sh, cu_conv_geom *g) {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, st[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
    for (int a = 0; a < sh->spatial; a++) {
        int e = a + 3 - sh->spatial; /* the last axes: width, then height, then depth */
        in[e] = sh->in[a], out[e] = sh->out[a], k[e] = sh->k[a];
        st[e] = sh->stride[a], pad[e] = sh->pad[a], dil[e] = sh->dil[a];
    }
    *g = (cu_conv_geom){.n = sh->n, .c = sh->c, .d = in[0], .h = in[1], .w = in[2], .m = sh->m, .od = out[0], .oh = out[1],
                        .ow = out[2], .kd = k[0], .kh = k[1], .kw = k[2], .sd = st[0], .sh = st[1], .sw = st[2],
                        .pd = pad[0], .ph = pad[1], .pw = pad[2], .dd = dil[0], .dh = dil[1], .dw = dil[2], .group = sh->group};
}

/* cuDNN where the backend has it and it takes the convolution (cuda_cudnn.c), else ours
 * (cu_conv.cu, 1-D to 3-D). */
static vp_status op_conv(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                         vp_error *err) {
    const vp_tensor *x = in[0], *w = in[1], *b = opt_in(n, in, 2);
    vp_status s = need_gemm_types(n, x, w, b, err);
    vp_conv_shape sh;
    if (!s) s = vp_conv_shape_of(n, x, w, out[0], &sh, err);
    if (s) return s;
    int ran = 0;
    s = vp_cuda_cudnn_conv(c, n, &sh, x, w, b, out[0], &ran, err);
    if (s || ran) return s;
    cu_conv_geom g;
    conv_geom(&sh, &g);
    return LAUNCH(cu_conv2d((int)x->dtype, &g, x->data, w->data, b ? b->data : NULL, out[0]->data, c->stream));
}

/* ConvTranspose is the data gradient of the Conv from Y's shape to X's with the same
 * weight ([C_in, C_out / group, k...] is that Conv's [M, C / group, k...]) and window:
 * cuDNN's backward data or ours, then the bias per output channel.  Explicit pads only
 * (auto_pad NOTSET or VALID, no output_shape); output_padding is in Y's extent already. */
static vp_status op_conv_transpose(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                   vp_error *err) {
    const vp_tensor *x = in[0], *w = in[1], *b = opt_in(n, in, 2);
    vp_tensor *y = out[0];
    const char *ap = vp_attr_string(n, "auto_pad", "NOTSET");
    const int64_t *os;
    if ((strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && ap[0]) || vp_attr_ints(n, "output_shape", &os) >= 0)
        return vp_node_fail(err, VP_ERR_UNSUPPORTED, n, "auto_pad %s or output_shape: the CUDA backend runs "
                            "ConvTranspose with explicit pads only", ap);
    vp_status s = need_gemm_types(n, x, w, b, err);
    vp_conv_shape sh;
    if (!s) s = vp_conv_shape_of(n, y, w, x, &sh, err);
    for (int d = 0; !s && d < sh.spatial; d++) {
        int64_t ext = (sh.k[d] - 1) * sh.dil[d] + 1, back = (sh.in[d] + sh.pad[d] + sh.pad_end[d] - ext) / sh.stride[d] + 1;
        if (sh.in[d] + sh.pad[d] + sh.pad_end[d] < ext || back != sh.out[d])
            s = vp_node_fail(err, VP_ERR_INVALID, n, "spatial axis %d: output extent %lld is not one its window maps onto "
                             "the input's %lld", d, (long long)sh.in[d], (long long)sh.out[d]);
    }
    if (s) return s;
    int ran = 0;
    s = vp_cuda_cudnn_conv_grad(c, n, &sh, x, y, w, y, NULL, NULL, &ran, err);
    if (!s && !ran) {
        cu_conv_geom g;
        conv_geom(&sh, &g);
        s = LAUNCH(cu_conv2d_grad((int)x->dtype, &g, x->data, NULL, w->data, y->data, NULL, NULL, c->stream));
    }
    if (!s && b) {
        int64_t plane = 1;
        for (int d = 0; d < sh.spatial; d++) plane *= sh.in[d];
        s = LAUNCH(cu_conv_bias((int)y->dtype, y->dims[0], y->dims[1], plane, b->data, y->data, c->stream));
    }
    return s;
}

static vp_status op_conv_grad(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                              vp_error *err) {
    const vp_tensor *dy = in[0], *x = in[1], *w = in[2];
    vp_status s = need_gemm_types(n, dy, x, w, err);
    vp_conv_shape sh;
    if (!s) s = vp_conv_shape_of(n, x, w, dy, &sh, err);
    if (s) return s;
    vp_tensor *dx = opt_out(n, out, 0), *dw = opt_out(n, out, 1), *db = opt_out(n, out, 2);
    int ran = 0;
    s = vp_cuda_cudnn_conv_grad(c, n, &sh, dy, x, w, dx, dw, db, &ran, err);
    if (s || ran) return s;
    cu_conv_geom g;
    conv_geom(&sh, &g);
    return LAUNCH(cu_conv2d_grad((int)x->dtype, &g, dy->data, x->data, w->data, dx ? dx->data : NULL,
                                 dw ? dw->data : NULL, db ? db->data : NULL, c->stream));
}

static vp_status op_global_pool(cuda_ctx *c, const vp_node *n, const vp_tensor *const *in, vp_tensor *const *out,
                                vp_error *err) {
    const vp_tensor *x = in[0];
    vp_status s = vp_cuda_need_f32(n, x, 0, err);
    if (s) return s;
    int64_t planes = x->rank >= 2 ? x->dims[0] * x->dims[1] : 1, len = planes ? vp_tensor_numel(x) / planes : 0;
    return LAUNCH(cu_global_pool(!strcmp(n->op_type, "GlobalAveragePool"), planes, len, x->data, out[0]->data, c->stream));
}

const cuda_op vp_cuda_ops_linalg[] = {
    {"MatMul", "", op_matmul}, {"Gemm", "", op_gemm}, {"Conv", "", op_conv}, {"ConvTranspose", "", op_conv_transpose},
    {"FusedMatMul", "com.microsoft", op_fused_matmul},
    {"GlobalAveragePool", "", op_global_pool}, {"GlobalMaxPool", "", op_global_pool},
    {"ConvGrad", "com.microsoft", op_conv_grad},
    {NULL, NULL, NULL},
};

vp_status vp_cuda_gemm_rm(cuda_ctx *c, const vp_node *n, vp_dtype dt, int ta, int tb, int64_t m, int64_t nn, int64_t k,
                          float alpha, const void *a, int64_t lda, const void *b, int64_t ldb, void *y, vp_error *err) {
    return gemm_rm(c, n, dt, ta, tb, m, nn, k, alpha, a, lda, 0, b, ldb, 0, 0.0f, y, 0, 1, err);
}
