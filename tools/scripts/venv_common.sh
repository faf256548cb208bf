# Sourced by torch2_venv.sh and ort_venv.sh: make_venv DIR makes a Python venv at DIR
# (installing Debian's python3-venv when the interpreter lacks it) with a current pip.
make_venv() {
    local dir=$1
    if [[ ! -x $dir/bin/python ]]; then
        python3 -m venv "$dir" 2>/dev/null || {
            local sudo=""
            [[ $(id -u) -eq 0 ]] || sudo="sudo"
            $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-venv
            python3 -m venv "$dir"
        }
    fi
    "$dir/bin/python" -m pip install -q --upgrade pip
}
