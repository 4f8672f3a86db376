# NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS: a worker terminated while it is inside a native call
# (the launcher's grace timer, worker.terminate()) makes napi_throw fail; without the define,
# node-addon-api then throws a C++ Napi::Error out of its own catch handler, which std::terminate()s
# the whole process ("terminate called after throwing an instance of 'Napi::Error'", seen under
# --grace-period 0), taking every other rank of the process with it. With it, the error that can no
# longer reach JS is dropped: the worker is going away and nobody is left to catch it.
{
  "variables": {
    "ascent_mpi%": "<!(node scripts/mpi-flags.mjs has)"
  },
  "targets": [
    {
      "target_name": "ascent_native",
      "sources": [
        "<!@(node -p \"require('fs').readdirSync('native',{recursive:true}).filter(f=>f.endsWith('.cc')&&f.split(require('path').sep)[0]!=='mpi').map(f=>'native/'+f.split(require('path').sep).join('/')).join(' ')\")"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "native"
      ],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc": ["-std=c++17", "-O3", "-fexceptions", "-pthread", "-Wall", "-Wno-unused-parameter"],
      "ldflags": ["-pthread"],
      "libraries": ["-ldl"]
    }
  ],
  "conditions": [
    ["ascent_mpi==1", {
      "targets": [
        {
          "target_name": "ascent_mpi",
          "sources": ["native/mpi/mpi_addon.cc", "native/mpi/net_thread.cc", "native/mpi/net_ops.cc", "native/mpi/net_p2p.cc", "native/mpi/net_split.cc"],
          "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "native"],
          "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS", "OMPI_SKIP_MPICXX=1", "MPICH_SKIP_MPICXX=1"],
          "cflags!": ["-fno-exceptions"],
          "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
          "cflags_cc": ["-std=c++17", "-O2", "-fexceptions", "-pthread", "-Wall", "-Wno-unused-parameter", "<!@(node scripts/mpi-flags.mjs cflags)"],
          "ldflags": ["-pthread"],
          "libraries": ["<!@(node scripts/mpi-flags.mjs libs)", "-ldl"]
        }
      ]
    }]
  ]
}
