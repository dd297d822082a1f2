// Grammar-constrained sampling: the vocabulary trie against a token-by-token
// check, the sampler's shortcuts against masking first, and generation
// under grammars and JSON schemas on random-weight models.
#include "runtime/grammar_filter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <memory>
#include <string>
#include <vector>

#include "json_schema_check.h"
#include "model/gguf.h"
#include "runtime/sampler.h"
#include "sipllm/grammar.h"
#include "test_support.h"
#include "text/grammar.h"
#include "text/json.h"
#include "text/tokenizer.h"

namespace sipllm {
namespace {

std::string vocab_path(const std::string& name) { return std::string(SIPLLM_VOCAB_DIR) + "/" + name; }

std::unique_ptr<Tokenizer> qwen3_tokenizer() {
  auto source = open_file_source(vocab_path("ggml-vocab-qwen3.gguf"));
  return Tokenizer::from_gguf(GgufFile::parse(*source));
}

// A random-weight model (tiny shape) with the 151,936-token Qwen3 vocabulary.
std::unique_ptr<Engine> qwen3_vocab_model(uint64_t seed) {
  auto vocab_source = open_file_source(vocab_path("ggml-vocab-qwen3.gguf"));
  const GgufFile vocab = GgufFile::parse(*vocab_source);
  GeneratorOptions options;
  options.shape = shape_preset("tiny");
  options.type = TensorType::kQ8_0;
  options.seed = seed;
  GgufWriter writer;
  build_random_model(vocab, options, writer);
  return Engine::open(make_memory_source(writer.to_bytes()));
}

std::vector<uint64_t> naive_mask(GrammarMatcher& m, GrammarMatcher::StateId state, const GrammarVocabulary& v) {
  std::vector<uint64_t> bits((static_cast<size_t>(v.size()) + 63) / 64, 0);
  for (int32_t t = 0; t < v.size(); ++t) {
    if (v.end_of_generation(t) || v.bytes(t).empty()) continue;
    if (m.walk(state, v.bytes(t)) != GrammarMatcher::kDead) bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64);
  }
  return bits;
}

size_t popcount(const std::vector<uint64_t>& bits) {
  size_t n = 0;
  for (uint64_t w : bits) n += static_cast<size_t>(__builtin_popcountll(w));
  return n;
}

TEST(TokenTrie, MasksEqualTokenByTokenChecksOnQwen3Vocabulary) {
  const auto tokenizer = qwen3_tokenizer();
  const GrammarVocabulary vocab(*tokenizer);
  ASSERT_EQ(vocab.size(), 151936);
  struct Probe {
    std::string grammar;
    std::vector<std::string> prefixes;
  };
  const std::vector<Probe> probes = {
      {json_object_grammar(), {"", "{", "{\"na", "{\"a\": [1, 2", "{\"a\": -1.5e", "{\"a\": \"\xE4\xBD", "{\"a\": {}"}},
      {json_schema_to_grammar(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                   "n": {"type": "integer", "minimum": 3, "maximum": 300}}, "required": ["name", "n"]})"),
       {"", "{\"", "{\"name\": \"ab", "{\"name\": \"abcd", "{\"name\": \"x\", \"n\": 2"}},
      {"root ::= [一-龥]+ \"。\"", {"", "\xE4\xB8\xAD"}},  // CJK: tokens split inside characters
      {"root ::= [^\\n]* \"\\n\"", {"", "abc"}},
  };
  for (const Probe& p : probes) {
    GrammarMatcher m(Grammar::parse(p.grammar));
    for (const std::string& prefix : p.prefixes) {
      const GrammarMatcher::StateId s = m.walk(m.state(), prefix);
      ASSERT_NE(s, GrammarMatcher::kDead) << prefix;
      std::vector<uint64_t> bits((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
      vocab.trie().collect(m, s, bits);
      const std::vector<uint64_t> expected = naive_mask(m, s, vocab);
      EXPECT_EQ(bits, expected) << "after '" << prefix << "' in\n" << p.grammar;
      EXPECT_GT(popcount(expected), 0u) << prefix;
    }
  }
}

TEST(GrammarFilter, EndOfGenerationOnlyWhereTheGrammarMayEnd) {
  const auto tokenizer = qwen3_tokenizer();
  auto vocab = std::make_shared<const GrammarVocabulary>(*tokenizer);
  GrammarFilter filter(Grammar::parse("root ::= \"ab\" \"c\"?"), vocab);
  const int32_t eos = tokenizer->eos();
  ASSERT_TRUE(tokenizer->is_end_of_generation(eos));
  EXPECT_FALSE(filter.allows(eos));
  const std::vector<int32_t> ab = tokenizer->encode("ab", false, false);
  ASSERT_EQ(ab.size(), 1u);
  EXPECT_TRUE(filter.allows(ab[0]));
  EXPECT_FALSE(filter.allows(tokenizer->encode("x", false, false)[0]));
  EXPECT_FALSE(filter.allows(tokenizer->encode("<|im_start|>", false, true)[0]));  // control: no text
  filter.accept(ab[0]);
  EXPECT_TRUE(filter.can_end());
  EXPECT_FALSE(filter.must_end());
  EXPECT_TRUE(filter.allows(eos));
  std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
  filter.apply(logits);
  size_t finite = 0;
  for (float l : logits) finite += std::isfinite(l);
  // "c" and every end-of-generation token.
  EXPECT_EQ(finite, 1 + tokenizer->end_of_generation_tokens().size());
  EXPECT_THROW(filter.accept(ab[0]), Error);
  filter.accept(tokenizer->encode("c", false, false)[0]);
  EXPECT_TRUE(filter.must_end());
}

// The sampler asks the filter about single tokens where that settles the
// draw; the result must be exactly that of masking the logits first.
TEST(GrammarFilter, SamplingEqualsMaskingFirst) {
  const auto tokenizer = qwen3_tokenizer();
  auto vocab = std::make_shared<const GrammarVocabulary>(*tokenizer);
  const std::string grammar = json_object_grammar();
  // Texts that lead to permissive states (inside a string) and restrictive
  // ones (after "{": a quote, a blank or "}"), so both the shortcut and its
  // fallback run.
  const std::vector<std::string> prefixes = {"", "{", "{\"key\": \"some text", "{\"a\": 12", "{\"a\": [true, "};
  struct Setting {
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  const std::vector<Setting> settings = {{0, 40, 1, 0}, {0.8f, 40, 0.95f, 0.05f}, {1.5f, 5, 1, 0},
                                         {1.5f, 0, 1, 0}, {1.0f, 0, 0.9f, 0.0f}, {1.0f, 300, 1, 0.1f}};
  uint64_t rng = 12345;
  auto uniform = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>((rng >> 40) & 0xFFFFFF) / 16777216.0f;
  };
  int checked = 0;
  for (const std::string& prefix : prefixes) {
    GrammarFilter filter(Grammar::parse(grammar), vocab);
    for (int32_t t : tokenizer->encode(prefix, false, false)) filter.accept(t);
    for (const Setting& st : settings) {
      for (int trial = 0; trial < 4; ++trial) {
        std::vector<float> logits(static_cast<size_t>(vocab->size()));
        for (float& l : logits) l = 8.0f * uniform() - 4.0f;
        SamplingOptions options;
        options.temperature = st.temperature;
        options.top_k = st.top_k;
        options.top_p = st.top_p;
        options.min_p = st.min_p;
        options.seed = 1000 + static_cast<uint64_t>(trial);
        std::vector<float> masked = logits;
        filter.apply(masked);
        Sampler reference(options, vocab->size());
        const int32_t expected = reference.sample(masked, {});
        Sampler sampler(options, vocab->size());
        std::vector<float> raw = logits;
        const int32_t got = sampler.sample(raw, {}, &filter);
        EXPECT_EQ(got, expected) << "after '" << prefix << "', temperature " << st.temperature << ", top-k " << st.top_k;
        EXPECT_TRUE(filter.allows(got));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 5 * 6 * 4);
}

TEST(GrammarFilter, MasksStayRightAcrossTheMatchersCacheResets) {
  // A count in the state makes a new state per character; past the
  // matcher's limit its state ids restart (the current state becomes 0, as
  // the first state was), and cached masks must go too.
  const auto tokenizer = qwen3_tokenizer();
  auto vocab = std::make_shared<const GrammarVocabulary>(*tokenizer);
  GrammarFilter filter(Grammar::parse("root ::= \"x\" [a-z]{0,20000} \"!\""), vocab);
  std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
  filter.apply(logits);  // cached for the first state: only tokens starting with "x"
  const int32_t abcd = tokenizer->encode("abcd", false, false)[0];
  EXPECT_FALSE(filter.allows(abcd));
  filter.accept(tokenizer->encode("x", false, false)[0]);
  const int32_t a = tokenizer->encode("a", false, false)[0];
  const uint64_t epoch = filter.matcher().epoch();
  for (int i = 0; i < 20000 && filter.matcher().epoch() == epoch; ++i) filter.accept(a);
  ASSERT_GT(filter.matcher().epoch(), epoch);
  ASSERT_EQ(filter.matcher().state(), 0);
  std::vector<float> now(static_cast<size_t>(vocab->size()), 0.0f);
  filter.apply(now);
  GrammarMatcher& m = filter.matcher();
  const std::vector<uint64_t> expected = naive_mask(m, m.state(), *vocab);
  for (int32_t t = 0; t < vocab->size(); ++t) {
    const bool allowed = vocab->end_of_generation(t) ? m.can_end(m.state()) : ((expected[t / 64] >> (t % 64)) & 1) != 0;
    ASSERT_EQ(std::isfinite(now[static_cast<size_t>(t)]), allowed) << "token " << t;
  }
  EXPECT_TRUE(std::isfinite(now[static_cast<size_t>(abcd)]));
}

TEST(GrammarFilter, AWalkPastItsWorkLimitIsAnErrorNotAHang) {
  // Cached transitions make even ambiguous grammars cheap as a rule (60 x 60
  // places for each letter here come back to one state); the limit guards
  // the rest. Shown with a small limit.
  std::string g = "root ::=";
  for (int i = 0; i < 60; ++i) g += " c";
  g += "\nc ::=";
  for (int i = 0; i < 60; ++i) g += " b";
  g += "\nb ::= [a-z]?\n";
  const auto tokenizer = qwen3_tokenizer();
  const GrammarVocabulary vocab(*tokenizer);
  std::vector<uint64_t> bits((static_cast<size_t>(vocab.size()) + 63) / 64, 0);
  GrammarMatcher fine(Grammar::parse(g));
  vocab.trie().collect(fine, fine.state(), bits);  // under the default limit
  EXPECT_GT(popcount(bits), 1000u);
  GrammarMatcher limited(Grammar::parse(g));
  try {
    vocab.trie().collect(limited, limited.state(), bits, 100000);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous to run"), std::string::npos) << e.what();
  }
}

TEST(GrammarFilter, NoAllowedTokenIsAnError) {
  const auto tokenizer = qwen3_tokenizer();
  auto vocab = std::make_shared<const GrammarVocabulary>(*tokenizer);
  // Byte-level tokens spell any text, so only a grammar that can match
  // nothing leaves no token.
  GrammarFilter filter(Grammar::parse("root ::= []"), vocab);
  std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
  for (float temperature : {0.0f, 1.0f}) {
    SamplingOptions options;
    options.temperature = temperature;
    options.seed = 1;
    Sampler sampler(options, vocab->size());
    std::vector<float> l = logits;
    try {
      sampler.sample(l, {}, &filter);
      ADD_FAILURE() << "sampled";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the grammar allows no token"), std::string::npos) << e.what();
    }
  }
}

// --- generation ------------------------------------------------------------

// Bounded everywhere (string lengths, item counts, the number and space
// primitives), so that a generation ends on its own.
const char* const kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    "ok": {"type": "boolean"},
    "when": {"oneOf": [{"type": "null"}, {"type": "string", "format": "date"}]},
    "score": {"type": "number"}
  },
  "required": ["name", "age", "tags"],
  "additionalProperties": false
})";

