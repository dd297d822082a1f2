#include "cli_options.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>

#include "sipllm/error.h"
#include "sipllm/grammar.h"
#include "sipllm/http_source.h"

namespace sipllm::cli {

const char* const kUsage =
    "usage:\n"
    "  sipllm run -m MODEL.gguf [-p PROMPT] [-n N] [options]   generate text\n"
    "      MODEL may be an http:// or https:// URL: it streams over range requests\n"
    "  sipllm info -m MODEL.gguf                               describe a model\n"
    "  sipllm tokenize -m MODEL.gguf -p TEXT                   print token ids\n"
    "      MODEL may hold only a vocabulary (tokenizer keys, no tensors)\n"
    "  sipllm embed -m MODEL.gguf -p TEXT [-p TEXT...]         print each text's embedding\n"
    "      --pooling mean|cls|last (default: the model's, else mean), --no-normalize\n"
    "  sipllm bench -m MODEL.gguf [options]                    profile streaming\n"
    "  sipllm gen --shape NAME --type TYPE --vocab V.gguf -o OUT.gguf\n"
    "                                                          write a random-weight model\n"
    "      shapes: tiny, smollm-135m, qwen2.5-0.5b, llama-3.2-1b, kquant-small\n"
    "  sipllm split --parts N [--data-gap BYTES] MODEL.gguf PREFIX\n"
    "                                                          write PREFIX-00001-of-0000N.gguf ...\n"
    "      as llama.cpp's gguf-split: the first part holds the metadata; --data-gap leaves\n"
    "      BYTES unused (sparse) before each part's tensors, to test offsets past 4 GiB\n"
    "  Every command reads a split model (gguf-split's NAME-00001-of-0000N.gguf ...)\n"
    "  given its first part's path or URL.\n"
    "\n"
    "sampling (run):\n"
    "  --temp T            temperature, 0 = greedy (default 0.8)\n"
    "  --top-k K           (default 40)       --top-p P   (default 0.95)\n"
    "  --min-p M           (default 0.05)     --repeat-penalty R (default 1.0)\n"
    "  --typical-p P       locally typical sampling (default 1: off)\n"
    "  --repeat-last-n N   (default 64)       --seed S    (default random)\n"
    "  --presence-penalty P, --frequency-penalty F   OpenAI's, over the last N (default 0)\n"
    "  --stop STRING       stop before STRING (repeatable)\n"
    "  --logits-out FILE   write the float32 logits of every prompt position\n"
    "                      (int32 n_positions, int32 n_vocab, then the rows)\n"
    "\n"
    "constrained output (run, bench):\n"
    "  --grammar FILE      every token continues this GBNF grammar (llama.cpp's format)\n"
    "  --json-schema S     output valid under a JSON Schema: S is a file, or the JSON itself\n"
    "  --json              output is a JSON object\n"
    "\n"
    "text (run, tokenize):\n"
    "  --no-special        add no BOS/EOS, whatever the model's metadata asks\n"
    "  --no-parse-special  \"<|im_start|>\" in the text is plain text, not a control token\n"
    "\n"
    "tokenize:\n"
    "  -f, --file FILE     tokenize the bytes of FILE instead of -p TEXT\n"
    "  --timing            print the vocabulary load time and encode speed on stderr\n"
    "\n"
    "engine:\n"
    "  --threads N         compute threads (default: all cores)\n"
    "  --ctx N             context length (default: the model's)\n"
    "  --kv-cache TYPE     f16 (default, as llama.cpp) or f32: how keys and values are kept\n"
    "  --backend B         sync | ring | mmap (default ring: pread + prefetch ring)\n"
    "  --no-async          same as --backend sync\n"
    "  --mmap              same as --backend mmap\n"
    "  --buffers N         prefetch ring buffers (default 2)\n"
    "  --load-threads N    units the ring loads side by side (default: 2 over\n"
    "                      HTTP or a throttle, else 1)\n"
    "  --budget BYTES      weight memory budget; 0 streams everything (default unlimited)\n"
    "                      suffixes K, M, G (powers of 1024) are accepted\n"
    "  --prefill-chunk N   positions per layer sweep (default 512)\n"
    "  --unpack-5bit on|off  keep Q5_0 and Q5_1 matrices a value per byte when the\n"
    "                      budget holds the model so: faster kernels, half as much\n"
    "                      memory again for them (default on)\n"
    "  --throttle-mbps X   imitate storage of X MB/s      --latency-ms Y  per read\n"
    "\n"
    "http (MODEL is a URL):\n"
    "  --cache-dir DIR     keep fetched pages in DIR, so that a second run sends no\n"
    "                      request (default $XDG_CACHE_HOME/sipllm, else ~/.cache/sipllm)\n"
    "  --no-cache          stream without keeping anything\n"
    "  --parallel-requests N  range requests in flight for one read (default 4)\n"
    "  --allow-whole-file  accept a server that ignores Range: download the whole file\n"
    "                      into memory, within --budget (otherwise that is an error)\n"
    "  --max-retries N     attempts after the first, per request (default 4)\n"
    "  --backoff-ms MS     first retry delay, doubling (default 100)\n"
    "  --max-retry-after-ms MS  longest Retry-After waited for (default 30000)\n"
    "  --read-timeout-ms MS  no byte for this long fails the attempt (default 30000)\n"
    "  --cache-page-bytes B  page size of new cache entries (default 1M)\n"
    "\n"
    "bench:\n"
    "  --prompt-tokens P   (default 128)      --gen-tokens G  (default 32)\n"
    "  --per-token-prefill run the prompt one token at a time, for comparison\n"
    "  --sweep-budget      decode tokens/s and peak memory across budgets\n"
    "  --repeats N         with a grammar: runs with and without it, N each (default 3);\n"
    "                      greedy unless sampling flags are given\n";

long long parse_int(const std::string& flag, const std::string& text, long long min, long long max) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
    throw UsageError(flag + ": '" + text + "' is not an integer in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return v;
}

uint64_t parse_bytes(const std::string& flag, const std::string& text) {
  std::string digits = text;
  uint64_t scale = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': scale = 1ull << 10; break;
      case 'M': case 'm': scale = 1ull << 20; break;
      case 'G': case 'g': scale = 1ull << 30; break;
      default: break;
    }
    if (scale != 1) digits.pop_back();
  }
  const auto v = static_cast<uint64_t>(parse_int(flag, digits, 0, std::numeric_limits<long long>::max()));
  if (v > std::numeric_limits<uint64_t>::max() / scale) throw UsageError(flag + ": '" + text + "' is too large");
  return v * scale;
}

