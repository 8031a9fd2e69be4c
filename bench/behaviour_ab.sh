#!/usr/bin/env bash
# Behaviour of two trainrun binaries side by side (issue 44, "How to check behaviour is
# unchanged"): the same runs with each, compared on exit codes, every logged loss, the final
# parameter checksums and the events.
#   bench/behaviour_ab.sh BIN_A BIN_B
# The runs (all on the built-in Markov source or on shards `data prepare` makes from the repo's
# own text; logging.every=1 so every step's loss is compared):
#   quickstart        configs/quickstart.yaml as the README runs it (all 400 steps, logging.every=1)
#   2ranks            the quick start's model, 2 ranks, 60 steps
#   zero1-then-1rank  TINY on 2 ranks with ZeRO-1, killed at step 15 (exit fault), resumed on 1
#   nan-rollback      TINY, NaN gradients from step 8: two rollbacks to step 5, then exit 7
#   inf-rollback      TINY, infinite weights after step 8: one rollback, then it finishes
#   llama-tied, llama-untied, dropout, mlp, bf16   TINY with that model or precision, 30 steps
#   mix-resume        a 2-source data.mix killed at step 9 and resumed; each binary's resumed run
#                     must also equal its own uninterrupted run (mix) bit for bit
#   doc-masking       document masking on 40 packed documents (llama)
# Each row compares A with B: the exit codes (of each launch), the train and eval losses by step,
# the last parameter checksum of every rank (its logs/rank-N.log), and the (event, step) list of
# metrics.jsonl without the timing-driven ones (straggler, slow_collectives).
# AB_EXTRA_A / AB_EXTRA_B: extra arguments appended to every fresh run of A / B (not to
# --resume, which takes the checkpoint's config), e.g. AB_EXTRA_B="--set seed=7" to see that the
# script notices a difference. RUNS (bench/lib.sh): where the run directories go.
# About 20 s on 2 cores (both binaries); exit status 1 when anything differs.
# shellcheck disable=SC2154
a=$(realpath "${1:?usage: bench/behaviour_ab.sh BIN_A BIN_B}")
b=$(realpath "${2:?usage: bench/behaviour_ab.sh BIN_A BIN_B}")
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
declare -A bins=([A]=$a [B]=$b) codes=()
read -r -a extra_a <<<"${AB_EXTRA_A:-}"
read -r -a extra_b <<<"${AB_EXTRA_B:-}"
QS=configs/quickstart.yaml
# tests/integration/conftest.py's TINY: a few ms a step.
TINY=(model.n_layer=1 model.d_model=32 model.n_head=2 model.seq_len=16 model.vocab_size=32
      train.batch_size=8 train.eval_every=0 optimizer.warmup_steps=2 data.synthetic_tokens=65536)
LLAMA=(model.type=llama model.n_head=4 model.n_kv_head=2 model.ffn_hidden=0)

sets() { for s in "$@"; do printf -- '--set\n%s\n' "$s"; done; }

# launch SIDE NAME LABEL [VAR=VALUE...] -- ARG...: SIDE's binary with ARG (and the VARs in its
# environment, nothing inherited that changes a run); "LABEL:exit code" is added to the row.
launch() {
  local side=$1 name=$2 label=$3 rc=0
  shift 3
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  env -u TRAINRUN_FAULTS -u OMP_NUM_THREADS -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "${vars[@]}" \
    "${bins[$side]}" "$@" >>"$RUNS/ab-$side/$name.log" 2>&1 || rc=$?
  codes[$side/$name]+="${codes[$side/$name]:+ }$label:$rc"
}

# fresh SIDE NAME [VAR=VALUE...] -- CONFIG [KEY=VALUE...]: a new run in $RUNS/ab-SIDE/NAME.
fresh() {
  local side=$1 name=$2
  shift 2
  local vars=()
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  local config=$2
  shift 2
  local more=("${extra_a[@]}")
  [[ $side == B ]] && more=("${extra_b[@]}")
  mapfile -t kv < <(sets "$@" logging.every=1 distributed.oversubscribe=true)
  launch "$side" "$name" run "${vars[@]}" -- "$config" --run-dir "$RUNS/ab-$side/$name" \
    "${kv[@]}" "${more[@]}"
}

