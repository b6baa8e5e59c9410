#!/usr/bin/env bash
# tessera-sweep end to end on 2 ranks, one OpenMP thread each.
# Part `grid`: the 8-trial sweep of lr_width.sweep.toml (1 rank per trial)
# finishes, ranks its trials by the objective and plots; its best trial
# equals a standalone tessera-train run of the deck with the same values,
# bit for bit (metrics and final weights); the same sweep killed with
# SIGKILL in the middle of a trial and started again keeps the trials it
# finished, resumes the cut one from its checkpoint, and ends with results
# identical to the uninterrupted sweep's; bad sweep files exit with status 2
# and file:line:column on every rank; a directory of another sweep is
# refused and left as it was.
# Part `halving`: successive halving over 9 trials trains fewer epochs than
# the grid of the same 9 trials (both figures printed) and picks one of the
# grid's best 3, with the grid's results for it.
# Part `failures`: on groups of 2 ranks, trials that fail (a shape error, a
# non-finite loss, a value the deck refuses) are recorded as failed and the
# sweep finishes.
# Usage: sweep.sh <mpiexec> <tessera-sweep> <tessera-train> <deck> <tests/app> <plot_sweep.py> <part>
set -uo pipefail
mpiexec="$1" sweep="$2" train="$3" deck="$4" dir="$5" plot="$6" part="$7"
case "$part" in
  grid|halving|failures) ;;
  *) echo "sweep.sh: unknown part '$part' (grid, halving or failures)" >&2; exit 2 ;;
esac
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"
python=/usr/bin/python3

