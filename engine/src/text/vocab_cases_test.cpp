// The vocabularies of current model families (tests/fixtures/vocab/: Qwen3,
// Qwen3.5, Llama 3, Gemma 3, and Gemma 3's tokens in Gemma 4's form,
// vocabulary-only GGUFs) against llama.cpp: its token ids for every test
// case, its end-of-generation tokens, its special-token partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "sipllm/weight_source.h"
#include "test_support.h"
#include "text/tokenizer.h"
#include "vocab_cases.h"

namespace sipllm {
namespace {

using test::escape;
using test::ids_to_string;

std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto source = open_file_source(test::vocab_fixture_path(name));
  return Tokenizer::from_gguf(GgufFile::parse(*source));
}

// The vocabulary `name` with tokenizer.ggml.pre set to `pre`, without the key
// `drop` (if given), everything else as it is.
std::unique_ptr<Tokenizer> load_with_pre_tokenizer(const std::string& name, const std::string& pre,
                                                   const std::string& drop = "") {
  auto source = open_file_source(test::vocab_fixture_path(name));
  const GgufFile file = GgufFile::parse(*source);
  GgufWriter writer;
  for (const auto& [key, value] : file.metadata()) {
    if (key != drop) writer.set_value(key, value);
  }
  writer.set_string("tokenizer.ggml.pre", pre);
  auto copy = make_memory_source(writer.to_bytes());
  return Tokenizer::from_gguf(GgufFile::parse(*copy));
}

// SentencePiece writes a space as U+2581. A literal U+2581 in the text is
// therefore read as a space, and decodes as one: that is the one place where
// decode(encode(s)) != s, in llama.cpp as here. (A user-defined token is
// matched and decoded verbatim, so one holding U+2581 would keep it; Gemma 3
// has none.)
std::string spaces_for_markers(std::string text) {
  const std::string marker = "\xE2\x96\x81";
  for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
    text.replace(at, marker.size(), " ");
  }
  return text;
}

// Whether the tokenizer writes spaces as U+2581 (SentencePiece, and Gemma 4's
// BPE over UTF-8).
bool spaces_as_markers(const Tokenizer& tokenizer) {
  return tokenizer.kind().rfind("llama", 0) == 0 || tokenizer.kind().find("U+2581") != std::string::npos;
}

// What decode(encode(s, no specials)) gives back for `s`.
std::string expected_round_trip(const Tokenizer& tokenizer, const std::string& text) {
  return spaces_as_markers(tokenizer) ? spaces_for_markers(text) : text;
}

// ---------------------------------------------------------------------------
// llama.cpp's ids for every case

struct CaseFile {
  const char* vocab;  // tests/fixtures/vocab/ggml-vocab-<vocab>.gguf.tar.xz
  const char* cases;  // .inp/.out under tests/fixtures
  size_t count;
};

void PrintTo(const CaseFile& file, std::ostream* os) { *os << file.vocab << " with " << file.cases; }

class VocabCasesTest : public ::testing::TestWithParam<CaseFile> {};

TEST_P(VocabCasesTest, EveryCaseEncodesAsLlamaCppAndDecodesBack) {
  const CaseFile& file = GetParam();
  const std::unique_ptr<Tokenizer> tokenizer = load(file.vocab);
  const std::string base = test::fixture_path(file.cases);
  const std::vector<test::VocabCase> cases = test::read_vocab_cases(base + ".inp", base + ".out");
  ASSERT_EQ(cases.size(), file.count);

  size_t encoded_ok = 0;
  size_t decoded_ok = 0;
  size_t exact_round_trips = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const test::VocabCase& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i) + ": '" + escape(c.text) + "'");
    const std::vector<int32_t> ids = tokenizer->encode(c.text, /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(ids_to_string(ids), ids_to_string(c.ids));
    encoded_ok += ids == c.ids;
    const std::string decoded = tokenizer->decode(c.ids);
    EXPECT_EQ(escape(decoded), escape(expected_round_trip(*tokenizer, c.text)));
    decoded_ok += decoded == expected_round_trip(*tokenizer, c.text);
    exact_round_trips += decoded == c.text;
  }
  std::printf("[          ] %s (%s) on %s: %zu/%zu cases encode exactly, %zu/%zu decode back "
              "(%zu exactly, the rest with U+2581 as a space)\n",
              file.vocab, tokenizer->kind().c_str(), file.cases, encoded_ok, cases.size(), decoded_ok,
              cases.size(), exact_round_trips);
}

