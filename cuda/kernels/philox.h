#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC'11), the counter-based generator of cuRAND and PyTorch's CUDA generator,
// written once for host and device so a host twin draws the kernel's mask.
//
// Keying used by the dropout kernels: key = seed (64 bits), counter =
// (group of 4 elements as 64 bits, offset as 64 bits). Element i takes word
// i % 4 of the block for group i / 4. A launch over n elements uses the counters
// of groups [0, ceil(n / 4)) at its offset: the caller (the rank's tracker)
// advances its offset by at least one per launch so launches never share a draw.
#include <cstdint>

#include "cuda/kernels/host_device.h"

namespace parity::kernels {

struct Philox4x32 {
  std::uint32_t v[4];
};

PARITY_HD inline void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                     std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// The ten rounds on counter `c` with key (k0, k1).
PARITY_HD inline Philox4x32 philox4x32_10(Philox4x32 c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c.v[0], hi0, lo0);
    philox_mulhilo(kMul1, c.v[2], hi1, lo1);
    c = Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// The four 32-bit draws for elements [4 * group, 4 * group + 4) under (seed, offset).
PARITY_HD inline Philox4x32 philox_group(std::uint64_t seed, std::uint64_t offset,
                                         std::uint64_t group) {
  const Philox4x32 counter{
      {static_cast<std::uint32_t>(group), static_cast<std::uint32_t>(group >> 32),
       static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(offset >> 32)}};
  return philox4x32_10(counter, static_cast<std::uint32_t>(seed),
                       static_cast<std::uint32_t>(seed >> 32));
}

// Keep an element iff its draw, as a uniform in [0, 1) with 24 bits, is >= p:
// an exact float comparison, the same on host and device; P(keep) = 1 - p
// rounded to a multiple of 2^-24.
PARITY_HD inline bool dropout_keep(std::uint32_t draw, float p) {
  return static_cast<float>(draw >> 8) * 0x1p-24f >= p;
}

}  // namespace parity::kernels