# run_sweep <name> <sweep file> [args...]: 2 ranks, output in $scratch/<name>.
run_sweep() {
  local name="$1" file="$2"
  shift 2
  timeout 300 "$mpiexec" --oversubscribe -n 2 "$sweep" "$deck" "$file" \
    --output-dir "$scratch/$name" "$@" > "$scratch/$name.log" 2>&1
}
# field <csv> <rank> <column>: a column of the trial at that rank.
field() {
  "$python" -c '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(rows[int(sys.argv[2]) - 1][sys.argv[3]])' "$1" "$2" "$3"
}
# records <sweep dir> <type> [state]: how many log records of that kind.
records() {
  "$python" -c '
import json, sys
n = 0
for line in open(sys.argv[1] + "/sweep.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue  # a line being written, or cut short by a kill
    n += r["type"] == sys.argv[2] and (len(sys.argv) < 4 or r.get("state") == sys.argv[3])
print(n)' "$@"
}

if [ "$part" = grid ]; then
  file="$dir/lr_width.sweep.toml"
  run_sweep ref "$file" || { fail "the sweep exited $?"; tail -20 "$scratch/ref.log"; exit 1; }
  cat "$scratch/ref/results.md"
  # Ranked: 8 finished trials, the objective never increasing down the table.
  "$python" - "$scratch/ref/results.csv" <<'EOF' || fail "results.csv is not a ranking of 8 finished trials"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 8, len(rows)
assert [int(r["rank"]) for r in rows] == list(range(1, 9))
assert sorted(int(r["trial"]) for r in rows) == list(range(8))
assert all(r["state"] == "finished" and r["epochs"] == "3" for r in rows)
accuracy = [float(r["validation_accuracy"]) for r in rows]
assert accuracy == sorted(accuracy, reverse=True), accuracy
assert all(float(r["test_accuracy"]) > 0.5 for r in rows)
EOF
  [ "$(records "$scratch/ref" trial finished)" -eq 8 ] || fail "the log lacks 8 finished trials"
  [ "$(grep -c '^| [0-9]' "$scratch/ref/results.md")" -eq 8 ] || fail "results.md lacks 8 rows"
  for t in 0 7; do
    for f in metrics.jsonl train.log checkpoints/latest; do
      [ -s "$scratch/ref/trials/t00$t/$f" ] || fail "trial $t has no $f"
    done
  done
  "$python" "$plot" "$scratch/ref" > /dev/null && [ "$(stat -c %s "$scratch/ref/sweep.png")" -gt 10000 ] ||
    fail "plot_sweep.py did not plot the sweep"

  # The best trial alone, from the command line the sweep printed.
  best=$(field "$scratch/ref/results.csv" 1 trial)
  command=$(sed -n "s/^best: trial $best; alone: tessera-train //p" "$scratch/ref.log")
  [ -n "$command" ] || fail "the sweep did not print how to train trial $best alone"
  # It names its own output folder in the sweep's, not the deck's default.
  alone="$scratch/ref/best"
  grep -qF -- "--set run.output_dir=$alone --set checkpoint.directory=$alone/checkpoints" <<<"$command" ||
    fail "the best trial's command has no output folder of its own: $command"
  eval "set -- $command"
  timeout 300 "$train" "$@" > "$scratch/alone.log" 2>&1 || fail "tessera-train $command exited $?"
  last() {  # the last epoch's validation results and the test results of a run
    grep -E '"type":"(epoch|test)"' "$1/metrics.jsonl" | tail -2 |
      "$python" -c 'import json, sys
for r in map(json.loads, sys.stdin):
    print({k: v for k, v in r.items() if "validation" in k or "test_" in k})'
  }
  if [ -n "$(last "$alone")" ] && cmp -s <(last "$scratch/ref/trials/t00$best") <(last "$alone"); then
    echo "ok: trial $best ($command) and tessera-train alone: the same validation and test results, bit for bit:"
    last "$alone"
  else
    fail "trial $best and tessera-train alone differ"; last "$scratch/ref/trials/t00$best"; last "$alone"
  fi
  final=$(cat "$alone/checkpoints/latest")
  h5diff -q "$alone/checkpoints/$final" "$scratch/ref/trials/t00$best/checkpoints/$final" /parameters &&
    echo "ok: the final weights of trial $best and of tessera-train alone are bitwise equal" ||
    fail "the final weights of trial $best and of tessera-train alone differ"

  # Killed with SIGKILL (every process of the job, as a batch system ends
  # it) while a trial writes the
  # checkpoint of its second epoch, once 3 trials have finished.
  TESSERA_CHECKPOINT_PAUSE_SECONDS=1 setsid "$mpiexec" --oversubscribe -n 2 "$sweep" "$deck" "$file" \
    --output-dir "$scratch/killed" > "$scratch/killed.log" 2>&1 &
  job=$!
  second_epoch() { grep -c 'pausing .*step-00000064' "$scratch/killed.log"; }
  seen=
  for _ in $(seq 3000); do
    if [ -z "$seen" ] && [ -s "$scratch/killed/sweep.jsonl" ] &&
       [ "$(grep -c '"state":"finished"' "$scratch/killed/sweep.jsonl")" -ge 3 ]; then
      seen=$(second_epoch)
    fi
    [ -n "$seen" ] && [ "$(second_epoch)" -gt "$seen" ] && break
    sleep 0.05
  done
  # Open MPI gives each rank its own process group, but they stay in the
  # session setsid opened: every process of it goes at once.
  # One argument per process id:
  # shellcheck disable=SC2046
  kill -9 $(ps -o pid= -s "$job"); wait "$job" 2>/dev/null
  for _ in $(seq 100); do [ -z "$(ps -o pid= -s "$job")" ] && break; sleep 0.1; done
  before=$(records "$scratch/killed" trial finished)
  cut=$(grep 'pausing .*step-00000064' "$scratch/killed.log" | tail -1 |
    sed -n 's|.*trials/t00\([0-9]\)/checkpoints.*|\1|p')
  echo "killed: $before trials finished, trial $cut writing its second epoch's checkpoint"
  [ "$before" -ge 3 ] && [ "$before" -lt 8 ] && [ -n "$cut" ] ||
    { fail "the sweep was not killed midway ($before trials finished)"; tail -5 "$scratch/killed.log"; }
  cp "$scratch/killed/sweep.jsonl" "$scratch/killed.jsonl"
  run_sweep killed "$file" || { fail "the resumed sweep exited $?"; tail -20 "$scratch/killed.log"; }
  grep -q "^resuming the sweep in $scratch/killed" "$scratch/killed.log" || fail "the sweep did not say it resumed"
  "$python" - "$scratch/killed.jsonl" "$scratch/killed/sweep.jsonl" "$cut" <<'EOF' || fail "the resumed sweep reran finished trials or did not resume trial $cut"
import json, sys
before = [json.loads(l) for l in open(sys.argv[1])]
after = [json.loads(l) for l in open(sys.argv[2])][len(before):]
done = {r["trial"] for r in before if r["type"] == "trial" and r["state"] == "finished"}
started = [r for r in after if r["type"] == "trial" and r["state"] == "started"]
rerun = done & {r["trial"] for r in started}
assert not rerun, f"finished trials run again: {rerun}"
assert len(started) == 8 - len(done), started
resumed = [r["trial"] for r in started if r["resume"]]
assert int(sys.argv[3]) in resumed, resumed
print(f"ok: resumed sweep: {len(done)} finished trials kept, {len(started)} run, "
      f"trials {resumed} from their checkpoints")
EOF
  grep -q '"type":"restart"' "$scratch/killed/trials/t00$cut/metrics.jsonl" ||
    fail "trial $cut did not restart from its checkpoint"
  if cmp "$scratch/ref/results.csv" "$scratch/killed/results.csv" &&
     cmp "$scratch/ref/results.md" "$scratch/killed/results.md"; then
    echo "ok: the killed and resumed sweep's results.md and results.csv equal the uninterrupted sweep's"
  else
    fail "the resumed sweep's results differ"; diff "$scratch/ref/results.csv" "$scratch/killed/results.csv"
  fi

  # Bad input: exit 2 and file:line:column on every rank, within seconds.
  expect() {  # expect <fragment> <sweep file text> [args...]
    local fragment="$1" text="$2" out rc
    shift 2
    printf '%s' "$text" > "$scratch/bad.toml"
    out=$(timeout 60 "$mpiexec" --oversubscribe -n 2 "$sweep" "$deck" "$scratch/bad.toml" \
      --output-dir "$scratch/bad" "$@" 2>&1); rc=$?
    if [ "$rc" -ne 2 ] || ! grep -qF -- "$fragment" <<<"$out"; then
      fail "exit $rc, expected 2 and '$fragment'"; echo "$out" | tail -3
    else
      echo "ok: exit 2, '$fragment'"
    fi
  }
  good=$(cat "$file")
  expect "$scratch/bad.toml:6:1: sweep.strategi: unknown key (did you mean 'sweep.strategy'?)" \
    "${good/strategy =/strategi =}"
  expect "$scratch/bad.toml:15:7: parameters[0].key: 'optimizer.lrate' is not a setting of the deck" \
    "${good/\"optimizer.lr\"/\"optimizer.lrate\"}"
  expect "$scratch/bad.toml:19:7: parameters[1].key: 'model.layers[9].units' is not a setting of the deck $deck: --set model.layers[9].units=64: 'layers' has 5 entries" \
    "${good/layers\[0\]/layers[9]}"
  expect "$scratch/bad.toml:7:19: sweep.ranks_per_trial: 3 ranks per trial do not divide the job's 2 ranks" \
    "${good/ranks_per_trial = 1/ranks_per_trial = 3}"
  expect "$scratch/bad.toml:16:27: parameters[0].grid: value 0.1 appears twice" \
    "${good/0.03, 0.1/0.1, 0.1}"
  expect "$scratch/bad.toml:16:13: TOML syntax error" "${good/grid = \[0.003/grid = 0.003}"
  expect "$scratch/bad.toml:9:32: sweep.set: the deck refuses it: --set training.batch_size=0" \
    "${good/log_every=0\"\]/log_every=0\", \"training.batch_size=0\"]}"
  expect "--set data.train_images=/nonexistent: data.train_images: cannot read '/nonexistent'" \
    "$good" --set data.train_images=/nonexistent
  cp "$scratch/ref/sweep.jsonl" "$scratch/ref.jsonl"
  # A directory another sweep is writing (it holds the lock) is refused.
  out=$(flock -o "$scratch/ref/.lock" timeout 60 "$mpiexec" --oversubscribe -n 2 "$sweep" "$deck" "$file" \
    --output-dir "$scratch/ref" 2>&1); rc=$?
  if [ "$rc" -eq 2 ] && grep -qF "another tessera-sweep is running in $scratch/ref" <<<"$out" &&
     cmp -s "$scratch/ref.jsonl" "$scratch/ref/sweep.jsonl"; then
    echo "ok: a directory another sweep is writing: exit 2, its log untouched"
  else
    fail "a directory another sweep is writing: exit $rc"; echo "$out" | tail -3
  fi
  # A directory holding another sweep's results is refused, untouched.
  printf '%s\n# another sweep\n' "$good" > "$scratch/other.toml"
  out=$(timeout 60 "$mpiexec" --oversubscribe -n 2 "$sweep" "$deck" "$scratch/other.toml" \
    --output-dir "$scratch/ref" 2>&1); rc=$?
  if [ "$rc" -eq 2 ] && grep -qF "$scratch/ref/sweep.jsonl:1: this directory holds a sweep of another deck or sweep file" <<<"$out" &&
     cmp -s "$scratch/ref.jsonl" "$scratch/ref/sweep.jsonl"; then
    echo "ok: another sweep's directory: exit 2, its log untouched"
  else
    fail "another sweep's directory: exit $rc"; echo "$out" | tail -3
  fi
fi

if [ "$part" = halving ]; then
  file="$dir/halving.sweep.toml"
  sed -e 's/^strategy = "halving"/strategy = "grid"/' -e '/^\[halving\]/,/^reduction/d' "$file" \
    > "$scratch/grid9.toml"
  run_sweep halving "$file" || { fail "the halving sweep exited $?"; tail -20 "$scratch/halving.log"; }
  run_sweep grid "$scratch/grid9.toml" || { fail "the grid sweep exited $?"; tail -20 "$scratch/grid.log"; }
  cat "$scratch/halving/results.md" "$scratch/grid/results.md"
  "$python" - "$scratch/halving" "$scratch/grid" <<'EOF' || fail "successive halving did not beat the grid's budget with one of its best 3"
import csv, json, sys
def sweep(d):
    done = [json.loads(l) for l in open(d + "/sweep.jsonl") if '"type":"done"' in l][-1]
    return done, list(csv.DictReader(open(d + "/results.csv")))
(h_done, h_rows), (g_done, g_rows) = sweep(sys.argv[1]), sweep(sys.argv[2])
print(f"epochs trained: successive halving {h_done['epochs_trained']}, "
      f"the grid {g_done['epochs_trained']}")
assert h_done["epochs_trained"] < g_done["epochs_trained"] == 81
assert h_done["epochs_trained"] == 9 * 1 + 3 * 2 + 1 * 6
metric = "validation_loss"  # the sweep file minimizes it
best = h_rows[0]
same = next(r for r in g_rows if r["trial"] == best["trial"])
# Within the top 3: fewer than 3 trials of the grid strictly better (ties
# share a rank).
better = [r["trial"] for r in g_rows if float(r[metric]) < float(same[metric])]
print(f"successive halving picked trial {best['trial']} ({metric} {float(best[metric]):.4f}); "
      f"in the grid, {len(better)} trials did better: {better}; its top 3: "
      f"{[(r['trial'], round(float(r[metric]), 4)) for r in g_rows[:3]]}")
assert best["state"] == "finished" and len(better) < 3
# Trained rung by rung from checkpoints, it ends where the grid's run did.
keys = ["validation_accuracy", "validation_loss", "test_accuracy", "test_loss"]
assert [best[k] for k in keys] == [same[k] for k in keys], (best, same)
print("ok: its results equal the grid's for the same trial, bit for bit")
EOF
fi

if [ "$part" = failures ]; then
  run_sweep failures "$dir/failures.sweep.toml" ||
    { fail "the sweep with failing trials exited $?"; tail -20 "$scratch/failures.log"; }
  cat "$scratch/failures/results.md"
  for fragment in "| 1 | 0 | relu | 0.05 | 256 | finished | 1 |" \
      "Trial 2 failed: tessera::Trainer: non-finite loss" \
      "model.layers[1]: tessera::GlobalAvgPool 'globalavgpool1': input [64, 256] is not an image batch" \
      "Trial 1 failed: rank 0: --set model.layers[0].units=0: model.layers[0].units: value 0 is out of range"; do
    grep -qF -- "$fragment" "$scratch/failures/results.md" || fail "results.md lacks '$fragment'"
  done
  [ "$(records "$scratch/failures" trial failed)" -eq 7 ] || fail "the log lacks 7 failed trials"
fi
[ "$failures" -eq 0 ] || exit 1
