// Test support for T5: the tiny models of tests/golden/t5_<name>.json, written from the spec each
// golden records (make-tiny-t5's flags) into a per-process temp directory and loaded once on the
// shared CPU test backend.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/synthetic/tiny_t5_model.h"
#include "engine/t5/t5_model.h"
#include "nlohmann/json.hpp"

namespace manyshot::testing {

inline const std::vector<std::string> kT5Goldens = {"v1_0", "v1_1"};

// tests/golden/t5_<name>.json, parsed.
const nlohmann::json& T5Golden(const std::string& name);

// The golden's "model" object as a TinyT5Spec.
TinyT5Spec T5SpecFromGolden(const nlohmann::json& model);

// The golden's model written to disk (once per process); returns its directory.
std::filesystem::path T5GoldenModelDir(const std::string& name);

// The golden's model loaded on TestBackend() (once per process); aborts the test on failure.
const T5Model& T5GoldenModel(const std::string& name);

}  // namespace manyshot::testing