INSTANTIATE_TEST_SUITE_P(
    Vocab, VocabCasesTest,
    ::testing::Values(CaseFile{"qwen3", "vocab/ggml-vocab-qwen3.gguf", 46},
                      // Qwen3's byte-level tokens and merges are Qwen2's, so
                      // llama.cpp's own Qwen2 cases hold for it; likewise its
                      // llama-bpe cases for Llama 3.
                      CaseFile{"qwen3", "llama.cpp-vocab/ggml-vocab-qwen2.gguf", 46},
                      CaseFile{"llama3", "vocab/ggml-vocab-llama3.gguf", 46},
                      CaseFile{"llama3", "llama.cpp-vocab/ggml-vocab-llama-bpe.gguf", 46},
                      CaseFile{"gemma3", "vocab/ggml-vocab-gemma3.gguf", 64},
                      // llama.cpp's Qwen3.5 cases (50: the file ends with a
                      // separator, after which llama.cpp reads no case) on
                      // its Qwen3.5 test vocabulary, Qwen3's with the qwen35
                      // pre-tokenizer (made by the build), and on Qwen3's
                      // itself: llama.cpp gives the same ids with either, so
                      // these cases do not tell the two splits apart (see
                      // Qwen35PreTokenizerChangesTheIds).
                      CaseFile{"qwen35", "vocab/ggml-vocab-qwen35.gguf", 50},
                      CaseFile{"qwen3", "vocab/ggml-vocab-qwen35.gguf", 50},
                      // llama.cpp's Gemma 4 cases: the Gemma 3 vocabulary
                      // gives all of them in llama.cpp, and so does its
                      // tokens in Gemma 4's form (BPE merges,
                      // tokenizer.ggml.model "gemma4", made by the build),
                      // which runs them through the gemma4 tokenizer.
                      CaseFile{"gemma3", "vocab/ggml-vocab-gemma-4.cases", 46},
                      CaseFile{"gemma4", "vocab/ggml-vocab-gemma-4.cases", 46}),
    [](const ::testing::TestParamInfo<CaseFile>& info) {
      std::string name = std::string(info.param.vocab) + "_" + info.param.cases;
      name = name.substr(0, name.find(".gguf"));
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(VocabRoundTrip, RandomTextDecodesBackExceptSentencePieceMarkers) {
  // Pieces of text that stress the tokenizers: special-token texts (plain
  // text here), U+2581, invalid UTF-8, whitespace runs, scripts and emoji.
  const std::vector<std::string> alphabet = {
      "a", "Z", "7", "42", " ", "  ", "\n", "\n\n", "\t", "'s", "'LL", "!", "...", "<|im_end|>", "<|eot_id|>",
      "<end_of_turn>", "</s>", "<think>", "<|", "\xE2\x96\x81", "\xC3\xA9", "\xE4\xB8\x80", "\xF0\x9F\xA6\x99",
      "\xD8\xB9", "\x80", "\xFF", "\xC3", "\xEF\xBB\xBF", std::string(1, '\0'), "Hello", " world",
      "\xCC\x81", "\xE1\x9F\x92", "<turn|>", "<|tool_response>"};
  std::mt19937 random(2026);
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int parts = static_cast<int>(random() % 30);
    for (int j = 0; j < parts; ++j) text += alphabet[random() % alphabet.size()];
    texts.push_back(text);
  }
  for (const char* name : {"qwen3", "qwen35", "llama3", "gemma3", "gemma4"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = load(name);
    for (const std::string& text : texts) {
      SCOPED_TRACE(escape(text));
      const std::vector<int32_t> ids = tokenizer->encode(text, false, false);
      EXPECT_EQ(escape(tokenizer->decode(ids)), escape(expected_round_trip(*tokenizer, text)));
    }
  }
}

// ---------------------------------------------------------------------------
// Pre-tokenizers

TEST(VocabPreTokenizer, Qwen35PreTokenizerChangesTheIds) {
  // The same tokens and merges, split by Qwen3.5's pattern (combining marks
  // stay in their words) and by Qwen2's (a mark goes with what follows it, or
  // with the punctuation). The split shows in the ids where a merge joins a
  // letter with a mark, as in Thai; not in decomposed Latin ("e" + U+0301),
  // where no merge joins a letter with the mark's bytes. (The splits
  // themselves: TokenizerUnicode.Qwen35MarksJoinLetters.)
  const auto qwen35 = load("qwen35");
  const auto qwen3 = load("qwen3");
  EXPECT_EQ(qwen35->kind(), "gpt2 (byte-level BPE, pre-tokenizer qwen35)");
  EXPECT_EQ(qwen35->n_vocab(), qwen3->n_vocab());
  const std::string thai = "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA\xE0\xB8\x94\xE0\xB8\xB5";  // สวัสดี
  const std::string latin = "re\xCC\x81sume\xCC\x81!";
  for (const std::string& text : {thai, latin}) {
    SCOPED_TRACE(escape(text));
    EXPECT_EQ(qwen35->decode(qwen35->encode(text, false, false)), text);
  }
  EXPECT_NE(qwen35->encode(thai, false, false), qwen3->encode(thai, false, false));
  EXPECT_EQ(qwen35->encode(latin, false, false), qwen3->encode(latin, false, false));
  EXPECT_EQ(qwen35->encode("Hello, y'all! 123", false, false), qwen3->encode("Hello, y'all! 123", false, false));
}

TEST(VocabPreTokenizer, Lfm2IsLlama3s) {
  // LFM2 and LFM2.5 GGUFs name their pre-tokenizer "lfm2", which llama.cpp
  // treats as llama-bpe (the Llama 3 pattern, whole-word tokens taken as
  // they are, BOS by default). On the Llama 3 vocabulary it gives llama.cpp's
  // llama-bpe ids.
  const auto lfm2 = load_with_pre_tokenizer("llama3", "lfm2");
  EXPECT_EQ(lfm2->kind(), "gpt2 (byte-level BPE, pre-tokenizer lfm2)");
  const std::string base = test::fixture_path("llama.cpp-vocab/ggml-vocab-llama-bpe.gguf");
  const std::vector<test::VocabCase> cases = test::read_vocab_cases(base + ".inp", base + ".out");
  ASSERT_EQ(cases.size(), 46u);
  for (const test::VocabCase& c : cases) {
    EXPECT_EQ(ids_to_string(lfm2->encode(c.text, false, false)), ids_to_string(c.ids)) << escape(c.text);
  }
  // BOS by default.
  EXPECT_TRUE(load_with_pre_tokenizer("llama3", "lfm2", "tokenizer.ggml.add_bos_token")->add_bos());
  EXPECT_FALSE(load_with_pre_tokenizer("llama3", "qwen2", "tokenizer.ggml.add_bos_token")->add_bos());
  // An unknown name is still refused.
  EXPECT_THROW(load_with_pre_tokenizer("llama3", "lfm3"), Error);
}

// ---------------------------------------------------------------------------
// Gemma 4's form: tokenizer.ggml.model "gemma4"

// The vocabulary `name` with its metadata changed by `change`.
std::unique_ptr<Tokenizer> load_changed(const std::string& name, const std::function<void(GgufWriter&)>& change) {
  auto source = open_file_source(test::vocab_fixture_path(name));
  const GgufFile file = GgufFile::parse(*source);
  GgufWriter writer;
  for (const auto& [key, value] : file.metadata()) writer.set_value(key, value);
  change(writer);
  auto copy = make_memory_source(writer.to_bytes());
  return Tokenizer::from_gguf(GgufFile::parse(*copy));
}

TEST(VocabGemma4, IsGemma4sTokenizer) {
  const auto gemma4 = load("gemma4");
  EXPECT_EQ(gemma4->kind(), "gemma4 (BPE over UTF-8, spaces as U+2581)");
  EXPECT_EQ(gemma4->n_vocab(), 262144);
  EXPECT_EQ(gemma4->bos(), 2);
  EXPECT_EQ(gemma4->eos(), 106);
  EXPECT_TRUE(gemma4->add_bos());
  EXPECT_FALSE(gemma4->add_eos());
  // No space goes in front of a text, and none is taken off when decoding.
  EXPECT_FALSE(gemma4->strips_leading_space());
  EXPECT_EQ(gemma4->encode("Hello", true, false), (std::vector<int32_t>{2, 9259}));
  EXPECT_EQ(gemma4->encode(" Hello", false, false), (std::vector<int32_t>{26352}));
  EXPECT_EQ(gemma4->token_text(26352), "\xE2\x96\x81" "Hello");
  EXPECT_EQ(gemma4->token_bytes(26352), " Hello");
  EXPECT_EQ(gemma4->decode({2, 26352}), " Hello");
  // Byte fallback: U+1F999 is no token; its four <0xXX> tokens are.
  const std::vector<int32_t> llama = gemma4->encode("\xF0\x9F\xA6\x99", false, false);
  EXPECT_EQ(llama, (std::vector<int32_t>{238 + 0xF0, 238 + 0x9F, 238 + 0xA6, 238 + 0x99}));
  EXPECT_EQ(gemma4->decode(llama), "\xF0\x9F\xA6\x99");
  // Special tokens with parse_special, plain text without.
  EXPECT_EQ(gemma4->encode("<start_of_turn>user\n", false, true), (std::vector<int32_t>{105, 2364, 107}));
  const std::vector<int32_t> plain = gemma4->encode("<start_of_turn>", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 105), plain.end()) << ids_to_string(plain);
  EXPECT_EQ(gemma4->decode(plain), "<start_of_turn>");
}

TEST(VocabGemma4, Gemma3sCasesButTwoThatDifferByDesign) {
  // Gemma 3's own cases through the gemma4 tokenizer give llama.cpp's
  // SentencePiece ids, except where the two forms differ:
  //  - #51 "He▁llo▁ World": SentencePiece's user-defined "▁▁" is two spaces
  //    in Gemma 3's file (llama.cpp's converter writes it so), which "▁ "
  //    does not match; here text and token both hold U+2581, and "▁ "
  //    becomes "▁▁" as in SentencePiece and Hugging Face's tokenizer.
  //  - #59 "[multimodal] is ...": a user-defined token in Gemma 3's file,
  //    matched anywhere; an ordinary token in Gemma 4's form, and no merge
  //    makes it, so the text is spelled by other tokens.
  const auto gemma4 = load("gemma4");
  const std::string base = test::fixture_path("vocab/ggml-vocab-gemma3.gguf");
  const std::vector<test::VocabCase> cases = test::read_vocab_cases(base + ".inp", base + ".out");
  ASSERT_EQ(cases.size(), 64u);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": '" + escape(cases[i].text) + "'");
    const std::vector<int32_t> ids = gemma4->encode(cases[i].text, false, false);
    if (i == 51) {
      EXPECT_EQ(ids_to_string(ids), "2209 537 844 138 14447");
    } else if (i == 59) {
      EXPECT_NE(ids, cases[i].ids);
      EXPECT_EQ(std::find(ids.begin(), ids.end(), 5), ids.end());
    } else {
      EXPECT_EQ(ids_to_string(ids), ids_to_string(cases[i].ids));
    }
  }
}

