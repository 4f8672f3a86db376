#include "args.h"

#include <cctype>
#include <cstring>
#include <cstdio>

namespace ascent {
namespace {

constexpr double kMaxSafeInteger = 9007199254740991.0;

// Integers print without a fraction ("3", not "3.000000").
std::string FormatNumber(double d) {
  if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) <= kMaxSafeInteger) {
    return std::to_string(static_cast<long long>(d));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

bool IsIndex(double d) { return d >= 0 && d <= kMaxSafeInteger && std::floor(d) == d; }

// The number in v, in one N-API call (not a type query and then a read: every op reads a dozen
// scalars, and at a 64 x 64 matmul the calls were a measurable part of the op). False, with d
// untouched, when v is not a number.
bool GetNumber(const Napi::Value& v, double* d) { return napi_get_value_double(v.Env(), v, d) == napi_ok; }

}  // namespace

std::string Describe(const Napi::Value& v) {
  if (v.IsUndefined()) return "undefined";
  if (v.IsNull()) return "null";
  if (v.IsNumber()) return FormatNumber(v.As<Napi::Number>().DoubleValue());
  if (v.IsBoolean()) return v.As<Napi::Boolean>().Value() ? "true" : "false";
  if (v.IsString()) return "a string";
  if (v.IsArray()) return "an array";
  if (v.IsFunction()) return "a function";
  if (v.IsBigInt()) return "a bigint";
  return "an object";
}

double ArgNumber(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsNumber()) {
    ThrowInvalidArgument(std::string("Expected a number for ") + name + " but received " + Describe(v) + ".",
                         {Str("argument", name)});
  }
  return v.As<Napi::Number>().DoubleValue();
}

uint64_t ArgIndex(const Napi::CallbackInfo& info, size_t i, const char* name) { return IndexValue(Arg(info, i), name); }

uint64_t IndexValue(const Napi::Value& v, const char* name) {
  double d;
  if (!GetNumber(v, &d) || !IsIndex(d)) {
    ThrowInvalidArgument(std::string("Expected a non-negative integer for ") + name + " but received " + Describe(v) + ".",
                         {Str("argument", name)});
  }
  return static_cast<uint64_t>(d);
}

bool ArgBool(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsBoolean()) {
    ThrowInvalidArgument(std::string("Expected a boolean for ") + name + " but received " + Describe(v) + ".",
                         {Str("argument", name)});
  }
  return v.As<Napi::Boolean>().Value();
}

// ---------------------------------------------------------------- Reader

Reader::Reader(const Napi::CallbackInfo& info, const char* op, size_t first, bool prefix)
    : info_(&info), env_(info.Env()), op_(op), prefixed_(prefix), i_(first) {}

Reader::Reader(napi_env env, const napi_value* argv, size_t argc, const char* op)
    : env_(env), argv_(argv), argc_(argc), op_(op), prefixed_(false), i_(0) {}

std::string Reader::Prefix() const { return prefixed_ ? std::string(op_) + ": " : std::string(); }

void Reader::SetDevice(int device, const char* owner, const char* key) {
  device_ = device;
  owner_ = owner;
  owner_key_ = key;
}

std::string Reader::Say(std::string sentence) const {
  // After an "op: " prefix the sentence continues, so it starts in lower case.
  if (prefixed_ && !sentence.empty()) sentence[0] = static_cast<char>(std::tolower(sentence[0]));
  return Prefix() + sentence;
}

// Only a direct native call gets here (the TS API validates first), so the hint
// points at where the native signatures are written down.
std::string Reader::Hint() const {
  return " HINT: pass " + std::string(op_) + "'s arguments in the order and types src/runtime/native.ts lists.";
}

void Reader::Expected(const char* what, const char* name, const Napi::Value& got) {
  ThrowInvalidArgument(Say(std::string("Expected ") + what + " for " + name + " but received " + Describe(got) + ".") + Hint(),
                       {Str("argument", name), Str("op", op_)});
}

