// harness/base/option_names.h and the model's option tables (model_options.h,
// graph_mode.h): each value has one spelling, parsing inverts it, and the
// RunConfig field of each option offers exactly the table's spellings.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/config/run_config_fields.h"
#include "harness/model/model_options.h"

namespace parity {
namespace {

enum class Colour { red, green };

TEST(OptionNames, CompleteRejectsMissingEmptyAndRepeatedEntries) {
  constexpr OptionNames<Colour, 2> good{{{Colour::red, "red"}, {Colour::green, "green"}}};
  constexpr OptionNames<Colour, 2> short_table{{{Colour::red, "red"}}};
  constexpr OptionNames<Colour, 2> same_value{{{Colour::red, "red"}, {Colour::red, "rouge"}}};
  constexpr OptionNames<Colour, 2> same_name{{{Colour::red, "red"}, {Colour::green, "red"}}};
  static_assert(good.complete());
  EXPECT_FALSE(short_table.complete());
  EXPECT_FALSE(same_value.complete());
  EXPECT_FALSE(same_name.complete());
  EXPECT_EQ(good.known(), "red, green");
  EXPECT_EQ(good.parse("green"), Colour::green);
  EXPECT_FALSE(good.parse("Green").has_value());
}

template <typename E>
void expect_round_trip(const char* field) {
  const auto& table = option_names(E{});
  for (const auto& [value, name] : table.entries) {
    EXPECT_EQ(to_string(value), name);
    EXPECT_EQ(parse_option<E>(name), value) << name;
  }
  const RunConfigField* f = find_run_config_field(field);
  ASSERT_NE(f, nullptr) << field;
  ASSERT_NE(f->choices, nullptr) << field;
  EXPECT_EQ(f->choices(), known_options<E>()) << field;
}

TEST(OptionNames, EveryModelOptionRoundTripsAndIsTheFieldsChoiceList) {
  expect_round_trip<ModelDType>("dtype");
  expect_round_trip<NormKind>("norm");
  expect_round_trip<ActivationKind>("activation");
  expect_round_trip<PositionEmbeddingKind>("position-embedding");
  expect_round_trip<GraphMode>("graphs");
  expect_round_trip<RouterScore>("moe-score");
  expect_round_trip<ForcedRouting>("moe-force-routing");
  expect_round_trip<OptimizerKind>("optimizer");
  expect_round_trip<RuntimeGatherOption>("runtime-gather-output");
  // --recompute is free text (selective:<modules>): its kinds parse alone.
  EXPECT_EQ(parse_option<RecomputeKind>("full-block"), RecomputeKind::full_block);
}

}  // namespace
}  // namespace parity
