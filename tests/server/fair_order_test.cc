// FairOrder: tenants take turns, then each tenant's tasks do; a re-added key waits its turn.
#include "server/fair_order.h"

#include <vector>

#include "gtest/gtest.h"

namespace manyshot::server {
namespace {

std::vector<std::string> Drain(FairOrder& order) {
  std::vector<std::string> served;
  while (auto key = order.Next()) served.push_back(*key);
  return served;
}

TEST(FairOrderTest, TenantsTakeTurnsAndThenTheirTasksDo) {
  FairOrder order;
  for (int t = 0; t < 3; ++t) order.Add("a", "a/" + std::to_string(t));
  order.Add("b", "b/0");
  order.Add("c", "c/0");
  order.Add("c", "c/1");
  EXPECT_EQ(Drain(order), (std::vector<std::string>{"a/0", "b/0", "c/0", "a/1", "c/1", "a/2"}));
  EXPECT_TRUE(order.empty());
  EXPECT_FALSE(order.Next().has_value());
}

TEST(FairOrderTest, AKeyWithMoreWorkGoesBehindItsTenantsOtherTasksAndOtherTenants) {
  FairOrder order;
  order.Add("a", "a/0");
  order.Add("a", "a/1");
  order.Add("b", "b/0");
  auto first = order.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "a/0");
  order.Add("a", "a/0");  // a/0 still has work after its turn
  EXPECT_EQ(Drain(order), (std::vector<std::string>{"b/0", "a/1", "a/0"}));
}

TEST(FairOrderTest, ATenantThatCameBackJoinsAtTheEnd) {
  FairOrder order;
  order.Add("a", "a/0");
  order.Add("b", "b/0");
  ASSERT_EQ(*order.Next(), "a/0");
  order.Add("c", "c/0");
  order.Add("a", "a/1");  // a had no work left, so it queues behind c
  EXPECT_EQ(Drain(order), (std::vector<std::string>{"b/0", "c/0", "a/1"}));
}

}  // namespace
}  // namespace manyshot::server
