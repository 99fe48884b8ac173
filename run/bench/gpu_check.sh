#!/usr/bin/env bash
# The CUDA paths, run once on a lent GPU machine, as one short script (6.5 min on an H200 in 2026-12; the most
# important sections first, each with a time limit):
#   1. MD: `bgp4 simulate` against bare OpenMM on OpenMM's CUDA platform (dipeptide, tetrapeptide),
#      and the Reference platform on one core of the same machine for comparison;
#   2. the energy bridge (OpenMMEnergy) on the CUDA platform against 16 Reference workers;
#   3. training on CUDA: the same spline maximum-likelihood run with --device cuda and --device cpu,
#      a short FAB energy phase on CUDA from it, and sampling on CUDA;
#   4. the hexapeptide (62 atoms, 148 dims): MD on CUDA, and the 600 K study's recipe (spline,
#      batch 512, augmented) trained on CUDA, for its steps/s.
# Every section prints `name: value` lines into OUT/gpu_check.log; a section that fails is logged
# and the next one runs.
#
#   bash run/bench/gpu_check.sh [OUT]
# Environment: BGP4_PLATFORM (CUDA), BGP4_DEVICE (cuda), BGP4_SCALE (1; smaller for a dry run on CPU),
# BGP4_WHEELS (a folder of wheels to install first into /tmp/site, for a machine with no package
# index; the CUDA libraries that OpenMM's plugin needs are then found among the installed ones).
# The wheels for a Python 3.12 machine whose torch brings CUDA 13 (those of 2026-12-04), fetched
# where pip works:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform any -d .whl openmm==8.6.1 openmm-cuda-13==8.6.1 mdtraj tables numexpr ndindex zuko \
#     pydantic pydantic_core annotated-types typing-inspection
set -uo pipefail
out="${1:-${OUT:-/tmp/bgp4-gpu-check}}"
platform="${BGP4_PLATFORM:-CUDA}"
device="${BGP4_DEVICE:-cuda}"
scale="${BGP4_SCALE:-1}"
mkdir -p "$out"
log="$out/gpu_check.log"
work="$(mktemp -d)"
if [ -n "${BGP4_WHEELS:-}" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$BGP4_WHEELS"/*.whl || exit 1
    export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    # PyTables looks for libblosc2.so by that name; its wheel carries a copy under a hashed name
    # (which spares carrying the blosc2 wheel as well)
    for lib in /tmp/site/tables.libs/libblosc2-*.so.*; do [ -e "$lib" ] && ln -sf "$lib" /tmp/site/tables.libs/libblosc2.so; done
    # the plugin's runpath points into the target folder; the CUDA 13 libraries live beside torch
    cudalibs=$(python3 -c "import glob, site; print(':'.join(sorted({p.rsplit('/', 1)[0] for d in site.getsitepackages() for p in glob.glob(d + '/nvidia/*/lib/lib*.so*')})))")
    export LD_LIBRARY_PATH="$cudalibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
n() { python3 -c "print(max(1, int($1 * $scale)))"; }

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log its output and wall time
    local name="$1" limit="$2"
    shift 2
    echo "== $name: $*" | tee -a "$log"
    local start
    start=$(date +%s.%N)
    timeout "$limit" "$@" 2>&1 | grep -v -E "it/s\]|s/it\]" | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    python3 -c "print(f'wall_s_$name: {$(date +%s.%N) - $start:.1f} (rc $rc)')" | tee -a "$log"
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    nproc
    python3 -c "import openmm, torch; print('openmm', openmm.__version__, [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())], openmm.Platform.getPluginLoadFailures()); print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())"
} 2>&1 | tee -a "$log"

step md_ala2_gpu 60 python3 run/bench/bench_md.py --platform "$platform" --replicas 1 --frames "$(n 5000)"
step energy_gpu 60 python3 run/bench/bench_energy.py --platform "$platform" --workers 1 --frames "$(n 4096)" --reps 3

data="$work/ala2-600K.h5"
step data 40 python3 -m bgp4.cli simulate --out "$data" --frames "$(n 20000)" --replicas "$(nproc)" --quiet
common=(--data "$data" --model spline --objective ml --steps "$(n 300)" --eval-every "$(n 150)" --compile off --quiet)
step train_cuda 60 python3 -m bgp4.cli train "${common[@]}" --device "$device" --out "$work/run-cuda"
step fab_cuda 60 python3 -m bgp4.cli train --data "$data" --model spline --init "$work/run-cuda" --steps 0 \
    --objective fab --energy-steps "$(n 40)" --fab-buffer "$(n 4096)" --device "$device" --out "$work/run-fab" --quiet
step sample_cuda 40 python3 -m bgp4.cli sample "$work/run-cuda" --n "$(n 20000)" --device "$device" --quiet
data6="$work/ala6-600K.h5"
step md_ala6_gpu 45 python3 run/bench/bench_md.py --platform "$platform" --replicas 1 --frames "$(n 3000)" \
    --molecule alanine-hexapeptide
step data6 60 python3 -m bgp4.cli simulate --molecule alanine-hexapeptide --out "$data6" --frames "$(n 16000)" \
    --replicas "$(nproc)" --equilibration-ps 5 --quiet
step train6_cuda 90 python3 -m bgp4.cli train --data "$data6" --model spline --objective ml --batch 512 --augment \
    --steps "$(n 600)" --eval-every "$(n 300)" --compile off --device "$device" --out "$work/run6-cuda" --quiet
step train_cpu 60 python3 -m bgp4.cli train "${common[@]}" --device cpu --out "$work/run-cpu"
step sample_cpu 30 python3 -m bgp4.cli sample "$work/run-cpu" --n "$(n 20000)" --device cpu --quiet
for run in run-cuda run-cpu run-fab run6-cuda; do
    python3 -c "import json, sys; print(sys.argv[2], json.load(open(sys.argv[1])))" "$work/$run/complete.json" "$run" 2>&1 |
        tee -a "$log"
done

step md_ala4_gpu 40 python3 run/bench/bench_md.py --platform "$platform" --replicas 1 --frames "$(n 5000)" \
    --molecule alanine-tetrapeptide
step md_ala2_ref 30 python3 run/bench/bench_md.py --platform Reference --replicas 1 --frames "$(n 5000)"
step energy_ref 30 python3 run/bench/bench_energy.py --platform Reference --workers "$(nproc)" --frames "$(n 4096)" --reps 3
rm -rf "$work"
