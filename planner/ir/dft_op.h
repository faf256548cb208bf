/* ONNX's DFT (opsets 17 and 20; torch.fft's export, FNet's Fourier mixing) expanded during
 * shape inference into products with constant cosine and sine matrices.
 *
 * In: a graph whose node `node` is an ai.onnx DFT: X [..., L, ..., c] inferred (c = 1: a
 * real signal, c = 2: real and imaginary parts), the axis (opset 17's attribute, opset
 * 20's constant input) and the optional dft_length N (a constant) known.
 * Out: the node replaced at its place in the order by the real (and imaginary) part of X
 * (Gather on the last axis), the signal axis moved last (Transpose), cut to the rows that
 * count (Slice: N of them, or N / 2 + 1 of a one-sided spectrum), multiplied by constant
 * [rows, out] matrices (MatMul, Add): the forward transform's cos and sin of 2 pi j k / N
 * (out N, or N / 2 + 1 where onesided), the inverse's scaled by 1 / N (out N), or the
 * inverse of a one-sided spectrum's Hermitian weights (a real output of N), then moved
 * back and stacked into [..., out, ..., 2] (or 1).  Each new node is inferred as it is
 * made; Y keeps its value (its producer changes).
 * Keeps true: Y is what ONNX's DFT computes (numpy's fft, ifft and irfft, zero-padded or
 * cut to N), to float rounding of an O(N) sum per output, so autodiff differentiates it
 * through MatMul and the ops around it.  N^2 work and up to three N x out constants per
 * transform (shared by every DFT of the same length, direction and dtype): a
 * direct transform, meant for the sequence and hidden sizes models mix over.
 * Refused naming the node: an axis or dft_length that is not a constant, the last axis
 * as the signal axis, c other than 1 or 2, a transform length under 1.  On failure the
 * graph is as it was. */
#ifndef VP_DFT_OP_H
#define VP_DFT_OP_H

#include "ir/ir.h"

/* Whether n is an ai.onnx DFT. */
int vp_dft_op_is(const vp_node *n);

/* Expands node `node`; *n_new is the count of nodes now standing where it stood. */
vp_status vp_dft_op_expand(vp_graph *g, int node, int *n_new, vp_error *err);

#endif
