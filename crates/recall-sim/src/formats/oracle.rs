//! libCacheSim's `oracleGeneral` binary trace: a headerless sequence of
//! packed little-endian 24-byte records
//! `{ u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime; }`
//! (libCacheSim `traceReader/customizedReader/oracle/oracleGeneralBin.h`).
//! `clock_time` is in seconds; `next_access_vtime` (the request count until
//! the object's next access, for Belady-style oracles) is read but unused.

use super::RecordError;

/// Bytes per record.
pub const RECORD_LEN: usize = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleRecord {
    pub clock_time: u32,
    pub obj_id: u64,
    pub obj_size: u32,
    pub next_access_vtime: i64,
}

impl OracleRecord {
    pub fn decode(b: &[u8; RECORD_LEN]) -> OracleRecord {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        OracleRecord {
            clock_time: u32_at(0),
            obj_id: u64_at(4),
            obj_size: u32_at(12),
            next_access_vtime: u64_at(16) as i64,
        }
    }

    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        b[0..4].copy_from_slice(&self.clock_time.to_le_bytes());
        b[4..12].copy_from_slice(&self.obj_id.to_le_bytes());
        b[12..16].copy_from_slice(&self.obj_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.next_access_vtime.to_le_bytes());
        b
    }
}

/// Decodes `data`, calling `f` for each record in order. Stops at the
/// first bad record: a trailing partial record (a truncated file) is an
/// error naming its number, as is a record whose clock runs backwards
/// (libCacheSim requires time order) and, since `next_access_vtime` is
/// either -1 (no next access), or a positive request count, any other
/// negative value, which means the bytes are not an oracleGeneral trace.
pub fn parse(data: &[u8], mut f: impl FnMut(&OracleRecord)) -> Result<u64, RecordError> {
    let mut chunks = data.chunks_exact(RECORD_LEN);
    let mut n = 0u64;
    let mut last_time = 0u32;
    for chunk in chunks.by_ref() {
        n += 1;
        let r = OracleRecord::decode(chunk.try_into().expect("chunks_exact"));
        if r.clock_time < last_time {
            return Err(RecordError {
                record: n,
                message: format!("clock_time {} is before the previous record's {last_time}", r.clock_time),
            });
        }
        if r.next_access_vtime < -1 {
            return Err(RecordError {
                record: n,
                message: format!("next_access_vtime {} is negative (not an oracleGeneral trace?)", r.next_access_vtime),
            });
        }
        last_time = r.clock_time;
        f(&r);
    }
    let rest = chunks.remainder().len();
    if rest != 0 {
        return Err(RecordError {
            record: n + 1,
            message: format!("truncated: {rest} of {RECORD_LEN} bytes (the file is not a whole number of records)"),
        });
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: u32, id: u64, size: u32, next: i64) -> OracleRecord {
        OracleRecord { clock_time: t, obj_id: id, obj_size: size, next_access_vtime: next }
    }

    #[test]
    fn round_trips_and_reads_in_order() {
        let recs = [rec(1, 7, 100, 2), rec(1, 8, 5, -1), rec(3, 7, 100, -1)];
        let bytes: Vec<u8> = recs.iter().flat_map(|r| r.encode()).collect();
        assert_eq!(bytes.len(), 3 * RECORD_LEN);
        // Little-endian, packed: obj_id starts at byte 4.
        assert_eq!(bytes[4], 7);
        let mut got = Vec::new();
        assert_eq!(parse(&bytes, |r| got.push(*r)), Ok(3));
        assert_eq!(got, recs);
    }

    #[test]
    fn truncated_input_names_the_partial_record() {
        let mut bytes: Vec<u8> = [rec(1, 1, 1, -1), rec(2, 2, 2, -1)].iter().flat_map(|r| r.encode()).collect();
        bytes.truncate(RECORD_LEN + 10);
        let e = parse(&bytes, |_| {}).unwrap_err();
        assert_eq!(e.record, 2);
        assert!(e.to_string().contains("truncated: 10 of 24 bytes"), "{e}");
    }

    #[test]
    fn rejects_time_going_backwards_and_bad_vtime() {
        let bytes: Vec<u8> = [rec(5, 1, 1, -1), rec(4, 2, 2, -1)].iter().flat_map(|r| r.encode()).collect();
        assert_eq!(parse(&bytes, |_| {}).unwrap_err().record, 2);
        let bytes = rec(5, 1, 1, -7).encode();
        let e = parse(&bytes, |_| {}).unwrap_err();
        assert!(e.record == 1 && e.message.contains("negative"), "{e}");
    }

    #[test]
    fn empty_input_is_an_empty_trace() {
        assert_eq!(parse(&[], |_| panic!("no records")), Ok(0));
    }
}
