// Exact, partition-additive fingerprint of fp32 tensor regions (weight-sync
// verification). Every element read contributes Mix(globalIndex, valueBits) and the
// result is the sum mod 2^64 (fingerprint.cc defines Mix), so any split of a canonical tensor into regions (TP
// slices, fsdp2 shards, packed or transposed engine layouts) adds up to the same
// number, computed in any order. Mix is a bijection of the value bits for a fixed
// index: changing one element always changes the fingerprint.
#pragma once

#include <cstdint>
#include <vector>

namespace ascent {

struct FingerprintArgs {
  const uint32_t* src = nullptr;  // fp32 bits; element (i0..ik) at src[sum(i_d * local_strides[d])]
  std::vector<int64_t> shape;
  std::vector<int64_t> local_strides;
  // Canonical flat index of element (i0..ik): global_offset + sum(i_d * global_strides[d]).
  std::vector<int64_t> global_strides;
  int64_t global_offset = 0;
  // Elements whose canonical index g is >= limit are skipped (padding).
  uint64_t limit = 0;
  // With filter_period > 0, only g with (g mod period) in [filter_start, filter_start + filter_len) count.
  uint64_t filter_period = 0, filter_start = 0, filter_len = 0;
  uint64_t* out = nullptr;  // += the region's fingerprint (mod 2^64)
};

void Fingerprint(const FingerprintArgs& a);

}  // namespace ascent
