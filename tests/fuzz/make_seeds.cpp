// Writes the seed corpora of the fuzz targets into DIR/<target>/seed-*:
//
//   build/native/tests/fuzz/sipllm_fuzz_seeds tests/fuzz/corpus
//
// gguf: small complete models of every family and weight type (random
//   weights, a vocabulary of a few tokens, so that a file is a few KiB and
//   runs; one of them in Gemma 4's "gemma4" form), one with stories260K's
//   512-token vocabulary, and the headers of the real files in
//   tests/fixtures/arch and the demo's stories260K, cut where their tensor
//   data starts.
// tokenizer: llama.cpp's tokenizer test texts of the three vocabulary
//   fixtures, chat markup (Gemma 4's too), invalid UTF-8, and token id
//   sequences.
// range_response: the Content-Range values a real server sends (as
//   scripts/range-server.mjs answers: 206, 416 and 200), responses that are
//   right, short, long, of another version, and scripted servers for the
//   HTTP source.
// page_cache: index files as an HttpSource writes them after reading parts
//   of a file, with and without their pages.
// sampler: the engine's default options, greedy, the CLI's typical settings,
//   edge values, and stop strings over split token texts.
//
// Seeds are written again from scratch each run (files named seed-* only;
// inputs the fuzzers found and scripts/fuzz.sh merged in are left alone).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "io/http/page_cache.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/model_generator.h"
#include "sipllm/http_source.h"
#include "sipllm/weight_source.h"

namespace fs = std::filesystem;
using namespace sipllm;
using fuzz::Writer;

namespace {

fs::path g_root;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / ("seed-" + name), std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (dir / name).string());
}

std::string to_string(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

GgufFile parse_bytes(const std::vector<uint8_t>& bytes) {
  auto source = make_memory_source(bytes, "seed");
  return GgufFile::parse(*source);
}

// ---- gguf ----------------------------------------------------------------------

// A SentencePiece vocabulary of a few tokens: unknown, BOS, EOS, a byte
// token, pieces with and without the space marker.
GgufFile tiny_spm_vocab() {
  GgufWriter w;
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "<0x0A>", "\xE2\x96\x81", "a", "b", "c",
                                           "\xE2\x96\x81" "a", "ab", "abc", "\xE2\x96\x81" "the", "t", "h", "e"};
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (size_t i = 0; i < tokens.size(); ++i) {
    scores.push_back(-static_cast<float>(i));
    types.push_back(i == 0 ? 2 : i < 3 ? 3 : i == 3 ? 6 : 1);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_float32_array("tokenizer.ggml.scores", scores);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_uint32("tokenizer.ggml.bos_token_id", 1);
  w.set_uint32("tokenizer.ggml.eos_token_id", 2);
  return parse_bytes(w.to_bytes());
}

// A byte-level BPE vocabulary of a few tokens and merges, Qwen 2 style.
GgufFile tiny_bpe_vocab() {
  GgufWriter w;
  const std::vector<std::string> tokens = {"a", "b", "c", "\xC4\xA0", "\xC4\xA0" "a", "ab", "abc", "\n", "<|endoftext|>",
                                           "<|im_start|>", "<|im_end|>"};
  std::vector<int32_t> types(tokens.size(), 1);
  types[8] = types[9] = types[10] = 3;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {"\xC4\xA0 a", "a b", "ab c"});
  w.set_uint32("tokenizer.ggml.eos_token_id", 10);
  w.set_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
  return parse_bytes(w.to_bytes());
}

