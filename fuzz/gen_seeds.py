#!/usr/bin/env python3
"""Write the seed corpora for the fuzz targets into fuzz/seeds/<target>/.

Text seeds are the raw request bytes of tests/transcripts/*.t (the `>` and
`>>` lines, parsed the way crates/recall-engine/src/transcript.rs parses
them); binary seeds are well-formed and malformed binary-protocol packets;
snapshot seeds are small valid snapshots (with a CRC32C computed here).
Inputs over MAX bytes are skipped so the fuzzer's max_len stays small.

Run from anywhere: python3 fuzz/gen_seeds.py   (idempotent; rewrites seeds/)
                   python3 fuzz/gen_seeds.py --check
                   (writes nothing; exits 1 naming every seed that differs,
                   so a transcript edit that was not followed by a
                   regeneration is caught by scripts/test)

seeds/ holds only what this script makes. Inputs kept by hand (a fuzzer's
finding, a seed written for a bug) live in seeds-kept/<target>/, which this
script never touches; fuzz/run.sh passes both directories.
"""

import hashlib
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEEDS = os.path.join(HERE, "seeds")
MAX = 4096


def unescape(s):
    out = bytearray()
    b = s.encode()
    i = 0
    while i < len(b):
        if b[i] == 0x5C and i + 1 < len(b):  # backslash
            c = chr(b[i + 1])
            if c in "rnt\\":
                out += {"r": b"\r", "n": b"\n", "t": b"\t", "\\": b"\\"}[c]
            elif c == "x" and i + 3 < len(b):
                try:
                    out.append(int(b[i + 2:i + 4].decode(), 16))
                    i += 4
                    continue
                except ValueError:
                    out += b[i:i + 2]
            else:
                out += b[i:i + 2]
            i += 2
        else:
            out.append(b[i])
            i += 1
    return bytes(out)


def transcript_steps(path):
    """The send bytes of each step (consecutive > lines before a < line)."""
    steps, cur, in_expect = [], bytearray(), False
    for line in open(path, encoding="utf-8").read().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(">> ") or line.startswith("> ") or line == ">":
            if in_expect:
                if cur:
                    steps.append(bytes(cur))
                cur, in_expect = bytearray(), False
            if line.startswith(">> "):
                cur += unescape(line[3:])
            else:
                cur += line[2:].encode() + b"\r\n"
        elif line.startswith("<"):
            in_expect = True
        else:  # @advance, @close
            if cur:
                steps.append(bytes(cur))
            cur, in_expect = bytearray(), False
    if cur:
        steps.append(bytes(cur))
    return steps


def first_request(b):
    """The first line, plus its data block for storage commands."""
    nl = b.find(b"\n")
    if nl < 0:
        return b
    line = b[:nl + 1]
    toks = line.split()
    if toks and toks[0] in (b"set", b"add", b"replace", b"append", b"prepend", b"cas", b"ms", b"replay"):
        idx = 2 if toks[0] == b"ms" else (5 if toks[0] == b"replay" else 4)
        try:
            n = int(toks[idx])
            return b[:nl + 1 + n + 2]
        except (IndexError, ValueError):
            pass
    return line


# ---- binary protocol -------------------------------------------------------

def bin_req(op, key=b"", extras=b"", value=b"", opaque=0x11223344, cas=0, bodylen=None, magic=0x80, keylen=None):
    body = extras + key + value
    return struct.pack(
        ">BBHBBHIIQ", magic, op, len(key) if keylen is None else keylen, len(extras), 0, 0,
        len(body) if bodylen is None else bodylen, opaque, cas,
    ) + body