resume() {  # SIDE NAME [KEY=VALUE...]: --resume the run
  local side=$1 name=$2
  shift 2
  mapfile -t kv < <(sets "$@")
  launch "$side" "$name" resume -- --resume "$RUNS/ab-$side/$name" "${kv[@]}"
}

# prepare SIDE: the shard sources of the mixture and of document masking, by SIDE's binary.
prepare() {
  local d="$RUNS/ab-$1/data"
  mkdir -p "$d/docs"
  head -c 40000 README.md >"$d/web.txt"
  head -c 300 docs/data-format.md >"$d/tiny.txt"
  python3 - "$d/docs" <<'EOF'
import pathlib, sys
text, at = pathlib.Path("README.md").read_bytes(), 0
for i in range(40):  # 40 documents of 12-55 bytes, as tests/integration/test_documents.py
    n = (12, 25, 40, 55)[i % 4]
    (pathlib.Path(sys.argv[1]) / f"{i:02d}.txt").write_bytes(text[at:at + n])
    at += n
EOF
  launch "$1" data prepare-web -- data prepare "$d/web.txt" --out "$d/web"
  launch "$1" data prepare-tiny -- data prepare "$d/tiny.txt" --out "$d/tiny"
  launch "$1" data prepare-docs -- data prepare "$d/docs" --out "$d/shards" --val-fraction 0.2
}

echo "## behaviour_ab: A = $a, B = $b"
if [[ -n "${AB_EXTRA_A:-}${AB_EXTRA_B:-}" ]]; then
  echo "extra arguments: A: ${AB_EXTRA_A:-none}, B: ${AB_EXTRA_B:-none}"
fi
load_line
for side in A B; do
  rm -rf "${RUNS:?}/ab-$side"
  mkdir -p "$RUNS/ab-$side"
  d="$RUNS/ab-$side/data"
  prepare "$side"
  fresh "$side" quickstart -- "$QS"
  fresh "$side" 2ranks -- "$QS" train.steps=60 train.eval_every=20 distributed.nproc=2
  fresh "$side" zero1-then-1rank TRAINRUN_FAULTS=exit:step=15:code=9 -- "$QS" "${TINY[@]}" \
    train.steps=30 checkpoint.every=10 distributed.nproc=2 distributed.zero=1
  resume "$side" zero1-then-1rank distributed.nproc=1 distributed.zero=0
  fresh "$side" nan-rollback TRAINRUN_FAULTS=nan:from=8 -- "$QS" "${TINY[@]}" train.steps=30 \
    checkpoint.every=5 fault_tolerance.max_bad_steps=2 fault_tolerance.max_rollbacks=2
  fresh "$side" inf-rollback TRAINRUN_FAULTS=inf:step=8 -- "$QS" "${TINY[@]}" train.steps=30 \
    checkpoint.every=5 fault_tolerance.max_bad_steps=2
  fresh "$side" llama-tied -- "$QS" "${TINY[@]}" "${LLAMA[@]}" model.tie_embeddings=true \
    train.steps=30
  fresh "$side" llama-untied -- "$QS" "${TINY[@]}" "${LLAMA[@]}" model.tie_embeddings=false \
    train.steps=30
  fresh "$side" dropout -- "$QS" "${TINY[@]}" model.dropout=0.1 train.steps=30
  fresh "$side" mlp -- "$QS" "${TINY[@]}" model.type=mlp "model.hidden=[64, 64]" \
    model.activation=relu train.steps=30
  fresh "$side" bf16 -- "$QS" "${TINY[@]}" train.precision=bf16 train.steps=30
  tiny="{path: $d/tiny/train.bin, weight: 0.25, name: tiny, val: $d/tiny/val.bin}"
  mix=("${TINY[@]/data.synthetic_tokens=65536/data.synthetic=}" model.vocab_size=256
       train.steps=12 checkpoint.every=6 train.batch_size=8
       "data.mix=[{path: $d/web, weight: 0.75}, $tiny]")
  fresh "$side" mix -- "$QS" "${mix[@]}"
  fresh "$side" mix-resume TRAINRUN_FAULTS=exit:step=9:code=9 -- "$QS" "${mix[@]}"
  resume "$side" mix-resume
  fresh "$side" doc-masking -- "$QS" "${TINY[@]/data.synthetic_tokens=65536/data.synthetic=}" \
    "${LLAMA[@]}" model.vocab_size=256 model.seq_len=32 train.steps=8 \
    "data.train=$d/shards/train.bin" "data.val=$d/shards/val.bin" data.document_masking=true \
    data.eot=0
