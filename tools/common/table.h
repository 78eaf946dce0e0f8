// A plain-text table for terminal output: columns sized to their widest cell, numbers aligned
// right, an optional '#' prefix on header lines so that `grep -v '^#'` leaves only data rows
// (the convention of nccl-tests, which many users already pipe into scripts).
#pragma once

#include <string>
#include <vector>

namespace zrt::tools {

class Table {
 public:
  enum class Align { kLeft, kRight };

  void add_column(std::string header, Align align = Align::kRight);
  // A row must have one cell per column; missing cells print empty, extra ones are dropped.
  void add_row(std::vector<std::string> cells);
  // A full-width line between rows (a section title).
  void add_separator(std::string text);

  // Header lines start with `header_prefix` ("# " or ""), data rows with as many spaces.
  std::string render(const std::string& header_prefix = "") const;

  size_t rows() const { return rows_.size(); }

 private:
  struct Column {
    std::string header;
    Align align;
  };
  struct Row {
    bool separator = false;
    std::vector<std::string> cells;
  };
  std::vector<Column> columns_;
  std::vector<Row> rows_;
};

}  // namespace zrt::tools
