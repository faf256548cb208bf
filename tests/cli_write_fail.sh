#!/usr/bin/env bash
# Every file a command writes appears whole or not at all (planner/ir/atomic_file.c): a
# write that fails (here a file-size limit of 0, so write() says EFBIG) exits non-zero
# naming the path and the errno text, leaves the previous output byte-identical and no
# temporary beside it; codegen's folder is replaced whole or left as it was, and a
# refused codegen creates nothing; concurrent writers of one plan leave a sound plan.
set -u
tool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") # absolute: one check runs it from another folder
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/expect.sh"

mlp=$src/models/mlp/model.onnx
opts=(--dim batch=4 --loss ce:logits)

# limited CMD...: CMD under a file-size limit of 0, SIGXFSZ ignored so write() fails
limited() { bash -c 'trap "" XFSZ; ulimit -f 0; exec "$@"' limited "$@"; }

failed() {
    fail=$((fail + 1))
    echo "FAIL: $*"
}

# the hidden temporaries ".<name>.XXXXXX" left in a folder
temporaries() { find "$1" -maxdepth 1 -name ".$2.*" | wc -l; }

# write_fails TARGET -- CMD...: TARGET holds a good output; CMD rewrites it under the limit
# and must fail naming TARGET and EFBIG, leaving TARGET as it was and no temporary
write_fails() {
    local target=$1
    shift 2
    local before out rc
    before=$(sha256sum <"$target")
    out=$(limited "$@" 2>&1)
    rc=$?
    if [[ $rc -eq 0 ]]; then failed "$* -> exit 0 under a file-size limit"; return; fi
    if grep -q "Sanitizer" <<<"$out"; then failed "$* -> ${out:0:2000}"; return; fi
    if ! grep -qF -- "$target" <<<"$out" || ! grep -qF "File too large" <<<"$out"; then
        failed "$* -> message without '$target' and 'File too large': ${out:0:600}"
        return
    fi
    [[ $(sha256sum <"$target") == "$before" ]] || { failed "$* changed $target"; return; }
    local n
    n=$(temporaries "$(dirname "$target")" "$(basename "$target")")
    [[ $n -eq 0 ]] || { failed "$* left $n temporaries beside $target"; return; }
    pass=$((pass + 1))
}

# plan: -o, --json, --dot, --timeline
expect 0 "arena" -- "$tool" plan "$mlp" "${opts[@]}" -o "$tmp/p.vplan" --json "$tmp/p.json" --dot "$tmp/p.dot" --timeline "$tmp/p.svg"
write_fails "$tmp/p.vplan" -- "$tool" plan "$mlp" "${opts[@]}" --optimizer adam -o "$tmp/p.vplan"
write_fails "$tmp/p.json" -- "$tool" plan "$mlp" "${opts[@]}" --json "$tmp/p.json"
write_fails "$tmp/p.dot" -- "$tool" plan "$mlp" "${opts[@]}" --dot "$tmp/p.dot"
write_fails "$tmp/p.svg" -- "$tool" plan "$mlp" "${opts[@]}" --timeline "$tmp/p.svg"
expect 0 "sound: .* no overlap" -- "$tool" verify "$tmp/p.vplan"
# a new file gets fopen's permissions (0666 & ~umask), not mkstemp's 0600
touch "$tmp/ref_mode"
[[ $(stat -c %a "$tmp/p.vplan") == $(stat -c %a "$tmp/ref_mode") ]] && pass=$((pass + 1)) ||
    failed "p.vplan has mode $(stat -c %a "$tmp/p.vplan"), fopen gives $(stat -c %a "$tmp/ref_mode")"

# train: --save, --json
expect 0 "saved trained weights" -- "$tool" train "$mlp" "${opts[@]}" --steps 1 --save "$tmp/t.onnx" --json "$tmp/t.json"
write_fails "$tmp/t.onnx" -- "$tool" train "$mlp" "${opts[@]}" --steps 2 --save "$tmp/t.onnx"
write_fails "$tmp/t.json" -- "$tool" train "$mlp" "${opts[@]}" --steps 2 --json "$tmp/t.json"

# train-graph -o
expect 0 "" -- "$tool" train-graph "$mlp" "${opts[@]}" --optimizer sgd -o "$tmp/tg.onnx"
write_fails "$tmp/tg.onnx" -- "$tool" train-graph "$mlp" "${opts[@]}" --optimizer adam -o "$tmp/tg.onnx"

# arena -o
printf 'id,lower,upper,size\n0,0,2,64\n1,1,3,64\n2,2,4,128\n' >"$tmp/a.csv"
expect 0 "lower bound: 192 bytes" -- "$tool" arena "$tmp/a.csv" -o "$tmp/a_out.csv"
write_fails "$tmp/a_out.csv" -- "$tool" arena "$tmp/a.csv" -o "$tmp/a_out.csv"

# run: --save-weights, --save, --save-inputs, --json
mkdir -p "$tmp/in"
expect 0 "" -- "$tool" run "$tmp/p.vplan" --steps 1 --save-weights "$tmp/r.weights" --save "$tmp/r.onnx" --save-inputs "$tmp/in" \
    --json "$tmp/r.json"
