#pragma once
// The sampled median (megatron-reference.md section 3.6, "Layer sampled
// median"): the median, quantile(0.5) with linear interpolation, of a
// deterministic sample of ceil(n / factor) elements of each site's population.
//
// What "sampled" means here: the sample is drawn from the site's population
// SORTED, at the positions of sample_rule.h (start and stride from a hash of
// (seed, kind, site name)). Megatron samples each rank's flattened shard
// before the gather, so its sample depends on the layout: which rank holds
// which element, how uneven the shards are. Positions in the flattened
// tensor cannot fix that either: CP holds load-balanced chunks out of
// sequence order, a vocab shard flattens to a strided subset, and a padding
// mask compacts tokens of several sequences into one dim. The sorted order
// depends on the population only, so a sharded run draws the single rank's
// sample, and values that differ by rounding move each order statistic by no
// more than they move (sharded_reduction compares them). The price: every
// rank's whole population crosses the wire, not a 1/factor sample.
//
// Program: prepare flattens (every Shard relation read as Shard(0)) and keeps
// the local elements in the accumulation dtype; merge concatenates
// microbatches; start gathers each site's elements over every Shard axis with
// gather_uneven (lengths first, then zero-padded values, then unpadded), sorts
// each site's population, draws its sample, concatenates the samples of the
// result's sites and finalizes quantile(0.5) in fp32 (fp64 for fp64 inputs:
// the harness's accumulation rule, and fp64 runs are compared at rel 1e-10).
// An empty population gives NaN. FlatShard and Owned placements are rejected
// (as in Megatron), and every value of one result must be sharded over the
// same axes.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/metrics/metric.h"

namespace parity {

// parity's metric names carry no seed; the registered metric samples with this one.
inline constexpr std::uint64_t kSampledMedianSeed = 0;
// Megatron's default: one element in 100.
inline constexpr std::int64_t kSampledMedianFactor = 100;

std::unique_ptr<Metric> make_sampled_median_metric(std::string name, KindSet kinds,
                                                   LabelScope scope,
                                                   std::uint64_t seed = kSampledMedianSeed,
                                                   std::int64_t factor = kSampledMedianFactor);

// One site's whole population (every rank's elements, any order).
struct SitePopulation {
  MetricSite site;
  at::Tensor values;  // 1-D
};

// The metric's value over whole populations, with no communication: each
// site's sample of its sorted values, concatenated, then quantile(0.5) in the
// values' dtype; NaN (0-dim) when the sample is empty. The program ends here
// after its gathers; tests compute expected values with it.
at::Tensor sampled_median_of(const std::vector<SitePopulation>& sites, std::uint64_t seed,
                             std::int64_t factor);

}  // namespace parity
