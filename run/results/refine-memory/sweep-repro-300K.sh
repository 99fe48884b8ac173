#!/usr/bin/env bash
# usage: run300.sh NAME [PYTHONPATH]: the x4 sweep's settings on a small 300 K, 60-dim data file
export OMP_NUM_THREADS=1
name=$1; [ -n "${2:-}" ] && export PYTHONPATH=$2
python -c "import bgp4; print(bgp4.__file__)" > /tmp/oom/$name.log
python -m bgp4.cli sweep --data /tmp/oom/d300.h5 --models spline --seeds 1 --steps 1500 --eval-every 500 --samples 20000 --batch 512 \
  --augment --objective ml --energy-steps 0 --refine 48 --refine-steps 0 --workers 1 --worker-memory 0 --quiet --out /tmp/oom/$name >> /tmp/oom/$name.log 2>&1 &
python /tmp/oom/rsswatch.py $! > /tmp/oom/$name-rss.log 2>&1
echo done >> /tmp/oom/$name.log
