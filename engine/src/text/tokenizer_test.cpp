#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "sipllm/error.h"
#include "sipllm/weight_source.h"
#include "test_support.h"
#include "text/unicode.h"
#include "vocab_cases.h"

namespace sipllm {
namespace {

using test::escape;
using test::ids_to_string;
using test::read_vocab_cases;

// ---------------------------------------------------------------------------
// Helpers

GgufFile parse_gguf_file(const std::string& path) {
  auto source = open_file_source(path);
  return GgufFile::parse(*source);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& relative_path) {
  return Tokenizer::from_gguf(parse_gguf_file(test::model_path(relative_path)));
}

// Copies a tensor-less GGUF keeping only the first of any repeated metadata
// key. ggml-vocab-dbrx.gguf (from a llama.cpp PR branch, never on master)
// writes general.file_type twice, which GgufFile rightly rejects, as
// llama.cpp's own reader does today; its tokenizer metadata is fine.
GgufFile parse_gguf_dropping_repeated_keys(const std::string& path) {
  const std::string raw = test::read_file(path);
  size_t pos = 0;
  const auto take = [&](size_t n) {
    if (raw.size() - pos < n) throw std::runtime_error(path + ": truncated");
    const size_t at = pos;
    pos += n;
    return at;
  };
  const auto u32 = [&] {
    uint32_t v;
    std::memcpy(&v, raw.data() + take(4), 4);
    return v;
  };
  const auto u64 = [&] {
    uint64_t v;
    std::memcpy(&v, raw.data() + take(8), 8);
    return v;
  };
  const auto skip_value = [&](uint32_t type, auto& self) -> void {
    static const size_t kScalarSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == static_cast<uint32_t>(GgufType::kString)) {
      take(u64());
    } else if (type == static_cast<uint32_t>(GgufType::kArray)) {
      const uint32_t element_type = u32();
      const uint64_t count = u64();
      for (uint64_t i = 0; i < count; ++i) self(element_type, self);
    } else if (type < 13) {
      take(kScalarSize[type]);
    } else {
      throw std::runtime_error(path + ": bad metadata type");
    }
  };

  take(8);  // magic, version
  const uint64_t tensor_count = u64();
  if (tensor_count != 0) throw std::runtime_error(path + ": has tensors");
  const size_t count_offset = take(8);
  uint64_t count = 0;
  std::memcpy(&count, raw.data() + count_offset, 8);

  std::string kept;
  std::vector<std::string> seen;
  uint64_t kept_count = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const size_t entry_start = pos;
    const uint64_t key_length = u64();
    const std::string key = raw.substr(take(key_length), key_length);
    skip_value(u32(), skip_value);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    kept += raw.substr(entry_start, pos - entry_start);
    ++kept_count;
  }
  std::string file = raw.substr(0, count_offset);
  file.append(reinterpret_cast<const char*>(&kept_count), 8);
  file += kept;
  auto source = make_memory_source(std::vector<uint8_t>(file.begin(), file.end()), path);
  return GgufFile::parse(*source);
}

std::string vocab_path(const std::string& name) {
  return test::model_path("llama.cpp-vocab/ggml-vocab-" + name + ".gguf");
}

std::unique_ptr<Tokenizer> load_vocab(const std::string& name) {
  const std::string path = vocab_path(name);
  return Tokenizer::from_gguf(name == "dbrx" ? parse_gguf_dropping_repeated_keys(path) : parse_gguf_file(path));
}

// Parses a metadata-only GGUF built in memory.
GgufFile parse(const GgufWriter& writer) {
  auto source = make_memory_source(writer.to_bytes(), "test.gguf");
  return GgufFile::parse(*source);
}

// A small, valid SentencePiece vocabulary; tests break one key at a time.
struct TinySpmVocab {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab"};
  std::vector<float> scores = {0, 0, 0, -1, -2, -3, -0.5f, -0.25f};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1};

  GgufWriter builder(const std::string& model = "llama") const {
    GgufWriter b;
    b.set_string("general.architecture", "llama").set_string("tokenizer.ggml.model", model);
    b.set_string_array("tokenizer.ggml.tokens", tokens).set_float32_array("tokenizer.ggml.scores", scores);
    b.set_int32_array("tokenizer.ggml.token_type", types);
    return b;
  }
};

// Expects `fn` to throw a sipllm::Error of `kind` whose message contains `needle`.
template <typename Fn>
void expect_error(Fn fn, ErrorKind kind, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}

// ---------------------------------------------------------------------------
// llama.cpp's tokenizer test pairs (models/ggml-vocab-*.gguf.inp/.out).

struct VocabUnderTest {
  const char* name;  // ggml-vocab-<name>.gguf
  size_t expected_cases;
  // The vocabulary whose .inp/.out to use, when the file has none of its own.
  const char* cases_from = nullptr;
};

void PrintTo(const VocabUnderTest& vocab, std::ostream* os) { *os << vocab.name; }

class TokenizerVocabTest : public ::testing::TestWithParam<VocabUnderTest> {};