namespace {

class ArgReader {
 public:
  explicit ArgReader(const std::vector<std::string>& args) : args_(args) {}
  bool done() const { return i_ >= args_.size(); }
  std::string next_flag() { return args_[i_++]; }
  std::string value(const std::string& flag) {
    if (i_ >= args_.size()) throw UsageError(flag + " needs a value");
    return args_[i_++];
  }

 private:
  const std::vector<std::string>& args_;
  size_t i_ = 0;
};

double parse_double(const std::string& flag, const std::string& text, double min, double max) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= min && v <= max)) {
    throw UsageError(flag + ": '" + text + "' is not a number in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return v;
}


std::string read_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(flag + ": cannot open '" + path + "'");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The grammar of --grammar/--json-schema/--json, checked now so that a
// mistake shows before the model loads; errors name the file.
std::string grammar_from_flag(const std::string& flag, const std::string& value) {
  if (flag == "--json") return json_object_grammar();
  if (flag == "--grammar") {
    const std::string text = read_file(flag, value);
    try {
      check_grammar(text);
    } catch (const Error& e) {
      throw Error(e.kind(), value + ": " + e.what());
    }
    return text;
  }
  // --json-schema: the JSON text itself, or a file holding it.
  const size_t first = value.find_first_not_of(" \t\r\n");
  const bool inline_json = first != std::string::npos && (value[first] == '{' || value.compare(first, 4, "true") == 0);
  if (inline_json) return json_schema_to_grammar(value);
  const std::string text = read_file(flag, value);
  try {
    return json_schema_to_grammar(text);
  } catch (const Error& e) {
    throw Error(e.kind(), value + ": " + e.what());
  }
}

// The flags of the engine's generation options. Their values are only read
// here: the engine's check_generate_options holds them to its ranges.
struct GenerateOptionFlag {
  const char* flag;
  const char* option;  // as sipllm/options.h names it
};
constexpr GenerateOptionFlag kGenerateOptionFlags[] = {
    {"--n-predict", "max_tokens"}, {"--temp", "temperature"}, {"--top-k", "top_k"},
    {"--top-p", "top_p"}, {"--min-p", "min_p"}, {"--typical-p", "typical_p"},
    {"--repeat-penalty", "repeat_penalty"}, {"--presence-penalty", "presence_penalty"},
    {"--frequency-penalty", "frequency_penalty"}, {"--repeat-last-n", "repeat_last_n"},
};

int parse_int_option(const std::string& flag, const std::string& text) {
  return static_cast<int>(parse_int(flag, text, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

float parse_number_option(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') throw UsageError(flag + ": '" + text + "' is not a number");
  return static_cast<float>(v);
}

// The engine's refusal, under the flag that gave the value.
void check_generate_flags(const GenerateOptions& options) {
  try {
    check_generate_options(options);
  } catch (const InvalidOption& e) {
    for (const GenerateOptionFlag& f : kGenerateOptionFlags) {
      if (e.option() == f.option) throw UsageError(std::string(f.flag) + ": " + e.requirement());
    }
    throw UsageError(e.what());
  }
}

}  // namespace

ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& args) {
  ParsedArgs p;
  SamplingOptions& s = p.run.generate.sampling;
  EngineOptions& e = p.common.engine;
  bool have_prompt = false;
  bool sampling_given = false;
  std::string grammar_flag;
  ArgReader r(args);
  while (!r.done()) {
    const std::string flag = r.next_flag();
    if (flag == "-m" || flag == "--model") {
      p.common.model = r.value(flag);
    } else if (flag == "-p" || flag == "--prompt") {
      p.run.prompt = r.value(flag);
      p.embed.texts.push_back(p.run.prompt);
      have_prompt = true;
    } else if (flag == "--pooling") {
      const std::string v = r.value(flag);
      if (v == "mean") {
        p.embed.embed.pooling = Pooling::kMean;
      } else if (v == "cls") {
        p.embed.embed.pooling = Pooling::kCls;
      } else if (v == "last") {
        p.embed.embed.pooling = Pooling::kLast;
      } else {
        throw UsageError("--pooling takes mean, cls or last, not '" + v + "'");
      }
    } else if (flag == "--no-normalize") {
      p.embed.embed.normalize = false;
    } else if (flag == "-n" || flag == "--n-predict") {
      p.run.generate.max_tokens = parse_int_option(flag, r.value(flag));
    } else if (flag == "--temp") {
      sampling_given = true;
      s.temperature = parse_number_option(flag, r.value(flag));
    } else if (flag == "--top-k") {
      sampling_given = true;
      s.top_k = parse_int_option(flag, r.value(flag));
    } else if (flag == "--top-p") {
      sampling_given = true;
      s.top_p = parse_number_option(flag, r.value(flag));
    } else if (flag == "--min-p") {
      sampling_given = true;
      s.min_p = parse_number_option(flag, r.value(flag));
    } else if (flag == "--typical-p") {
      sampling_given = true;
      s.typical_p = parse_number_option(flag, r.value(flag));
    } else if (flag == "--repeat-penalty") {
      sampling_given = true;
      s.repeat_penalty = parse_number_option(flag, r.value(flag));
    } else if (flag == "--presence-penalty") {
      sampling_given = true;
      s.presence_penalty = parse_number_option(flag, r.value(flag));
    } else if (flag == "--frequency-penalty") {
      sampling_given = true;
      s.frequency_penalty = parse_number_option(flag, r.value(flag));
    } else if (flag == "--repeat-last-n") {
      sampling_given = true;
      s.repeat_last_n = parse_int_option(flag, r.value(flag));
    } else if (flag == "--seed") {
      sampling_given = true;
      s.seed = static_cast<uint64_t>(parse_int(flag, r.value(flag), 0, std::numeric_limits<long long>::max()));
    } else if (flag == "--grammar" || flag == "--json-schema" || flag == "--json") {
      if (!grammar_flag.empty()) throw UsageError(flag + " and " + grammar_flag + ": give one constraint, not both");
      grammar_flag = flag;
      const std::string value = flag == "--json" ? "" : r.value(flag);
      p.run.generate.grammar = grammar_from_flag(flag, value);
      p.bench.grammar_source = flag + (value.empty() ? "" : " " + value);
    } else if (flag == "--repeats") {
      p.bench.repeats = static_cast<int>(parse_int(flag, r.value(flag), 1, 1000));
    } else if (flag == "--stop") {
      p.run.generate.stop.push_back(r.value(flag));
    } else if (flag == "--no-special") {
      p.run.generate.add_special = false;
    } else if (flag == "--no-parse-special") {
      p.run.generate.parse_special = false;
    } else if (flag == "-f" || flag == "--file") {
      p.tokenize.file = r.value(flag);
      have_prompt = true;
    } else if (flag == "--timing") {
      p.tokenize.timing = true;
    } else if (flag == "--logits-out") {
      p.run.logits_out = r.value(flag);
    } else if (flag == "--threads" || flag == "-t") {
      e.threads = static_cast<int>(parse_int(flag, r.value(flag), 1, 1024));
    } else if (flag == "--ctx" || flag == "-c") {
      e.context_length = static_cast<int>(parse_int(flag, r.value(flag), 1, 1 << 24));
    } else if (flag == "--kv-cache") {
      const std::string t = r.value(flag);
      if (t == "f16") {
        e.kv_cache_type = KvCacheType::kF16;
      } else if (t == "f32") {
        e.kv_cache_type = KvCacheType::kF32;
      } else {
        throw UsageError("--kv-cache takes f16 or f32, not '" + t + "'");
      }
    } else if (flag == "--backend") {
      const std::string b = r.value(flag);
      if (b == "sync") {
        e.loader.mode = LoaderMode::kSync;
      } else if (b == "ring") {
        e.loader.mode = LoaderMode::kRing;
      } else if (b == "mmap") {
        p.common.backend = Backend::kMmap;
      } else {
        throw UsageError("--backend: '" + b + "' is not one of sync, ring, mmap");
      }
    } else if (flag == "--no-async") {
      e.loader.mode = LoaderMode::kSync;
    } else if (flag == "--mmap") {
      p.common.backend = Backend::kMmap;
    } else if (flag == "--buffers") {
      e.loader.n_buffers = static_cast<int>(parse_int(flag, r.value(flag), 1, 64));
    } else if (flag == "--load-threads") {
      e.loader.load_threads = static_cast<int>(parse_int(flag, r.value(flag), 1, 16));
    } else if (flag == "--budget") {
      e.loader.memory_budget = parse_bytes(flag, r.value(flag));
    } else if (flag == "--unpack-5bit") {
      const std::string v = r.value(flag);
      if (v != "on" && v != "off") throw UsageError("--unpack-5bit takes on or off, not '" + v + "'");
      e.loader.unpack_5bit = v == "on";
    } else if (flag == "--prefill-chunk") {
      e.prefill_chunk = static_cast<int>(parse_int(flag, r.value(flag), 1, 1 << 20));
    } else if (flag == "--throttle-mbps") {
      p.common.throttle.bandwidth_mb_per_s = parse_double(flag, r.value(flag), 0.001, 1e6);
    } else if (flag == "--latency-ms") {
      p.common.throttle.latency_ms = parse_double(flag, r.value(flag), 0, 1e5);
    } else if (flag == "--cache-dir") {
      p.common.http.cache_dir = r.value(flag);
      if (p.common.http.cache_dir.empty()) throw UsageError("--cache-dir needs a directory");
    } else if (flag == "--no-cache") {
      p.common.http.no_cache = true;
    } else if (flag == "--parallel-requests") {
      p.common.http.parallel_requests = static_cast<int>(parse_int(flag, r.value(flag), 1, 64));
    } else if (flag == "--allow-whole-file") {
      p.common.http.allow_whole_file = true;
    } else if (flag == "--max-retries") {
      p.common.http.max_retries = static_cast<int>(parse_int(flag, r.value(flag), 0, 100));
    } else if (flag == "--backoff-ms") {
      p.common.http.backoff_ms = parse_double(flag, r.value(flag), 0, 3.6e6);
    } else if (flag == "--max-retry-after-ms") {
      p.common.http.max_retry_after_ms = parse_double(flag, r.value(flag), 0, 3.6e6);
    } else if (flag == "--read-timeout-ms") {
      p.common.http.read_timeout_ms = parse_double(flag, r.value(flag), 1, 3.6e6);
    } else if (flag == "--cache-page-bytes") {
      p.common.http.page_bytes = parse_bytes(flag, r.value(flag));
    } else if (flag == "--prompt-tokens") {
      p.bench.prompt_tokens = static_cast<int>(parse_int(flag, r.value(flag), 1, 1 << 20));
    } else if (flag == "--gen-tokens") {
      p.bench.gen_tokens = static_cast<int>(parse_int(flag, r.value(flag), 0, 1 << 20));
    } else if (flag == "--per-token-prefill") {
      e.layer_major_prefill = false;
    } else if (flag == "--sweep-budget") {
      p.bench.sweep_budget = true;
    } else {
      throw UsageError("unknown option '" + flag + "' for '" + command + "'");
    }
  }
  if (p.common.model.empty()) throw UsageError(command + " needs a model: -m MODEL.gguf");
  if (!grammar_flag.empty() && command != "run" && command != "bench") {
    throw UsageError(grammar_flag + " is for run and bench");
  }
  check_generate_flags(p.run.generate);
  p.bench.grammar = p.run.generate.grammar;
  if (sampling_given) p.bench.sampling = s;
  if (command == "tokenize" && !have_prompt) throw UsageError("tokenize needs text: -p TEXT or -f FILE");
  if (!p.tokenize.file.empty() && command != "tokenize") throw UsageError("--file is for tokenize");
  if (!p.tokenize.file.empty() && !p.run.prompt.empty()) throw UsageError("give -p TEXT or -f FILE, not both");
  if (is_http_url(p.common.model) && p.common.backend == Backend::kMmap) {
    throw UsageError("--mmap needs a file, not a URL");
  }
  if (p.common.http.no_cache && !p.common.http.cache_dir.empty()) {
    throw UsageError("--no-cache and --cache-dir contradict each other");
  }
  return p;
}

bool is_http_url(const std::string& model) {
  return model.rfind("http://", 0) == 0 || model.rfind("https://", 0) == 0;
}

std::string default_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/sipllm";
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return std::string(home) + "/.cache/sipllm";
  return "";
}

namespace {

std::shared_ptr<CacheStore> open_cache(const CommonOptions& options) {
  if (options.http.no_cache) return nullptr;
  const std::string dir = options.http.cache_dir.empty() ? default_cache_dir() : options.http.cache_dir;
  return dir.empty() ? nullptr : make_directory_cache(dir);
}

// Opens one file: a model, or one part of a split model (each part a URL
// of its own, with its own cache entry).
class FileOpener {
 public:
  explicit FileOpener(const CommonOptions& options) : options_(options) {}

  std::unique_ptr<WeightSource> open(const std::string& name) {
    if (!is_http_url(name)) {
      return options_.backend == Backend::kMmap ? open_mmap_source(name) : open_file_source(name);
    }
    if (transport_ == nullptr) {
      transport_ = make_curl_transport();
      cache_ = open_cache(options_);
    }
    HttpSourceOptions http;
    http.parallel_requests = options_.http.parallel_requests;
    http.allow_whole_file = options_.http.allow_whole_file;
    http.whole_file_budget = options_.engine.loader.memory_budget;
    http.max_retries = options_.http.max_retries;
    http.backoff_ms = options_.http.backoff_ms;
    http.max_retry_after_ms = options_.http.max_retry_after_ms;
    http.read_timeout_ms = options_.http.read_timeout_ms;
    http.page_bytes = options_.http.page_bytes;
    http.cache = cache_;
    return open_http_source(name, transport_, http);
  }

 private:
  const CommonOptions& options_;
  std::shared_ptr<HttpTransport> transport_;
  std::shared_ptr<CacheStore> cache_;
};

}  // namespace

std::unique_ptr<WeightSource> open_source(const CommonOptions& options) {
  FileOpener opener(options);
  std::unique_ptr<WeightSource> source =
      open_split_model(opener.open(options.model), options.model,
                       [&opener](const std::string& name) { return opener.open(name); });
  if (options.throttle.bandwidth_mb_per_s > 0 || options.throttle.latency_ms > 0) {
    source = make_throttled_source(std::move(source), options.throttle);
  }
  return source;
}

std::unique_ptr<Engine> open_engine(const CommonOptions& options) {
  return Engine::open(open_source(options), options.engine);
}

std::string format_stats_line(const GenerationStats& s, const CommonOptions& options) {
  const char* backend = options.backend == Backend::kMmap ? "mmap"
                        : options.engine.loader.mode == LoaderMode::kSync ? "sync"
                                                                          : "ring";
  char line[512];
  std::snprintf(line, sizeof line,
                "prompt %d tok (%d reused) %.1f tok/s | generated %d tok %.1f tok/s | ttft %.1f ms | "
                "%s, prefetch hits %llu misses %llu, read %.2f MB | stop: %s",
                s.prompt_tokens, s.reused_tokens, s.prompt_tokens_per_s(), s.generated_tokens,
                s.decode_tokens_per_s(), s.ttft_ms, backend,
                static_cast<unsigned long long>(s.loader.prefetch_hits),
                static_cast<unsigned long long>(s.loader.prefetch_misses),
                static_cast<double>(s.loader.bytes_read + s.loader.embedding_bytes_read) / 1e6,
                stop_reason_name(s.stop_reason));
  return line;
}

}  // namespace sipllm::cli
