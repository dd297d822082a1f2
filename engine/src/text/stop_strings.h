// Ends generation at a stop string that may arrive split over several tokens.
//
// Text that could be the start of a stop string is held back until the next
// piece shows whether it is; text before a match is emitted, the match and
// whatever follows it are not.
#pragma once

#include <string>
#include <vector>

namespace sipllm {

class StopStrings {
 public:
  struct Result {
    std::string emit;      // text safe to show now
    bool stopped = false;  // a stop string was found; nothing more follows
  };

  explicit StopStrings(std::vector<std::string> stops);

  Result push(const std::string& text);
  std::string flush();  // held-back text, when generation ends otherwise
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace sipllm
