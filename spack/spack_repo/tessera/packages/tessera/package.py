# Spack recipe for Tessera. The backend variants (openmp, serial, +cuda
# cuda_arch=, +rocm amdgpu_target=) are handed down to Kokkos and Kokkos
# Kernels, so that one spec builds a consistent stack; the Kokkos range is the
# one CMakeLists.txt accepts (see README, "Supported Kokkos versions").
# scripts/lint-spack.py checks every spec in this file against Spack's recipes;
# scripts/spack-check.sh runs Spack's own audit and concretizer on it.
import os

from spack_repo.builtin.build_systems.cmake import CMakePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.build_systems.rocm import ROCmPackage

from spack.package import *

# Tessera is not published yet: its source is the clone this recipe lives in
# (spack/spack_repo/tessera/packages/tessera/ inside it). A site whose recipe
# lives elsewhere names its clone in packages.yaml (package_attributes: git:);
# README, "Building with Spack".
_CLONE = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))


class Tessera(CMakePackage, CudaPackage, ROCmPackage):
    """Deep-learning training engine for HPC: layers are Kokkos kernels for OpenMP,
    CUDA and HIP, Kokkos Kernels does the BLAS, MPI gives data parallelism, HDF5
    holds checkpoints; runs are driven by TOML input decks."""

    homepage = "file://" + os.path.join(_CLONE, "README.md")
    git = "file://" + _CLONE

    # The version CMakeLists.txt gives the main branch (no release tags yet).
    # spack.yaml develops the checkout in place, so nothing is fetched there.
    version("0.1.0", branch="main")

    variant("openmp", default=True, description="OpenMP backend on the host (Kokkos +openmp)")
    variant(
        "serial",
        default=True,
        description="Serial backend (Kokkos +serial); the unit tests also run on it",
    )
    variant(
        "apps",
        default=True,
        description="tessera-train, -predict, -bench, -inspect, -idx2hdf5, -compare, -export",
    )
    variant("shared", default=True, description="Build a shared libtessera")
    variant(
        "python",
        default=False,
        when="+apps",
        description="Python with matplotlib (tessera-compare --png), h5py and onnx (tessera-export) "
        "(off: the system python3 and its packages)",
    )
    variant(
        "gpu_aware_mpi",
        default=False,
        description="An MPI that reads CUDA/ROCm memory: gradients reach it as device pointers",
    )
    variant(
        "tests",
        default=False,
        description="Build the test suite (spack install --test=root runs it)",
    )
    variant(
        "compile_only",
        default=False,
        when="+tests",
        description="Build the tests but register none (GPU builds on build nodes without a GPU)",
    )

    conflicts("+cuda", when="+rocm", msg="Kokkos builds one device backend at a time")
    conflicts("~openmp ~serial", msg="Kokkos needs a host backend: keep +openmp or +serial")
    conflicts("+cuda", when="cuda_arch=none", msg="give the GPU, e.g. cuda_arch=90 (H100)")
    conflicts("+rocm", when="amdgpu_target=none", msg="give the GPU, e.g. amdgpu_target=gfx90a")
    conflicts(
        "+gpu_aware_mpi",
        when="~cuda ~rocm",
        msg="+gpu_aware_mpi is for +cuda or +rocm builds; host buffers always go to MPI directly",
    )

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    depends_on("cmake@3.20:", type="build")

    # Kokkos 4.x; CMakeLists.txt also accepts Debian's 3.4.01, which Spack
    # does not offer. Kokkos 5 needs C++20 and is not supported yet.
    depends_on("kokkos@4")
    depends_on("kokkos-kernels@4")

    # Tessera's tensors are float, row-major: the kernels Kokkos Kernels
    # pre-instantiates must be those and only those (scalars=float alone
    # would keep the recipe's default double beside it).
    depends_on("kokkos-kernels scalars:=float layouts=right")
    depends_on("kokkos+openmp", when="+openmp")
    depends_on("kokkos-kernels+openmp+execspace_openmp", when="+openmp")
    depends_on("kokkos+serial", when="+serial")
    depends_on("kokkos-kernels+serial+execspace_serial", when="+serial")
    # Host BLAS (the recipe's BLAS TPL also wants a Fortran compiler).
    depends_on("kokkos-kernels+blas", when="~cuda ~rocm")
    # That BLAS is OpenBLAS on the OpenMP runtime Kokkos uses: one thread
    # pool, not two fighting over the cores. A direct dependency: with Spack
    # 1.1, requires("^openblas threads=openmp", when="+openmp ^openblas") and
    # the same with ^[virtuals=blas] both left threads=none (OpenBLAS comes
    # in through Kokkos Kernels).
    depends_on("openblas threads=openmp", when="+openmp ~cuda ~rocm")

    # CUDA: Kokkos and Kokkos Kernels for the same GPU, cuBLAS for gemm,
    # extended lambdas (Tessera uses KOKKOS_LAMBDA; Kokkos 5 always has them),
    # and nvcc_wrapper as the C++ compiler when the host compiler is GCC.
    for _arch in CudaPackage.cuda_arch_values:
        with when(f"+cuda cuda_arch={_arch}"):
            depends_on(f"kokkos+cuda cuda_arch={_arch}")
            depends_on(f"kokkos-kernels+cuda cuda_arch={_arch}")
    depends_on("kokkos-kernels+cublas+execspace_cuda+memspace_cudaspace", when="+cuda")
    requires("^kokkos+cuda_lambda", when="+cuda ^kokkos@:4")
    depends_on("kokkos+wrapper", when="+cuda %gcc")

    # ROCm: the same for HIP with rocBLAS (Kokkos Kernels has no
    # amdgpu_target: the GPU it compiles for is Kokkos').
    for _arch in ROCmPackage.amdgpu_targets:
        with when(f"+rocm amdgpu_target={_arch}"):
            depends_on(f"kokkos+rocm amdgpu_target={_arch}")
            depends_on(f"rocblas amdgpu_target={_arch}")
    depends_on("kokkos-kernels+rocblas", when="+rocm")

    depends_on("mpi")
    # The MPI libraries that can read device memory, built to do so.
    requires(
        "^openmpi+cuda",
        "^mpich+cuda",
        "^cray-mpich+cuda",
        policy="one_of",
        when="+gpu_aware_mpi +cuda",
        msg="+gpu_aware_mpi +cuda needs a CUDA-aware MPI: openmpi, mpich or cray-mpich +cuda",
    )
    # Their ROCm builds need the GPU too (amdgpu_target=none conflicts with +rocm).
    for _arch in ROCmPackage.amdgpu_targets:
        requires(
            f"^openmpi+rocm amdgpu_target={_arch}",
            f"^mpich+rocm amdgpu_target={_arch}",
            f"^cray-mpich+rocm amdgpu_target={_arch}",
            policy="one_of",
            when=f"+gpu_aware_mpi +rocm amdgpu_target={_arch}",
            msg="+gpu_aware_mpi +rocm needs a ROCm-aware MPI: openmpi, mpich or cray-mpich +rocm",
        )
    depends_on("hdf5@1.10:+mpi")
    depends_on("tomlplusplus@3:")
    depends_on("nlohmann-json@3:")
    depends_on("zlib-api")
    depends_on("cli11@2:", when="+apps")
    # tessera-compare runs on any python3; its --png chart wants matplotlib.
    depends_on("python@3.8:", type="run", when="+python")
    depends_on("py-matplotlib", type="run", when="+python")
    # tessera-export reads checkpoints with h5py and writes ONNX (opset 17)
    # with onnx; its --pytorch output also wants a torch the user provides.
    depends_on("py-numpy", type="run", when="+python")
    depends_on("py-h5py", type="run", when="+python")
    depends_on("py-onnx@1.12:", type="run", when="+python")
    # The suite's own tests include Python scripts (tests/ecosystem).
    depends_on("googletest", when="+tests")
    depends_on("python@3.8:", type="build", when="+tests")
    depends_on("googletest", type="test")
    depends_on("python@3.8:", type="test")

    test_requires_compiler = True

    @property
    def tessera_cxx(self):
        """The C++ compiler Kokkos was built with: nvcc_wrapper, hipcc or Spack's.
        For ROCm that is the spec's compiler when Kokkos' recipe builds with it
        (clang, rocmcc: llvm-amdgpu's amdclang++ matches %cxx=rocmcc in Spack
        1.1) and hipcc otherwise, as Kokkos Kernels' recipe decides."""
        kokkos = self.spec["kokkos"]
        if self.spec.satisfies("+rocm") and not (
            kokkos.satisfies("%cxx=clang") or kokkos.satisfies("%cxx=rocmcc")
        ):
            return self.spec["hip"].hipcc
        return self["kokkos"].kokkos_cxx

    def cmake_args(self):
        kokkos = self.spec["kokkos"]
        # Recorded in every app's --version and in tessera-bench reports.
        build_spec = "{0} ^{1}".format(
            self.spec.format("{name}{@version}{variants}{ arch=architecture}"),
            kokkos.format("{name}{@version}{variants}"),
        )
        tests = self.run_tests or self.spec.satisfies("+tests")
        args = [
            self.define("CMAKE_CXX_COMPILER", self.tessera_cxx),
            self.define("Kokkos_ROOT", kokkos.prefix),
            self.define("KokkosKernels_ROOT", self.spec["kokkos-kernels"].prefix),
            self.define_from_variant("BUILD_SHARED_LIBS", "shared"),
            self.define_from_variant("Tessera_ENABLE_APPS", "apps"),
            self.define_from_variant("Tessera_ENABLE_GPU_AWARE_MPI", "gpu_aware_mpi"),
            self.define("Tessera_ENABLE_TESTS", tests),
            self.define("Tessera_ENABLE_COMPILE_ONLY", self.spec.satisfies("+compile_only")),
            # clang-format 14 and shellcheck check the source tree, not the build.
            self.define("Tessera_ENABLE_STYLE_TESTS", False),
            self.define("Tessera_BUILD_SPEC", build_spec),
        ]
        if self.spec.satisfies("+python"):
            # tessera-export runs under the Python that has h5py and onnx.
            args.append(self.define("Tessera_PYTHON", self.spec["python"].command.path))
        return args

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