TEST_P(TokenizerVocabTest, EncodesAndDecodesEveryCaseLikeLlamaCpp) {
  const VocabUnderTest& vocab = GetParam();
  const std::unique_ptr<Tokenizer> tokenizer = load_vocab(vocab.name);
  const std::string cases_path = vocab_path(vocab.cases_from != nullptr ? vocab.cases_from : vocab.name);
  const std::vector<test::VocabCase> cases = read_vocab_cases(cases_path + ".inp", cases_path + ".out");
  ASSERT_EQ(cases.size(), vocab.expected_cases);

  size_t encoded_ok = 0;
  size_t decoded_ok = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const test::VocabCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": '" + escape(c.text) + "'");
    const std::vector<int32_t> ids = tokenizer->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids_to_string(ids), ids_to_string(c.ids));
    encoded_ok += ids == c.ids;
    const std::string decoded = tokenizer->decode(c.ids);
    EXPECT_EQ(escape(decoded), escape(c.text));
    decoded_ok += decoded == c.text;
  }
  std::printf("[          ] %s (%s): %zu/%zu cases encode exactly, %zu/%zu decode back\n", vocab.name,
              tokenizer->kind().c_str(), encoded_ok, cases.size(), decoded_ok, cases.size());
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizer, TokenizerVocabTest,
    ::testing::Values(VocabUnderTest{"llama-spm", 46}, VocabUnderTest{"phi-3", 46},
                      VocabUnderTest{"gpt-2", 46}, VocabUnderTest{"starcoder", 46},
                      VocabUnderTest{"refact", 46}, VocabUnderTest{"mpt", 46},
                      VocabUnderTest{"falcon", 46}, VocabUnderTest{"deepseek-coder", 46},
                      VocabUnderTest{"deepseek-llm", 46}, VocabUnderTest{"dbrx", 43},
                      // An old conversion without tokenizer.ggml.pre. Its
                      // tokens, types and merges are identical to MPT's (both
                      // are GPT-NeoX-20B's), so MPT's cases apply.
                      VocabUnderTest{"gpt-neox", 46, "mpt"}),
    [](const ::testing::TestParamInfo<VocabUnderTest>& info) {
      std::string name = info.param.name;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

// ---------------------------------------------------------------------------
// Real models

TEST(TokenizerStories260K, EncodesWithBosAndRoundTrips) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  EXPECT_EQ(tokenizer->n_vocab(), 512);
  EXPECT_EQ(tokenizer->bos(), 1);
  EXPECT_EQ(tokenizer->eos(), 2);
  EXPECT_TRUE(tokenizer->add_bos());
  EXPECT_EQ(tokenizer->kind(), "llama (SentencePiece BPE)");

  const std::string text = "Once upon a time";
  const std::vector<int32_t> ids = tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tokenizer->decode(ids), text);  // the BOS gives no text, the prefix space goes
  const std::vector<int32_t> plain = tokenizer->encode(text, false, false);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), plain);
  EXPECT_EQ(tokenizer->decode(plain), text);

  EXPECT_TRUE(tokenizer->is_end_of_generation(2));
  EXPECT_FALSE(tokenizer->is_end_of_generation(1));
  EXPECT_EQ(tokenizer->token_bytes(1), "");  // control
  EXPECT_TRUE(tokenizer->encode("", false, false).empty());
  EXPECT_EQ(tokenizer->encode("", true, false), std::vector<int32_t>{1});
}

TEST(TokenizerStories260K, FallsBackToByteTokensForAnEmoji) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  const std::string text = "a \xF0\x9F\xA6\x99 b";  // "a 🦙 b"
  const std::vector<int32_t> ids = tokenizer->encode(text, false, false);
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += tokenizer->token_type(id) == TokenType::kByte;
  EXPECT_EQ(byte_tokens, 4);
  EXPECT_EQ(tokenizer->decode(ids), text);
}

TEST(TokenizerStories260K, RejectsIdsOutsideTheVocabulary) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  expect_error([&] { tokenizer->token_bytes(512); }, ErrorKind::kInvalidArgument, "512");
  expect_error([&] { tokenizer->decode({5, -1}); }, ErrorKind::kInvalidArgument, "-1");
}

TEST(TokenizerTinyStories, Loads) {
  const auto tokenizer = load_tokenizer("TinyStories-656K/TinyStories-656K-Q8_0.gguf");
  EXPECT_EQ(tokenizer->n_vocab(), 2048);
  EXPECT_EQ(tokenizer->bos(), 1);
  EXPECT_EQ(tokenizer->eos(), 2);
  EXPECT_TRUE(tokenizer->is_end_of_generation(2));
  const std::string text = "Once upon a time, there was a little girl.";
  const std::vector<int32_t> ids = tokenizer->encode(text, true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(tokenizer->decode(ids), text);
  // No byte tokens in this vocabulary: an unknown character becomes <unk>
  // instead of failing.
  const std::vector<int32_t> unknown = tokenizer->encode("\xF0\x9F\xA6\x99", false, false);
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), 0), unknown.end());
  // With parse_special, the story markers are control tokens.
  const std::vector<int32_t> marked = tokenizer->encode("<|start_story|>Once", false, true);
  ASSERT_FALSE(marked.empty());
  EXPECT_EQ(marked[0], 1);
  EXPECT_NE(tokenizer->encode("<|start_story|>Once", false, false)[0], 1);
}

// ---------------------------------------------------------------------------
// TextDecoder

