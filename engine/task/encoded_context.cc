#include "engine/task/encoded_context.h"

namespace manyshot {

size_t EncodedContext::bytes() const {
  size_t per_row = kv.k.empty() ? 0 : kv.k.front().RowBytes();
  return 2 * kv.k.size() * static_cast<size_t>(tokens) * per_row;
}

}  // namespace manyshot
