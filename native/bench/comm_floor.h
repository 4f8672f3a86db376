// The native floor of a small collective: see comm_floor.cc.
#pragma once

#include <napi.h>

namespace ascent {

void InitCommFloor(Napi::Env env, Napi::Object exports);

}  // namespace ascent
