#include "harness/backend/generator_rng_tracker.h"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>

#include <array>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "harness/backend/stable_hash.h"
#include "harness/base/check.h"

namespace parity {
namespace {

class GeneratorRngTracker final : public RngTracker {
 public:
  explicit GeneratorRngTracker(const GeneratorFactory& make) {
    for (auto& g : generators_) g = make();
  }
  void seed(std::uint64_t seed, int tp_rank) override {
    set_seed(RngStream::data_parallel, seed_for(seed, "rng.data_parallel"));
    set_seed(RngStream::model_parallel,
             seed_for(seed, "rng.model_parallel", static_cast<std::uint64_t>(tp_rank)));
  }
  at::Generator generator(RngStream stream) override {
    return generators_[static_cast<int>(stream)];
  }
  RngSnapshot snapshot() const override {
    RngSnapshot s;
    for (auto& g : generators_) {
      std::lock_guard<std::mutex> lock(g.mutex());
      at::Tensor state = g.get_state();
      std::vector<std::uint8_t> bytes(static_cast<size_t>(state.numel()));
      std::memcpy(bytes.data(), state.data_ptr<std::uint8_t>(), bytes.size());
      s.states.push_back(std::move(bytes));
    }
    return s;
  }
  void restore(const RngSnapshot& snapshot) override {
    if (snapshot.states.size() != generators_.size()) {
      PARITY_FAIL("RngSnapshot has " + std::to_string(snapshot.states.size()) +
                  " streams, expected " + std::to_string(generators_.size()));
    }
    for (size_t i = 0; i < generators_.size(); ++i) {
      const auto& bytes = snapshot.states[i];
      at::Tensor state = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
      std::memcpy(state.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
      std::lock_guard<std::mutex> lock(generators_[i].mutex());
      generators_[i].set_state(state);
    }
  }

 private:
  void set_seed(RngStream stream, std::uint64_t seed) {
    at::Generator& g = generators_[static_cast<int>(stream)];
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(seed);
  }
  mutable std::array<at::Generator, kRngStreamCount> generators_;
};

}  // namespace

std::unique_ptr<RngTracker> make_generator_rng_tracker(const GeneratorFactory& make) {
  return std::make_unique<GeneratorRngTracker>(make);
}

}  // namespace parity
