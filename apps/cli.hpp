// Command-line parsing shared by the apps, done before Kokkos starts:
// --help and --version print and exit 0; --kokkos-* options are left to
// Kokkos (tessera::Runtime), and --kokkos-help prints Kokkos' own options;
// a bad command line prints the problem and a hint, and exits 2.
#pragma once

#include <tessera/core/runtime.hpp>

#include <CLI/CLI.hpp>
#include <Kokkos_Core.hpp>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace tessera::app {

// The rank a launcher gives each process, by launcher.
inline constexpr const char* launcher_rank_variables[] = {
    "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"};

// Whether this process is the first of an MPI job (or not under a launcher).
// Read from the launchers' environment, since MPI is not started yet when the
// command line is parsed: under mpiexec only the first rank prints help.
inline bool first_rank() {
  for (const char* name : launcher_rank_variables)
    if (const char* value = std::getenv(name)) return std::string(value) == "0";
  return true;
}

// Whether a launcher (mpiexec, srun) started this process: its output then
// goes through the launcher, a pty or a pipe to the job's log, never straight
// to a user's terminal.
inline bool under_launcher() {
  for (const char* name : launcher_rank_variables)
    if (std::getenv(name)) return true;
  return false;
}

inline bool is_kokkos_option(const std::string& arg) { return arg.rfind("--kokkos-", 0) == 0; }

// The exit status when the app should stop now (help or version shown, or a
// bad command line); nothing when it should go on. Kokkos' options stay in
// argv for Kokkos to read; the app never sees them.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const std::string& program) {
  app.name(program);  // parsed from a vector below, CLI11 does not see argv[0]
  app.set_version_flag(
      "--version", [] { return build_configuration(); },
      "print how this build was made (Tessera, Kokkos and its backends, "
      "Kokkos Kernels, BLAS, compiler) and exit");
  app.footer(
      "Kokkos options (--kokkos-num-threads=N, --kokkos-device-id=N, ...) go to Kokkos; "
      "--kokkos-help lists them. Kokkos Tools: set KOKKOS_TOOLS_LIBS to a tool library "
      "(see README, \"Profiling with Kokkos Tools\").");
  std::vector<std::string> args;  // CLI11 takes them in reverse order
  bool kokkos_help = false;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string arg = argv[i];
    if (is_kokkos_option(arg)) {
      kokkos_help = kokkos_help || arg == "--kokkos-help";
      continue;
    }
    args.push_back(arg);
  }
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    if (first_rank()) std::cout << app.help();
    return 0;
  } catch (const CLI::CallForVersion& e) {
    if (first_rank()) std::cout << e.what();
    return 0;
  } catch (const CLI::ParseError& e) {
    if (!kokkos_help) {  // --kokkos-help alone lacks the app's required arguments
      if (first_rank())
        std::cerr << program << ": " << e.what() << "\nrun '" << program << " --help' for usage\n";
      return 2;
    }
  }
  if (kokkos_help) {
    // Kokkos prints its options when it starts with --kokkos-help.
    int kokkos_argc = argc;
    Kokkos::initialize(kokkos_argc, argv);
    Kokkos::finalize();
    return 0;
  }
  return std::nullopt;
}

}  // namespace tessera::app
