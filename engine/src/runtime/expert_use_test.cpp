// ExpertUse: the positions that chose an expert, fading by half every
// kHalfLifePositions positions, and which of two experts is used more.
#include "runtime/expert_use.h"

#include <gtest/gtest.h>

namespace sipllm {
namespace {

constexpr int kHalfLife = static_cast<int>(ExpertUse::kHalfLifePositions);

TEST(ExpertUse, UsesFadeByHalfEveryHalfLife) {
  ExpertUse use(4, 2);  // two layers of two experts
  use.begin_pass(1);
  use.routed({0}, {8});
  EXPECT_DOUBLE_EQ(use.score(0), 8);
  EXPECT_DOUBLE_EQ(use.score(1), 0);
  use.begin_pass(kHalfLife);
  EXPECT_DOUBLE_EQ(use.score(0), 4);
  use.routed({0}, {1});  // added to what is left, not to the 8
  EXPECT_DOUBLE_EQ(use.score(0), 5);
  // Long enough for the values to be rescaled (2^-32) on the way.
  for (int i = 0; i < 40; ++i) use.begin_pass(kHalfLife);
  EXPECT_DOUBLE_EQ(use.score(0), 5 * 0x1p-40);
  use.routed({0}, {3});
  EXPECT_DOUBLE_EQ(use.score(0), 3 + 5 * 0x1p-40);
}

// Many positions of a prompt outweigh one token's choice made later, until
// enough positions have passed.
TEST(ExpertUse, APromptsChoicesOutweighOneLaterTokensUntilTheyFade) {
  ExpertUse use(4, 2);
  use.begin_pass(40);
  use.routed({0, 1}, {39, 1});  // layer 0: expert 0 chosen by 39 positions of a prompt, expert 1 by one
  use.routed({2}, {40});
  use.begin_pass(1);
  use.routed({1}, {1});  // by one generated token since
  EXPECT_FALSE(use.outweighs(1, 0));
  use.routed({3}, {1});
  for (int i = 0; i < 6; ++i) use.begin_pass(kHalfLife);
  use.routed({1}, {1});
  EXPECT_TRUE(use.outweighs(1, 0));
}

// Within a pass, an expert of a layer that has not routed yet is compared
// with what the incoming one had before this pass: a prompt run again keeps
// the experts its later layers will use again.
TEST(ExpertUse, ALayerNotRoutedYetIsComparedWithoutThisPasssUses) {
  ExpertUse use(4, 2);
  use.begin_pass(32);
  use.routed({0}, {10});  // layer 0
  use.routed({2}, {20});  // layer 1
  use.begin_pass(32);     // the same prompt again
  use.routed({0}, {10});
  EXPECT_GT(use.score(0), use.score(2));  // counted twice against once so far
  EXPECT_FALSE(use.outweighs(0, 2));      // but had less before this pass
  use.routed({3}, {1});  // layer 1 routes, without expert 2 this time
  EXPECT_TRUE(use.outweighs(0, 2));
}

}  // namespace
}  // namespace sipllm