TEST(VocabGemma4, SameIdsAsSentencePieceOnOrdinaryText) {
  // Gemma 4's merges are Gemma 3's SentencePiece pieces and scores turned
  // into a merge list, so both give the same ids for text without U+2581
  // (see above) or the markup of the Gemma 3 file's user-defined tokens
  // ("<b>", "[multimodal]").
  const std::vector<std::string> alphabet = {
      "a", "Z", "7", "42", "333", " ", "  ", "   ", "\n", "\n\n", "\t", "\t\t", "'s", "!", "...", "Hello", " world",
      "\xC3\xA9", "\xE4\xB8\x80", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\xA6\x99", "\xF0\x9F\x98\x80", "\xD8\xB9",
      "\xCC\x81", "\xE1\x9F\x92", "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1", "\xD0\xBF\xD1\x80\xD0\xB8", "the", "ing",
      " un", "tion", "://", "\r\n", "{", "}", "(", ")", "\xEF\xBB\xBF", std::string(1, '\0'), "\x7F"};
  std::mt19937 random(4);
  const auto gemma3 = load("gemma3");
  const auto gemma4 = load("gemma4");
  for (int i = 0; i < 400; ++i) {
    std::string text;
    const int parts = static_cast<int>(random() % 40);
    for (int j = 0; j < parts; ++j) text += alphabet[random() % alphabet.size()];
    SCOPED_TRACE(escape(text));
    EXPECT_EQ(ids_to_string(gemma4->encode(text, false, false)), ids_to_string(gemma3->encode(text, false, false)));
  }
}