// Gemma 4's form of vocabulary: BPE merges over UTF-8 text with "\u2581" for
// spaces, <0xXX> byte fallback, newline tokens, BOS always added.
GgufFile tiny_gemma4_vocab() {
  GgufWriter w;
  const std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<0x0A>", "<0xC3>", "<0xA9>",
                                           "\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab",
                                           "\n", "\n\n", "<turn|>", "<|turn>", "</s>", "<|tool_response>"};
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = types[1] = types[2] = types[15] = types[16] = 3;
  types[3] = 2;
  types[4] = types[5] = types[6] = 6;
  types[18] = 4;
  w.set_string("tokenizer.ggml.model", "gemma4");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", {"a b", "\xE2\x96\x81 a", "\xE2\x96\x81 ab", "\n \n"});
  w.set_uint32("tokenizer.ggml.bos_token_id", 2);
  w.set_uint32("tokenizer.ggml.eos_token_id", 1);
  w.set_uint32("tokenizer.ggml.unknown_token_id", 3);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  return parse_bytes(w.to_bytes());
}

std::string micro_model(const GgufFile& vocab, const std::string& family, TensorType type, QuantMix mix,
                        int n_layers, bool tied) {
  ShapePreset shape;
  shape.name = "micro";
  shape.architecture = family;
  shape.dim = 32;
  shape.n_layers = n_layers;
  shape.n_heads = 2;
  shape.n_kv_heads = 1;
  shape.hidden_dim = 32;
  shape.context_length = 64;
  shape.tied_output = tied;
  shape.sliding_window = 4;
  if (family == "llama" && !tied) shape.llama3_rope_factor = 8;
  GeneratorOptions options;
  options.shape = shape;
  options.type = type;
  options.mix = mix;
  options.seed = 3;
  GgufWriter writer;
  build_random_model(vocab, options, writer);
  return to_string(writer.to_bytes());
}

void gguf_seeds() {
  const GgufFile spm = tiny_spm_vocab();
  const GgufFile bpe = tiny_bpe_vocab();
  for (const std::string family : {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "smollm3"}) {
    write_seed("gguf", family + "-Q8_0", micro_model(spm, family, TensorType::kQ8_0, QuantMix::kPlain, 2, true));
  }
  write_seed("gguf", "llama-F32", micro_model(spm, "llama", TensorType::kF32, QuantMix::kPlain, 1, true));
  write_seed("gguf", "llama-F16-untied", micro_model(spm, "llama", TensorType::kF16, QuantMix::kPlain, 1, false));
  write_seed("gguf", "llama-BF16", micro_model(bpe, "llama", TensorType::kBF16, QuantMix::kPlain, 1, true));
  for (TensorType type : {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1}) {
    write_seed("gguf", std::string("qwen2-") + tensor_type_name(static_cast<uint32_t>(type)),
               micro_model(bpe, "qwen2", type, QuantMix::kPlain, 2, true));
  }
  write_seed("gguf", "gemma3-Q4_K_M-mix", micro_model(spm, "gemma3", TensorType::kQ8_0, QuantMix::kQ4_K_M, 2, false));
  write_seed("gguf", "phi3-bpe", micro_model(bpe, "phi3", TensorType::kQ8_0, QuantMix::kPlain, 1, false));
  write_seed("gguf", "gemma3-gemma4-vocab",
             micro_model(tiny_gemma4_vocab(), "gemma3", TensorType::kQ8_0, QuantMix::kPlain, 1, true));

  // A version 2 file: the reader takes both.
  {
    GgufWriter writer(2);
    ShapePreset shape = shape_preset("tiny");
    shape.dim = 32, shape.n_layers = 1, shape.n_heads = 2, shape.n_kv_heads = 2, shape.hidden_dim = 32;
    GeneratorOptions options;
    options.shape = shape;
    options.type = TensorType::kQ8_0;
    build_random_model(spm, options, writer);
    write_seed("gguf", "llama-v2", to_string(writer.to_bytes()));
  }

  // Real headers, cut where the tensor data starts.
  std::vector<fs::path> real = {fs::path(SIPLLM_SOURCE_DIR) / "demo/public/models/stories260K.gguf"};
  for (const char* family : {"llama3", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "smollm3"}) {
    real.push_back(fs::path(SIPLLM_SOURCE_DIR) / "tests/fixtures/arch" / (std::string(family) + "-Q4_K_M.gguf"));
  }
  for (const fs::path& path : real) {
    const std::string bytes = read_file(path);
    const GgufFile file = parse_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()));
    write_seed("gguf", "header-" + path.stem().string(), bytes.substr(0, file.data_offset()));
  }
}

