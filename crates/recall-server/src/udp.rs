//! memcached's UDP transport.
//!
//! Each datagram starts with an 8-byte frame header: request id, sequence
//! number, total datagrams, reserved (all big-endian u16). A request must fit
//! in one datagram. The reply is split into datagrams of at most 1400 bytes
//! including the header, each carrying the request id, its sequence number
//! and the total count. Each datagram is text or binary by its first
//! byte, as on TCP (`-B` restricts both).

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::Duration;

use recall_engine::{Engine, Out, ProtocolChoice, Session};

use crate::front_tier::FrontTierSlot;

/// memcached's UDP_MAX_PAYLOAD_SIZE: header plus payload per datagram.
pub const MAX_DATAGRAM: usize = 1400;
pub const HEADER: usize = 8;

/// Split a reply into framed datagrams.
pub fn frame(request_id: u16, reply: &[u8]) -> Vec<Vec<u8>> {
    let per = MAX_DATAGRAM - HEADER;
    let chunks: Vec<&[u8]> = if reply.is_empty() { vec![] } else { reply.chunks(per).collect() };
    let total = chunks.len() as u16;
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut d = Vec::with_capacity(HEADER + c.len());
            d.extend_from_slice(&request_id.to_be_bytes());
            d.extend_from_slice(&(i as u16).to_be_bytes());
            d.extend_from_slice(&total.to_be_bytes());
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(c);
            d
        })
        .collect()
}

/// A UDP socket on `addr`. An IPv6 one takes IPv6 only, as the TCP
/// listeners do, so `*` (0.0.0.0 and [::]) can bind both on one port.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<UdpSocket> {
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::DGRAM, None)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.bind(&addr.into())
        .map_err(|e| std::io::Error::new(e.kind(), format!("failed to listen on UDP {addr}: {e}")))?;
    Ok(sock.into())
}

pub fn serve(
    engine: Arc<Engine>,
    sock: UdpSocket,
    choice: ProtocolChoice,
    wal: Option<Arc<recall_persist::wal::Wal>>,
    tier: Option<Arc<FrontTierSlot>>,
) {
    let counters = engine.registry().register();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Out::new();
    loop {
        let Ok((n, peer)) = sock.recv_from(&mut buf) else { continue };
        if n < HEADER {
            continue;
        }
        let id = u16::from_be_bytes([buf[0], buf[1]]);
        let total = u16::from_be_bytes([buf[4], buf[5]]);
        if total != 1 {
            // Multi-datagram requests are not supported (nor by memcached).
            continue;
        }
        counters.bytes_read.add(n as u64);
        out.clear();
        let mut session = Session::new(&engine, counters.clone(), choice);
        session.no_forwarding();
        // The whole datagram runs before the reply goes out: a call stops
        // at the reply budget (one datagram's replies are bounded by its
        // 64 KiB of requests anyway), or before a write held for recovery.
        let mut b = recall_engine::Barrier::default();
        let mut pos = HEADER;
        loop {
            let p = session.process(&engine, &buf[pos..n], &mut out);
            pos += p.used;
            let recovery = p.barrier.recovery;
            b.join(p.barrier);
            if recovery {
                // A write during recovery waits (see the engine's session);
                // UDP requests are single datagrams, so the wait holds this
                // listener; the rest of the datagram runs after it.
                while !engine.durability().wait_recovery_end(Duration::from_secs(1)) {}
                b.recovery = false;
                continue;
            }
            if p.action != recall_engine::Action::Continue || !p.more {
                break;
            }
        }
        // As on TCP: writes are durable before their replies go out.
        if let (Some(w), true) = (&wal, b.log > 0) {
            if w.wait_blocking(b.log).is_err() {
                continue;
            }
        }
        if b.snapshot > 0 && wal.is_none() && !engine.durability().wait_watermark(b.snapshot, Duration::from_secs(10)) {
            tracing::error!(ts = b.snapshot, "flush_all over UDP: no snapshot covers it after 10 s; replying anyway");
        }
        for d in frame(id, &out.flatten()) {
            counters.bytes_written.add(d.len() as u64);
            let _ = sock.send_to(&d, peer);
        }
        // The front tier's fill rule: a GET it missed, answered here,
        // after the reply is out.
        if let Some(t) = &tier {
            t.after_udp_request(&engine, &buf[HEADER..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_bounded_and_numbered() {
        let reply = vec![b'x'; 3000];
        let d = frame(7, &reply);
        assert_eq!(d.len(), 3);
        assert!(d.iter().all(|x| x.len() <= MAX_DATAGRAM));
        assert_eq!(&d[2][..8], &[0, 7, 0, 2, 0, 3, 0, 0]);
        let joined: Vec<u8> = d.iter().flat_map(|x| x[8..].to_vec()).collect();
        assert_eq!(joined, reply);
    }
}
