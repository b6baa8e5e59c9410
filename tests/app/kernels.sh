#!/usr/bin/env bash
# Kernel choices through tessera-train ([kernels], docs/decks.md) on the
# ResNet deck cut short, one thread: a measured run writes its choices to
# the cache and into its checkpoints; a second run reads them (nothing
# timed) and ends bitwise equal; a restart keeps the checkpoint's choices
# over a cache that names others and ends bitwise equal to the run never
# interrupted, while a fresh run under that cache runs other kernels and
# does not; "fixed" and a schedule's name give the table they promise; a
# bad value is refused at its key; an unusable cache is noted and the run
# trains. A build whose convolutions run one schedule each (device paths on
# the host: "blocks") has nothing to choose: it prints no kernels line,
# writes no cache, records "blocks" in its checkpoints, restarts bit for bit
# and notes a schedule the deck names that it cannot run.
# Usage: kernels.sh <tessera-train> <source root>
set -uo pipefail
train="$1" root="$2"
# shellcheck source=../script_common.sh
source "$(dirname "$0")/../script_common.sh"
deck="$root/inputs/fashion_mnist_resnet.toml"
short=(--set data.train_samples=768 --set data.test_samples=128 --set training.batch_size=64
  --set training.epochs=1 --set training.log_every=0 --set schedule.warmup_steps=4
  --set checkpoint.every_steps=6 --set checkpoint.keep=10)

# run <name> <cache> [args...]: a run of the short deck with its own output
# directory and kernel cache; its output in $scratch/<name>.log.
run() {
  local name="$1" cache="$2"
  shift 2
  timeout 300 "$train" "$deck" "${short[@]}" --set "run.output_dir=$scratch/$name" \
    --set "kernels.cache=$cache" "$@" > "$scratch/$name.log" 2>&1
}
kernels_line() { grep '^kernels: ' "$scratch/$1.log"; }
# The table of a kernels line: "stem threads, s1b1_conv1 winograd, ...".
table() { kernels_line "$1" | sed 's/^[^:]*: [^:]*: //'; }
final() { ckpt "$1" 12; }

# recorded <checkpoint>: "layer kernel, ..." from its /model attributes;
# status non-zero where they cannot be read.
recorded() {
  /usr/bin/python3 -c '
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    names = [n.decode() if isinstance(n, bytes) else n for n in f["/model"].attrs["layers"]]
    print(", ".join(n + " " + (lambda k: k.decode() if isinstance(k, bytes) else k)(
        f["/model/" + n].attrs["kernel"]) for n in names if "kernel" in f["/model/" + n].attrs))
' "$1"
}
# A value no build knows is refused at its key, naming the values allowed.
refuses_fastest() {
  local rc=0
  run bad none --set kernels.conv2d=fastest || rc=$?
  if [ "$rc" -eq 2 ] && grep -q 'kernels.conv2d' "$scratch/bad.log" &&
     grep -q 'measured' "$scratch/bad.log"; then
    echo "ok: kernels.conv2d = \"fastest\" is refused at its key, exit 2"
  else
    fail "kernels.conv2d = \"fastest\": exit $rc: $(head -3 "$scratch/bad.log")"
  fi
}
convolutions="stem s1b1_conv1 s1b1_conv2 s2b1_conv1 s2b1_conv2 s2b1_proj s3b1_conv1 s3b1_conv2 s3b1_proj"

run first "$scratch/cache" || fail "the measured run exited $?: $(tail -3 "$scratch/first.log")"
if ! grep -q '^kernels: ' "$scratch/first.log"; then
  expected=$(for c in $convolutions; do printf '%s blocks\n' "$c"; done | paste -sd, | sed 's/,/, /g')
  recorded=$(recorded "$(final first)") || fail "cannot read the kernel attributes of $(final first)"
  if [ "$recorded" = "$expected" ]; then
    echo "ok: one schedule per convolution on this build, no kernels line: the checkpoint records $expected"
  else
    fail "no kernels line, yet the checkpoint records '$recorded', not one schedule per convolution ('$expected')"
  fi
  [ ! -e "$scratch/cache/kernels-1.jsonl" ] && echo "ok: nothing measured, no cache written" ||
    fail "a build without a choice wrote $scratch/cache/kernels-1.jsonl"
  run resumed "$scratch/cache" --restart "$(ckpt first 6)" || fail "the restart exited $?"
  if h5_differs "$(final first)" "$(final resumed)" /parameters ||
     h5_differs "$(final first)" "$(final resumed)" /optimizer; then
    fail "the restart does not end with the uninterrupted run's state"
  else
    echo "ok: the restart ends with the uninterrupted run's parameters and optimizer state, bit for bit"
  fi
  run direct none --set kernels.conv2d=direct --set training.max_steps=1 || fail "direct exited $?"
  grep -q "^note: kernels.conv2d = \"direct\" does not run layer 'stem' (conv2d .*) here: it runs blocks" "$scratch/direct.log" &&
    echo "ok: kernels.conv2d = \"direct\" is noted as not run here, and the run trains" ||
    fail "kernels.conv2d = \"direct\" on this build: $(grep -m2 -E '^(kernels|note)' "$scratch/direct.log")"
  refuses_fastest
  [ "$failures" -eq 0 ] || exit 1
  exit 0
