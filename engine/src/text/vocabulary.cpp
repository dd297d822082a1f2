// The public Vocabulary: the internal Tokenizer over a parsed GGUF header.
#include "sipllm/vocabulary.h"

#include "model/gguf.h"
#include "text/tokenizer.h"

namespace sipllm {
namespace {

class VocabularyImpl final : public Vocabulary {
 public:
  explicit VocabularyImpl(const GgufFile& file)
      : tokenizer_(Tokenizer::from_gguf(file)),
        architecture_(file.get_string("general.architecture", "")),
        chat_template_(file.get_string("tokenizer.chat_template", "")) {}

  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const override {
    return tokenizer_->encode(text, add_special, parse_special);
  }
  std::string detokenize(const std::vector<int32_t>& tokens) const override { return tokenizer_->decode(tokens); }

  int32_t size() const override { return tokenizer_->n_vocab(); }
  std::string token_text(int32_t id) const override { return std::string(tokenizer_->token_text(id)); }
  std::string token_piece(int32_t id) const override { return tokenizer_->token_bytes(id); }
  bool is_control(int32_t id) const override { return tokenizer_->token_type(id) == TokenType::kControl; }

  int32_t bos() const override { return tokenizer_->bos(); }
  int32_t eos() const override { return tokenizer_->eos(); }
  bool is_end_of_generation(int32_t id) const override { return tokenizer_->is_end_of_generation(id); }
  std::vector<int32_t> end_of_generation_tokens() const override {
    return tokenizer_->end_of_generation_tokens();
  }

  std::string kind() const override { return tokenizer_->kind(); }
  std::string architecture() const override { return architecture_; }
  std::string chat_template() const override { return chat_template_; }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string architecture_;
  std::string chat_template_;
};

}  // namespace

std::unique_ptr<Vocabulary> Vocabulary::open(std::unique_ptr<WeightSource> source) {
  if (source == nullptr) throw Error(ErrorKind::kInvalidArgument, "Vocabulary::open: no source");
  const GgufFile file = GgufFile::parse(*source);
  return std::make_unique<VocabularyImpl>(file);
}

}  // namespace sipllm
