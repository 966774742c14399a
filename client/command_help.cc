#include "client/command_help.h"

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"

namespace manyshot::client {
namespace {

struct CommandHelp {
  const char* name;
  const char* usage;
  const char* summary;
  std::vector<const char*> flags;
};

const std::vector<CommandHelp>& Commands() {
  static const std::vector<CommandHelp> commands = {
      {"health", "manyshot health [SERVICE]", "Health check; exit status 0 when SERVING.", {}},
      {"info", "manyshot info", "Model, backend, cache sizes and limits of the server.", {}},
      {"create",
       "manyshot create TASK_ID --file=PATH --template=T [--labels=a,b | --label_map=0=a,1=b] "
       "[FLAGS]",
       "Registers a task from a jsonl/csv/tsv file of labelled demonstrations, showing "
       "progress.",
       {"file",
        "format",
        "text_field",
        "label_field",
        "field",
        "template",
        "answer_template",
        "separator",
        "labels",
        "label_map",
        "mode",
        "group_length",
        "alignment",
        "groups",
        "segment_length",
        "rescale_factor",
        "shuffle_seed",
        "calibrate",
        "calibration_text",
        "long_demonstrations",
        "max_query_tokens",
        "max_answer_tokens",
        "truncate",
        "dry_run",
        "replace",
        "chunk"}},
      {"classify",
       "manyshot classify TASK_ID [--file=PATH|- | --input=TEXT ...] [FLAGS]",
       "One line per input: LABEL<TAB>probability<TAB>input (--json: one object per line).",
       {"file", "input", "format", "text_field", "field", "batch", "stream", "mode",
        "rescale_factor", "truncate"}},
      {"score",
       "manyshot score TASK_ID --input=TEXT --candidate=A --candidate=B | --file=ITEMS.jsonl",
       "Scores each candidate answer of an input.",
       {"input", "candidate", "file", "format", "text_field", "field", "mode", "rescale_factor",
        "truncate"}},
      {"generate",
       "manyshot generate TASK_ID --input=TEXT [FLAGS]",
       "Generates an answer, printing tokens as they come.",
       {"input", "beam_width", "length_penalty", "max_new_tokens", "stop", "no_stop_at_eos", "mode",
        "rescale_factor", "truncate"}},
      {"list", "manyshot list [--page_size=N]", "All tasks.", {"page_size"}},
      {"get", "manyshot get TASK_ID", "One task.", {}},
      {"delete", "manyshot delete TASK_ID", "Deletes a task and its cached state.", {}},
      {"eval",
       "manyshot eval --preset=NAME|--dataset=DIR|--train_file=PATH [FLAGS]",
       "Accuracy against the number of demonstrations over seeded samples (mean, std); creates "
       "and deletes its own tasks.",
       {"preset",          "dataset",   "datasets_dir",
        "train_file",      "test_file", "shots",
        "modes",           "samples",   "seed",
        "test_limit",      "plot",      "template",
        "labels",          "label_map", "text_field",
        "label_field",     "field",     "format",
        "group_length",    "groups",    "max_query_tokens",
        "answer_template", "separator", "batch"}},
  };
  return commands;
}

}  // namespace

bool IsHelpFlag(std::string_view arg) {
  return arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpshort";
}

std::string FindCommand(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    for (const CommandHelp& c : Commands()) {
      if (args[i] == c.name) return args[i];
    }
  }
  return "";
}

bool PrintCommandHelp(const std::string& command, std::FILE* out) {
  for (const CommandHelp& c : Commands()) {
    if (command != c.name) continue;
    std::fprintf(out, "usage: %s\n%s\n", c.usage, c.summary);
    if (!c.flags.empty()) std::fprintf(out, "\nflags:\n");
    for (const char* name : c.flags) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr) continue;
      const std::string def = flag->DefaultValue();
      std::fprintf(out, "  --%s%s\n      %s\n", name,
                   def.empty() ? "" : (" (default: " + def + ")").c_str(), flag->Help().c_str());
    }
    std::fprintf(out,
                 "\nglobal flags (--server, $MANYSHOT_SERVER, --json, --timeout, TLS, tokens): "
                 "manyshot --help\n");
    return true;
  }
  return false;
}

}  // namespace manyshot::client
