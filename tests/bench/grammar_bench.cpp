// The grammar's own cost per generated token, without a model: random
// logits stand for the model's, and the grammar work a decode step does is
// timed alone (the whole-vocabulary mask, or the sampler's single-token
// checks). Dividing by a model's time per token gives the grammar's share
// of decoding, free of the noise of timing the model too.
//
//   sipllm_grammar_bench VOCAB.gguf [SCHEMA.json] [--steps N] [--top-k K] [--seed S]
//
// Without a schema the grammar is any JSON object. Prints the vocabulary
// trie's size and build time, then the time per step of the masks (their
// cache hits and misses) and of choosing the token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "runtime/grammar_filter.h"
#include "runtime/sampler.h"
#include "sipllm/grammar.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sipllm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf [SCHEMA.json] [--steps N] [--top-k K] [--seed S]\n", argv[0]);
    return 2;
  }
  std::string schema_path;
  int steps = 400, top_k = 0;
  uint64_t seed = 1;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (a == "--top-k" && i + 1 < argc) {
      top_k = std::atoi(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      schema_path = a;
    }
  }
  try {
    auto source = open_file_source(argv[1]);
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_gguf(GgufFile::parse(*source));
    std::string grammar = json_object_grammar();
    if (!schema_path.empty()) {
      std::ifstream in(schema_path, std::ios::binary);
      if (!in) throw Error(ErrorKind::kIo, schema_path + ": cannot open");
      grammar = json_schema_to_grammar(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
    }
    auto build_start = Clock::now();
    auto vocab = std::make_shared<const GrammarVocabulary>(*tokenizer);
    const double build_ms = ms_since(build_start);
    std::printf("vocabulary  %d tokens, trie of %zu nodes built in %.1f ms\n", vocab->size(), vocab->trie().node_count(),
                build_ms);
    std::printf("grammar     %s (%zu bytes of GBNF)\n", schema_path.empty() ? "any JSON object" : schema_path.c_str(),
                grammar.size());
    std::printf("sampling    temperature 1, top-k %d, seed %llu (random logits)\n\n", top_k,
                static_cast<unsigned long long>(seed));

    // Two filters in step: one times the whole mask every step, the other
    // the sampler's own use (which may not need the mask), so neither finds
    // the other's work in its cache.
    GrammarFilter masker(Grammar::parse(grammar), vocab);
    GrammarFilter filter(Grammar::parse(grammar), vocab);
    SamplingOptions options;
    options.temperature = 1.0f;
    options.top_k = top_k;
    options.top_p = 1.0f;
    options.min_p = 0;
    options.seed = seed;
    Sampler sampler(options, vocab->size());
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    std::vector<float> logits(static_cast<size_t>(vocab->size()));
    std::vector<double> mask_ms, pick_ms, plain_pick_ms;
    std::string text;
    int done = 0;
    const char* ended = "step limit";
    for (; done < steps; ++done) {
      if (filter.must_end()) {
        ended = "the grammar completed";
        break;
      }
      for (float& l : logits) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        l = static_cast<float>((rng >> 40) & 0xFFFFFF) / 16777216.0f * 8.0f - 4.0f;
      }
      // The mask alone (cached per state after its first computation).
      std::vector<float> masked = logits;
      auto t = Clock::now();
      masker.apply(masked);
      mask_ms.push_back(ms_since(t));
      // The same step's choice without and with the grammar, as the engine
      // makes it (the sampler may settle it with single-token checks).
      std::vector<float> plain = logits;
      Sampler plain_sampler(options, vocab->size());
      t = Clock::now();
      plain_sampler.sample(plain, {});
      plain_pick_ms.push_back(ms_since(t));
      t = Clock::now();
      const int32_t token = sampler.sample(logits, {}, &filter);
      if (vocab->end_of_generation(token)) {
        ended = "end of generation";
        break;
      }
      filter.accept(token);
      pick_ms.push_back(ms_since(t));
      masker.accept(token);
      text += std::string(vocab->bytes(token));
    }
    double mask_total = 0;
    for (double m : mask_ms) mask_total += m;
    double pick_total = 0, plain_total = 0;
    for (double m : pick_ms) pick_total += m;
    for (double m : plain_pick_ms) plain_total += m;
    const double n = static_cast<double>(std::max<size_t>(1, mask_ms.size()));
    std::printf("steps       %d (%s)\n", done, ended);
    std::printf("mask        %.3f ms a step on average, median %.3f, 90th percentile %.3f, max %.3f\n", mask_total / n,
                percentile(mask_ms, 0.5), percentile(mask_ms, 0.9), percentile(mask_ms, 1.0));
    std::printf("choice      %.3f ms a step with the grammar (sampler, its checks or masks, moving the grammar),\n"
                "            %.3f without\n",
                pick_total / n, plain_total / n);
    std::printf("grammar     %zu states in the matcher now\n\n", filter.matcher().state_count());
    std::printf("text        %s\n", text.substr(0, 400).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
