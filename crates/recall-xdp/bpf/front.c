// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
//
// recall's front tier: seed 001's set-associative cache as an XDP program.
//
// A UDP datagram to recalld's port that carries memcached's 8-byte frame
// header and exactly one `get <key>\r\n` or `gets <key>\r\n` is looked up
// in the key table; a live hit is answered here (XDP_TX) with the frame
// header and `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\nEND\r\n`.
// Everything else, and every miss, passes to the kernel's stack unchanged
// (XDP_PASS) and so to recalld, which fills the table when it answers.
//
// The table (`cells`) has `sets` rows of `ways` cells; a key's row is the
// low bits of its 32-bit FNV-1a hash. User space (recalld) is the only
// writer: it picks the victim way (LRU from `set_meta`'s hit times, or
// FIFO), and it writes or clears a cell under the cell's spin lock
// (BPF_F_LOCK), so this program never sees half a cell.
//
// Each cell holds one fixed chunk: the reply's pieces, prepared by recalld
// at fill time, so this program only copies bytes. A reply longer than the
// request grows the packet at the tail (bpf_xdp_adjust_tail) or, where the
// tail has no room, partly at the head (bpf_xdp_adjust_head: up to
// HEAD_GROW bytes) and the rest at the tail; then the whole packet is
// written afresh from saved headers. A reply that fits neither passes to
// recalld (counted as `too_big`).

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "front.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Set by the loader before the program is loaded.
const volatile __u32 cfg_port = 11211;
const volatile __u32 cfg_ways = 8;
const volatile __u32 cfg_sets_mask = 1023;

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 8192); // sets * ways, set by the loader
    __type(key, __u32);
    __type(value, struct cell);
} cells SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1024); // sets, set by the loader
    __type(key, __u32);
    __type(value, struct set_meta);
} set_meta SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct counters);
} counters SEC(".maps");

// Per-CPU scratch: the verifier refuses large or variably indexed stack
// buffers, and a cell copy is about 1.6 KiB.
struct scratch {
    __u8 key[KEY_BUF];
    __u8 crlf[2];
    __u8 pad[6];
    struct entry e;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct scratch);
} scratch SEC(".maps");

// Ethernet + IPv4 without options + UDP + memcached's frame header.
struct hdrs {
    struct ethhdr eth;
    struct iphdr ip;
    struct udphdr udp;
    __u16 req_id;
    __u16 seq;
    __u16 total;
    __u16 reserved;
} __attribute__((packed));

#define HDRS_LEN 50
// 256 bytes of XDP headroom less the 40-byte xdp_frame, rounded down.
#define HEAD_GROW 192

static __always_inline __u16 ip_csum(struct iphdr *ip)
{
    __u16 *w = (__u16 *)ip;
    __u32 sum = 0;
#pragma unroll
    for (int i = 0; i < 10; i++)
        sum += w[i];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~sum;
}

struct hash_ctx {
    struct scratch *s;
    __u32 h;
    __u32 bad;
};

// A space or control byte means more than one key, or a malformed one:
// recalld answers those.
static long hash_step(__u32 i, void *arg)
{
    struct hash_ctx *hc = arg;
    __u8 c = hc->s->key[i & (KEY_BUF - 1)];
    if (c <= ' ' || c == 127) {
        hc->bad = 1;
        return 1;
    }
    hc->h = (hc->h ^ c) * 16777619u;
    return 0;
}

