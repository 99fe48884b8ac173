"""Print, every 2 s while process PID lives, the RSS of its worker descendants (command lines with -B).

Usage: python rsswatch.py PID > rss.log
"""

import sys
import time

import psutil

root = psutil.Process(int(sys.argv[1]))
while root.is_running():
    try:
        rows = [k.memory_info().rss / 2**30 for k in root.children(recursive=True) if "-B" in k.cmdline()]
    except psutil.Error:  # a child ended between the listing and the reading
        rows = []
    if rows:
        print(time.strftime("%T"), " ".join(f"{r:.2f}G" for r in sorted(rows, reverse=True)), flush=True)
    time.sleep(2)
