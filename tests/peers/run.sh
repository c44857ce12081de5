#!/usr/bin/env bash
# numba-cuda's driver tests (numba.cuda.tests.cudadrv), written by others, run
# twice on simcuda: plain, then under tcgpu with the process suspended and
# resumed every ~0.5 s while they run. Fails when a test's outcome differs
# between the two runs (naming the tests), when the run under tcgpu had no
# successful suspend/resume cycle (it would pass vacuously), or when a
# suspend or resume failed other than by a refusal. README.md here says
# what and why.
#
# The pinned packages (requirements.txt) go into a venv under the build
# directory (PEERS_VENV, default BUILD/peers-venv), made on the first run
# and kept while requirements.txt stays the same. Skipped (77) when pip
# cannot reach the package index.
. "$(dirname "$0")/../sim/lib.sh"

HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${PEERS_VENV:-$B/peers-venv}
PY=$VENV/bin/python
# One run takes ~20 s on 2 cores; the bound is for a hang (a job left
# suspended, a deadlock), scaled like the other tests' in sanitizer builds.
RUN_SECS=$((300 * ${TCGPU_TEST_TIME_FACTOR:-1}))
CYCLE_SLEEP=0.5

# The driver numba loads is simcuda: cuda-bindings dlopens libcuda.so.1 by
# name, and LD_LIBRARY_PATH finds simcuda's first.
export LD_LIBRARY_PATH=$B/simcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# venv_ready: the venv holds exactly requirements.txt's packages (its copy
# of the file, written last, says the install completed).
venv_ready() {
    cmp -s "$HERE/requirements.txt" "$VENV/peers-requirements.txt" && [ -x "$PY" ]
}

# make_venv: a fresh venv with requirements.txt's wheels; exits 77 when the
# index cannot be reached, fails on any other install error.
make_venv() {
    note "installing requirements.txt into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV" >"$WORK/venv.out" 2>&1 ||
        fail "python3 -m venv failed (Debian: apt install python3-venv; scripts/setup.sh does): $(tail_of "$WORK/venv.out")"
    if ! "$PY" -m pip install -q --disable-pip-version-check --retries 2 --timeout 20 \
            --only-binary :all: --no-deps -r "$HERE/requirements.txt" >"$WORK/pip.out" 2>&1; then
        local offline
        offline=$(grep -m 1 -E 'NewConnectionError|Temporary failure in name resolution|Network is unreachable|ConnectTimeoutError|ProxyError|Max retries exceeded' "$WORK/pip.out" | cut -c1-300)
        if [ -n "$offline" ]; then
            rm -rf "$VENV"
            echo "skip: pip cannot reach the package index: $offline"
            exit 77
        fi
        fail "pip install -r requirements.txt failed: $(tail_of "$WORK/pip.out" 5)"
    fi
    "$PY" -m pip check >"$WORK/pip-check.out" 2>&1 ||
        fail "requirements.txt is not a complete set: $(tail_of "$WORK/pip-check.out" 5)"
    cp "$HERE/requirements.txt" "$VENV/peers-requirements.txt"
}

# alive PID: PID runs (a zombie does not).
alive() {
    kill -0 "$1" 2>/dev/null && [ "$(awk '{print $3}' /proc/"$1"/stat 2>/dev/null)" != Z ]
}

# cycles PID LOG: suspend and resume PID every $CYCLE_SLEEP s until it ends,
# in turn to host memory, with the context kept (every 4th) and to an image
# (every 5th); one line per attempt in LOG: "ok MODE", "refused: why",
# "no-socket" (before numba's cuInit, or ending), "failed: what".
cycles() {
    local pid=$1 log=$2 i=0 rc src opts mode
    while alive "$pid"; do
        sleep "$CYCLE_SLEEP"
        i=$((i + 1)) opts=() mode=host
        [ $((i % 4)) -eq 1 ] && opts=(--keep-context) mode=keep-context
        [ $((i % 5)) -eq 0 ] && opts=(-D "$WORK/img") mode=image
        rm -rf "$WORK/img"
        src=0; "$GPUCKPT" suspend "$pid" "${opts[@]}" -q --timeout 60 >"$WORK/op.out" 2>&1 || src=$?
        case $src in
            0) ;;
            3) echo no-socket >>"$log"; continue ;;
            4) echo "refused: $(tail_of "$WORK/op.out" 1)" >>"$log"; continue ;;
            *) alive "$pid" || break
               echo "failed: suspend ($mode) exited $src: $(tail_of "$WORK/op.out")" >>"$log" ;;
        esac
        # after a failed suspend too: never leave the job suspended
        rc=0; "$GPUCKPT" resume "$pid" -q --timeout 60 >"$WORK/op.out" 2>&1 || rc=$?
        if [ "$rc" -eq 0 ]; then
            [ "$src" -eq 0 ] && echo "ok $mode" >>"$log"
        elif [ "$src" -eq 0 ] || [ "$rc" -ne 4 ]; then
            alive "$pid" && echo "failed: resume ($mode) exited $rc: $(tail_of "$WORK/op.out")" >>"$log"
        fi
    done
}