TEST(TokenizerTextDecoder, HoldsBackAPartialCharacterUntilItsLastByte) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  const std::string emoji = "\xF0\x9F\xA6\x99";
  const std::vector<int32_t> ids = tokenizer->encode(emoji, false, false);
  // "▁" then four byte tokens.
  ASSERT_EQ(ids.size(), 5u);
  for (size_t i = 1; i < ids.size(); ++i) ASSERT_EQ(tokenizer->token_type(ids[i]), TokenType::kByte);

  TextDecoder decoder(*tokenizer);
  EXPECT_EQ(decoder.push(tokenizer->bos()), "");  // control: no text, still at the start
  EXPECT_EQ(decoder.push(ids[0]), "");             // the prefix space is dropped
  for (size_t i = 1; i + 1 < ids.size(); ++i) EXPECT_EQ(decoder.push(ids[i]), "") << i;
  EXPECT_EQ(decoder.push(ids.back()), emoji);
  EXPECT_EQ(decoder.flush(), "");
}

TEST(TokenizerTextDecoder, StreamsTheSameTextAsDecode) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  const std::string text = "Once upon a time \xF0\x9F\xA6\x99 there was a caf\xC3\xA9.";
  const std::vector<int32_t> ids = tokenizer->encode(text, true, false);
  TextDecoder decoder(*tokenizer);
  std::string streamed;
  for (int32_t id : ids) streamed += decoder.push(id);
  streamed += decoder.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(tokenizer->decode(ids), text);
}

TEST(TokenizerTextDecoder, FlushesAnIncompleteCharacterAsReplacement) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  const std::vector<int32_t> ids = tokenizer->encode("x\xF0\x9F\xA6\x99", false, false);
  ASSERT_GE(ids.size(), 3u);
  TextDecoder decoder(*tokenizer);
  std::string out;
  // Everything but the last two bytes of the emoji.
  for (size_t i = 0; i + 2 < ids.size(); ++i) out += decoder.push(ids[i]);
  EXPECT_EQ(out, "x");
  EXPECT_EQ(decoder.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(decoder.flush(), "");
}

TEST(TokenizerTextDecoder, ReplacesBytesThatCanNeverFormACharacter) {
  const auto tokenizer = load_tokenizer("stories260K.gguf");
  // A lone continuation byte, then a complete character.
  const std::vector<int32_t> ids = tokenizer->encode("\xA6" "a", false, false);
  TextDecoder decoder(*tokenizer);
  std::string out;
  for (int32_t id : ids) out += decoder.push(id);
  out += decoder.flush();
  EXPECT_EQ(out, "\xEF\xBF\xBD" "a");
}

TEST(TokenizerTextDecoder, KeepsLeadingSpaceForByteLevelBpe) {
  const auto tokenizer = load_vocab("gpt-2");
  const std::string text = " Hello \xF0\x9F\xA6\x99!";
  const std::vector<int32_t> ids = tokenizer->encode(text, false, false);
  TextDecoder decoder(*tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = decoder.push(id);
    // Whatever comes out is always whole characters.
    EXPECT_EQ(unicode::incomplete_utf8_tail(piece), 0u);
    streamed += piece;
  }
  EXPECT_EQ(streamed + decoder.flush(), text);
}

// ---------------------------------------------------------------------------
// Special tokens

TEST(TokenizerSpecialTokens, ControlTokensOnlyWithParseSpecial) {
  const auto tokenizer = load_vocab("gpt-2");
  const std::string text = "Hi<|endoftext|>there";
  const std::vector<int32_t> parsed = tokenizer->encode(text, false, true);
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), 50256), parsed.end());
  const std::vector<int32_t> plain = tokenizer->encode(text, false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 50256), plain.end());
  EXPECT_EQ(tokenizer->decode(plain), text);
  EXPECT_EQ(tokenizer->decode(parsed), "Hithere");  // control tokens give no text
  EXPECT_TRUE(tokenizer->is_end_of_generation(50256));
  EXPECT_FALSE(tokenizer->add_bos());  // gpt2 vocabularies add no BOS unless the key says so
}

TEST(TokenizerSpecialTokens, UserDefinedTokensAreAlwaysMatched) {
  // MPT (GPT-NeoX vocabulary) has user-defined tokens for runs of spaces.
  const auto tokenizer = load_vocab("mpt");
  const std::string text = "a     b";
  const std::vector<int32_t> ids = tokenizer->encode(text, false, false);
  bool has_user_defined = false;
  for (int32_t id : ids) has_user_defined |= tokenizer->token_type(id) == TokenType::kUserDefined;
  EXPECT_TRUE(has_user_defined) << ids_to_string(ids);
  EXPECT_EQ(tokenizer->decode(ids), text);
}

TEST(TokenizerSpecialTokens, Phi3SpecialTokensEatTheSpaceAfterThem) {
  const auto tokenizer = load_vocab("phi-3");
  const int32_t user = 32010;  // <|user|>
  ASSERT_EQ(tokenizer->token_text(user), "<|user|>");
  const std::vector<int32_t> ids = tokenizer->encode("<|user|>\nHello", true, true);
  const std::vector<int32_t> hello = tokenizer->encode("Hello", false, false);
  std::vector<int32_t> expected = {tokenizer->bos(), user};
  expected.insert(expected.end(), hello.begin(), hello.end());
  EXPECT_EQ(ids, expected);
  EXPECT_TRUE(tokenizer->is_end_of_generation(32007));  // <|end|>
  EXPECT_TRUE(tokenizer->is_end_of_generation(32000));  // <|endoftext|>, the EOS
}

