#!/usr/bin/env bash
# Issue 27: bgp4's rows on the field's 300 K table (no constraints: 60 dims for alanine dipeptide,
# 120 for the tetrapeptide; the published tetrapeptide holds its X-H bonds, 98, by TA-BG's code):
# maximum-likelihood spline and spline-p4inv generators, 3 seeds each,
# raw and refined by AIS (20 levels, or 48 on the tetrapeptide's dense data; independence moves
# alone), then the table beside the published rows (run/scripts/benchmark_table.py). Study: run/results/benchmark-300K/.
#
# Needs the replica-exchange data of run/long_runs.sh (DATA). Resumable: run it again after a kill.
#
# STEPS: likelihood steps per run. The dipeptide's 50,000 frames (45,000 to train on) are few for
# 60 dims: the test NLL is best near 250-500 steps and the reverse ESS falls after 250 (0.28, 0.33,
# 0.20, 0.14 and 0.01 at 125, 250, 500, 1,000 and 2,000 steps, one seed each). 250 steps take about
# 2 min per run on one core; the AIS refinement of SAMPLES samples is most of the cost (about
# 3 min per 20,000 on one core). The tetrapeptide's probe (run/scripts/step_probe.sh DATA OUT
# 125 250 500 1000) also put its best test NLL and ESS at 250 steps (same study).
# FAB_STEPS > 0 adds FAB after the dipeptide's spline runs (`bgp4 sweep --init`): the table's FAB row,
# at FAB_BATCH samples per AIS run (2048 by default: at 512 FAB plateaus, 0.35 against 0.44 at 2048
# after 300 steps, one seed; FAB_STEPS=600 at 2048 gave 0.469 raw and 0.854 clipped after AIS(20) over 3 seeds,
# and 600 more steps from those runs (bgp4 sweep --init) 0.555 clipped without AIS and 0.904 clipped after AIS(20)).
# DENSE_STEPS > 0 adds the ML rows on the dense data (run/long_runs.sh: 500,000 frames 0.1 ps apart from two
# replica-exchange runs, ala2-300K-remd-dense-x2.h5), which do not overfit by 10,000 steps (the study's
# value; about 35-38 min of training per spline run and 39 per spline-p4inv run on one core), and with FAB_STEPS
# FAB after their spline runs too. DENSE_FILE names the dense file in DATA: ala2-300K-remd-dense-x4.h5 (four
# runs, 1,000,000 frames; run/long_runs.sh makes it) instead of the two-run x2. DENSE_WD > 0 trains those rows
# with the tetrapeptide's recipe below (AdamW weight decay DENSE_WD, the best test NLL's weights kept, AIS(48)) into
# OUT/ala2-dense-wdDENSE_WD, beside the plain rows' OUT/ala2-dense.
# ALA4_DENSE_STEPS > 0 adds the tetrapeptide's ML rows on its dense data (run/long_runs.sh:
# ala4-300K-remd-dense-s4.h5, 250,000 frames 0.1 ps apart) with the recipe of
# run/results/overfit-300K-tetrapeptide: weight decay 3 (ALA4_DENSE_WD), the weights of the best test NLL kept,
# refined by AIS(48) (49 evaluations a sample, the table's budget of 50). One spline seed gave 0.205 clipped raw and
# 0.718 after AIS(48) at 3,000 steps (21 min on one core), 0.273 and 0.733 at 6,000 (41 min): the test NLL still
# falls there. Without the decay the train-test NLL gap is 1.05 nats at 2,500 steps (0.20 with it) and the raw
# reverse ESS 0.079 clipped. ALA4_DENSE_FILE names another tetrapeptide file in DATA:
# ala4-hbonds-300K-remd-dense-s4.h5 (run/long_runs.sh) holds the X-H bonds, the published rows' target by
# TA-BG's code (98 flow dims), into OUT/ala4-dense-<file name without ala4- and .h5>.
# DENSE_KEEP_BEST=1 (with DENSE_WD=0: the weight-decay rows keep them anyway) keeps the best test NLL's
# weights in the plain dense rows and refines them by AIS(48), into
# OUT/ala2-dense-best: DENSE_STEPS=32000 with the x4 file is the 32,000-step row (0.808 and 0.818 clipped, 2 seeds;
# its runs measured the test NLL every 1,000 steps, this script every 500).
# FAB_REUSE (gradient steps per AIS batch) and FAB_LR_SCHEDULE (constant or cosine) are the 600 K study's FAB
# levers; FAB_REUSE=8 FAB_LR_SCHEDULE=cosine FAB_STEPS=2000 after that row is the FAB row of 0.848 clipped
# (seed 0), with the AIS levels of the rows it starts from. Non-default levers name the FAB folder
# (OUT/NAME-fab2048-r8-cosine), so runs with other settings never share one.
# ONLY_DENSE=1 leaves out the 50,000-frame sets (ala2, ala4), for a dense file of another system: with
# DENSE_FILE=ala2-amber96-300K-remd-dense-x4.h5 (run/long_runs.sh) the rows are on the published dipeptide
# target, Amber ff96 with OBC1; give them their own OUT.
#   bash run/benchmark_300K.sh [OUT] [DATA]
#   # STEPS=250 SAMPLES=100000 FAB_STEPS=0 FAB_BATCH=2048 FAB_REUSE=4 FAB_LR_SCHEDULE=constant DENSE_STEPS=0
#   # DENSE_FILE=ala2-300K-remd-dense-x2.h5 DENSE_WD=0 DENSE_KEEP_BEST=0 ONLY_DENSE=0 ALA4_DENSE_STEPS=0 ALA4_DENSE_WD=3
#   # ALA4_DENSE_FILE=ala4-300K-remd-dense-s4.h5
set -euo pipefail
out="${1:-out/benchmark-300K}"
data="${2:-data}"
steps="${STEPS:-250}"
samples="${SAMPLES:-100000}"
fab_steps="${FAB_STEPS:-0}"
fab_batch="${FAB_BATCH:-2048}"
fab_reuse="${FAB_REUSE:-4}"
fab_schedule="${FAB_LR_SCHEDULE:-constant}"
dense_steps="${DENSE_STEPS:-0}"
dense_file="${DENSE_FILE:-ala2-300K-remd-dense-x2.h5}"
dense_wd="${DENSE_WD:-0}"
dense_best="${DENSE_KEEP_BEST:-0}"
only_dense="${ONLY_DENSE:-0}"
ala4_dense_steps="${ALA4_DENSE_STEPS:-0}"
ala4_dense_wd="${ALA4_DENSE_WD:-3}"
ala4_dense_file="${ALA4_DENSE_FILE:-ala4-300K-remd-dense-s4.h5}"
[[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "STEPS must be a positive whole number, got '$steps'" >&2; exit 2; }
[[ $fab_steps =~ ^[0-9]+$ ]] || { echo "FAB_STEPS must be a whole number, got '$fab_steps'" >&2; exit 2; }
[[ $dense_steps =~ ^[0-9]+$ ]] || { echo "DENSE_STEPS must be a whole number, got '$dense_steps'" >&2; exit 2; }
[[ $fab_batch =~ ^[1-9][0-9]*$ ]] || { echo "FAB_BATCH must be a positive whole number, got '$fab_batch'" >&2; exit 2; }
[[ $fab_reuse =~ ^[1-9][0-9]*$ ]] || { echo "FAB_REUSE must be a positive whole number, got '$fab_reuse'" >&2; exit 2; }
[[ $fab_schedule =~ ^(constant|cosine)$ ]] || { echo "FAB_LR_SCHEDULE must be constant or cosine, got '$fab_schedule'" >&2; exit 2; }
[[ $dense_best =~ ^[01]$ ]] || { echo "DENSE_KEEP_BEST must be 0 or 1, got '$dense_best'" >&2; exit 2; }
[[ $only_dense =~ ^[01]$ ]] || { echo "ONLY_DENSE must be 0 or 1, got '$only_dense'" >&2; exit 2; }
[[ $ala4_dense_steps =~ ^[0-9]+$ ]] || { echo "ALA4_DENSE_STEPS must be a whole number, got '$ala4_dense_steps'" >&2; exit 2; }
[[ $ala4_dense_wd =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "ALA4_DENSE_WD must be a number >= 0, got '$ala4_dense_wd'" >&2; exit 2; }
[[ $dense_wd =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "DENSE_WD must be a number >= 0, got '$dense_wd'" >&2; exit 2; }
[[ $dense_file =~ ^[A-Za-z0-9._-]+\.h5$ ]] || { echo "DENSE_FILE must be a file name in DATA ending in .h5, got '$dense_file'" >&2; exit 2; }
[[ $ala4_dense_file =~ ^[A-Za-z0-9._-]+\.h5$ ]] || { echo "ALA4_DENSE_FILE must be a file name in DATA ending in .h5, got '$ala4_dense_file'" >&2; exit 2; }
# bgp4 sweep would simulate a missing data file with plain MD: these must be the replica-exchange files
# name:file:steps:eval every:AIS levels:extra train options
every() { echo $(( $1 < 5000 ? 50 : 500 )); }
sets=()
[ "$only_dense" = 1 ] ||
  sets=(ala2:ala2-300K-remd.h5:"$steps:$(every "$steps")":20: ala4:ala4-300K-remd.h5:"$steps:$(every "$steps")":20:)
if [ "$dense_steps" -gt 0 ] && [[ $dense_wd =~ ^0*(\.0*)?$ ]] && [ "$dense_best" = 1 ]; then
  sets+=(ala2-dense-best:"$dense_file:$dense_steps:$(every "$dense_steps")":48:--keep-best)
elif [ "$dense_steps" -gt 0 ] && [[ $dense_wd =~ ^0*(\.0*)?$ ]]; then
  sets+=(ala2-dense:"$dense_file:$dense_steps:$(every "$dense_steps")":20:)
elif [ "$dense_steps" -gt 0 ]; then
  sets+=(ala2-dense-wd"$dense_wd":"$dense_file:$dense_steps:$(every "$dense_steps")":48:"--weight-decay $dense_wd --keep-best")
fi
ala4_name=ala4-dense
[ "$ala4_dense_file" = ala4-300K-remd-dense-s4.h5 ] || { f="${ala4_dense_file%.h5}"; ala4_name="ala4-dense-${f#ala4-}"; }
[ "$ala4_dense_steps" -eq 0 ] ||
  sets+=("$ala4_name:$ala4_dense_file:$ala4_dense_steps":250:48:"--weight-decay $ala4_dense_wd --keep-best")
[ "${#sets[@]}" -gt 0 ] || { echo "ONLY_DENSE=1 without DENSE_STEPS or ALA4_DENSE_STEPS: nothing to run" >&2; exit 2; }
for set in "${sets[@]}"; do
  file="${set#*:}"; file="${file%%:*}"
  [ -f "$data/$file" ] || { echo "no $data/$file: make it with run/long_runs.sh" >&2; exit 2; }
done

dipeptide=()
tetrapeptide=()
for set in "${sets[@]}"; do
  IFS=: read -r name file n eval levels extra <<< "$set"
  # shellcheck disable=SC2086  # extra holds whole options
  bgp4 sweep --data "$data/$file" --models spline,spline-p4inv --seeds 3 \
    --steps "$n" --eval-every "$eval" --samples "$samples" --batch 512 --augment --objective ml \
    --energy-steps 0 --refine "$levels" --refine-steps 0 $extra --out "$out/$name" --quiet
  [[ $name == ala4* ]] && { tetrapeptide+=(--tetrapeptide "$out/$name"); continue; }
  dipeptide+=(--dipeptide "$out/$name")
  if [ "$fab_steps" -gt 0 ]; then
    # FAB after each likelihood run of the spline kind (sweep --init), raw and refined like the ML rows
    fab="$out/$name-fab$fab_batch"
    [ "$fab_reuse" = 4 ] || fab+="-r$fab_reuse"
    [ "$fab_schedule" = constant ] || fab+="-$fab_schedule"
    bgp4 sweep --init "$out/$name" --data "$data/$file" --models spline --seeds 3 --steps 0 \
      --objective fab --energy-steps "$fab_steps" --fab-reuse "$fab_reuse" --energy-lr-schedule "$fab_schedule" \
      --eval-every 100 --samples "$samples" --batch "$fab_batch" --augment \
      --refine "$levels" --refine-steps 0 --out "$fab" --quiet
    dipeptide+=(--dipeptide "$fab")
  fi
done
python run/scripts/benchmark_table.py "${dipeptide[@]}" "${tetrapeptide[@]}" --out "$out/table.md"
