// docs/ENVIRONMENT.md's settings table and the settings registry (lib/core/settings.cc) say the
// same: the same variables, each with the same default, the same accepted values and the same doc;
// its launcher table and the launcher-variable table (lib/core/launcher_variables.cc) the same
// variables, each set by the same launchers for the same use.
// ZRT_ENVIRONMENT_DOC_PATH is the source tree's docs/ENVIRONMENT.md (tests/core/meson.build).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "lib/core/launcher_variables.h"
#include "lib/core/settings.h"

namespace zrt {
namespace {

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

// The table that follows `section` ("## Settings"), whose header row starts with `header`: one
// row per variable, keyed by the first cell without backticks, the other cells as they stand.
std::map<std::string, std::vector<std::string>> document_rows(const std::string& section,
                                                              const std::string& header,
                                                              size_t cell_count,
                                                              std::string* error) {
  std::ifstream file(ZRT_ENVIRONMENT_DOC_PATH);
  if (!file) {
    *error = std::string("cannot read ") + ZRT_ENVIRONMENT_DOC_PATH;
    return {};
  }
  std::map<std::string, std::vector<std::string>> rows;
  std::string line;
  bool in_section = false, in_table = false;
  while (std::getline(file, line)) {
    if (line.rfind("## ", 0) == 0) {
      if (in_section) break;
      in_section = line == section;
      continue;
    }
    if (!in_section) continue;
    if (line.rfind(header, 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("| ---", 0) == 0) continue;
    if (line.rfind("|", 0) != 0) break;  // the table's end
    std::vector<std::string> row = cells(line);
    if (row.size() != cell_count) {
      *error = "docs/ENVIRONMENT.md " + section + " row without " + std::to_string(cell_count) +
               " cells: " + line;
      return {};
    }
    const std::string name = without_backticks(row[0]);
    if (rows.count(name) != 0) *error = name + " is listed twice in docs/ENVIRONMENT.md";
    row.erase(row.begin());
    rows[name] = std::move(row);
  }
  if (rows.empty() && error->empty()) *error = "docs/ENVIRONMENT.md has no table under " + section;
  return rows;
}

TEST(EnvironmentDoc, TableMatchesTheRegistry) {
  std::string error;
  std::map<std::string, std::vector<std::string>> rows = document_rows(
      "## Settings", "| variable | default | accepts | meaning |", 4, &error);
  ASSERT_EQ(error, "");
  for (const SettingSpec& spec : setting_specs()) {
    auto found = rows.find(spec.name);
    if (found == rows.end()) {
      ADD_FAILURE() << spec.name
                    << " is in the registry but not in docs/ENVIRONMENT.md's settings table";
      continue;
    }
    const std::vector<std::string>& row = found->second;
    EXPECT_EQ(without_backticks(row[0]),
              spec.default_doc != nullptr ? spec.default_doc : spec.default_value)
        << spec.name << "'s default";
    EXPECT_EQ(row[1], setting_accepts(spec)) << spec.name << "'s accepted values";
    EXPECT_EQ(row[2], spec.doc) << spec.name << "'s meaning";
    rows.erase(found);
  }
  for (const auto& [name, row] : rows) {
    ADD_FAILURE() << name << " is in docs/ENVIRONMENT.md's settings table but not in the registry";
  }
}

TEST(EnvironmentDoc, LauncherTableMatchesTheLauncherVariables) {
  std::string error;
  std::map<std::string, std::vector<std::string>> rows = document_rows(
      "## Launcher variables", "| variable | set by | zrt uses it for |", 3, &error);
  ASSERT_EQ(error, "");
  for (const LauncherVariableSpec& spec : launcher_variable_specs()) {
    const std::string label = launcher_variable_label(spec);
    auto found = rows.find(label);
    if (found == rows.end()) {
      ADD_FAILURE() << label
                    << " is in the launcher-variable table but not in docs/ENVIRONMENT.md's";
      continue;
    }
    EXPECT_EQ(found->second[0], spec.set_by) << label << ": who sets it";
    EXPECT_EQ(found->second[1], spec.use) << label << ": what zrt uses it for";
    rows.erase(found);
  }
  for (const auto& [name, row] : rows) {
    ADD_FAILURE() << name
                  << " is in docs/ENVIRONMENT.md's launcher table but not in the launcher-variable "
                     "table (lib/core/launcher_variables.cc)";
  }
}

}  // namespace
}  // namespace zrt
