#!/usr/bin/env bash
# C++ exceptions in a program under tcgpu (issue 35): a C host dlopens a C++
# library that throws out of std::call_once, through C frames, and cancels a
# thread (progs/cxx_unwind.c, progs/cxx_throw.cpp), while tcgpu suspends,
# checkpoints and resumes it in turn. A preloaded library's dependencies
# join the global scope ahead of what the program loads later, so an
# unwinder among them would take libstdc++'s place half way (libunwind did:
# the first throw aborted the program).
#
#   cxx_unwind.sh
. "$(dirname "$0")/lib.sh"

LIB=$B/interpose/libtcgpu.so

# 1. No object libtcgpu.so brings into the program defines the unwinder's
#    entry points, but libgcc_s: the C++ runtime's own (a sanitizer's
#    runtime needs it).
while read -r obj; do
    [[ $(basename "$obj") == libgcc_s.so.* ]] && continue
    if nm -D --defined-only "$obj" 2>/dev/null | grep -qw _Unwind_RaiseException; then
        fail "$obj, loaded with libtcgpu.so, exports _Unwind_RaiseException: a second unwinder for every C++ library the program loads"
    fi
done < <(ldd "$LIB" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
echo "ok: libtcgpu.so brings no unwinder"

# 2. The exceptions, with and without tcgpu, under a suspend of every kind
#    and a checkpoint, one after another in one run.
. "$(dirname "$0")/progs/cxx_unwind.desc"
# five operations in turn: slower than one (sanitizer builds slower still)
SC_SLOW=(--sleep-ms $((40 * ${TCGPU_TEST_TIME_FACTOR:-1})))
SC_RUNS=("cycles:checkpoint suspend-host suspend-image suspend-keep-context suspend-host")
sc_scenario || exit 1
[ "$SC_FAILED" -eq 0 ] || exit 1
[ "$SC_PASSED" -gt 0 ] || fail "the run under suspend cycles was skipped"
