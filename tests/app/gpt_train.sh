#!/usr/bin/env bash
# A small GPT end to end, on byte tokens of the project's own documentation:
# tessera-tokenize writes the token files (and fails with exit 2 on a
# missing file); tessera-train trains the deck, which must end below the
# text's unigram entropy; resuming from a mid-epoch checkpoint ends bitwise
# equal to the uninterrupted run (parameters, optimizer state, every later
# step's loss), on 1 rank and on 2; 2 ranks follow 1 rank within 1e-5
# relative over the first 10 steps (the sums over ranks go in another
# order); tessera-generate prints the same text for the same seed, another
# for another seed, and refuses a missing checkpoint with exit 2.
# Usage: gpt_train.sh <mpiexec> <tessera-train> <tessera-tokenize> <tessera-generate> <deck> <source dir>
set -uo pipefail
mpiexec="$1" train="$2" tokenize="$3" generate="$4" deck="$5" source_dir="$6"
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"

"$tokenize" "$source_dir"/README.md "$source_dir"/docs/*.md --out "$scratch/text" \
  > "$scratch/tokenize.log" 2>&1 || fail "tessera-tokenize exited $?"
cat "$scratch/tokenize.log"
entropy=$(sed -n 's/^unigram entropy of the text: \([0-9.]*\) bits per byte$/\1/p' "$scratch/tokenize.log")
[ -n "$entropy" ] || fail "tessera-tokenize printed no unigram entropy"
out=$("$tokenize" "$scratch/missing.txt" --out "$scratch/x" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -qF "$scratch/missing.txt: cannot open" <<<"$out" ||
  fail "tessera-tokenize on a missing file: exit $rc, '$out'"

data=(--set "data.train_tokens=$scratch/text.train.bin" --set "data.test_tokens=$scratch/text.val.bin")
train() {  # train <ranks> <name> [args...]
  local ranks="$1" name="$2"
  shift 2
  timeout 300 "$mpiexec" --oversubscribe -n "$ranks" "$train" "$deck" "${data[@]}" \
    --set "run.output_dir=$scratch/$name" "$@" > "$scratch/$name.log" 2>&1 ||
    { fail "$name exited $?"; tail -5 "$scratch/$name.log"; }
}
losses() {  # losses <run> <after step>: every later step's loss (after the last restart)
  /usr/bin/python3 -c '
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
starts = [i for i, r in enumerate(records) if r["type"] == "restart"]
for r in records[starts[-1] if starts else 0:]:
    if r["type"] == "step" and r["step"] > int(sys.argv[2]):
        print(r["step"], repr(r["loss"]))' "$scratch/$1/metrics.jsonl" "$2"
}
final=32  # 2 epochs of 16 steps
same() {  # same <reference run> <resumed run> <from step>
  local what="$2 (from step $3)"
  if h5diff -q "$(ckpt "$1" $final)" "$(ckpt "$2" $final)" /parameters &&
    h5diff -q "$(ckpt "$1" $final)" "$(ckpt "$2" $final)" /optimizer; then
    echo "ok: $what: parameters and optimizer state bitwise equal to $1's"
  else
    fail "$what: the final checkpoint differs from $1's"
  fi
  if [ -n "$(losses "$2" "$3")" ] && cmp -s <(losses "$1" "$3") <(losses "$2" "$3"); then
    echo "ok: $what: the $(losses "$2" "$3" | wc -l) per-step losses after the restart are identical"
  else
    fail "$what: per-step losses differ from $1's"
  fi
}

train 1 one
train 1 one_mid --restart "$(ckpt one 10)"
same one one_mid 10
train 2 two
train 2 two_mid --restart "$(ckpt two 20)"
same two two_mid 20
bash "$here/../compare_outputs.sh" <(losses one 0 | head -10) <(losses two 0 | head -10) 1e-5 \
  "losses of steps 1 to 10 on 1 and on 2 ranks" || failures=$((failures + 1))

# Learns: on all the training text for 3 epochs, the held-out loss (nats
# per byte in the metrics) ends below the text's unigram entropy.
train 1 learn --set data.train_samples=0 --set training.epochs=3 --set checkpoint.every_steps=0
/usr/bin/python3 -c '
import json, math, sys
test = [json.loads(l) for l in open(sys.argv[1]) if "\"test_loss\"" in l][-1]["test_loss"]
bits = test / math.log(2)
print("held-out loss %.4f bits per byte, unigram entropy %s" % (bits, sys.argv[2]))
sys.exit(0 if bits < float(sys.argv[2]) else 1)' "$scratch/learn/metrics.jsonl" "$entropy" ||
  fail "the held-out loss is not below the unigram entropy"

sample() { "$generate" "$scratch/learn/checkpoints" --prompt "The " --tokens 60 "$@" 2> "$scratch/generate.err"; }
a=$(sample --seed 5) || fail "tessera-generate exited $?: $(cat "$scratch/generate.err")"
b=$(sample --seed 5)
c=$(sample --seed 6)
echo "sample: $a"
[ "${#a}" -ge 60 ] || fail "tessera-generate printed ${#a} characters, expected at least 60"
[ "$a" = "$b" ] || fail "tessera-generate: the same seed printed different text"
[ "$a" != "$c" ] || fail "tessera-generate: seeds 5 and 6 printed the same text"
out=$("$generate" "$scratch/missing.h5" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -qF "$scratch/missing.h5" <<<"$out" ||
  fail "tessera-generate on a missing checkpoint: exit $rc, '$out'"

[ "$failures" -eq 0 ] || exit 1
echo "ok: all GPT checks passed"