done

names=(data quickstart 2ranks zero1-then-1rank nan-rollback inf-rollback llama-tied llama-untied
       dropout mlp bf16 mix mix-resume doc-masking)
for n in "${names[@]}"; do printf '%s\t%s\t%s\n' "$n" "${codes[A/$n]}" "${codes[B/$n]}"; done \
  >"$RUNS/ab-exit-codes.tsv"
status=0
python3 - "$RUNS" <<'EOF' || status=$?
import json, pathlib, re, sys

runs = pathlib.Path(sys.argv[1])
TIMING = {"straggler", "slow_collectives"}  # decided by the clock, not by the computation


def observe(d):
    """Losses (train and eval rows, by step), each rank's last checksum, (event, step) list."""
    rows = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()] \
        if (d / "metrics.jsonl").exists() else []
    losses = [(r["kind"], r["step"], sorted((k, v) for k, v in r.items() if k.endswith("loss")))
              for r in rows if r["kind"] in ("train", "eval")]  # loss; eval: val_loss
    events = [(r["event"], r["step"]) for r in rows
              if r["kind"] == "event" and r["event"] not in TIMING]
    sums = {}
    for log in sorted((d / "logs").glob("rank-*.log")) if (d / "logs").is_dir() else []:
        m = re.findall(r"rank (\d+) parameter checksum ([0-9a-f]{16})", log.read_text())
        if m:
            sums[m[-1][0]] = m[-1][1]
    return {"losses": losses, "checksums": sums, "events": events}


def first_difference(key, a, b):
    if key == "losses":
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        row = (a + b)[at] if at >= len(a) else a[at]
        return f" from the {row[0]} row of step {row[1]} ({len(a)} vs {len(b)} rows)"
    return f": A {a} B {b}"


diffs = []
print("| run | A exit | B exit | losses identical? | checksum identical? | events identical? |")
print("| --- | --- | --- | --- | --- | --- |")
for line in (runs / "ab-exit-codes.tsv").read_text().splitlines():
    name, code_a, code_b = line.split("\t")
    obs = {s: observe(runs / f"ab-{s}" / name) for s in "AB"}
    if name == "data":  # the prepares: only their exit codes
        same = ["-"] * 3
    else:
        same = []
        for key in ("losses", "checksums", "events"):
            a, b = obs["A"][key], obs["B"][key]
            if not a and not b:
                same.append("none logged")
            else:
                same.append("yes" if a == b else "NO")
                if a != b:
                    diffs.append(f"{name}: {key} differ{first_difference(key, a, b)}")
    # Both sides failing alike is no pass: each run's last launch must end as the run intends,
    # and each run must train.
    for s, codes in (("A", code_a), ("B", code_b)):
        want = 7 if name == "nan-rollback" else 0
        if any(int(c.split(":")[1]) for c in codes.split()) if name == "data" else \
                int(codes.split()[-1].split(":")[1]) != want:
            diffs.append(f"{name}: {s} exited {codes}, want {want} (see {runs}/ab-{s}/{name}.log)")
        if name != "data" and not obs[s]["losses"]:
            diffs.append(f"{name}: {s} logged no losses")
    if code_a != code_b:
        diffs.append(f"{name}: exit codes {code_a} vs {code_b}")
    if name == "mix-resume":  # the resumed run against its own binary's uninterrupted run
        for s in "AB":
            whole = observe(runs / f"ab-{s}" / "mix")
            for key in ("losses", "checksums"):
                if obs[s][key] != whole[key]:
                    diffs.append(f"mix-resume: {s}'s resumed run has other {key} than its "
                                 f"uninterrupted run (mix)")
    print(f"| {name} | {code_a} | {code_b} | {' | '.join(same)} |")
print("all identical" if not diffs else "differences:\n  " + "\n  ".join(diffs))
sys.exit(1 if diffs else 0)
EOF
load_line
exit "$status"
