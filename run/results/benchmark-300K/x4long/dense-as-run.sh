#!/usr/bin/env bash
# $1 = seed
export OMP_NUM_THREADS=1
bgp4 simulate --out data/ala2-300K-remd-dense-s$1.h5 --temperature 300 --constraints none \
    --replica-exchange 300:600:4 --frames 250000 --save-every 100 --equilibration-ps 100 --seed $1 \
    --velocity-refresh exchange --quiet