// ---------------------------------------------------------------------------
// Robustness

TEST(TokenizerRobustness, InvalidUtf8NeitherCrashesNorLoses) {
  const std::string nasty[] = {
      std::string("\xFF\xFE abc \xC3", 8),
      std::string("\x80\x80\x80", 3),
      std::string("ab\xE2\x82", 4),
      std::string("\xED\xA0\x80 surrogate", 13),
      std::string("\xC0\xAF overlong \xF8\x88\x80\x80\x80", 16),
      std::string("nul\0inside", 10),
      std::string("\xF4\x90\x80\x80 beyond U+10FFFF", 20),
  };
  // Vocabularies that can spell every byte (SentencePiece byte fallback, or
  // all 256 byte-level symbols) must give the bytes back. The others cannot:
  // starcoder and falcon lack the symbols of bytes that never occur in valid
  // UTF-8 (0xC0, 0xFF, ...), and the deepseek vocabularies have user-defined
  // tokens "À", "ÿ", ... that share those symbols and decode as characters.
  const struct {
    const char* name;
    bool spells_every_byte;
  } vocabs[] = {{"gpt-2", true},           {"llama-spm", true}, {"dbrx", true},
                {"deepseek-llm", false},   {"deepseek-coder", false},
                {"falcon", false},         {"starcoder", false}};
  for (const auto& vocab : vocabs) {
    SCOPED_TRACE(vocab.name);
    const auto tokenizer = load_vocab(vocab.name);
    for (const std::string& text : nasty) {
      SCOPED_TRACE(escape(text));
      for (bool parse_special : {false, true}) {
        const std::vector<int32_t> ids = tokenizer->encode(text, true, parse_special);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer->n_vocab());
      }
      const std::string decoded = tokenizer->decode(tokenizer->encode(text, false, false));
      if (vocab.spells_every_byte) EXPECT_EQ(escape(decoded), escape(text));
    }
  }
}

TEST(TokenizerRobustness, RandomBytesRoundTrip) {
  // Random mixes of ASCII, spaces, multi-byte characters, stray bytes and
  // pieces of special-token texts; a fixed seed keeps failures reproducible.
  const std::vector<std::string> alphabet = {
      "a", "Z", "7", " ", "  ", "\n", "\t", "'s", "!", "<|endoftext|>", "<|", "</s>", "<s>", "\xC3\xA9",
      "\xE4\xB8\x80", "\xF0\x9F\xA6\x99", "\xE2\x96\x81", "\x80", "\xFF", "\xC3", "\xF0\x9F", "\0"};
  std::mt19937 random(12345);
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int parts = static_cast<int>(random() % 24);
    for (int j = 0; j < parts; ++j) text += alphabet[random() % alphabet.size()];
    texts.push_back(text);
  }
  for (const char* name : {"gpt-2", "llama-spm", "phi-3", "mpt", "deepseek-llm", "falcon"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = load_vocab(name);
    const bool spells_every_byte = std::string(name) == "gpt-2" || std::string(name) == "llama-spm" ||
                                   std::string(name) == "phi-3";
    for (const std::string& text : texts) {
      SCOPED_TRACE(escape(text));
      const std::vector<int32_t> special = tokenizer->encode(text, true, true);
      for (int32_t id : special) ASSERT_TRUE(id >= 0 && id < tokenizer->n_vocab());
      const std::vector<int32_t> ids = tokenizer->encode(text, false, false);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer->n_vocab());
      // The known loss: SentencePiece reads a literal "▁" as a space. (Phi-3's
      // "</s>", user-defined in the file, would eat the spaces after it, but
      // it is an end-of-turn text, hence a control token, plain text here.)
      const bool spm = tokenizer->strips_leading_space();
      const bool lossy = spm && text.find("\xE2\x96\x81") != std::string::npos;
      if (spells_every_byte && !lossy) EXPECT_EQ(escape(tokenizer->decode(ids)), escape(text));
      TextDecoder decoder(*tokenizer);
      std::string streamed;
      for (int32_t id : ids) streamed += decoder.push(id);
      streamed += decoder.flush();
      EXPECT_EQ(unicode::incomplete_utf8_tail(streamed), 0u);
    }
  }
}