struct Outcome {
  std::string text;
  GenerationStats stats;
};

Outcome generate_with(Engine& engine, const std::string& prompt, const GenerateOptions& options) {
  Outcome o;
  engine.reset();
  o.text = test::generate_text(engine, prompt, options, &o.stats);
  return o;
}

void expect_valid_json(const std::string& text, const JsonValue& schema, const std::string& context) {
  JsonValue doc;
  try {
    doc = parse_json(text);
  } catch (const Error& e) {
    ADD_FAILURE() << context << ": not JSON (" << e.what() << "):\n" << text;
    return;
  }
  EXPECT_EQ(test::SchemaCheck(schema).check(doc), "") << context << ":\n" << text;
}

void check_schema_generation(Engine& engine, const std::string& schema_text, int max_tokens, const std::string& model) {
  const JsonValue schema = parse_json(schema_text);
  GenerateOptions options;
  options.max_tokens = max_tokens;
  options.grammar = json_schema_to_grammar(schema_text);
  options.sampling.temperature = 1.5f;
  options.sampling.top_k = 0;
  options.sampling.top_p = 1.0f;
  options.sampling.min_p = 0;
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    options.sampling.seed = seed;
    const Outcome o = generate_with(engine, "Once upon a time", options);
    const std::string context = model + ", seed " + std::to_string(seed);
    if (std::getenv("SIPLLM_SHOW_GRAMMAR_OUTPUT")) std::printf("%s (%d tokens): %s\n", context.c_str(), o.stats.generated_tokens, o.text.c_str());
    EXPECT_TRUE(o.stats.stop_reason == StopReason::kGrammarComplete || o.stats.stop_reason == StopReason::kEndOfText)
        << context << ": " << stop_reason_name(o.stats.stop_reason) << "\n" << o.text;
    expect_valid_json(o.text, schema, context);
  }
}

