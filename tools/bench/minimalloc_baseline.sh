#!/usr/bin/env bash
# MiniMalloc's own solver (Moffitt, ASPLOS 2023; github.com/google/minimalloc) on the
# instances of `bench_arena --hard`, for the comparison in tools/bench/RESULTS.md.
#
# In:  BUILD (the build folder: its arena_instances/, written by `bench_arena --hard`),
#      a git directory of google/minimalloc ($VP_MINIMALLOC_GIT, default the mirror at
#      /work/.mirror/google+minimalloc/repo; without it the script clones from GitHub),
#      g++ and Debian's abseil (apt-get install libabsl-dev).
# Out: on stdout a markdown table: instance, capacity given, whether MiniMalloc fits it
#      within the time limit (the height of its solution) and its wall seconds.
# MiniMalloc is built in a temporary folder, never in this tree, with its solver and
# options untouched; Debian's abseil (20220623) lacks absl/log, so three small headers
# stand in for it, and one `std::string_view` in its CSV reader becomes absl's.
#
# usage: tools/bench/minimalloc_baseline.sh BUILD [TIMEOUT_S]   (default 5; one core)
set -euo pipefail
build=${1:?usage: minimalloc_baseline.sh BUILD [TIMEOUT_S]}
limit=${2:-5}
inst=$build/arena_instances
[[ -f $inst/perfect_400.csv ]] || { echo "minimalloc_baseline: no $inst/perfect_400.csv (run bench_arena --hard first)" >&2; exit 2; }
git_dir=${VP_MINIMALLOC_GIT:-/work/.mirror/google+minimalloc/repo}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ -d $git_dir ]]; then
    git --git-dir="$git_dir" archive HEAD src | tar -x -C "$work"
    rev=$(git --git-dir="$git_dir" rev-parse --short HEAD)
else
    git clone -q --depth 1 https://github.com/google/minimalloc "$work/repo"
    mv "$work/repo/src" "$work/src"
    rev=$(git -C "$work/repo" rev-parse --short HEAD)
fi
mkdir -p "$work/shim/absl/log"
cat > "$work/shim/absl/log/log.h" <<'EOF'
#pragma once
#include <iostream>
#include <sstream>
namespace vp_log_shim {
struct Line {
  std::ostringstream os;
  std::ostream &stream() { return os; }
  ~Line() { std::cerr << os.str() << std::endl; }
};
struct Voidify { template <class T> void operator&(const T &) {} };
}
#define LOG(severity) vp_log_shim::Line().stream()
#define DLOG(severity) while (false) vp_log_shim::Voidify() & vp_log_shim::Line().stream()
EOF
cat > "$work/shim/absl/log/globals.h" <<'EOF'
#pragma once
#include "absl/base/log_severity.h"
namespace absl {
inline void SetStderrThreshold(absl::LogSeverityAtLeast) {}
inline void EnableLogPrefix(bool) {}
}
EOF
cat > "$work/shim/absl/log/initialize.h" <<'EOF'
#pragma once
namespace absl { inline void InitializeLog() {} }
EOF
sed -i 's/for (const std::string_view& record : records)/for (const absl::string_view\& record : records)/' "$work/src/converter.cc"
libs=$(ls /usr/lib/*/libabsl_*.so 2>/dev/null | sed -E 's|.*/lib(absl_[a-z0-9_]+)\.so|-l\1|' | sort -u | tr '\n' ' ')
(cd "$work/src" && g++ -std=c++20 -O2 -DNDEBUG -I../shim -I. converter.cc minimalloc.cc solver.cc sweeper.cc validator.cc \
    main.cc -o "$work/minimalloc" -Wl,--start-group $libs -Wl,--end-group) > "$work/build.log" 2>&1 || {
    echo "minimalloc_baseline: MiniMalloc did not build (libabsl-dev installed?):" >&2
    tail -20 "$work/build.log" >&2
    exit 1
}

pin=""
command -v taskset > /dev/null && pin="taskset -c 0"
row() { # name csv capacity
    local t0 t1 out="$work/out.csv" h
    rm -f "$out"
    t0=$(date +%s.%N)
    if $pin "$work/minimalloc" --capacity="$3" --input="$2" --output="$out" --timeout="${limit}s" --validate \
        > "$work/run.log" 2>&1 && [[ -f $out ]]; then
        h=$(awk -F, 'NR > 1 && $5 + $4 > h { h = $5 + $4 } END { print h + 0 }' "$out")
        t1=$(date +%s.%N)
        printf '| %s | %s | fits, height %s | %.2f |\n' "$1" "$3" "$h" "$(echo "$t1 - $t0" | bc)"
    else
        t1=$(date +%s.%N)
        printf '| %s | %s | nothing within %s s | %.2f |\n' "$1" "$3" "$limit" "$(echo "$t1 - $t0" | bc)"
    fi
}

echo "MiniMalloc ($rev, default options, one core, --timeout ${limit}s), per capacity given:"
echo
echo "| instance | capacity | MiniMalloc | seconds |"
echo "|---|---|---|---|"
for c in A B C D E F G H I J K; do
    [[ -f $inst/minimalloc_$c.csv ]] && row "minimalloc $c" "$inst/minimalloc_$c.csv" 1048576
done
for cap in 1040384 1034240 1031168 1027072; do row "minimalloc D" "$inst/minimalloc_D.csv" $cap; done
for cap in 1043456 1039360 1035264; do row "minimalloc J" "$inst/minimalloc_J.csv" $cap; done
for n in 100 200 400; do row "perfect_$n" "$inst/perfect_$n.csv" 1048576; done
for cap in 1058816 1100800 1153024; do row "perfect_400" "$inst/perfect_400.csv" $cap; done
