#!/usr/bin/env bash
# tests/common/scenario.sh - one program, every mode (tests/README.md).
#
# CRIU zdtm's idea: a program makes state and prints "checksum: <hex>" last;
# the harness runs it without tcgpu for the reference, then under tcgpu while
# each mode acts on it mid-run, and checks that every run ends with the
# reference's checksum and that each mode shows what it must on the way:
#
#   plain                 under gpuckpt run, untouched
#   suspend-host          suspend: tcgpu holds no device memory for it, the
#                         context went to the driver (where it has the
#                         checkpoint API), the device accounts (almost)
#                         nothing to it; resume: it runs again
#   suspend-image         the same through an image on disk (-D)
#   suspend-keep-context  suspend --keep-context: only the context is left
#   checkpoint            an image while it runs on: it verifies, inspect
#                         shows its totals
#   save-restore          gpuckpt save (CRIU ends the tree), the save
#                         verifies, gpuckpt restore runs it to its end; needs
#                         root and criu
#
# Run:     scenario.sh [--lib FILE] DESC [MODE...]  each MODE (default: all)
#                                                   in a run of its own
#          scenario.sh --modes                      the modes, for meson.build
#          FILE (sourced first) sets the environment and the settings below
#          (tests/sim/lib.sh); DESC (sourced next) describes the program.
#          Exit 0, 1 on a failure, 77 when every run was skipped.
# Sourced: set the settings, describe a program, call sc_scenario
#          (tests/gpu/run.sh), or use its parts (tests/sim/suspend_resume.sh).
#
# A description calls sc_program NAME CMD... and sets what differs from the
# defaults after it:
#   SC_ENV=(VAR=value...)  the environment of every run
#   SC_SLOW=(ARG...)       added to CMD where a mode acts, so that it acts
#                          mid-run (--sleep-ms T)
#   SC_READY=REGEX         a line that says the program is mid-run ('^step ')
#   SC_MODES=(MODE...)     the modes it supports (all); the others are skipped
#   SC_REFUSES=(MODE...)   modes tcgpu must refuse (gpuckpt exits 4; save, 1),
#                          naming SC_REFUSAL, leaving no image, and the
#                          program runs on to the reference checksum
#   SC_STAYS=BYTES         device memory a suspend leaves in place (managed
#                          memory: docs/architecture.md), held while the
#                          process keeps its context (0)
#   SC_TIME=SEC            how long one run may take (120, times TCGPU_TEST_TIME_FACTOR,
#                          which sanitizer builds set: meson.build)
#   SC_RUNS=("LABEL:MODE..." ...)  modes applied to one job in turn, one job
#                          a run (default: a run per mode, labelled by it);
#                          save-restore ends its run
#
# Settings (the environment's):
#   GPUCKPT, WORK          gpuckpt; a scratch directory
#   SC_DEVICE_BYTES=CMD    CMD PID prints the device memory PID holds, in
#                          bytes, or nothing when unknown (simcuda-smi on
#                          simcuda, nvidia-smi on a GPU)
#   SC_HELD_RELEASED=N     the most a suspended process may hold once the
#                          driver has its context
#   SC_HELD_KEPT=N         ... while it keeps its context (--keep-context,
#                          or a driver without the checkpoint API)
#   SC_CONTEXT_MIN=N       the least it holds with its context kept (0)
#   SC_DRIVER_API=required|optional  a plain suspend must hand the context to
#                          the driver (optional)
#   SC_PAUSE_MS="LO HI"    random pause before each mode and while suspended
#   SC_REPORT=CMD          CMD PASS|FAIL|SKIP NAME DETAIL, each result (the
#                          default prints; a failure exits 1)
#   SC_OBSERVE=CMD         CMD EVENT ARGS... for measurements: reference OUT,
#                          running PID, suspended MODE PID HELD, resumed MODE
#                          PID, checkpointed PID DIR, saved DIR, restored SEC,
#                          finished LABEL OUT (default: nothing)
# Results are named NAME.CHECK: NAME.reference, NAME.LABEL (a run's
# checksum), NAME.memory_released, NAME.context_released, NAME.verify,
# NAME.inspect, NAME.save_verify.

