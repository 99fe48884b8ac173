#!/usr/bin/env bash
# RSS of the sweep's Dask worker processes every 20 s, with the task each one's run logs last.
R=/root/bgp4-long/bench300-hbonds/ala4-dense-hbonds-300K-remd-dense-s4/runs
while pgrep -f "bgp4 sweep --data /root/bgp4-long/data/ala4-hbonds" >/dev/null; do
  for p in $(pgrep -f "multiprocessing.spawn"); do
    rss=$(ps -o rss= -p $p 2>/dev/null); [ -z "$rss" ] && continue
    task=$(grep -h "vm pid $p: task started" $R/*/log.txt 2>/dev/null | tail -1 | cut -c1-90)
    echo "$(date -u +%H:%M:%S) pid $p rss_mb $((rss/1024)) $task"
  done
  sleep 20
done
