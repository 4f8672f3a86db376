// Optional OpenBLAS baseline for the kernel benchmark: loaded with dlopen at run
// time, so OpenBLAS is never a build or install dependency of Ascent.
#pragma once

#include <napi.h>

namespace ascent {

void InitBlasBaseline(Napi::Env env, Napi::Object exports);

}  // namespace ascent