// ---- tokenizer --------------------------------------------------------------------

std::vector<std::string> vocab_test_texts(const std::string& name) {
  const std::string inp = read_file(fs::path(SIPLLM_SOURCE_DIR) / "tests/fixtures/vocab" / ("ggml-vocab-" + name + ".gguf.inp"));
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(separator, pos);
    texts.push_back(inp.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) break;
    pos = next + separator.size();
  }
  return texts;
}

void tokenizer_seeds() {
  int n = 0;
  auto text_seed = [&](uint8_t mode, const std::string& text) {
    write_seed("tokenizer", "text-" + std::to_string(n++), std::string(1, static_cast<char>(mode)) + text);
  };
  // llama.cpp's cases differ little between vocabularies: each text once,
  // with plain encoding and with BOS/EOS and special tokens in turn.
  std::vector<std::string> texts;
  for (const std::string name : {"qwen3", "llama3", "gemma3"}) {
    for (const std::string& t : vocab_test_texts(name)) {
      if (std::find(texts.begin(), texts.end(), t) == texts.end()) texts.push_back(t);
    }
  }
  for (size_t i = 0; i < texts.size(); ++i) text_seed(static_cast<uint8_t>(i % 4), texts[i]);
  for (const std::string& t :
       {std::string("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"),
        std::string("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"),
        std::string("<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"),
        std::string("<s>[INST] Hi [/INST]</s>"), std::string("Once upon a time, there was a little girl named Lily."),
        std::string("\xff\xfe\xe2\x96\x81 \xe2\x96\x81\xe2\x96 \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xf0\x9f\x98\x80"),
        std::string("   \t\t\n\n\r\n  x  "), std::string("3333333333 1234567 12.5e-3 \xe4\xb8\xad\xe6\x96\x87 \xd9\x85\xd8\xb1"),
        std::string("<0x0A><unk></s><|endoftext|><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>")}) {
    text_seed(2, t);
    text_seed(3, t);
  }
  auto ids_seed = [&](const std::vector<int32_t>& ids) {
    std::string bytes(1, '\x04');
    bytes.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
    write_seed("tokenizer", "ids-" + std::to_string(n++), bytes);
  };
  ids_seed({0, 1, 2, 3, 100, 1000, 10000, 100000});
  ids_seed({128000, 9906, 1917, 128009, 151643, 151645, 2, 106, 107});
  ids_seed({300, 301, 302, 303, 304, 511, 510, 35, 36, 37});
  ids_seed({-1, 0});
  ids_seed({262144, 5});
  // Gemma 4's chat markup (after the others, so that their names stay).
  for (const std::string t :
       {std::string("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi!<turn|>\n<|turn>model\n"),
        std::string("<|channel>thought\n...<channel|><|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>"
                    "<|tool_response></s>")}) {
    text_seed(2, t);
    text_seed(3, t);
  }
}

// ---- range_response ------------------------------------------------------------------