void Reader::Fail(const std::string& what, std::vector<Detail> details) {
  details.push_back(Str("op", op_));
  ThrowInvalidArgument(Prefix() + what, std::move(details));
}

double Reader::Number(const char* name) {
  Napi::Value v = Value();
  double d;
  if (!GetNumber(v, &d)) Expected("a number", name, v);
  return d;
}

uint64_t Reader::Index(const char* name) {
  Napi::Value v = Value();
  double d = -1;
  if (!GetNumber(v, &d) || !IsIndex(d)) Expected("a non-negative integer", name, v);
  return static_cast<uint64_t>(d);
}

uint64_t Reader::Positive(const char* name) {
  Napi::Value v = Value();
  double d = 0;
  if (!GetNumber(v, &d) || !IsIndex(d) || d < 1) Expected("a positive integer", name, v);
  return static_cast<uint64_t>(d);
}

int64_t Reader::Int(const char* name) {
  Napi::Value v = Value();
  double d = 0.5;
  if (!GetNumber(v, &d) || std::floor(d) != d || d < -2147483648.0 || d > 2147483647.0) Expected("a 32-bit integer", name, v);
  return static_cast<int64_t>(d);
}

double Reader::Timeout(const char* name) {
  Napi::Value v = Value();
  double d = 0;
  if (!GetNumber(v, &d) || !(d > 0) || !std::isfinite(d)) Expected("a positive number of ms", name, v);
  return d;
}

bool Reader::Bool(const char* name) {
  Napi::Value v = Value();
  bool b = false;
  if (napi_get_value_bool(v.Env(), v, &b) != napi_ok) Expected("a boolean", name, v);
  return b;
}

DType Reader::Dtype(const char* name) {
  Napi::Value v = Value();
  double d = -1;
  if (!GetNumber(v, &d) || !IsIndex(d) || d >= kNumDTypes) {
    Expected(("a dtype code in [0, " + std::to_string(kNumDTypes) + ")").c_str(), name, v);
  }
  return static_cast<DType>(static_cast<int>(d));
}

bool Reader::Impl() {
  Napi::Value v = Value();
  double d = -1;
  if (!GetNumber(v, &d) || (d != 0 && d != 1)) Expected("0 (fast) or 1 (reference)", "impl", v);
  return d == 1;
}

std::string Reader::String(const char* name) {
  Napi::Value v = Value();
  if (!v.IsString()) Expected("a string", name, v);
  return v.As<Napi::String>().Utf8Value();
}

std::vector<uint64_t> Reader::Counts(const char* name, long n, size_t max) {
  Napi::Value v = Value();
  std::string want = n >= 0 ? "an array of " + std::to_string(n) + " non-negative integers"
                            : "an array of at most " + std::to_string(max) + " non-negative integers";
  if (!v.IsArray()) Expected(want.c_str(), name, v);
  Napi::Array a = v.As<Napi::Array>();
  if ((n >= 0 && a.Length() != static_cast<uint32_t>(n)) || (n < 0 && a.Length() > max)) {
    ThrowInvalidArgument(Say("Expected " + want + " for " + name + " but received " + std::to_string(a.Length()) + " of them.") + Hint(),
                         {Str("argument", name), Str("op", op_)});
  }
  std::vector<uint64_t> out(a.Length());
  for (uint32_t q = 0; q < a.Length(); ++q) {
    Napi::Value e = a.Get(q);
    if (!e.IsNumber() || !IsIndex(e.As<Napi::Number>().DoubleValue())) {
      ThrowInvalidArgument(Say("Expected non-negative integers in " + std::string(name) + " but element " +
                               std::to_string(q) + " is " + Describe(e) + ".") + Hint(),
                           {Str("argument", name), Str("op", op_)});
    }
    out[q] = static_cast<uint64_t>(e.As<Napi::Number>().DoubleValue());
  }
  return out;
}

