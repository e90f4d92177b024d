//! The front-cache shapes behind seed 001's Figs. 5–7 and Table 2, and the
//! chunk-class configurations that go beyond them; each figure is a list
//! of [`FrontConfig`]s run by the same [`Procedure`] and written as CSV
//! rows `scripts/sim-plot` can draw.

use std::io::{self, Write};

use recall_store::front::{ChunkClass, FrontConfig, Replacement};

use super::{run, FrontOutcome, Procedure};
use crate::SimError;

/// The figures `recall-sim front --figure` knows.
pub const FIGURES: [&str; 5] = ["fig5", "fig6", "fig7", "table2", "classes"];

/// One configuration of a figure, with the label its plot uses.
#[derive(Clone, Debug)]
pub struct Point {
    pub figure: &'static str,
    pub label: String,
    pub cfg: FrontConfig,
}

fn shape(sets: usize, ways: u16, chunk: u32) -> String {
    format!("{sets}x{ways}x{chunk}B")
}

fn classes_label(classes: &[ChunkClass], max_span: u16) -> String {
    let mut s = classes.iter().map(|c| format!("{}Bx{}", c.chunk, c.ways)).collect::<Vec<_>>().join("+");
    if max_span > 1 {
        s.push_str(&format!(" span{max_span}"));
    }
    s
}

/// The configurations of `figure`.
pub fn points(figure: &str) -> Result<Vec<Point>, SimError> {
    let mut v = Vec::new();
    let fixed = |figure, sets, ways, chunk, r| Point {
        figure,
        label: shape(sets, ways, chunk),
        cfg: FrontConfig::fixed(sets, ways, chunk, r),
    };
    match figure {
        // LRU against FIFO, table shapes of 1 to 4 MB (larger ones hardly
        // evict, and then the two cannot differ).
        "fig5" => {
            for (sets, ways, chunk) in [
                (4096, 1, 256),
                (1024, 4, 256),
                (4096, 4, 256),
                (256, 16, 256),
                (1024, 16, 256),
                (2048, 1, 512),
                (512, 4, 512),
                (512, 16, 512),
            ] {
                for r in [Replacement::Lru, Replacement::Fifo] {
                    v.push(fixed("fig5", sets, ways, chunk, r));
                }
            }
        }
        // Hit ratio against chunk size: 4096 and 8192 rows, 1 and 16 ways.
        "fig6" => {
            for sets in [4096, 8192] {
                for ways in [1, 16] {
                    for chunk in [32, 64, 128, 256, 512, 1024, 2048, 4096] {
                        v.push(fixed("fig6", sets, ways, chunk, Replacement::Lru));
                    }
                }
            }
        }
        // Hit ratio against the value area's size, 256 B and 512 B chunks,
        // 1 to 16 ways (rows = size / (ways × chunk)). Table 2 is the 4 MB,
        // 16-way pair of these runs.
        "fig7" | "table2" => {
            let sizes: &[u64] =
                if figure == "fig7" { &[512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20] } else { &[4 << 20] };
            let ways_list: &[u16] = if figure == "fig7" { &[1, 2, 4, 8, 16] } else { &[16] };
            let name = if figure == "fig7" { "fig7" } else { "table2" };
            for &chunk in &[256u32, 512] {
                for &ways in ways_list {
                    for &size in sizes {
                        let sets = (size / (u64::from(ways) * u64::from(chunk))) as usize;
                        v.push(fixed(name, sets, ways, chunk, Replacement::Lru));
                    }
                }
            }
        }
        // Beyond the paper: the same 4 KiB per row split into chunk classes,
        // or small chunks a value may span, against the paper's fixed
        // chunks, at equal value-area sizes.
        "classes" => {
            let layouts: Vec<(Vec<ChunkClass>, u16)> = vec![
                (vec![ChunkClass { chunk: 256, ways: 16 }], 1),
                (vec![ChunkClass { chunk: 512, ways: 8 }], 1),
                (
                    vec![
                        ChunkClass { chunk: 16, ways: 4 },
                        ChunkClass { chunk: 64, ways: 3 },
                        ChunkClass { chunk: 256, ways: 7 },
                        ChunkClass { chunk: 1024, ways: 2 },
                    ],
                    1,
                ),
                (
                    vec![
                        ChunkClass { chunk: 16, ways: 8 },
                        ChunkClass { chunk: 64, ways: 6 },
                        ChunkClass { chunk: 256, ways: 6 },
                        ChunkClass { chunk: 1024, ways: 2 },
                    ],
                    1,
                ),
                (vec![ChunkClass { chunk: 64, ways: 64 }], 16),
                (vec![ChunkClass { chunk: 32, ways: 128 }], 32),
            ];
            for size in [256u64 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20] {
                for (classes, max_span) in &layouts {
                    let row: u64 = classes.iter().map(|c| u64::from(c.chunk) * u64::from(c.ways)).sum();
                    let sets = (size / row) as usize;
                    v.push(Point {
                        figure: "classes",
                        label: classes_label(classes, *max_span),
                        cfg: FrontConfig {
                            sets,
                            classes: classes.clone(),
                            max_span: *max_span,
                            replacement: Replacement::Lru,
                        },
                    });
                }
            }
        }
        _ => return Err(SimError(format!("unknown figure {figure:?} (one of {})", FIGURES.join(", ")))),
    }
    Ok(v)
}

