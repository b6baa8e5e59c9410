# cmake -P script: the Kokkos checks of cmake/TesseraKokkos.cmake, which
# Tessera's build and its installed config both run, on versions and backend
# lists that must pass and that must be refused with a message saying why.
cmake_minimum_required(VERSION 3.20)
include("${TESSERA_SOURCE_DIR}/cmake/TesseraKokkos.cmake")

# expect(<"" or message fragment> <arguments of tessera_kokkos_problem...>)
function(expect fragment)
  tessera_kokkos_problem(problem ${ARGN})
  if(fragment STREQUAL "" AND NOT problem STREQUAL "")
    message(SEND_ERROR "${ARGN}: expected no problem, got: ${problem}")
  elseif(NOT fragment STREQUAL "" AND NOT problem MATCHES "${fragment}")
    message(SEND_ERROR "${ARGN}: expected a problem matching '${fragment}', got: '${problem}'")
  else()
    message(STATUS "ok: ${ARGN} -> '${problem}'")
  endif()
endfunction()

# The supported range: 3.4.01 up to, not including, 5.0.0.
expect("" VERSION 3.4.01 DEVICES OPENMP SERIAL)
expect("" VERSION 4.6.01 DEVICES OPENMP SERIAL)
expect("" VERSION 4.7.04 DEVICES CUDA SERIAL)
expect("Kokkos 3.3.01 is outside the range" VERSION 3.3.01 DEVICES OPENMP)
expect("Kokkos 5.0.0 is outside the range" VERSION 5.0.0 DEVICES OPENMP)
expect("Kokkos 5.1.1 is outside the range" VERSION 5.1.1 DEVICES OPENMP)
# An installed Tessera: the same Kokkos version, every backend it was built with.
expect("" VERSION 3.4.01 DEVICES OPENMP SERIAL RECORDED_VERSION 3.4.01 RECORDED_DEVICES OPENMP SERIAL)
expect("" VERSION 4.6.01 DEVICES CUDA OPENMP SERIAL RECORDED_VERSION 4.6.01 RECORDED_DEVICES CUDA SERIAL)
expect("built with Kokkos 3.4.01, but Kokkos 4.6.01 was found"
  VERSION 4.6.01 DEVICES OPENMP SERIAL RECORDED_VERSION 3.4.01 RECORDED_DEVICES OPENMP SERIAL)
expect("backends OPENMP;SERIAL, but the Kokkos found has SERIAL \\(no OPENMP\\)"
  VERSION 3.4.01 DEVICES SERIAL RECORDED_VERSION 3.4.01 RECORDED_DEVICES OPENMP SERIAL)