void range_seeds() {
  int n = 0;
  auto seed = [&](const std::string& bytes) { write_seed("range_response", std::to_string(n++), bytes); };
  // 0: header values, as servers write them.
  for (const std::string value :
       {"bytes 0-1048575/1185376", "bytes */1185376", "bytes 1048576-1185375/1185376", "bytes 0-99/*",
        " bytes  5-10/11 ", "bytes 0-0/1", "bytes 0-1048575/3758096384", "bytes 18446744073709551614-18446744073709551614/18446744073709551615",
        "bytes 10-5/100", "bytes 0-100/100", "bytes=0-99/100", "bytes 0-99/100, bytes 0-99/100"}) {
    seed(std::string(1, '\0') + value);
  }
  // 1: one response to one request.
  auto response = [&](uint64_t offset, uint64_t length, uint64_t known_size, const std::string& etag, int status_pick,
                      int content_range_kind, bool exact_body) {
    Writer w;
    w.u8(1);
    w.u8(250).u64(offset).u8(250).u64(length).u8(250).u64(known_size);
    w.text(etag).text("Tue, 01 Dec 2026 13:22:31 GMT");
    w.u8(static_cast<uint8_t>(status_pick)).u8(0);
    if (known_size == 0) w.u8(250).u64(1185376);  // the size the Content-Range states
    w.u8(static_cast<uint8_t>(content_range_kind));
    if (content_range_kind % 6 == 2) w.u8(1).u8(2).u8(1);
    w.u8(1).u8(1).u8(exact_body ? 1 : 0);
    if (!exact_body) w.u8(0).u16(1000);
    seed(w.bytes());
  };
  response(0, 1048576, 0, "\"121660-1a231c56bbe\"", 0, 0, true);          // the open
  response(1048576, 136800, 1185376, "\"121660-1a231c56bbe\"", 0, 0, true);  // the tail
  response(0, 1048576, 0, "W/\"abc\"", 3, 0, false);                       // 200, whole file
  response(4096, 4096, 1185376, "\"x\"", 0, 2, true);                      // off by a little
  response(4096, 4096, 1185376, "\"x\"", 0, 3, true);                      // total "*"
  response(4096, 4096, 1185376, "\"x\"", 0, 0, false);                     // short body
  response(2000000, 10, 1185376, "\"x\"", 5, 0, true);                     // 416
  response(0, 10, 1185376, "\"x\"", 7, 4, true);                           // 500
  // 2: an HTTP source over a scripted server.
  auto script = [&](uint8_t flags, uint32_t size, const std::vector<std::pair<uint32_t, uint32_t>>& reads,
                    const std::string& responses) {
    Writer w;
    w.u8(2).u8(flags).u32(size - 1).u8(static_cast<uint8_t>(reads.size() - 1));
    for (const auto& [offset, length] : reads) w.u32(offset).u32(length);
    w.raw(responses);
    seed(w.bytes());
  };
  // Each scripted response: status pick, error byte, Content-Range kind,
  // ETag byte, body byte (then a u32 when not the natural length).
  const std::string good = Writer().u8(0).u8(200).u8(0).u8(0).u8(0).bytes();
  script(0, 1185376, {{0, 4096}, {1048570, 20000}}, "");
  script(16, 1185376, {{0, 4096}, {1048570, 20000}, {500000, 262143}, {0, 100}}, "");
  script(16 | 8, 3000000, {{0, 200000}, {1200000, 262143}, {1500000, 262143}}, "");
  script(4, 5000, {{0, 5000}, {100, 10}}, Writer().u8(3).u8(200).u8(0).u8(0).u8(0).bytes());
  script(4 | 16, 2000000, {{0, 100}, {1500000, 1000}}, Writer().u8(3).u8(200).u8(0).u8(0).u8(0).bytes());
  script(0, 2000000, {{0, 100}, {1500000, 1000}}, Writer().u8(3).u8(200).u8(0).u8(0).u8(0).bytes());
  script(2, 1185376, {{1100000, 1000}}, good + Writer().u8(7).u8(200).u8(0).u8(0).u8(0).bytes() + good);
  script(1, 1185376, {{1100000, 1000}}, good + Writer().u8(0).u8(5).u8(0).u8(0).u8(0).bytes());
  script(1, 1185376, {{1100000, 1000}}, good + Writer().u8(0).u8(200).u8(2).u8(1).u8(2).u8(1).u8(0).u8(0).bytes());
  script(16, 1185376, {{1100000, 1000}}, good + Writer().u8(0).u8(200).u8(0).u8(250).u8(0).bytes());
  script(0, 1185376, {{1100000, 1000}}, good + Writer().u8(0).u8(200).u8(5).raw(Writer().text("bytes 0-5/6").bytes()).u8(0).u8(0).bytes());
  script(1, 1185376, {{1100000, 1000}}, good + Writer().u8(0).u8(200).u8(0).u8(0).u8(200).u32(500).bytes());
}

