#!/usr/bin/env bash
# The demo, on the simulated GPU (tests/simcuda): the example training loop.
# Usage: scripts/demo.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: demo.sh BUILD_DIR}
export SIMCUDA_SHM=/simcuda-demo-$$
export SIMCUDA_DEVICE_MEM=${SIMCUDA_DEVICE_MEM:-2G}
trap 'rm -f /dev/shm"$SIMCUDA_SHM"' EXIT
"$build/examples/train/train" --steps 100 --print-every 10