TEST(VocabGemma4, AlwaysStartsWithBos) {
  // llama.cpp turns tokenizer.ggml.add_bos_token on for Gemma 4 whatever the
  // file says, so a file must name its BOS.
  const auto off = load_changed("gemma4", [](GgufWriter& w) { w.set_bool("tokenizer.ggml.add_bos_token", false); });
  EXPECT_TRUE(off->add_bos());
  EXPECT_EQ(off->encode("Hi", true, false).front(), 2);
  const auto missing = [] {
    load_changed("gemma4", [](GgufWriter& w) { w.remove("tokenizer.ggml.bos_token_id"); });
  };
  EXPECT_THROW(missing(), Error);
  try {
    missing();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.bos_token_id"), std::string::npos) << e.what();
  }
}

TEST(VocabGemma4, BrokenMetadataNamesItsKey) {
  const struct {
    const char* what;
    std::function<void(GgufWriter&)> change;
    ErrorKind kind;
    const char* key;
  } broken[] = {
      {"no merges", [](GgufWriter& w) { w.remove("tokenizer.ggml.merges"); }, ErrorKind::kFormat,
       "tokenizer.ggml.merges"},
      {"merges of numbers", [](GgufWriter& w) { w.set_int32_array("tokenizer.ggml.merges", {1, 2}); },
       ErrorKind::kFormat, "tokenizer.ggml.merges"},
      {"no tokens", [](GgufWriter& w) { w.remove("tokenizer.ggml.tokens"); }, ErrorKind::kFormat,
       "tokenizer.ggml.tokens"},
      {"token types of another length", [](GgufWriter& w) { w.set_int32_array("tokenizer.ggml.token_type", {1}); },
       ErrorKind::kFormat, "tokenizer.ggml.token_type"},
      {"EOS out of range", [](GgufWriter& w) { w.set_uint32("tokenizer.ggml.eos_token_id", 262144); },
       ErrorKind::kFormat, "tokenizer.ggml.eos_token_id"},
      {"a space prefix flag of text", [](GgufWriter& w) { w.set_string("tokenizer.ggml.add_space_prefix", "yes"); },
       ErrorKind::kFormat, "tokenizer.ggml.add_space_prefix"},
      {"an unknown model", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "gemma5"); },
       ErrorKind::kUnsupported, "tokenizer.ggml.model"},
  };
  for (const auto& b : broken) {
    SCOPED_TRACE(b.what);
    try {
      load_changed("gemma4", b.change);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), b.kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(b.key), std::string::npos) << e.what();
    }
  }
  // llama.cpp ignores tokenizer.ggml.pre for this model, and so does this.
  const auto odd_pre = load_changed("gemma4", [](GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "qwen2"); });
  EXPECT_EQ(odd_pre->encode(" Hello", false, false), (std::vector<int32_t>{26352}));
}