TEST(GrammarGeneration, JsonSchemaOutputValidatesOnStories260K) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  check_schema_generation(*engine, kPersonSchema, 480, "stories260K");
}

TEST(GrammarGeneration, JsonSchemaOutputValidatesOnTheQwen3Vocabulary) {
  auto engine = qwen3_vocab_model(5);
  ASSERT_EQ(engine->info().n_vocab(), 151936);
  check_schema_generation(*engine, kPersonSchema, 480, "random model, Qwen3 vocabulary");
}

TEST(GrammarGeneration, FamilyFixturesUnderDefaultAndGreedySampling) {
  const JsonValue schema = parse_json(kPersonSchema);
  for (const std::string family : {"llama3-Q8_0", "qwen3-Q4_K_M", "gemma3-Q8_0", "phi3-Q4_K_M"}) {
    auto engine = Engine::open(open_file_source(std::string(SIPLLM_FIXTURES_DIR) + "/arch/" + family + ".gguf"));
    GenerateOptions options;  // default sampling: the top-k shortcut
    options.max_tokens = 480;
    options.grammar = json_schema_to_grammar(kPersonSchema);
    options.sampling.seed = 7;
    Outcome o = generate_with(*engine, "Once upon a time", options);
    expect_valid_json(o.text, schema, family + ", default sampling");
    options.sampling.temperature = 0;  // greedy: the best allowed token
    o = generate_with(*engine, "Once upon a time", options);
    expect_valid_json(o.text, schema, family + ", greedy");
  }
}

