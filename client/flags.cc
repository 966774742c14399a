#include "client/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle the server certificate must be signed by; connects with TLS");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate (chain) for mutual TLS; with --tls_key_file and --tls_ca_file");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name the server certificate is checked against (default: the host of --server)");
ABSL_FLAG(std::string, token, "",
          "Bearer token: every call carries 'authorization: Bearer TOKEN'; without TLS only to "
          "loopback servers. Other local users can read it in ps: prefer --token_file");
ABSL_FLAG(std::string, token_file, "",
          "File holding the bearer token (surrounding whitespace ignored); see --token");

ABSL_FLAG(std::string, file, "",
          "create/classify/score: examples file; '-' (classify, score) reads stdin");
ABSL_FLAG(std::string, format, "",
          "jsonl|csv|tsv|text; default from the file's extension (classify: text for stdin)");
ABSL_FLAG(std::string, text_field, "text", "Field (column, dotted JSON path) holding the input");
ABSL_FLAG(std::string, label_field, "label", "create: field holding the label");
ABSL_FLAG(std::vector<std::string>, field, {},
          "Repeatable NAME=COLUMN: fills template placeholder {NAME} from field COLUMN");

ABSL_FLAG(std::string, template, "",
          "create: input template, e.g. 'Sentence: {text}\\nLabel:' (\\n, \\t interpreted)");
ABSL_FLAG(std::optional<std::string>, answer_template, std::nullopt,
          "create: answer template (server default ' {label}')");
ABSL_FLAG(std::optional<std::string>, separator, std::nullopt,
          "create: text after every demonstration (server default '\\n\\n')");
ABSL_FLAG(std::vector<std::string>, labels, {},
          "create: label words in label-index order, e.g. negative,positive");
ABSL_FLAG(std::string, label_map, "",
          "create: raw label value -> label word, e.g. 0=negative,1=positive");
ABSL_FLAG(uint32_t, group_length, 0, "create: group length L in tokens (0: server default)");
ABSL_FLAG(std::string, alignment, "", "create: truncate|attention_mask|pad_space");
ABSL_FLAG(uint64_t, shuffle_seed, 0, "create: shuffle seed (0 keeps the file's order)");
ABSL_FLAG(bool, calibrate, false, "create: contextual calibration");
ABSL_FLAG(std::optional<std::string>, calibration_text, std::nullopt,
          "create: content-free input for calibration (server default 'N/A')");
ABSL_FLAG(std::string, long_demonstrations, "",
          "create: reject|truncate demonstrations longer than a group");
ABSL_FLAG(uint32_t, max_query_tokens, 0, "create: room reserved for a query (0: server default)");
ABSL_FLAG(uint32_t, max_answer_tokens, 0,
          "create: room reserved for an answer (0: server default)");
ABSL_FLAG(std::string, truncate, "",
          "Inputs longer than the task's max_query_tokens: none (refused), keep_start or keep_end "
          "(cut the input's longest value); create: the task's default; classify, score, "
          "generate: this request's (default: the task's)");
ABSL_FLAG(bool, dry_run, false,
          "create: print the first demonstrations and a query as the server renders them, and "
          "send nothing");
ABSL_FLAG(bool, replace, false, "create: replace an existing task with different content");
ABSL_FLAG(int, chunk, 1000, "create: demonstrations per CreateTask request message");

ABSL_FLAG(std::string, mode, "",
          "structured|conventional|parallel (decoder-only), conventional|saicl|fid|ensemble|"
          "group_fid (encoder-decoder, create only) (create: the task's default)");
ABSL_FLAG(uint32_t, groups, 0,
          "create: G, demonstration groups of group_fid / ensemble (T5); eval: group_fid's G");
ABSL_FLAG(uint32_t, segment_length, 0,
          "create: S, tokens per demonstration / test segment (T5; 0: min(256, longest))");
ABSL_FLAG(double, rescale_factor, 0, "Rescale factor for structured mode (0: default M)");

ABSL_FLAG(int, batch, 32, "classify/score: inputs per request");
ABSL_FLAG(bool, stream, false, "classify: use StreamClassify (all batches on one stream)");

ABSL_FLAG(std::string, input, "",
          "classify: an input text, repeatable (instead of --file); score/generate: the input "
          "text");
ABSL_FLAG(std::vector<std::string>, candidate, {}, "score: repeatable candidate answer");

ABSL_FLAG(uint32_t, beam_width, 0, "generate: beam search with this width (0 or 1: greedy)");
ABSL_FLAG(std::optional<double>, length_penalty, std::nullopt,
          "generate: beam ranking length penalty (server default 0.6)");
ABSL_FLAG(uint32_t, max_new_tokens, 0, "generate: at most this many tokens (0: server default)");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "generate: repeatable stop string (\\n, \\t interpreted)");
ABSL_FLAG(bool, no_stop_at_eos, false, "generate: keep generating past the eos token");

ABSL_FLAG(uint32_t, page_size, 0, "list: tasks per ListTasks page (0: server default 50)");
