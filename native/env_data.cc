#include "env_data.h"

#include "comm/comm_env.h"
#include "device/stream.h"

namespace ascent {

void CallCompletion(Napi::Env env, Napi::Function callback, EnvData* context, Completion* data) {
  // Post queues the completions itself and calls the TSFN with no data: one call per batch.
  // Env teardown drains the TSFN queue with a null env (and EnvData may be gone by then);
  // the completions still queued are freed with EnvData.
  delete data;
  if (env == nullptr || callback.IsEmpty() || context == nullptr) return;
  context->Deliver(env, callback);
}

void EnvData::Deliver(Napi::Env env, Napi::Function callback) {
  std::vector<std::unique_ptr<Completion>> batch;
  {
    std::lock_guard<std::mutex> lock(tsfn_state_->mu);
    batch.swap(posted_);
    call_queued_ = false;
  }
  Napi::HandleScope scope(env);
  size_t i = 0;
  while (i < batch.size()) {
    // A run of plain successes goes as one call with their tokens (the common case,
    // back-to-back collectives), instead of one call (and one microtask checkpoint) each.
    size_t j = i;
    while (j < batch.size() && batch[j]->ok && !batch[j]->has_bytes) ++j;
    // Nothing may escape into the TSFN machinery (std::terminate); during env teardown
    // calling into JS fails and the completions have nobody left to resolve.
    try {
      if (j - i > 1) {
        Napi::Array tokens = Napi::Array::New(env, j - i);
        for (size_t k = i; k < j; ++k) tokens.Set(static_cast<uint32_t>(k - i), static_cast<double>(batch[k]->token));
        i = j;
        callback.Call({tokens});
        continue;
      }
      Completion& c = *batch[i++];
      Napi::Value err = env.Undefined();
      Napi::Value bytes = env.Undefined();
      if (!c.ok) err = MakeJsError(env, c.error);
      if (c.has_bytes) {
        Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, c.bytes.size());
        if (!c.bytes.empty()) std::memcpy(ab.Data(), c.bytes.data(), c.bytes.size());
        bytes = ab;
      }
      callback.Call({Napi::Number::New(env, static_cast<double>(c.token)), err, bytes});
    } catch (const Napi::Error&) {
    }
  }
}

void EnvData::Install(Napi::Env env) {
  auto* data = new EnvData();
  data->env_ = env;
  napi_set_instance_data(env, data, Finalize, nullptr);
  napi_add_env_cleanup_hook(env, CleanupHook, data);
}

void EnvData::Init(Napi::Env env, Napi::Function error_factory_fn, Napi::Function on_complete) {
  if (initialized_) return;
  error_factory = Napi::Persistent(error_factory_fn);
  auto* state_ref = new std::shared_ptr<TsfnState>(tsfn_state_);
  tsfn_ = CompletionTsfn::New(
      env, on_complete, "ascent.completion", 0, 1, this,
      [](Napi::Env, std::shared_ptr<TsfnState>* state, EnvData*) {
        {
          std::lock_guard<std::mutex> lock((*state)->mu);
          (*state)->alive = false;
        }
        delete state;
      },
      state_ref);
  {
    std::lock_guard<std::mutex> lock(tsfn_state_->mu);
    tsfn_state_->alive = true;
  }
  tsfn_.Unref(env);
  initialized_ = true;
}

void EnvData::SetRef(Napi::Env env, bool ref) {
  std::lock_guard<std::mutex> lock(tsfn_state_->mu);
  if (!tsfn_state_->alive) return;
  if (ref) {
    tsfn_.Ref(env);
  } else {
    tsfn_.Unref(env);
  }
}

void EnvData::Post(std::unique_ptr<Completion> completion) {
  std::lock_guard<std::mutex> lock(tsfn_state_->mu);
  if (!tsfn_state_->alive) return;
  posted_.push_back(std::move(completion));
  if (call_queued_) return;  // the call on its way takes this one too
  // A null item: Deliver takes what is queued by then. On failure (the TSFN is closing)
  // the next post tries again; teardown frees what is left.
  call_queued_ = tsfn_.NonBlockingCall(static_cast<Completion*>(nullptr)) == napi_ok;
}

void EnvData::StoreInline(std::unique_ptr<Completion> completion) {
  std::lock_guard<std::mutex> lock(inline_mu_);
  inline_done_.push_back(std::move(completion));
}

std::unique_ptr<Completion> EnvData::TakeInline(uint64_t token) {
  std::lock_guard<std::mutex> lock(inline_mu_);
  std::unique_ptr<Completion> found;
  for (auto& c : inline_done_) {
    if (c->token == token) found = std::move(c);
  }
  inline_done_.clear();
  return found;
}

void EnvData::AddStream(std::shared_ptr<StreamImpl> stream) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  // Reap streams whose wrapper was collected and whose thread has drained and exited.
  std::vector<std::shared_ptr<StreamImpl>> keep;
  for (auto& s : streams_) {
    if (s->exited()) {
      s->Stop();
    } else {
      keep.push_back(std::move(s));
    }
  }
  keep.push_back(std::move(stream));
  streams_.swap(keep);
}

EnvData::~EnvData() { buffers->Detach(); }

void EnvData::Teardown() {
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    if (torn_down_) return;
    torn_down_ = true;
  }
  // Communicators first: the abort wakes our stream ops blocked in a collective,
  // so the stream threads below can be joined; the rendezvous threads may still
  // post their completions.
  if (comm) comm->Teardown();
  std::vector<std::shared_ptr<StreamImpl>> streams;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams.swap(streams_);
  }
  // Nothing may reach JS from here on: the env is going away.
  {
    std::lock_guard<std::mutex> lock(tsfn_state_->mu);
    if (tsfn_state_->alive) {
      tsfn_state_->alive = false;
      tsfn_.Release();
    }
  }
  for (auto& s : streams) s->Stop();
}

void EnvData::CleanupHook(void* arg) { static_cast<EnvData*>(arg)->Teardown(); }

void EnvData::Finalize(napi_env env, void* data, void* hint) {
  auto* self = static_cast<EnvData*>(data);
  self->Teardown();
  napi_remove_env_cleanup_hook(env, CleanupHook, self);
  delete self;
}

}  // namespace ascent
