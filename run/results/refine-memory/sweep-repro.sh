#!/usr/bin/env bash
# usage: run.sh NAME COMPILE
export OMP_NUM_THREADS=1
name=$1; comp=$2
( while true; do echo "$(date +%T) $(ps -eo rss,args --sort=-rss | grep -E 'python|bgp4' | grep -v grep | head -4 | awk '{printf "%.2fG %s %s %s | ", $1/1048576, $2, $3, $4}')"; sleep 5; done ) > /tmp/oom/$name-rss.log 2>&1 &
logger=$!
bgp4 sweep --data /tmp/oom/d.h5 --models spline --seeds 1 --steps 1500 --eval-every 500 --samples 20000 --batch 512 \
  --objective ml --energy-steps 0 --refine 48 --refine-steps 0 --workers 1 --worker-memory 0 --compile $comp --quiet --out /tmp/oom/$name > /tmp/oom/$name.log 2>&1
kill $logger
echo done >> /tmp/oom/$name.log
