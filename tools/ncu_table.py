#!/usr/bin/env python3
"""Per-kernel table of one decode step (or prompt) from an Nsight Compute CSV (scripts/device_check.sh):
kernels grouped by name, with launches, total and mean time, bytes moved and achieved TB/s, largest
total first, and the step's sum. ncu runs every kernel alone with cold caches, so short kernels read
high; the sum exceeds the graph step's time by the launch overlap that a graph and PDL give.

    python3 tools/ncu_table.py ncu.csv [top]"""
import csv, re, sys
from collections import defaultdict

def short(full):
    """A kernel's name with its template arguments, without namespaces or parameters (as timeline_table.py)."""
    full = re.sub(r"\(anonymous namespace\)::|<unnamed>::|ts_cu::|^void ", "", full)
    return re.sub(r"\(.*", "", full).strip()[:70]


def per_kernel(path):
    """{name: {"n": launch ids, "ns": time, "bytes": DRAM bytes read and written}} from an ncu CSV."""
    lines = open(path, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None: # ncu profiled nothing (the program failed or no kernel matched): say so, and what it said
        sys.exit(f"ncu_table: no kernel results in {path}; its last lines:\n" + "\n".join(lines[-5:]))
    per = defaultdict(lambda: {"n": set(), "ns": 0.0, "bytes": 0.0})
    for row in csv.DictReader(lines[start:]):
        name = short(row["Kernel Name"])
        k, unit, val = per[name], row["Metric Unit"], float(row["Metric Value"].replace(",", ""))
        k["n"].add(row["ID"])
        if row["Metric Name"] == "gpu__time_duration.sum":
            k["ns"] += val * {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6}[unit.lower()]
        elif row["Metric Name"].startswith("dram__bytes"): # other metrics (percentages, ...) are not summed
            scale = {"byte": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9}
            k["bytes"] += val * scale[unit.lower()]
    return per


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    per = per_kernel(path)
    rows = sorted(per.items(), key=lambda kv: -kv[1]["ns"])
    total_ns = sum(k["ns"] for _, k in rows)
    total_b = sum(k["bytes"] for _, k in rows)
    print("| kernel | launches | µs total | µs each | MB each | TB/s |\n|---|---|---|---|---|---|")
    for name, k in rows[:top]:
        n = len(k["n"])
        print(f"| {name} | {n} | {k['ns'] / 1e3:.1f} | {k['ns'] / 1e3 / n:.2f} | {k['bytes'] / 1e6 / n:.2f} | "
              f"{k['bytes'] / k['ns'] / 1e3 if k['ns'] else 0:.2f} |")
    launches = sum(len(k["n"]) for _, k in rows)
    print(f"| all ({len(rows)} kernels) | {launches} | {total_ns / 1e3:.1f} | | {total_b / 1e6:.1f} total | "
          f"{total_b / total_ns / 1e3 if total_ns else 0:.2f} |")

if __name__ == "__main__":
    main()
