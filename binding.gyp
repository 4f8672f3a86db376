{
  "targets": [
    {
      "target_name": "ascent_native",
      "sources": [
        "<!@(node -p \"require('fs').readdirSync('native',{recursive:true}).filter(f=>f.endsWith('.cc')).map(f=>'native/'+f.split(require('path').sep).join('/')).join(' ')\")"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "native"
      ],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti"],
      "cflags_cc": ["-std=c++17", "-O3", "-fexceptions", "-pthread", "-Wall", "-Wno-unused-parameter"],
      "ldflags": ["-pthread"],
      "libraries": ["-ldl"]
    }
  ]
}
