"""A worker that will not stop: it ignores the stop signal (SIGUSR1) and SIGTERM, prints a
line every half second, and keeps a child process that ignores them too. herd must still
end it (and its child) when the stop's grace is over.

    python stubborn.py            # runs until killed
"""

import os
import signal
import subprocess
import sys
import time

for sig in (signal.SIGUSR1, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)  # ignored dispositions pass on to the child

rank = os.environ.get("RANK", "?")
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
print(f"rank={rank} stubborn pid={os.getpid()} child={child.pid}", flush=True)
n = 0
while True:
    n += 1
    print(f"rank={rank} tick={n}", flush=True)
    time.sleep(0.5)
