// Error messages name the source location relative to the source tree
// ("[src/model/loss.cpp:35]"), never with the build machine's absolute path:
// for checks in the library's sources, in its headers and in a test's own.
#include <tessera/core/error.hpp>
#include <tessera/core/tensor.hpp>
#include <tessera/model/loss.hpp>

#include <string>

#include "tessera_test.hpp"

namespace {

using namespace tessera;

// The "[file:line]" suffix of a message, checked to be relative and to name
// `file`; the message is returned for the failure report.
void expect_relative_suffix(const std::string& message, const std::string& file) {
  const auto open = message.rfind(" [");
  ASSERT_NE(open, std::string::npos) << message;
  const std::string suffix = message.substr(open + 2);
  EXPECT_NE(suffix.front(), '/') << message;
  EXPECT_EQ(suffix.rfind(file + ":", 0), 0u) << message;
  EXPECT_EQ(message.find(test::source_dir()), std::string::npos) << message;
}

template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tessera::Error";
  return "";
}

TEST(ErrorSuffix, LibrarySourceIsRelative) {
  LossOptions options;
  options.type = "hinge";
  const std::string message = message_of([&] { make_loss(options); });
  EXPECT_NE(message.find("unknown loss type 'hinge'"), std::string::npos) << message;
  expect_relative_suffix(message, "src/model/loss.cpp");
}

TEST(ErrorSuffix, LibraryHeaderIsRelative) {
  const std::string message = message_of([] { Shape{2, -3}; });
  EXPECT_NE(message.find("negative extent -3"), std::string::npos) << message;
  expect_relative_suffix(message, "include/tessera/core/tensor.hpp");
}

TEST(ErrorSuffix, TestSourceIsRelative) {
  const int line = __LINE__ + 1;
  const std::string message = message_of([] { TESSERA_REQUIRE(false, "here"); });
  EXPECT_EQ(message, "here [tests/test_error.cpp:" + std::to_string(line) + "]");
}

TEST(ErrorSuffix, InstalledHeadersAndOtherFiles) {
  EXPECT_STREQ(impl::source_relative("/opt/tessera/include/tessera/core/tensor.hpp"),
               "include/tessera/core/tensor.hpp");
  // Installed inside the source tree (a build folder's install prefix).
  const std::string inside =
      test::source_dir() + "/build/downstream-test/install/include/tessera/core/tensor.hpp";
  EXPECT_STREQ(impl::source_relative(inside.c_str()), "include/tessera/core/tensor.hpp");
  EXPECT_STREQ(impl::source_relative("/home/me/app/main.cpp"), "/home/me/app/main.cpp");
}

}  // namespace