def binary_seeds():
    setx = struct.pack(">II", 0xDEADBEEF, 0)
    arith = struct.pack(">QQI", 5, 7, 0)
    pk = {
        "get": bin_req(0x00, b"k1"),
        "getq_getk_noop": bin_req(0x09, b"a") + bin_req(0x0C, b"b") + bin_req(0x0A),
        "set": bin_req(0x01, b"k1", setx, b"hello"),
        "setq_cas": bin_req(0x11, b"k1", setx, b"v", cas=3),
        "add_replace": bin_req(0x02, b"k", setx, b"1") + bin_req(0x03, b"k", setx, b"2"),
        "append_prepend": bin_req(0x0E, b"k", b"", b"x") + bin_req(0x0F, b"k", b"", b"y"),
        "delete": bin_req(0x04, b"k1"),
        "incr_decr": bin_req(0x05, b"ctr", arith) + bin_req(0x16, b"ctr", arith),
        "touch_gat": bin_req(0x1C, b"k", struct.pack(">I", 10)) + bin_req(0x23, b"k", struct.pack(">I", 0)),
        "flush": bin_req(0x08) + bin_req(0x18, extras=struct.pack(">I", 5)),
        "version_stat": bin_req(0x0B) + bin_req(0x10) + bin_req(0x10, b"settings"),
        "verbosity": bin_req(0x1B, extras=struct.pack(">I", 1)),
        "quit": bin_req(0x07),
        "unknown_opcode": bin_req(0x50, b"abc") + bin_req(0x0A),
        "sasl": bin_req(0x20) + bin_req(0x21, b"PLAIN", value=b"\0u\0p"),
        "bad_lengths": bin_req(0x00, b"k", bodylen=0),
        "long_key": bin_req(0x00, b"k" * 251),
        "get_with_extras": bin_req(0x00, b"k", b"\0\0\0\0"),
        "too_large": bin_req(0x01, b"big", setx, b"x" * 16, bodylen=8 + 3 + (2 << 20)),
        "partial_header": bin_req(0x00, b"k1")[:10],
        "partial_body": bin_req(0x01, b"k1", setx, b"hello")[:30],
        "bad_magic_mid": bin_req(0x0A) + bin_req(0x0A, magic=0x81),
    }
    return pk


# ---- snapshot --------------------------------------------------------------

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = _T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def snapshot(records, instance=3, watermark=99, created=1):
    b = bytearray(b"RECALLSN" + struct.pack("<IIQQQ", 1, 0, instance, watermark, created))
    for (key, value, flags, exptime, ts, tomb) in records:
        if tomb:
            b += struct.pack("<BBQ", 2, len(key), ts) + key
        else:
            b += struct.pack("<BBIIQI", 1, len(key), flags, exptime, ts, len(value)) + key + value
    b += b"\xff" + struct.pack("<Q", len(records))
    b += struct.pack("<I", crc32c(bytes(b)))
    return bytes(b)


# ---- streamed values -------------------------------------------------------

def frames(data, tail=True):
    out = bytearray()
    for i in range(0, len(data), 65535):
        chunk = data[i:i + 65535]
        out += struct.pack(">H", len(chunk)) + chunk
    if tail:
        out += b"\0\0\r\n"
    return bytes(out)


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] and not check:
        print("usage: gen_seeds.py [--check]", file=sys.stderr)
        return 2
    if check:
        with tempfile.TemporaryDirectory() as out:
            write_seeds(out, quiet=True)
            return compare(out, SEEDS)
    if os.path.isdir(SEEDS):
        shutil.rmtree(SEEDS)
    return write_seeds(SEEDS, quiet=False)


