// Grammar-constrained sampling: which tokens of a vocabulary may come next
// under a grammar.
//
// A token is allowed when its bytes take the grammar's current state to a
// live one; an end-of-generation token when the text so far is a complete
// sentence. Deciding that for a whole vocabulary (150k tokens) every step
// would be slow done token by token, so the tokens' bytes sit in one trie,
// built once per vocabulary: a walk of the trie steps the grammar once per
// trie node and skips every subtree whose prefix the grammar rejects, and
// the matcher caches its byte transitions, so a walk from a known state is
// a table lookup per node. The mask of each state is kept too: inside a
// JSON string, say, the state repeats from token to token.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/sampler.h"
#include "text/grammar.h"

namespace sipllm {

class Tokenizer;

// The byte strings of a vocabulary's tokens in a trie, laid out in preorder
// so that a walk is a loop over an array and skipping a subtree is a jump.
class TokenTrie {
 public:
  // tokens[i] is token i's id, bytes[i] its bytes; empty strings are left out.
  TokenTrie(const std::vector<int32_t>& tokens, const std::vector<std::string_view>& bytes);

  // Sets the bit of every token whose bytes the matcher accepts from `state`.
  // Throws Error(kInvalidArgument) when the grammar makes one walk cost more
  // than max_work stack frames: a grammar that ambiguous would take seconds
  // or minutes per token, which is reported rather than waited for.
  void collect(GrammarMatcher& matcher, GrammarMatcher::StateId state, std::vector<uint64_t>& bits,
               uint64_t max_work = kMaxWalkWork) const;
  // Ordinary grammars (JSON schemas included) take well under a million.
  static constexpr uint64_t kMaxWalkWork = 20000000;

  size_t node_count() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t end;          // index past this node's subtree
    uint32_t first_token;  // its tokens: tokens_[first_token, next node's first_token)
    uint16_t depth;        // bytes from the root
    uint8_t byte;
  };
  std::vector<Node> nodes_;  // [0] the root, then preorder, then a sentinel
  std::vector<int32_t> tokens_;
  size_t max_depth_ = 0;
};

// What grammars need of a vocabulary, built once per engine.
class GrammarVocabulary {
 public:
  explicit GrammarVocabulary(const Tokenizer& tokenizer);

  int32_t size() const { return n_vocab_; }
  std::string_view bytes(int32_t token) const {
    return std::string_view(all_bytes_).substr(offsets_[static_cast<size_t>(token)],
                                                offsets_[static_cast<size_t>(token) + 1] -
                                                    offsets_[static_cast<size_t>(token)]);
  }
  bool end_of_generation(int32_t token) const { return eog_[static_cast<size_t>(token)]; }
  const std::vector<int32_t>& end_of_generation_tokens() const { return eog_tokens_; }
  const TokenTrie& trie() const { return *trie_; }

 private:
  int32_t n_vocab_ = 0;
  std::string all_bytes_;
  std::vector<uint32_t> offsets_;
  std::vector<bool> eog_;
  std::vector<int32_t> eog_tokens_;
  std::unique_ptr<TokenTrie> trie_;
};

class GrammarFilter final : public TokenFilter {
 public:
  // strip_leading_space: the first token's text will lose a leading space
  // (a SentencePiece model decoding from the start of a text), so the
  // grammar must see it without.
  GrammarFilter(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocabulary> vocabulary,
                bool strip_leading_space = false);

  bool allows(int32_t token) override;
  void apply(std::vector<float>& logits) override;

  // Moves the grammar over a sampled token (end-of-generation tokens read
  // nothing). Throws Error(kInvalidArgument) for a token it does not allow.
  void accept(int32_t token);

  // The text so far is a complete sentence of the grammar...
  bool can_end() const { return matcher_.can_end(matcher_.state()); }
  // ... and nothing may follow it.
  bool must_end() const { return matcher_.must_end(matcher_.state()); }

  GrammarMatcher& matcher() { return matcher_; }

  static constexpr size_t kCachedMasks = 64;

 private:
  std::string_view token_text(int32_t token) const;
  const std::vector<uint64_t>& current_mask();

  GrammarMatcher matcher_;
  std::shared_ptr<const GrammarVocabulary> vocabulary_;
  bool strip_pending_;
  uint64_t epoch_ = 0;
  std::unordered_map<GrammarMatcher::StateId, std::vector<uint64_t>> masks_;
  std::deque<GrammarMatcher::StateId> mask_order_;  // oldest first, for eviction
  std::vector<uint64_t> scratch_mask_;
};

}  // namespace sipllm
