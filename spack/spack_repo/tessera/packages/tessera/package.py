# Spack recipe for Tessera. The backend variants (openmp, serial, +cuda
# cuda_arch=, +rocm amdgpu_target=) are handed down to Kokkos and Kokkos
# Kernels, so that one spec builds a consistent stack; the Kokkos range is the
# one CMakeLists.txt accepts (see README, "Supported Kokkos versions").
# scripts/lint-spack.py checks every spec in this file against Spack's recipes.
from spack_repo.builtin.build_systems.cmake import CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.build_systems.rocm import ROCmPackage

from spack.package import *


class Tessera(CMakePackage, CudaPackage, ROCmPackage):
    """Deep-learning training engine for HPC: layers are Kokkos kernels for OpenMP,
    CUDA and HIP, Kokkos Kernels does the BLAS, MPI gives data parallelism, HDF5
    holds checkpoints; runs are driven by TOML input decks."""

    # The sources are this repository: spack.yaml develops it in place
    # (`develop: tessera: path: .`), so no download is involved.
    version("0.1.0")

    variant("openmp", default=True, description="OpenMP backend on the host (Kokkos +openmp)")
    variant(
        "serial",
        default=True,
        description="Serial backend (Kokkos +serial); the unit tests also run on it",
    )
    variant("apps", default=True, description="tessera-train, -bench, -inspect, -idx2hdf5, -compare")
    variant("shared", default=True, description="Build a shared libtessera")

    conflicts("+cuda", when="+rocm", msg="Kokkos builds one device backend at a time")
    conflicts("~openmp ~serial", msg="Kokkos needs a host backend: keep +openmp or +serial")
    conflicts("+cuda", when="cuda_arch=none", msg="give the GPU, e.g. cuda_arch=80 (A100)")
    conflicts("+rocm", when="amdgpu_target=none", msg="give the GPU, e.g. amdgpu_target=gfx90a")

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")

    # Kokkos 4.x; CMakeLists.txt also accepts Debian's 3.4.01, which Spack
    # does not offer. Kokkos 5 needs C++20 and is not supported yet.
    depends_on("kokkos@4")
    depends_on("kokkos-kernels@4")

    # Tessera's tensors are float, row-major: the kernels Kokkos Kernels
    # pre-instantiates must be those, for every backend Tessera runs on.
    depends_on("kokkos-kernels scalars=float layouts=right")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos-kernels+openmp+execspace_openmp", when="+openmp")
    depends_on("kokkos+serial", when="+serial")
    depends_on("kokkos-kernels+serial+execspace_serial", when="+serial")
    # Host BLAS (the recipe's BLAS TPL also wants a Fortran compiler).
    depends_on("kokkos-kernels+blas", when="~cuda ~rocm")

    # CUDA: Kokkos and Kokkos Kernels for the same GPU, cuBLAS for gemm,
    # extended lambdas (Tessera uses KOKKOS_LAMBDA; Kokkos 5 always has them),
    # and nvcc_wrapper as the C++ compiler when the host compiler is GCC.
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
    depends_on("kokkos-kernels+cuda+cublas+execspace_cuda+memspace_cudaspace", when="+cuda")
    depends_on("kokkos+cuda_lambda", when="+cuda ^kokkos@:4")
    depends_on("kokkos+wrapper", when="+cuda %gcc")

    # ROCm: the same for HIP with rocBLAS.
    for _arch in ROCmPackage.amdgpu_targets:
        depends_on(f"kokkos+rocm amdgpu_target={_arch}", when=f"+rocm amdgpu_target={_arch}")
        depends_on(f"rocblas amdgpu_target={_arch}", when=f"+rocm amdgpu_target={_arch}")
    depends_on("kokkos-kernels+rocblas", when="+rocm")

    depends_on("mpi")
    depends_on("hdf5@1.10:+mpi")
    depends_on("tomlplusplus@3:")
    depends_on("nlohmann-json@3:")
    depends_on("zlib-api")
    depends_on("cli11@2:", when="+apps")
    # tessera-compare; its --png chart also wants py-matplotlib.
    depends_on("python@3.8:", type="run", when="+apps")
    depends_on("googletest", type="test")

    test_requires_compiler = True

    @property
    def tessera_cxx(self):
        """The C++ compiler Kokkos was built with: nvcc_wrapper, hipcc or Spack's."""
        if self.spec.satisfies("+rocm"):
            return self.spec["hip"].hipcc
        return self["kokkos"].kokkos_cxx

    def cmake_args(self):
        kokkos = self.spec["kokkos"]
        # Recorded in every app's --version and in tessera-bench reports.
        build_spec = "{0} ^{1}".format(
            self.spec.format("{name}{@version}{variants}{ arch=architecture}"),
            kokkos.format("{name}{@version}{variants}"),
        )
        return [
            self.define("CMAKE_CXX_COMPILER", self.tessera_cxx),
            self.define("Kokkos_ROOT", kokkos.prefix),
            self.define("KokkosKernels_ROOT", self.spec["kokkos-kernels"].prefix),
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            self.define_from_variant("Tessera_ENABLE_APPS", "apps"),
            self.define("Tessera_ENABLE_TESTS", self.run_tests),
            # clang-format 14 and shellcheck check the source tree, not the build.
            self.define("Tessera_ENABLE_STYLE_TESTS", False),
            self.define("Tessera_BUILD_SPEC", build_spec),
        ]

    # Stand-alone tests (`spack test run tessera`).
    downstream_dir = join_path("tests", "downstream")

    @run_after("install")
    def cache_downstream_project(self):
        cache_extra_test_sources(self, [self.downstream_dir])

    def test_downstream_find_package(self):
        """configure, build and run tests/downstream against the installed package"""
        source = join_path(self.test_suite.current_test_cache_dir, self.downstream_dir)
        build = join_path(source, "build")
        mkdirp(build)
        cmake = which(self.spec["cmake"].prefix.bin.cmake, required=True)
        with working_dir(build):
            cmake(
                source,
                self.define("CMAKE_CXX_COMPILER", self.tessera_cxx),
                self.define("CMAKE_PREFIX_PATH", get_cmake_prefix_path(self)),
                self.define("Tessera_ROOT", self.prefix),
            )
            cmake("--build", ".")
            downstream = which(join_path(build, "downstream"), required=True)
            out = downstream(output=str.split, error=str.split)
            assert "works from the installed package" in out

    def test_version(self):
        """tessera-train --version names the Kokkos it was built with"""
        if not self.spec.satisfies("+apps"):
            raise SkipTest("built without the apps")
        train = which(self.prefix.bin.join("tessera-train"), required=True)
        out = train("--version", output=str.split, error=str.split)
        # "Kokkos: 4.6.1, backends ..." for Kokkos 4.6.01
        assert "Kokkos: {0}.".format(self.spec["kokkos"].version.up_to(2)) in out, out
