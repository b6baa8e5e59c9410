// Command-line parsing shared by the apps: --help prints the usage and
// exits 0; a bad command line prints the problem and a hint, and exits 2.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <string>

namespace tessera::app {

// The exit status when the app should stop now (help shown, or a bad
// command line); nothing when it should go on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv,
                                             const std::string& program) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << program << ": " << e.what() << "\nrun '" << program << " --help' for usage\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace tessera::app