std::vector<double> Reader::Doubles(const char* name, size_t n) {
  Napi::Value v = Value();
  std::string want = "a Float64Array of " + std::to_string(n) + " finite numbers";
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array) Expected(want.c_str(), name, v);
  Napi::Float64Array a = v.As<Napi::Float64Array>();
  if (a.ElementLength() != n) {
    ThrowInvalidArgument(Say("Expected " + want + " for " + name + " but received " + std::to_string(a.ElementLength()) + " of them.") + Hint(),
                         {Str("argument", name), Str("op", op_)});
  }
  std::vector<double> out(a.Data(), a.Data() + n);
  for (size_t q = 0; q < n; ++q) {
    if (!std::isfinite(out[q])) {
      ThrowInvalidArgument(Say("Expected finite numbers in " + std::string(name) + " but element " + std::to_string(q) + " is not.") + Hint(),
                           {Str("argument", name), Str("op", op_)});
    }
  }
  return out;
}

Span Reader::Buffer(const char* name, uint64_t bytes, size_t align, bool optional) {
  Napi::Value buffer = ValueAt(i_);
  if (optional && buffer.IsNull()) {
    i_ += 2;
    return Span{};
  }
  Span sp = ArgSpan(buffer, ValueAt(i_ + 1), name, bytes, align, device_, owner_, owner_key_, op_, prefixed_);
  i_ += 2;
  Record(sp, name);
  return sp;
}

Span Reader::Made(const char* name, std::shared_ptr<Block> block) {
  Span sp;
  sp.bytes = block->size();
  sp.block = std::move(block);
  Record(sp, name);
  return sp;
}

void Reader::Record(const Span& sp, const char* name) {
  if (count_ < kInline) {
    inline_[count_] = {sp, name};
  } else {
    more_.push_back({sp, name});
  }
  ++count_;
}

Span Reader::Tensor(const char* name, uint64_t numel, DType t, bool optional) {
  const size_t es = DTypeSize(t);
  return Buffer(name, CheckedMul(numel, es, name), es, optional);
}

const Reader::Named* Reader::Find(const char* name) const {
  for (size_t q = 0; q < count_; q++) {
    if (std::strcmp(SpanAt(q).name, name) == 0) return &SpanAt(q);
  }
  return nullptr;
}

void Reader::CheckOutputs(std::initializer_list<const char*> outs, Pairs same, Pairs skip) {
  auto eq = [](const char* a, const char* b) { return std::strcmp(a, b) == 0; };
  auto is_pair = [&](const std::pair<const char*, const char*>& p, const char* a, const char* b) {
    return (eq(p.first, a) && eq(p.second, b)) || (eq(p.second, a) && eq(p.first, b));
  };
  for (const char* o : outs) {
    const Named* on = Find(o);
    if (on == nullptr || !on->span.block) continue;
    for (size_t q = 0; q < count_; q++) {
      const Named& other = SpanAt(q);
      if (eq(other.name, on->name) || !Overlaps(on->span, other.span)) continue;
      bool allowed = false;
      for (auto& p : skip) allowed = allowed || is_pair(p, on->name, other.name);
      for (auto& p : same) {
        if (is_pair(p, on->name, other.name)) {
          allowed = allowed || (other.span.offset == on->span.offset && other.span.bytes == on->span.bytes);
        }
      }
      if (!allowed) Fail(std::string(on->name) + " overlaps " + other.name + "; this op cannot write in place.", {Str("argument", on->name)});
    }
  }
}

void Reader::CheckNoOverlap(const Span& out, const Span& in, const char* out_name, const char* in_name) {
  if (Overlaps(out, in)) Fail(std::string(out_name) + " overlaps " + in_name + "; this op cannot run in place.", {Str("argument", out_name)});
}

uint64_t Reader::SpanBytes() const {
  uint64_t n = 0;
  for (size_t q = 0; q < count_; q++) n += SpanAt(q).span.bytes;
  return n;
}

std::vector<std::shared_ptr<Block>> Reader::Blocks() const {
  std::vector<std::shared_ptr<Block>> b;
  b.reserve(count_);
  for (size_t q = 0; q < count_; q++) {
    if (SpanAt(q).span.block) b.push_back(SpanAt(q).span.block);
  }
  return b;
}

}  // namespace ascent
