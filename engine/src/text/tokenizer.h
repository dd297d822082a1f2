// Tokenizers built from GGUF metadata.
//
//   tokenizer.ggml.model = "llama": SentencePiece-style BPE. Score-driven merges
//     over UTF-8 characters, byte fallback to <0xXX> tokens, a leading-space
//     prefix ("▁") and spaces written as "▁".
//   tokenizer.ggml.model = "gpt2": byte-level BPE. The text is split by the
//     pre-tokenizer named in tokenizer.ggml.pre, bytes are mapped to printable
//     code points, and pairs merge by their rank in tokenizer.ggml.merges.
//   tokenizer.ggml.model = "gemma4" (and "gpt2" with tokenizer.ggml.pre
//     "gemma4"): BPE over UTF-8 characters, pairs merging by their rank in
//     tokenizer.ggml.merges, with spaces written as "▁", the text split at
//     newlines, <0xXX> byte fallback, and always a BOS.
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

  int32_t n_vocab() const { return n_vocab_; }
  // The token's text as stored in the file. Throws Error(kInvalidArgument)
  // for an id outside the vocabulary, as token_bytes() does.
  std::string_view token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: the tokens llama.cpp's loader marks so (EOS, EOT, EOM,
  // the FIM pad/repo/separator tokens, and every token whose text is one of
  // its end-of-turn markers); see end_of_generation_tokens().
  bool is_end_of_generation(int32_t id) const;
  // Those tokens, ascending.
  const std::vector<int32_t>& end_of_generation_tokens() const { return end_of_generation_; }
  // "llama (SentencePiece BPE)", "gpt2 (byte-level BPE, pre-tokenizer deepseek-coder)" or
  // "gemma4 (BPE over UTF-8, spaces as U+2581)".
  virtual std::string kind() const = 0;

 protected:
  Tokenizer() = default;

  // Every token's text, back to back: token i is
  // text_bytes_[text_offsets_[i], text_offsets_[i + 1]). One buffer instead of
  // a string per token keeps loading a 262k-token vocabulary quick. Texts
  // past the n_vocab_ tokens are a tokenizer's own (see ByteLevelBpeTokenizer).
  std::string text_bytes_;
  std::vector<size_t> text_offsets_ = {0};
  int32_t n_vocab_ = 0;
  std::vector<TokenType> types_;
  int32_t bos_ = -1;
  int32_t eos_ = -1;
  bool add_bos_ = false;
  bool add_eos_ = false;
  std::vector<int32_t> end_of_generation_;  // ascending
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