TEST(VocabGemma4, Gpt2WithTheGemma4PreTokenizerIsTheSame) {
  // llama.cpp runs a "gpt2" vocabulary whose pre-tokenizer is "gemma4" (or
  // "granite-embed-multi-311m", its converter's name for Gemma 3's
  // tokenizer.json) through the same code.
  const auto gemma4 = load("gemma4");
  for (const char* pre : {"gemma4", "granite-embed-multi-311m"}) {
    SCOPED_TRACE(pre);
    const auto gpt2 = load_changed("gemma4", [&](GgufWriter& w) {
      w.set_string("tokenizer.ggml.model", "gpt2");
      w.set_string("tokenizer.ggml.pre", pre);
    });
    EXPECT_EQ(gpt2->kind(), std::string("gpt2 (BPE over UTF-8, spaces as U+2581, pre-tokenizer ") + pre + ")");
    const std::string text = " Hello, y'all!\n\n\tI've 33 \xF0\x9F\xA6\x99 \xE4\xB8\xAD\xE6\x96\x87  ";
    EXPECT_EQ(gpt2->encode(text, true, false), gemma4->encode(text, true, false));
  }
}

// ---------------------------------------------------------------------------
// End of generation

struct EndOfGeneration {
  const char* vocab;
  std::vector<std::pair<int32_t, std::string>> tokens;  // id, text
};

