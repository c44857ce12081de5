#!/usr/bin/env bash
# tests/gpu/run.sh - the real-GPU suite in one command (tests/gpu/README.md,
# docs/gpu-suite.md).
#
#   tests/gpu/run.sh [OPTIONS] [BUILD_DIR]
#
# BUILD_DIR is a tcgpu build tree (meson) or a bundle made by
# tests/gpu/bundle.sh (the same layout, plus the shared libraries a bare
# machine lacks, and this script). Without it: ./build-gpu-bundle if present,
# the bundle this script is the copy of, else a meson build made here in a
# scratch directory (needs meson, ninja and the -dev packages; the GPU
# machine usually has none of those: carry a bundle).
#
# Options:
#   --dry-run      list the steps and what each checks; run nothing
#   --sim          rehearse on simcuda (a build tree with simcuda): the
#                  driver-API program and the driver checkpoint path only
#   --quick        smaller jobs (a rerun when device time is short)
#   --only LIST    run only these steps (comma-separated names, see --dry-run)
#   --pack         keep $OUT to three files: results.txt, results.tsv and
#                  logs.tar.gz (the device tool brings back at most 8 files)
#   --budget SEC   stop starting steps after SEC seconds (default 450)
#   --skip-without-gpu  exit 77 (meson's "skipped") when there is no nvidia-smi
#
# Results go to $OUT when it is set, else ./gpu-results: every step's log
# (<step>.log, or inside logs.tar.gz with --pack), results.tsv (one row per
# check or measurement) and results.txt (the table, then "name value" lines).
# Exit status: 0 when every check passed or was skipped, 1 when any failed
# (a checksum differed, memory was not released, an operation failed), 2 usage.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
PROGS_SRC=$HERE/progs
# The scenario harness (and the helpers it shares with tests/sim): every
# program goes through the same modes there as on simcuda.
. "$HERE/../common/scenario.sh"

STEPS=(env build bw train rt torch torch_exp drvckpt tcgpud ddp)
declare -A STEP_DOC=(
    [env]="the machine: GPU, driver, CUDA, PyTorch, tools found"
    [build]="tcgpu (BUILD_DIR, a carried bundle, or meson here) and the GPU programs (nvcc -arch=sm_90)"
    [bw]="pinned H2D/D2H bandwidth, 1 GiB best of 5 (bw.cu): the limit for drain and refill"
    [train]="examples/train train_gpu (driver API, real kernels) through tests/common/scenario.sh: reference, under tcgpu, checkpoint+inspect+verify then suspend/resume cycles (host memory, disk, --keep-context) with memory and context released, save/restore (CRIU)"
    [rt]="rt_train.cu (CUDA runtime: cudaMalloc, streams, events, cudaMallocAsync): same scenarios"
    [torch]="torch_train.py (transformer, bf16 autocast, AdamW, caching allocator): same scenarios, step-time ratio, free/resume time vs bandwidth, image size"
    [torch_exp]="torch_train.py with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the VMM API): same scenarios"
    [drvckpt]="the PyTorch job without tcgpu through the driver checkpoint API alone (drv_ckpt.c): lock/checkpoint/restore/unlock times, memory released, checksum"
    [tcgpud]="two PyTorch jobs under tcgpud: the high-priority one preempts the low one, both checksums right"
    [ddp]="a 2-rank PyTorch DDP job over NCCL (torch_ddp.py under torchrun; needs 2 GPUs, else skipped saying so; examples/ddp over simnccl with --sim), every rank under tcgpu: gang suspend/resume at random moments (the consistent cut), memory released, both ranks' checksums equal the uninterrupted run's"
)

DRY=0 SIM=0 QUICK=0 PACK=0 ONLY="" BUDGET=450 BUILD_ARG="" SKIP_NO_GPU=0
usage() { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --dry-run) DRY=1 ;;
        --sim) SIM=1 ;;
        --quick) QUICK=1 ;;
        --pack) PACK=1 ;;
        --skip-without-gpu) SKIP_NO_GPU=1 ;;
        --only) [ $# -ge 2 ] || usage; ONLY=$2; shift ;;
        --budget) [ $# -ge 2 ] || usage; BUDGET=$2; shift ;;
        -h|--help) usage ;;
        -*) echo "run.sh: unknown option $1" >&2; usage ;;
        *) [ -z "$BUILD_ARG" ] || usage; BUILD_ARG=$1 ;;
    esac
    shift
done

OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
TSV=$OUT/results.tsv
TXT=$OUT/results.txt

# --- small helpers ------------------------------------------------------------

exec 3>&1                                   # the console, whatever a step redirects
say() { printf '%s\n' "$*" >&3; }
log() { printf '%s %s\n' "$(date +%T)" "$*"; }          # into the current step's log

# record KIND NAME STATUS VALUE UNIT DETAIL: one row of results.tsv.
record() {
    local detail=${6//$'\t'/ }
    detail=${detail//$'\n'/ | }
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$detail" >>"$TSV"
    if [ "$1" = check ]; then
        printf '%-4s %-34s %s\n' "$3" "$2" "$detail" >&3
    else
        printf '     %-34s %s %s\n' "$2" "$4" "$5" >&3
    fi
    log "$1 $2 $3 $4 $5 $detail"
}
check()  { record check "$1" "$2" "" "" "${3:-}"; }      # NAME PASS|FAIL|SKIP DETAIL
pass()   { check "$1" PASS "${2:-}"; }
failc()  { check "$1" FAIL "${2:-}"; }
skip()   { check "$1" SKIP "${2:-}"; }
metric() { [ -n "$2" ] && record metric "$1" INFO "$2" "${3:-}" "${4:-}"; return 0; }

# metric_get NAME: the last value recorded for NAME (empty if none).
metric_get() { awk -F'\t' -v n="$1" '$1 == "metric" && $2 == n { v = $4 } END { print v }' "$TSV"; }

ms_of() { sed -n 's/^time: *\([0-9.]*\) ms\/step.*/\1/p' "$1" | tail -n 1; }

# div A B: A / B to 3 decimals, empty when either is empty or B is 0.
div() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b != 0) printf "%.3f", a / b }'; }
ns_to_ms() { [ -n "$1" ] && awk -v a="$1" 'BEGIN { printf "%.1f", a / 1e6 }'; }

