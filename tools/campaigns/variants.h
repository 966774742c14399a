// The task contents the kill campaign registers, replaces and deletes, and the inputs it
// classifies. Every variant has different demonstrations (so different KV entries), and they
// differ in labels (two or three, different words), group length, shuffling and calibration, so a
// replace always changes what is served. The heavy ones encode for long enough on one compute
// thread that a kill lands in the middle of the encode.
#pragma once

#include <string>
#include <vector>

#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::campaign {

struct Variant {
  std::string name;
  v1::TaskSpec spec;
  std::vector<v1::Demonstration> demos;
  bool heavy = false;
};

std::vector<Variant> MakeVariants();

// The texts every check classifies (all at once) and serving requests classify (subsets).
const std::vector<std::string>& CheckInputs();

}  // namespace manyshot::campaign
