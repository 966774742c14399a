// Command-line handling that absl flags leave to us: repeatable flags (--candidate=A --candidate=B
// keeps both; absl keeps only the last) and unknown flags as usage errors (exit 2, not absl's 1).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace manyshot::client {

struct ExtractedArgs {
  // The arguments left for absl::ParseCommandLine (argv[0] first).
  std::vector<std::string> rest;
  // Values of the repeatable flags, in command-line order.
  std::map<std::string, std::vector<std::string>> repeated;
  // Names of every flag given (without dashes, "nofoo" as "foo"), e.g. to tell an explicit
  // --timeout from its default.
  std::set<std::string> given;
};

// Removes `--NAME=VALUE` and `--NAME VALUE` (also with one dash) for each repeatable NAME. Stops at
// "--" (everything after it is positional and kept).
ExtractedArgs ExtractRepeatedFlags(const std::vector<std::string>& args,
                                   const std::set<std::string>& repeatable);

// The first flag in `args` (skipping argv[0], stopping at "--") that absl does not know, as written
// ("--bogus=1"); empty when all are known. Boolean "--noNAME" counts as NAME.
std::string FindUnknownFlag(const std::vector<std::string>& args);

}  // namespace manyshot::client