[ -z "${TC_SCENARIO_SH:-}" ] || return 0     # sourced once (tests/sim/lib.sh sources it too)
TC_SCENARIO_SH=1
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SC_ALL_MODES=(plain suspend-host suspend-image suspend-keep-context checkpoint save-restore)
: "${SC_DEVICE_BYTES:=}" "${SC_CONTEXT_MIN:=0}" "${SC_DRIVER_API:=optional}"
: "${SC_PAUSE_MS:=0 50}" "${SC_REPORT:=sc_print}" "${SC_OBSERVE:=:}"
SC_PASSED=0 SC_SKIPPED=0 SC_FAILED=0

# sc_program NAME CMD...: a new description, with the defaults.
sc_program() {
    SC_NAME=$1
    shift
    SC_CMD=("$@")
    SC_ENV=() SC_SLOW=() SC_READY='^step ' SC_MODES=("${SC_ALL_MODES[@]}")
    SC_REFUSES=() SC_REFUSAL="" SC_STAYS=0 SC_TIME=$((120 * ${TCGPU_TEST_TIME_FACTOR:-1})) SC_RUNS=()
}

# --- results ------------------------------------------------------------------

sc_print() {
    case $1 in
        PASS) echo "ok: $2: $3" ;;
        SKIP) echo "skip: $2: $3" ;;
        *) fail "$2: $3" ;;
    esac
}

# sc_check PASS|FAIL|SKIP CHECK DETAIL: one result, as NAME.CHECK.
sc_check() {
    case $1 in
        PASS) SC_PASSED=$((SC_PASSED + 1)) ;;
        SKIP) SC_SKIPPED=$((SC_SKIPPED + 1)) ;;
        *) SC_FAILED=$((SC_FAILED + 1)) ;;
    esac
    "$SC_REPORT" "$1" "$SC_NAME.$2" "$3"
}

# sc_fail DETAIL: the current run (SC_LABEL) failed; returns 1.
sc_fail() {
    sc_check FAIL "$SC_LABEL" "$1"
    return 1
}

# sc_in WORD LIST...: WORD is one of LIST.
sc_in() {
    local word=$1
    shift
    [[ " $* " == *" $word "* ]]
}

# --- the scenario -------------------------------------------------------------

