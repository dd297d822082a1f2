#include "runtime/recent_rows.h"

#include <gtest/gtest.h>

namespace sipllm {
namespace {

TEST(RecentRows, KeepsTheRowsUsedLastAndGivesThemBack) {
  RecentRows rows(3, 2);
  const uint8_t a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[3] = {7, 8, 9};
  EXPECT_EQ(rows.find(10), nullptr);
  rows.put(10, a);
  rows.put(11, b);
  ASSERT_NE(rows.find(10), nullptr);  // 10 used after 11: 11 goes first
  rows.put(12, c);
  EXPECT_EQ(rows.find(11), nullptr);
  const uint8_t* kept = rows.find(10);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept[0], 1);
  EXPECT_EQ(kept[2], 3);
  kept = rows.find(12);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept[1], 8);
  EXPECT_EQ(rows.bytes(), 6u);
}

TEST(RecentRows, CapacityFollowsTheRowSize) {
  EXPECT_EQ(RecentRows::capacity_for(1 << 20), 16u);  // large rows: at least 16
  EXPECT_EQ(RecentRows::capacity_for(16), 1024u);     // small ones: at most 1024
  EXPECT_EQ(RecentRows::capacity_for(8192), 512u);    // 4 MiB of them in between
}

}  // namespace
}  // namespace sipllm
