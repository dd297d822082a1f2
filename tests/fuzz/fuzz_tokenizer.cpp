// The tokenizers on any bytes, with every vocabulary the project ships:
// Qwen 3, Qwen 3.5 (Qwen 3's with the qwen35 pre-tokenizer, made by the
// build) and Llama 3 (byte-level BPE), Gemma 3 (SentencePiece with byte
// fallback, no space prefix) and its tokens in Gemma 4's form (gemma4: BPE
// over UTF-8 with "\u2581" spaces, made by the build) from
// tests/fixtures/vocab, and stories260K's SentencePiece vocabulary (space
// prefix) from the demo's bundled model.
//
// The first byte picks what to do with the rest:
//   bit 2 clear: the rest is text. encode() with add_special (bit 0) and
//     parse_special (bit 1) must give ids inside the vocabulary, decode() and
//     the streaming TextDecoder must agree, and plain text (no special
//     parsing, no BOS/EOS) must come back from decode() as it went in, but
//     for what a model cannot represent (see expected_round_trip()).
//   bit 2 set: the rest is token ids (int32, any value). decode() must give
//     text, or an Error(kInvalidArgument) when an id is outside the
//     vocabulary.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "model/gguf.h"
#include "sipllm/weight_source.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

using namespace sipllm;

namespace {

struct Vocab {
  std::string name;
  std::unique_ptr<Tokenizer> tokenizer;
};

std::vector<Vocab>& vocabs() {
  static std::vector<Vocab> loaded = [] {
    std::vector<Vocab> v;
    const std::string dir = SIPLLM_VOCAB_DIR;
    const std::vector<std::pair<std::string, std::string>> files = {
        {"qwen3", dir + "/ggml-vocab-qwen3.gguf"},
        {"qwen35", dir + "/ggml-vocab-qwen35.gguf"},
        {"llama3", dir + "/ggml-vocab-llama3.gguf"},
        {"gemma3", dir + "/ggml-vocab-gemma3.gguf"},
        {"gemma4", dir + "/ggml-vocab-gemma4.gguf"},
        {"stories260K", std::string(SIPLLM_SOURCE_DIR) + "/demo/public/models/stories260K.gguf"},
    };
    for (const auto& [name, path] : files) {
      try {
        auto source = open_file_source(path);
        const GgufFile file = GgufFile::parse(*source);
        v.push_back({name, Tokenizer::from_gguf(file)});
      } catch (const std::exception& e) {
        fuzz::fail("cannot load the " + name + " vocabulary " + path + ": " + e.what());
      }
    }
    return v;
  }();
  return loaded;
}

bool valid_utf8(const std::string& text) {
  for (size_t pos = 0; pos < text.size();) {
    uint32_t cp = 0;
    const size_t length = unicode::decode_utf8(text, pos, &cp);
    if (cp == unicode::kReplacementCharacter && length == 1) return false;
    pos += length;
  }
  return true;
}

// What decode(encode(text)) gives back. SentencePiece (and Gemma 4's BPE)
// writes a space as "\u2581" and decodes that character as a space, so a
// "\u2581" in the text comes back as a space (as in llama.cpp and
// SentencePiece itself).
std::string expected_round_trip(const Vocab& vocab, const std::string& text) {
  const std::string kind = vocab.tokenizer->kind();
  if (kind.rfind("llama", 0) != 0 && kind.find("U+2581") == std::string::npos) return text;
  const std::string marker = "\xE2\x96\x81";
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, marker.size(), marker) == 0) {
      out += ' ';
      pos += marker.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

void check_ids(const Vocab& vocab, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    SIPLLM_FUZZ_CHECK(id >= 0 && id < vocab.tokenizer->n_vocab(),
                      vocab.name + ": encode gave the id " + std::to_string(id));
  }
}

// decode() and the streaming decoder agree whenever decode()'s text is valid
// UTF-8 (the streaming one replaces what is not, by design).
void check_streaming(const Vocab& vocab, const std::vector<int32_t>& ids, const std::string& decoded) {
  TextDecoder decoder(*vocab.tokenizer);
  std::string streamed;
  for (int32_t id : ids) streamed += decoder.push(id);
  streamed += decoder.flush();
  SIPLLM_FUZZ_CHECK(valid_utf8(streamed), vocab.name + ": the streaming decoder gave invalid UTF-8");
  if (valid_utf8(decoded)) {
    SIPLLM_FUZZ_CHECK(streamed == decoded, vocab.name + ": streamed text differs from decode()'s");
  }
}

void encode_text(const Vocab& vocab, const std::string& text, bool add_special, bool parse_special) {
  const std::vector<int32_t> ids = vocab.tokenizer->encode(text, add_special, parse_special);
  check_ids(vocab, ids);
  const std::string decoded = vocab.tokenizer->decode(ids);
  check_streaming(vocab, ids, decoded);

  const std::vector<int32_t> plain = vocab.tokenizer->encode(text, false, false);
  check_ids(vocab, plain);
  const std::string round_trip = vocab.tokenizer->decode(plain);
  if (round_trip != expected_round_trip(vocab, text)) {
    std::fprintf(stderr, "%s: text of %zu bytes came back as %zu bytes\n", vocab.name.c_str(), text.size(),
                 round_trip.size());
    fuzz::fail(vocab.name + ": decode(encode(text)) is not the text");
  }
}

void decode_ids(const Vocab& vocab, const std::string& bytes) {
  std::vector<int32_t> ids(bytes.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  bool in_range = true;
  for (int32_t id : ids) in_range = in_range && id >= 0 && id < vocab.tokenizer->n_vocab();
  try {
    const std::string decoded = vocab.tokenizer->decode(ids);
    SIPLLM_FUZZ_CHECK(in_range, vocab.name + ": decode() took an id outside the vocabulary");
    check_streaming(vocab, ids, decoded);
  } catch (const Error& e) {
    SIPLLM_FUZZ_CHECK(!in_range && e.kind() == ErrorKind::kInvalidArgument,
                      vocab.name + ": decode() of valid ids threw: " + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocabs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  const uint8_t mode = in.u8();
  const std::string rest = in.rest();
  for (const Vocab& vocab : vocabs()) {
    if ((mode & 4) != 0) {
      decode_ids(vocab, rest);
    } else {
      encode_text(vocab, rest, (mode & 1) != 0, (mode & 2) != 0);
    }
  }
  return 0;
}
