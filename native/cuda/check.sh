#!/usr/bin/env bash
# native/cuda/check.sh: the CUDA backend's check, for a machine with an
# NVIDIA GPU (driver installed; nvcc on PATH, or `make cuda-toolkit` on
# Debian). From the repository root or anywhere:
#
#   native/cuda/check.sh            # build, parity tests, kernel bandwidth, decode tokens/s
#
# 1. builds the CPU and CUDA libraries (make native cuda; CUDA_ARCHS picks
#    the GPUs, default 80 90: A100, H100/H200);
# 2. runs the parity tests with the CUDA backend (KVSCOPE_BACKEND=cuda):
#    every device operation against the Go backend (TestDeviceOps,
#    TestDeviceErrors, TestDeviceAttentionInvariance: the prefill kernel
#    gives a row the decode kernel's bits, TestDeviceEngine: the engine generating, refusals
#    through engine.New and Reconfigure) and the model's accuracy and invariance tests on
#    device caches (TestDeviceBackend: llama.cpp's greedy output and logits
#    on stories260K, every parity file within the CPU bounds, batch and
#    block-size invariance, swap/copy, key shifts, refused precisions);
# 3. measures the decode attention kernel and a Q4_0 GEMV in GB/s beside
#    the device's copy bandwidth measured in the same run
#    (TestDeviceBandwidth);
# 4. writes a llama-3.2-1b Q4_0 model with random weights (kvscope
#    gen-model) and measures prefill and decode tokens/s on it
#    (TestDeviceDecodeSpeed).
# It stops at the first failure. Shared test data come from
# $KVSCOPE_TESTDATA (default ../shared); tests whose data is missing skip,
# saying so.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "check.sh: no NVIDIA GPU here (nvidia-smi finds none): the CUDA check needs one" >&2
	exit 1
fi
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

echo "== build"
make native cuda

export KVSCOPE_BACKEND=cuda
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# step PATTERN COMMAND...: runs COMMAND, prints its lines matching PATTERN
# (all of them when it fails) and stops the check when it fails.
step() {
	local pattern=$1 log="$tmp/log"
	shift
	if ! "$@" >"$log" 2>&1; then
		cat "$log"
		echo "check.sh: FAILED: $*" >&2
		exit 1
	fi
	grep -E "$pattern" "$log" || true
}

echo "== parity: device operations against the Go backend"
step '^(--- |    |ok)' go test -count=1 -run 'TestDeviceOps|TestDeviceErrors|TestDeviceEngine|TestDeviceKeyGroups|TestDeviceAttentionInvariance|TestChoose' -v ./engine/backend/native/

echo "== parity: the model on the CUDA backend"
step 'parity-|textA|after a shift|from Go|K/V on the device|fallbacks|cuda on|^(--- FAIL|ok)' go test -count=1 -run 'TestDeviceBackend|TestNativeWideGroups' -v ./engine/model/

echo "== kernels: achieved bandwidth beside the copy bandwidth"
step 'GB/s|cuda on' env KVSCOPE_DEVICE_BENCH=1 go test -count=1 -run 'TestDeviceBandwidth' -v ./engine/backend/native/

echo "== decode: llama-3.2-1b Q4_0 (random weights)"
go build -o "$tmp/kvscope" .
"$tmp/kvscope" gen-model --preset llama-3.2-1b --type q4_0 -o "$tmp/llama-3.2-1b-q4_0.gguf"
step 'tokens/s|fallbacks' env KVSCOPE_DEVICE_MODEL="$tmp/llama-3.2-1b-q4_0.gguf" go test -count=1 -run 'TestDeviceDecodeSpeed' -v ./engine/model/

echo "check.sh: passed"