want_step() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# --- the programs and the tools -------------------------------------------------

B=""                       # tcgpu build tree or bundle
GPUCKPT="" LIBTCGPU="" TRAIN_GPU="" TRAIN_CUBIN="" TCGPUD="" SMI=""
RT_TRAIN="" BW="" DRV_CKPT=""
TORCH_PY=$PROGS_SRC/torch_train.py
SMI_MODE=none              # how device memory per process is read: sim, pid, device, none
SLACK=$((2048 << 20))      # what a suspended process may still hold (context, modules)
CTX_SLACK=$((64 << 20))    # ... after the driver checkpointed it as well

# find_build: BUILD_DIR if given (and only it), else a carried bundle or build.
find_build() {
    local cand cands=("$SRC/build-gpu-bundle" "$SRC/build-gpu" "$SRC")
    [ -n "$BUILD_ARG" ] && cands=("$BUILD_ARG")
    for cand in "${cands[@]}"; do
        if [ -x "$cand/tools/gpuckpt/gpuckpt" ] && [ -f "$cand/interpose/libtcgpu.so" ]; then
            B=$(cd "$cand" && pwd)
            return 0
        fi
    done
    [ -n "$BUILD_ARG" ] && log "BUILD_DIR $BUILD_ARG has no tools/gpuckpt/gpuckpt + interpose/libtcgpu.so"
    return 1
}

# Shared libraries the build needs that this machine lacks come from the
# bundle's deps/ (only those: the machine's own stay first).
link_missing_deps() {
    local f lib pass added
    mkdir -p "$WORK/deps"
    [ -d "$B/deps" ] || return 0
    for pass in 1 2 3 4 5; do          # a library found may need others in turn
        added=0
        for f in "$B/tools/gpuckpt/gpuckpt" "$B/interpose/libtcgpu.so" "$B/bin/criu" "$B/tools/tcgpud/tcgpud"; do
            [ -f "$f" ] || continue
            for lib in $(LD_LIBRARY_PATH="$WORK/deps" ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }'); do
                [ -e "$WORK/deps/$lib" ] && continue
                if [ -f "$B/deps/$lib" ]; then
                    ln -s "$B/deps/$lib" "$WORK/deps/$lib"
                    log "using the bundle's $lib (pass $pass)"
                    added=1
                else
                    log "missing $lib for $f, and the bundle has none"
                fi
            done
        done
        [ "$added" = 1 ] || break
    done
}

# meson build in the scratch directory, when nothing was given or carried.
build_tcgpu_here() {
    local meson_cmd=()
    if command -v meson >/dev/null; then
        meson_cmd=(meson)
    elif python3 -c 'import mesonbuild' 2>/dev/null; then
        meson_cmd=(python3 -m mesonbuild.mesonmain)
    else
        log "no meson here (and none can be installed offline): carry a bundle (tests/gpu/bundle.sh)"
        return 1
    fi
    command -v ninja >/dev/null || { log "no ninja here"; return 1; }
    log "building tcgpu with ${meson_cmd[*]} in $WORK/build"
    "${meson_cmd[@]}" setup "$WORK/build" "$SRC" -Dgpu_suite=auto || return 1
    ninja -C "$WORK/build" tools/gpuckpt/gpuckpt interpose/libtcgpu.so || return 1
    ninja -C "$WORK/build" || log "the full build failed; the library and gpuckpt were built"
    B=$WORK/build
}

# The GPU programs: built here with nvcc when there is one (the machine's own
# toolkit), else taken from the build tree or bundle.
build_progs() {
    local p=$WORK/progs cuda=${CUDA_HOME:-/usr/local/cuda} nvcc
    mkdir -p "$p"
    nvcc=$(command -v nvcc || true)
    [ -z "$nvcc" ] && [ -x "$cuda/bin/nvcc" ] && nvcc=$cuda/bin/nvcc
    [ "$SIM" = 1 ] && nvcc=""          # the unit test compiles them; simcuda cannot run them
    if [ -n "$nvcc" ]; then
        log "nvcc: $("$nvcc" --version | tail -n 2 | tr '\n' ' ')"
        "$nvcc" -arch=sm_90 -O2 -o "$p/rt_train" "$PROGS_SRC/rt_train.cu" && RT_TRAIN=$p/rt_train
        "$nvcc" -arch=sm_90 -O2 -o "$p/bw" "$PROGS_SRC/bw.cu" && BW=$p/bw
        if [ ! -f "$B/examples/train/train_gpu" ] && [ -f "$SRC/examples/train/kernels.cu" ]; then
            local t=$SRC/examples/train
            "$nvcc" -arch=sm_90 -cubin -O3 -I"$t" -o "$p/train_kernels.cubin" "$t/kernels.cu" &&
            cc -O2 -DTRAIN_KERNELS_FILE='"train_kernels.cubin"' -I"$cuda/include" \
                "$t/train.c" "$t/train_common.c" -o "$p/train_gpu" \
                -L"$cuda/lib64/stubs" -lcuda -lm && TRAIN_GPU=$p/train_gpu
        fi
    fi
    if [ -f "$PROGS_SRC/drv_ckpt.c" ] && command -v cc >/dev/null; then
        cc -O2 -I"$cuda/include" -o "$p/drv_ckpt" "$PROGS_SRC/drv_ckpt.c" -ldl && DRV_CKPT=$p/drv_ckpt
    fi
    [ -n "$RT_TRAIN" ] || { [ -x "$B/tests/gpu/rt_train" ] && RT_TRAIN=$B/tests/gpu/rt_train; } || true
    [ -n "$BW" ] || { [ -x "$B/tests/gpu/bw" ] && BW=$B/tests/gpu/bw; } || true
    [ -n "$DRV_CKPT" ] || { [ -x "$B/tests/gpu/drv_ckpt" ] && DRV_CKPT=$B/tests/gpu/drv_ckpt; } || true
    if [ -z "$TRAIN_GPU" ] && [ -x "$B/examples/train/train_gpu" ]; then
        TRAIN_GPU=$B/examples/train/train_gpu
    fi
    return 0
}

