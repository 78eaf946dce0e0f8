#include "tools/common/svg_plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

namespace zrt::tools {
namespace {

constexpr double kWidth = 800, kHeight = 500;
constexpr double kLeft = 80, kRight = 180, kTop = 50, kBottom = 70;  // margins
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                   "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// A "nice" tick step (1, 2 or 5 × 10^k) giving about `target` ticks over `range`.
double nice_step(double range, int target) {
  double raw = range / target;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double normalized = raw / magnitude;
  double nice = normalized < 1.5 ? 1 : normalized < 3 ? 2 : normalized < 7 ? 5 : 10;
  return nice * magnitude;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Status render_svg(const Plot& plot, std::string* svg) {
  double x_min = std::numeric_limits<double>::max(), x_max = std::numeric_limits<double>::lowest();
  double y_max = 0;
  for (const PlotSeries& s : plot.series) {
    if (s.x.size() != s.y.size()) {
      return Status::invalid_argument("plot series '{}': {} x values but {} y values", s.name,
                                      s.x.size(), s.y.size());
    }
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (plot.log_x && !(s.x[i] > 0)) {
        return Status::invalid_argument("plot series '{}': x = {} cannot go on a log axis", s.name,
                                        s.x[i]);
      }
      x_min = std::min(x_min, s.x[i]);
      x_max = std::max(x_max, s.x[i]);
      if (std::isfinite(s.y[i])) y_max = std::max(y_max, s.y[i]);
    }
  }
  if (x_min > x_max) x_min = x_max = 1;  // no points: draw empty axes
  auto tx = [&](double x) { return plot.log_x ? std::log2(x) : x; };
  double lx_min = tx(x_min), lx_max = tx(x_max);
  if (lx_max <= lx_min) {
    lx_min -= 1;
    lx_max += 1;
  }
  if (y_max <= 0) y_max = 1;
  double y_step = nice_step(y_max, 6);
  double y_top = std::ceil(y_max * 1.05 / y_step) * y_step;

  double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + (tx(x) - lx_min) / (lx_max - lx_min) * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - y / y_top * plot_h; };
  auto x_label = [&](double x) {
    return plot.x_tick_label ? plot.x_tick_label(x) : fmt::format("{:g}", x);
  };

  std::string out;
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, kHeight);
  out += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", kWidth, kHeight);
  out += fmt::format("<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
                     kLeft + plot_w / 2, xml_escape(plot.title));

  // Grid and ticks. On a log axis every power of two is a candidate; keep about ten labels.
  std::vector<double> x_ticks;
  if (plot.log_x) {
    int first = static_cast<int>(std::ceil(lx_min)), last = static_cast<int>(std::floor(lx_max));
    int stride = std::max(1, (last - first + 1 + 9) / 10);
    // Ticks on multiples of the stride: the labels stay put when the sweep's ends move.
    int start = first;
    while (start % stride != 0) ++start;
    for (int e = start; e <= last; e += stride) x_ticks.push_back(std::pow(2.0, e));
  } else {
    double step = nice_step(lx_max - lx_min, 8);
    for (double x = std::ceil(lx_min / step) * step; x <= lx_max + 1e-9 * step; x += step) {
      x_ticks.push_back(x);
    }
  }
  for (double x : x_ticks) {
    out += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(x), kTop, kTop + plot_h, kTop + plot_h + 18, xml_escape(x_label(x)));
  }
  for (double y = 0; y <= y_top + 1e-9 * y_step; y += y_step) {
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        kLeft, py(y), kLeft + plot_w, kLeft - 8, py(y) + 4, y);
  }
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n",
      kLeft, kTop, plot_w, plot_h);
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     kLeft + plot_w / 2, kHeight - 20, xml_escape(plot.x_label));
  out += fmt::format(
      "<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
      "{0})\">{1}</text>\n",
      kTop + plot_h / 2, xml_escape(plot.y_label));

  for (size_t i = 0; i < plot.series.size(); ++i) {
    const PlotSeries& s = plot.series[i];
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points;
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!std::isfinite(s.y[k])) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(s.x[k]), py(s.y[k]));
    }
    out += fmt::format(
        "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"><title>{}</title>"
        "</polyline>\n",
        color, points, xml_escape(s.name));
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!std::isfinite(s.y[k])) continue;
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n",
                         px(s.x[k]), py(s.y[k]), color);
    }
    double ly = kTop + 10 + 20.0 * static_cast<double>(i);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"3\"/>\n"
        "<text x=\"{4}\" y=\"{5}\">{6}</text>\n",
        kLeft + plot_w + 15, ly, kLeft + plot_w + 40, color, kLeft + plot_w + 46, ly + 4,
        xml_escape(s.name));
  }
  out += "</svg>\n";
  *svg = std::move(out);
  return Status::ok();
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return Status::system_error("cannot open '" + path + "' for writing", errno);
  size_t written = std::fwrite(text.data(), 1, text.size(), file);
  int write_errno = errno;
  if (std::fclose(file) != 0 || written != text.size()) {
    return Status::system_error("cannot write '" + path + "'", write_errno ? write_errno : EIO);
  }
  return Status::ok();
}

}  // namespace zrt::tools