TEST(VocabEndOfGeneration, TheTokensLlamaCppStopsOn) {
  // llama.cpp's loader: the EOS (and EOT, EOM) ids of the metadata, the FIM
  // pad/repo/separator tokens, and every token whose text is one of its
  // end-of-turn markers. Qwen3's "</s>" is an ordinary token of its byte-level
  // vocabulary (128247), but the text is on llama.cpp's list (for PaddleOCR),
  // so it stops generation there too; Gemma 3's "<eos>" is on the list (for
  // Gemma 4) besides its EOS "<end_of_turn>".
  const EndOfGeneration expected[] = {
      {"qwen3",
       {{128247, "</s>"},
        {151643, "<|endoftext|>"},
        {151645, "<|im_end|>"},
        {151662, "<|fim_pad|>"},
        {151663, "<|repo_name|>"},
        {151664, "<|file_sep|>"}}},
      {"qwen35",
       {{128247, "</s>"},
        {151643, "<|endoftext|>"},
        {151645, "<|im_end|>"},
        {151662, "<|fim_pad|>"},
        {151663, "<|repo_name|>"},
        {151664, "<|file_sep|>"}}},
      {"llama3", {{128001, "<|end_of_text|>"}, {128009, "<|eot_id|>"}}},
      {"gemma3", {{1, "<eos>"}, {106, "<end_of_turn>"}, {212, "</s>"}}},
      // The same in Gemma 4's form, where "</s>" is a normal token in the
      // file (as the whole Gemma 3 file's user-defined tokens are).
      {"gemma4", {{1, "<eos>"}, {106, "<end_of_turn>"}, {212, "</s>"}}},
  };
  for (const EndOfGeneration& vocab : expected) {
    SCOPED_TRACE(vocab.vocab);
    const auto tokenizer = load(vocab.vocab);
    std::vector<int32_t> ids;
    for (const auto& [id, text] : vocab.tokens) {
      ids.push_back(id);
      EXPECT_EQ(tokenizer->token_text(id), text);
      EXPECT_TRUE(tokenizer->is_end_of_generation(id)) << text;
      // Made control tokens: no text of their own, and plain text never
      // produces them.
      EXPECT_EQ(tokenizer->token_type(id), TokenType::kControl) << text;
      EXPECT_EQ(tokenizer->token_bytes(id), "") << text;
    }
    EXPECT_EQ(tokenizer->end_of_generation_tokens(), ids);
    EXPECT_TRUE(tokenizer->is_end_of_generation(tokenizer->eos()));
    // Qwen3's BOS is "<|endoftext|>", an end; the others' is none.
    EXPECT_EQ(tokenizer->is_end_of_generation(tokenizer->bos()), std::string(vocab.vocab).rfind("qwen3", 0) == 0);
    EXPECT_FALSE(tokenizer->is_end_of_generation(-1));
    EXPECT_FALSE(tokenizer->is_end_of_generation(tokenizer->n_vocab()));
  }
}

TEST(VocabEndOfGeneration, TheTurnStartIsNoEnd) {
  const auto qwen = load("qwen3");
  EXPECT_EQ(qwen->token_text(151644), "<|im_start|>");
  EXPECT_FALSE(qwen->is_end_of_generation(151644));
  const auto gemma = load("gemma3");
  EXPECT_EQ(gemma->token_text(105), "<start_of_turn>");
  EXPECT_FALSE(gemma->is_end_of_generation(105));
  const auto llama = load("llama3");
  EXPECT_EQ(llama->token_text(128006), "<|start_header_id|>");
  EXPECT_FALSE(llama->is_end_of_generation(128006));
}