# Resolves everything a step may need (each step runs in a subshell, so this
# runs in the parent after the build step and its results are inherited).
resolve_tools() {
    GPUCKPT=$B/tools/gpuckpt/gpuckpt
    LIBTCGPU=$B/interpose/libtcgpu.so
    export TCGPU_LIB=$LIBTCGPU
    [ -x "$B/tools/tcgpud/tcgpud" ] && TCGPUD=$B/tools/tcgpud/tcgpud
    [ -d "$B/bin" ] && PATH=$B/bin:$PATH
    if [ "$SIM" = 1 ]; then
        TRAIN_GPU=$B/examples/train/train
        TRAIN_CUBIN=""
        SMI=$B/simcuda/simcuda-smi
        export DRV_CKPT_LIBCUDA=$B/simcuda/libcuda.so.1
        export TCGPU_REAL_LIBCUDA=$DRV_CKPT_LIBCUDA      # gpuckpt's driver checkpoint API
    fi
}

# --- device memory of a process -----------------------------------------------------

choose_smi_mode() {
    if [ "$SIM" = 1 ]; then
        SMI_MODE=sim
        SLACK=$((4 << 20))
        CTX_SLACK=$((1 << 20))
    elif command -v nvidia-smi >/dev/null; then
        SMI_MODE=pid                # may fall back to "device" per job (see mem_probe)
    fi
    [ -n "${GPU_SUITE_SLACK_MB:-}" ] && SLACK=$((GPU_SUITE_SLACK_MB << 20))
    SC_HELD_RELEASED=$CTX_SLACK SC_HELD_KEPT=$SLACK
}

# gpu_mem_of PID: bytes of device memory PID holds ("" when unknown).
gpu_mem_of() {
    case $SMI_MODE in
        sim) device_bytes_of "$1" ;;
        pid)                        # not listed: no context, no memory
            nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
                awk -F', *' -v p="$1" '$1 == p { s += $2 } END { printf "%d\n", s * 1048576 }' ;;
        device)
            nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null |
                awk '{ s += $1 } END { printf "%d\n", s * 1048576 }' ;;
        *) echo "" ;;
    esac
}

# The per-process query shows nothing in some containers: then the device's
# total (this suite is the only user of the GPU) is the next best thing.
mem_probe() {
    local v
    [ "$SMI_MODE" = pid ] || return 0
    v=$(gpu_mem_of "$1")
    if [ -z "$v" ] || [ "$v" = 0 ]; then
        log "nvidia-smi lists no memory for pid $1: using the device's used memory instead"
        SMI_MODE=device
    fi
}

# --- one program, every mode (tests/common/scenario.sh) --------------------------------
#
# A step describes its program (sc_program, SC_ENV, SC_SLOW, SC_TIME) and
# calls gpu_scenario: the reference, a run under tcgpu left alone (lib), one
# job through a checkpoint and five suspend/resume cycles (the second to a
# disk image, the third with --keep-context: device memory only), and
# save/restore (CRIU). The harness checks; what it saw on the way becomes
# this suite's measurements (gpu_observe).

SC_DEVICE_BYTES=gpu_mem_of
SC_DRIVER_API=optional
SC_PAUSE_MS="50 300"
SC_REPORT=gpu_report
SC_OBSERVE=gpu_observe

gpu_report() { check "$2" "$1" "$3"; }

gpu_scenario() {
    SC_RUNS=(lib:plain
        "suspend_resume:checkpoint suspend-host suspend-image suspend-keep-context suspend-host suspend-host")
    if [ "$SIM" = 1 ] && [ -z "${GPU_SUITE_SIM_SAVE:-}" ]; then
        skip "$SC_NAME.save_restore" "simcuda: tests/criu covers it (GPU_SUITE_SIM_SAVE=1 to run it here)"
    elif ! "$GPUCKPT" save --help >/dev/null 2>&1; then
        skip "$SC_NAME.save_restore" "not built (gpuckpt save --help fails)"
    else
        SC_RUNS+=(save_restore:save-restore)
    fi
    sc_scenario || true                 # each failure is in the results already
    limit_metrics
}

# metric_once NAME VALUE UNIT DETAIL: the first value of NAME only.
metric_once() { [ -n "$(metric_get "$1")" ] || metric "$@"; }

# gpu_observe EVENT ARGS...: the harness's events, as measurements.
gpu_observe() {
    local what=$1
    shift
    case $what in
        reference)
            checksum_of "$1" >"$WORK/ref-$SC_NAME"
            metric "$SC_NAME.ms_per_step_plain" "$(ms_of "$1")" ms ;;
        running)
            mem_probe "$1"
            metric_once "$SC_NAME.gpu_bytes" "$(status_of "$1" gpu_bytes)" B "device memory tcgpu holds for the job"
            metric_once "$SC_NAME.device_mem_running" "$(gpu_mem_of "$1")" B "memory the job holds ($SMI_MODE)" ;;
        checkpointed) checkpoint_metrics "$@" ;;
        suspended) suspend_metrics "$@" ;;
        resumed) resume_metrics "$@" ;;
        saved) metric "$SC_NAME.save_image_bytes" "$(du -sb "$1" | cut -f1)" B "CRIU + GPU images" ;;
        restored) metric "$SC_NAME.restore_and_finish_s" "$1" s "gpuckpt restore until the job ended" ;;
        finished) [ "$1" != lib ] || lib_metrics "$2" ;;
    esac
}

lib_metrics() {                 # OUT: what the library costs a step
    local ms_lib
    ms_lib=$(ms_of "$1")
    metric "$SC_NAME.ms_per_step_tcgpu" "$ms_lib" ms
    metric "$SC_NAME.step_time_ratio" "$(div "$ms_lib" "$(metric_get "$SC_NAME.ms_per_step_plain")")" x "tcgpu / plain"
}

