// Precompiled header: the heavy, stable headers only. Never include this
// directly; CMake force-includes it.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
