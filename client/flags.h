// Flags of the `manyshot` subcommands (the global --server, --json, --timeout live in main.cc)
// and of the connection (TLS, bearer token; see connection.h).
// --field, --candidate and --stop are repeatable: main.cc collects their values before absl
// parses the rest (see cli_args.h); they are declared here for --help.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"

// Connection (every command).
ABSL_DECLARE_FLAG(std::string, tls_ca_file);
ABSL_DECLARE_FLAG(std::string, tls_cert_file);
ABSL_DECLARE_FLAG(std::string, tls_key_file);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(std::string, token);
ABSL_DECLARE_FLAG(std::string, token_file);

// Example files (create, classify, score).
ABSL_DECLARE_FLAG(std::string, file);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, text_field);
ABSL_DECLARE_FLAG(std::string, label_field);
ABSL_DECLARE_FLAG(std::vector<std::string>, field);

// create
ABSL_DECLARE_FLAG(std::string, template);
ABSL_DECLARE_FLAG(std::optional<std::string>, answer_template);
ABSL_DECLARE_FLAG(std::optional<std::string>, separator);
ABSL_DECLARE_FLAG(std::vector<std::string>, labels);
ABSL_DECLARE_FLAG(std::string, label_map);
ABSL_DECLARE_FLAG(uint32_t, group_length);
ABSL_DECLARE_FLAG(std::string, alignment);
ABSL_DECLARE_FLAG(uint64_t, shuffle_seed);
ABSL_DECLARE_FLAG(bool, calibrate);
ABSL_DECLARE_FLAG(std::optional<std::string>, calibration_text);
ABSL_DECLARE_FLAG(std::string, long_demonstrations);
ABSL_DECLARE_FLAG(uint32_t, max_query_tokens);
ABSL_DECLARE_FLAG(uint32_t, max_answer_tokens);
ABSL_DECLARE_FLAG(std::string, truncate);
ABSL_DECLARE_FLAG(bool, dry_run);
ABSL_DECLARE_FLAG(bool, replace);
ABSL_DECLARE_FLAG(int, chunk);

// create, classify, score, generate
ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(uint32_t, groups);
ABSL_DECLARE_FLAG(uint32_t, segment_length);
ABSL_DECLARE_FLAG(double, rescale_factor);

// classify, score
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(bool, stream);

// score, generate
ABSL_DECLARE_FLAG(std::string, input);
ABSL_DECLARE_FLAG(std::vector<std::string>, candidate);

// generate
ABSL_DECLARE_FLAG(uint32_t, beam_width);
ABSL_DECLARE_FLAG(std::optional<double>, length_penalty);
ABSL_DECLARE_FLAG(uint32_t, max_new_tokens);
ABSL_DECLARE_FLAG(std::vector<std::string>, stop);
ABSL_DECLARE_FLAG(bool, no_stop_at_eos);

// list
ABSL_DECLARE_FLAG(uint32_t, page_size);