/// One measured point.
#[derive(Clone, Debug)]
pub struct Measured {
    pub point: Point,
    pub outcome: FrontOutcome,
}

/// Runs every point of `figure` under `p`.
pub fn measure(p: &Procedure, figure: &str, mut progress: impl FnMut(&Measured)) -> Result<Vec<Measured>, SimError> {
    let mut rows = Vec::new();
    for point in points(figure)? {
        let outcome = run(p, Some(&point.cfg))?;
        let m = Measured { point, outcome };
        progress(&m);
        rows.push(m);
    }
    Ok(rows)
}

pub const CSV_HEADER: &str = "trace,figure,label,replacement,sets,ways,chunk,classes,max_span,capacity,keys,\
gets,hits,hit_ratio,main_hit_ratio,too_large,front_evictions,held_keys,chunks,chunk_bytes,value_bytes,fill_ratio";

/// CSV rows (`scripts/sim-plot --x capacity --series ...` draws them);
/// `capacity` is the value area in bytes, `chunk` empty with several
/// classes.
pub fn write_csv(mut out: impl Write, p: &Procedure, rows: &[Measured]) -> io::Result<()> {
    writeln!(out, "{CSV_HEADER}")?;
    let trace = format!(
        "seed 001 procedure: {} keys Zipf {} GET:SET:DELETE {}:{}:{} main {} B {} {} requests seed {}",
        p.keys, p.zipf, p.mix.0, p.mix.1, p.mix.2, p.main_mem, p.main_policy, p.requests, p.seed
    );
    for m in rows {
        let c = &m.point.cfg;
        let o = &m.outcome;
        let occ = &o.occupancy;
        let chunk = if c.classes.len() == 1 { c.classes[0].chunk.to_string() } else { String::new() };
        writeln!(
            out,
            "{trace},{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.6},{},{},{},{},{},{},{:.6}",
            m.point.figure,
            m.point.label,
            c.replacement.name(),
            c.sets,
            c.ways(),
            chunk,
            classes_label(&c.classes, 1),
            c.max_span,
            c.capacity(),
            p.keys,
            o.gets,
            o.front_hits,
            o.hit_ratio(),
            o.main_hit_ratio(),
            o.too_large,
            o.front_evictions,
            occ.keys,
            occ.chunks,
            occ.chunk_bytes,
            occ.value_bytes,
            occ.fill_ratio(),
        )?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_figure_has_valid_shapes() {
        for f in FIGURES {
            let pts = points(f).unwrap();
            assert!(!pts.is_empty(), "{f}");
            for p in pts {
                assert!(recall_store::front::FrontCache::new(p.cfg.clone()).is_ok(), "{f} {}", p.label);
            }
        }
        let t2 = points("table2").unwrap();
        assert!(t2.iter().all(|p| p.cfg.capacity() == 4 << 20 && p.cfg.ways() == 16));
        assert!(points("fig8").is_err());
        // Every class layout has the same bytes per row, so a size compares
        // like with like.
        for p in points("classes").unwrap() {
            assert_eq!(p.cfg.capacity() % 4096, 0, "{}", p.label);
        }
    }
}
