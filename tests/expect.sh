# Sourced by the CLI test scripts: `expect CODE PATTERN -- command...` runs the command
# and passes when it exits with CODE and its output (stdout and stderr) matches
# PATTERN (its output stays in $expect_out for further checks); `expect_summary` prints
# the closing line and sets the script's status.
pass=0
fail=0
expect_out=

expect() {
    local code=$1 pattern=$2
    shift 3
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    expect_out=$out
    if [[ $rc -eq $code ]] && grep -q -- "$pattern" <<<"$out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $* -> exit $rc (want $code), output: ${out:0:800} (want /$pattern/)"
    fi
}

expect_summary() {
    echo "$pass passed, $fail failed"
    [[ $fail -eq 0 ]]
}
