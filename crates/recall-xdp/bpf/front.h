// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// The maps' value layouts, shared by front.c and recall-xdp's Rust mirror
// (src/maps.rs: change both together; a test there checks the sizes).
#pragma once

#define MAX_KEY 250
#define KEY_BUF 256
#define MAX_WAYS 16
// "VALUE " + key + " " + flags (10 digits) + " " + bytes (4 digits).
#define LINE_MAX 280
// " " + cas (20 digits).
#define CAS_MAX 24
// The largest chunk (value bytes) a cell holds.
#define CHUNK_MAX 1024
// "\r\n" + value + "\r\nEND\r\n".
#define TAIL_BUF (CHUNK_MAX + 16)
// memcached's UDP_MAX_PAYLOAD_SIZE (frame header included).
#define UDP_MAX_PAYLOAD 1400

struct entry {
    __u32 valid;
    __u32 hash;
    __u16 klen;
    __u16 line_len;
    __u16 cas_len;
    __u16 tail_len;
    // CLOCK_MONOTONIC nanoseconds after which the cell is a miss; 0: never.
    __u64 expire_ns;
    __u8 key[KEY_BUF];
    __u8 line[LINE_MAX];
    __u8 cas[CAS_MAX];
    __u8 tail[TAIL_BUF];
};

_Static_assert(sizeof(struct entry) % 8 == 0, "entry is copied in u64 words");

struct cell {
    struct bpf_spin_lock lock;
    __u32 pad;
    struct entry e;
};

struct set_meta {
    __u64 last_hit[MAX_WAYS];
};

struct counters {
    __u64 hits;
    __u64 misses;
    __u64 too_big;
    __u64 head_grown;
};
