// A small SVG line chart: y against x, one polyline per series, labelled axes, optional
// log-scale x (message sizes span 8 B to GiBs), a legend. Self-contained (no scripts, no
// external fonts) so the file opens in any browser and can be attached to an issue.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lib/core/status.h"

namespace zrt::tools {

struct PlotSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};

struct Plot {
  std::string title;
  std::string x_label;
  std::string y_label;
  bool log_x = false;  // base-2 ticks
  // Tick text for an x value (default "%g"); zrt-bench passes format_size.
  std::function<std::string(double)> x_tick_label;
  std::vector<PlotSeries> series;
};

// Renders the plot. Refuses series with mismatched x/y lengths, and non-positive x on a log axis.
Status render_svg(const Plot& plot, std::string* svg);

// Writes text to path; the message names the file and the OS error.
Status write_text_file(const std::string& path, const std::string& text);

// Escapes &, <, >, " for SVG/XML text.
std::string xml_escape(const std::string& text);

}  // namespace zrt::tools
