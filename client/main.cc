// manyshot: the command-line client for manyshot-server.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "client/cli_args.h"
#include "client/command_help.h"
#include "client/commands.h"
#include "client/connection.h"
#include "client/eval/command.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "manyshot-server address host:port");
ABSL_FLAG(bool, json, false, "Print JSON instead of human-readable text");
ABSL_FLAG(int, timeout, 30,
          "Per-call deadline in seconds (streaming calls: only when given explicitly)");

namespace {

constexpr char kUsage[] =
    "manyshot: command-line client for manyshot-server\n"
    "usage: manyshot [--server=HOST:PORT] [--json] [--timeout=SECONDS] COMMAND [ARGS] [FLAGS]\n"
    "       the server: --server, else $MANYSHOT_SERVER, else 127.0.0.1:50051\n"
    "       TLS: --tls_ca_file=CA.pem [--tls_cert_file=C.pem --tls_key_file=C.key]\n"
    "       auth: --token_file=PATH | --token=TOKEN (sends 'authorization: Bearer TOKEN')\n"
    "commands:\n"
    "  health [SERVICE]        health check; exit status 0 when SERVING\n"
    "  info                    model, backend, cache and limits of the server\n"
    "  create TASK_ID --file=PATH --template=T [--labels=a,b] [--label_map=0=a,1=b] ...\n"
    "                          register a task from a jsonl/csv/tsv file, showing progress\n"
    "  classify TASK_ID [--file=PATH|-|--input=TEXT ...] [--batch=32] [--stream]\n"
    "                          one line per input: LABEL<TAB>probability<TAB>input\n"
    "  score TASK_ID --input=TEXT --candidate=A --candidate=B | --file=ITEMS.jsonl\n"
    "  generate TASK_ID --input=TEXT [--beam_width=N] [--max_new_tokens=N] [--stop=S]\n"
    "  list [--page_size=N]    all tasks\n"
    "  get TASK_ID             one task\n"
    "  delete TASK_ID          delete a task and its cached state\n"
    "  eval --preset=NAME|--dataset=DIR|--train_file=PATH [--shots=1,4,16,64,256,1000]\n"
    "       [--modes=structured,parallel,conventional] [--samples=3] [--seed=1]\n"
    "       [--test_limit=200] [--plot=FILE.png] [--json]\n"
    "                          accuracy vs demonstrations over seeded samples (mean, std);\n"
    "                          creates and deletes its own tasks; --preset=list lists presets\n"
    "exit status: 0 ok, 1 RPC error, 2 usage error. A command's flags: manyshot COMMAND --help;\n"
    "every flag: manyshot --helpfull\n";

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  absl::FlagsUsageConfig usage_config;
  usage_config.version_string = [] { return std::string("manyshot " MANYSHOT_VERSION "\n"); };
  // --help lists the CLI's own flags (absl matches files named after the binary by default,
  // which found none); a command's flags: manyshot COMMAND --help.
  usage_config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "client/");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  // Repeatable flags are taken out before absl parses the rest (absl keeps only the last value).
  manyshot::client::ExtractedArgs extracted = manyshot::client::ExtractRepeatedFlags(
      std::vector<std::string>(argv, argv + argc), {"field", "candidate", "stop", "input"});
  // `manyshot COMMAND --help`: that command's usage and flags (absl's --help: the global usage).
  for (const std::string& arg : extracted.rest) {
    if (!manyshot::client::IsHelpFlag(arg)) continue;
    const std::string command = manyshot::client::FindCommand(extracted.rest);
    if (!command.empty() && manyshot::client::PrintCommandHelp(command, stdout)) return 0;
    break;
  }
  std::string unknown = manyshot::client::FindUnknownFlag(extracted.rest);
  if (!unknown.empty()) {
    std::fprintf(stderr, "manyshot: unknown flag %s (see manyshot --helpfull)\n", unknown.c_str());
    return 2;
  }
  std::vector<char*> rest_argv;
  for (std::string& arg : extracted.rest) rest_argv.push_back(arg.data());
  rest_argv.push_back(nullptr);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(rest_argv.size()) - 1, rest_argv.data());
  if (positional.size() < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  manyshot::client::CliContext cli;
  // MANYSHOT_SERVER names the server when --server is not given.
  std::string server = absl::GetFlag(FLAGS_server);
  const char* from_env = std::getenv("MANYSHOT_SERVER");
  if (extracted.given.count("server") == 0 && from_env != nullptr && *from_env != '\0') {
    server = from_env;
  }
  absl::Status connected =
      manyshot::client::Connect(manyshot::client::ConnectionOptionsFromFlags(server), &cli);
  if (!connected.ok()) {
    std::fprintf(stderr, "manyshot: %s\n", std::string(connected.message()).c_str());
    return 2;
  }
  cli.json = absl::GetFlag(FLAGS_json);
  cli.timeout_seconds = absl::GetFlag(FLAGS_timeout);
  cli.timeout_explicit = extracted.given.count("timeout") > 0;
  cli.repeated = extracted.repeated;
  std::string command = positional[1];
  cli.args.assign(positional.begin() + 2, positional.end());
  using namespace manyshot::client;  // NOLINT: the command table below
  if (command == "health") return RunHealth(cli);
  if (command == "info") return RunInfo(cli);
  if (command == "create") return RunCreate(cli);
  if (command == "get") return RunGet(cli);
  if (command == "list") return RunList(cli);
  if (command == "delete") return RunDelete(cli);
  if (command == "classify") return RunClassify(cli);
  if (command == "score") return RunScore(cli);
  if (command == "generate") return RunGenerate(cli);
  if (command == "eval") return RunEval(cli);
  std::fprintf(stderr, "manyshot: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
