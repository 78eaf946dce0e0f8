// Reading JSON input files (model profiles, configs) so that every mistake is reported with the
// file, the line and the field: "model.json:12: units[3].params: expected a number ...".
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/core/status.h"

namespace zrt::tools {

// A parsed file and where each of its values starts.
class JsonFile {
 public:
  // Reads and parses `path`. Syntax errors name the line and column.
  Status load(const std::string& path);
  // Parses `text` as if it came from a file named `origin` (for tests and stdin).
  Status parse(const std::string& text, const std::string& origin);

  const nlohmann::json& root() const { return root_; }
  const std::string& origin() const { return origin_; }

  // The 1-based line of the value at `path` ("units[3].params"), 0 if unknown.
  int line_of(const std::string& path) const;

  // An INVALID_ARGUMENT naming origin:line and the field: "<origin>:<line>: <path>: <what>".
  Status field_error(const std::string& path, const std::string& what) const;

 private:
  nlohmann::json root_;
  std::string origin_;
  std::map<std::string, int> lines_;
};

// Maps the path of every value in (valid) JSON text to the line where it starts. Paths are
// "key", "key.sub", "list[2].key"; the root is "".
std::map<std::string, int> json_value_lines(const std::string& text);

// The JSON type name for messages ("a string", "a number", "an object", ...).
std::string json_type_phrase(const nlohmann::json& value);

}  // namespace zrt::tools