// The end-of-turn markers of Gemma 4 and LFM2, whose vocabularies are not in
// the fixtures: small byte-level vocabularies holding their special-token
// texts (not at their real ids) with "a" and "b", EOS and BOS as named.
struct SpecialTexts {
  const char* family;
  std::vector<std::string> specials;
  std::string bos, eos;
  std::vector<std::string> ends;  // the texts that must end generation
};

std::unique_ptr<Tokenizer> vocabulary_with(const SpecialTexts& family) {
  std::vector<std::string> tokens = {"a", "b", "ab"};
  std::vector<int32_t> types = {1, 1, 1};
  for (const std::string& text : family.specials) {
    tokens.push_back(text);
    types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  const auto id_of = [&](const std::string& text) {
    return static_cast<uint32_t>(std::find(tokens.begin(), tokens.end(), text) - tokens.begin());
  };
  GgufWriter writer;
  writer.set_string("tokenizer.ggml.model", "gpt2")
      .set_string("tokenizer.ggml.pre", "gpt-2")
      .set_string_array("tokenizer.ggml.tokens", tokens)
      .set_int32_array("tokenizer.ggml.token_type", types)
      .set_string_array("tokenizer.ggml.merges", {"a b"})
      .set_uint32("tokenizer.ggml.bos_token_id", id_of(family.bos))
      .set_uint32("tokenizer.ggml.eos_token_id", id_of(family.eos));
  auto source = make_memory_source(writer.to_bytes());
  return Tokenizer::from_gguf(GgufFile::parse(*source));
}

TEST(VocabEndOfGeneration, TheTurnEndsOfGemma4AndLfm2) {
  const SpecialTexts families[] = {
      // Gemma 4: turns are "<|turn>role\n ... <turn|>"; a tool call ends the
      // model's turn with "<|tool_response>" (the application answers);
      // thinking is a "<|channel>thought ... <channel|>" block. llama.cpp
      // ends generation on "<turn|>", "<|tool_response>" and "<eos>", and
      // there takes "</s>" for text.
      {"gemma4",
       {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>",
        "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|channel>", "<channel|>", "<|think|>",
        "<|\"|>", "</s>"},
       "<bos>",
       "<eos>",
       {"<eos>", "<turn|>", "<|tool_response>"}},
      // LFM2 and LFM2.5: ChatML turns, tool calls and responses between
      // their own markers inside a turn.
      {"lfm2",
       {"<|pad|>", "<|startoftext|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|tool_list_start|>",
        "<|tool_list_end|>", "<|tool_call_start|>", "<|tool_call_end|>", "<|tool_response_start|>",
        "<|tool_response_end|>", "<think>", "</think>"},
       "<|startoftext|>",
       "<|im_end|>",
       {"<|endoftext|>", "<|im_end|>"}},
  };
  for (const SpecialTexts& family : families) {
    SCOPED_TRACE(family.family);
    const auto tokenizer = vocabulary_with(family);
    std::vector<std::string> ends;
    for (int32_t id : tokenizer->end_of_generation_tokens()) ends.emplace_back(tokenizer->token_text(id));
    std::vector<std::string> expected = family.ends;
    std::sort(ends.begin(), ends.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(ends, expected);
    EXPECT_TRUE(tokenizer->is_end_of_generation(tokenizer->eos()));
    EXPECT_FALSE(tokenizer->is_end_of_generation(tokenizer->bos()));
  }
  // Gemma 4's "</s>" is ordinary text: a normal token, matched in plain text.
  const auto gemma4 = vocabulary_with(families[0]);
  int32_t s = 0;
  while (s < gemma4->n_vocab() && gemma4->token_text(s) != "</s>") ++s;
  ASSERT_LT(s, gemma4->n_vocab());
  EXPECT_EQ(gemma4->token_type(s), TokenType::kNormal);
  EXPECT_FALSE(gemma4->is_end_of_generation(s));
}

TEST(VocabEndOfGeneration, GemmaEndOfSentenceIsAControlTokenNow) {
  // Gemma 3's file marks "</s>" (212) user-defined, which would match it in
  // any text. llama.cpp makes it a control token: only parse_special reads it.
  const auto gemma = load("gemma3");
  const std::vector<int32_t> plain = gemma->encode("a</s>b", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 212), plain.end()) << ids_to_string(plain);
  EXPECT_EQ(gemma->decode(plain), "a</s>b");
  const std::vector<int32_t> parsed = gemma->encode("a</s>b", false, true);
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), 212), parsed.end()) << ids_to_string(parsed);
}

