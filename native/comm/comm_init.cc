// The module-level communicator functions (commUniqueId, commInitRank,
// commAbortById), rows of one small table read through the shared Reader, and
// InitComm, which installs them with the Communicator class and this env's
// communicator state.
#include <algorithm>
#include <cstdio>
#include <random>

#include "args.h"
#include "comm/comm_env.h"
#include "comm/communicator.h"
#include "device/registry.h"
#include "env_data.h"

namespace ascent {

namespace {

std::string RandomHex128() {
  std::random_device rd;
  char buf[33];
  for (int i = 0; i < 4; ++i) std::snprintf(buf + 8 * i, 9, "%08x", static_cast<unsigned>(rd()));
  return std::string(buf, 32);
}


// commUniqueId()
Napi::Value UniqueId(Reader& r) { return Napi::String::New(r.Env(), RandomHex128()); }

// commInitRank(id, nranks, rank, device, connectTimeoutMs, execTimeoutMs, traceDir, token) -> Communicator
// The rendezvous wait runs on its own thread; the token completes once all ranks joined.
Napi::Value InitRank(Reader& r) {
  std::string id = r.String("uniqueId");
  if (id.size() != 32 || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    r.Fail("Expected a uniqueId of 32 lowercase hex digits (from Communicator.uniqueId()).", {Str("argument", "uniqueId")});
  }
  uint64_t nranks = r.Index("nranks");
  if (nranks == 0 || nranks > 4096) r.Fail("Expected nranks in [1, 4096] but received " + std::to_string(nranks) + ".", {Str("argument", "nranks")});
  uint64_t rank = r.Index("rank");
  uint64_t device = r.Index("device");
  if (device >= static_cast<uint64_t>(Registry::kMaxDevices)) {
    r.Fail("Device ordinal " + std::to_string(device) + " out of range [0, " + std::to_string(Registry::kMaxDevices) + ").",
           {Str("argument", "device")});
  }
  Registry::Get().Existing(static_cast<int>(device));
  double connect_ms = r.Timeout("connectTimeoutMs");
  double exec_ms = r.Timeout("execTimeoutMs");
  std::string trace_dir = r.String("traceDir");
  uint64_t token = r.Token();
  comm::CommEnv& ce = comm::GetCommEnv(r.Env());
  // A communicator made by initRank is a world: its ranks are world ranks.
  std::vector<int> world(nranks);
  for (size_t q = 0; q < world.size(); ++q) world[q] = static_cast<int>(q);
  std::shared_ptr<comm::CommGroup> g = comm::GroupTable::Get().Join(
      id, static_cast<int>(nranks), static_cast<int>(std::min<uint64_t>(rank, 1u << 30)), static_cast<int>(device),
      trace_dir, world, true);
  auto impl = std::make_shared<comm::CommImpl>();
  impl->group = g;
  impl->rank = static_cast<int>(rank);
  impl->size = static_cast<int>(nranks);
  impl->device = static_cast<int>(device);
  impl->exec_timeout_ms = exec_ms;
  impl->connect_timeout_ms = connect_ms;
  impl->trace_dir = trace_dir;
  Napi::Object obj = comm::CommWrap::NewInstance(r.Env(), impl);
  EnvData* data = EnvData::Get(r.Env());
  int me = impl->rank;
  ce.Spawn([g, impl, me, connect_ms, data, token] {
    try {
      g->WaitAllJoined(me, comm::Deadline(connect_ms), connect_ms);
      impl->ready.store(true, std::memory_order_release);
      comm::PostCompletion(data, token, nullptr);
    } catch (const AscentException& e) {
      comm::PostCompletion(data, token, &e.info());
    }
  });
  return obj;
}

// commAbortById(id, reason, culpritWorldRanks?) -> whether a live communicator with
// that id was found. The culprits (e.g. the rank whose worker died) default to none.
Napi::Value AbortById(Reader& r) {
  std::string id = r.String("id");
  std::string reason = r.String("reason");
  std::vector<int> culprits;
  if (!r.At(2).Value().IsUndefined()) {
    for (uint64_t w : r.At(2).Counts("culpritWorldRanks", -1, 1u << 20)) {
      if (w > 2147483647u) r.Fail("Expected world ranks (32-bit integers) in culpritWorldRanks.", {Str("argument", "culpritWorldRanks")});
      culprits.push_back(static_cast<int>(w));
    }
  }
  std::shared_ptr<comm::CommGroup> g = comm::GroupTable::Get().Find(id);
  if (!g) return Napi::Boolean::New(r.Env(), false);
  g->Abort(ErrorInfo{kCommAborted, reason, {Str("reason", reason), Ints("culpritWorldRanks", culprits)}}, 0,
           g->AnyInFlight());
  return Napi::Boolean::New(r.Env(), true);
}

struct ModuleRow {
  const char* name;
  Napi::Value (*run)(Reader& r);
};

const ModuleRow kModuleFunctions[] = {
    {"commUniqueId", UniqueId},
    {"commInitRank", InitRank},
    {"commAbortById", AbortById},
};

// Every module function runs this with its row as the function's data.
Napi::Value RunModuleFunction(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    const auto* row = static_cast<const ModuleRow*>(info.Data());
    Reader r(info, row->name);
    return row->run(r);
  });
}

}  // namespace

void InitComm(Napi::Env env, Napi::Object exports) {
  EnvData* data = EnvData::Get(env);
  Napi::Function ctor = comm::CommWrap::Define(env);
  data->comm_ctor = Napi::Persistent(ctor);
  data->comm = std::make_unique<comm::CommEnv>();
  exports.Set("Communicator", ctor);
  for (const ModuleRow& row : kModuleFunctions) {
    exports.Set(row.name, Napi::Function::New(env, RunModuleFunction, row.name, const_cast<ModuleRow*>(&row)));
  }
}

}  // namespace ascent
