#!/usr/bin/env bash
# A profile-guided build of txbed: target/pgo/optimized/<host>/release/txbed.
#
# The simulator's event loop is branchy code spread over many crates: callgrind's cache model
# counts an L1 i-cache miss every 51 instructions on the quickstart. A build that knows which
# paths are hot lays them out together and inlines along them: 13% fewer instructions and 26%
# fewer i-cache misses there (docs/architecture.md, "Simulator speed").
#
# rustc's own PGO workflow (the rustc book, "Profile-guided Optimization"): build with
# -Cprofile-generate, run training scenarios, merge their profiles with llvm-profdata, build
# again with -Cprofile-use. cargo-pgo runs the same steps; they are written out here so that
# nothing beyond rustup's llvm-tools component has to be installed.
#
# Training uses small scenarios across protocols and workloads, none of the reference
# scenarios the speed figures are measured on (quickstart, drtmh/smallbank-16,
# drtmh/tpcc-no-16, verbs-read). Takes about 10 minutes on 2 cores (two release builds).
#
# Usage: bash pgo/build.sh        (RUSTFLAGS, if set, are kept and added to)
set -euo pipefail
cd "$(dirname "$0")/.."

training=(
    scenarios/tpcc/quick.ron
    scenarios/tpce/quick.ron
    scenarios/rcc/smallbank.ron
    scenarios/rcc/ycsb.ron
    scenarios/drtm/smallbank.ron
    scenarios/drtm/tpcc.ron
    scenarios/locktable/smallbank.ron
    scenarios/locktable/tpcc.ron
    scenarios/faults/crash-restart.ron
    scenarios/redt/ycsb.ron
)

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
    echo "pgo: installing rustup's llvm-tools component (for llvm-profdata)" >&2
    rustup component add llvm-tools
fi
[ -x "$profdata" ] || { echo "pgo: no llvm-profdata at $profdata: run rustup component add llvm-tools" >&2; exit 1; }

out=$PWD/target/pgo
profiles=$out/profiles
flags=${RUSTFLAGS:-}
# --target: RUSTFLAGS then reach only txbed's own code, not build scripts and proc macros
# (which would otherwise write profiles of their own while compiling).
echo "pgo: 1/3 instrumented build" >&2
RUSTFLAGS="$flags -Cprofile-generate=$profiles" \
    cargo build --release -p txbed --target "$host" --target-dir "$out/instrumented"

echo "pgo: 2/3 training on ${#training[@]} scenarios" >&2
rm -rf "$profiles"
for s in "${training[@]}"; do
    "$out/instrumented/$host/release/txbed" run "$s" -q >/dev/null
done
"$profdata" merge -o "$out/merged.profdata" "$profiles"

echo "pgo: 3/3 optimized build" >&2
# TXBED_BUILD names the build in every report's wall line and in report.json (sim.build).
RUSTFLAGS="$flags -Cprofile-use=$out/merged.profdata" TXBED_BUILD="release, profile-guided" \
    cargo build --release -p txbed --target "$host" --target-dir "$out/optimized"
echo "$out/optimized/$host/release/txbed"
