// docs/ENVIRONMENT.md's settings table and the settings registry (lib/core/settings.cc) say the
// same: the same variables, each with the same default, the same accepted values and the same doc.
// ZRT_ENVIRONMENT_DOC_PATH is the source tree's docs/ENVIRONMENT.md (tests/core/meson.build).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lib/core/settings.h"

namespace zrt {
namespace {

struct Row {
  std::string default_value;
  std::string accepts;
  std::string meaning;
};

std::string trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(' ');
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(' ') - begin + 1);
}

std::string without_backticks(std::string text) {
  std::erase(text, '`');
  return text;
}

// "| a | b |" -> {"a", "b"}.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> result;
  std::stringstream stream(line.substr(1));
  std::string cell;
  while (std::getline(stream, cell, '|')) result.push_back(trim(cell));
  return result;
}

// The table that follows "## Settings": its header row, then one row per variable.
std::map<std::string, Row> document_rows(std::string* error) {
  std::ifstream file(ZRT_ENVIRONMENT_DOC_PATH);
  if (!file) {
    *error = std::string("cannot read ") + ZRT_ENVIRONMENT_DOC_PATH;
    return {};
  }
  std::map<std::string, Row> rows;
  std::string line;
  bool in_section = false, in_table = false;
  while (std::getline(file, line)) {
    if (line.rfind("## ", 0) == 0) {
      if (in_section) break;
      in_section = line == "## Settings";
      continue;
    }
    if (!in_section) continue;
    if (line.rfind("| variable | default | accepts | meaning |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("| ---", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;  // the table's end
    const std::vector<std::string> row = cells(line);
    if (row.size() != 4) {
      *error = "docs/ENVIRONMENT.md settings row without 4 cells: " + line;
      return {};
    }
    const std::string name = without_backticks(row[0]);
    if (rows.count(name) != 0) *error = name + " is listed twice in docs/ENVIRONMENT.md";
    rows[name] = Row{without_backticks(row[1]), row[2], row[3]};
  }
  if (rows.empty() && error->empty()) *error = "docs/ENVIRONMENT.md has no settings table";
  return rows;
}

TEST(EnvironmentDoc, TableMatchesTheRegistry) {
  std::string error;
  std::map<std::string, Row> rows = document_rows(&error);
  ASSERT_EQ(error, "");
  for (const SettingSpec& spec : setting_specs()) {
    auto found = rows.find(spec.name);
    if (found == rows.end()) {
      ADD_FAILURE() << spec.name
                    << " is in the registry but not in docs/ENVIRONMENT.md's settings table";
      continue;
    }
    const Row& row = found->second;
    EXPECT_EQ(row.default_value,
              spec.default_doc != nullptr ? spec.default_doc : spec.default_value)
        << spec.name << "'s default";
    EXPECT_EQ(row.accepts, setting_accepts(spec)) << spec.name << "'s accepted values";
    EXPECT_EQ(row.meaning, spec.doc) << spec.name << "'s meaning";
    rows.erase(found);
  }
  for (const auto& [name, row] : rows) {
    ADD_FAILURE() << name << " is in docs/ENVIRONMENT.md's settings table but not in the registry";
  }
}

}  // namespace
}  // namespace zrt
