// The q-quantile (0..1) of a sample, by nearest rank; 0 for no sample. The
// lab's one routine for samples it keeps whole (path probe delays, the WAN
// bottleneck's queue delays); histograms have their own (GapHistogram).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace rg::lab {

template <typename T>
T sample_quantile(std::vector<T> v, double q) {
  if (v.empty()) return T{};
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace rg::lab
