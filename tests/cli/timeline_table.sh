#!/usr/bin/env bash
# tools/timeline_table.py (the in-graph kernel table of device_check.sh timeline) on a hand-made trace in
# ts_kernel_trace's format: an eager kernel (not read), three replays of graph 3, the last cut short by the
# end of tracing (left out), and a second graph replayed once (not the default). In a replay, a runs
# 0–2 µs, b starts early (a programmatic launch) at 1 µs and ends at 5, a again 6–7: by hand, a step spans
# 7 µs, one starts every 10 µs, b moves the completion front by 3 µs in a 4 µs duration, 1 µs of which it ran
# before the front reached it (early), the second a waits 1 µs (a gap) and moves it by 1; gaps and marginals
# add up to the span.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup
cat > trace.csv <<'CSV'
start_ns,end_ns,graph_id,graph_node_id,correlation_id,stream_id,grid,block,dyn_smem,registers,name
1000,3000,0,0,5,7,1x1x1,32x1x1,0,10,_Z5eagerv
10000,12000,3,1,9,7,4x1x1,128x1x1,0,32,_Z1av
11000,15000,3,2,9,7,4x1x1,128x1x1,0,32,_Z1bv
16000,17000,3,3,9,7,1x1x1,128x1x1,0,32,_Z1av
20000,22000,3,1,11,7,4x1x1,128x1x1,0,32,_Z1av
21000,25000,3,2,11,7,4x1x1,128x1x1,0,32,_Z1bv
26000,27000,3,3,11,7,1x1x1,128x1x1,0,32,_Z1av
30000,32000,3,1,13,7,4x1x1,128x1x1,0,32,_Z1av
40000,49000,4,1,15,7,1x1x1,32x1x1,0,10,_Z1cv
CSV
out=$($PY "$repo/tools/timeline_table.py" trace.csv --sequence 3) || fail "timeline_table.py exited $?: $out"
grep -q "^graph 3: 2 whole steps of 3 kernels; step span median 7.0 µs .* one step every 10.0 µs" <<<"$out" ||
  fail "steps: $out"
grep -q "^a step: marginal 6.0 µs + gaps 1.0 µs; durations sum to 7.0 µs (overlap from early starts: 1.0 µs)" <<<"$out" ||
  fail "sums: $out"
grep -q "^| b | 1 | 3.0 | 42.9 % | 3.00 | 4.00 | 1.00 | 0.00 |$" <<<"$out" || fail "row of b: $out"
grep -q "^| a | 2 | 3.0 | 42.9 % | 1.50 | 1.50 | 0.00 | 0.50 |$" <<<"$out" || fail "row of a: $out"
grep -q "^| 1 | b | 1.00 | 4.00 | 1.00 | 0.00 | 3.00 |$" <<<"$out" || fail "sequence, b: $out"
grep -q "^| 2 | a | 6.00 | 1.00 | 0.00 | 1.00 | 1.00 |$" <<<"$out" || fail "sequence: $out"
out=$($PY "$repo/tools/timeline_table.py" trace.csv --graph 4) || fail "--graph 4 exited $?: $out"
grep -q "^graph 4: 1 whole steps of 1 kernels; step span median 9.0 µs" <<<"$out" || fail "--graph 4: $out"
# the same replays where every kernel has its own correlation id (cut at the first node's runs) and with a
# record CUPTI could not time (start 0: left out, counted): the same table
$PY - trace.csv own.csv <<'PYX'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
w = csv.DictWriter(open(sys.argv[2], "w", newline=""), fieldnames=rows[0].keys())
w.writeheader()
for i, r in enumerate(rows):
    r["correlation_id"] = str(100 + i)
    w.writerow(r)
w.writerow(dict(rows[1], start_ns="0", end_ns="0", correlation_id="999"))
PYX
out=$($PY "$repo/tools/timeline_table.py" trace.csv --sequence 3) || fail "timeline_table.py exited $?: $out"
own=$($PY "$repo/tools/timeline_table.py" own.csv --sequence 3) || fail "own correlation ids exited $?: $own"
grep -q "^(1 of 10 records had no timestamps and are left out)" <<<"$own" || fail "untimed record: $own"
[ "$(tail -n +2 <<<"$own")" = "$out" ] || fail "own correlation ids differ:\n$own\n---\n$out"
# --bytes: Nsight Compute's DRAM bytes by kernel name (a: 1 MB read + 0.5 written a launch, b: 6 MB), with
# --copy 3000 GB/s: 9 MB a step take 3 µs of its 7 (bubble 4); a moves 1.5 MB × 4 launches in 6 µs of marginal
# time over the two steps (1.00 TB/s), b 6 MB × 2 in 6 µs (2.00)
cat > ncu.csv <<'CSV'
==PROF== Connected to process
"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","a()","dram__bytes_read.sum","Mbyte","1.00"
"0","a()","dram__bytes_write.sum","Kbyte","500.00"
"0","a()","gpu__time_duration.sum","usecond","2.00"
"1","b()","dram__bytes_read.sum","Mbyte","6.00"
"1","b()","dram__bytes_write.sum","byte","0"
"1","b()","gpu__time_duration.sum","usecond","3.00"
"2","a()","dram__bytes_read.sum","Mbyte","1.00"
"2","a()","dram__bytes_write.sum","Kbyte","500.00"
"2","a()","gpu__time_duration.sum","usecond","1.00"
CSV
out=$($PY "$repo/tools/timeline_table.py" trace.csv --bytes ncu.csv --copy 3000) || fail "--bytes exited $?: $out"
grep -q "^bytes a step 9.0 MB (Nsight Compute's, by kernel name); at 3000 GB/s they take 3.0 µs of the step's 7.0: bubble 4.0 µs" <<<"$out" ||
  fail "--bytes summary: $out"
grep -q "^| a | 2 | 3.0 | 42.9 % | 1.50 | 1.50 | 0.00 | 0.50 | 1.50 | 1.00 |$" <<<"$out" || fail "--bytes row of a: $out"
grep -q "^| b | 1 | 3.0 | 42.9 % | 3.00 | 4.00 | 1.00 | 0.00 | 6.00 | 2.00 |$" <<<"$out" || fail "--bytes row of b: $out"
# --eager: the kernels launched outside graphs as one step (here the one eager kernel, 2 µs)
out=$($PY "$repo/tools/timeline_table.py" trace.csv --eager) || fail "--eager exited $?: $out"
grep -q "^1 kernels launched outside graphs, first start to last end 2.0 µs" <<<"$out" || fail "--eager: $out"
grep -q "^| eager | 1 | 2.0 | 100.0 % | 2.00 | 2.00 | 0.00 | 0.00 |$" <<<"$out" || fail "--eager row: $out"
# a trace without graph replays says so
head -2 trace.csv > eager.csv
if $PY "$repo/tools/timeline_table.py" eager.csv > err.txt 2>&1; then fail "a trace without graphs was accepted"; fi
grep -q "no kernel ran from a CUDA graph" err.txt || fail "no-graph message: $(cat err.txt)"
echo "timeline_table: steps, gaps, marginals, early starts and the sequence as computed by hand"
