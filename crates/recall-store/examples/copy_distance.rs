//! Time of one 64 KiB copy (`copy_from_slice`, that is glibc's `memcpy`) by
//! how far its destination sits ahead of its source modulo 4 KiB, and the
//! same copy in 1 KiB pieces: the measurement behind the chunk builder's
//! `copy_into` (`src/big.rs`; docs/design/connection-memory.md, "Memory at
//! equal data held"). On the AMD EPYC this project measures on, `rep movsb`
//! is several times slower at 1 to 31 bytes ahead.
//!
//! cargo run --release -p recall-store --example copy_distance

use std::time::Instant;

const LEN: usize = 64 * 1024 - 16;
const REPS: usize = 400;

fn main() {
    let src = vec![1u8; 1 << 23];
    let mut dst = vec![2u8; 1 << 23];
    // Both buffers from their first page boundary, so the distance is only
    // the offset added below.
    let s0 = src.as_ptr().align_offset(4096);
    let d0 = dst.as_ptr().align_offset(4096);
    println!("ahead  whole µs  1 KiB pieces µs");
    for ahead in [0usize, 4, 8, 16, 24, 31, 32, 48, 64, 100, 2048, 4080] {
        let time = |dst: &mut [u8], piece: Option<usize>| {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                for i in 0..REPS {
                    // 16 places 256 KiB apart, so the copies do not all hit one cache set.
                    let base = (i % 16) * 256 * 1024;
                    let s = &src[s0 + base..s0 + base + LEN];
                    let d = &mut dst[d0 + base + ahead..d0 + base + ahead + LEN];
                    match piece {
                        None => d.copy_from_slice(s),
                        Some(p) => d.chunks_mut(p).zip(s.chunks(p)).for_each(|(d, s)| d.copy_from_slice(s)),
                    }
                    std::hint::black_box(&*d);
                }
                best = best.min(t.elapsed().as_secs_f64() / REPS as f64 * 1e6);
            }
            best
        };
        let whole = time(&mut dst, None);
        let pieces = time(&mut dst, Some(1024));
        println!("{ahead:5}  {whole:8.2}  {pieces:15.2}");
    }
}