SEC("xdp")
int recall_front(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *end = (void *)(long)ctx->data_end;
    __u32 zero = 0;

    struct hdrs *in = data;
    if ((void *)(in + 1) > end)
        return XDP_PASS;
    if (in->eth.h_proto != bpf_htons(ETH_P_IP))
        return XDP_PASS;
    if (in->ip.ihl != 5 || in->ip.version != 4 || in->ip.protocol != IPPROTO_UDP)
        return XDP_PASS;
    if (in->ip.frag_off & bpf_htons(0x3fff))
        return XDP_PASS;
    if (in->udp.dest != bpf_htons(cfg_port))
        return XDP_PASS;
    // One datagram, the first of one: anything else is recalld's to refuse.
    if (in->total != bpf_htons(1) || in->seq != 0)
        return XDP_PASS;
    __u32 udp_len = bpf_ntohs(in->udp.len);
    if (udp_len < 8 + 8 + 6 || udp_len > 8 + 8 + 5 + MAX_KEY + 2)
        return XDP_PASS;
    __u32 plen = udp_len - 16; // the request after the frame header
    if ((long)(end - data) < (long)(HDRS_LEN + plen))
        return XDP_PASS;

    __u8 *p = (void *)(in + 1);
    if ((void *)(p + 5) > end)
        return XDP_PASS;
    __u32 pre;
    if (p[0] == 'g' && p[1] == 'e' && p[2] == 't' && p[3] == ' ')
        pre = 4;
    else if (p[0] == 'g' && p[1] == 'e' && p[2] == 't' && p[3] == 's' && p[4] == ' ')
        pre = 5;
    else
        return XDP_PASS;
    if (plen < pre + 3)
        return XDP_PASS;
    __u32 klen = plen - pre - 2;
    if (klen < 1 || klen > MAX_KEY)
        return XDP_PASS;

    struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
    struct counters *cnt = bpf_map_lookup_elem(&counters, &zero);
    if (!s || !cnt)
        return XDP_PASS;
    // Zero-padded, so keys compare as whole words.
    __u64 *kw = (__u64 *)s->key;
#pragma unroll
    for (int i = 0; i < KEY_BUF / 8; i++)
        kw[i] = 0;
    if (bpf_xdp_load_bytes(ctx, HDRS_LEN + pre, s->key, klen))
        return XDP_PASS;
    if (bpf_xdp_load_bytes(ctx, HDRS_LEN + pre + klen, s->crlf, 2))
        return XDP_PASS;
    if (s->crlf[0] != '\r' || s->crlf[1] != '\n')
        return XDP_PASS;

    // FNV-1a, 32 bits, through bpf_loop: the verifier checks the callback
    // once instead of once per key length.
    struct hash_ctx hc = { .s = s, .h = 2166136261u, .bad = 0 };
    bpf_loop(klen, hash_step, &hc, 0);
    if (hc.bad)
        return XDP_PASS;
    __u32 h = hc.h;

    __u32 set = h & cfg_sets_mask;
    __u64 now = bpf_ktime_get_ns();
    int found = -1;
    for (__u32 w = 0; w < MAX_WAYS; w++) {
        if (w >= cfg_ways)
            break;
        __u32 idx = set * cfg_ways + w;
        struct cell *c = bpf_map_lookup_elem(&cells, &idx);
        if (!c)
            break;
        // An unlocked look first: most cells of a row are other keys.
        if (c->e.hash != h || c->e.klen != klen)
            continue;
        bpf_spin_lock(&c->lock);
        // A plain copy: no helper may run under the lock.
        __u64 *dst = (__u64 *)&s->e;
        __u64 *src = (__u64 *)&c->e;
        for (__u32 i = 0; i < sizeof(struct entry) / 8; i++)
            dst[i] = src[i];
        bpf_spin_unlock(&c->lock);
        if (!s->e.valid || s->e.hash != h || s->e.klen != klen)
            continue;
        __u64 *a = (__u64 *)s->e.key;
        __u64 diff = 0;
        for (int i = 0; i < KEY_BUF / 8; i++)
            diff |= a[i] ^ kw[i];
        int same = diff == 0;
        if (!same)
            continue;
        if (s->e.expire_ns && now >= s->e.expire_ns)
            break; // expired: recalld answers (and drops it)
        found = w;
        break;
    }
    if (found < 0) {
        cnt->misses++;
        return XDP_PASS;
    }

    __u32 line_len = s->e.line_len;
    __u32 cas_len = pre == 5 ? s->e.cas_len : 0;
    __u32 tail_len = s->e.tail_len;
    if (line_len < 1 || line_len > LINE_MAX || cas_len > CAS_MAX || tail_len < 1 || tail_len > TAIL_BUF) {
        cnt->misses++;
        return XDP_PASS;
    }
    __u32 new_payload = 8 + line_len + cas_len + tail_len;
    if (new_payload > UDP_MAX_PAYLOAD) {
        cnt->too_big++;
        cnt->misses++;
        return XDP_PASS;
    }

    struct hdrs out;
    if (bpf_xdp_load_bytes(ctx, 0, &out, HDRS_LEN))
        return XDP_PASS;

    int delta = (int)new_payload - (int)(8 + plen);
    if (delta > 0) {
        if (bpf_xdp_adjust_tail(ctx, delta)) {
            // The tail's room is what the skb's allocation left over; the
            // head has XDP_PACKET_HEADROOM less the xdp_frame it keeps
            // free. Take up to HEAD_GROW there and the rest at the tail.
            int head = delta < HEAD_GROW ? delta : HEAD_GROW;
            if (bpf_xdp_adjust_head(ctx, -head)) {
                cnt->too_big++;
                cnt->misses++;
                return XDP_PASS;
            }
            if (delta > head && bpf_xdp_adjust_tail(ctx, delta - head)) {
                // Undo the head: the packet passes to recalld unchanged.
                bpf_xdp_adjust_head(ctx, head);
                cnt->too_big++;
                cnt->misses++;
                return XDP_PASS;
            }
            cnt->head_grown++;
        }
    } else if (delta < 0) {
        if (bpf_xdp_adjust_tail(ctx, delta))
            return XDP_PASS;
    }

    __u8 mac[ETH_ALEN];
    __builtin_memcpy(mac, out.eth.h_dest, ETH_ALEN);
    __builtin_memcpy(out.eth.h_dest, out.eth.h_source, ETH_ALEN);
    __builtin_memcpy(out.eth.h_source, mac, ETH_ALEN);
    __u32 addr = out.ip.saddr;
    out.ip.saddr = out.ip.daddr;
    out.ip.daddr = addr;
    out.ip.tot_len = bpf_htons(20 + 8 + new_payload);
    out.ip.ttl = 64;
    out.ip.frag_off = 0;
    out.ip.check = 0;
    struct iphdr ip = out.ip;
    out.ip.check = ip_csum(&ip);
    __u16 port = out.udp.source;
    out.udp.source = out.udp.dest;
    out.udp.dest = port;
    out.udp.len = bpf_htons(8 + new_payload);
    out.udp.check = 0; // optional over IPv4
    out.seq = 0;
    out.total = bpf_htons(1);
    out.reserved = 0;

    if (bpf_xdp_store_bytes(ctx, 0, &out, HDRS_LEN))
        return XDP_DROP;
    __u32 off = HDRS_LEN;
    if (bpf_xdp_store_bytes(ctx, off, s->e.line, line_len))
        return XDP_DROP;
    off += line_len;
    if (cas_len >= 1) {
        if (bpf_xdp_store_bytes(ctx, off, s->e.cas, cas_len))
            return XDP_DROP;
        off += cas_len;
    }
    if (bpf_xdp_store_bytes(ctx, off, s->e.tail, tail_len))
        return XDP_DROP;

    struct set_meta *m = bpf_map_lookup_elem(&set_meta, &set);
    if (m)
        m->last_hit[found & (MAX_WAYS - 1)] = now;
    cnt->hits++;
    return XDP_TX;
}
