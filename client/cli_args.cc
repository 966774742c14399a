#include "client/cli_args.h"

#include <string_view>

#include "absl/flags/reflection.h"

namespace manyshot::client {
namespace {

// "--name=value" -> name, or empty when `arg` is not a flag.
std::string FlagName(std::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-' || arg == "--") return "";
  arg.remove_prefix(arg[1] == '-' ? 2 : 1);
  return std::string(arg.substr(0, arg.find('=')));
}

}  // namespace

ExtractedArgs ExtractRepeatedFlags(const std::vector<std::string>& args,
                                   const std::set<std::string>& repeatable) {
  ExtractedArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (i == 0) {
      out.rest.push_back(arg);
      continue;
    }
    if (arg == "--") {
      out.rest.insert(out.rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    std::string name = FlagName(arg);
    if (name.empty()) {
      out.rest.push_back(arg);
      continue;
    }
    bool has_value = arg.find('=') != std::string::npos;
    if (repeatable.count(name) > 0) {
      out.given.insert(name);
      if (has_value) {
        out.repeated[name].push_back(arg.substr(arg.find('=') + 1));
      } else if (i + 1 < args.size()) {
        out.repeated[name].push_back(args[++i]);
      } else {
        out.repeated[name].push_back("");
      }
      continue;
    }
    if (absl::FindCommandLineFlag(name) == nullptr && name.rfind("no", 0) == 0) {
      out.given.insert(name.substr(2));
    } else {
      out.given.insert(name);
    }
    out.rest.push_back(arg);
  }
  return out;
}

std::string FindUnknownFlag(const std::vector<std::string>& args) {
  static const char* const kBuiltin[] = {
      "help",      "helpfull",   "helpshort",       "helppackage",
      "helpmatch", "version",    "only_check_args", "flagfile",
      "fromenv",   "tryfromenv", "undefok"};
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") break;
    std::string name = FlagName(args[i]);
    if (name.empty()) continue;
    bool builtin = false;
    for (const char* b : kBuiltin) builtin = builtin || name == b;
    if (builtin || absl::FindCommandLineFlag(name) != nullptr) continue;
    if (name.rfind("no", 0) == 0) {
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && flag->IsOfType<bool>()) continue;
    }
    return args[i];
  }
  return "";
}

}  // namespace manyshot::client
