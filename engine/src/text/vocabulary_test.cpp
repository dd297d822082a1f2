// The public Vocabulary, and the CLI's `tokenize` on files that hold only a
// vocabulary (tests/fixtures/vocab/: no weights, no hyper-parameters).
#include "sipllm/vocabulary.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf_writer.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "sipllm/weight_source.h"
#include "test_support.h"
#include "vocab_cases.h"

namespace sipllm {
namespace {

using test::escape;
using test::ids_to_string;

TEST(Vocabulary, OpensAVocabularyOnlyFile) {
  const auto vocab = Vocabulary::open(open_file_source(test::vocab_fixture_path("gemma3")));
  EXPECT_EQ(vocab->size(), 262144);
  EXPECT_EQ(vocab->architecture(), "gemma3");
  EXPECT_EQ(vocab->kind(), "llama (SentencePiece BPE)");
  EXPECT_EQ(vocab->bos(), 2);
  EXPECT_EQ(vocab->eos(), 106);
  EXPECT_EQ(vocab->token_text(106), "<end_of_turn>");
  EXPECT_TRUE(vocab->is_control(106));
  EXPECT_EQ(vocab->token_piece(106), "");
  EXPECT_EQ(vocab->end_of_generation_tokens(), (std::vector<int32_t>{1, 106, 212}));
  const std::vector<int32_t> ids = vocab->tokenize("<start_of_turn>user\nHi", true, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 2);    // add_bos_token
  EXPECT_EQ(ids[1], 105);  // <start_of_turn>
  EXPECT_EQ(vocab->detokenize(ids), "user\nHi");
  try {
    vocab->detokenize({262144});
    ADD_FAILURE() << "no error for an id outside the vocabulary";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("262144"), std::string::npos) << e.what();
  }
  // An Engine needs what such a file lacks.
  EXPECT_THROW(Engine::open(open_file_source(test::vocab_fixture_path("gemma3"))), Error);
}

TEST(Vocabulary, ChatTemplateFixturesAreTheFilesOwn) {
  // The web package's chat template tests read these extracted copies.
  for (const char* name : {"qwen3", "llama3", "gemma3"}) {
    SCOPED_TRACE(name);
    const auto vocab = Vocabulary::open(open_file_source(test::vocab_fixture_path(name)));
    ASSERT_FALSE(vocab->chat_template().empty());
    EXPECT_EQ(vocab->chat_template(),
              test::read_file(test::fixture_path(std::string("vocab/") + name + ".chat_template.jinja")));
  }
}

struct CommandResult {
  int exit_code;
  std::string output;  // stdout, then stderr
};

CommandResult run_cli(const std::string& arguments) {
  const std::string command = std::string(SIPLLM_CLI_PATH) + " " + arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

void write_file(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

TEST(VocabularyCli, TokenizePrintsLlamaCppsIdsForVocabularyOnlyFiles) {
  // Some cases of each vocabulary, through files (they hold newlines and
  // bytes no shell quoting should touch).
  const std::string text_path = testing::TempDir() + "/vocab-case.txt";
  for (const char* name : {"qwen3", "llama3", "gemma3"}) {
    SCOPED_TRACE(name);
    const std::string base = test::fixture_path(std::string("vocab/ggml-vocab-") + name + ".gguf");
    const std::vector<test::VocabCase> cases = test::read_vocab_cases(base + ".inp", base + ".out");
    for (size_t i = 0; i < cases.size(); i += 9) {
      SCOPED_TRACE("case " + std::to_string(i) + ": '" + escape(cases[i].text) + "'");
      write_file(text_path, cases[i].text);
      const CommandResult result = run_cli("tokenize -m " + test::vocab_fixture_path(name) + " -f " + text_path +
                                           " --no-special --no-parse-special");
      EXPECT_EQ(result.exit_code, 0) << result.output;
      EXPECT_EQ(result.output, ids_to_string(cases[i].ids) + "\n");
    }
  }
  std::remove(text_path.c_str());
}

TEST(VocabularyCli, SpecialTokenFlags) {
  const std::string llama = test::vocab_fixture_path("llama3");
  // Llama 3 adds BOS; "<|eot_id|>" is its control token 128009 unless plain text is asked for.
  const CommandResult both = run_cli("tokenize -m " + llama + " -p 'Hi<|eot_id|>'");
  EXPECT_EQ(both.exit_code, 0) << both.output;
  EXPECT_EQ(both.output, "128000 13347 128009\n");
  const CommandResult no_bos = run_cli("tokenize -m " + llama + " -p 'Hi<|eot_id|>' --no-special");
  EXPECT_EQ(no_bos.output, "13347 128009\n");
  const CommandResult plain = run_cli("tokenize -m " + llama + " -p 'Hi<|eot_id|>' --no-parse-special");
  EXPECT_EQ(plain.output.rfind("128000 13347 ", 0), 0u) << plain.output;
  EXPECT_EQ(plain.output.find("128009"), std::string::npos) << plain.output;

  const CommandResult timing = run_cli("tokenize -m " + llama + " -p 'Hi' --timing");
  EXPECT_EQ(timing.exit_code, 0) << timing.output;
  EXPECT_NE(timing.output.find("vocabulary: 128256 tokens"), std::string::npos) << timing.output;
  EXPECT_NE(timing.output.find("encode: 2 bytes -> 2 tokens"), std::string::npos) << timing.output;
}

TEST(VocabularyCli, AFileWithoutAVocabularyIsRefusedByName) {
  const std::string path = testing::TempDir() + "/no-vocab.gguf";
  GgufWriter writer;
  writer.set_string("general.architecture", "llama");
  const std::vector<uint8_t> bytes = writer.to_bytes();
  write_file(path, std::string(bytes.begin(), bytes.end()));
  const CommandResult result = run_cli("tokenize -m " + path + " -p hi");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.output, "sipllm: format error: missing required metadata key 'tokenizer.ggml.model'\n");
  std::remove(path.c_str());

  const CommandResult missing = run_cli("tokenize -m " + path + ".absent -p hi");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("no-vocab.gguf.absent"), std::string::npos) << missing.output;
  const CommandResult no_text = run_cli("tokenize -m " + test::vocab_fixture_path("qwen3"));
  EXPECT_EQ(no_text.exit_code, 2);
  EXPECT_NE(no_text.output.find("-p TEXT or -f FILE"), std::string::npos) << no_text.output;
}

}  // namespace
}  // namespace sipllm
