#!/usr/bin/env bash
# Images a user or another user can put in the way, and what a resume takes.
#
#   images.sh stale        gpuckpt resume PID -D OLD, OLD an earlier checkpoint of
#                          the same process (same ids, addresses, sizes): refused
#                          naming both images, the job stays suspended; a copy of
#                          the right image elsewhere is taken and left in place;
#                          the suspend's own image is removed after its resume;
#                          the job ends with the checksum of an uninterrupted run
#   images.sh fifo         a FIFO named manifest or data.0: verify, inspect and a
#                          resume answer at once with an error naming it (nothing
#                          blocks); with the file back the job resumes, right
#   images.sh zero-bomb    a valid image of 1000 ZERO chunks declaring 1 GiB each
#                          verifies in seconds and small memory; a resume from it
#                          is refused before its data is read
#   images.sh ratio-bomb   a zstd chunk declaring 1 GiB from 64 bytes: refused at
#                          open, naming the chunk
. "$(dirname "$0")/lib.sh"

start_job() { TRAIN_SLEEP_MS=10 start_train --mb 16 --steps 400 --print-every 40; }

# Runs CMD with a bound: a reader that blocks is the failure this guards against.
bounded() { timeout 20 "$@"; }

case "${1:?which case}" in
stale)
    start_job
    "$GPUCKPT" checkpoint "$pid" -D "$WORK/old" -q || fail "checkpoint failed"
    wait_for_line "$WORK/run.out" '^step 80'
    "$GPUCKPT" suspend "$pid" -D "$WORK/new" -q || fail "suspend failed"
    expect_exit 7 "$GPUCKPT" resume "$pid" -D "$WORK/old"
    grep -q "$WORK/old is not the image this process was suspended to" "$WORK/last.out" &&
        grep -q "$WORK/new" "$WORK/last.out" ||
        fail "the refusal does not name both images: $(cat "$WORK/last.out")"
    [ "$(status_of "$pid" state)" = suspended ] || fail "after the refused resume the job is not suspended"
    # The right image, copied elsewhere (as a save moves it): taken, and left there.
    cp -a "$WORK/new" "$WORK/copy"
    "$GPUCKPT" resume "$pid" -D "$WORK/copy" -q || fail "resume from a copy of the right image failed"
    [ -e "$WORK/copy/manifest" ] || fail "a resume removed an image it did not write"
    [ -e "$WORK/new/manifest" ] || fail "a resume from elsewhere removed the suspend's image"
    rm -rf "$WORK/new"
    # In place: the image is consumed by its resume.
    "$GPUCKPT" suspend "$pid" -D "$WORK/new" -q || fail "second suspend failed"
    "$GPUCKPT" resume "$pid" -q || fail "resume in place failed"
    [ ! -e "$WORK/new" ] || fail "the suspend's image is still there after its resume: $(ls "$WORK/new")"
    "$GPUCKPT" suspend "$pid" -D "$WORK/new" -q || fail "a suspend to the same name after the resume failed"
    "$GPUCKPT" resume "$pid" -q || fail "resume failed"
    finish_train
    ;;
fifo)
    mkdir "$WORK/f" && mkfifo "$WORK/f/manifest"
    expect_exit 7 bounded "$GPUCKPT" verify "$WORK/f"
    grep -q "manifest is a FIFO" "$WORK/last.out" || fail "verify does not say why: $(cat "$WORK/last.out")"
    expect_exit 7 bounded "$GPUCKPT" inspect "$WORK/f"
    start_job
    "$GPUCKPT" suspend "$pid" -D "$WORK/img" -q || fail "suspend failed"
    mv "$WORK/img/data.0" "$WORK/data.0"
    mkfifo "$WORK/img/data.0"
    expect_exit 7 bounded "$GPUCKPT" resume "$pid"
    grep -q "data.0 is a FIFO" "$WORK/last.out" || fail "the refusal does not say why: $(cat "$WORK/last.out")"
    expect_exit 7 bounded "$GPUCKPT" verify "$WORK/img"
    rm "$WORK/img/data.0"
    ln -s "$WORK/data.0" "$WORK/img/data.0"
    expect_exit 7 bounded "$GPUCKPT" resume "$pid"
    grep -q "data.0 is a symbolic link" "$WORK/last.out" || fail "a link is not refused: $(cat "$WORK/last.out")"
    [ "$(status_of "$pid" state)" = suspended ] || fail "after the refused resumes the job is not suspended"
    rm "$WORK/img/data.0"
    mv "$WORK/data.0" "$WORK/img/data.0"
    "$GPUCKPT" resume "$pid" -q || fail "resume with the file back failed"
    finish_train
    ;;
zero-bomb)
    "$PROGS/craft_image" "$WORK/bomb" zero-bomb 1000 || fail "cannot craft the image"
    size=$(du -sk "$WORK/bomb" | cut -f1)
    t0=$(date +%s%N)
    rc=0
    bounded /usr/bin/time -f '%M' -o "$WORK/rss" "$GPUCKPT" verify "$WORK/bomb" >"$WORK/last.out" 2>&1 || rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ "$rc" -eq 0 ] || fail "verify of a valid image exited $rc: $(cat "$WORK/last.out")"
    rss=$(tail -n 1 "$WORK/rss")
    [ "$ms" -lt 5000 ] || fail "verify of a $size KiB image took $ms ms"
    [ "$rss" -lt 65536 ] || fail "verify of a $size KiB image needed $rss KiB of memory"
    note "verified $size KiB declaring 1000 GiB in $ms ms, $rss KiB resident"
    start_job
    "$GPUCKPT" suspend "$pid" -D "$WORK/img" -q || fail "suspend failed"
    expect_exit 7 bounded "$GPUCKPT" resume "$pid" -D "$WORK/bomb"
    grep -q "is not the image this process was suspended to" "$WORK/last.out" ||
        fail "unclear refusal: $(cat "$WORK/last.out")"
    "$GPUCKPT" resume "$pid" -q || fail "resume failed"
    finish_train
    ;;
ratio-bomb)
    "$PROGS/craft_image" "$WORK/bomb" ratio-bomb || fail "cannot craft the image"
    expect_exit 7 bounded "$GPUCKPT" verify "$WORK/bomb"
    grep -q "declares 1073741824 bytes from 64 stored" "$WORK/last.out" ||
        fail "the refusal does not name the chunk: $(cat "$WORK/last.out")"
    ;;
*) fail "unknown case $1" ;;
esac
echo "ok: $1"