// Long inputs and pathological runs (one long word, one long run of spaces,
// one of digits) come back whole. How fast they go is measured by
// `sipllm tokenize --timing`, not here: a test never asserts wall-clock time.
TEST(TokenizerLongText, PathologicalRunsRoundTrip) {
  const std::string sample = test::read_file(test::model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf.inp"));
  std::string text;
  while (text.size() < 200000) text += sample;
  text += std::string(20000, 'a') + std::string(20000, ' ') + std::string(20000, '7') + "\n";

  for (const char* name : {"gpt-2", "llama-spm", "deepseek-llm"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = load_vocab(name);
    const std::vector<int32_t> ids = tokenizer->encode(text, false, false);
    EXPECT_EQ(tokenizer->decode(ids), text);
    // With special-token parsing on, the same text has no special token in
    // it and so gives the same ids.
    EXPECT_EQ(tokenizer->encode(text, false, true), ids);
  }
}

// ---------------------------------------------------------------------------
// Metadata errors

TEST(TokenizerMetadata, TinyVocabularyWorks) {
  const TinySpmVocab vocab;
  const auto tokenizer = Tokenizer::from_gguf(parse(vocab.builder()));
  // "▁ab": of the candidate pairs "▁a" (score -0.5) and "ab" (-0.25), the
  // higher score merges first, leaving "▁" + "ab".
  EXPECT_EQ(tokenizer->encode("ab", false, false), (std::vector<int32_t>{3, 7}));
  EXPECT_EQ(tokenizer->encode("a", true, false), (std::vector<int32_t>{1, 6}));
  EXPECT_EQ(tokenizer->decode({1, 3, 7}), "ab");
}

TEST(TokenizerMetadata, UnknownModelIsUnsupported) {
  const TinySpmVocab vocab;
  expect_error([&] { Tokenizer::from_gguf(parse(vocab.builder("nonsense"))); }, ErrorKind::kUnsupported,
               "nonsense");
  expect_error([&] { Tokenizer::from_gguf(parse(vocab.builder("bert"))); }, ErrorKind::kUnsupported, "bert");
}

TEST(TokenizerMetadata, MissingModelKeyIsAFormatError) {
  GgufWriter b;
  b.set_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error([&] { Tokenizer::from_gguf(parse(b)); }, ErrorKind::kFormat, "tokenizer.ggml.model");
}

TEST(TokenizerMetadata, ScoresShorterThanTokens) {
  TinySpmVocab vocab;
  vocab.scores.pop_back();
  expect_error([&] { Tokenizer::from_gguf(parse(vocab.builder())); }, ErrorKind::kFormat,
               "tokenizer.ggml.scores");
}

TEST(TokenizerMetadata, MissingScores) {
  const TinySpmVocab vocab;
  GgufWriter b;
  b.set_string("tokenizer.ggml.model", "llama").set_string_array("tokenizer.ggml.tokens", vocab.tokens);
  expect_error([&] { Tokenizer::from_gguf(parse(b)); }, ErrorKind::kFormat, "tokenizer.ggml.scores");
}

TEST(TokenizerMetadata, MissingTokens) {
  GgufWriter b;
  b.set_string("tokenizer.ggml.model", "llama").set_float32_array("tokenizer.ggml.scores", {0.0f});
  expect_error([&] { Tokenizer::from_gguf(parse(b)); }, ErrorKind::kFormat, "tokenizer.ggml.tokens");
}

TEST(TokenizerMetadata, TokenTypeLengthMismatch) {
  TinySpmVocab vocab;
  vocab.types.push_back(1);
  expect_error([&] { Tokenizer::from_gguf(parse(vocab.builder())); }, ErrorKind::kFormat,
               "tokenizer.ggml.token_type");
}

TEST(TokenizerMetadata, SpecialIdOutOfRange) {
  const TinySpmVocab vocab;
  expect_error([&] { Tokenizer::from_gguf(parse(vocab.builder().set_uint32("tokenizer.ggml.eos_token_id", 8))); },
               ErrorKind::kFormat, "tokenizer.ggml.eos_token_id");
  expect_error([&] { Tokenizer::from_gguf(parse(vocab.builder().set_uint32("tokenizer.ggml.bos_token_id", 1000))); },
               ErrorKind::kFormat, "tokenizer.ggml.bos_token_id");
  // 0xFFFFFFFF is how converters write "no such token" (stories260K does).
  const auto tokenizer =
      Tokenizer::from_gguf(parse(vocab.builder().set_uint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu)));
  EXPECT_EQ(tokenizer->bos(), 1);
}

TEST(TokenizerMetadata, AddBosWithoutBos) {
  GgufWriter b;
  b.set_string("tokenizer.ggml.model", "gpt2")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .set_string_array("tokenizer.ggml.merges", {"a b"})
      .set_bool("tokenizer.ggml.add_bos_token", true);
  expect_error([&] { Tokenizer::from_gguf(parse(b)); }, ErrorKind::kFormat, "tokenizer.ggml.add_bos_token");
}

TEST(TokenizerMetadata, Gpt2NeedsMergesAndAKnownPreTokenizer) {
  GgufWriter no_merges;
  no_merges.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "gpt-2")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  expect_error([&] { Tokenizer::from_gguf(parse(no_merges)); }, ErrorKind::kFormat, "tokenizer.ggml.merges");

  GgufWriter odd_pre;
  odd_pre.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "made-up-pre")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab"})
      .set_string_array("tokenizer.ggml.merges", {"a b"});
  expect_error([&] { Tokenizer::from_gguf(parse(odd_pre)); }, ErrorKind::kUnsupported, "made-up-pre");

  GgufWriter good;
  good.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "gpt-2")
      .set_string_array("tokenizer.ggml.tokens", {"a", "b", "ab", "\xC4\xA0"})
      .set_string_array("tokenizer.ggml.merges", {"a b"});
  const auto tokenizer = Tokenizer::from_gguf(parse(good));
  EXPECT_EQ(tokenizer->encode("ab", true, false), (std::vector<int32_t>{2}));
  EXPECT_EQ(tokenizer->decode({2, 3, 0}), "ab a");
  EXPECT_EQ(tokenizer->kind(), "gpt2 (byte-level BPE, pre-tokenizer gpt-2)");
}