checkpoint_metrics() {          # PID DIR
    local insp stored raw
    metric "$SC_NAME.checkpoint_ms" "$(ns_to_ms "$(status_of "$1" last_total_ns)")" ms
    insp=$("$GPUCKPT" inspect "$2" --json 2>/dev/null || true)
    { read -r stored; read -r raw; } < <(json_get "$insp" totals.stored_bytes totals.raw_bytes)
    metric "$SC_NAME.image_bytes" "$(du -sb "$2" | cut -f1)" B "on disk"
    metric "$SC_NAME.image_raw_bytes" "$raw" B "device bytes saved"
    metric "$SC_NAME.image_vs_gpu_bytes" "$(div "$stored" "$(metric_get "$SC_NAME.gpu_bytes")")" x "stored / tcgpu-held"
    metric "$SC_NAME.image_vs_device_mem" "$(div "$stored" "$(metric_get "$SC_NAME.device_mem_running")")" x "stored / process memory ($SMI_MODE)"
}

suspend_metrics() {             # MODE PID HELD
    local free_ms susp_ms
    free_ms=$(ns_to_ms "$(status_of "$2" last_free_ns)")
    susp_ms=$(ns_to_ms "$(status_of "$2" last_total_ns)")
    log "$1: freed in $free_ms ms, suspend $susp_ms ms, held $3"
    case $1 in
        suspend-host)
            # later suspends to host memory copy into the store kept from the first (docs/engine.md)
            [ -n "$(metric_get "$SC_NAME.time_to_free_ms")" ] &&
                metric "$SC_NAME.time_to_free_warm_ms" "$free_ms" ms "a later suspend, into the kept host store"
            metric_once "$SC_NAME.held_suspended" "$3" B "left on the GPU while suspended (driver_state $(status_of "$2" driver_state))"
            metric_once "$SC_NAME.time_to_free_ms" "$free_ms" ms "suspend to host memory: until the GPU memory was released"
            metric_once "$SC_NAME.suspend_ms" "$susp_ms" ms "suspend to host memory, total" ;;
        suspend-image)
            metric_once "$SC_NAME.suspend_disk_ms" "$susp_ms" ms "suspend to an image on disk" ;;
        suspend-keep-context)
            metric_once "$SC_NAME.held_keep_context" "$3" B "left on the GPU by suspend --keep-context (context, modules)" ;;
    esac
}

resume_metrics() {              # MODE PID
    local ms
    ms=$(ns_to_ms "$(status_of "$2" last_total_ns)")
    case $1 in
        suspend-host) metric_once "$SC_NAME.resume_ms" "$ms" ms "resume from host memory" ;;
        suspend-image) metric_once "$SC_NAME.resume_disk_ms" "$ms" ms "resume from the image" ;;
    esac
}

# The free and resume times against the host link's limit (bw's bandwidth).
limit_metrics() {
    local d2h h2d bytes lim_free lim_res
    d2h=$(metric_get bw_d2h_gbps) h2d=$(metric_get bw_h2d_gbps) bytes=$(metric_get "$SC_NAME.gpu_bytes")
    [ -n "$d2h" ] && [ -n "$bytes" ] || return 0
    lim_free=$(awk -v b="$bytes" -v g="$d2h" 'BEGIN { printf "%.1f", b / (g * 1e9) * 1e3 }')
    lim_res=$(awk -v b="$bytes" -v g="$h2d" 'BEGIN { printf "%.1f", b / (g * 1e9) * 1e3 }')
    metric "$SC_NAME.free_limit_ms" "$lim_free" ms "gpu_bytes / pinned D2H bandwidth"
    metric "$SC_NAME.resume_limit_ms" "$lim_res" ms "gpu_bytes / pinned H2D bandwidth"
    metric "$SC_NAME.free_vs_limit" "$(div "$(metric_get "$SC_NAME.time_to_free_ms")" "$lim_free")" x "1.0 = at the PCIe limit"
    metric "$SC_NAME.resume_vs_limit" "$(div "$(metric_get "$SC_NAME.resume_ms")" "$lim_res")" x "1.0 = at the PCIe limit"
    # the bench's refill target (docs/engine.md): a refill from an image at
    # >= 0.5x a memcpy, i.e. a resume from the image within 2x the link's time
    local disk dr
    disk=$(metric_get "$SC_NAME.resume_disk_ms")
    if [ -n "$disk" ]; then
        dr=$(div "$disk" "$lim_res")
        metric "$SC_NAME.resume_disk_vs_limit" "$dr" x "resume from the image (verify, decode, H2D) / the link's time"
        if awk -v r="$dr" 'BEGIN { exit !(r <= 2.0) }'; then
            pass "$SC_NAME.refill_image_vs_target" "${dr}x the link's time (target: <= 2x)"
        else
            failc "$SC_NAME.refill_image_vs_target" "${dr}x the link's time, the target is <= 2x"
        fi
    fi
    # docs/engine.md's model: a suspend into the kept (registered) store frees
    # the GPU within 1.3x the link's time; 55 GB then frees in < 2 s
    local warm wr
    warm=$(metric_get "$SC_NAME.time_to_free_warm_ms")
    [ -n "$warm" ] || return 0
    wr=$(div "$warm" "$lim_free")
    metric "$SC_NAME.free_55gb_predicted_s" "$(awk -v r="$wr" -v g="$d2h" 'BEGIN { printf "%.2f", 55 / g * r }')" s \
        "55 GB at this link and this ratio (model, docs/engine.md)"
    if awk -v r="$wr" 'BEGIN { exit !(r <= 1.3) }'; then
        pass "$SC_NAME.free_warm_vs_model" "${wr}x the link's time (model: <= 1.3x)"
    else
        failc "$SC_NAME.free_warm_vs_model" "${wr}x the link's time, the model says <= 1.3x"
    fi
}

