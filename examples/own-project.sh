#!/usr/bin/env bash
# examples/own-project.sh — use Ascent from a new project of your own.
# Run from anywhere: bash examples/own-project.sh [project folder, default: a new temporary folder]
# Needs this checkout installed first (`npm install` builds dist/ and the addon, which the tarball ships).
set -euo pipefail
ascent=$(cd "$(dirname "$0")/.." && pwd)
project=${1:-$(mktemp -d)}
mkdir -p "$project" && cd "$project"

tarball=$(npm pack --silent --ignore-scripts --pack-destination "$project" "$ascent")  # dist/, native sources, bin/
npm init -y > /dev/null
npm pkg set type=module     # .ts entries must be ES modules (or name them .mts; .mjs works anywhere)
npm install --no-audit --no-fund --prefer-offline "./$tarball"   # reuses or builds the native addon; needs no TypeScript

cp "$ascent/examples/sum.ts" "$ascent/examples/world.mjs" "$ascent/examples/counter.ts" "$ascent/examples/rewards.mjs" .
npx --no-install launch --nproc 2 sum.ts   # the launch bin of the installed package
node world.mjs                             # the World API from a plain script