// ---------------------------------------------------------------------------
// Gemma 4's BPE (tokenizer.ggml.model = "gemma4"), on a vocabulary small
// enough to follow by hand. The expected ids are those of llama.cpp's
// algorithm (src/llama-vocab.cpp: llm_tokenizer_bpe_session::tokenize with
// LLAMA_VOCAB_PRE_TYPE_GEMMA4): spaces become "▁", the text splits into runs
// of newlines and runs of the rest, a run of newlines that is a token is
// taken whole, characters merge by the rank of their pair in the merge list
// (lowest first, leftmost on ties), and a piece that is no token falls back
// to its <0xXX> tokens.
struct TinyGemma4Vocab {
  std::vector<std::string> tokens = {
      "<pad>", "<eos>", "<bos>", "<unk>", "<0x0A>", "<0xC3>", "<0xA9>",  // 0-6
      "\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab",  // 7-12
      "ba", "\n", "\n\n", "aa", "\t", "<x>", "\xE2\x96\x81\xE2\x96\x81", "a\n"};  // 13-20
  std::vector<int32_t> types = {3, 3, 3, 2, 6, 6, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 1, 1};
  // No "b a" (though "ba" is a token) and no "\n \n" (though "\n\n" is).
  std::vector<std::string> merges = {"a b", "\xE2\x96\x81 a", "\xE2\x96\x81 ab", "a a",
                                     "\xE2\x96\x81 \xE2\x96\x81", "a \n"};

  GgufWriter builder() const {
    GgufWriter b;
    b.set_string("general.architecture", "gemma4").set_string("tokenizer.ggml.model", "gemma4");
    b.set_string_array("tokenizer.ggml.tokens", tokens).set_int32_array("tokenizer.ggml.token_type", types);
    b.set_string_array("tokenizer.ggml.merges", merges);
    b.set_uint32("tokenizer.ggml.bos_token_id", 2).set_uint32("tokenizer.ggml.eos_token_id", 1);
    b.set_uint32("tokenizer.ggml.unknown_token_id", 3);
    return b;
  }
};

TEST(TokenizerGemma4, MergesByRankOverCharacters) {
  const auto t = Tokenizer::from_gguf(parse(TinyGemma4Vocab().builder()));
  EXPECT_EQ(t->kind(), "gemma4 (BPE over UTF-8, spaces as U+2581)");
  using V = std::vector<int32_t>;
  EXPECT_EQ(t->encode("ab", false, false), (V{10}));
  // "▁ab": "a b" (rank 0) goes before "▁ a" (1), then "▁ ab" (2).
  EXPECT_EQ(t->encode(" ab", false, false), (V{12}));
  EXPECT_EQ(t->encode(" a", false, false), (V{11}));
  // No space in front of the text.
  EXPECT_EQ(t->encode("a", false, false), (V{8}));
  // Only listed pairs merge: "ba" is a token, but "b a" no merge (where
  // SentencePiece would join the two).
  EXPECT_EQ(t->encode("ba", false, false), (V{9, 8}));
  // Equal ranks: the leftmost pair first.
  EXPECT_EQ(t->encode("aaa", false, false), (V{16, 8}));
  EXPECT_EQ(t->encode("aab", false, false), (V{8, 10}));
  EXPECT_EQ(t->encode("  ", false, false), (V{19}));
  EXPECT_EQ(t->encode("   ", false, false), (V{19, 7}));
  // A literal "▁" is a space.
  EXPECT_EQ(t->encode("\xE2\x96\x81" "ab", false, false), (V{12}));
  EXPECT_EQ(t->encode("\t", false, false), (V{17}));
}

TEST(TokenizerGemma4, SplitsAtNewlines) {
  const auto t = Tokenizer::from_gguf(parse(TinyGemma4Vocab().builder()));
  using V = std::vector<int32_t>;
  // A run of newlines that is a token is that token, merges or not (llama.cpp's
  // fix for Gemma 4, its pull request 21343); one that is not merges as any
  // other text (here: no merge for it).
  EXPECT_EQ(t->encode("\n\n", false, false), (V{15}));
  EXPECT_EQ(t->encode("\n\n\n", false, false), (V{14, 14, 14}));
  // No merge crosses a newline, though "a \n" is one.
  EXPECT_EQ(t->encode("a\n", false, false), (V{8, 14}));
  EXPECT_EQ(t->encode(" ab\n\n ab", false, false), (V{12, 15, 12}));
}

TEST(TokenizerGemma4, FallsBackToByteTokens) {
  const auto t = Tokenizer::from_gguf(parse(TinyGemma4Vocab().builder()));
  using V = std::vector<int32_t>;
  EXPECT_EQ(t->encode("\xC3\xA9", false, false), (V{5, 6}));  // é
  EXPECT_EQ(t->decode({5, 6}), "\xC3\xA9");
  // Bytes that are no UTF-8 stay bytes (llama.cpp reads them as U+FFFD).
  EXPECT_EQ(t->encode("\xA9" "a\xC3", false, false), (V{6, 8, 5}));
  // A byte without a byte token: the unknown token (llama.cpp drops it).
  EXPECT_EQ(t->encode("xa", false, false), (V{3, 8}));
}