// ---- page_cache ---------------------------------------------------------------------

// The index and pages an HttpSource leaves after reading `reads` of a file of
// `size` bytes, with `page_bytes` pages.
void cache_seed(const std::string& name, uint64_t size, uint64_t page_bytes,
                const std::vector<std::pair<uint64_t, size_t>>& reads, uint8_t flags,
                const std::vector<std::pair<uint32_t, uint32_t>>& later_reads, int64_t pages_length = -1,
                const std::vector<std::pair<uint64_t, size_t>>& row_reads = {}) {
  const std::string url = "http://127.0.0.1:8080/models/" + name + ".gguf";
  auto store = std::make_shared<fuzz::MemoryStore>();
  HttpSourceOptions options;
  options.cache = store;
  options.page_bytes = page_bytes;
  options.parallel_requests = 1;
  auto transport = std::make_shared<fuzz::PatternTransport>(size, "\"" + name + "-etag\"", "Tue, 01 Dec 2026 13:22:31 GMT");
  {
    auto source = open_http_source(url, transport, options);
    std::vector<uint8_t> buffer;
    for (const auto& [offset, length] : reads) {
      buffer.resize(length);
      source->read(offset, buffer.data(), length);
    }
    // Rows (read_many): stored as ranges beside the pages.
    std::vector<std::vector<uint8_t>> rows;
    std::vector<WeightSource::ReadRequest> many;
    for (const auto& [offset, length] : row_reads) {
      rows.emplace_back(length);
      many.push_back({offset, rows.back().data(), length});
    }
    if (!many.empty()) source->read_many(many);
  }
  const std::optional<CacheIndex> parsed = read_cache_index(*store, cache_index_name(url));
  if (!parsed) throw std::runtime_error("the seed's index does not read back");
  Writer w;
  w.u8(flags).u32(static_cast<uint32_t>(pages_length >= 0 ? static_cast<uint64_t>(pages_length) : size));
  for (const auto& [offset, length] : later_reads) w.u32(offset).u32(length);
  w.raw(parsed->serialize());
  write_seed("page_cache", name, w.bytes());
}

void page_cache_seeds() {
  cache_seed("head-only", 1185376, 1u << 20, {{0, 20000}}, 1, {{0, 100}, {1100000, 1000}, {500000, 65535}});
  cache_seed("complete", 300000, 4096, {{0, 300000}}, 1, {{0, 4096}, {100000, 65535}, {299990, 10}});
  cache_seed("sparse", 300000, 4096, {{0, 5000}, {100000, 10000}, {250000, 50000}}, 3,
             {{4000, 2000}, {105000, 20000}, {200000, 65535}});
  cache_seed("pages-lost", 300000, 4096, {{0, 300000}}, 1, {{0, 4096}, {100000, 65535}, {290000, 10000}}, 150000);
  cache_seed("other-version", 300000, 4096, {{0, 5000}}, 0, {{0, 4096}, {100000, 100}, {3000, 2000}});
  cache_seed("odd-pages", 100001, 1u << 12 | 1u << 10, {{0, 40000}}, 1, {{0, 4096}, {99990, 11}, {3000, 2000}}, 0);
  // Past the first range (1 MiB, which the open fetches), so that rows are ranges.
  cache_seed("rows", 3000000, 4096, {{0, 5000}}, 1, {{1200000, 700}, {1200500, 9000}, {2500000, 100}}, -1,
             {{1200000, 700}, {1310000, 700}, {1310700, 700}, {2500050, 1000}});
}

