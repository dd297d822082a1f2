// Command-line options shared by the sipllm subcommands.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sipllm/engine.h"

namespace sipllm::cli {

extern const char* const kUsage;

// A mistake on the command line (exit code 2), as opposed to an engine error.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Backend { kFile, kMmap };

// For a model given as an http:// or https:// URL.
struct HttpOptions {
  std::string cache_dir;  // "": the per-user default (see default_cache_dir)
  bool no_cache = false;
  int parallel_requests = 4;
  bool allow_whole_file = false;
  // As HttpSourceOptions (sipllm/http_source.h) has them.
  int max_retries = 4;
  double backoff_ms = 100;
  double max_retry_after_ms = 30'000;
  double read_timeout_ms = 30'000;
  uint64_t page_bytes = 1u << 20;
};

struct CommonOptions {
  std::string model;
  Backend backend = Backend::kFile;
  HttpOptions http;
  EngineOptions engine;
  ThrottleOptions throttle;  // all zero: no throttle
};

struct RunOptions {
  std::string prompt;
  GenerateOptions generate;
  std::string logits_out;
};

struct EmbedCliOptions {
  std::vector<std::string> texts;  // every -p, in order
  EmbedOptions embed;
};

struct TokenizeOptions {
  std::string file;     // --file: tokenize this file's bytes instead of -p
  bool timing = false;  // --timing: load and encode times on stderr
};

struct BenchOptions {
  int prompt_tokens = 128;
  int gen_tokens = 32;
  bool sweep_budget = false;
  int sweep_steps = 8;
  // With a grammar (--grammar, --json-schema, --json): decode speed with
  // and without it, alternating, `repeats` times each.
  std::string grammar;
  std::string grammar_source;  // what it came from, for the report
  int repeats = 3;
  std::optional<SamplingOptions> sampling;  // sampling flags given: these, else greedy
};

struct ParsedArgs {
  EmbedCliOptions embed;
  CommonOptions common;
  RunOptions run;  // also holds tokenize's text (prompt) and special-token flags
  TokenizeOptions tokenize;
  BenchOptions bench;
};

ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& args);

bool is_http_url(const std::string& model);

// Integers of command-line values, checked: a UsageError names the flag.
long long parse_int(const std::string& flag, const std::string& text, long long min, long long max);
// A byte count, with an optional suffix K, M or G (powers of 1024).
uint64_t parse_bytes(const std::string& flag, const std::string& text);

// $XDG_CACHE_HOME/sipllm, else $HOME/.cache/sipllm, else "" (no cache).
std::string default_cache_dir();

// Opens the model file with the chosen backend and throttle; a URL streams
// over HTTP range requests through libcurl and the directory cache. A split
// model is opened by its first part, which brings the others.
std::unique_ptr<WeightSource> open_source(const CommonOptions& options);

// open_source, then the engine with the chosen engine options.
std::unique_ptr<Engine> open_engine(const CommonOptions& options);

std::string format_stats_line(const GenerationStats& stats, const CommonOptions& options);

int run_bench(const CommonOptions& common, const BenchOptions& bench);

}  // namespace sipllm::cli
