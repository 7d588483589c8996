#!/usr/bin/env python3
"""Decode speed on a quiet and on a busy machine (issue 32).

    bench/busy_machine.py -m tl-q8.gguf [-r ROUNDS] [-n TOKENS] [--hog-cpu 1] LABEL=KVBOUND ...

Each round runs, for every binary, `kvbound bench decode -m MODEL -t T -n N
--json` with T = 1 and 2, first on the machine as it is, then with a CPU hog
(`taskset -c HOG_CPU sh -c 'while :; do :; done'`) pinned beside the run; the
hog is killed after each round. Before each run it waits (up to 5 minutes) for
the machine to be idle apart from the hog, and it records the CPU time other
processes used during the run ("foreign", in cores); runs with foreign > 0.15
are left out of the medians. Prints one line per run, then the medians.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HZ = os.sysconf('SC_CLK_TCK')


def busy_jiffies():
    with open('/proc/stat') as f:
        v = list(map(int, f.readline().split()[1:9]))
    return sum(v) - v[3] - v[4]  # all but idle and iowait


def wait_quiet(hog, limit=300):
    t0 = time.time()
    while time.time() - t0 < limit:
        b0 = busy_jiffies()
        time.sleep(0.5)
        if (busy_jiffies() - b0) / HZ / 0.5 - (1 if hog else 0) < 0.1:
            return
        time.sleep(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('-m', '--model', required=True)
    ap.add_argument('-r', '--rounds', type=int, default=5)
    ap.add_argument('-n', '--tokens', type=int, default=32)
    ap.add_argument('--hog-cpu', default='1')
    ap.add_argument('bins', nargs='+', help='LABEL=path/to/kvbound')
    a = ap.parse_args()
    bins = [b.split('=', 1) for b in a.bins]
    res = {}
    for r in range(a.rounds):
        for hog in (0, 1):
            hp = subprocess.Popen(['taskset', '-c', a.hog_cpu, 'sh', '-c', 'while :; do :; done']) if hog else None
            try:
                if hog:
                    time.sleep(0.3)
                for label, path in bins:
                    for t in (1, 2):
                        wait_quiet(hog)
                        ru0, b0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_jiffies(), time.time()
                        p = subprocess.run([path, 'bench', 'decode', '-m', a.model, '-t', str(t), '-n', str(a.tokens), '--json'],
                                           capture_output=True, text=True)
                        w, b1, ru1 = time.time() - w0, busy_jiffies(), resource.getrusage(resource.RUSAGE_CHILDREN)
                        ours = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
                        foreign = ((b1 - b0) / HZ - ours - (w if hog else 0)) / w
                        m = re.search(r'"tok_per_s":([0-9.]+)', p.stdout)
                        tps = float(m.group(1)) if m else None
                        print(f'round {r} hog={hog} {label} -t {t}: {tps} tok/s, foreign {foreign:.2f}', flush=True)
                        if tps is not None and foreign <= 0.15:
                            res.setdefault((hog, label, t), []).append(tps)
            finally:
                if hp:
                    hp.kill()
                    hp.wait()
    print('medians (tok/s):')
    for (hog, label, t), v in sorted(res.items()):
        print(f'  {"hog " if hog else "quiet"} {label:>12} -t {t}: {statistics.median(v):7.2f}  ({len(v)} runs)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
