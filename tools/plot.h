// A small SVG writer for log-log line charts, side by side: no plotting package needed.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace recur::cli {

struct Series {
  std::string name;
  std::string color;
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  // (x, y), both > 0
};

struct Panel {
  std::string y_label;
  std::vector<Series> series;
};

/// Writes one row of panels, each with log-scaled axes (x: context in tokens). Throws
/// FormatError if the file cannot be written.
void write_svg(const std::string& path, const std::string& title, const std::vector<Panel>& panels);

}  // namespace recur::cli