# sc_scenario: the reference, then each run of SC_RUNS the program supports
# (the others are skipped, saying why). 0, or 1 after a failure.
sc_scenario() {
    local spec why runs=() rc=0
    if [ ${#SC_RUNS[@]} -eq 0 ]; then
        for spec in "${SC_ALL_MODES[@]}"; do SC_RUNS+=("$spec:$spec"); done
    fi
    for spec in "${SC_RUNS[@]}"; do
        # shellcheck disable=SC2086 # the modes are words
        why=$(sc_unsupported ${spec#*:})
        if [ -n "$why" ]; then
            sc_check SKIP "${spec%%:*}" "$why"
        else
            runs+=("$spec")
        fi
    done
    [ ${#runs[@]} -gt 0 ] || return 0
    sc_reference || return 1
    for spec in "${runs[@]}"; do
        # shellcheck disable=SC2086
        sc_run "${spec%%:*}" ${spec#*:} || rc=1
    done
    return $rc
}

# sc_unsupported MODE...: why these modes cannot run (nothing when they can).
sc_unsupported() {
    local m
    for m; do
        if ! sc_in "$m" "${SC_MODES[@]}" "${SC_REFUSES[@]}"; then
            echo "$SC_NAME does not support $m (its modes: $(echo "${SC_MODES[@]}" "${SC_REFUSES[@]}"))"
            return 0
        fi
        if [ "$m" = save-restore ]; then
            sc_criu_missing
            return 0
        fi
    done
}

# Why save-restore cannot run here (nothing when it can). CRIU is looked for
# where gpuckpt looks (gpuckpt save --help).
sc_criu_missing() {
    local c
    if [ "$(id -u)" -ne 0 ]; then
        echo "save-restore needs root (CRIU)"
        return 0
    fi
    for c in "${TCGPU_CRIU:-}" "$(command -v criu || true)" /usr/local/sbin/criu /usr/sbin/criu; do
        if [ -n "$c" ] && [ -x "$c" ]; then return 0; fi
    done
    echo "save-restore needs criu (TCGPU_CRIU, on PATH, in /usr/local/sbin or /usr/sbin)"
}

# sc_reference: the program without tcgpu; sets SC_REF, its checksum.
sc_reference() {
    local out=$WORK/$SC_NAME-ref.out
    SC_LABEL=reference SC_REF=""
    run_fg "$SC_NAME-ref" "$SC_TIME" env "${SC_ENV[@]}" "${SC_CMD[@]}" ||
        { sc_fail "the program failed without tcgpu: $(tail_of "$out")"; return 1; }
    SC_REF=$(checksum_of "$out")
    [ -n "$SC_REF" ] || { sc_fail "no checksum line: $(tail_of "$out")"; return 1; }
    sc_check PASS reference "checksum $SC_REF (no tcgpu)"
    "$SC_OBSERVE" reference "$out"
}

# sc_run LABEL MODE...: one job under tcgpu with each MODE applied to it in
# turn, then its checksum. A run of plain alone goes at full speed.
sc_run() {
    local label=$1 m rc=0
    shift
    if [ "$*" = plain ]; then
        sc_begin "$label"
        run_fg "$SC_NAME-$label" "$SC_TIME" env "${SC_ENV[@]}" "$GPUCKPT" run -- "${SC_CMD[@]}" || rc=$?
        sc_verdict "$rc"
        return
    fi
    [[ " $* " != *" save-restore "?* ]] || { sc_begin "$label"; sc_fail "save-restore must be the run's last mode"; return 1; }
    sc_start "$label" || return 1
    for m; do
        sc_apply "$m" || { kill -9 "$SC_PID" 2>/dev/null || true; return 1; }
    done
    sc_end
}

# sc_begin LABEL: a new run (its output: $SC_OUT).
sc_begin() {
    SC_LABEL=$1 SC_OUT=$WORK/$SC_NAME-$1.out SC_PID="" SC_EXIT=""
    SC_DONE=() SC_SUSPENDS=0 SC_RELEASED=0 SC_KEPT=0 SC_HELD_MOST="" SC_MEM_FAILED=0
}

# sc_start LABEL: a new run: the job under tcgpu, slowed, mid-run (SC_PID).
sc_start() {
    sc_begin "$1"
    start_bg "$SC_OUT" setsid env "${SC_ENV[@]}" "$GPUCKPT" run -- "${SC_CMD[@]}" "${SC_SLOW[@]}"
    SC_PID=$BG
    wait_line "$SC_OUT" "$SC_READY" "$SC_TIME" "$SC_PID" ||
        { sc_fail "no line '$SC_READY': the job did not start: $(tail_of "$SC_OUT")"; return 1; }
    if ! "$GPUCKPT" status "$SC_PID" --wait 10 >/dev/null 2>&1; then
        kill -0 "$SC_PID" 2>/dev/null ||
            { sc_fail "the job ended before a mode could act: make it run longer"; return 1; }
        sc_fail "the job does not answer gpuckpt status: $(tail_of "$SC_OUT")"
        return 1
    fi
    "$SC_OBSERVE" running "$SC_PID"
    SC_HELD_RUNNING=$(sc_device_bytes "$SC_PID")
}

# sc_end: waits for the job (restored jobs are waited for by sc_restore),
# then its verdict.
sc_end() {
    local rc=0
    if [ -n "$SC_EXIT" ]; then
        rc=$SC_EXIT
    else
        wait_job "$SC_PID" "$SC_TIME" || rc=$?
    fi
    sc_verdict "$rc"
}

# sc_verdict RC: what the run's suspends showed, then its exit status and
# checksum.
sc_verdict() {
    local got
    sc_suspends_verdict
    got=$(checksum_of "$SC_OUT")
    [ "$1" -eq 0 ] || { sc_fail "exit $1 under tcgpu$(sc_done): $(tail_of "$SC_OUT")"; return 1; }
    [ "$got" = "$SC_REF" ] ||
        { sc_fail "checksum '$got' under tcgpu$(sc_done), reference $SC_REF ($(sc_determinism))"; return 1; }
    sc_check PASS "$SC_LABEL" "checksum $got under tcgpu$(sc_done)"
    "$SC_OBSERVE" finished "$SC_LABEL" "$SC_OUT"
}

# One result for the memory and one for the context over all the run's
# suspends (a failed one was reported when it happened).
sc_suspends_verdict() {
    [ "$SC_SUSPENDS" -gt 0 ] || return 0
    if [ -z "$SC_HELD_MOST" ]; then
        sc_check SKIP memory_released "no reading of the device memory a process holds"
    elif [ "$SC_MEM_FAILED" -eq 0 ]; then
        sc_check PASS memory_released "$SC_SUSPENDS suspends: at most $SC_HELD_MOST bytes held while suspended (running: $SC_HELD_RUNNING)"
    fi
    if [ "$SC_RELEASED" -gt 0 ]; then
        sc_check PASS context_released "$SC_RELEASED suspends handed the context to the driver"
    elif [ "$SC_KEPT" -gt 0 ]; then
        sc_check SKIP context_released "the driver kept the context: no checkpoint API"
    fi
}

# sc_done: the modes the run went through, each once with its count
# (", after checkpoint, suspend-host x3"; ", left alone").
sc_done() {
    if [ ${#SC_DONE[@]} -eq 0 ]; then
        echo ", left alone"
        return 0
    fi
    printf '%s\n' "${SC_DONE[@]}" | awk '
        !($0 in n) { order[++k] = $0 }
        { n[$0]++ }
        END { printf ", after"
              for (i = 1; i <= k; i++)
                  printf "%s %s%s", (i > 1 ? "," : ""), order[i], (n[order[i]] > 1 ? " x" n[order[i]] : "") }'
}

# On a mismatch: is the program itself deterministic?
sc_determinism() {
    local again
    run_fg "$SC_NAME-ref2" "$SC_TIME" env "${SC_ENV[@]}" "${SC_CMD[@]}" || true
    again=$(checksum_of "$WORK/$SC_NAME-ref2.out")
    if [ "$again" = "$SC_REF" ]; then
        echo "a second run without tcgpu gave the reference again"
    else
        echo "NONDETERMINISTIC: a second run without tcgpu gave '$again'"
    fi
}

# --- the modes ----------------------------------------------------------------

# sc_apply MODE: MODE on the running job, and what it must show.
sc_apply() {
    local mode=$1 dir=$WORK/$SC_NAME-$1
    [ "$mode" != plain ] || return 0
    # shellcheck disable=SC2086 # LO HI
    sleep_ms "$(random_ms $SC_PAUSE_MS)"
    kill -0 "$SC_PID" 2>/dev/null || { sc_fail "the job ended before $mode: make it run longer"; return 1; }
    case $mode in
        suspend-host) SC_ARGS=(suspend "$SC_PID") ;;
        suspend-image) SC_ARGS=(suspend "$SC_PID" -D "$dir") ;;
        suspend-keep-context) SC_ARGS=(suspend "$SC_PID" --keep-context) ;;
        checkpoint) SC_ARGS=(checkpoint "$SC_PID" -D "$dir") ;;
        save-restore) SC_ARGS=(save "$SC_PID" -D "$dir") ;;
        *) sc_fail "no mode '$mode' (modes: ${SC_ALL_MODES[*]})"; return 1 ;;
    esac
    if sc_in "$mode" "${SC_REFUSES[@]}"; then
        sc_refused "$mode" "$dir" || return 1
    else
        sc_gpuckpt "$mode" "${SC_ARGS[@]}" || return 1
        case $mode in
            suspend-*) sc_suspended "$mode" || return 1 ;;
            checkpoint) sc_checkpointed "$dir" || return 1 ;;
            save-restore) sc_restore "$dir" || return 1 ;;
        esac
    fi
    rm -rf "$dir"
}

