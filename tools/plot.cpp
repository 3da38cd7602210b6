#include "plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "recur/error.h"
#include "util/file.h"

namespace recur::cli {
namespace {

constexpr double kPanelW = 520, kPanelH = 380, kLeft = 70, kRight = 20, kTop = 50, kBottom = 110;

std::string tick_label(double v) {
  if (v >= 1 << 20 && std::fmod(v, 1 << 20) == 0) return fmt::format("{}M", v / (1 << 20));
  if (v >= 1024 && std::fmod(v, 1024) == 0) return fmt::format("{}K", v / 1024);
  return fmt::format("{:g}", v);
}

}  // namespace

void write_svg(const std::string& path, const std::string& title, const std::vector<Panel>& panels) {
  const double width = kPanelW * double(panels.size());
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{3}</text>\n",
      width, kPanelH, width / 2, title);
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const auto& panel = panels[p];
    double x0 = std::numeric_limits<double>::max(), x1 = 0, y0 = x0, y1 = 0;
    for (const auto& s : panel.series)
      for (const auto& [x, y] : s.points) {
        if (x <= 0 || y <= 0) continue;
        x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
    if (x1 <= 0) continue;
    // Axis ranges on powers of 4 (x) and 10 (y), so that ticks land on round numbers.
    const double lx0 = std::floor(std::log(x0) / std::log(4.0)), lx1 = std::ceil(std::log(x1) / std::log(4.0));
    const double ly0 = std::floor(std::log10(y0)), ly1 = std::max(ly0 + 1, std::ceil(std::log10(y1)));
    const double ox = kPanelW * double(p) + kLeft, oy = kTop;
    const double w = kPanelW - kLeft - kRight, h = kPanelH - kTop - kBottom;
    const auto X = [&](double x) { return ox + w * (std::log(x) / std::log(4.0) - lx0) / std::max(1.0, lx1 - lx0); };
    const auto Y = [&](double y) { return oy + h - h * (std::log10(y) - ly0) / (ly1 - ly0); };
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n",
                       ox, oy, w, h);
    for (double e = lx0; e <= lx1; ++e) {
      const double v = std::pow(4.0, e), x = X(v);
      svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#ddd\"/>"
                         "<text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                         x, oy, oy + h, oy + h + 16, tick_label(v));
    }
    for (double e = ly0; e <= ly1; ++e) {
      const double v = std::pow(10.0, e), y = Y(v);
      svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#ddd\"/>"
                         "<text x=\"{3}\" y=\"{4}\" text-anchor=\"end\">{5}</text>\n",
                         ox, y, ox + w, ox - 6, y + 4, tick_label(v));
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">context (tokens)</text>\n",
                       ox + w / 2, oy + h + 34);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n",
                       ox + w / 2, oy - 8, panel.y_label);
    double ly = oy + h + 52;
    for (const auto& s : panel.series) {
      std::string pts;
      for (const auto& [x, y] : s.points)
        if (x > 0 && y > 0) pts += fmt::format("{:.1f},{:.1f} ", X(x), Y(y));
      const char* dash = s.dashed ? " stroke-dasharray=\"6,4\"" : "";
      svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n",
                         pts, s.color, dash);
      for (const auto& [x, y] : s.points)
        if (x > 0 && y > 0 && !s.dashed)
          svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", X(x), Y(y), s.color);
      svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>"
                         "<text x=\"{5}\" y=\"{6}\">{7}</text>\n",
                         ox, ly, ox + 28, s.color, dash, ox + 34, ly + 4, s.name);
      ly += 16;
    }
  }
  svg += "</svg>\n";
  detail::write_file_atomically(path, svg, "recur bench");
}

}  // namespace recur::cli