write_fails "$tmp/r.weights" -- "$tool" run "$tmp/p.vplan" --steps 2 --save-weights "$tmp/r.weights"
write_fails "$tmp/r.onnx" -- "$tool" run "$tmp/p.vplan" --steps 2 --save "$tmp/r.onnx"
write_fails "$tmp/r.json" -- "$tool" run "$tmp/p.vplan" --steps 2 --json "$tmp/r.json"
write_fails "$tmp/in/x.bin" -- "$tool" run "$tmp/p.vplan" --steps 1 --seed 7 --save-inputs "$tmp/in"

# export -o
expect 0 "" -- "$tool" export "$tmp/p.vplan" --weights "$tmp/r.weights" -o "$tmp/e.onnx"
write_fails "$tmp/e.onnx" -- "$tool" export "$tmp/p.vplan" --weights "$tmp/r.weights" -o "$tmp/e.onnx"

# eval --output-dir (a TensorProto per output)
expect 0 "" -- "$tool" eval "$mlp" --dim batch=4 --output-dir "$tmp/ev"
write_fails "$tmp/ev/logits.pb" -- "$tool" eval "$mlp" --dim batch=4 --seed 3 --output-dir "$tmp/ev"

# codegen -o: the previous folder unchanged, no temporary folder left
expect 0 "wrote .*p_step.c" -- "$tool" codegen "$tmp/p.vplan" -o "$tmp/gen"
before=$(cd "$tmp/gen" && ls -A && sha256sum ./*)
out=$(limited "$tool" codegen "$tmp/p.vplan" -o "$tmp/gen" --prefix other 2>&1)
rc=$?
if [[ $rc -eq 0 ]] || grep -q "Sanitizer" <<<"$out" || ! grep -qF "$tmp/gen/" <<<"$out" || ! grep -qF "File too large" <<<"$out"; then
    failed "codegen under a file-size limit -> exit $rc: ${out:0:600}"
elif [[ $(cd "$tmp/gen" && ls -A && sha256sum ./*) != "$before" ]]; then
    failed "a failed codegen changed $tmp/gen"
elif [[ $(temporaries "$tmp" gen) -ne 0 ]]; then
    failed "a failed codegen left a temporary folder beside $tmp/gen"
else
    pass=$((pass + 1))
fi
# the same output again replaces the folder whole, with the same bytes
expect 0 "wrote" -- "$tool" codegen "$tmp/p.vplan" -o "$tmp/gen"
[[ $(cd "$tmp/gen" && ls -A && sha256sum ./*) == "$before" ]] && pass=$((pass + 1)) || failed "codegen again changed $tmp/gen"
# a folder holding other files keeps them and takes the new files
mkdir "$tmp/mine" && echo 'int main(void) { return 0; }' >"$tmp/mine/main.c"
expect 0 "wrote" -- "$tool" codegen "$tmp/p.vplan" -o "$tmp/mine"
[[ -f $tmp/mine/main.c && -f $tmp/mine/p_step.c && -f $tmp/mine/p.weights ]] && pass=$((pass + 1)) ||
    failed "codegen into a folder with other files: $(ls -A "$tmp/mine")"
# the working folder ("-o .", as vplan.mk does) is never renamed: the files move into it
mkdir "$tmp/here" && echo keep >"$tmp/here/Makefile"
expect 0 "wrote" -- bash -c 'cd "$1" && exec "$2" codegen ../p.vplan -o .' cd "$tmp/here" "$tool"
[[ -f $tmp/here/Makefile && -f $tmp/here/p_step.h && -z $(find "$tmp/here" -name '.atomic.*') ]] && pass=$((pass + 1)) ||
    failed "codegen -o . left: $(ls -A "$tmp/here")"
# a refused codegen (a plan codegen cannot write, a file that is no plan) creates no folder
expect 0 "host: .* beside the arena" -- "$tool" plan "$mlp" "${opts[@]}" --optimizer adamw --offload -o "$tmp/off.vplan"
expect 2 "codegen writes steps on one arena" -- "$tool" codegen "$tmp/off.vplan" -o "$tmp/off_c"
expect 2 "" -- "$tool" codegen "$mlp" -o "$tmp/not_c"
[[ ! -e $tmp/off_c && ! -e $tmp/not_c && $(temporaries "$tmp" off_c) -eq 0 && $(temporaries "$tmp" not_c) -eq 0 ]] &&
    pass=$((pass + 1)) || failed "a refused codegen left a folder: $(ls -A "$tmp")"

# concurrent writers of one plan leave one whole plan, which verify accepts
for round in 1 2 3; do
    pids=()
    for k in 1 2 3 4; do
        "$tool" plan "$mlp" "${opts[@]}" --optimizer adam -o "$tmp/same.vplan" >/dev/null 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || failed "round $round: a concurrent plan -o failed"; done
    expect 0 "sound: .* no overlap" -- "$tool" verify "$tmp/same.vplan"
    [[ $(temporaries "$tmp" same.vplan) -eq 0 ]] || failed "round $round: temporaries left beside same.vplan"
done
expect_summary
