#!/usr/bin/env bash
# Run every fuzz target (or the ones named) for a bounded time each, one
# after another, with the seed corpus. Needs a nightly toolchain and
# cargo-fuzz (`cargo install cargo-fuzz`).
#
#   fuzz/run.sh                 # 60 s per target
#   FUZZ_SECS=600 fuzz/run.sh text_decode engine_session
#
# New corpus entries go to fuzz/corpus/<target>/ (not tracked), crashes to
# fuzz/artifacts/<target>/, the libFuzzer log to fuzz/logs/<target>.log.
# Exits non-zero if any target found a crash.
#
# lincheck_history is a Go fuzz target (tools/lincheck's history reader,
# FuzzReadHistory), run with Go's own fuzzer (needs the Go toolchain); its
# crashers go to tools/lincheck/testdata/fuzz/FuzzReadHistory/.
set -u
cd "$(dirname "$0")"
secs=${FUZZ_SECS:-60}
all=(text_decode binary_decode meta_flags auth_token auth_file frame_reader snapshot_reader snapshot_corrupt wal_replay engine_session replay_batch record_decode reply_decode ctl_reply sim_oracle sim_lcs_csv fs_value fs_chunk raft_rpc raft_log raft_snapshot reply_frame cluster_map listen_list cluster_admin split_get lincheck_history)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
[ -d seeds ] || python3 gen_seeds.py
mkdir -p logs
status=0
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    dirs=("corpus/$t")
    [ -d "seeds/$t" ] && dirs+=("seeds/$t")
    [ -d "seeds-kept/$t" ] && dirs+=("seeds-kept/$t")
    echo "== $t (${secs}s)"
    if [ "$t" = lincheck_history ]; then
        (cd ../tools/lincheck && go test -run '^$' -fuzz '^FuzzReadHistory$' -fuzztime "${secs}s" .) >"logs/$t.log" 2>&1
        rc=$?
        tail -3 "logs/$t.log"
        if [ $rc -ne 0 ]; then
            echo "!! $t exited $rc; see fuzz/logs/$t.log and tools/lincheck/testdata/fuzz/"
            status=1
        fi
        continue
    fi
    # -malloc_limit_mb: a single allocation over 64 MB is a finding (no
    # parser should allocate on the word of a length field);
    # -rss_limit_mb bounds the whole process.
    cargo +nightly fuzz run "$t" "${dirs[@]}" -- \
        -max_total_time="$secs" -malloc_limit_mb=64 -rss_limit_mb=1024 \
        -print_final_stats=1 >"logs/$t.log" 2>&1
    rc=$?
    grep -E '^#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb' "logs/$t.log" | tail -3
    if [ $rc -ne 0 ]; then
        echo "!! $t exited $rc; see fuzz/logs/$t.log and fuzz/artifacts/$t/"
        status=1
    fi
done
exit $status
