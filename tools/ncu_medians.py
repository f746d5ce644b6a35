#!/usr/bin/env python3
"""The median of each metric over the launches of each (kernel, grid) in an `ncu --csv --metrics ...` log.

usage: ncu_medians.py LOG.csv [TOP]
One line a (kernel, grid): its launch count, then `metric median` for every metric (by name), or with TOP
the TOP largest (stall reasons: smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio are
shown as <reason>). Times are ncu's (gpu__time_duration: ns).
"""
import collections
import csv
import sys


def short(name):
    if name.startswith("smsp__average_warps_issue_stalled_"):
        return name[len("smsp__average_warps_issue_stalled_"):].replace("_per_issue_active.ratio", "")
    return name


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        sys.exit(f"ncu_medians: no CSV rows in {sys.argv[1]} (did ncu run?)")
    h = rows[0]
    k_n, k_g, k_m, k_v = (h.index(c) for c in ("Kernel Name", "Grid Size", "Metric Name", "Metric Value"))
    d = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows[1:]:
        d[(r[k_n][:60], r[k_g])][short(r[k_m])].append(float(r[k_v].replace(",", "")))
    for (name, grid), m in d.items():
        med = {k: sorted(v)[len(v) // 2] for k, v in m.items()}
        items = sorted(med.items(), key=lambda kv: -kv[1])[:top] if top else sorted(med.items())
        n = max(len(v) for v in m.values())
        print(f"{name:60s} {grid:14s} n={n:3d}  " + ", ".join(f"{k} {v:.4g}" for k, v in items))


main()
