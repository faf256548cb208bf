#!/usr/bin/python3
"""Einsum's outputs computed by PyTorch (torch.einsum), for tests/test_train_ops.c (run as
`test_train_ops --dir tests/data/einsum`): onnx-vplan expands Einsum during inference into
Transpose, Reshape, MatMul, Mul and ReduceSum (planner/ir/einsum_op.c), and each case runs
that expansion on the CPU backend against torch's result.

The equations are those today's exporters write (Funnel's relative attention, a
projection into heads, per-head products) and the rest of the syntax: implicit outputs in
ASCII order, ellipses that broadcast, labels of size 1 that broadcast, diagonals, three
operands, sums, traces, outer products and scalars, in float64, float32 and int64.  Bad
equations must be refused as invalid input, naming the node.

Case folders as make_train_op_fixtures.py writes them (case.txt, in_K.pb, out_K.pb).
usage: /usr/bin/python3 tools/scripts/make_einsum_fixtures.py   (torch 1.13, onnx)
"""
import os
import shutil

import torch

import make_train_op_fixtures as mtf

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "einsum")
torch.manual_seed(1234)

# (name, equation, input shapes); the equation as ONNX writes it (no spaces: case.txt's
# attribute lines split at them; ONNX's own node tests cover the spaces)
CASES = [
    ("funnel_scores", "bind,bjnd->bnij", [(2, 5, 3, 4), (2, 6, 3, 4)]),
    ("funnel_context", "bnij,bjnd->bind", [(2, 3, 5, 6), (2, 6, 3, 4)]),
    ("funnel_position", "td,dnh->tnh", [(7, 8), (8, 2, 4)]),
    ("funnel_relative", "binh,tnh->bnit", [(2, 5, 3, 4), (7, 3, 4)]),
    ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("matmul_transposed_out", "ij,jk->ki", [(3, 4), (4, 5)]),
    ("batch_matmul_swapped", "bjk,bij->bik", [(2, 4, 5), (2, 3, 4)]),
    ("two_contracted", "abcd,cde->abe", [(2, 3, 4, 5), (4, 5, 6)]),
    ("implicit_matmul", "ij,jk", [(3, 4), (4, 5)]),
    ("implicit_ascii_order", "Ba,aC", [(3, 4), (4, 5)]),
    ("implicit_transpose", "ba", [(3, 4)]),
    ("ellipsis_matmul", "...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("ellipsis_broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 5)]),
    ("ellipsis_implicit", "...ij,jk", [(2, 3, 4), (4, 5)]),
    ("ellipsis_summed", "...i->i", [(2, 3, 4)]),
    ("ellipsis_middle", "a...b->b...a", [(2, 3, 4, 5)]),
    ("broadcast_batch_label", "bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
    ("broadcast_contracted_label", "ij,jk->ik", [(3, 1), (4, 5)]),
    ("outer", "i,j->ij", [(3,), (4,)]),
    ("elementwise", "ij,ij->ij", [(3, 4), (3, 4)]),
    ("hadamard_batch_outer", "bi,bj->bij", [(2, 3), (2, 4)]),
    ("inner", "i,i->", [(5,), (5,)]),
    ("sum_all", "ij->", [(3, 4)]),
    ("sum_rows", "ij->j", [(3, 4)]),
    ("trace", "ii->", [(4, 4)]),
    ("diagonal", "ii->i", [(4, 4)]),
    ("batch_diagonal_kept", "bii->bi", [(2, 3, 3)]),
    ("diagonal_product", "iij,jk->ik", [(3, 3, 4), (4, 2)]),
    ("three_operands", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("three_bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("three_shared_batch", "bi,bi,bi->b", [(2, 3), (2, 3), (2, 3)]),
    ("a_only_summed", "ij,k->k", [(3, 4), (5,)]),
    ("scalar_times", ",ij->ij", [(), (3, 4)]),
    ("scalar", "->", [()]),
    ("identity", "ij->ij", [(3, 4)]),
]

# refused: the node named, the reason given, exit status 2 (invalid input)
BAD = [
    ("bad_term_count", "ij,jk->ik", [(3, 4)]),
    ("bad_rank", "ijk->i", [(3, 4)]),
    ("bad_output_label", "ij->k", [(3, 4)]),
    ("bad_output_twice", "ij->ii", [(3, 4)]),
    ("bad_sizes", "ij,jk->ik", [(3, 4), (5, 6)]),
    ("bad_diagonal_sizes", "ii->i", [(3, 4)]),
    ("bad_character", "i1->i", [(3, 4)]),
    ("bad_dots", "..i->i", [(3, 4)]),
    ("bad_two_arrows", "i->i->i", [(3,)]),
]


def inputs(shapes, dtype):
    if dtype == torch.int64:
        return [torch.randint(-4, 5, s) for s in shapes]
    return [torch.randn(s, dtype=dtype) for s in shapes]


def main():
    if os.path.isdir(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    mtf.ROOT = ROOT
    for name, eq, shapes in CASES:
        for dtype, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
            xs = inputs(shapes, dtype)
            mtf.write_case(f"{name}_{tag}", "Einsum", "", xs, [torch.einsum(eq, *xs)], {"equation": eq})
    for name, eq, shapes in CASES[:4] + [c for c in CASES if c[0] in ("trace", "three_operands", "ellipsis_broadcast")]:
        xs = inputs(shapes, torch.int64)
        mtf.write_case(f"{name}_i64", "Einsum", "", xs, [torch.einsum(eq, *xs)], {"equation": eq})
    for name, eq, shapes in BAD:
        xs = inputs(shapes, torch.float32)
        mtf.write_case(name, "Einsum", "", xs, [torch.zeros(1)], {"equation": eq}, expect="invalid")
    print(f"wrote {2 * len(CASES) + 7 + len(BAD)} cases into {os.path.normpath(ROOT)}")


if __name__ == "__main__":
    main()
