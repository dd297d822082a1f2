// Sampling and stop strings: what a caller passes as options (any float,
// NaN, infinities and negatives included; any logit bias; any stop strings)
// and what a model computes as logits (NaN and infinities included, from a
// broken or overflowing model). The first byte picks the part (bit 0):
//   0: a Sampler from options read from the input either refuses them with
//      Error(kInvalidArgument) or, given logits and recent tokens from the
//      input, returns token ids inside the vocabulary; greedy picks a largest
//      logit.
//   1: StopStrings over stop strings and token texts from the input stops
//      at the first token whose text completes a stop string and emits
//      exactly the text before the earliest stop string in the text so far,
//      and all of the text when there is none.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "runtime/sampler.h"
#include "text/stop_strings.h"

using namespace sipllm;

namespace {

void sample(fuzz::Reader& in) {
  SamplingOptions options;
  options.temperature = in.f32();
  options.top_k = in.flag() ? in.i32() : in.u8() % 64;
  options.top_p = in.f32();
  options.min_p = in.f32();
  options.repeat_penalty = in.f32();
  options.repeat_last_n = in.flag() ? in.i32() : in.u8() % 80 - 8;
  options.seed = in.u64();
  const int n_bias = in.u8() % 8;
  for (int i = 0; i < n_bias; ++i) {
    const int32_t token = in.flag() ? in.i32() : in.u8();
    options.logit_bias[token] = in.f32();
  }
  const int n_vocab = 1 + in.u16() % 1024;
  std::vector<int32_t> recent(in.u8());
  for (int32_t& token : recent) token = in.flag() ? in.i32() : in.u8();
  // The logits: from the input while it lasts, then a ramp, so that large
  // vocabularies cost few bytes.
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = in.empty() ? static_cast<float>(i % 17) * 0.25f : in.f32();

  std::optional<Sampler> sampler;
  try {
    sampler.emplace(options, n_vocab);
  } catch (const Error& e) {
    SIPLLM_FUZZ_CHECK(e.kind() == ErrorKind::kInvalidArgument, std::string("a Sampler refused with ") + e.what());
    return;
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<float> scores = logits;
    const int32_t token = sampler->sample(scores, recent);
    SIPLLM_FUZZ_CHECK(token >= 0 && token < n_vocab, "sampled the id " + std::to_string(token));
    if (options.temperature <= 0) {
      // After bias and penalty (sample() leaves them in `scores`), no logit
      // beats the greedy choice.
      for (float s : scores) {
        SIPLLM_FUZZ_CHECK(!(s > scores[static_cast<size_t>(token)]), "greedy did not pick a largest logit");
      }
    }
    recent.push_back(token);
  }
}

void stop_strings(fuzz::Reader& in) {
  std::vector<std::string> stops(in.u8() % 5);
  for (std::string& s : stops) s = in.text(12);
  std::vector<std::string> pieces(in.u8() % 24);
  for (std::string& p : pieces) p = in.text(12);

  // Generation ends with the first piece after which the text holds a stop
  // string; what is shown is the text before the earliest one in it.
  std::string full;
  size_t first = std::string::npos;
  for (const std::string& p : pieces) {
    full += p;
    for (const std::string& s : stops) {
      if (!s.empty()) first = std::min(first, full.find(s));
    }
    if (first != std::string::npos) break;
  }

  StopStrings filter(stops);
  std::string emitted;
  bool stopped = false;
  for (const std::string& p : pieces) {
    const StopStrings::Result r = filter.push(p);
    emitted += r.emit;
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) emitted += filter.flush();
  SIPLLM_FUZZ_CHECK(stopped == (first != std::string::npos), "StopStrings stopped wrongly");
  SIPLLM_FUZZ_CHECK(emitted == full.substr(0, first), "StopStrings emitted other text than before the first stop");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  if ((in.u8() & 1) == 0) {
    sample(in);
  } else {
    stop_strings(in);
  }
  return 0;
}
