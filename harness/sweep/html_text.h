#pragma once
// Text helpers of the sweep report page: escaping and number formatting.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace parity::sweep::html {

// & < > " ' as entities: safe in element text and in quoted attributes.
std::string escape(std::string_view text);
// "1.23e-05"-style short form (%.3g).
std::string number(double v);
// A JSON value as a person reads it: a string without quotes, anything else as JSON.
std::string value_text(const nlohmann::json& v);
// j[key] as a string when it is one, else `fallback`.
std::string string_at(const nlohmann::json& j, const char* key, std::string fallback = "");

}  // namespace parity::sweep::html
