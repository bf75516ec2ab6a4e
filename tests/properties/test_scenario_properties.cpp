// The scenario properties of contract.md section 5 over generated scenarios
// (scenarios/generators.h). docs/property-suite.md.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
