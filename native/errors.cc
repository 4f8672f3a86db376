#include "errors.h"

#include <cstdio>

#include "env_data.h"

namespace ascent {

void ThrowInvalidArgument(std::string message, std::vector<Detail> details) {
  throw AscentException(ErrorInfo{kInvalidArgument, std::move(message), std::move(details)});
}

std::string FormatBytes(uint64_t bytes) {
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

Napi::Value MakeJsError(Napi::Env env, const ErrorInfo& info) {
  Napi::Object details = Napi::Object::New(env);
  for (const Detail& d : info.details) {
    if (d.is_list) {
      Napi::Array a = Napi::Array::New(env, d.list.size());
      for (size_t i = 0; i < d.list.size(); ++i) a.Set(static_cast<uint32_t>(i), Napi::Number::New(env, d.list[i]));
      details.Set(d.key, a);
    } else if (d.is_num) {
      details.Set(d.key, Napi::Number::New(env, d.num));
    } else {
      details.Set(d.key, Napi::String::New(env, d.str));
    }
  }
  EnvData* data = EnvData::Get(env);
  if (data != nullptr && !data->error_factory.IsEmpty()) {
    return data->error_factory.Value().Call({Napi::String::New(env, info.code),
                                             Napi::String::New(env, info.message), details});
  }
  Napi::Error err = Napi::Error::New(env, info.message);
  err.Set("code", Napi::String::New(env, info.code));
  err.Set("details", details);
  return err.Value();
}

}  // namespace ascent