// ---------------------------------------------------------------------------
// The special-token partition against llama.cpp's algorithm, written out
// plainly: special tokens longest first (ties in id order), each cut out of
// the text fragments the longer ones left, left to right.

std::vector<int32_t> encode_with_reference_partition(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id) {
    const TokenType type = tokenizer.token_type(id);
    if ((type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) &&
        !tokenizer.token_text(id).empty()) {
      specials.push_back(id);
    }
  }
  std::stable_sort(specials.begin(), specials.end(), [&](int32_t a, int32_t b) {
    return tokenizer.token_text(a).size() > tokenizer.token_text(b).size();
  });
  struct Fragment {
    size_t begin, end;
    int32_t token;
  };
  std::vector<Fragment> fragments = {{0, text.size(), -1}};
  for (int32_t id : specials) {
    const std::string_view needle = tokenizer.token_text(id);
    std::vector<Fragment> next;
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t begin = f.begin;
      while (begin < f.end) {
        const size_t match = std::string_view(text).substr(0, f.end).find(needle, begin);
        if (match == std::string_view::npos) break;
        if (match > begin) next.push_back({begin, match, -1});
        next.push_back({match, match + needle.size(), id});
        begin = match + needle.size();
      }
      if (begin < f.end) next.push_back({begin, f.end, -1});
    }
    fragments.swap(next);
  }
  // What is left between the special tokens holds none of them, so it
  // encodes alone as it does in place (none of these vocabularies adds a
  // space prefix).
  std::vector<int32_t> ids;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      ids.push_back(f.token);
    } else {
      const std::vector<int32_t> piece = tokenizer.encode(text.substr(f.begin, f.end - f.begin), false, false);
      ids.insert(ids.end(), piece.begin(), piece.end());
    }
  }
  return ids;
}

TEST(VocabSpecialTokens, PartitionIsLlamaCpps) {
  for (const char* name : {"qwen3", "llama3", "gemma3", "gemma4"}) {
    SCOPED_TRACE(name);
    const auto tokenizer = load(name);
    ASSERT_FALSE(tokenizer->strips_leading_space());
    // Texts made of special-token texts, pieces of them (so that matches
    // overlap and nest), whitespace runs and letters.
    std::vector<std::string> pieces = {" ", "  ", "    ", "\n", "\n\n", "\t", "a", "<", ">", "|"};
    std::mt19937 random(7);
    for (int32_t id = 0; id < tokenizer->n_vocab(); ++id) {
      const TokenType type = tokenizer->token_type(id);
      if (type != TokenType::kControl && type != TokenType::kUserDefined) continue;
      if (random() % 8 != 0 && tokenizer->n_vocab() > 200000) continue;  // Gemma: a sample of its 6,400
      const std::string text(tokenizer->token_text(id));
      pieces.push_back(text);
      const size_t cut = random() % (text.size() + 1);
      pieces.push_back(text.substr(0, cut));
      pieces.push_back(text.substr(cut));
    }
    size_t with_specials = 0;
    for (int i = 0; i < 200; ++i) {
      std::string text;
      const int parts = 1 + static_cast<int>(random() % 40);
      for (int j = 0; j < parts; ++j) text += pieces[random() % pieces.size()];
      SCOPED_TRACE(escape(text));
      const std::vector<int32_t> ids = tokenizer->encode(text, false, true);
      EXPECT_EQ(ids_to_string(ids), ids_to_string(encode_with_reference_partition(*tokenizer, text)));
      for (int32_t id : ids) with_specials += tokenizer->token_type(id) == TokenType::kControl;
    }
    EXPECT_GT(with_specials, 100u);  // the texts did exercise the partition
  }
}

}  // namespace
}  // namespace sipllm
