// parity diff's comparison (harness/trace/trace_diff.h) and the trace reader
// (trace_reader.h): equal traces, a value outside / inside the tolerance, a
// missing record, the --kinds filter, and unreadable lines naming FILE:LINE.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "harness/trace/trace_diff.h"

namespace parity {
namespace {

TraceRecord record(std::int64_t seq, std::int64_t microbatch, const std::string& owner,
                   SourceKind kind, double sum) {
  TraceRecord r;
  r.seq = seq;
  r.step = 0;
  r.microbatch = microbatch;
  r.kind = kind;
  r.site = owner + "." + std::string(to_string(kind));
  r.sequence_dim = 0;
  r.batch_dim = 1;
  r.shape = {16, 2, 32};
  r.dtype = "float32";
  r.summary.numel = 1024;
  r.summary.sum = sum;
  r.summary.sum_sq = 2.5;
  r.summary.min = -0.5;
  r.summary.max = 0.5;
  return r;
}

// Two microbatches of one layer's residuals and the logits.
std::vector<TraceRecord> sample() {
  std::vector<TraceRecord> v;
  std::int64_t seq = 0;
  for (int m = 0; m < 2; ++m) {
    v.push_back(record(seq++, m, "decoder.layers.0", SourceKind::residual_accumulator, 1.5 + m));
    v.push_back(record(seq++, m, "decoder.layers.0", SourceKind::residual_contribution, -0.25));
    v.push_back(record(seq++, m, "output_layer", SourceKind::output_logits, -22.0 + m));
  }
  return v;
}

std::vector<TraceLine> lines(const std::vector<TraceRecord>& records) {
  return read_trace_text(to_jsonl(records), "mem");
}

// fp32 rel 1e-5 as |a - b| <= tol * max(|b|, 1) (the project's rule lives in
// harness/checks; parity diff passes it in, tests/cli checks that wiring).
TraceDiffOptions fp32_options() {
  TraceDiffOptions o;
  o.close = [](const std::string&, double a, double b, double* rel, std::string* rule) {
    *rule = "fp32 rel 1e-05";
    *rel = b != 0 ? std::fabs(a - b) / std::fabs(b) : std::fabs(a - b);
    return std::fabs(a - b) <= 1e-5 * std::max(std::fabs(b), 1.0);
  };
  return o;
}

TEST(TraceDiff, EqualTracesCompareEveryRecord) {
  const TraceDiffResult r = diff_traces(lines(sample()), "A", lines(sample()), "B", fp32_options());
  EXPECT_TRUE(r.equal) << r.first_divergence;
  EXPECT_EQ(r.compared, 6);
}

TEST(TraceDiff, OnePerturbedValueIsTheFirstDivergenceNamingItsSite) {
  std::vector<TraceRecord> b = sample();
  b[4].summary.sum_sq *= 1 + 1e-3;  // microbatch 1's residual_contribution
  b[5].summary.max = 0.75;          // a later one: not the first
  const TraceDiffResult r = diff_traces(lines(sample()), "A", lines(b), "B", fp32_options());
  EXPECT_FALSE(r.equal);
  EXPECT_EQ(r.first_divergence.rfind("decoder.layers.0.residual_contribution (rank 0, step 0, "
                                     "microbatch 1, phase eager): sum_sq 2.5 vs 2.5024",
                                     0),
            0u)
      << r.first_divergence;
  EXPECT_NE(r.first_divergence.find("> fp32 rel 1e-05) (A:5 vs B:5)"), std::string::npos)
      << r.first_divergence;
}

TEST(TraceDiff, ADifferenceWithinTheToleranceIsEqual) {
  std::vector<TraceRecord> b = sample();
  b[0].summary.sum *= 1 + 1e-7;
  b[2].summary.min = *b[2].summary.min * (1 + 1e-7);
  EXPECT_TRUE(diff_traces(lines(sample()), "A", lines(b), "B", fp32_options()).equal);
}

TEST(TraceDiff, AMissingRecordIsACountDifference) {
  std::vector<TraceRecord> b = sample();
  b.erase(b.begin() + 5);  // microbatch 1's logits
  TraceDiffResult r = diff_traces(lines(sample()), "A", lines(b), "B", fp32_options());
  EXPECT_FALSE(r.equal);
  EXPECT_EQ(r.first_divergence,
            "output_layer.output_logits (rank 0, step 0, microbatch 1, phase eager): 1 record(s) "
            "in A (first at line 6), 0 in B");
  // The other way round: B has a record A lacks.
  r = diff_traces(lines(b), "A", lines(sample()), "B", fp32_options());
  EXPECT_FALSE(r.equal);
  EXPECT_NE(r.first_divergence.find("0 record(s) in A, 1 in B (first at line 6)"),
            std::string::npos)
      << r.first_divergence;
}

TEST(TraceDiff, ShapeAndNanCountsMustMatch) {
  std::vector<TraceRecord> b = sample();
  b[1].shape = {8, 2, 32};
  TraceDiffResult r = diff_traces(lines(sample()), "A", lines(b), "B", fp32_options());
  EXPECT_NE(r.first_divergence.find("shape [16,2,32] vs [8,2,32]"), std::string::npos)
      << r.first_divergence;
  b = sample();
  b[3].summary.nan = 1;
  r = diff_traces(lines(sample()), "A", lines(b), "B", fp32_options());
  EXPECT_NE(r.first_divergence.find("nan count 0 vs 1"), std::string::npos) << r.first_divergence;
}

TEST(TraceDiff, KindsRestrictBothSides) {
  std::vector<TraceRecord> a = sample();
  // A has a parity probe that B (say, Megatron) has no site for.
  a.push_back(record(6, 1, "decoder.layers.0.mlp", SourceKind::mlp_output, 3.0));
  TraceDiffOptions o = fp32_options();
  EXPECT_FALSE(diff_traces(lines(a), "A", lines(sample()), "B", o).equal);
  o.kinds = {"residual_accumulator", "residual_contribution", "output_logits"};
  const TraceDiffResult r = diff_traces(lines(a), "A", lines(sample()), "B", o);
  EXPECT_TRUE(r.equal) << r.first_divergence;
  EXPECT_EQ(r.compared, 6);
}

TEST(TraceReader, ABadLineNamesFileLineAndRule) {
  const std::string good = to_jsonl({sample()[0]});
  try {
    read_trace_text(good + "{\"rank\": 0,\n", "t.jsonl");
    FAIL() << "no error";
  } catch (const TraceReadError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.jsonl:2: not a JSON object (each line of a trace is one JSON record, "
              "docs/trace-format.md)");
  }
  nlohmann::json j = nlohmann::json::parse(good);
  j.erase("sum");
  try {
    read_trace_text(j.dump() + "\n", "t.jsonl");
    FAIL() << "no error";
  } catch (const TraceReadError& e) {
    EXPECT_EQ(std::string(e.what()),
              "t.jsonl:1: not a trace record: key 'sum' not found (the fields of "
              "docs/trace-format.md)");
  }
  EXPECT_THROW(read_trace_file("/nonexistent/parity-trace.jsonl"), TraceReadError);
}

}  // namespace
}  // namespace parity
