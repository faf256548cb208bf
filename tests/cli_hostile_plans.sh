#!/usr/bin/env bash
# Plans edited by hand and re-checksummed, one per hostile class (tests/test_fuzz_plan.c
# writes them from the bundled models' plans): the checksum is valid, so only the
# verifier stands between them and execution.  `verify` must call each unsound, and
# `run`, `codegen` and `export` must refuse it with the verifier's message (exit 2),
# never execute it, crash or write anything.
set -u
tool=$1
fuzz=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

mkdir "$tmp/plans"
expect 0 "0 failed" -- "$fuzz" 0 "$tmp/plans"
printf 'not weights' >"$tmp/weights.bin"
for class in offset_at_arena offset_huge offset_negative arena_tiny buffer_grown overlap steps_swapped step_dropped \
    step_input loss_at_input no_steps dtype dims tp_slice; do
    plan=$tmp/plans/$class.vplan
    [[ -f $plan ]] || { fail=$((fail + 1)); echo "FAIL: no $class mutant"; continue; }
    expect 2 "$plan" -- "$tool" verify "$plan"
    expect 2 "$plan: " -- "$tool" run "$plan" --steps 1
    expect 2 "$plan: " -- "$tool" codegen "$plan" -o "$tmp/gen_$class"
    [[ ! -e $tmp/gen_$class ]] || { fail=$((fail + 1)); echo "FAIL: codegen left $tmp/gen_$class for $class"; }
    expect 2 "$plan: " -- "$tool" export "$plan" --weights "$tmp/weights.bin" -o "$tmp/out_$class.onnx"
    [[ ! -e $tmp/out_$class.onnx ]] || { fail=$((fail + 1)); echo "FAIL: export wrote $tmp/out_$class.onnx for $class"; }
done
# the classes the reader lets through reach the verifier, and its message names the cause
expect 2 "unsound plan (refused.*does not fit the [0-9]*-byte arena" -- "$tool" run "$tmp/plans/offset_huge.vplan"
expect 2 "unsound plan (refused.*does not fit the 64-byte arena\|does not fit the [0-9]*-byte arena" -- "$tool" run "$tmp/plans/arena_tiny.vplan"
expect 2 "unsound plan (refused.*the loss buffer 'x' is an input" -- "$tool" codegen "$tmp/plans/loss_at_input.vplan" -o "$tmp/gen"
expect 2 "unsound plan (refused.*the plan has no steps" -- "$tool" run "$tmp/plans/no_steps.vplan"
expect 2 "unsound plan (refused.*reads .* before any step writes it" -- "$tool" run "$tmp/plans/steps_swapped.vplan"
expect 2 "tensor-parallel slice (axis [0-9]*, [0-9]* blocks) does not fit its shape" -- "$tool" run "$tmp/plans/tp_slice.vplan"
# what stays sound after an edit (a stored lifetime the verifier re-derives anyway; the
# version set back to 1 on a plan without a host block) still runs
expect 0 "sound: " -- "$tool" verify "$tmp/plans/version_1.vplan"
expect 0 "step 1  loss" -- "$tool" run "$tmp/plans/version_1.vplan" --steps 1
# codegen's default prefix from a plan whose name starts with a digit: an identifier
# ("m9lives"), once garbage names from a write past the prefix's buffer
cp "$tmp/plans/version_1.vplan" "$tmp/9lives.vplan"
expect 0 "" -- "$tool" codegen "$tmp/9lives.vplan" -o "$tmp/gen9"
for f in m9lives_step.c m9lives_step.h m9lives.weights; do
    [[ -f $tmp/gen9/$f ]] || { fail=$((fail + 1)); echo "FAIL: codegen of 9lives.vplan wrote no $f: $(ls "$tmp/gen9" 2>&1)"; }
done
expect 0 "m9lives_step(" -- grep -h "m9lives_step(" "$tmp/gen9/m9lives_step.h"
expect_summary
