#!/usr/bin/env bash
# The Prometheus endpoint's cost to the step loop: the same run with logging.prometheus_port off,
# on but not scraped, and on and scraped every 100 ms (by one Python process on this machine,
# 10x Prometheus's usual fastest interval), rounds alternating so all three see the same load.
#   bench/prometheus_overhead.sh [ROUNDS]       (default 3 rounds per config)
# First the cost of one publish (build/bench/bench_metrics_publish), then two configs: llm.c's
# CPU shape (4x256, T=128, B=8, 40 steps) and a tiny GPT (1x32, T=16, 3000 steps of well under a
# millisecond), where publishing every step (logging.every=1) weighs most. Throughput is wall-clock: steps per second between the first and last logged step of
# RUN_DIR/logs/rank-0.log (so the publish after each step counts), median over rounds.
# shellcheck source=bench/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
need_shakespeare
rounds=${1:-3}
port=$((20000 + RANDOM % 20000))

# steps/s of a run from its log's timestamps: (last - first) logged steps over their time.
steps_per_second() {
  python3 - "$RUNS/$1/logs/rank-0.log" <<'EOF'
import re, sys
from datetime import datetime
pts = []
for line in open(sys.argv[1]):
    m = re.match(r"\[(\S+ \S+)\] \[info\] step (\d+)/\d+ \| loss", line)
    if m:
        pts.append((datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S.%f"), int(m[2])))
(t0, s0), (t1, s1) = pts[1], pts[-1]  # from step 2: step 1 pays the warm-up
print(f"{(s1 - s0) / (t1 - t0).total_seconds():.2f}")
EOF
}

# scrape PORT: GET /metrics every 100 ms until killed, as one process does (a scraper that forks
# curl each time costs these 2 cores more than the endpoint); counts answers in $RUNS/scrapes.
scrape() {
  exec python3 - "$1" "$RUNS/scrapes" <<'EOF'
import sys, time, urllib.request
n = 0
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=1).read()
        n += 1
        open(sys.argv[2], "w").write(str(n))
    except OSError:
        pass
    time.sleep(0.1)
EOF
}

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

bench_config() {
  local label=$1 config=$2
  shift 2
  declare -A sps=([off]="" [on]="" [scraped]="")
  echo "### $label"
  for ((r = 1; r <= rounds; r++)); do
    for side in off on scraped; do
      local extra=() pid=""
      [[ $side != off ]] &&
        extra=(--set logging.prometheus_port=$port --set logging.prometheus_address=127.0.0.1)
      if [[ $side == scraped ]]; then
        echo 0 >"$RUNS/scrapes"
        scrape $port &
        pid=$!
      fi
      OMP_NUM_THREADS=2 train "prom-$side" "$config" --set logging.every=1 "$@" "${extra[@]}"
      [[ -n $pid ]] && kill "$pid" && wait "$pid" 2>/dev/null || true
      s=$(steps_per_second "prom-$side")
      sps[$side]+="$s "
      printf 'round %d %s: %s steps/s%s\n' "$r" "$side" "$s" \
        "$([[ $side == scraped ]] && echo " ($(cat "$RUNS/scrapes") scrapes answered)")"
    done
  done
  local off on scraped
  off=$(median <<<"${sps[off]}")
  on=$(median <<<"${sps[on]}")
  scraped=$(median <<<"${sps[scraped]}")
  printf '| endpoint | median steps/s | vs off |\n| --- | ---: | ---: |\n| off | %s | 1 |\n' "$off"
  printf '| on, not scraped | %s | %.3f |\n' "$on" "$(bc -l <<<"$on/$off")"
  printf '| on, scraped every 100 ms | %s | %.3f |\n' "$scraped" "$(bc -l <<<"$scraped/$off")"
}

echo "## prometheus_overhead: step loop with the endpoint off and on, OMP_NUM_THREADS=2"
load_line
ensure_built bench/bench_metrics_publish
"$BUILD/bench/bench_metrics_publish"
bench_config "llm.c CPU model (4x256, T=128, B=8), 40 steps" bench/configs/llmc-cpu.yaml \
  --set data.text="$SHAKESPEARE" --set train.steps=40
bench_config "tiny GPT (1x32, T=16, B=8), 3000 steps" configs/quickstart.yaml \
  --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.seq_len=16 \
  --set model.vocab_size=32 --set train.batch_size=8 --set data.synthetic_tokens=65536 \
  --set train.steps=3000 --set checkpoint.every=0
load_line