TEST(TokenizerGemma4, SpecialTokensAndBos) {
  const TinyGemma4Vocab vocab;
  const auto t = Tokenizer::from_gguf(parse(vocab.builder()));
  using V = std::vector<int32_t>;
  // BOS always, though the file does not ask for it.
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->encode("a", true, false), (V{2, 8}));
  const auto told_no = Tokenizer::from_gguf(parse(vocab.builder().set_bool("tokenizer.ggml.add_bos_token", false)));
  EXPECT_EQ(told_no->encode("a", true, false), (V{2, 8}));
  // User-defined tokens are always matched, control tokens with parse_special.
  EXPECT_EQ(t->encode("a<x>b", false, false), (V{8, 18, 9}));
  EXPECT_EQ(t->encode("<bos>a", false, true), (V{2, 8}));
  const std::vector<int32_t> plain = t->encode("<bos>", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 2), plain.end());
  EXPECT_TRUE(t->is_end_of_generation(1));
}

TEST(TokenizerGemma4, DecodesSpacesAndKeepsTheFirst) {
  const TinyGemma4Vocab vocab;
  const auto t = Tokenizer::from_gguf(parse(vocab.builder()));
  EXPECT_FALSE(t->strips_leading_space());
  EXPECT_EQ(t->decode({2, 11, 12, 18, 19, 15}), " a ab<x>  \n\n");
  EXPECT_EQ(t->token_bytes(2), "");
  EXPECT_EQ(t->token_bytes(4), "\n");
  TextDecoder decoder(*t);
  std::string streamed;
  for (int32_t id : {2, 11, 5, 6}) streamed += decoder.push(id);
  EXPECT_EQ(streamed + decoder.flush(), " a\xC3\xA9");
  // With tokenizer.ggml.add_space_prefix, llama.cpp drops the first space
  // when decoding (and still adds none when encoding).
  const auto prefixed =
      Tokenizer::from_gguf(parse(vocab.builder().set_bool("tokenizer.ggml.add_space_prefix", true)));
  EXPECT_TRUE(prefixed->strips_leading_space());
  EXPECT_EQ(prefixed->encode("a", false, false), (std::vector<int32_t>{8}));
  EXPECT_EQ(prefixed->decode({2, 11, 12}), "a ab");
}

TEST(TokenizerGemma4, MetadataErrorsNameTheKey) {
  const TinyGemma4Vocab vocab;
  GgufWriter no_bos = vocab.builder();
  no_bos.remove("tokenizer.ggml.bos_token_id");
  expect_error([&] { Tokenizer::from_gguf(parse(no_bos)); }, ErrorKind::kFormat, "tokenizer.ggml.bos_token_id");
  expect_error(
      [&] { Tokenizer::from_gguf(parse(vocab.builder().set_uint32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu))); },
      ErrorKind::kFormat, "tokenizer.ggml.bos_token_id");
  GgufWriter no_merges = vocab.builder();
  no_merges.remove("tokenizer.ggml.merges");
  expect_error([&] { Tokenizer::from_gguf(parse(no_merges)); }, ErrorKind::kFormat, "tokenizer.ggml.merges");
  expect_error(
      [&] { Tokenizer::from_gguf(parse(vocab.builder().set_float32_array("tokenizer.ggml.merges", {1.0f}))); },
      ErrorKind::kFormat, "tokenizer.ggml.merges");
  // Merge lines that can never match (no separator, an empty side, texts no
  // token has) are harmless, as in llama.cpp.
  TinyGemma4Vocab odd;
  odd.merges.insert(odd.merges.begin(), {"ab", "a ", " a", "q r", "a  b"});
  const auto t = Tokenizer::from_gguf(parse(odd.builder()));
  EXPECT_EQ(t->encode(" ab", false, false), (std::vector<int32_t>{12}));
}

// ---------------------------------------------------------------------------
// Unicode helpers

TEST(TokenizerUnicode, Categories) {
  using unicode::Category;
  EXPECT_EQ(unicode::category('a'), Category::kLetter);
  EXPECT_EQ(unicode::category('7'), Category::kNumber);
  EXPECT_EQ(unicode::category('!'), Category::kPunctuation);
  EXPECT_EQ(unicode::category('$'), Category::kSymbol);
  EXPECT_EQ(unicode::category(' '), Category::kSeparator);
  EXPECT_EQ(unicode::category('\n'), Category::kControl);
  EXPECT_EQ(unicode::category(0x00E9), Category::kLetter);     // é
  EXPECT_EQ(unicode::category(0x0301), Category::kMark);       // combining acute
  EXPECT_EQ(unicode::category(0x00BD), Category::kNumber);     // ½
  EXPECT_EQ(unicode::category(0x4E00), Category::kLetter);     // 一
  EXPECT_EQ(unicode::category(0x1F999), Category::kSymbol);    // 🦙
  EXPECT_EQ(unicode::category(0x3002), Category::kPunctuation);  // 。
  EXPECT_EQ(unicode::category(0x0378), Category::kUndefined);  // unassigned
  EXPECT_EQ(unicode::category(0x10FFFF), Category::kUndefined);
  EXPECT_EQ(unicode::category(0x110000), Category::kUndefined);
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_TRUE(unicode::is_whitespace('\t'));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));
}

