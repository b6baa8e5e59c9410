// Test entry point: MPI and Kokkos come up once for all tests of a binary,
// and every skipped test case is accounted for: a skip that
// tests/expected_skips.txt does not list for this build's test
// configuration fails the binary (ctest shows a GTEST_SKIP as a pass).
#include <gtest/gtest.h>
#include <tessera/core/runtime.hpp>

#include "tessera_test.hpp"

#include <fnmatch.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct ExpectedSkip {
  std::string configuration, pattern, reason;
};

// tests/expected_skips.txt: `configuration  Suite.Test-pattern  reason`, `#`
// comments. The pattern is a shell glob over the full test name.
std::vector<ExpectedSkip> read_expected_skips(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "tessera tests: cannot read the expected skips " << path << "\n";
    std::exit(1);
  }
  std::vector<ExpectedSkip> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    ExpectedSkip skip;
    if (!(fields >> skip.configuration) || skip.configuration[0] == '#') continue;
    fields >> skip.pattern >> std::ws;
    std::getline(fields, skip.reason);
    if (skip.pattern.empty() || skip.reason.empty()) {
      std::cerr << path << ":" << number
                << ": expected `configuration Suite.Test-pattern reason`, got: " << line << "\n";
      std::exit(1);
    }
    out.push_back(skip);
  }
  return out;
}

class SkipAccounting : public ::testing::EmptyTestEventListener {
 public:
  SkipAccounting(std::string configuration, std::vector<ExpectedSkip> expected)
      : configuration_(std::move(configuration)), expected_(std::move(expected)) {}

  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (!info.result()->Skipped()) return;
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    std::string message;
    for (int i = 0; i < info.result()->total_part_count(); ++i)
      if (info.result()->GetTestPartResult(i).skipped())
        message = info.result()->GetTestPartResult(i).message();
    for (const auto& skip : expected_)
      if (skip.configuration == configuration_ &&
          ::fnmatch(skip.pattern.c_str(), name.c_str(), 0) == 0) {
        expected_skips_.push_back(name + " (expected: " + skip.reason + ")");
        return;
      }
    unexpected_.push_back(name + ": " + message);
  }

  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    for (const auto& s : expected_skips_) std::cout << "[ SKIPPED  ] " << s << "\n";
    for (const auto& s : unexpected_)
      std::cout << "[  FAILED  ] unexpected skip in test configuration '" << configuration_
                << "': " << s << "\n";
    if (!unexpected_.empty())
      std::cout << "tessera tests: " << unexpected_.size()
                << " skipped test case(s) are not listed for configuration '" << configuration_
                << "' in " << tessera::test::source_dir()
                << "/tests/expected_skips.txt: make the case run in this configuration, or "
                   "list it there with the reason\n";
  }

  bool failed() const { return !unexpected_.empty(); }

 private:
  std::string configuration_;
  std::vector<ExpectedSkip> expected_;
  std::vector<std::string> expected_skips_, unexpected_;
};

// TESSERA_TEST_INJECT_SKIP=1 adds a test case that skips, so that
// tests/skip_accounting_check.sh can see an unexpected skip fail the binary.
class InjectedSkip : public ::testing::Test {
 public:
  void TestBody() override { GTEST_SKIP() << "injected by TESSERA_TEST_INJECT_SKIP"; }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The build's configuration (CMake's Tessera_TEST_CONFIGURATION), unless
  // the environment names another.
  const char* env = std::getenv("TESSERA_TEST_CONFIGURATION");
  const std::string configuration = env && *env ? env : TESSERA_TEST_CONFIGURATION;
  auto* accounting = new SkipAccounting(
      configuration,
      read_expected_skips(tessera::test::source_dir() + "/tests/expected_skips.txt"));
  ::testing::UnitTest::GetInstance()->listeners().Append(accounting);  // gtest owns it
  if (const char* inject = std::getenv("TESSERA_TEST_INJECT_SKIP"); inject && *inject)
    ::testing::RegisterTest("SkipAccounting", "InjectedSkip", nullptr, nullptr, __FILE__, __LINE__,
                            []() -> ::testing::Test* { return new InjectedSkip; });
  tessera::Runtime runtime(argc, argv);
  const int status = RUN_ALL_TESTS();
  return status != 0 || accounting->failed() ? 1 : 0;
}
