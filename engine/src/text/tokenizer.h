// Tokenizers built from GGUF metadata.
//
//   tokenizer.ggml.model = "llama": SentencePiece-style BPE. Score-driven merges
//     over UTF-8 characters, byte fallback to <0xXX> tokens, a leading-space
//     prefix ("▁") and spaces written as "▁".
//   tokenizer.ggml.model = "gpt2": byte-level BPE. The text is split by the
//     pre-tokenizer named in tokenizer.ggml.pre, bytes are mapped to printable
//     code points, and pairs merge by their rank in tokenizer.ggml.merges.
//
// Special tokens (control and user-defined) are matched in the text before the
// model runs when parse_special is set; user-defined tokens always are, as in
// llama.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sipllm {

class GgufFile;

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  // Throws Error: kFormat for missing/inconsistent tokenizer keys, kUnsupported
  // for an unknown tokenizer.ggml.model or tokenizer.ggml.pre.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
  virtual ~Tokenizer() = default;

  // add_special: prepend BOS (and append EOS) as the metadata asks
  //   (tokenizer.ggml.add_bos_token / add_eos_token).
  // parse_special: text like "<s>" or "<|im_start|>" becomes its control token.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  // The bytes one token stands for: "▁" is a space, <0x0A> is the byte 0x0A,
  // byte-level symbols map back to their bytes. Control tokens give "".
  virtual std::string token_bytes(int32_t id) const = 0;

  // Text of a whole sequence; inverse of encode(text, false, false) for
  // supported vocabularies (the SentencePiece leading space is removed).
  std::string decode(const std::vector<int32_t>& ids) const;

  // Whether decoding should drop one leading space at the start of a text
  // (SentencePiece's add_space_prefix).
  virtual bool strips_leading_space() const = 0;

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token_text(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  TokenType token_type(int32_t id) const { return types_.at(static_cast<size_t>(id)); }
  int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: EOS, EOT and similar control tokens named in metadata.
  bool is_end_of_generation(int32_t id) const;
  // "llama (SentencePiece BPE)" or "gpt2 (byte-level BPE, pre-tokenizer deepseek-coder)".
  virtual std::string kind() const = 0;

 protected:
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::vector<int32_t> end_of_generation_;
};

// Turns a stream of tokens into text, emitting only complete UTF-8 sequences:
// a character split over several byte tokens is held back until it is whole.
class TextDecoder {
 public:
  explicit TextDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // Text made complete by this token (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete sequence, as U+FFFD).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
  bool at_start_ = true;
};

}  // namespace sipllm
