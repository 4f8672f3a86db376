// blasInfo() -> { available, library, config }
// blasSgemmSeconds(m, n, k, reps, transA?, transB?) -> seconds of one C = op(A)·op(B)
//   (row-major, fp32; A is k x m when transA, B is n x k when transB): the best of 3 rounds
//   of `reps` back-to-back calls, as bench/kernels.ts times Ascent's ops
//
// Runs on the calling thread with OpenBLAS forced to one thread, so it is
// comparable with one Ascent stream (one native thread). Bench only: it blocks the
// JS thread for the duration of the measurement.
#include "bench/blas_baseline.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "args.h"
#include "errors.h"

namespace ascent {
namespace {

// CBLAS enums as in cblas.h (CblasRowMajor = 101, CblasNoTrans = 111).
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using SetThreadsFn = void (*)(int);
using GetConfigFn = char* (*)();

struct Blas {
  void* handle = nullptr;
  std::string library;
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
  GetConfigFn get_config = nullptr;
};

Blas& Loaded() {
  static Blas blas;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"libopenblas.so.0", "libopenblas.so"}) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (!h) continue;
      auto sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
      if (!sgemm) {
        dlclose(h);
        continue;
      }
      blas.handle = h;
      blas.library = name;
      blas.sgemm = sgemm;
      blas.set_threads = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"));
      blas.get_config = reinterpret_cast<GetConfigFn>(dlsym(h, "openblas_get_config"));
      break;
    }
  });
  return blas;
}

Napi::Value BlasInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Blas& b = Loaded();
  Napi::Object o = Napi::Object::New(env);
  o.Set("available", Napi::Boolean::New(env, b.sgemm != nullptr));
  o.Set("library", b.sgemm ? Napi::Value(Napi::String::New(env, b.library)) : env.Null());
  o.Set("config", b.get_config ? Napi::Value(Napi::String::New(env, b.get_config())) : env.Null());
  return o;
}

Napi::Value BlasSgemmSeconds(const Napi::CallbackInfo& info) {
  return Guard(info.Env(), [&] {
    const int m = static_cast<int>(ArgIndex(info, 0, "m"));
    const int n = static_cast<int>(ArgIndex(info, 1, "n"));
    const int k = static_cast<int>(ArgIndex(info, 2, "k"));
    const int reps = static_cast<int>(ArgIndex(info, 3, "reps"));
    // Optional, so a caller that compares plain A·B passes four arguments.
    const bool ta = info.Length() > 4 && ArgBool(info, 4, "transA");
    const bool tb = info.Length() > 5 && ArgBool(info, 5, "transB");
    Blas& b = Loaded();
    if (!b.sgemm) ThrowInvalidArgument("OpenBLAS is not available. HINT: apt-get install libopenblas0-serial.");
    if (m < 1 || n < 1 || k < 1 || reps < 1 || static_cast<double>(m) * n * k > 1e12) {
      ThrowInvalidArgument("blasSgemmSeconds(m, n, k, reps) expects positive sizes (m·n·k <= 1e12).");
    }
    if (b.set_threads) b.set_threads(1);
    std::vector<float> A(static_cast<size_t>(m) * k), B(static_cast<size_t>(k) * n), C(static_cast<size_t>(m) * n);
    for (size_t i = 0; i < A.size(); i++) A[i] = static_cast<float>((i * 7) % 13) / 13.0f;
    for (size_t i = 0; i < B.size(); i++) B[i] = static_cast<float>((i * 5) % 11) / 11.0f;
    // CblasTrans = 112; the leading dimension is the stored row length.
    auto once = [&] { b.sgemm(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1.0f, A.data(), ta ? m : k, B.data(), tb ? k : n, 0.0f, C.data(), n); };
    once();
    // The statistic bench/kernels.ts uses for Ascent's ops: best of 3 rounds of `reps`
    // back-to-back calls (mean per call), so a neighbour's load counts the same on both sides.
    double best = 1e300;
    for (int round = 0; round < 3; round++) {
      auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; r++) once();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      if (s < best) best = s;
    }
    return Napi::Number::New(info.Env(), best);
  });
}

}  // namespace

void InitBlasBaseline(Napi::Env env, Napi::Object exports) {
  exports.Set("blasInfo", Napi::Function::New<BlasInfo>(env, "blasInfo"));
  exports.Set("blasSgemmSeconds", Napi::Function::New<BlasSgemmSeconds>(env, "blasSgemmSeconds"));
}

}  // namespace ascent
