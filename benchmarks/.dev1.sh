. benchmarks/device-env.sh
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|MHz|NUMA node"; free -g | head -2; df -h /tmp . | tail -2
python3 benchmarks/month_pgn.py --games 1000000 --out /tmp/m1m.pgn.zst --workers 16 2>&1 | tail -1
python3 benchmarks/convert_throughput.py --pgn /tmp/m1m.pgn.zst --workers 1,2,4,8,12,14,16 --json $OUT/scale-1m.json
python3 -c "
import json
for r in json.load(open('$OUT/scale-1m.json'))['results']: print(r['workers'], round(r['seconds'],2), round(r['main_cpu_seconds'],2), round(r['workers_cpu_seconds'],2), {k: round(v,2) for k,v in r['phases'].items()})"