# sc_gpuckpt MODE ARGS...: gpuckpt ARGS on the job; a failure is the run's.
sc_gpuckpt() {
    local mode=$1 rc=0 log=$WORK/$SC_NAME-gpuckpt.out
    shift
    "$GPUCKPT" "$@" >"$log" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || return 0
    if kill -0 "$SC_PID" 2>/dev/null; then
        sc_fail "$mode: gpuckpt $1 exited $rc: $(tail_of "$log")"
    else
        sc_fail "$mode: the job ended before gpuckpt $1 (make it run longer): $(tail_of "$log")"
    fi
}

# sc_refused MODE DIR: SC_ARGS refused, naming SC_REFUSAL, nothing left in
# DIR, the job still running.
sc_refused() {
    local mode=$1 dir=$2 rc=0 log=$WORK/$SC_NAME-gpuckpt.out
    "$GPUCKPT" "${SC_ARGS[@]}" >"$log" 2>&1 || rc=$?
    # save reports a process's refusal as the failure of the tree's save
    if [ "$rc" -eq 0 ] || { [ "$mode" != save-restore ] && [ "$rc" -ne 4 ]; }; then
        sc_fail "$mode: gpuckpt ${SC_ARGS[0]} exited $rc, not a refusal: $(tail_of "$log")"
        return 1
    fi
    grep -q -- "$SC_REFUSAL" "$log" || { sc_fail "$mode: the refusal does not name $SC_REFUSAL: $(tail_of "$log")"; return 1; }
    if [ -e "$dir" ] || compgen -G "$dir.tmp-*" >/dev/null; then
        sc_fail "$mode: a refused ${SC_ARGS[0]} left $(ls -d "$dir"*) behind"
        return 1
    fi
    sc_runs_on "$mode: after the refusal" || return 1
    SC_DONE+=("$mode refused")
}