def listing(root):
    """Relative path -> bytes of every file under root."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            with open(full, "rb") as f:
                files[os.path.relpath(full, root)] = f.read()
    return files


def compare(fresh, committed):
    want, have = listing(fresh), listing(committed)
    missing = sorted(set(want) - set(have))
    stale = sorted(set(have) - set(want))
    changed = sorted(p for p in set(want) & set(have) if want[p] != have[p])
    for label, paths in (("missing", missing), ("stale", stale), ("changed", changed)):
        for p in paths:
            print(f"fuzz/seeds/{p}: {label}")
    if missing or stale or changed:
        print("fuzz/seeds/ is out of date with the transcripts: run python3 fuzz/gen_seeds.py"
              " (inputs kept by hand belong in fuzz/seeds-kept/)")
        return 1
    print(f"fuzz/seeds/: {len(want)} seeds, up to date")
    return 0


def write_seeds(seeds, quiet):
    assert crc32c(b"123456789") == 0xE3069283, "crc32c self-test"
    counts = {}

    def put(target, name, data):
        if len(data) > MAX:
            return
        d = os.path.join(seeds, target)
        os.makedirs(d, exist_ok=True)
        # Content-addressed names avoid duplicates; the prefix says where from.
        h = hashlib.sha1(data).hexdigest()[:12]
        with open(os.path.join(d, f"{name}-{h}"), "wb") as f:
            f.write(data)
        counts[target] = counts.get(target, 0) + 1

    tdir = os.path.join(ROOT, "tests", "transcripts")
    text_steps = []
    for fn in sorted(os.listdir(tdir)):
        if not fn.endswith(".t"):
            continue
        base = fn[:-2]
        steps = transcript_steps(os.path.join(tdir, fn))
        for i, s in enumerate(steps):
            text_steps.append(s)
            put("text_decode", f"{base}-{i}", first_request(s))
            put("text_decode", f"{base}-{i}-pipe", s)
        session = b"".join(steps)
        # engine_session: byte 0 = chunk size etc., byte 1 = protocol / clock.
        for hdr in (b"\x00\x00", b"\x06\x01", b"\x7f\x04", b"\x45\x00"):
            put("engine_session", f"{base}-{hdr.hex()}", hdr + session)
        # Long transcripts: also each step alone, so they fit under MAX.
        if len(session) + 2 > MAX:
            for i, s in enumerate(steps):
                put("engine_session", f"{base}-step{i}", b"\x06\x00" + s)

    # Meta flag lists: everything after the key of each mg/ms/md/ma/me line.
    for s in text_steps:
        for line in s.split(b"\r\n"):
            toks = line.split(b" ")
            if toks and toks[0] in (b"mg", b"md", b"ma", b"me") and len(toks) > 2:
                put("meta_flags", "t", b" ".join(toks[2:]))
            if toks and toks[0] == b"ms" and len(toks) > 3:
                put("meta_flags", "t", b" ".join(toks[3:]))
    for extra in (b"v c T30 Oab k", b"b q s t f h l", b"C123 E456 M+ J0 D10 N30 R5 F7", b"MS I x u P L",
                  b"v v", b"Tx", b"O" + b"a" * 33, b"\x7f"):
        put("meta_flags", "x", extra)

    for name, pkt in binary_seeds().items():
        put("binary_decode", name, pkt)
        put("engine_session", f"bin-{name}", b"\x06\x00" + pkt)
        put("engine_session", f"bin1-{name}", b"\x00\x02" + pkt)  # 1-byte chunks, binary only
    put("text_decode", "binary-get", binary_seeds()["get"])

    # Frame streams: byte 0 is the split size - 1.
    for sel, payload in ((0, b""), (2, b"hello world"), (9, bytes(range(256)) * 3), (255, b"x" * 1000)):
        put("frame_reader", f"frames-{sel}", bytes([sel]) + frames(payload))
    put("frame_reader", "bad-terminator", b"\x03" + b"\x00\x01x\x00\x00xy")
    put("frame_reader", "no-tail", b"\x01" + frames(b"abc", tail=False))
    for base, steps in (("sset", [b"sset k 0 0\r\n" + frames(b"streamed value")]),):
        put("engine_session", base, b"\x03\x00" + steps[0] + b"sget k\r\n")
        put("text_decode", base, steps[0])

    # Big values (past the 128 KiB threshold) through the expansion escape
    # of engine_session (byte 0 bit 7: FE FE n b = (n+1) KiB of b).
    big = b"\xfe\xfe\xbfa"  # 192 KiB of 'a'
    put("engine_session", "big-set", b"\x80\x01" + b"set big 0 0 196608\r\n" + big
        + b"\r\nget big\r\nappend big 0 0 1\r\nb\r\ngets big\r\nmg big s v\r\ndelete big\r\n")
    frame = b"\xfc\x00\xfe\xfe\x3eb"  # one 63 KiB frame of 'b'
    put("engine_session", "big-sset", b"\x83\x01" + b"sset big 5 0\r\n" + frame * 3 + b"\x00\x00\r\nsget big\r\nget big\r\n")
    put("engine_session", "big-toolarge", b"\x85\x01" + b"set big 0 0 1572864\r\n" + b"\xfe\xfe\xffc" * 6 + b"\r\nget big\r\n")
    setx = struct.pack(">II", 7, 0)
    put("engine_session", "big-bin", b"\x81\x00" + bin_req(0x01, b"bb", setx, bodylen=8 + 2 + 196608)
        + big + bin_req(0x00, b"bb") + bin_req(0x0C, b"bb"))
    # Binary hits: set, then every get flavour.
    hits = bin_req(0x01, b"k", setx, b"val") + b"".join(bin_req(op, b"k") for op in (0x00, 0x09, 0x0C, 0x0D)) \
        + bin_req(0x1D, b"k", struct.pack(">I", 0)) + bin_req(0x23, b"k", struct.pack(">I", 0)) + bin_req(0x0A)
    put("engine_session", "bin-hits", b"\x06\x00" + hits)
    put("binary_decode", "hits", hits)
    put("engine_session", "crawler", b"\x06\x00" + b"set a 0 0 1\r\n1\r\nset b 0 100 1\r\n2\r\nlru_crawler metadump all\r\n")

    # replay_batch bodies (recall_proto::replay): byte 0 of the replay_batch
    # target is the record count.
    def replay_record(key, value, flags, exptime, ts, tombstone):
        return struct.pack("<BBIIQI", 2 if tombstone else 1, len(key), flags, exptime, ts, len(value)) + key + value
    batch = [(b"a", b"one", 3, 0, 1 << 40, False), (b"gone", b"", 0, 0, (1 << 40) + 1, True),
             (b"k" * 250, b"v" * 300, 0, 1900000000, 5, False)]
    body = b"".join(replay_record(*r) for r in batch)
    put("replay_batch", "three", bytes([3]) + body)
    put("replay_batch", "empty", b"\x00")
    put("replay_batch", "truncated", bytes([3]) + body[:-9])
    req = b"replay_batch 3 %d\r\n" % len(body) + body + b"\r\n"
    put("text_decode", "replay-batch", req)
    put("text_decode", "replay-batch-noreply", req.replace(b"\r\n", b" noreply\r\n", 1))
    put("engine_session", "replay-batch", b"\x06\x00" + req + b"get a gone\r\nmg a v c\r\n")

    # The client's reply decoders: byte 0 of reply_decode is the mode (bit
    # 7: metadump lines) and piece size; of ctl_reply, the piece size.
    replies = [b"STORED\r\n", b"VALUE k 5 3 99\r\nabc\r\nEND\r\n", b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\n",
               b"VA 2 c7 t-1 f3 kfoo\r\nhi\r\n", b"HD kZm9v b W\r\n", b"OL c12 f3\r\n", b"EN\r\nMN\r\n",
               b"42\r\n", b"STAT pid 12\r\nSTAT version 1.6\r\nEND\r\n", b"VERSION 1.6.18\r\n",
               b"CLIENT_ERROR bad data chunk\r\nERROR\r\n", b"SERVER_ERROR out of memory\r\n", b"VALUE k 0 3\r\nabcd\r\n"]
    for i, r in enumerate(replies):
        put("reply_decode", f"reply{i}", b"\x03" + r)
        put("reply_decode", f"reply{i}-whole", b"\x7f" + r)
    put("reply_decode", "metadump", b"\x81" + b"key=a exp=-1 la=1 cas=2 fetch=no cls=1 size=60\r\nBUSY crawling\r\nEND\r\n")
    put("reply_decode", "long", b"\x7f" + b"STAT x " + b"y" * 8190 + b"\r\n")
    # A forwarded request's reply as the leader sends it (byte 0: bit 7
    # binary, low bits the piece size), and `cluster map` replies.
    framed = [b"STORED\r\nMN\r\n", b"VALUE a 0 4 9\r\nMN\r\n\r\nEND\r\nMN\r\n", b"VA 2 f1\r\nhi\r\nMN\r\n",
              b"SVALUE k 1\r\n\x00\x02MN\x00\x00\r\nEND\r\nMN\r\n", b"VALUE a 0 x\r\n", b"MN\r\nextra"]
    for i, r in enumerate(framed):
        put("reply_frame", f"text{i}", b"\x02" + r)
    noop = bytes([0x81, 0x0A]) + bytes(22)
    hit = bytes([0x81, 0x00, 0, 0, 4, 0, 0, 0, 0, 0, 0, 7]) + bytes(12) + b"\x00\x00\x00\x01abc"
    put("reply_frame", "binary", b"\x85" + hit + noop)
    put("reply_frame", "binary-bad-magic", b"\x85" + bytes([0x80]) + bytes(23))
    maps = [b"MAP self 2 term 7 leader 1\nNODE 1 127.0.0.1:11211\nNODE 2 127.0.0.2:11211",
            b"MAP self 1 term 0 leader 0", b"MAP self 1 term x leader 0", b"NODE 1 a",
            b"MAP self 2 term 3 leader 1\nNODE 1 a:1\nNODE 2 b:1\nGROUP 0 slots 0-2047 leader 1 term 3 members 1,2"
            b"\nGROUP 1 slots 2048-4095 leader 2 term 4 members 1,2",
            b"MAP self 2 term 3 leader 1\nGROUP 0 slots 0-99 leader 1 term 3 members 1\nGROUP 1 slots 101-4095 leader 0 term 1 members "]
    for i, m in enumerate(maps):
        put("cluster_map", f"map{i}", m)
    # A multi-key get split across group leaders: byte 0 picks the four
    # groups' leaders (two bits each), the rest is the request.
    splits = [b"\xe4get key0 key1 key2 key3 key4 key5\r\n", b"\x39gets k1 k2 k3\r\n",
              b"\x1bgat 10 a b c d e f\r\n", b"\xffget x\r\n", b"\x00get a b\r\n"]
    for i, r in enumerate(splits):
        put("split_get", f"get{i}", r)
    # `cluster ...` admin commands (byte 0 even) and status replies (odd).
    admin = [b"\x00status", b"\x00add-node 4 127.0.0.4:11311/127.0.0.4:11211", b"\x00remove-node 2",
             b"\x00transfer-leader", b"\x00transfer-leader 3", b"\x00add-node 4 [::1]:1/h:2", b"\x00add-node 0 x/y",
             b"\x01STATUS self 1 role leader term 3 leader 1 last_log 9 applied 9\n"
             b"MEMBER 1 voter 127.0.0.1:1/127.0.0.1:2 9\nMEMBER 4 learner 127.0.0.4:1/h:2 -",
             b"\x01STATUS self 2 role follower term 3 leader 0 last_log 0 applied 0", b"\x01MEMBER 1 voter a/b 1",
             b"\x00status group=2", b"\x00transfer-leader 3 group=1", b"\x00remove-node 2 group=256",
             b"\x01STATUS self 1 role leader term 3 leader 1 last_log 9 applied 9\nGROUP 1\n"
             b"STATUS self 1 role follower term 2 leader 2 last_log 4 applied 4\nMEMBER 2 voter 127.0.0.2:1/h:2 -"]
    for i, a in enumerate(admin):
        put("cluster_admin", f"admin{i}", a)
    # `-l` lists; byte 0: bit 0 -Z, bit 1 -Y, bit 2 -S.
    lists = [b"\x00127.0.0.1", b"\x01notls:127.0.0.1:0,btls:*:1;mtls:[::1]:2",
             b"\x00proto[binary]:tag[abc]:localhost:11211", b"\x02proto[negotiating]:tag_x_:::1",
             b"\x04proto[ascii]:h", b"\x00tag[123456789]:h", b"\x00[::1", b"\x00h:99999"]
    for i, m in enumerate(lists):
        put("listen_list", f"list{i}", m)
    ctl = [b"DURABLE 3 3298534883330 recovering\r\n", b"DURABLE 0 0 off\n", b"OK\r\nAPPLIED\r\nSTALE\r\n",
           b"REPLAYED 10 2 0\r\nREPLAYED 0 0 0\r\nMN\r\n", b"HD c1099511627781\r\n", b"ERROR\r\nERROR\r\n",
           b"SERVER_ERROR out of memory\r\nCLIENT_ERROR bad id\r\n", b"DURABLE 2 77 maybe\r\n", b"REPLAYED 1 x 3\r\n",
           b"STALE snapshot\r\nSTALE flushed\r\nSTALE deleted\r\nSTALE newer\r\nSTALE later\r\n"]
    for i, r in enumerate(ctl):
        put("ctl_reply", f"ctl{i}", b"\x02" + r)
        put("ctl_reply", f"ctl{i}-whole", b"\xff" + r)

    recs = [
        (b"a", b"hello", 7, 0, 10, False),
        (b"b", b"", 0, 123, 11, False),
        (b"gone", b"", 0, 0, 12, True),
    ]
    put("snapshot_reader", "sample", snapshot(recs))
    put("snapshot_reader", "empty", snapshot([]))
    put("snapshot_reader", "one", snapshot([(b"key", b"v" * 300, 1, 2, 3, False)]))
    put("snapshot_reader", "truncated", snapshot(recs)[:-7])
    put("snapshot_reader", "header-only", snapshot([])[:40])

    # libCacheSim traces for recall-sim: oracleGeneral records are
    # <u32 time, u64 id, u32 size, i64 next access>; sim_lcs_csv takes the
    # reader parameters, a NUL, then the CSV.
    def oracle(t, oid, size, nxt):
        return struct.pack("<IQIq", t, oid, size, nxt)
    good = oracle(1, 42, 100, 2) + oracle(1, 7, 5, -1) + oracle(3, 42, 100, -1)
    put("sim_oracle", "three", good)
    put("sim_oracle", "truncated", good[:-5])
    put("sim_oracle", "backwards", oracle(9, 1, 1, -1) + oracle(3, 2, 2, -1))
    put("sim_lcs_csv", "default", b"\x00time,id,size\n1,a,10\n2,b,20\r\n\n3,a,10\n")
    put("sim_lcs_csv", "ops", b"time-col=2,obj-id-col=5,obj-size-col=4,op-col=1,ttl-col=3,has-header=false\x00"
        b"set,7,60,100,k1\nget,8,0,100,k1\ndelete,9,0,0,k1\n")
    put("sim_lcs_csv", "tab", b"obj-id-col=1,time-col=0,obj-size-col=2,delimiter=tab,has-header=false\x00x\t5\ny\t6\n")
    put("sim_lcs_csv", "bad", b"\x00h\n1,a,x\n")

    # Authentication (-Y token, SASL PLAIN, the auth file), and a session
    # with both on (byte 1 bits 0..1 set: -S and -Y, user u, password p).
    for name, b in [
        ("token", b"set k 0 0 3\r\nu p\r\n"),
        ("token-lf", b"set anykey 1 2 3\nu p\r\n"),
        ("wrong", b"set k 0 0 9\r\nu nopenop\r\n"),
        ("refused", b"get foo\r\n"),
        ("too-long", b"set k 0 0 16385\r\n"),
        ("plain", b"\x00u\x00p"),
        ("plain-authzid", b"u\x00u\x00p"),
    ]:
        put("auth_token", name, b)
    put("auth_file", "two", b"alice:wonder land\nbob:\r\n\n")
    put("auth_file", "malformed", b"u:p\nnocolon\n")
    put("engine_session", "auth-text", b"\x06\x03get k\r\nset k 0 0 3\r\nu p\r\nset k 0 0 1\r\nv\r\nget k\r\n")
    put("engine_session", "auth-sasl", b"\x06\x03" + bin_req(0x00, key=b"k"))
    put("engine_session", "auth-sasl-ok", b"\x06\x03" + bin_req(0x20) + bin_req(0x21, key=b"PLAIN", value=b"\x00u\x00p")
        + bin_req(0x01, key=b"k", extras=b"\x00" * 8, value=b"v") + bin_req(0x00, key=b"k"))

    # recall-fs cached values: "RFS1", size, mtime ns, ctime ns, inode
    # (little-endian), then the file's bytes.
    def fs_value(body, size=None):
        n = len(body) if size is None else size
        return b"RFS1" + struct.pack("<QqqQ", n, 1700000000123456789, 1700000000123456789, 42) + body
    put("fs_value", "small", fs_value(b"hello\n"))
    put("fs_value", "empty", fs_value(b""))
    put("fs_value", "size-too-big", fs_value(b"abc", size=4))
    put("fs_value", "short", fs_value(b"")[:20])

    # recall-fs chunks of big files: "RFC1", file size, mtime ns, ctime ns,
    # inode, chunk size, chunk index, then the chunk's bytes.
    def fs_chunk(body, size, chunk, index):
        return b"RFC1" + struct.pack("<QqqQQQ", size, 1700000000123456789, 5, 42, chunk, index) + body
    put("fs_chunk", "first", fs_chunk(b"abcd", 10, 4, 0))
    put("fs_chunk", "last", fs_chunk(b"ij", 10, 4, 2))
    put("fs_chunk", "past-end", fs_chunk(b"", 10, 4, 3))
    put("fs_chunk", "zero-chunk", fs_chunk(b"", 10, 0, 0))

    # recall-raft's RPC frames (crates/recall-raft/src/network.rs): a
    # 4-byte big-endian length, then bincode 1 with varint integers. Calls
    # name their group; `Rpc` variants by index (Append 0, Vote 1,
    # Snapshot 2, Elect 3, Flush 4, Leader 5, Hello 6); a hello's answer
    # is a `Greeting`.
    def varint(n):
        if n < 251:
            return bytes([n])
        for tag, fmt, top in ((251, "<H", 1 << 16), (252, "<I", 1 << 32), (253, "<Q", 1 << 64)):
            if n < top:
                return bytes([tag]) + struct.pack(fmt, n)
        raise ValueError(n)

    def raft_frame(body):
        return struct.pack(">I", len(body)) + body

    def hello(frm, inc, to, known):
        opt = b"\x00" if known is None else b"\x01" + varint(known)
        return varint(6) + varint(frm) + varint(inc) + varint(to) + opt
    put("raft_rpc", "elect", raft_frame(varint(0) + varint(3)))
    put("raft_rpc", "elect-group-300", raft_frame(varint(300) + varint(3)))
    put("raft_rpc", "hello-first", raft_frame(varint(0) + hello(2, 0x9E3779B97F4A7C15, 1, None)))
    put("raft_rpc", "hello-known", raft_frame(varint(0) + hello(4, 7, 2, 0xFFFFFFFFFFFFFFFF)))
    put("raft_rpc", "hello-durable", raft_frame(varint(0) + hello(1, 0, 3, 0)))
    put("raft_rpc", "hello-cut", raft_frame(varint(0) + hello(2, 5, 1, 9))[:-2])
    put("raft_rpc", "greeting-ok", raft_frame(varint(0) + varint(0x1234567)))
    why = b"node 2 ran before"
    put("raft_rpc", "greeting-refused", raft_frame(varint(1) + varint(2) + varint(len(why)) + why))
    put("raft_rpc", "too-long", struct.pack(">I", (64 << 20) + 1) + varint(0) + varint(3))

    if not quiet:
        for t, n in sorted(counts.items()):
            print(f"{t}: {n} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
