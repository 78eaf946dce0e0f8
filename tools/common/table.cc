#include "tools/common/table.h"

#include <algorithm>
#include <utility>

namespace zrt::tools {

void Table::add_column(std::string header, Align align) {
  columns_.push_back({std::move(header), align});
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back({false, std::move(cells)});
}

void Table::add_separator(std::string text) {
  rows_.push_back({true, {std::move(text)}});
}

std::string Table::render(const std::string& header_prefix) const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) widths[c] = columns_[c].header.size();
  for (const Row& row : rows_) {
    if (row.separator) continue;
    for (size_t c = 0; c < columns_.size(); ++c)
      widths[c] = std::max(widths[c], row.cells[c].size());
  }
  auto cell = [&](const std::string& text, size_t c) {
    std::string pad(widths[c] - std::min(widths[c], text.size()), ' ');
    return columns_[c].align == Align::kRight ? pad + text : text + pad;
  };
  auto line = [&](const std::vector<std::string>& cells, const std::string& prefix) {
    std::string out = prefix;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (c > 0) out += "  ";
      out += cell(cells[c], c);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::vector<std::string> headers;
  for (const Column& column : columns_) headers.push_back(column.header);
  std::string data_prefix(header_prefix.size(), ' ');
  std::string out = line(headers, header_prefix);
  for (const Row& row : rows_) {
    if (row.separator) {
      out += header_prefix + row.cells[0] + "\n";
    } else {
      out += line(row.cells, data_prefix);
    }
  }
  return out;
}

}  // namespace zrt::tools
