// Argument reading for the native entry points. TS validates every argument with
// precise messages first; this is the safety net that keeps a bad call from
// reaching a kernel or a collective, and it throws InvalidArgument (never crashes).
//
// Every entry point reads its arguments through one Reader: it knows which call it
// serves, where its cursor is, and on which device buffers must live, so each
// error names the argument, what was expected and what was received. The free
// Arg* functions below are the same checks for the few module-level functions
// that take one or two scalars.
#pragma once

#include <napi.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/span.h"
#include "errors.h"
#include "kernels/dtype.h"

namespace ascent {

// "a string", "undefined", "-1.5", ...: what a bad argument was, for messages.
std::string Describe(const Napi::Value& v);

inline Napi::Value Arg(const Napi::CallbackInfo& info, size_t i) {
  return i < info.Length() ? info[i] : info.Env().Undefined();
}

double ArgNumber(const Napi::CallbackInfo& info, size_t i, const char* name);
// Non-negative safe integer.
uint64_t ArgIndex(const Napi::CallbackInfo& info, size_t i, const char* name);
// The same check of a value already read.
uint64_t IndexValue(const Napi::Value& v, const char* name);
bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name);
inline uint64_t ArgToken(const Napi::CallbackInfo& info, size_t i) { return ArgIndex(info, i, "token"); }

class Reader {
 public:
  // `op` names the call in details (a string that outlives the Reader: a table row's literal);
  // with `prefix`, every message starts "op: ". Reading starts at argument `first` (1 when
  // argument 0 named the handler). No string is built unless a message is.
  Reader(const Napi::CallbackInfo& info, const char* op, size_t first = 0, bool prefix = false);
  // The same over the arguments of a raw N-API callback (`argv` outlives the Reader).
  Reader(napi_env env, const napi_value* argv, size_t argc, const char* op);

  // Buffers read from here on must live on `device` (no check when device < 0);
  // `owner` says whose device that is ("stream belongs to device", the number follows)
  // and `key` is the details key carrying it ("streamDevice"). String literals only.
  void SetDevice(int device, const char* owner, const char* key);

  // Moves the cursor: entry points whose sizes follow their buffers read the sizes first.
  Reader& At(size_t i) {
    i_ = i;
    return *this;
  }
  size_t pos() const { return i_; }
  Napi::Env Env() const { return Napi::Env(env_); }
  std::string op() const { return op_; }
  // The next argument as it is (an event, a host array ...).
  Napi::Value Value() { return ValueAt(i_++); }

  uint64_t Index(const char* name);     // non-negative safe integer
  uint64_t Positive(const char* name);  // integer >= 1
  int64_t Int(const char* name);        // int32
  double Number(const char* name);
  double Timeout(const char* name);     // positive, finite ms
  bool Bool(const char* name);
  DType Dtype(const char* name);
  bool Impl();  // 0: fast, 1: reference
  uint64_t Token() { return Index("token"); }
  std::string String(const char* name);
  // An array of exactly `n` non-negative integers (n < 0: any length up to `max`).
  std::vector<uint64_t> Counts(const char* name, long n, size_t max = SIZE_MAX);
  // A host Float64Array of exactly `n` finite numbers, copied (small tables such as rope's inv_freq).
  std::vector<double> Doubles(const char* name, size_t n);

  // (buffer, byteOffset) covering `bytes` from the offset, offset aligned to `align`;
  // with `optional`, a null buffer means "not given" (an empty Span). Every span
  // read is remembered: Blocks() keeps them alive, CheckOutputs() tests overlaps.
  Span Buffer(const char* name, uint64_t bytes, size_t align, bool optional = false);
  // A tensor of `numel` elements of `t`.
  Span Tensor(const char* name, uint64_t numel, DType t, bool optional = false);

  using Pairs = std::initializer_list<std::pair<const char*, const char*>>;
  // Outputs must not overlap any other span read (inputs or other outputs), except
  // pairs in `same` when they are exactly the same range (an allowed in-place alias)
  // and pairs in `skip` (the caller checks those itself).
  void CheckOutputs(std::initializer_list<const char*> outs, Pairs same = {}, Pairs skip = {});
  // `out` must not overlap `in` at all (ops that cannot run in place).
  void CheckNoOverlap(const Span& out, const Span& in, const char* out_name, const char* in_name);

  // A block the op made itself (an output it allocates), recorded as if read: Blocks() keeps it
  // alive and SpanBytes() counts it. The whole block, as `name`.
  Span Made(const char* name, std::shared_ptr<Block> block);
  // What the entry point returns instead of the op's seq (the handle of an output it made).
  void SetResult(napi_value v) { result_ = v; }
  napi_value result() const { return result_; }

  std::vector<std::shared_ptr<Block>> Blocks() const;
  // Bytes of every span read (what an op touches: decides whether it may run inline).
  uint64_t SpanBytes() const;

  [[noreturn]] void Fail(const std::string& what, std::vector<Detail> details = {});

 private:
  struct Named {
    Span span;
    const char* name = nullptr;  // a string literal of the op's entry point
  };
  // The spans read so far: the first kInline in place (every op but the multi-tensor ones),
  // the rest in `more_`; no allocation per op for the common case.
  static constexpr size_t kInline = 6;
  size_t SpanCount() const { return count_; }
  const Named& SpanAt(size_t q) const { return q < kInline ? inline_[q] : more_[q - kInline]; }
  const Named* Find(const char* name) const;
  // Appends `sp` to the spans read (Blocks() and SpanBytes() count it).
  void Record(const Span& sp, const char* name);
  // The message `sentence` in this reader's voice: "op: expected ..." or "Expected ...".
  std::string Say(std::string sentence) const;
  // "op: " when messages are prefixed, else empty.
  std::string Prefix() const;
  // " HINT: ..." of argument errors.
  std::string Hint() const;
  // Throws "Expected <what> for <name> but received <value>. HINT: ...".
  [[noreturn]] void Expected(const char* what, const char* name, const Napi::Value& got);

  Napi::Value ValueAt(size_t i) const {
    if (info_ != nullptr) return Arg(*info_, i);
    return i < argc_ ? Napi::Value(env_, argv_[i]) : Napi::Env(env_).Undefined();
  }

  // The arguments: a CallbackInfo's, or a raw callback's array.
  const Napi::CallbackInfo* info_ = nullptr;
  napi_env env_;
  const napi_value* argv_ = nullptr;
  size_t argc_ = 0;
  const char* op_;
  bool prefixed_;
  size_t i_;
  int device_ = -1;
  const char* owner_ = "stream belongs to device";
  const char* owner_key_ = "streamDevice";
  Named inline_[kInline];
  std::vector<Named> more_;
  size_t count_ = 0;
  napi_value result_ = nullptr;
};

}  // namespace ascent
