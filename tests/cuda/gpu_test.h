#pragma once
// GPU tests skip visibly (GTEST_SKIP with the reason, counted as skipped by
// CTest) on a machine without a CUDA device, and run on one.
#include <gtest/gtest.h>

#include "cuda/cuda_device.h"

#define PARITY_REQUIRE_GPU()                                                            \
  do {                                                                                  \
    if (const std::string why = ::parity::gpu::cuda_unavailable_reason(); !why.empty()) \
      GTEST_SKIP() << why;                                                              \
  } while (0)
