#include "runtime/grammar_filter.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "sipllm/error.h"
#include "text/tokenizer.h"

namespace sipllm {

TokenTrie::TokenTrie(const std::vector<int32_t>& tokens, const std::vector<std::string_view>& bytes) {
  std::vector<size_t> order;
  for (size_t i = 0; i < tokens.size(); ++i) {
    // A token longer than the depth field is never allowed (no vocabulary
    // has one).
    if (!bytes[i].empty() && bytes[i].size() <= std::numeric_limits<uint16_t>::max()) order.push_back(i);
  }
  // string_view compares bytes as unsigned char: a prefix sorts before its
  // extensions, so sorted order is the trie's preorder.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] < bytes[b]; });

  nodes_.push_back(Node{0, 0, 0, 0});
  std::vector<uint32_t> path = {0};  // node at each depth of the current word
  std::string_view previous;
  for (size_t i : order) {
    const std::string_view word = bytes[i];
    size_t common = 0;
    while (common < previous.size() && common < word.size() && previous[common] == word[common]) ++common;
    while (path.size() - 1 > common) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < word.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(Node{0, static_cast<uint32_t>(tokens_.size()), static_cast<uint16_t>(d + 1),
                            static_cast<uint8_t>(word[d])});
    }
    tokens_.push_back(tokens[i]);  // on the node of the word's last byte
    max_depth_ = std::max(max_depth_, word.size());
    previous = word;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  nodes_.push_back(Node{0, static_cast<uint32_t>(tokens_.size()), 0, 0});  // sentinel
}

void TokenTrie::collect(GrammarMatcher& matcher, GrammarMatcher::StateId state, std::vector<uint64_t>& bits,
                        uint64_t max_work) const {
  std::vector<GrammarMatcher::StateId> states(max_depth_ + 1);
  states[0] = state;
  const size_t n = nodes_.size() - 1;
  const uint64_t work_start = matcher.work();
  size_t i = 1;
  for (uint32_t check = 0; i < n; ++check) {
    if ((check & 1023) == 0 && matcher.work() - work_start > max_work) {
      throw Error(ErrorKind::kInvalidArgument,
                  "the grammar is too ambiguous to run: deciding which tokens may come next took over " +
                      std::to_string(max_work) + " steps of its parser");
    }
    const Node& node = nodes_[i];
    const GrammarMatcher::StateId next = matcher.step(states[node.depth - 1u], node.byte);
    if (next == GrammarMatcher::kDead) {
      i = node.end;  // no token under this prefix can be allowed
      continue;
    }
    states[node.depth] = next;
    for (uint32_t t = node.first_token, end = nodes_[i + 1].first_token; t < end; ++t) {
      const auto token = static_cast<size_t>(tokens_[t]);
      bits[token >> 6] |= uint64_t{1} << (token & 63);
    }
    ++i;
  }
}

GrammarVocabulary::GrammarVocabulary(const Tokenizer& tokenizer) : n_vocab_(tokenizer.n_vocab()) {
  offsets_.reserve(static_cast<size_t>(n_vocab_) + 1);
  offsets_.push_back(0);
  eog_.assign(static_cast<size_t>(n_vocab_), false);
  for (int32_t t = 0; t < n_vocab_; ++t) {
    all_bytes_ += tokenizer.token_bytes(t);
    if (all_bytes_.size() > UINT32_MAX) throw Error(ErrorKind::kUnsupported, "the vocabulary's tokens hold over 4 GB");
    offsets_.push_back(static_cast<uint32_t>(all_bytes_.size()));
    if (tokenizer.is_end_of_generation(t)) {
      eog_[static_cast<size_t>(t)] = true;
      eog_tokens_.push_back(t);
    }
  }
  // End-of-generation tokens stand for the end of the text, never for bytes.
  std::vector<int32_t> ids;
  std::vector<std::string_view> words;
  for (int32_t t = 0; t < n_vocab_; ++t) {
    if (eog_[static_cast<size_t>(t)]) continue;
    ids.push_back(t);
    words.push_back(bytes(t));
  }
  trie_ = std::make_unique<TokenTrie>(ids, words);
}

GrammarFilter::GrammarFilter(std::shared_ptr<const Grammar> grammar,
                             std::shared_ptr<const GrammarVocabulary> vocabulary, bool strip_leading_space)
    : matcher_(std::move(grammar)), vocabulary_(std::move(vocabulary)), strip_pending_(strip_leading_space) {}

std::string_view GrammarFilter::token_text(int32_t token) const {
  std::string_view text = vocabulary_->bytes(token);
  if (strip_pending_ && !text.empty() && text[0] == ' ') text.remove_prefix(1);
  return text;
}

bool GrammarFilter::allows(int32_t token) {
  if (token < 0 || token >= vocabulary_->size()) return false;
  if (vocabulary_->end_of_generation(token)) return can_end();
  if (vocabulary_->bytes(token).empty()) return false;  // control tokens print nothing the grammar could read
  return matcher_.walk(matcher_.state(), token_text(token)) != GrammarMatcher::kDead;
}

const std::vector<uint64_t>& GrammarFilter::current_mask() {
  const size_t words = (static_cast<size_t>(vocabulary_->size()) + 63) / 64;
  if (strip_pending_) {
    // Once per generation at most: the trie holds the unstripped bytes.
    scratch_mask_.assign(words, 0);
    for (int32_t t = 0; t < vocabulary_->size(); ++t) {
      if (allows(t)) scratch_mask_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
    }
    return scratch_mask_;
  }
  if (matcher_.epoch() != epoch_) {  // state ids were renumbered
    masks_.clear();
    mask_order_.clear();
    epoch_ = matcher_.epoch();
  }
  const GrammarMatcher::StateId state = matcher_.state();
  const auto it = masks_.find(state);
  if (it != masks_.end()) return it->second;
  std::vector<uint64_t> bits(words, 0);
  vocabulary_->trie().collect(matcher_, state, bits);
  if (matcher_.can_end(state)) {
    for (int32_t t : vocabulary_->end_of_generation_tokens()) bits[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
  }
  if (masks_.size() >= kCachedMasks) {
    masks_.erase(mask_order_.front());
    mask_order_.pop_front();
  }
  mask_order_.push_back(state);
  return masks_.emplace(state, std::move(bits)).first->second;
}

void GrammarFilter::apply(std::vector<float>& logits) {
  const std::vector<uint64_t>& bits = current_mask();
  const float none = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), static_cast<size_t>(vocabulary_->size()));
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits[w];
    if (word == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t t = w * 64; t < end; ++t) {
      if (!((word >> (t & 63)) & 1)) logits[t] = none;
    }
  }
  for (size_t t = n; t < logits.size(); ++t) logits[t] = none;
}

void GrammarFilter::accept(int32_t token) {
  if (token < 0 || token >= vocabulary_->size()) {
    throw Error(ErrorKind::kInvalidArgument, "token " + std::to_string(token) + " is outside the vocabulary");
  }
  if (vocabulary_->end_of_generation(token)) return;
  const std::string_view text = token_text(token);
  if (vocabulary_->bytes(token).empty() || !matcher_.accept(text)) {
    throw Error(ErrorKind::kInvalidArgument,
                "token " + std::to_string(token) + " ('" + std::string(vocabulary_->bytes(token)) +
                    "') does not continue the grammar");
  }
  strip_pending_ = false;
  matcher_.trim_if_large();
}

}  // namespace sipllm
