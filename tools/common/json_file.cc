#include "tools/common/json_file.h"

#include <cerrno>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "lib/core/regular_file.h"

namespace zrt::tools {
namespace {

// A walk over already-valid JSON text that only tracks nesting, keys and line numbers:
// nlohmann's DOM keeps no positions, and a message that says "line 12" saves the user a search.
class LineWalker {
 public:
  explicit LineWalker(const std::string& text) : text_(text) {}

  std::map<std::string, int> run() {
    value("");
    return std::move(lines_);
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      if (text_[pos_] == '\n') ++line_;
      ++pos_;
    }
  }

  std::string string_token() {
    std::string out;
    ++pos_;  // opening quote
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
      out += text_[pos_++];
    }
    ++pos_;  // closing quote
    return out;
  }

  void value(const std::string& path) {
    skip_space();
    if (pos_ >= text_.size()) return;
    lines_.emplace(path, line_);
    char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      while (true) {
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] == '}') break;
        if (text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        std::string key = string_token();
        skip_space();
        ++pos_;  // ':'
        value(path.empty() ? key : path + "." + key);
      }
      ++pos_;
    } else if (c == '[') {
      ++pos_;
      size_t index = 0;
      while (true) {
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] == ']') break;
        if (text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        value(fmt::format("{}[{}]", path, index++));
      }
      ++pos_;
    } else if (c == '"') {
      string_token();
    } else {
      while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '}' &&
             text_[pos_] != ']' && !std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      }
    }
  }

  const std::string& text_;
  size_t pos_ = 0;
  int line_ = 1;
  std::map<std::string, int> lines_;
};

}  // namespace

std::map<std::string, int> json_value_lines(const std::string& text) {
  return LineWalker(text).run();
}

std::string json_type_phrase(const nlohmann::json& value) {
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_object()) return "an object";
  if (value.is_array()) return "a list";
  return "null";
}

Status JsonFile::load(const std::string& path) {
  std::string text;
  ZRT_RETURN_IF_ERROR(read_regular_file(path, "file", size_t{256} << 20, &text));
  return parse(text, path);
}

Status JsonFile::parse(const std::string& text, const std::string& origin) {
  origin_ = origin;
  try {
    root_ = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based; turn it into line:column.
    size_t end = std::min(text.size(), e.byte > 0 ? static_cast<size_t>(e.byte - 1) : 0);
    int line = 1, column = 1;
    for (size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    // nlohmann's text repeats the position as "[json.exception.parse_error.101] parse error at
    // line 3, column 5: ..."; keep only the part after the position.
    size_t colon = what.find(": ", what.find("parse error"));
    if (colon != std::string::npos) what = what.substr(colon + 2);
    return Status::invalid_argument("{}:{}:{}: not valid JSON: {}", origin, line, column, what);
  } catch (const nlohmann::json::exception& e) {
    // The parser also throws out_of_range, e.g. for a number beyond a double ("1e999"): found
    // by tests/fuzz (regressions/model_profile/number_overflow).
    return Status::invalid_argument("{}: not valid JSON: {}", origin, e.what());
  }
  lines_ = json_value_lines(text);
  return Status::ok();
}

int JsonFile::line_of(const std::string& path) const {
  auto it = lines_.find(path);
  return it == lines_.end() ? 0 : it->second;
}

Status JsonFile::field_error(const std::string& path, const std::string& what) const {
  int line = line_of(path);
  if (line == 0) return Status::invalid_argument("{}: {}: {}", origin_, path, what);
  return Status::invalid_argument("{}:{}: {}: {}", origin_, line, path, what);
}

}  // namespace zrt::tools
