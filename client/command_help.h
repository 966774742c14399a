// Per-command help: `manyshot COMMAND --help` prints that command's usage and the flags it reads,
// each with its help text and default taken from the flag's definition (so they cannot drift).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace manyshot::client {

// --help, -help, -h or --helpshort.
bool IsHelpFlag(std::string_view arg);

// The first argument after argv[0] that names a command, or "".
std::string FindCommand(const std::vector<std::string>& args);

// Prints `command`'s help to `out`; false when there is no such command.
bool PrintCommandHelp(const std::string& command, std::FILE* out);

}  // namespace manyshot::client
