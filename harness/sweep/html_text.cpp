#include "harness/sweep/html_text.h"

#include <cstdio>

namespace parity::sweep::html {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

const nlohmann::json& at(const nlohmann::json& j, const char* key) {
  static const nlohmann::json null;
  if (!j.is_object()) return null;
  const auto it = j.find(key);
  return it != j.end() ? *it : null;
}

const nlohmann::json& array_at(const nlohmann::json& j, const char* key) {
  static const nlohmann::json empty = nlohmann::json::array();
  const nlohmann::json& v = at(j, key);
  return v.is_array() ? v : empty;
}

double number_at(const nlohmann::json& j, const char* key, double fallback) {
  const nlohmann::json& v = at(j, key);
  return v.is_number() ? v.get<double>() : fallback;
}

std::string string_at(const nlohmann::json& j, const char* key, std::string fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace parity::sweep::html