# --- the steps ------------------------------------------------------------------------

step_env() {
    uname -a
    cat /etc/os-release 2>/dev/null | head -n 2 || true
    nproc; free -g 2>/dev/null || true
    if [ "$SIM" = 1 ]; then
        "$SMI" -q || true
    elif command -v nvidia-smi >/dev/null; then
        nvidia-smi || true
        local q
        q=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
        metric gpu "\"$q\"" "" "nvidia-smi"
    else
        failc env.gpu "no nvidia-smi: not a GPU machine (use --sim on simcuda)"
    fi
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 || true
    python3 -c 'import numpy; print("numpy", numpy.__version__)' 2>&1 || true
    command -v nvcc && nvcc --version | tail -n 1 || true
    command -v criu && criu --version || true
    log "build: $B"
    cat "$B/BUNDLE-INFO" 2>/dev/null || true
    echo "gpuckpt: $GPUCKPT; libtcgpu: $LIBTCGPU; tcgpud: ${TCGPUD:-none}"
    echo "train_gpu: ${TRAIN_GPU:-none}; rt_train: ${RT_TRAIN:-none}; bw: ${BW:-none}; drv_ckpt: ${DRV_CKPT:-none}"
    echo "memory readings: $SMI_MODE, slack $((SLACK >> 20)) MiB"
    pass env "$(uname -r); memory read by $SMI_MODE"
}

step_bw() {
    if [ "$SIM" = 1 ]; then skip bw "simcuda: the runtime cannot run on it"; return 0; fi
    [ -n "$BW" ] || { failc bw "bw not built"; return 0; }
    if ! run_fg bw 120 "$BW" --mb 1024 --reps 5; then
        failc bw "$(tail_of "$WORK/bw.out")"
        return 0
    fi
    cat "$WORK/bw.out"
    local k
    for k in bw_h2d_gbps bw_d2h_gbps bw_d2d_gbps; do
        metric "$k" "$(awk -v k="$k" '$1 == k { print $2 }' "$WORK/bw.out")" GB/s "pinned, 1 GiB, best of 5"
    done
    pass bw "H2D $(metric_get bw_h2d_gbps) GB/s, D2H $(metric_get bw_d2h_gbps) GB/s"
}

# The driver-API example, described for the harness (its sizes per machine).
train_program() {
    if [ "$SIM" = 1 ]; then
        sc_program train "$TRAIN_GPU" --mb 64 --steps 800 --print-every 100
        SC_SLOW=(--sleep-ms 5)
    elif [ "$QUICK" = 1 ]; then
        sc_program train "$TRAIN_GPU" --mb 1024 --steps 400 --print-every 100
        SC_SLOW=(--sleep-ms 10)
    else
        sc_program train "$TRAIN_GPU" --mb 2048 --steps 800 --print-every 100
        SC_SLOW=(--sleep-ms 10)
    fi
    SC_TIME=180
}

step_train() {
    [ -n "$TRAIN_GPU" ] || { failc train "train_gpu not built (gpu_suite option / nvcc)"; return 0; }
    train_program
    gpu_scenario
}

step_rt() {
    if [ "$SIM" = 1 ]; then skip rt "simcuda: libcudart cannot run on it (export tables)"; return 0; fi
    [ -n "$RT_TRAIN" ] || { failc rt "rt_train not built (nvcc)"; return 0; }
    if [ "$QUICK" = 1 ]; then
        sc_program rt "$RT_TRAIN" --mb 512 --steps 200 --print-every 50
    else
        sc_program rt "$RT_TRAIN" --mb 2048 --steps 300 --print-every 50
    fi
    SC_SLOW=(--sleep-ms 25) SC_TIME=180
    gpu_scenario
}

# torch_program NAME [VAR=value...]: the PyTorch job, described for the harness.
torch_program() {
    local name=$1
    shift
    if [ "$QUICK" = 1 ]; then
        sc_program "$name" python3 "$TORCH_PY" --steps 120 --layers 4 --print-every 20
    else
        sc_program "$name" python3 "$TORCH_PY" --steps 200 --print-every 20
    fi
    SC_ENV=(PYTHONUNBUFFERED=1 "$@") SC_SLOW=(--sleep-ms 40) SC_TIME=240
}

torch_ok() {
    if [ "$SIM" = 1 ]; then skip "$1" "simcuda: PyTorch needs the real driver"; return 1; fi
    if ! python3 -c 'import torch, numpy; assert torch.cuda.is_available()' >"$WORK/torchcheck.out" 2>&1; then
        failc "$1" "no usable PyTorch with CUDA: $(tail_of "$WORK/torchcheck.out" 2)"
        return 1
    fi
}

step_torch() {
    torch_ok torch || return 0
    torch_program torch
    gpu_scenario
}

step_torch_exp() {
    torch_ok torch_exp || return 0
    torch_program torch_exp PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    gpu_scenario
}