// ---- sampler ----------------------------------------------------------------------

void sampler_seeds() {
  int n = 0;
  auto seed = [&](const std::string& bytes) { write_seed("sampler", std::to_string(n++), bytes); };
  // mode, temperature, top_k (flag, value), top_p, min_p, repeat_penalty,
  // repeat_last_n (flag, value), seed, biases, n_vocab, recent, logits.
  auto options = [&](float temperature, int top_k, float top_p, float min_p, float penalty, int last_n,
                     std::vector<std::pair<int32_t, float>> bias, uint16_t n_vocab, std::vector<int32_t> recent,
                     std::vector<float> logits) {
    Writer w;
    w.u8(0).f32(temperature).u8(1).i32(top_k).f32(top_p).f32(min_p).f32(penalty).u8(1).i32(last_n).u64(42);
    w.u8(static_cast<uint8_t>(bias.size()));
    for (const auto& [token, value] : bias) w.u8(1).i32(token).f32(value);
    w.u16(static_cast<uint16_t>(n_vocab - 1)).u8(static_cast<uint8_t>(recent.size()));
    for (int32_t t : recent) w.u8(1).i32(t);
    for (float l : logits) w.f32(l);
    seed(w.bytes());
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  options(0.8f, 40, 0.95f, 0.05f, 1.0f, 64, {}, 512, {1, 2, 3}, {0.5f, 2.0f, -1.0f, 3.0f, 3.0f});
  options(0.0f, 40, 0.95f, 0.05f, 1.1f, 64, {}, 8, {1, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  options(1.5f, 0, 0.5f, 0.0f, 1.3f, -1, {{3, -inf}, {4, 5.0f}}, 16, {0, 15, 16, -3}, {});
  options(0.7f, 1, 1.0f, 0.2f, 1.0f, 0, {}, 1000, {}, {nan, 1.0f, inf, -inf, nan, 0.0f});
  options(1e-30f, 5, 0.9f, 0.0f, nan, 64, {{0, nan}}, 32, {5, 6}, {1e30f, -1e30f, 3e38f});
  options(inf, 1000, 2.0f, 1.0f, 0.5f, 200, {}, 64, {1, 2, 3}, {-inf, -inf, -inf});
  options(nan, -5, 0.95f, nan, 1.0f, 64, {}, 4, {}, {nan, nan, nan, nan});
  // Stop strings: count, strings, pieces.
  auto stops = [&](const std::vector<std::string>& strings, const std::vector<std::string>& pieces) {
    Writer w;
    w.u8(1).u8(static_cast<uint8_t>(strings.size()));
    for (const std::string& s : strings) w.text(s);
    w.u8(static_cast<uint8_t>(pieces.size()));
    for (const std::string& p : pieces) w.text(p);
    seed(w.bytes());
  };
  stops({"\n\n", "User:"}, {"Hello", " there", "!\n", "\nUs", "er:", " more"});
  stops({"<|im_end|>"}, {"The answer", " is 4.<|im", "_end", "|>"});
  stops({"abcabd", "bca", ""}, {"ab", "ca", "bcab", "d"});
  stops({"x"}, {"no stop here", " at all"});
  stops({"\xe2\x96", "\xe2\x96\x81"}, {"a\xe2", "\x96\x81", "b"});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR   (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  try {
    for (const char* target : {"gguf", "tokenizer", "range_response", "page_cache", "sampler"}) {
      if (!fs::exists(g_root / target)) continue;
      for (const auto& entry : fs::directory_iterator(g_root / target)) {
        if (entry.path().filename().string().rfind("seed-", 0) == 0) fs::remove(entry.path());
      }
    }
    gguf_seeds();
    tokenizer_seeds();
    range_seeds();
    page_cache_seeds();
    sampler_seeds();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
