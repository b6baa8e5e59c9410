#!/usr/bin/env bash
# What every Tessera app does on the command line (README, "Apps on the
# command line"): --help and --version exit 0 (--help with the app's own
# usage, not Kokkos'); --kokkos-* options are accepted and reach Kokkos
# (both spellings of the thread count, on any Kokkos); --kokkos-help shows
# Kokkos' options; an unknown option still exits 2; under mpiexec only the
# first rank prints help. Then a Kokkos Tools library given by
# KOKKOS_TOOLS_LIBS sees Tessera's named regions, and every Python tool
# starts with #!/usr/bin/env python3.
# Usage: app_conventions.sh <apps dir> <source dir> <mpiexec> <region tool library>
set -euo pipefail
apps="$1" source_dir="$2" mpiexec="$3" tool="$4"
# shellcheck source=../script_common.sh
source "${source_dir}/tests/script_common.sh"
deck="${source_dir}/tests/app/fashion_mnist_smoke.toml"
version=$(sed -n 's/^project(Tessera VERSION \([0-9.]*\).*/\1/p' "${source_dir}/CMakeLists.txt")

# run <name> <expected status> <command...>: output in $scratch/<name>.out
run() {
  local name="$1" expected="$2" rc=0
  shift 2
  "$@" > "$scratch/$name.out" 2>&1 || rc=$?
  if [ "$rc" -ne "$expected" ]; then
    fail "$name: '$*' exited $rc, expected $expected: $(head -c 600 "$scratch/$name.out")"
    return 1
  fi
}
has() {  # has <name> <fixed string>
  grep -qF -- "$2" "$scratch/$1.out" || fail "$1: output lacks '$2': $(head -c 600 "$scratch/$1.out")"
}
lacks() {
  ! grep -qF -- "$2" "$scratch/$1.out" || fail "$1: output has '$2'"
}

# Each app's required arguments, so that an unknown option is the only problem.
declare -A required=([tessera-train]="$deck" [tessera-bench]="$deck" [tessera-inspect]="x.h5"
                     [tessera-idx2hdf5]="a b c.h5" [tessera-sweep]="$deck x.sweep.toml"
                     [tessera-tokenize]="a.txt --out x" [tessera-generate]="x.h5"
                     [tessera-predict]="$deck x.h5")
for app in tessera-train tessera-sweep tessera-bench tessera-inspect tessera-idx2hdf5 \
  tessera-tokenize tessera-generate tessera-predict; do
  exe="${apps}/${app}"
  read -r -a args <<<"${required[$app]}"
  run "$app-help" 0 "$exe" --help && {
    [ "$(head -c ${#app} "$scratch/$app-help.out")" = "$app" ] \
      || fail "$app --help does not start with its own usage: $(head -1 "$scratch/$app-help.out")"
    lacks "$app-help" "Kokkos command line arguments"
    has "$app-help" "--kokkos-help"
    has "$app-help" "KOKKOS_TOOLS_LIBS"
  }
  run "$app-version" 0 "$exe" --version && {
    has "$app-version" "Tessera ${version}"
    has "$app-version" "Kokkos: "
    has "$app-version" "execution space: "
    has "$app-version" "kernel paths: "
    has "$app-version" "BLAS: "
  }
  run "$app-kokkos-help" 0 "$exe" --kokkos-help && has "$app-kokkos-help" "--kokkos-help"
  run "$app-kokkos-threads-help" 0 "$exe" --kokkos-threads=1 --help
  run "$app-unknown" 2 "$exe" "${args[@]}" --no-such-option && has "$app-unknown" "--no-such-option"
done

