#include "text/stop_strings.h"

#include <algorithm>

namespace sipllm {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopStrings::Result StopStrings::push(const std::string& text) {
  Result result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  held_ += text;
  size_t first_match = std::string::npos;
  for (const std::string& stop : stops_) first_match = std::min(first_match, held_.find(stop));
  if (first_match != std::string::npos) {
    result.emit = held_.substr(0, first_match);
    result.stopped = stopped_ = true;
    held_.clear();
    return result;
  }
  // Hold back the longest tail of the text that begins some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  result.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return result;
}

std::string StopStrings::flush() {
  std::string rest;
  rest.swap(held_);
  return rest;
}

}  // namespace sipllm