fi
line=$(kernels_line first)
case "$line" in
  'kernels: conv2d = "measured" ('*' measured in '*"$scratch/cache/kernels-1.jsonl):"*)
    echo "ok: the first run measured: $line" ;;
  *) fail "the first run's kernels line: '$line'" ;;
esac
[ "$(wc -l < "$scratch/cache/kernels-1.jsonl")" -ge 5 ] ||
  fail "the cache holds $(wc -l < "$scratch/cache/kernels-1.jsonl") entries, not one per shape"
# The checkpoint records each convolution's choice as the run printed it.
recorded=$(recorded "$(final first)") || fail "cannot read the kernel attributes of $(final first)"
if [ -n "$recorded" ] && [ "$recorded" = "$(table first)" ]; then
  echo "ok: the checkpoint records the kernels the run printed ($recorded)"
else
  fail "the checkpoint records '$recorded', the run printed '$(table first)'"
fi

run again "$scratch/cache" || fail "the second run exited $?"
case "$(kernels_line again)" in
  *' layers from the cache; '*) echo "ok: the second run read every choice from the cache" ;;
  *) fail "the second run's kernels line: '$(kernels_line again)'" ;;
esac
[ "$(table again)" = "$(table first)" ] || fail "the second run chose '$(table again)'"
if h5_differs "$(final first)" "$(final again)" /parameters; then
  fail "the second run's weights differ from the first's"
else
  echo "ok: the second run ends with the first run's weights, bit for bit"
fi

# Another cache that names another schedule for every convolution.
mkdir -p "$scratch/other"
/usr/bin/python3 -c '
import json, sys
swap = {"winograd": "direct", "direct": "threads", "threads": "direct"}
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        e = json.loads(line)
        e["choice"] = swap[e["choice"]]
        out.write(json.dumps(e) + "\n")
' "$scratch/cache/kernels-1.jsonl" "$scratch/other/kernels-1.jsonl"
run resumed "$scratch/other" --restart "$(ckpt first 6)" || fail "the restart exited $?"
case "$(kernels_line resumed)" in
  'kernels: conv2d = "measured" (9 layers as given):'*) echo "ok: the restart kept the checkpoint's kernels" ;;
  *) fail "the restart's kernels line: '$(kernels_line resumed)'" ;;
esac
if h5_differs "$(final first)" "$(final resumed)" /parameters ||
   h5_differs "$(final first)" "$(final resumed)" /optimizer; then
  fail "the restart under another cache does not end with the uninterrupted run's state"
else
  echo "ok: the restart ends with the uninterrupted run's parameters and optimizer state, bit for bit"
fi
run swapped "$scratch/other" || fail "the run under the other cache exited $?"
[ "$(table swapped)" != "$(table first)" ] || fail "the other cache's run chose the first run's kernels"
if h5_differs "$(final first)" "$(final swapped)" /parameters; then
  echo "ok: other kernels give other bits (the comparisons above can fail)"
else
  fail "a run with other kernels ends with the same weights"
fi

run fixed none --set kernels.conv2d=fixed --set training.max_steps=1 || fail "fixed exited $?"
expected="stem direct, s1b1_conv1 winograd, s1b1_conv2 winograd, s2b1_conv1 direct, s2b1_conv2 winograd, s2b1_proj threads, s3b1_conv1 direct, s3b1_conv2 winograd, s3b1_proj threads"
[ "$(table fixed)" = "$expected" ] && echo "ok: the fixed rule's table" ||
  fail "kernels.conv2d = \"fixed\" chose '$(table fixed)'"
run direct none --set kernels.conv2d=direct --set training.max_steps=1 || fail "direct exited $?"
[ "$(table direct | tr ',' '\n' | grep -c ' direct$')" -eq 9 ] &&
  echo "ok: kernels.conv2d = \"direct\" runs the direct products everywhere" ||
  fail "kernels.conv2d = \"direct\" chose '$(table direct)'"

refuses_fastest
touch "$scratch/a-file"
run unusable "$scratch/a-file/cache" --set training.max_steps=1 ||
  fail "a run with an unusable cache exited $?: $(tail -3 "$scratch/unusable.log")"
grep -q "^note: cannot create the cache directory $scratch/a-file/cache" "$scratch/unusable.log" &&
  echo "ok: an unusable cache directory is noted and the run trains" ||
  fail "no note for the unusable cache: $(grep -A1 '^kernels' "$scratch/unusable.log")"

[ "$failures" -eq 0 ] || exit 1