# tessera-compare (Python): the build's copy knows the version and the build
# (from tessera-inspect beside it); Kokkos options are ignored.
run compare-help 0 "${apps}/tessera-compare" --help && has compare-help "usage: tessera-compare"
# Its --version tells how the build was made, as every app's does (README).
run compare-version 0 "${apps}/tessera-compare" --version && {
  has compare-version "tessera-compare (Tessera ${version})"
  for line in "Tessera ${version}" "Kokkos: " "execution space: " "kernel paths: " "Kokkos Kernels: " "BLAS: " "compiler: "; do
    has compare-version "$line"
  done
}
run compare-kokkos 0 "${apps}/tessera-compare" --kokkos-threads=1 --help
run compare-unknown 2 "${apps}/tessera-compare" --no-such-option

# tessera-export (Python): its version, then the build's (tessera-predict
# beside it); Kokkos options go on to tessera-predict.
run export-help 0 "${apps}/tessera-export" --help && has export-help "usage: tessera-export"
run export-version 0 "${apps}/tessera-export" --version && {
  has export-version "tessera-export (Tessera ${version})"
  for line in "Kokkos: " "execution space: " "BLAS: "; do has export-version "$line"; done
}
run export-kokkos 0 "${apps}/tessera-export" --kokkos-threads=1 --help
run export-unknown 2 "${apps}/tessera-export" --no-such-option

# The thread count reaches Kokkos, with either spelling (3.4 and 4.x differ).
for option in --kokkos-threads=1 --kokkos-num-threads=1; do
  run "train-check$option" 0 env OMP_NUM_THREADS=2 "${apps}/tessera-train" "$deck" --check "$option" \
    && has "train-check$option" "1 threads)"
done
run train-check-2 0 env OMP_NUM_THREADS=2 "${apps}/tessera-train" "$deck" --check \
  && has train-check-2 "2 threads)"
# Apps without Kokkos accept the options too; the error is then about the input.
run inspect-kokkos 2 "${apps}/tessera-inspect" --kokkos-threads=1 "$scratch/none.h5" \
  && has inspect-kokkos "$scratch/none.h5"
run idx2hdf5-kokkos 2 "${apps}/tessera-idx2hdf5" --kokkos-threads=1 "$scratch/a" "$scratch/b" \
  "$scratch/c.h5" && has idx2hdf5-kokkos "$scratch/a"

# Under mpiexec, help is printed once, by the first rank.
if run mpi-help 0 "$mpiexec" -n 2 "${apps}/tessera-train" --help; then
  copies=$(grep -c '^tessera-train' "$scratch/mpi-help.out" || true)
  [ "$copies" -eq 1 ] || fail "mpiexec -n 2 tessera-train --help printed it ${copies} times"
fi

# Kokkos Tools: a tool library named by KOKKOS_TOOLS_LIBS sees the layers' regions.
run tools 0 env KOKKOS_TOOLS_LIBS="$tool" TESSERA_REGION_TOOL_OUTPUT="$scratch/regions.txt" \
  "${apps}/tessera-train" "$deck" --set training.epochs=1 --set data.train_samples=256 \
  --set "run.output_dir=$scratch/tools"
for region in tessera::Model::forward tessera::Dense::forward tessera::Dense::backward; do
  grep -q " ${region}\$" "$scratch/regions.txt" 2>/dev/null \
    || fail "KOKKOS_TOOLS_LIBS: region ${region} not seen; tool output: $(cat "$scratch/regions.txt" 2>&1)"
done

# Python tools find python3 on PATH (the build's copy of tessera-export may
# name another interpreter: Tessera_PYTHON).
python_tools=0
while IFS= read -r -d '' file; do
  first=$(head -1 "$file")
  case "$first" in
    '#!'*python*)
      python_tools=$((python_tools + 1))
      [ "$first" = "#!/usr/bin/env python3" ] || fail "$file starts with '$first'" ;;
  esac
done < <(find "${source_dir}/apps" "${source_dir}/scripts" "${source_dir}/bench" \
              "${source_dir}/tests" -type f -print0)
[ "$python_tools" -ge 3 ] || fail "found only ${python_tools} Python tools (tessera-compare, ...)"

[ "$failures" -eq 0 ] || { echo "${failures} failure(s)"; exit 1; }
echo "PASS: --help, --version, --kokkos-* and Kokkos Tools for every app"
