#include "serve/stop.h"

#include <algorithm>

namespace recur::serve {

StopSequences::StopSequences(std::vector<std::string> stops) { reset(std::move(stops)); }

void StopSequences::reset(std::vector<std::string> stops) {
  stops_ = std::move(stops);
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
               stops_.end());
  held_.clear();
  stopped_ = false;
}

// The held text is the longest tail of what came before that begins a stop sequence, so a
// stop sequence that spans pieces starts inside it, never in text already released: searching
// the held text and the new piece together finds every one. Each call costs about
// (held + piece) x (the stop sequences' total length), which the API bounds.
std::string StopSequences::put(std::string_view piece) {
  if (stopped_) return {};
  held_ += piece;
  std::size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    held_.clear();
    stopped_ = true;
    return out;
  }
  std::size_t keep = 0;
  for (const auto& s : stops_)
    for (std::size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopSequences::finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace recur::serve
