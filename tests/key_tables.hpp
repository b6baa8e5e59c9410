// The key tables of a markdown reference: under each "## `[section]`" (or
// "###") heading, the rows of its first "| key | type | default | allowed |
// meaning |" table, each as its first four cells (the meaning is the
// reference's own prose). docs/decks.md and docs/sweeps.md are read this
// way and compared with what the declarations print.
#pragma once

#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tessera_test.hpp"

namespace tessera::test {

using KeyRow = std::vector<std::string>;  // key, type, default, allowed

inline std::map<std::string, std::vector<KeyRow>> key_tables(const std::string& markdown) {
  static const std::regex heading(R"(^#{2,3} `\[(\w+)\]`)");
  const std::string header = "| key | type | default | allowed | meaning |";
  std::map<std::string, std::vector<KeyRow>> tables;
  std::istringstream in(markdown);
  std::string line, section;
  bool in_table = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, heading)) {
      section = m[1];
      in_table = false;
      continue;
    }
    if (section.empty()) continue;
    if (line.rfind(header, 0) == 0 && !tables.count(section)) {
      in_table = true;
      tables[section];
      continue;
    }
    if (!in_table) continue;
    if (line.rfind("|", 0) != 0) {
      in_table = false;
      section.clear();
      continue;
    }
    if (line.rfind("|---", 0) == 0) continue;
    KeyRow row;
    std::size_t at = 1;
    for (int cell = 0; cell < 4; ++cell) {
      const std::size_t bar = line.find('|', at);
      std::string text = line.substr(at, bar - at);
      text.erase(0, text.find_first_not_of(' '));
      text.erase(text.find_last_not_of(' ') + 1);
      row.push_back(text);
      at = bar + 1;
    }
    tables[section].push_back(row);
  }
  return tables;
}

// Every table of `reference` (what --list-keys prints) stands in the
// document at `doc` (relative to the source tree) with the same rows.
inline void expect_documented(const std::string& reference, const std::string& doc,
                              std::size_t sections) {
  std::ifstream file(source_dir() + "/" + doc);
  ASSERT_TRUE(file) << doc;
  const auto declared = key_tables(reference);
  const auto documented = key_tables(
      std::string{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()});
  ASSERT_EQ(declared.size(), sections);
  for (const auto& [section, rows] : declared) {
    SCOPED_TRACE(section);
    const auto found = documented.find(section);
    ASSERT_NE(found, documented.end()) << doc << " has no key table under `[" << section << "]`";
    EXPECT_EQ(found->second, rows)
        << "replace the first four columns of " << doc << "'s [" << section
        << "] table with those of `tessera-train --list-keys`";
  }
}

}  // namespace tessera::test
