#pragma once
// bf16 on the host: the 16 high bits of an fp32 (what __nv_bfloat16 stores), with
// round-to-nearest-even from fp32 like __float2bfloat16_rn. Widening is exact.
#include <cstdint>
#include <cstring>

#include "cuda/kernels/host_device.h"

namespace parity::kernels {

struct Bf16 {
  std::uint16_t bits = 0;
};

inline float bf16_to_float(Bf16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline Bf16 float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: keep it a (quiet) NaN, whatever the payload
    return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  const std::uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // ties go to the even neighbour
  return Bf16{static_cast<std::uint16_t>(u >> 16)};
}

}  // namespace parity::kernels
