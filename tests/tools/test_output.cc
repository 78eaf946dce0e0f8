// Table, SVG plot and progress line: the pieces every tool prints with.
#include <gtest/gtest.h>

#include "tools/common/progress.h"
#include "tools/common/svg_plot.h"
#include "tools/common/table.h"

namespace zrt::tools {
namespace {

TEST(Table, AlignsColumnsAndPrefixesHeaders) {
  Table t;
  t.add_column("name", Table::Align::kLeft);
  t.add_column("bytes");
  t.add_row({"a", "1"});
  t.add_row({"longer", "12345"});
  EXPECT_EQ(t.render("# "),
            "# name    bytes\n"
            "  a           1\n"
            "  longer  12345\n");
  EXPECT_EQ(t.rows(), 2u);
}

TEST(Table, MissingCellsPrintEmpty) {
  Table t;
  t.add_column("a");
  t.add_column("b");
  t.add_row({"1"});
  t.add_separator("-- section --");
  EXPECT_EQ(t.render(), "a  b\n1\n-- section --\n");
}

TEST(SvgPlot, LabelledLogAxesAndOneLinePerSeries) {
  Plot plot;
  plot.title = "bus <bandwidth>";
  plot.x_label = "size";
  plot.y_label = "GB/s";
  plot.log_x = true;
  plot.series.push_back({"all_reduce", {8, 1024, 1 << 20}, {0.1, 1.0, 5.0}});
  plot.series.push_back({"all_gather", {8, 1024, 1 << 20}, {0.2, 2.0, 6.0}});
  std::string svg;
  ASSERT_TRUE(render_svg(plot, &svg).is_ok());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("bus &lt;bandwidth&gt;"), std::string::npos);  // escaped
  EXPECT_NE(svg.find(">size</text>"), std::string::npos);
  EXPECT_NE(svg.find(">GB/s</text>"), std::string::npos);
  EXPECT_NE(svg.find(">all_reduce</text>"), std::string::npos);
  EXPECT_NE(svg.find(">all_gather</text>"), std::string::npos);
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 2u);
  // Log scale: ticks at even powers of two here (18 octaves, about ten labels).
  EXPECT_NE(svg.find(">16</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">32</text>"), std::string::npos);
  EXPECT_NE(svg.find(">1024</text>"), std::string::npos);
}

TEST(SvgPlot, RefusesBadSeries) {
  Plot plot;
  plot.log_x = true;
  plot.series.push_back({"bad", {0, 8}, {1, 2}});
  std::string svg;
  Status s = render_svg(plot, &svg);
  EXPECT_EQ(s.code(), ZRT_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("log axis"), std::string::npos) << s.message();
  plot.series[0] = {"short", {1, 8}, {1}};
  s = render_svg(plot, &svg);
  EXPECT_NE(s.message().find("'short'"), std::string::npos) << s.message();
}

TEST(WriteTextFile, NamesTheFileOnFailure) {
  Status s = write_text_file("/nonexistent-dir/x.svg", "x");
  EXPECT_EQ(s.code(), ZRT_SYSTEM_ERROR);
  EXPECT_NE(s.message().find("/nonexistent-dir/x.svg"), std::string::npos) << s.message();
}

TEST(Progress, FormatsBarPercentAndLabel) {
  EXPECT_EQ(format_progress(5, 10, "all_reduce 1 MiB", 3.14, 10),
            "[=====>    ]  50%  5/10  all_reduce 1 MiB  3.1 s");
  EXPECT_EQ(format_progress(10, 10, "done", 1, 4), "[====] 100%  10/10  done  1.0 s");
}

TEST(Progress, SilentWhenNotATerminal) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    ProgressLine line(file, true, std::chrono::milliseconds(0));
    EXPECT_FALSE(line.active());
    line.update(1, 2, "x");
  }
  EXPECT_EQ(std::ftell(file), 0L);
  std::fclose(file);
}

}  // namespace
}  // namespace zrt::tools