# The same job through the driver's checkpoint API alone (no tcgpu).
step_drvckpt() {
    [ -n "$DRV_CKPT" ] || { failc drvckpt "drv_ckpt not built"; return 0; }
    local ref out=$WORK/drvckpt.out pid rc=0 before held got
    if [ "$SIM" = 1 ]; then
        train_program
    else
        torch_ok drvckpt || return 0
        torch_program torch
    fi
    ref=$(cat "$WORK/ref-$SC_NAME" 2>/dev/null || true)
    if [ -z "$ref" ]; then
        run_fg "$SC_NAME-ref" 240 env "${SC_ENV[@]}" "${SC_CMD[@]}" || true
        ref=$(checksum_of "$WORK/$SC_NAME-ref.out")
        [ -n "$ref" ] || { failc drvckpt "reference run failed: $(tail_of "$WORK/$SC_NAME-ref.out")"; return 0; }
    fi
    start_bg "$out" env "${SC_ENV[@]}" "${SC_CMD[@]}" "${SC_SLOW[@]}"
    pid=$BG
    wait_line "$out" '^step ' 120 "$pid" || { failc drvckpt "the job did not start: $(tail_of "$out")"; return 0; }
    mem_probe "$pid"
    before=$(gpu_mem_of "$pid")
    "$DRV_CKPT" suspend "$pid" --timeout-ms 20000 >"$WORK/drv-times.out" 2>&1 || rc=$?
    if [ "$rc" -eq 3 ]; then
        skip drvckpt "no driver checkpoint API: $(tail_of "$WORK/drv-times.out" 1)"
        kill -9 "$pid" 2>/dev/null || true
        return 0
    elif [ "$rc" -ne 0 ]; then
        failc drvckpt "lock/checkpoint: $(tail_of "$WORK/drv-times.out")"
        kill -9 "$pid" 2>/dev/null || true
        return 0
    fi
    held=$(sc_held_below "$pid" "$CTX_SLACK")
    sleep 0.2
    "$DRV_CKPT" resume "$pid" >>"$WORK/drv-times.out" 2>&1 || rc=$?
    cat "$WORK/drv-times.out"
    local k
    for k in lock checkpoint restore unlock; do
        metric "drv.${k}_ms" "$(awk -v k="drv_${k}_ms" '$1 == k { print $2 }' "$WORK/drv-times.out")" ms "driver checkpoint API, $SC_NAME job without tcgpu"
    done
    metric drv.device_mem_running "$before" B "$SMI_MODE"
    metric drv.held_checkpointed "$held" B "left on the GPU while checkpointed by the driver"
    local d2h ck
    d2h=$(metric_get bw_d2h_gbps)
    ck=$(metric_get drv.checkpoint_ms)
    if [ -n "$d2h" ] && [ -n "$before" ] && [ -n "$ck" ]; then
        metric drv.checkpoint_vs_limit "$(awk -v c="$ck" -v b="$before" -v g="$d2h" 'BEGIN { l = b / (g * 1e9) * 1e3; if (l > 0) printf "%.3f", c / l }')" x "checkpoint time / (process memory / D2H bandwidth)"
    fi
    if [ "$rc" -ne 0 ]; then
        failc drvckpt "restore/unlock: $(tail_of "$WORK/drv-times.out")"
        kill -9 "$pid" 2>/dev/null || true
        return 0
    fi
    rc=0
    wait_job "$pid" 240 || rc=$?
    got=$(checksum_of "$out")
    if [ "$rc" -eq 0 ] && [ "$got" = "$ref" ]; then
        pass drvckpt "driver checkpoint/restore alone: checksum $got, ${held:-?} bytes held while checkpointed"
    else
        failc drvckpt "exit $rc, checksum '$got', reference $ref: $(tail_of "$out")"
    fi
    if [ -n "$held" ] && [ "$held" -gt "$CTX_SLACK" ]; then
        failc drvckpt.memory_released "$held bytes held while checkpointed by the driver"
    fi
}

# Two PyTorch jobs under tcgpud. Written against the interface the issue names
# (gpuckpt run --project P --priority N; tcgpud started in the background);
# GPU_SUITE_TCGPUD_ARGS overrides the daemon's arguments.
step_tcgpud() {
    if [ -z "$TCGPUD" ]; then skip tcgpud "skipped: tcgpud not built"; return 0; fi
    torch_ok tcgpud || return 0
    "$TCGPUD" --help 2>&1 || true
    "$GPUCKPT" run --help 2>&1 || true
    if ! "$GPUCKPT" run --help 2>&1 | grep -q -- '--priority'; then
        skip tcgpud "gpuckpt run has no --priority yet"
        return 0
    fi
    local total_mb ballast ref low high lo_out=$WORK/tcgpud-low.out hi_out=$WORK/tcgpud-high.out
    local dargs=() rc=0 preempted=0 i
    read -r -a dargs <<<"${GPU_SUITE_TCGPUD_ARGS:-}"
    total_mb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
    # Each job holds a bit more than half the GPU: they cannot run together.
    ballast=${GPU_SUITE_BALLAST_GB:-$(awk -v m="$total_mb" 'BEGIN { printf "%d", m * 0.55 / 1024 }')}
    torch_program torch
    ref=$(cat "$WORK/ref-torch" 2>/dev/null || true)
    if [ -z "$ref" ]; then
        run_fg torch-ref 240 env "${SC_ENV[@]}" "${SC_CMD[@]}" || true
        ref=$(checksum_of "$WORK/torch-ref.out")
    fi
    [ -n "$ref" ] || { failc tcgpud "no reference checksum"; return 0; }
    start_bg "$WORK/tcgpud-daemon.out" "$TCGPUD" "${dargs[@]}"
    sleep 1
    kill -0 "$BG" 2>/dev/null || { failc tcgpud "tcgpud exited: $(tail_of "$WORK/tcgpud-daemon.out")"; return 0; }
    start_bg "$lo_out" env "${SC_ENV[@]}" "$GPUCKPT" run --project low --priority 1 -- \
        "${SC_CMD[@]}" "${SC_SLOW[@]}" --ballast-gb "$ballast"
    low=$BG
    wait_line "$lo_out" '^step ' 180 "$low" || { failc tcgpud "the low-priority job did not start: $(tail_of "$lo_out")"; return 0; }
    start_bg "$hi_out" env "${SC_ENV[@]}" "$GPUCKPT" run --project high --priority 10 -- \
        "${SC_CMD[@]}" --ballast-gb "$ballast"
    high=$BG
    for i in $(seq 1 600); do
        if [ "$(status_of "$low" state)" = suspended ]; then preempted=1; break; fi
        kill -0 "$high" 2>/dev/null || break
        sleep 0.1
    done
    [ "$preempted" = 1 ] && pass tcgpud.preempt "the low-priority job was suspended for the high one" ||
        failc tcgpud.preempt "the low-priority job was never suspended"
    wait_job "$high" 300 || rc=$?
    [ "$(checksum_of "$hi_out")" = "$ref" ] && pass tcgpud.high "checksum $ref" ||
        failc tcgpud.high "exit $rc, checksum '$(checksum_of "$hi_out")', reference $ref"
    rc=0
    wait_job "$low" 300 || rc=$?
    [ "$(checksum_of "$lo_out")" = "$ref" ] && pass tcgpud.low "checksum $ref after preemption" ||
        failc tcgpud.low "exit $rc, checksum '$(checksum_of "$lo_out")', reference $ref"
}

