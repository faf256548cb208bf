#!/usr/bin/env bash
# The torch 2.x fixture kit swept (tests/data/torch2, made by
# tools/scripts/export_torch2_models.py): every model, every export (eval and train mode,
# optimize off and on), trained 3 steps as torch trained it.
#  - an export trains to torch's losses (within float32 noise: 5e-6 of the loss, at
#    least 5e-6), or exits 2 naming the fix (optimize=False); never exit 0 with a
#    non-finite or a wrong loss, never anything else;
#  - every optimize=False export trains (exit 0);
#  - the first step's gradients are torch's (tests/torch2_grads.py: one SGD step of lr 1
#    saved, w0 - w1 against torch's gradient norms per parameter, within 1e-4);
#  - the weights `train --save` writes give, by `eval`, torch's logits after its steps
#    (logits_after.bin, torch in eval() mode: BatchNorm reads the carried statistics):
#    checked by tests/torch2_logits.py where Python has numpy and onnx, skipped otherwise;
#  - the fused step (attention, SiLU, SwiGLU and GELU into their products, LayerNorm) trains
#    to the unfused step's losses (--no-fuse --attention plain) within 1e-5 of the loss;
#  - the plan run in one arena trains to the naive executor's weights bit for bit (fp32
#    and bf16, 3 AdamW steps, `onnx-vplan compare --tolerance 0`).
# usage: torch2_kit.sh ONNX_VPLAN SOURCE_DIR [PYTHON3]
set -u
tool=$1
src=$2
py=${3:-/usr/bin/python3}
kit=$src/tests/data/torch2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() {
    fail=$((fail + 1))
    echo "FAIL: $*"
}
have_py=0
"$py" -c 'import numpy, onnx' 2>/dev/null && have_py=1
((have_py)) || echo "note: $py without numpy and onnx: the logits after --save are not compared"

models=0
for dir in "$kit"/*/; do
    name=$(basename "$dir")
    [[ -f $dir/torch.json ]] || continue
    models=$((models + 1))
    # torch's losses, one per line
    want=$(sed -n '/"losses"/,/]/p' "$dir/torch.json" | grep -o '[-0-9][0-9.e+-]*' | tr '\n' ' ')
    for f in "$dir"/*.onnx; do
        file=$name/$(basename "$f")
        out=$("$tool" train "$f" --loss ce:logits --optimizer momentum --lr 0.01 --steps 3 --data "$dir" \
            --save "$tmp/$name.onnx" 2>&1)
        rc=$?
        got=$(sed -n 's/^step [0-9]*  loss \([^ ]*\).*/\1/p' <<<"$out" | tr '\n' ' ')
        case $rc in
        0)
            if awk -v w="$want" -v g="$got" 'BEGIN { n = split(w, a, " "); m = split(g, b, " "); if (n != 3 || m != 3) exit 1;
                    for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; t = 5e-6 * (a[i] < 0 ? -a[i] : a[i]);
                        if (t < 5e-6) t = 5e-6; if (!(d <= t)) exit 1 } }'; then
                ok
            else
                bad "$file: exit 0 with losses '$got', torch's '$want'"
                continue
            fi
            ;;
        2)
            if [[ $file == *opt0.onnx ]]; then
                bad "$file: an optimize=False export refused: $(grep onnx-vplan: <<<"$out" | head -1)"
            elif grep -q "optimize=False" <<<"$out"; then
                ok
            else
                bad "$file: exit 2 without naming the fix: $(grep onnx-vplan: <<<"$out" | head -1)"
            fi
            continue
            ;;
        *)
            bad "$file: exit $rc: $(tail -2 <<<"$out")"
            continue
            ;;
        esac
        # fused (attention, SiLU, SwiGLU and GELU into their products, LayerNorm) = unfused
        # within 1e-5 of the loss, on each model's plain eval export
        if [[ $file == */eval_opt0.onnx ]]; then
            plain=$("$tool" train "$f" --loss ce:logits --optimizer momentum --lr 0.01 --steps 3 --data "$dir" \
                --no-fuse --attention plain 2>&1 | sed -n 's/^step [0-9]*  loss \([^ ]*\).*/\1/p' | tr '\n' ' ')
            if awk -v p="$plain" -v g="$got" 'BEGIN { n = split(p, a, " "); m = split(g, b, " "); if (n != 3 || m != 3) exit 1;
                    for (i = 1; i <= n; i++) { d = a[i] - b[i]; if (d < 0) d = -d; if (!(d <= 1e-5 * (a[i] < 0 ? -a[i] : a[i]))) exit 1 } }'; then
                ok
            else
                bad "$file: fused losses '$got', unfused '$plain'"
            fi
        fi
        # planned = naive, bit for bit: the weights after 3 AdamW steps of the plan run in
        # one arena (`run`) and of the naive executor (`train`), fp32 and bf16
        if [[ $file == */eval_opt0.onnx ]]; then
            for prec in fp32 bf16; do
                a=(--loss ce:logits --optimizer adamw --precision $prec)
                if ! "$tool" train "$f" "${a[@]}" --steps 3 --data "$dir" --save "$tmp/naive.onnx" >"$tmp/pn.log" 2>&1 ||
                    ! "$tool" plan "$f" "${a[@]}" -o "$tmp/pn.vplan" >>"$tmp/pn.log" 2>&1 ||
                    ! "$tool" run "$tmp/pn.vplan" --steps 3 --data "$dir" --save "$tmp/planned.onnx" >>"$tmp/pn.log" 2>&1; then
                    bad "$file $prec: planned against naive: $(tail -1 "$tmp/pn.log")"
                elif msg=$("$tool" compare "$tmp/naive.onnx" "$tmp/planned.onnx" --tolerance 0 2>&1); then
                    ok
                else
                    bad "$file $prec: planned weights differ from naive: $msg"
                fi
            done
        fi
        # the first step's gradients: one SGD step of lr 1 leaves w - g
        if ((have_py)); then
            if ! "$tool" train "$f" --loss ce:logits --optimizer sgd --lr 1 --steps 1 --data "$dir" --save "$tmp/g.onnx" \
                >"$tmp/g.log" 2>&1; then
                bad "$file: one SGD step: $(tail -1 "$tmp/g.log")"
            elif msg=$("$py" "$src/tests/torch2_grads.py" "$f" "$tmp/g.onnx" "$dir/torch.json" 2>&1); then
                ok
            else
                bad "$file: first-step gradients: $msg"
            fi
        fi
        # the saved weights reproduce torch's logits after its steps
        rm -rf "$tmp/out"
        if ! "$tool" eval "$tmp/$name.onnx" --data "$dir" --output-dir "$tmp/out" >"$tmp/eval.log" 2>&1; then
            bad "$file: eval of the saved model failed: $(tail -1 "$tmp/eval.log")"
        elif ((have_py)); then
            if msg=$("$py" "$src/tests/torch2_logits.py" "$tmp/out/logits.pb" "$dir/logits_after.bin" 2>&1); then
                ok
            else
                bad "$file: train --save then eval: $msg"
            fi
        fi
    done
done
((models >= 10)) || bad "the kit holds $models models (want at least 10): run tools/scripts/export_torch2_models.py"
echo "torch2_kit: $models models, $pass passed, $fail failed"
((fail == 0))
