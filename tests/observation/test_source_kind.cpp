#include <gtest/gtest.h>

#include <set>
#include <string>

#include "harness/observation/source_kind.h"
#include "tests/observation/observation_recorder.h"

namespace parity {
namespace {

using testing::kAllKinds;
static_assert(sizeof(kAllKinds) / sizeof(kAllKinds[0]) == kSourceKindCount);

TEST(ObservationSourceKind, NamesRoundTripAndAreMegatronSpellings) {
  std::set<std::string> names;
  for (SourceKind k : kAllKinds) {
    const std::string_view name = to_string(k);
    EXPECT_FALSE(name.empty());
    names.emplace(name);
    ASSERT_TRUE(source_kind_from_string(name).has_value()) << name;
    EXPECT_EQ(*source_kind_from_string(name), k) << name;
  }
  EXPECT_EQ(static_cast<int>(names.size()), kSourceKindCount);
  EXPECT_EQ(to_string(SourceKind::residual_accumulator), "residual_accumulator");
  EXPECT_EQ(to_string(SourceKind::residual_contribution), "residual_contribution");
  EXPECT_EQ(to_string(SourceKind::output_logits), "output_logits");
  EXPECT_EQ(to_string(SourceKind::router_diagnostics), "router_diagnostics");
}

TEST(ObservationSourceKind, UnknownNamesAreRejected) {
  EXPECT_FALSE(source_kind_from_string("").has_value());
  EXPECT_FALSE(source_kind_from_string("residual").has_value());
  EXPECT_FALSE(source_kind_from_string("Residual_Accumulator").has_value());
  EXPECT_FALSE(source_kind_from_string("mtp_logits.0").has_value());
}

TEST(ObservationSourceKind, OnlyTheFourProbesAreParityProbes) {
  for (SourceKind k : kAllKinds)
    EXPECT_EQ(is_parity_probe(k),
              k == SourceKind::attention_context || k == SourceKind::mlp_output ||
                  k == SourceKind::layernorm_output || k == SourceKind::weight_gradient)
        << to_string(k);
}

TEST(ObservationKindSet, ContainsExactlyItsMembers) {
  constexpr KindSet s{SourceKind::output_logits, SourceKind::mlp_output};
  static_assert(s.contains(SourceKind::output_logits));
  for (SourceKind k : kAllKinds)
    EXPECT_EQ(s.contains(k), k == SourceKind::output_logits || k == SourceKind::mlp_output);
  EXPECT_FALSE(s.empty());

  KindSet empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.bits(), 0u);
  for (SourceKind k : kAllKinds) EXPECT_FALSE(empty.contains(k));

  for (SourceKind k : kAllKinds) EXPECT_TRUE(KindSet::all().contains(k));
  EXPECT_EQ(KindSet::all().bits() >> kSourceKindCount, 0u) << "no bits beyond the last kind";
}

TEST(ObservationKindSet, InsertFromBitsAndEquality) {
  KindSet s;
  s.insert(SourceKind::router_logits).insert(SourceKind::router_logits);
  EXPECT_EQ(s, KindSet{SourceKind::router_logits});
  EXPECT_EQ(KindSet::from_bits(s.bits()), s);
  EXPECT_NE(s, KindSet{});
  KindSet all;
  for (SourceKind k : kAllKinds) all.insert(k);
  EXPECT_EQ(all, KindSet::all());
}

}  // namespace
}  // namespace parity
