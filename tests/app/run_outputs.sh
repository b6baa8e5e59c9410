#!/usr/bin/env bash
# What a run leaves behind, and what it prints: an output folder holds one
# run (a new run refuses a folder with an earlier run's metrics or
# checkpoints, --overwrite replaces them); a run that exits 2 writes
# nothing (no folder, no record); scripts/plot_metrics.py joins a run and
# its restarts at the checkpoint's step; a restart whose schedule is not the
# checkpoint's says how the learning rate moves; logs under mpiexec are
# plain lines (no carriage returns, no escape codes), a terminal's too
# with TERM=dumb, and evaluations report their start; data.test_samples
# bounds the test set.
# Usage: run_outputs.sh <mpiexec> <tessera-train> <smoke deck> <source dir>
set -uo pipefail
mpiexec="$1" train="$2" deck="$3" source_dir="$4"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"

small=(--set data.train_samples=1024 --set data.test_samples=512 --set training.epochs=2
  --set training.log_every=4 --set checkpoint.every_steps=4 --set checkpoint.keep=10)
# run <name> <expected status> [args...]: tessera-train with its output in
# $scratch/<name>.log; counts a different exit status as a failure.
run() {
  local name="$1" expected="$2" rc=0
  shift 2
  timeout 300 "$train" "$deck" "${small[@]}" "$@" > "$scratch/$name.log" 2>&1 || rc=$?
  [ "$rc" -eq "$expected" ] ||
    { fail "$name: exit status $rc, expected $expected"; tail -5 "$scratch/$name.log"; }
}
has() {  # has <name> <text>: the run's output holds the text
  grep -qF -- "$2" "$scratch/$1.log" || { fail "$1: no '$2' in its output"; tail -5 "$scratch/$1.log"; }
}
records() {  # records <metrics file> <type>: how many records of that type
  /usr/bin/python3 -c '
import json, sys
print(sum(json.loads(l)["type"] == sys.argv[2] for l in open(sys.argv[1]) if l.strip()))' "$1" "$2"
}
fingerprint() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }

out="$scratch/out"
run first 0 --set "run.output_dir=$out"
has first "data: 1024 training, 0 validation and 512 test samples"
has first "evaluating on 512 test samples"
before=$(fingerprint "$out")
compgen -G "$out/checkpoints/step-*.h5" > /dev/null || fail "first: no checkpoints in $out/checkpoints"

# A new run in the same folder is refused; the earlier run is untouched.
run again 2 --set "run.output_dir=$out" --set training.epochs=1
has again "$out holds an earlier run"
has again "--restart latest"
has again "--overwrite"
[ "$(fingerprint "$out")" = "$before" ] && echo "ok: a second run in $out is refused, the first run's files untouched" ||
  fail "again: the refused run changed $out"

# --overwrite: the folder then holds the new run alone.
run replaced 0 --set "run.output_dir=$out" --set training.epochs=1 --overwrite
has replaced "metrics: $out/metrics.jsonl"
[ "$(records "$out/metrics.jsonl" run)" = 1 ] || fail "overwrite: $(records "$out/metrics.jsonl" run) run records"
checkpoints=("$out/checkpoints"/step-*.h5)
newest="${checkpoints[-1]}"
[ "$(basename "$newest")" = step-00000008.h5 ] && [ "$(cat "$out/checkpoints/latest")" = step-00000008.h5 ] &&
  echo "ok: --overwrite leaves one run record and the new run's checkpoints (latest $(cat "$out/checkpoints/latest"))" ||
  fail "overwrite: newest checkpoint $newest, latest $(cat "$out/checkpoints/latest")"

# A failed restart writes nothing: no new folder, no record in an old one.
run bad_restart_new 2 --set "run.output_dir=$scratch/never" --restart "$scratch/no-such.h5"
[ ! -e "$scratch/never" ] && echo "ok: a failed --restart creates no output folder" ||
  fail "bad_restart_new: created $scratch/never"
before=$(fingerprint "$out")
run bad_restart_old 2 --set "run.output_dir=$out" --restart "$scratch/no-such.h5" --set training.epochs=2
[ "$(fingerprint "$out")" = "$before" ] && echo "ok: a failed --restart leaves the run's folder and metrics as they were" ||
  fail "bad_restart_old: changed $out"

