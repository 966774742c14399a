// A demonstration or a query input, as every task kind takes it.
#pragma once

#include <map>
#include <string>

namespace manyshot {

// `text` fills a template's only placeholder when `fields` lacks it; `label` is the answer text
// (demonstrations only).
struct Example {
  std::string text;
  std::map<std::string, std::string> fields;
  std::string label;
};

}  // namespace manyshot
