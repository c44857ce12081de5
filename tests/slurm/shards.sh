#!/usr/bin/env bash
# Fractional GPUs on a real Slurm (docs/slurm.md, "Fractional GPUs"): two
# jobs of nobody, each of 2 of the 4 shards of a GPU (gres/shard), on node
# na (two GPUs of 256 MiB, two CPUs: two jobs at once), under tcgpu-slurm.
# Slurm runs both at once on one GPU; each is held to half of it (128 MiB:
# cuMemGetInfo says so, and an allocation beyond it fails with out of
# memory while the GPU has room), and its log says which limit it got.
. "$(dirname "$0")/cluster.sh"

PROBE=$B/tests/sim/tcgpud_meminfo
[ -x "$PROBE" ] || fail "$PROBE was not built"

start_cluster
cat >"$HOME_N/shard.sh" <<EOF
#!/bin/bash
# 64 MiB held, 100 more asked: within 256 MiB, beyond half of it
srun tcgpu-slurm -- sh -c 'echo "gpu=\$CUDA_VISIBLE_DEVICES"; $PROBE 64 100 && sleep 6'
EOF
chmod 755 "$HOME_N/shard.sh"
chown "$NOBODY" "$HOME_N/shard.sh"
jobs=()
for i in 1 2; do
    jobs+=("$(as_nobody env PATH="$B/slurm:$PATH" TCGPU_RUN_DIR="$HOME_N/run" \
        sbatch --parsable -w na -N1 -n1 --gres=shard:2 -J "shard$i" -D "$HOME_N" \
        -o "$HOME_N/shard-%j.out" "$HOME_N/shard.sh")")
done
note "jobs ${jobs[*]}: 2 shards each, on na (2 GPUs of 4 shards)"

set_phase "waiting for the two jobs to run together"
end=$((SECONDS + 60))
until [ "$(squeue -h -t RUNNING -w na -o %i | wc -l)" -eq 2 ]; do
    [ $SECONDS -ge $end ] && fail "the two shard jobs never ran at once: $(squeue -h -o '%i %T %r')"
    sleep 0.2
done
note "both run on na at once"

declare -A on_gpu=()
for j in "${jobs[@]}"; do
    out=$HOME_N/shard-$j.out
    wait_job_state "$j" COMPLETED 60
    grep -q '^total=128 free=6[0-4]$' "$out" || fail "job $j: cuMemGetInfo is not half the GPU: $(tail_of "$out" 8)"
    grep -q '^more=oom$' "$out" || fail "job $j allocated beyond its 2 shards: $(tail_of "$out" 8)"
    grep -q "2 of the 4 shards of a GPU: memory limit 50.0000%, compute share 50%" "$out" ||
        fail "job $j: tcgpu-slurm did not say its limits: $(tail_of "$out" 8)"
    grep -q "memory limit 50.0000% of the GPU's 256 MiB: 128 MiB" "$out" ||
        fail "job $j: libtcgpu.so did not say its limit: $(tail_of "$out" 8)"
    g=$(sed -n 's/^gpu=//p' "$out")
    on_gpu[$g]=$(( ${on_gpu[$g]:-0} + 1 ))
done
# Slurm fills a GPU's shards first: both jobs on one GPU
[ "${#on_gpu[@]}" = 1 ] || fail "the jobs ran on different GPUs: ${!on_gpu[*]}"
note "both jobs on GPU ${!on_gpu[*]} at once, each held to 128 of its 256 MiB"
echo "ok: two shard jobs on one GPU at once, each held to half of it"
