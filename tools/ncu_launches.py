#!/usr/bin/env python3
"""The launches of an Nsight Compute CSV (--csv --log-file, with the metrics gpu__time_duration.sum,
launch__grid_size, dram__bytes_read.sum and lts__t_bytes.sum) grouped by kernel and grid, slowest in
total first: launches, µs each, L2 throughput and DRAM bytes read each (scripts/device_check.sh gemm).

    python3 tools/ncu_launches.py ncu.csv
"""
import csv, sys, collections
lines = open(sys.argv[1], errors="replace").read().splitlines()
rows = csv.DictReader(lines[next(i for i, l in enumerate(lines) if l.startswith('"ID"')):])
unit = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9}
per = collections.defaultdict(dict)
for r in rows:
    k = per[r["ID"]]
    k["name"] = r["Kernel Name"].replace("(anonymous namespace)::", "").replace("void ", "").split("(")[0][:40]
    k[r["Metric Name"]] = float(r["Metric Value"].replace(",", "")) * unit.get(r["Metric Unit"].lower(), 1)
groups = collections.defaultdict(list)
for k in per.values():
    groups[(k["name"], int(k.get("launch__grid_size", 0)))].append(k)
print("| kernel | grid | launches | µs each | L2 GB/s | DRAM MB each |\n|---|---|---|---|---|---|")
mean = lambda ks, m: sum(k.get(m, 0) for k in ks) / len(ks)
for (name, grid), ks in sorted(groups.items(), key=lambda kv: -sum(k.get("gpu__time_duration.sum", 0) for k in kv[1]))[:14]:
    t = mean(ks, "gpu__time_duration.sum")
    print(f"| {name} | {grid} | {len(ks)} | {t / 1e3:.1f} | {mean(ks, 'lts__t_bytes.sum') / t if t else 0:.0f} | "
          f"{mean(ks, 'dram__bytes_read.sum') / 1e6:.1f} |")
