#!/usr/bin/env bash
# Fuzzes scenario parsing and validation (fuzz_targets/scenario.rs) for SECONDS (default 60).
# Exits non-zero when the fuzzer finds a crash; the crashing input is left in
# fuzz/artifacts/scenario/ (reproduce: cargo +nightly fuzz run scenario FILE).
#
# Installs what it needs: a nightly toolchain (rustup) if there is none, and cargo-fuzz.
# Where no nightly can be had, it uses the default toolchain with RUSTC_BOOTSTRAP=1 (cargo-fuzz
# only needs nightly for its -Z flags). The committed corpus fuzz/corpus/scenario is only read:
# new inputs go to a scratch corpus under fuzz/target (gitignored), and builds to fuzz/target.
# Crashes go to fuzz/artifacts/scenario (gitignored).
#
# No sanitizer by default: the code under test is safe Rust, so a panic (debug assertions and
# overflow checks are on) is what a crash is, and without ASan it runs about 7 times as many
# inputs per second and builds faster. FUZZ_SANITIZER=address turns ASan on.
#
# Environment: FUZZ_TOOLCHAIN=nightly|bootstrap (default: nightly if available),
# FUZZ_SANITIZER=none|address|... (default none), FUZZ_TARGET_DIR (default fuzz/target; a
# directory outside the clone keeps the fuzz build between CI runs).
set -euo pipefail
seconds="${1:-60}"
cd "$(dirname "$0")/.."
root="$PWD"
cargo_fuzz_version=0.13.2

[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo >/dev/null || { echo "fuzz/run.sh: cargo not found: install Rust (rustup) first" >&2; exit 1; }

echo "== fuzz: toolchain"
toolchain="${FUZZ_TOOLCHAIN:-}"
if [ -z "$toolchain" ]; then
    if rustup run nightly rustc --version >/dev/null 2>&1; then
        toolchain=nightly
    elif command -v rustup >/dev/null && timeout 300 rustup toolchain install nightly --profile minimal; then
        toolchain=nightly
    else
        echo "fuzz/run.sh: no nightly toolchain; using $(rustc --version) with RUSTC_BOOTSTRAP=1"
        toolchain=bootstrap
    fi
fi
case "$toolchain" in
    nightly) cargo_fuzz=(cargo +nightly fuzz) ;;
    bootstrap) export RUSTC_BOOTSTRAP=1; cargo_fuzz=(cargo fuzz) ;;
    *) echo "fuzz/run.sh: FUZZ_TOOLCHAIN must be nightly or bootstrap, got $toolchain" >&2; exit 2 ;;
esac
if [ "$toolchain" = nightly ]; then rustup run nightly rustc --version; else rustc --version; fi

echo "== fuzz: cargo-fuzz"
if ! cargo fuzz --version >/dev/null 2>&1; then
    # A scratch target dir, so a CARGO_TARGET_DIR set for the project is not filled with it.
    build="$(mktemp -d)"
    CARGO_TARGET_DIR="$build" cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked
    rm -rf "$build"
fi
cargo fuzz --version

# libFuzzer writes new inputs to the first corpus directory only: the scratch one.
scratch="$root/fuzz/target/corpus/scenario"
mkdir -p "$scratch" "$root/fuzz/artifacts/scenario"
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$root/fuzz/target}"
# The fuzz crate is its own workspace; start from the project's lock so it builds the same
# dependency versions as the project (cargo adds libfuzzer-sys). fuzz/Cargo.lock is gitignored.
cp "$root/Cargo.lock" "$root/fuzz/Cargo.lock"

echo "== fuzz: scenario for ${seconds}s"
"${cargo_fuzz[@]}" run --fuzz-dir "$root/fuzz" --sanitizer "${FUZZ_SANITIZER:-none}" \
    scenario "$scratch" "$root/fuzz/corpus/scenario" -- \
    -max_total_time="$seconds" -dict="$root/fuzz/scenario.dict" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1
echo "== fuzz: no crash in ${seconds}s"