# sc_runs_on WHEN: the job is running (or has ended: the verdict tells).
sc_runs_on() {
    local state
    state=$(status_of "$SC_PID" state)
    if [ -z "$state" ]; then
        # No answer: a job at its last steps has closed its control socket
        # and is on its way out; give it 5 s to be gone.
        for _ in $(seq 50); do kill -0 "$SC_PID" 2>/dev/null || return 0; sleep 0.1; done
    fi
    if [ "$state" != running ] && kill -0 "$SC_PID" 2>/dev/null; then
        sc_fail "$1, the job is '$state', not running"
        return 1
    fi
}

# sc_suspended MODE: the job suspended by MODE shows it; resume it.
sc_suspended() {
    local mode=$1
    sc_check_suspended "$mode" || return 1
    # shellcheck disable=SC2086
    sleep_ms "$(random_ms $SC_PAUSE_MS)"
    sc_gpuckpt "$mode" resume "$SC_PID" || return 1
    sc_runs_on "$mode: after the resume" || return 1
    "$SC_OBSERVE" resumed "$mode" "$SC_PID"
    SC_DONE+=("$mode")
}

# sc_check_suspended MODE: what the job suspended by MODE must show: tcgpu
# holds no device memory for it; the driver has its context unless MODE kept
# it (or the driver cannot take it); the device accounts to it no more than
# the limit for that (and, with the context kept, the context at least).
sc_check_suspended() {
    local mode=$1 st state drv gpu limit least=0 held
    st=$("$GPUCKPT" status "$SC_PID" --json 2>/dev/null || true)
    state=$(json_field "$st" state) drv=$(json_field "$st" driver_state) gpu=$(json_field "$st" gpu_bytes)
    if [ "$state" != suspended ] || [ "$gpu" != 0 ]; then
        sc_fail "$mode: state '$state' and gpu_bytes '$gpu' after the suspend"
        return 1
    fi
    SC_SUSPENDS=$((SC_SUSPENDS + 1))
    if [ "$mode" = suspend-keep-context ]; then
        [ "$drv" != checkpointed ] || { sc_fail "$mode: the driver took the context it should have left"; return 1; }
        limit=$((${SC_HELD_KEPT:?the environment sets it} + SC_STAYS))
        least=$((SC_CONTEXT_MIN + SC_STAYS))
    elif [ "$drv" = checkpointed ]; then
        limit=${SC_HELD_RELEASED:?the environment sets it}
        SC_RELEASED=$((SC_RELEASED + 1))
    elif [ "$SC_DRIVER_API" = required ]; then
        sc_fail "$mode: driver_state '$drv': the context was not handed to the driver"
        return 1
    else
        limit=$((${SC_HELD_KEPT:?the environment sets it} + SC_STAYS))
        SC_KEPT=$((SC_KEPT + 1))
    fi
    held=$(sc_held_below "$SC_PID" "$limit")
    note "$mode: $held bytes held while suspended (driver_state $drv; running: $SC_HELD_RUNNING)"
    "$SC_OBSERVE" suspended "$mode" "$SC_PID" "$held"
    [ -n "$held" ] || return 0
    if [ "$held" -gt "$limit" ] || [ "$held" -lt "$least" ]; then
        SC_MEM_FAILED=$((SC_MEM_FAILED + 1))
        sc_check FAIL memory_released "$mode: $held bytes held while suspended, want $least to $limit"
    fi
    if [ -z "$SC_HELD_MOST" ] || [ "$held" -gt "$SC_HELD_MOST" ]; then SC_HELD_MOST=$held; fi
}

