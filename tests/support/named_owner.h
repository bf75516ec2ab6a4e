#pragma once
// An observation owner with a given canonical name and, optionally, the
// sequence_parallel of its config (Megatron's owner.config.sequence_parallel;
// nullopt: an owner without a config). What tests notify through.
#include <optional>
#include <string>
#include <utility>

#include "harness/observation/tensor_observation.h"

namespace parity::testing {

class NamedOwner : public ObservationOwner {
 public:
  explicit NamedOwner(std::string name, std::optional<bool> sequence_parallel = std::nullopt)
      : name_(std::move(name)), sequence_parallel_(sequence_parallel) {}
  const std::string& canonical_name() const override { return name_; }
  std::optional<bool> config_sequence_parallel() const override { return sequence_parallel_; }

 private:
  std::string name_;
  std::optional<bool> sequence_parallel_;
};

}  // namespace parity::testing
