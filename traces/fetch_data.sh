#!/usr/bin/env bash
# fetch_data.sh (`make data`): where the public request traces come from, where they go, and
# whether the copies present are the exact bytes the tests expect.
#
# Nothing is downloaded: this workbench may run without network access, and the trace files
# are not ours to redistribute inside the repository. For each trace the script prints its
# public source, then checks the sha256 of the copy in the data folder:
#   ok        present and identical to the pinned bytes
#   missing   not there (tests that need it print SKIP)
#   MISMATCH  present but different (tests would compare against the wrong numbers)
# Exit status: 0 unless a present file mismatches (1), or the options are wrong (2).
#
# Data folder: $TWIN_DATA/traces, else ../shared/data/traces next to the repository (the
# same rule as tests/testutil.h).
set -u

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
}
case "${1:-}" in
    -h|--help) usage; exit 0 ;;
    "") ;;
    *) echo "fetch_data.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
data=${TWIN_DATA:-$root/../shared/data}
dir=$data/traces

if command -v sha256sum >/dev/null 2>&1; then
    sha() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
    sha() { shasum -a 256 "$1" | cut -d' ' -f1; }
else
    echo "fetch_data.sh: need sha256sum or shasum to verify files" >&2
    exit 2
fi

# name|sha256|where it comes from (one line each, kept short; details in the data README)
traces=(
"AzureLLMInferenceTrace_code.csv|54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6|github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_code.csv (commit 790921015d50; CC-BY 4.0, cite Splitwise, ISCA 2024)"
"AzureLLMInferenceTrace_conv.csv|2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8|github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_conv.csv (commit 790921015d50; CC-BY 4.0, cite Splitwise, ISCA 2024)"
"mooncake_conversation_trace.jsonl|b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df|github.com/kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl (commit 3cca71daccf2; Apache-2.0)"
"mooncake_synthetic_trace.jsonl|bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131|github.com/kvcache-ai/Mooncake, FAST25-release/traces/synthetic_trace.jsonl (commit 3cca71daccf2; Apache-2.0)"
"BurstGPT_1_first400.csv|7865fda5dac50938a84dfccb06c405e2f5202969ecfbd671c8399de00f4335f0|the header and first 400 rows of github.com/HPMLL/BurstGPT data/BurstGPT_1.csv (Git LFS; head -n 401); the copy checked here is GitM-Labs/runtime benchmarks/traffic_replay/fixtures/burstgpt_slice.csv (CC-BY 4.0)"
"BurstGPT_3_first400.csv|5465fc4c38b0815b8f75d126a120c229ae93632d62e3adf1792f5e8401a73559|the header and first 400 rows of BurstGPT_3.csv, release v2.0 asset of github.com/HPMLL/BurstGPT (head -n 401); the copy checked here is GitM-Labs/runtime benchmarks/traffic_replay/fixtures/burstgpt3_slice.csv (CC-BY 4.0)"
)

echo "trace data folder: $dir"
[ -d "$dir" ] || echo "  (absent: create it, or point TWIN_DATA at a folder holding traces/)"
n_ok=0; n_missing=0; n_bad=0
for entry in "${traces[@]}"; do
    IFS='|' read -r name want source <<<"$entry"
    path=$dir/$name
    if [ ! -f "$path" ]; then
        printf 'missing   %s\n          get: %s\n          put: %s\n' "$name" "$source" "$path"
        n_missing=$((n_missing + 1))
    elif got=$(sha "$path") && [ "$got" = "$want" ]; then
        printf 'ok        %s\n' "$name"
        n_ok=$((n_ok + 1))
    else
        printf 'MISMATCH  %s\n          sha256 %s\n          wanted %s\n          from:  %s\n' \
            "$name" "${got:-unreadable}" "$want" "$source"
        n_bad=$((n_bad + 1))
    fi
done
echo "$n_ok ok, $n_missing missing, $n_bad mismatched"
echo "The Azure 2024 week-long traces (AzureLLMInferenceTrace_{code,conv}_1week.csv) live on"
echo "Azure Blob storage, linked from AzureLLMInferenceDataset2024.md; they are optional."
[ "$n_bad" -eq 0 ]
