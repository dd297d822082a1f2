// llama.cpp's tokenizer test pairs (ggml-vocab-*.gguf.inp/.out) and the
// project's own fixture folders, for the tokenizer tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sipllm::test {

// Path of a file under tests/fixtures (stored in the repository).
std::string fixture_path(const std::string& relative);

// Path of a vocab-only GGUF unpacked by the build from
// tests/fixtures/vocab/ggml-vocab-<name>.gguf.tar.xz.
std::string vocab_fixture_path(const std::string& name);

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// Reads a .inp/.out pair the way llama.cpp's tests/test-tokenizer-0.cpp does:
// the .inp is split at "\n__ggml_vocab_test__\n" (so each case loses the
// newline before the separator, and nothing follows the last separator), the
// .out has one line of space-separated ids per case. Throws std::runtime_error
// if the files cannot be read or disagree on the number of cases.
std::vector<VocabCase> read_vocab_cases(const std::string& inp_path, const std::string& out_path);

// Text with newlines, tabs and other control bytes escaped, for messages.
std::string escape(const std::string& text);

// "1 2 3".
std::string ids_to_string(const std::vector<int32_t>& ids);

}  // namespace sipllm::test
