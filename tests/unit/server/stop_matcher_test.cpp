// StopMatcher tests: matches across pushes, held-back tails, never leaking a stop string.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/stop_matcher.h"

namespace tq {
namespace {

// Pushes pieces one by one and returns everything emitted (flushing at the end).
std::string run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  out += m.flush();
  return out;
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.held(), 0u);
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, MatchWithinOnePiece) {
  StopMatcher m({"\n\n"});
  EXPECT_EQ(m.push("hello\n\nworld"), "hello");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\n\n");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, MatchAcrossTokenBoundariesIsNeverLeaked) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc S"), "abc ");  // "S" could start STOP: held back
  EXPECT_EQ(m.held(), 1u);
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("O"), "");
  EXPECT_EQ(m.push("Pxyz"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("AR"), "STAR");
  EXPECT_FALSE(m.stopped());
  // The held tail comes out at the end of generation.
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.flush(), "S");
}

TEST(StopMatcher, OverlappingPrefixKeepsTheLongestCandidate) {
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("a"), "");
  EXPECT_EQ(m.push("a"), "");
  EXPECT_EQ(m.push("a"), "a");  // "aaa": only the last "aa" can still become "aab"
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo w"});
  EXPECT_EQ(run(m, {"hel", "lo wor", "ld"}), "hel");
  EXPECT_EQ(m.matched(), "lo w");
}

TEST(StopMatcher, EveryByteSplitGivesTheSameText) {
  const std::string text = "one two <|end|> three";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    StopMatcher m({"<|end|>"});
    std::string out = run(m, {text.substr(0, cut), text.substr(cut)});
    EXPECT_EQ(out, "one two ") << cut;
    EXPECT_TRUE(m.stopped()) << cut;
  }
  for (size_t i = 0; i < text.size(); ++i) {  // one byte at a time: nothing past the stop leaks
    StopMatcher m({"<|end|>"});
    std::string out;
    for (char c : text) out += m.push(std::string(1, c));
    EXPECT_EQ(out, "one two ");
  }
}

TEST(StopMatcher, MultibyteStopStrings) {
  StopMatcher m({"→"});  // three bytes in UTF-8
  std::string arrow = "→";
  EXPECT_EQ(m.push("a" + arrow.substr(0, 1)), "a");
  EXPECT_EQ(m.push(arrow.substr(1)), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({""});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_FALSE(m.stopped());
}

}  // namespace
}  // namespace tq
