// Typed, validated reads of config.json keys, shared by the config parsers (model_config.cc for
// decoder-only families, t5_config.cc): every error is INVALID_ARGUMENT naming the file and key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace manyshot::config_keys {

using Json = nlohmann::json;

// The JSON object in `path`: NOT_FOUND when it cannot be opened, INVALID_ARGUMENT naming the file
// when it is not valid JSON or not an object.
absl::StatusOr<Json> ReadJsonObject(const std::filesystem::path& path);

// The shortest decimal that reads back as `f`, as a double: 1e-5f is written "1e-05", not
// "9.999999747378752e-06", so written configs look like HF's and round-trip exactly.
double ShortestDecimal(float f);

// Reads typed keys out of one JSON object, building errors that name the file and key.
class KeyReader {
 public:
  KeyReader(const Json& obj, std::string file) : obj_(obj), file_(std::move(file)) {}

  absl::Status Error(absl::string_view key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ": key \"", key, "\" ", what));
  }

  const std::string& file() const { return file_; }

  // The value of a key Has() reports (for nested objects such as "rope_scaling").
  const Json& Value(absl::string_view key) const { return obj_.at(key); }

  bool Has(absl::string_view key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }

  // Present with the value null (transformers' way to turn an option with a default off).
  bool IsNull(absl::string_view key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && it->is_null();
  }

  // A required integer (JSON integer, or a float with an integral value) that must be > 0.
  absl::StatusOr<int64_t> PositiveInt(absl::string_view key) const {
    if (!Has(key)) return Error(key, "is missing");
    auto v = Int(key);
    if (!v.ok()) return v.status();
    if (*v <= 0) return Error(key, absl::StrCat("must be positive, got ", *v));
    return *v;
  }

  absl::StatusOr<int64_t> OptionalPositiveInt(absl::string_view key, int64_t fallback) const {
    if (!Has(key)) return fallback;
    return PositiveInt(key);
  }

  absl::StatusOr<int64_t> Int(absl::string_view key) const {
    const Json& v = obj_.at(key);
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return Error(key, "is out of range");
      }
      return v.get<int64_t>();
    }
    if (v.is_number_float()) {
      double d = v.get<double>();
      // The range first: converting a double outside int64_t's range is undefined behaviour.
      if (d > -9e18 && d < 9e18 && d == static_cast<double>(static_cast<int64_t>(d))) {
        return static_cast<int64_t>(d);
      }
    }
    return Error(key, "must be an integer");
  }

  absl::StatusOr<double> PositiveNumber(absl::string_view key,
                                        std::optional<double> fallback) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "is missing");
    }
    const Json& v = obj_.at(key);
    if (!v.is_number()) return Error(key, "must be a number");
    double d = v.get<double>();
    // Stored as float: below 1e-30 an epsilon heads for float's subnormals and then 0 (1e-60
    // became an eps of 0, a division by zero in the norms), above 1e30 for infinity.
    if (!(d >= 1e-30 && d <= 1e30)) return Error(key, "must be a number in [1e-30, 1e30]");
    return d;
  }

  absl::StatusOr<bool> Bool(absl::string_view key, bool fallback) const {
    if (!Has(key)) return fallback;
    const Json& v = obj_.at(key);
    if (!v.is_boolean()) return Error(key, "must be a boolean");
    return v.get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view key,
                                     std::optional<std::string> fallback) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "is missing");
    }
    const Json& v = obj_.at(key);
    if (!v.is_string()) return Error(key, "must be a string");
    return v.get<std::string>();
  }

  // bos/eos: an int, a list of ints (first is used), or absent/null (-1).
  absl::StatusOr<int64_t> TokenId(absl::string_view key) const {
    if (!Has(key)) return -1;
    const Json& v = obj_.at(key);
    const Json* first = &v;
    if (v.is_array()) {
      if (v.empty()) return -1;
      first = &v.front();
    }
    if (!first->is_number_integer() || first->get<int64_t>() < 0) {
      return Error(key, "must be a non-negative integer or a list of them");
    }
    return first->get<int64_t>();
  }

 private:
  const Json& obj_;
  std::string file_;
};

}  // namespace manyshot::config_keys
