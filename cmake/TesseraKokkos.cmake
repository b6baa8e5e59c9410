# The Kokkos versions Tessera supports, and the checks that keep a build (and
# a project that uses the installed Tessera) on a Kokkos it can work with.
#
# Supported: Kokkos and Kokkos Kernels 3.4.01 (Debian's) up to any 4.x (what
# Spack offers); CI builds 3.4.01 and 4.6.01. Kokkos 5 requires C++20, which
# Tessera builds as too, and removed APIs that 4.x only deprecated; no Kokkos
# 5 release has passed Tessera's suite yet (README, "Supported Kokkos
# versions"), so 5.x is refused here instead of failing somewhere later.
# find_package(Kokkos 3.4.01...<5) cannot say this: Kokkos 3.x installs a
# version file that accepts only ranges within major version 3. So the lower
# bound goes to find_package() and the upper bound is checked below.
# spack.yaml and the Spack package pin Kokkos 4; scripts/lint-spack.py checks
# that they stay inside this range.
set(Tessera_KOKKOS_MIN_VERSION 3.4.01)
set(Tessera_KOKKOS_MAX_VERSION 5.0.0)  # exclusive

# Sets <out> to a message when a found Kokkos does not fit, empty otherwise.
# With RECORDED_VERSION/RECORDED_DEVICES (an installed Tessera's config), the
# Kokkos found must be the one Tessera was built with: the same version (the
# library is compiled against its headers) and every backend it used.
function(tessera_kokkos_problem out)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "VERSION;RECORDED_VERSION"
                        "DEVICES;RECORDED_DEVICES")
  set(problem "")
  if(arg_VERSION VERSION_LESS Tessera_KOKKOS_MIN_VERSION
     OR NOT arg_VERSION VERSION_LESS Tessera_KOKKOS_MAX_VERSION)
    string(CONCAT problem "Kokkos ${arg_VERSION} is outside the range Tessera supports "
                  "(${Tessera_KOKKOS_MIN_VERSION} up to, not including, "
                  "${Tessera_KOKKOS_MAX_VERSION}; see README, \"Supported Kokkos versions\")")
  elseif(DEFINED arg_RECORDED_VERSION AND NOT arg_VERSION VERSION_EQUAL arg_RECORDED_VERSION)
    string(CONCAT problem "Tessera was built with Kokkos ${arg_RECORDED_VERSION}, but Kokkos "
                  "${arg_VERSION} was found; point CMAKE_PREFIX_PATH (or Kokkos_ROOT) at the "
                  "Kokkos Tessera was built with, or rebuild Tessera")
  else()
    foreach(device IN LISTS arg_RECORDED_DEVICES)
      list(FIND arg_DEVICES "${device}" found)  # not IN_LIST: callers' policies may predate it
      if(found EQUAL -1)
        string(CONCAT problem "Tessera was built with the Kokkos backends "
                      "${arg_RECORDED_DEVICES}, but the Kokkos found has ${arg_DEVICES} (no "
                      "${device}); point CMAKE_PREFIX_PATH (or Kokkos_ROOT) at the Kokkos "
                      "Tessera was built with")
        break()
      endif()
    endforeach()
  endif()
  set(${out} "${problem}" PARENT_SCOPE)
endfunction()