# --- a job of several GPUs ----------------------------------------------------------

# ddp_program: DDP_CMD, DDP_SLOW and DDP_ENV of the data-parallel job, or 1
# with the reason in DDP_WHY when this machine cannot run it.
ddp_program() {
    local n
    DDP_WHY=""
    if [ "$SIM" = 1 ]; then
        [ -x "$B/examples/ddp/ddp" ] || { DDP_WHY="examples/ddp not built"; return 1; }
        # a simulated machine of two GPUs of its own (the suite's has one)
        export SIMCUDA_SHM=$SIMCUDA_SHM-ddp SIMCUDA_DEVICES=2
        DDP_ENV=(NCCL_BUFFSIZE=262144 "LD_LIBRARY_PATH=$B/simnccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
        DDP_CMD=("$B/examples/ddp/ddp" --nranks 2 --steps 300 --mb 4)
        DDP_SLOW=(--sleep-ms 20)
        return 0
    fi
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [ "$n" -ge 2 ] || { DDP_WHY="needs 2 GPUs, this machine has $n"; return 1; }
    command -v torchrun >/dev/null || { DDP_WHY="no torchrun (PyTorch's launcher)"; return 1; }
    # NCCL's SHM transport: NVLS multicast objects are not carried, and the
    # P2P and cuMem paths' shareable handles are carried on simcuda only, not
    # yet tried with real NCCL (docs/multiprocess.md, "Limits")
    DDP_ENV=(PYTHONUNBUFFERED=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 NCCL_P2P_DISABLE=1
             NCCL_CUMEM_ENABLE=0 NCCL_NVLS_ENABLE=0 NCCL_ALGO=Ring NCCL_PROTO=Simple)
    DDP_CMD=(torchrun --standalone --nproc_per_node=2 "$PROGS_SRC/torch_ddp.py" --steps 300)
    [ "$QUICK" = 1 ] && DDP_CMD=(torchrun --standalone --nproc_per_node=2 "$PROGS_SRC/torch_ddp.py" --steps 150)
    DDP_SLOW=(--sleep-ms 50)
}

# ddp_checksums FILE: "ok SUM" when both ranks printed the same checksum.
ddp_checksums() {
    local a b
    a=$(sed -n 's/^rank 0 checksum: *\([0-9a-f]*\).*/\1/p' "$1" | tail -n 1)
    b=$(sed -n 's/^rank 1 checksum: *\([0-9a-f]*\).*/\1/p' "$1" | tail -n 1)
    [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok $a"
}

# ddp_ranks PID: the job's two rank processes, the launcher's children that
# answer on a control socket (torchrun may have other children).
ddp_ranks() {
    local pid=$1 i r kids=() ranks=()
    for i in $(seq 1 600); do
        mapfile -t kids < <(cat /proc/"$pid"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -v '^$' || true)
        ranks=()
        for r in "${kids[@]}"; do [ -z "$(status_of "$r" state)" ] || ranks+=("$r"); done
        if [ "${#ranks[@]}" -eq 2 ]; then
            echo "${ranks[@]}"
            return 0
        fi
        sleep 0.1
    done
    return 1
}

step_ddp() {
    if ! ddp_program; then skip ddp "$DDP_WHY"; return 0; fi
    local ref out=$WORK/ddp.out pid ranks r c i rc=0 ok=0 cycles=5 t0 ms held spids
    run_fg ddp-ref 600 env "${DDP_ENV[@]}" "${DDP_CMD[@]}" || true
    ref=$(ddp_checksums "$WORK/ddp-ref.out") || { failc ddp "the reference run: $(tail_of "$WORK/ddp-ref.out" 4)"; return 0; }
    ref=${ref#ok }
    metric ddp_ref_ms_per_step "$(ms_of "$WORK/ddp-ref.out")" ms "2 ranks, no tcgpu"
    start_bg "$out" env "${DDP_ENV[@]}" "$GPUCKPT" run -- "${DDP_CMD[@]}" "${DDP_SLOW[@]}"
    pid=$BG
    ranks=$(ddp_ranks "$pid") || { failc ddp "the ranks did not come up under tcgpu: $(tail_of "$out" 4)"; return 0; }
    wait_line "$out" '^rank 0 step 10$' 300 "$pid" || { failc ddp "no step 10: $(tail_of "$out" 4)"; return 0; }
    for c in $(seq 1 "$cycles"); do
        sleep_ms "$(random_ms 100 1500)"
        kill -0 "$pid" 2>/dev/null || break
        t0=$(date +%s%N)
        spids=()
        for r in $ranks; do
            "$GPUCKPT" suspend "$r" >"$WORK/ddp-suspend.$r.out" 2>&1 &
            spids+=("$!")
        done
        rc=0
        for r in "${spids[@]}"; do wait "$r" || rc=$?; done     # not the job: it is a child too
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        if [ "$rc" -ne 0 ]; then
            failc ddp.suspend "cycle $c: $(cat "$WORK"/ddp-suspend.*.out | tr '\n' ' ' | cut -c1-300)"
            for r in $ranks; do "$GPUCKPT" resume "$r" >/dev/null 2>&1 || true; done
            break
        fi
        i=0
        for r in $ranks; do
            metric "ddp_suspend_ms_rank$i" "$(ns_to_ms "$(status_of "$r" last_total_ns)")" ms "cycle $c, in-process"
            case $SMI_MODE in
            sim|pid)
                held=$(gpu_mem_of "$r")
                metric "ddp_held_mb_rank$i" "$((held >> 20))" MiB "cycle $c, suspended"
                [ "$held" -le "$SLACK" ] || failc ddp.memory "cycle $c: rank $i (pid $r) holds $((held >> 20)) MiB while suspended"
                ;;
            esac
            i=$((i + 1))
        done
        metric ddp_gang_suspend_ms "$ms" ms "cycle $c, both ranks, wall"
        for r in $ranks; do "$GPUCKPT" resume "$r" >"$WORK/ddp-resume.$r.out" 2>&1 || rc=$?; done
        [ "$rc" -eq 0 ] || { failc ddp.resume "cycle $c: $(cat "$WORK"/ddp-resume.*.out | tr '\n' ' ' | cut -c1-300)"; break; }
        ok=$((ok + 1))
    done
    [ "$ok" -eq "$cycles" ] && pass ddp.suspend "$ok gang suspend/resume cycles at random moments"
    rc=0
    wait_job "$pid" 600 || rc=$?
    if [ "$(ddp_checksums "$out")" = "ok $ref" ]; then
        pass ddp "both ranks' checksum $ref after $ok gang suspends"
    else
        failc ddp "exit $rc, checksums '$(grep checksum "$out" | tr '\n' ' ')', reference $ref"
    fi
}

# --- the table ----------------------------------------------------------------------

write_table() {
    {
        echo "tcgpu real-GPU suite, $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"
        echo "build: ${B:-none}$( [ -f "${B:-/nonexistent}/BUNDLE-INFO" ] && echo " ($(head -n 1 "$B/BUNDLE-INFO"))")"
        echo
        echo "checks"
        awk -F'\t' '$1 == "check" { printf "  %-4s  %-34s %s\n", $3, $2, $6 }' "$TSV"
        echo
        echo "measurements (name value unit: note)"
        awk -F'\t' '$1 == "metric" { printf "%s %s %s%s\n", $2, $4, $5, ($6 != "" ? "  # " $6 : "") }' "$TSV"
        echo
        awk -F'\t' '$1 == "check" { n[$3]++ } END {
            printf "summary: %d passed, %d failed, %d skipped\n", n["PASS"], n["FAIL"], n["SKIP"] }' "$TSV"
    } >"$TXT"
}

pack_logs() {
    [ "$PACK" = 1 ] || return 0
    (cd "$LOGDIR" && tar czf "$OUT/logs.tar.gz.tmp" ./*.log 2>/dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz") || true
}

# --- main ---------------------------------------------------------------------------

if [ "$DRY" = 1 ]; then
    echo "tests/gpu/run.sh --dry-run: steps, in order (logs: \$OUT/<step>.log; OUT=$OUT)"
    for s in "${STEPS[@]}"; do
        want_step "$s" || continue
        printf '  %-10s %s\n' "$s" "${STEP_DOC[$s]}"
    done
    if find_build; then echo "build: $B"; else echo "build: none found (would build with meson in a scratch dir)"; fi
    echo "nvcc: $(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")"
    echo "nvidia-smi: $(command -v nvidia-smi || echo 'not found (no GPU here)')"
    echo "results: $TSV, $TXT"
    exit 0
fi

if [ "$SKIP_NO_GPU" = 1 ] && [ "$SIM" = 0 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "run.sh: no GPU here (nvidia-smi -L fails): skipped"
    exit 77
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tcgpu-gpu-XXXXXX")
export TCGPU_RUN_DIR=$WORK/run
mkdir -m 0700 "$TCGPU_RUN_DIR"
if [ "$SIM" = 1 ]; then
    export SIMCUDA_SHM=/simcuda-gpu-suite-$$
    export SIMCUDA_DEVICE_MEM=${SIMCUDA_DEVICE_MEM:-2G}
fi
LOGDIR=$OUT
[ "$PACK" = 1 ] && { LOGDIR=$WORK/logs; mkdir -p "$LOGDIR"; rm -f "$OUT"/*.log; }
printf 'kind\tname\tstatus\tvalue\tunit\tdetail\n' >"$TSV"

cleanup() {
    kill_bg
    write_table 2>/dev/null || true
    pack_logs
    [ "$SIM" = 1 ] && rm -f "/dev/shm${SIMCUDA_SHM:-/none}" "/dev/shm${SIMCUDA_SHM:-/none}-ddp"
    if [ -n "${GPU_SUITE_KEEP:-}" ]; then say "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "tcgpu GPU suite: results in $OUT (work dir $WORK)"

# The build comes first and is not a subshell: every later step inherits what
# it found.
{
    log "step build"
    if find_build || build_tcgpu_here; then
        link_missing_deps
        export LD_LIBRARY_PATH=$WORK/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        resolve_tools
        build_progs || true
        if "$GPUCKPT" --version; then
            pass build "tcgpu from $B; programs in $WORK/progs"
        else
            failc build "gpuckpt from $B does not run here (missing libraries?)"
            B=""
        fi
    else
        failc build "no tcgpu build: pass BUILD_DIR, carry build-gpu-bundle, or install meson+ninja+-dev packages"
    fi
} >"$LOGDIR/build.log" 2>&1
choose_smi_mode
pack_logs

for s in "${STEPS[@]}"; do
    [ "$s" = build ] && continue
    want_step "$s" || continue
    if [ "$SECONDS" -gt "$BUDGET" ]; then
        skip "$s" "out of time (${SECONDS}s > budget ${BUDGET}s)"
        continue
    fi
    if [ -z "$B" ] && [ "$s" != env ] && [ "$s" != bw ] && [ "$s" != drvckpt ]; then
        skip "$s" "no tcgpu build"
        continue
    fi
    say "== $s (${SECONDS}s)"
    rc=0
    ( trap kill_bg EXIT; log "step $s"; "step_$s" ) >"$LOGDIR/$s.log" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || failc "$s" "the step stopped on an error (exit $rc): see $s.log"
    write_table
    pack_logs
done

write_table
fails=$(awk -F'\t' '$1 == "check" && $3 == "FAIL"' "$TSV" | wc -l)
say ""
cat "$TXT" >&3
say "(${SECONDS}s)"
[ "$fails" -eq 0 ]
