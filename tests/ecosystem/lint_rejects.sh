#!/usr/bin/env bash
# scripts/lint-spack.py must reject what Spack would reject: each case below
# breaks one spec in a copy of the real package.py or spack.yaml and expects
# exit status 1 with a message naming the broken part. A case whose edit no
# longer matches the file fails too, so the cases follow the files.
# Usage: lint_rejects.sh <source dir> <scratch dir>
set -euo pipefail
source_dir="$1" scratch="$2"
lint="${source_dir}/scripts/lint-spack.py"
package="${source_dir}/spack/spack_repo/tessera/packages/tessera/package.py"
env_file="${source_dir}/spack.yaml"
mkdir -p "$scratch"
failures=0

# case <name> <package|env> <sed expression> <expected message>
case_() {
  local name="$1" which="$2" edit="$3" expected="$4"
  local original="$package" copy="${scratch}/package.py" args=()
  if [ "$which" = env ]; then
    original="$env_file"
    copy="${scratch}/spack.yaml"
    # The copy lives elsewhere: point its repos: entry back at the source tree.
    sed "s|^\(    tessera: \)spack/|\1${source_dir}/spack/|" "$original" > "${copy}.base"
    original="${copy}.base"
    args=(--env "$copy")
  else
    args=(--package "$copy")
  fi
  sed "$edit" "$original" > "$copy"
  if cmp -s "$original" "$copy"; then
    echo "FAIL ${name}: the edit '${edit}' changes nothing; update this case"
    failures=$((failures + 1))
    return
  fi
  local out rc=0
  out=$(python3 "$lint" "${args[@]}" 2>&1) || rc=$?
  if [ "$rc" -eq 1 ] && grep -qF -- "$expected" <<<"$out"; then
    echo "ok   ${name}: ${expected}"
  else
    echo "FAIL ${name}: exit ${rc}, expected 1 and '${expected}'; output:"
    echo "$out"
    failures=$((failures + 1))
  fi
}

# The unmodified files pass (both the repository's and a relocated env copy).
python3 "$lint"
sed "s|^\(    tessera: \)spack/|\1${source_dir}/spack/|" "$env_file" > "${scratch}/spack-relocated.yaml"
python3 "$lint" --env "${scratch}/spack-relocated.yaml" > /dev/null

case_ misspelled-variant package 's/kokkos+cuda_lambda/kokkos+cuda_lamda/' \
  "kokkos has no variant 'cuda_lamda' (did you mean 'cuda_lambda'?)"
case_ misspelled-own-variant package 's/when="+openmp")/when="+opnmp")/' \
  "tessera has no variant 'opnmp'"
case_ bad-variant-value package 's/layouts=right/layouts=rigth/' \
  "kokkos-kernels layouts=rigth is not allowed"
case_ unknown-version package 's/"kokkos@4"/"kokkos@6"/' "no version of kokkos matches '@6'"
case_ variant-of-other-versions package \
  's/"^kokkos+cuda_lambda", when="+cuda ^kokkos@:4"/"^kokkos@5:+cuda_lambda", when="+cuda"/' \
  "kokkos has 'cuda_lambda' only when @:4 +cuda"
case_ self-referential package \
  's/requires("^kokkos+cuda_lambda"/depends_on("kokkos+cuda_lambda"/' \
  "depends_on('kokkos+cuda_lambda') when '+cuda ^kokkos@:4' is self-referential"
case_ exact-values-misspelled package 's/scalars:=float/scalars:=flaot/' \
  "kokkos-kernels scalars=flaot is not allowed"
case_ default-kept-beside package 's/scalars:=float/scalars=float/' \
  "scalars=float keeps kokkos-kernels's default scalars=double beside it"
case_ unknown-mpi-provider package 's/"^cray-mpich+cuda"/"^craympich+cuda"/' \
  "unknown package 'craympich' (did you mean 'cray-mpich'?)"
case_ unknown-package package 's/"zlib-api"/"zlib-apii"/' "unknown package 'zlib-apii'"
case_ version-not-in-cmake package 's/version("0.1.0",/version("0.0.9",/' \
  "CMakeLists.txt says Tessera"
case_ env-misspelled-variant env 's/threads=openmp/thread=openmp/' \
  "openblas has no variant 'thread'"
case_ env-unquoted-colon env 's/^  - tessera@0.1.0 +openmp +serial +apps$/  - cmake@3.20:/' \
  "a spec ending in ':' must be quoted"
case_ env-own-variant env 's/+serial +apps/+serial +app/' "tessera has no variant 'app'"
case_ env-kokkos-5 env 's/"@4"/"@4:"/' "allows kokkos 5.1.1, 5.1.0, 5.0.2, 5.0.1, 5.0.0, outside the range"
case_ package-kokkos-5 package 's/"kokkos@4"/"kokkos@4.6:"/' "outside the range Tessera supports"
case_ env-kokkos-pair env \
  '/^    kokkos:/,/"@4"/s/"@4"/"@4.5"/; /^    kokkos-kernels:/,/"@4"/s/"@4"/"@4.6"/' \
  "cannot go with kokkos 4.5.01, 4.5.00"
case_ env-kokkos-none env '/^    kokkos:/,/"@4"/s/"@4"/"@4.5.01,4.6.02"/; /^  specs:/a\
  - kokkos@4.6.00:4.6.01' \
  "no version of kokkos satisfies all of"
case_ env-develop-version env 's/spec: tessera@=0.1.0/spec: tessera@=9.9/' \
  "no version of tessera matches '@=9.9'"

[ "$failures" -eq 0 ] || { echo "${failures} case(s) failed"; exit 1; }
echo "all cases rejected as expected"
