#pragma once
// Element types on the host and their accumulation types: fp64 stays fp64,
// fp32 and bf16 accumulate in fp32 (as accumulation_dtype in
// harness/backend/tensor_statistics.h). The device's overloads for __nv_bfloat16 live in
// device_widen.cuh.
#include "cuda/kernels/bf16.h"

namespace parity::kernels {

template <typename T>
struct AccumulationOf {
  using type = float;
};
template <>
struct AccumulationOf<double> {
  using type = double;
};
template <typename T>
using Acc = typename AccumulationOf<T>::type;

inline float widen(float x) { return x; }
inline double widen(double x) { return x; }
inline float widen(Bf16 x) { return bf16_to_float(x); }

template <typename T>
T narrow(Acc<T> x);
template <>
inline float narrow<float>(float x) {
  return x;
}
template <>
inline double narrow<double>(double x) {
  return x;
}
template <>
inline Bf16 narrow<Bf16>(float x) {
  return float_to_bf16(x);
}

}  // namespace parity::kernels