TEST(GrammarGeneration, AnyJsonObjectStaysWithinTheGrammar) {
  auto engine = Engine::open(make_memory_source(test::random_llama_bytes()));
  GenerateOptions options;
  options.max_tokens = 200;
  options.grammar = json_object_grammar();
  options.sampling.temperature = 1.5f;
  options.sampling.top_k = 0;
  for (uint64_t seed : {1, 2, 3}) {
    options.sampling.seed = seed;
    const Outcome o = generate_with(*engine, "Once", options);
    GrammarMatcher m(Grammar::parse(options.grammar));
    ASSERT_TRUE(m.is_prefix(o.text)) << o.text;
    EXPECT_EQ(o.text.front(), '{');
    if (o.stats.stop_reason != StopReason::kMaxTokens) {
      EXPECT_TRUE(m.matches(o.text)) << o.text;
      EXPECT_TRUE(parse_json(o.text).is_object()) << o.text;
    }
  }
}

TEST(GrammarGeneration, StopsWhenNothingCanFollow) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  GenerateOptions options = test::greedy(100);
  options.grammar = "root ::= \"ab\"";
  Outcome o = generate_with(*engine, "Once upon a time", options);
  EXPECT_EQ(o.text, "ab");
  EXPECT_EQ(o.stats.stop_reason, StopReason::kGrammarComplete);
  EXPECT_STREQ(stop_reason_name(o.stats.stop_reason), "grammar complete");
  // Only the tokens of "ab" were evaluated after the prompt: none for a token
  // that could not come.
  EXPECT_EQ(engine->cached_tokens().size(), static_cast<size_t>(o.stats.prompt_tokens + o.stats.generated_tokens - 1));

  options.grammar = "root ::= \"\"";  // complete before anything
  o = generate_with(*engine, "Once upon a time", options);
  EXPECT_EQ(o.text, "");
  EXPECT_EQ(o.stats.generated_tokens, 0);
  EXPECT_EQ(o.stats.stop_reason, StopReason::kGrammarComplete);
}

