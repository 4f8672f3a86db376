#include "env_data.h"

#include "comm/comm_env.h"
#include "device/stream.h"

namespace ascent {

void CallCompletion(Napi::Env env, Napi::Function callback, EnvData* context, Completion* data) {
  std::unique_ptr<Completion> c(data);
  if (env == nullptr || callback.IsEmpty()) return;  // env teardown drains the queue with a null env
  // Nothing may escape into the TSFN machinery (std::terminate); during env teardown
  // calling into JS fails and the completion has nobody left to resolve.
  try {
    Napi::Value err = env.Undefined();
    Napi::Value bytes = env.Undefined();
    if (!c->ok) err = MakeJsError(env, c->error);
    if (c->has_bytes) {
      Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, c->bytes.size());
      if (!c->bytes.empty()) std::memcpy(ab.Data(), c->bytes.data(), c->bytes.size());
      bytes = ab;
    }
    callback.Call({Napi::Number::New(env, static_cast<double>(c->token)), err, bytes});
  } catch (const Napi::Error&) {
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
  if (tsfn_.NonBlockingCall(completion.get()) == napi_ok) completion.release();
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
