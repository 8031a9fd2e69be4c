#!/usr/bin/env bash
# Builds what the benchmarks need (once, up front) and runs every benchmark, printing each table.
# About 8-10 minutes on 2 idle cores; a loaded machine is slower and noisier (the load average
# is printed beside each table: compare runs only at similar load).
#   BUILD=build bench/run-all.sh
# S_* variables are assigned by load_summary (eval).
# shellcheck source=bench/lib.sh disable=SC2154
source "$(dirname "$0")/lib.sh"
echo "# trainrun benchmarks, $(date '+%Y-%m-%d %H:%M')"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(free -g | awk '/^Mem:/{print $2}') GiB"
load_line
ensure_built trainrun bench/bench_gemm bench/bench_allreduce bench/bench_checkpoint
echo
bench/train_cpu.sh
echo
echo "## bench_allreduce: 124M fp32 (GPT-2 small gradient), 2 ranks"
load_line
mpirun --allow-run-as-root -np 2 --bind-to none "$BUILD/bench/bench_allreduce" "${ALLREDUCE_MFLOATS:-124}" 3
echo
bench/comm_overlap.sh
echo
echo "## bench_checkpoint: GPT-2 small state (124M x 3 fp32)"
load_line
"$BUILD/bench/bench_checkpoint" "${CKPT_DIR:-/tmp}" 2
echo
bench/ckpt_overhead.sh
echo
bench/contention.sh
echo
echo "run directories: $RUNS (safe to delete)"
