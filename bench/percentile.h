// The one percentile of the bench figures (p50, p99, medians of rounds and of timed runs).
#pragma once

#include <vector>

namespace manyshot::bench {

// The linearly interpolated percentile (p in [0, 1]) of `values`, 0 when empty: the value at rank
// p * (n - 1) of the sorted values, interpolating between the two nearest ranks (numpy's default,
// "linear"). The median (p = 0.5) of an even count is the mean of the two middle values.
double Percentile(std::vector<double> values, double p);

}  // namespace manyshot::bench