TEST(TokenizerUnicode, ByteLevelAlphabetIsABijection) {
  std::vector<bool> seen(0x200, false);
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = unicode::byte_to_code_point(static_cast<uint8_t>(b));
    ASSERT_LT(cp, 0x200u);
    EXPECT_FALSE(seen[cp]);
    seen[cp] = true;
    EXPECT_EQ(unicode::code_point_to_byte(cp), b);
  }
  EXPECT_EQ(unicode::byte_to_code_point(' '), 0x120u);  // "Ġ"
  EXPECT_EQ(unicode::byte_to_code_point('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(unicode::code_point_to_byte(0x144), -1);
}

TEST(TokenizerUnicode, DecodesAndEncodesUtf8) {
  uint32_t cp = 0;
  EXPECT_EQ(unicode::decode_utf8("\xF0\x9F\xA6\x99", 0, &cp), 4u);
  EXPECT_EQ(cp, 0x1F999u);
  EXPECT_EQ(unicode::decode_utf8("\xE2\x82", 0, &cp), 1u);  // truncated
  EXPECT_EQ(cp, unicode::kReplacementCharacter);
  EXPECT_EQ(unicode::decode_utf8("\xC0\xAF", 0, &cp), 1u);  // overlong
  EXPECT_EQ(unicode::decode_utf8("\xED\xA0\x80", 0, &cp), 1u);  // surrogate
  std::string out;
  unicode::append_utf8(0x1F999, &out);
  unicode::append_utf8(0xE9, &out);
  EXPECT_EQ(out, "\xF0\x9F\xA6\x99\xC3\xA9");
  EXPECT_EQ(unicode::incomplete_utf8_tail("ab\xF0\x9F"), 2u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("ab\xF0\x9F\xA6\x99"), 0u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("\x9F"), 0u);
}

std::vector<std::string> pieces(unicode::PreTokenizer kind, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view piece : unicode::pre_tokenize(kind, text)) out.emplace_back(piece);
  return out;
}

TEST(TokenizerUnicode, PreTokenizerSplits) {
  using unicode::PreTokenizer;
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(PreTokenizer::kGpt2, "Hello, y'all!  How  are 123"),
            (V{"Hello", ",", " y", "'", "all", "!", " ", " How", " ", " are", " 123"}));
  EXPECT_EQ(pieces(PreTokenizer::kLlama3, "I'VE 12345 \n\n  x"),
            (V{"I", "'VE", " ", "123", "45", " \n\n", " ", " x"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, "a123"), (V{"a", "1", "2", "3"}));
  EXPECT_EQ(pieces(PreTokenizer::kStarcoder, "x 42"), (V{"x", " ", "4", "2"}));
  EXPECT_EQ(pieces(PreTokenizer::kFalcon, "a 12345"), (V{"a", " ", "123", "45"}));
  EXPECT_EQ(pieces(PreTokenizer::kDeepseekCoder, "ab\ncd 12"), (V{"ab", "\n", "cd", " ", "1", "2"}));
  EXPECT_EQ(pieces(PreTokenizer::kDeepseekLlm, "Hi there  "), (V{"Hi", " there", "  "}));
  EXPECT_EQ(pieces(PreTokenizer::kDefault, "a+=12345!"), (V{"a", "+=", "123", "45", "!"}));
  EXPECT_TRUE(unicode::pre_tokenize(PreTokenizer::kGpt2, "").empty());
}

// Qwen3.5's pattern keeps combining marks (\p{M}) in the letter runs, where
// Qwen2's leaves them to the runs of other characters. The expected pieces
// are what the two regexes of llama.cpp's llama-vocab.cpp give in V8 (\s
// spelled out as Unicode's White_Space), checked by hand.
TEST(TokenizerUnicode, Qwen35MarksJoinLetters) {
  using unicode::PreTokenizer;
  using V = std::vector<std::string>;
  const std::string acute = "\xCC\x81";  // U+0301, combining acute accent
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "cafe" + acute + " au lait"), (V{"cafe" + acute, " au", " lait"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, "cafe" + acute + " au lait"), (V{"cafe", acute, " au", " lait"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "re" + acute + "sume" + acute + "!"), (V{"re" + acute + "sume" + acute, "!"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, "re" + acute + "sume" + acute + "!"), (V{"re", acute + "sume", acute + "!"}));
  // A space (or any character but \r, \n, a letter or a number) before a
  // mark opens a word with it.
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, " " + acute + "x"), (V{" " + acute + "x"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, " " + acute + "x"), (V{" " + acute, "x"}));
  // Marks leave the runs of other characters, and stand alone after them.
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "!!" + acute), (V{"!!", acute}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, "!!" + acute), (V{"!!" + acute}));
  // Khmer "ខ្មែរ": consonant, coeng (Mn), consonant, vowel sign (Mc), consonant.
  const std::string khmer = "\xE1\x9E\x81\xE1\x9F\x92\xE1\x9E\x98\xE1\x9F\x82\xE1\x9E\x9A";
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, khmer), (V{khmer}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, khmer), (V{"\xE1\x9E\x81", "\xE1\x9F\x92\xE1\x9E\x98", "\xE1\x9F\x82\xE1\x9E\x9A"}));
  // Numbers, line breaks and spaces split as in Qwen2's pattern.
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "1" + acute), (V{"1", acute}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "\n" + acute + "a"), (V{"\n", acute + "a"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "x " + acute + acute + " y"), (V{"x", " " + acute + acute, " y"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen35, "I'VE 12 \n\n  x"), (V{"I", "'VE", " ", "1", "2", " \n\n", " ", " x"}));
}

}  // namespace
}  // namespace sipllm
