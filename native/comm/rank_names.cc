// How reports name ranks (group.h): world ranks always, plus the local rank on a
// communicator made by split, and the culpritWorldRanks detail every communicator
// error carries.
#include "comm/group.h"

namespace ascent {
namespace comm {

std::string RankList(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string RanksPhrase(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  return "ranks " + RankList(ranks);
}

void CopyCulprits(const ErrorInfo& cause, ErrorInfo& out) {
  const Detail* d = cause.Find("culpritWorldRanks");
  out.details.push_back(d ? *d : Ints("culpritWorldRanks", {}));
}

std::vector<int> CommGroup::WorldRanks(const std::vector<int>& local) const {
  std::vector<int> out;
  for (int r : local) out.push_back(WorldRank(r));
  return out;
}

std::string CommGroup::Who(int local) const {
  if (is_world_) return "rank " + std::to_string(local);
  return "world rank " + std::to_string(WorldRank(local)) + " (local " + std::to_string(local) + ")";
}

std::string CommGroup::WhoList(const std::vector<int>& local) const {
  if (is_world_ || local.empty()) return RanksPhrase(local);
  if (local.size() == 1) return Who(local[0]);
  return "world ranks " + RankList(WorldRanks(local)) + " (local " + RankList(local) + ")";
}

void CommGroup::AddRanks(ErrorInfo& info, const std::string& key, const std::vector<int>& local) const {
  info.details.push_back(Ints(key, WorldRanks(local)));
  if (!is_world_) info.details.push_back(Ints(key + "Local", local));
}

void CommGroup::SetCulprits(ErrorInfo& info, const std::vector<int>& local) const {
  info.details.push_back(Ints("culpritWorldRanks", WorldRanks(local)));
}

}  // namespace comm
}  // namespace ascent
