#!/usr/bin/env bash
# Data parallelism is exact: the determinism probe (every layer type,
# synchronised BatchNorm, dropout, clipping, a partial last batch) on 2 and
# 3 ranks must match 1 rank with the same global batch, every step's loss
# and every final weight within 1e-5 relative: to the value, or to 0.01 for
# smaller ones (the weights are of order 0.1 to 1; a value near zero amid
# them carries the rounding noise of its tensor). Sums over ranks are taken
# in another order than on one rank, so agreement is to rounding, not to the
# bit. Runs with AdamW (which turns any parameter without signal into
# noise-driven steps; the probe has none), with SGD and momentum, and the
# small GPT (--gpt: embeddings, attention with dropout, a tied head).
# With the optimizer state sharded over the ranks (ZeRO-1,
# --shard-optimizer) the outputs must be bit for bit those of the same rank
# count without sharding (the update is elementwise, the gradients the
# same), and each rank must allocate 1/N of the optimizer state (the probe
# checks the Kokkos Tools allocation counts). Both with the parameters
# gathered bucket by bucket during the next forward pass (the default: a
# layer that ran before its bucket arrived would read the last step's
# weights) and with a blocking gather after the step (--blocking-gather).
# Usage: compare.sh <mpiexec> <probe executable> <scratch directory>
set -euo pipefail
mpiexec="$1" probe="$2" dir="$3"
mkdir -p "$dir"
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1
for optimizer in adamw sgd gpt; do
  flag=""
  [ "$optimizer" = adamw ] || flag="--$optimizer"
  for ranks in 1 2 3; do
    timeout 120 "$mpiexec" --oversubscribe -n "$ranks" "$probe" $flag \
      > "$dir/$optimizer-ranks$ranks.log"
    # Kokkos prints its start-up warnings (oversubscription) to stdout too.
    grep -E '^(step|eval|param|state)' "$dir/$optimizer-ranks$ranks.log" > "$dir/$optimizer-ranks$ranks.txt"
  done
  lines=$(wc -l < "$dir/$optimizer-ranks1.txt")
  [ "$lines" -gt 100 ] || { echo "FAIL: the probe printed only $lines lines"; exit 1; }
  for ranks in 2 3; do
    bash "$(dirname "$0")/../compare_outputs.sh" "$dir/$optimizer-ranks1.txt" \
      "$dir/$optimizer-ranks$ranks.txt" 1e-5 "$optimizer: 1 and $ranks ranks" 1e-2
  done
  for ranks in 2 3; do
    for gather in overlapped blocking; do
      extra=""
      [ "$gather" = overlapped ] || extra="--blocking-gather"
      log="$dir/$optimizer-ranks$ranks-sharded-$gather.log"
      timeout 120 "$mpiexec" --oversubscribe -n "$ranks" "$probe" $flag --shard-optimizer $extra > "$log" ||
        { echo "FAIL: $optimizer on $ranks ranks with a sharded optimizer ($gather gather)"; tail -3 "$log"; exit 1; }
      grep -E '^(step|eval|param|state)' "$log" > "$dir/$optimizer-ranks$ranks-sharded-$gather.txt"
      cmp -s "$dir/$optimizer-ranks$ranks.txt" "$dir/$optimizer-ranks$ranks-sharded-$gather.txt" ||
        { echo "FAIL: $optimizer on $ranks ranks: a sharded optimizer ($gather gather) changed the outputs"; exit 1; }
      echo "ok: $optimizer on $ranks ranks: sharded optimizer, $gather gather, bitwise equal;" \
        "$(grep 'optimizer state allocated' "$log")"
    done
  done
done
