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
// The page reads files written by other programs (or a half-written sweep): these
// never throw on a missing key or a value of another type.
// j[key] when j is an object that has it, else null.
const nlohmann::json& at(const nlohmann::json& j, const char* key);
// j[key] when it is an array, else an empty array.
const nlohmann::json& array_at(const nlohmann::json& j, const char* key);
// j[key] as a number when it is one, else `fallback`.
double number_at(const nlohmann::json& j, const char* key, double fallback = 0);
// j[key] as a string when it is one, else `fallback`.
std::string string_at(const nlohmann::json& j, const char* key, std::string fallback = "");

}  // namespace parity::sweep::html