# sc_device_bytes PID: SC_DEVICE_BYTES's reading (nothing without one).
sc_device_bytes() {
    if [ -n "$SC_DEVICE_BYTES" ]; then "$SC_DEVICE_BYTES" "$1"; fi
}

# sc_held_below PID LIMIT: polls for up to 3 s (NVML lags a release) until
# PID holds at most LIMIT; prints the last reading.
sc_held_below() {
    local i v=""
    for i in $(seq 1 30); do
        v=$(sc_device_bytes "$1")
        if [ -z "$v" ] || [ "$v" -le "$2" ]; then break; fi
        sleep 0.1
    done
    echo "$v"
}

# sc_checkpointed DIR: the job runs on; its image verifies and has totals.
sc_checkpointed() {
    local dir=$1 insp stored allocs raw
    sc_runs_on "checkpoint: after it" || return 1
    if "$GPUCKPT" verify "$dir" >"$WORK/$SC_NAME-verify.out" 2>&1; then
        sc_check PASS verify "$(tail_of "$WORK/$SC_NAME-verify.out" 1)"
    else
        sc_check FAIL verify "$(tail_of "$WORK/$SC_NAME-verify.out")"
    fi
    insp=$("$GPUCKPT" inspect "$dir" --json 2>/dev/null || true)
    { read -r stored; read -r allocs; read -r raw; } < <(json_get "$insp" totals.stored_bytes totals.allocations totals.raw_bytes)
    if [ -n "$stored" ]; then
        sc_check PASS inspect "$allocs allocations, $raw bytes -> $stored stored"
    else
        sc_check FAIL inspect "inspect --json gave no totals"
    fi
    "$SC_OBSERVE" checkpointed "$SC_PID" "$dir"
    SC_DONE+=(checkpoint)
}

# sc_restore DIR: after the save the job is gone, unfinished; the save
# verifies; gpuckpt restore runs it to its end (SC_EXIT: its exit status).
sc_restore() {
    local dir=$1 rc=0 t0 log=$WORK/$SC_NAME-restore.out
    wait_job "$SC_PID" 30 || true          # CRIU ended the tree: its pids must be free
    if grep -q '^checksum' "$SC_OUT"; then
        sc_fail "save-restore: the job ended before it was saved: make it run longer"
        return 1
    fi
    if "$GPUCKPT" verify "$dir" >"$WORK/$SC_NAME-save-verify.out" 2>&1; then
        sc_check PASS save_verify "$(tail_of "$WORK/$SC_NAME-save-verify.out" 1)"
    else
        sc_check FAIL save_verify "$(tail_of "$WORK/$SC_NAME-save-verify.out")"
    fi
    "$SC_OBSERVE" saved "$dir"
    # Without -d, gpuckpt restore is the tree's parent and exits with its status.
    t0=$SECONDS
    timeout -k 5 "$SC_TIME" "$GPUCKPT" restore -D "$dir" >"$log" 2>&1 || rc=$?
    "$SC_OBSERVE" restored "$((SECONDS - t0))"
    [ "$rc" -eq 0 ] || { sc_fail "save-restore: gpuckpt restore exited $rc: $(tail_of "$log") / $(tail_of "$SC_OUT")"; return 1; }
    SC_EXIT=0
    SC_DONE+=(save-restore)
}

# --- run as a command ---------------------------------------------------------

sc_main() {
    local lib="" desc m
    if [ "${1:-}" = --modes ]; then
        echo "${SC_ALL_MODES[*]}"
        return 0
    fi
    if [ "${1:-}" = --lib ]; then
        lib=${2:?--lib FILE}
        shift 2
    fi
    desc=${1:?usage: scenario.sh [--lib FILE] DESC [MODE...] | --modes}
    shift
    if [ -n "$lib" ]; then . "$lib"; fi
    . "$desc"
    for m; do
        sc_in "$m" "${SC_ALL_MODES[@]}" || { echo "scenario.sh: no mode '$m' (modes: ${SC_ALL_MODES[*]})" >&2; return 2; }
        SC_RUNS+=("$m:$m")
    done
    sc_scenario || return 1
    if [ "$SC_FAILED" -gt 0 ]; then return 1; fi
    if [ "$SC_PASSED" -eq 0 ]; then return 77; fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    sc_main "$@"
fi
