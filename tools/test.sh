#!/usr/bin/env bash
# The whole test suite on a fresh machine: install, build (plain and with
# AddressSanitizer + UBSan), run every test in both builds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$jobs"
# the plain build's ctest includes the cross-backend and bit-identity suites again under
# an SSE4.1 cap of OpenBLAS and oneDNN (test_*_sse41, tests/CMakeLists.txt): no bound
# may hold only for the sums one instruction set takes
(cd build && ctest --output-on-failure -j "$jobs")
cmake -S . -B build-asan -DVP_SANITIZE=ON -DVP_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs")