# A restart from step 4 with more epochs: the schedule moves, and says so;
# the plot joins the run and the restart (8 + 24 steps, 4 of them replaced).
run more_epochs 0 --set "run.output_dir=$out" --set training.epochs=4 --restart "$out/checkpoints/step-00000004.h5"
has more_epochs "note: the deck's schedule"
has more_epochs "the learning rate goes from"
changed=$(/usr/bin/python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(sum("schedule_changed" in x for x in r if x["type"] == "restart"))' "$out/metrics.jsonl")
[ "$changed" = 1 ] || fail "more_epochs: $changed restart records with schedule_changed"
plotted=$(cd "$source_dir/scripts" && /usr/bin/python3 -c '
import sys
from plot_metrics import load_run
steps, epochs = load_run(sys.argv[1])
print(" ".join(str(s["step"]) for s in steps), "|", " ".join(str(e["epoch"]) for e in epochs))' "$out/metrics.jsonl")
expected="$(seq -s ' ' 1 32) | 1 2 3 4"
[ "$plotted" = "$expected" ] && echo "ok: plot_metrics.py joins the run and its restart: steps 1-32, epochs 1-4" ||
  fail "plot_metrics.py: got '$plotted', expected '$expected'"
# A file written before failed restarts left no record: a lone run record
# then a restart still joins the pieces.
/usr/bin/python3 - "$scratch/old.jsonl" << 'EOF'
import json, sys
lines = [{"type": "run"}] + [{"type": "step", "step": s, "loss": 1.0} for s in range(1, 151)]
lines += [{"type": "run"}, {"type": "run"}, {"type": "restart", "step": 100}]
lines += [{"type": "step", "step": s, "loss": 0.5} for s in range(101, 151)]
with open(sys.argv[1], "w") as f:
    f.write("".join(json.dumps(x) + "\n" for x in lines))
EOF
count=$(cd "$source_dir/scripts" && /usr/bin/python3 -c '
import sys
from plot_metrics import load_run
steps, _ = load_run(sys.argv[1])
assert [s["step"] for s in steps] == list(range(1, 151)), steps
print(len(steps), sum(s["loss"] == 0.5 for s in steps))' "$scratch/old.jsonl")
[ "$count" = "150 50" ] && echo "ok: a failed restart's lone run record does not cut the history (150 steps plotted)" ||
  fail "plot_metrics.py on a file with a failed restart: '$count'"

# Logs: plain lines under mpiexec (Open MPI gives each rank a pty), and
# from a terminal whose TERM is dumb.
timeout 300 "$mpiexec" -n 2 "$train" "$deck" "${small[@]}" --set "run.output_dir=$scratch/mpi" \
  > "$scratch/mpi.log" 2>&1 || fail "mpi: exit status $?"
if grep -q $'\r\|\x1b' "$scratch/mpi.log"; then
  fail "mpi: carriage returns or escape codes in the log of mpiexec -n 2"
  grep -c $'\r' "$scratch/mpi.log"
else
  echo "ok: the log of mpiexec -n 2 holds plain lines only"
fi
has mpi "step 4/8"
has mpi "evaluating on 512 test samples"
if command -v script > /dev/null; then
  TERM=dumb script -qec "$train $deck ${small[*]} --set run.output_dir=$scratch/dumb" /dev/null \
    > "$scratch/dumb.log" 2>&1 || fail "dumb: exit status $?"
  if grep -q $'\x1b' "$scratch/dumb.log"; then fail "dumb: escape codes on a terminal with TERM=dumb"; else
    echo "ok: a terminal with TERM=dumb gets plain lines"; fi
  has dumb "step 4/8"
  TERM=xterm script -qec "$train $deck ${small[*]} --set run.output_dir=$scratch/bar --progress=bar" \
    /dev/null > "$scratch/bar.log" 2>&1 || fail "bar: exit status $?"
  grep -q $'\x1b\[K' "$scratch/bar.log" && has bar "evaluating on test samples [" ||
    fail "bar: --progress=bar drew no bar"
fi
run bad_progress 2 --set "run.output_dir=$scratch/p" --progress=sometimes
[ ! -e "$scratch/p" ] || fail "bad_progress: created its output folder"

[ "$failures" -eq 0 ] || exit 1
echo "PASS: run outputs"
