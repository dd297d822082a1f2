// A model's vocabulary on its own: its tokenizer and special tokens, read from
// the GGUF header alone. Neither weights nor the model's hyper-parameters are
// needed, so a vocabulary-only file (no tensors) opens as well as a model, and
// a tokenizer can be checked apart from any weights.
//
//   auto vocab = sipllm::Vocabulary::open(sipllm::open_file_source("model.gguf"));
//   std::vector<int32_t> ids = vocab->tokenize("Hello", /*add_special=*/false, /*parse_special=*/false);
//   std::string text = vocab->detokenize(ids);
//
// It tokenizes exactly as an Engine opened on the same file does. Calls are
// const and may come from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/weight_source.h"

namespace sipllm {

class Vocabulary {
 public:
  // Reads the GGUF header through `source` (the source is not kept). Throws
  // Error: kFormat for a file that is no GGUF or lacks or contradicts
  // tokenizer keys, kUnsupported for a tokenizer model or pre-tokenizer the
  // engine lacks, kIo or kNetwork when the bytes cannot be read.
  static std::unique_ptr<Vocabulary> open(std::unique_ptr<WeightSource> source);
  virtual ~Vocabulary() = default;

  // add_special: BOS (and EOS) as the file's tokenizer.ggml.add_*_token keys
  //   ask. parse_special: text such as "<|im_start|>" becomes its control
  //   token; otherwise it is tokenized as plain text.
  virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special = true,
                                        bool parse_special = true) const = 0;
  // The text of a token sequence: control tokens give none. Throws
  // Error(kInvalidArgument) naming an id outside the vocabulary.
  virtual std::string detokenize(const std::vector<int32_t>& tokens) const = 0;

  virtual int32_t size() const = 0;  // number of tokens
  // A token's text as the file stores it ("Ġthe", "▁the", "<|im_end|>").
  virtual std::string token_text(int32_t id) const = 0;
  // The bytes the token stands for when decoded ("" for a control token).
  virtual std::string token_piece(int32_t id) const = 0;
  virtual bool is_control(int32_t id) const = 0;

  virtual int32_t bos() const = 0;  // -1 when the vocabulary has none
  virtual int32_t eos() const = 0;
  // Whether generating this token ends the answer, as llama.cpp decides it:
  // EOS, EOT, EOM, and the tokens whose text is a known end-of-turn marker
  // ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", ...).
  virtual bool is_end_of_generation(int32_t id) const = 0;
  virtual std::vector<int32_t> end_of_generation_tokens() const = 0;  // ascending

  // "gpt2 (byte-level BPE, pre-tokenizer qwen2)", "llama (SentencePiece BPE)".
  virtual std::string kind() const = 0;
  virtual std::string architecture() const = 0;   // general.architecture, "" when absent
  virtual std::string chat_template() const = 0;  // tokenizer.chat_template, "" when absent
};

}  // namespace sipllm