TEST(GrammarGeneration, MalformedGrammarFailsBeforeAnyWork) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  GenerateOptions options = test::greedy(10);
  options.grammar = "root ::= (\"a\"";
  try {
    engine->generate("Once upon a time", options, [](const TokenEvent&) { return true; });
    ADD_FAILURE() << "generated";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("grammar line 1, column 14: expected ')'"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(engine->cached_tokens().empty());
}

TEST(GrammarGeneration, TheGrammarSeesTheTextAsDecoded) {
  // From BOS alone a SentencePiece text drops its first leading space, so
  // the grammar must see the first token without it: " x" then takes a
  // token that decodes to nothing (the lone space) and then one for " x".
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  for (const std::string text : {" x", "Once upon", "x"}) {
    GenerateOptions options = test::greedy(20);
    options.grammar = "root ::= " + std::string("\"") + text + "\"";
    engine->reset();
    GenerationStats stats;
    const std::string out = test::generate_text(*engine, std::vector<int32_t>{1}, options, &stats);
    EXPECT_EQ(out, text);
    EXPECT_EQ(stats.stop_reason, StopReason::kGrammarComplete);
  }
}

TEST(GrammarGeneration, SameSeedSameTextUnderAGrammar) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  GenerateOptions options;
  options.max_tokens = 60;
  options.grammar = "root ::= [a-z ]+ \".\"";
  options.sampling.seed = 42;
  const Outcome a = generate_with(*engine, "Once upon a time", options);
  const Outcome b = generate_with(*engine, "Once upon a time", options);
  EXPECT_EQ(a.text, b.text);
  GrammarMatcher m(Grammar::parse(options.grammar));
  EXPECT_TRUE(m.is_prefix(a.text)) << a.text;
}

// --- the command line -------------------------------------------------------

struct CommandResult {
  int exit_code;
  std::string output;
};

CommandResult run_cli(const std::string& arguments, bool with_stderr) {
  const std::string command = std::string(SIPLLM_CLI_PATH) + " " + arguments + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

TEST(GrammarCli, JsonSchemaGrammarAndJsonFlags) {
  const std::string model = test::model_path("stories260K.gguf");
  const std::string schema_path = testing::TempDir() + "/person.schema.json";
  write_file(schema_path, kPersonSchema);
  const JsonValue schema = parse_json(kPersonSchema);
  // run prints the prompt, the text, and a newline.
  for (const std::string seed : {"1", "2"}) {
    const CommandResult r = run_cli("run -m " + model + " -p Hello -n 400 --temp 1.5 --top-k 0 --seed " + seed +
                                        " --json-schema " + schema_path, false);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_EQ(r.output.rfind("Hello", 0), 0u) << r.output;
    expect_valid_json(r.output.substr(5, r.output.size() - 6), schema, "sipllm run --json-schema, seed " + seed);
  }
  CommandResult r = run_cli("run -m " + model + " -p Hi -n 60 --json-schema '{\"enum\": [\"yes\", \"no\"]}'", true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output.rfind("Hi\"yes\"", 0) == 0 || r.output.rfind("Hi\"no\"", 0) == 0) << r.output;
  EXPECT_NE(r.output.find("stop: grammar complete"), std::string::npos) << r.output;

  const std::string grammar_path = testing::TempDir() + "/pet.gbnf";
  write_file(grammar_path, "root ::= \"The \" pet \" is \" (\"big\" | \"small\") \".\"\npet ::= \"cat\" | \"dog\"\n");
  r = run_cli("run -m " + model + " -p Once -n 60 --grammar " + grammar_path, false);
  EXPECT_EQ(r.exit_code, 0);
  GrammarMatcher m(Grammar::parse(test::read_file(grammar_path)));
  EXPECT_TRUE(m.matches(r.output.substr(4, r.output.size() - 5))) << r.output;

  r = run_cli("run -m " + model + " -p Once -n 100 --json --seed 3", false);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output.substr(4, 1), "{") << r.output;
}

TEST(GrammarCli, ErrorsNameTheFileThePlaceOrTheKeyword) {
  const std::string model = test::model_path("stories260K.gguf");
  const std::string bad = testing::TempDir() + "/bad.gbnf";
  write_file(bad, "root ::= item+\nitem ::= [a-z\n");
  CommandResult r = run_cli("run -m " + model + " --grammar " + bad, true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(bad + ": grammar line 2, column 10: unterminated character class"), std::string::npos)
      << r.output;
  r = run_cli("run -m " + model + " --json-schema '{\"type\": \"string\", \"pattern\": \"^a\"}'", true);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unsupported error: JSON schema: keyword 'pattern' is not supported"), std::string::npos)
      << r.output;
  r = run_cli("run -m " + model + " --json --grammar " + bad, true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("give one constraint"), std::string::npos) << r.output;
  r = run_cli("tokenize -m " + model + " -p x --json", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--json is for run and bench"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace sipllm