# how_ended NAME RC: how the run NAME ended, and in which test
how_ended() {
    local why="exited $2"
    [ "$2" -eq 124 ] && why="ran past $RUN_SECS s and was killed"
    [ "$2" -gt 128 ] && why="died of SIG$(kill -l $(($2 - 128)))"
    echo "$why in $(grep -F ' ... ' "$WORK/$1.out" | tail -n 1 | cut -d' ' -f1,2)"
}

# outcomes NAME: the run's outcomes (test, outcome), sorted; "# done"
# ended the file or the run did not complete.
outcomes() {
    local f=$WORK/$1.outcomes
    [ "$(tail -n 1 "$f" 2>/dev/null)" = "# done" ] || fail "the $1 run did not complete: $(tail_of "$WORK/$1.out" 5)"
    grep -v "^#" "$f" | LC_ALL=C sort >"$WORK/$1.sorted"
}

# summary NAME: "N pass N skip ..." of the run
summary() { awk '{ print $2 }' "$WORK/$1.sorted" | sort | uniq -c | awk '{ printf "%s%d %s", (NR > 1 ? ", " : ""), $1, $2 }'; }

venv_ready || make_venv

# simcuda is the driver numba loads, or this tests nothing of ours
lib=$("$PY" -c '
from numba import cuda
cuda.current_context()
print(next(l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l))' 2>"$WORK/probe.out") ||
    fail "numba cannot open a context on simcuda: $(tail_of "$WORK/probe.out" 5)"
[ "$lib" -ef "$B/simcuda/libcuda.so.1" ] || fail "numba loaded $lib, not simcuda's libcuda.so.1"

cd "$WORK" || fail "cannot enter $WORK"
start=$SECONDS
rc=0; run_fg plain "$RUN_SECS" "$PY" "$HERE/cudadrv.py" "$HERE/cudadrv-deselect.txt" "$WORK/plain.outcomes" || rc=$?
[ "$rc" -eq 0 ] || fail "the plain run $(how_ended plain "$rc"): $(tail_of "$WORK/plain.out" 3)"
plain_secs=$((SECONDS - start))

start=$SECONDS
start_bg "$WORK/tcgpu.out" "$GPUCKPT" run -- "$PY" "$HERE/cudadrv.py" "$HERE/cudadrv-deselect.txt" "$WORK/tcgpu.outcomes"
pid=$BG
: >"$WORK/cycles.log"
cycles "$pid" "$WORK/cycles.log" &
cycler=$!
BG_PIDS+=("$cycler")
rc=0; wait_job "$pid" "$RUN_SECS" || rc=$?
wait "$cycler" || true
tcgpu_secs=$((SECONDS - start))
[ "$rc" -eq 0 ] || fail "the run under tcgpu $(how_ended tcgpu "$rc"): $(tail_of "$WORK/tcgpu.out" 3)"

ok=$(grep -c '^ok ' "$WORK/cycles.log" || true)
refused=$(grep -c '^refused' "$WORK/cycles.log" || true)
outcomes plain
outcomes tcgpu
note "plain: $(summary plain) in $plain_secs s"
note "under tcgpu: $(summary tcgpu) in $tcgpu_secs s; $ok suspend/resume cycles ($(grep '^ok ' "$WORK/cycles.log" | sort | uniq -c | awk '{ printf "%s%d %s", (NR > 1 ? ", " : ""), $1, $3 }')), $refused refused"
grep '^refused' "$WORK/cycles.log" | sort | uniq -c | sed 's/^/-- /' >&2 || true

diffs=$(LC_ALL=C join -a 1 -a 2 -e missing -o 0,1.2,2.2 "$WORK/plain.sorted" "$WORK/tcgpu.sorted" | awk '$2 != $3')
[ -z "$diffs" ] || fail "outcomes differ under tcgpu (test, plain, tcgpu):
$diffs"
if grep -q '^failed' "$WORK/cycles.log"; then
    fail "gpuckpt failed on the job: $(grep '^failed' "$WORK/cycles.log" | head -n 5)"
fi
[ "$ok" -gt 0 ] || fail "no suspend/resume cycle succeeded: $(sort "$WORK/cycles.log" | uniq -c | head -n 5 | xargs)"
echo "ok: $(wc -l <"$WORK/plain.sorted") outcomes alike plain and under tcgpu with $ok suspend/resume cycles"
