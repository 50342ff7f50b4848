//! The index map of a data-movement copy (`movement.rs`): which input
//! element each output element reads.
//!
//! The output is row-major over [`IndexMap::axes`] (outermost first; the
//! axes may merge or split the op's real output axes, as long as the
//! row-major order is the same). Output element `j`, whose coordinate on
//! axis `k` is `c_k`, reads input offset `base + Σ_k f_k(c_k)`, each `f_k`
//! an [`AxisMap`]: `c · stride` (Transpose, Slice, Expand, Tile), a table of
//! offsets (Gather), or a padded axis whose border reads the fill value,
//! the nearest edge element or the mirrored input (Pad). [`IndexMap::offset`]
//! evaluates that in Rust; [`IndexMap::src_body`] renders it as the body of
//! `int src(int j)` (−1 for the fill value), with every size and stride a
//! literal, so the two agree by construction and the tests compile the
//! rendering on the host to check it against the CPU reference.
//!
//! [`IndexMap::simplified`] drops size-1 axes, turns arithmetic index tables
//! into strides and merges neighbouring axes whose strides chain, so a
//! Transpose that moves only size-1 axes becomes one contiguous axis and
//! ViT's `[1,197,1,3,768] → [3,197,1,1,768]` becomes three axes with a
//! contiguous innermost one. The kernel picks its path from the result:
//! vectors where the innermost axis is contiguous ([`IndexMap::vector`]), a
//! shared-memory tile where a transpose changes it ([`IndexMap::tile_split`]),
//! else one element per thread.

use std::fmt::Write;

/// What a padded axis reads outside the input (the IR's `PadMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Border {
    /// The fill value.
    Constant,
    /// The nearest edge element.
    Edge,
    /// The input mirrored at its edge, the edge not repeated.
    Reflect,
}

/// How one output axis's coordinate `c` contributes to the input offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AxisMap {
    /// `c · stride` (negative for a backward slice, 0 for a broadcast).
    Linear(i64),
    /// `offsets[c]`.
    Table(Vec<i64>),
    /// `s · stride` for the input coordinate `s = c − before` when it lies
    /// in `[0, dim)`; outside, what `border` says.
    Padded {
        before: usize,
        dim: usize,
        stride: i64,
        border: Border,
    },
}

/// One output axis: its size and its map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    pub size: usize,
    pub map: AxisMap,
}

impl Axis {
    pub fn linear(size: usize, stride: i64) -> Self {
        Axis {
            size,
            map: AxisMap::Linear(stride),
        }
    }

    /// The offset coordinate `c` contributes, `None` for the fill value.
    fn contribution(&self, c: usize) -> Option<i64> {
        match &self.map {
            AxisMap::Linear(stride) => Some(c as i64 * stride),
            AxisMap::Table(offsets) => offsets.get(c).copied(),
            AxisMap::Padded {
                before,
                dim,
                stride,
                border,
            } => padded_source(c, *before, *dim, *border).map(|s| s * stride),
        }
    }

    /// The lowest and highest offsets this axis contributes when reading.
    fn span(&self) -> (i64, i64) {
        match &self.map {
            AxisMap::Linear(stride) => {
                let end = (self.size as i64 - 1) * stride;
                (end.min(0), end.max(0))
            }
            AxisMap::Table(offsets) => (
                offsets.iter().copied().min().unwrap_or(0),
                offsets.iter().copied().max().unwrap_or(0),
            ),
            AxisMap::Padded { dim, stride, .. } => {
                let end = (*dim as i64 - 1) * stride;
                (end.min(0), end.max(0))
            }
        }
    }
}

/// The input coordinate a padded axis reads at output coordinate `c`, as
/// the CPU reference's `reference::pad` computes it.
fn padded_source(c: usize, before: usize, dim: usize, border: Border) -> Option<i64> {
    let (x, d) = (c as i64 - before as i64, dim as i64);
    if (0..d).contains(&x) {
        return Some(x);
    }
    match border {
        Border::Constant => None,
        Border::Edge => Some(x.clamp(0, d - 1)),
        Border::Reflect if d == 1 => Some(0),
        Border::Reflect => {
            let period = 2 * (d - 1);
            let m = x.rem_euclid(period);
            Some(if m < d { m } else { period - m })
        }
    }
}

/// The output-to-input map of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMap {
    pub base: i64,
    /// Outermost first.
    pub axes: Vec<Axis>,
}

/// A transpose's tile split ([`IndexMap::tile_split`]): output axis `a`
/// (the innermost) and `b` (contiguous in the input) form the tile, the
/// other axes ("rest", in output order) select its plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileSplit {
    pub a: usize,
    pub b: usize,
    /// Size of `a` and its input stride.
    pub size_a: usize,
    pub stride_a: i64,
    /// Size of `b` and its output stride.
    pub size_b: usize,
    pub out_stride_b: i64,
    /// `(size, input stride, output stride)` of each other axis.
    pub rest: Vec<(usize, i64, i64)>,
    pub base: i64,
}

/// The smallest tile side worth the shared-memory transpose: below it the
/// per-element path reads runs of this many contiguous elements anyway.
pub const MIN_TILED: usize = 16;

impl TileSplit {
    /// Planes of the tile (product of the rest sizes).
    pub fn planes(&self) -> usize {
        self.rest.iter().map(|r| r.0).product()
    }

    /// Tiles of 32 × 32 over all planes.
    pub fn tiles(&self) -> usize {
        self.size_a.div_ceil(32) * self.size_b.div_ceil(32) * self.planes()
    }

    /// Body of `int rest_in(int r)` (`input`) or `int rest_out(int r)`.
    pub fn rest_body(&self, input: bool) -> String {
        let strides: Vec<i64> = self
            .rest
            .iter()
            .map(|r| if input { r.1 } else { r.2 })
            .collect();
        let axes: Vec<Axis> = self
            .rest
            .iter()
            .zip(&strides)
            .map(|(r, &s)| Axis::linear(r.0, s))
            .collect();
        let map = IndexMap {
            base: if input { self.base } else { 0 },
            axes,
        };
        map.render("r")
    }
}

impl IndexMap {
    /// Output elements.
    pub fn total(&self) -> usize {
        self.axes.iter().map(|a| a.size).product()
    }

    /// Offset of output element `j` (row-major), `None` for the fill value.
    pub fn offset(&self, j: usize) -> Option<i64> {
        let mut t = j;
        let mut o = self.base;
        for axis in self.axes.iter().rev() {
            o += axis.contribution(t % axis.size)?;
            t /= axis.size;
        }
        Some(o)
    }

    /// The lowest and highest offsets any element reads.
    pub fn span(&self) -> (i64, i64) {
        self.axes
            .iter()
            .fold((self.base, self.base), |(lo, hi), a| {
                let (l, h) = a.span();
                (lo + l, hi + h)
            })
    }

    /// The same map over fewer axes: size-1 axes folded into the base,
    /// arithmetic tables and unpadded axes made linear, neighbouring linear
    /// axes whose strides chain merged.
    pub fn simplified(&self) -> IndexMap {
        let mut base = self.base;
        let mut axes: Vec<Axis> = Vec::new();
        for axis in &self.axes {
            if axis.size == 1 {
                if let Some(o) = axis.contribution(0) {
                    base += o;
                    continue;
                }
            }
            let map = match &axis.map {
                AxisMap::Table(t) if arithmetic(t).is_some() => {
                    let step = arithmetic(t).unwrap_or(0);
                    base += t[0];
                    AxisMap::Linear(step)
                }
                AxisMap::Padded {
                    before: 0,
                    dim,
                    stride,
                    ..
                } if *dim == axis.size => AxisMap::Linear(*stride),
                m => m.clone(),
            };
            let axis = Axis {
                size: axis.size,
                map,
            };
            if let (Some(outer), AxisMap::Linear(inner)) = (axes.last_mut(), &axis.map) {
                if outer.map == AxisMap::Linear(inner * axis.size as i64) {
                    *outer = Axis::linear(outer.size * axis.size, *inner);
                    continue;
                }
            }
            axes.push(axis);
        }
        IndexMap { base, axes }
    }

    /// Elements per thread of the per-element path: the widest `V` of 8, 4,
    /// 2 with `V · elem ≤ 16` bytes such that the innermost axis is linear
    /// with stride 1 and a multiple of `V` long, and every vector's first
    /// offset is a multiple of `V` (so its accesses are aligned); else 1.
    pub fn vector(&self, elem: usize) -> usize {
        let Some((inner, outer)) = self.axes.split_last() else {
            return 1;
        };
        if inner.map != AxisMap::Linear(1) {
            return 1;
        }
        let aligned = |v: i64| {
            self.base % v == 0
                && outer.iter().all(|a| match &a.map {
                    AxisMap::Linear(s) => s % v == 0,
                    AxisMap::Table(t) => t.iter().all(|o| o % v == 0),
                    AxisMap::Padded { stride, .. } => stride % v == 0,
                })
        };
        [8usize, 4, 2]
            .into_iter()
            .find(|&v| v * elem <= 16 && inner.size % v == 0 && aligned(v as i64))
            .unwrap_or(1)
    }

    /// The tile split of a transpose that changes the innermost axis: every
    /// axis linear, the innermost with input stride ≠ 1 and another with
    /// stride 1, both at least [`MIN_TILED`] long.
    pub fn tile_split(&self) -> Option<TileSplit> {
        let strides: Vec<i64> = self
            .axes
            .iter()
            .map(|a| match a.map {
                AxisMap::Linear(s) => Some(s),
                _ => None,
            })
            .collect::<Option<_>>()?;
        let a = self.axes.len().checked_sub(1)?;
        let b = strides.iter().position(|&s| s == 1)?;
        if b == a || self.axes[a].size < MIN_TILED || self.axes[b].size < MIN_TILED {
            return None;
        }
        let mut out_strides = vec![1i64; self.axes.len()];
        for k in (0..a).rev() {
            out_strides[k] = out_strides[k + 1] * self.axes[k + 1].size as i64;
        }
        let rest = (0..a)
            .filter(|&k| k != b)
            .map(|k| (self.axes[k].size, strides[k], out_strides[k]))
            .collect();
        Some(TileSplit {
            a,
            b,
            size_a: self.axes[a].size,
            stride_a: strides[a],
            size_b: self.axes[b].size,
            out_stride_b: out_strides[b],
            rest,
            base: self.base,
        })
    }

    /// Body of `int src(int j)`: [`IndexMap::offset`] of `j`, −1 for the
    /// fill value.
    pub fn src_body(&self) -> String {
        self.render("j")
    }

    /// The statements computing the offset of index `var`, innermost axis
    /// first; the outermost coordinate needs no `%`.
    fn render(&self, var: &str) -> String {
        let mut s = format!("int t = {var}; int o = {}; ", self.base);
        for (k, axis) in self.axes.iter().enumerate().rev() {
            let outer = k == 0;
            let size = axis.size;
            let c = if outer {
                "t".to_string()
            } else {
                format!("t % {size}")
            };
            match &axis.map {
                AxisMap::Linear(0) => {}
                AxisMap::Linear(1) => {
                    let _ = write!(s, "o += {c}; ");
                }
                AxisMap::Linear(stride) => {
                    let _ = write!(s, "o += ({c}) * {stride}; ");
                }
                AxisMap::Table(offsets) => {
                    let list: Vec<String> = offsets.iter().map(i64::to_string).collect();
                    let _ = write!(
                        s,
                        "{{ static constexpr int T[{}] = {{{}}}; o += T[{c}]; }} ",
                        offsets.len(),
                        list.join(", ")
                    );
                }
                AxisMap::Padded {
                    before,
                    dim,
                    stride,
                    border,
                } => {
                    let _ = write!(s, "{{ int c = {c} - {before}; ");
                    let d = *dim;
                    match border {
                        Border::Constant => {
                            let _ = write!(s, "if (c < 0 || c >= {d}) return -1; ");
                        }
                        Border::Edge => {
                            let _ = write!(s, "c = c < 0 ? 0 : (c >= {d} ? {} : c); ", d - 1);
                        }
                        Border::Reflect if d == 1 => s.push_str("c = 0; "),
                        Border::Reflect => {
                            let p = 2 * (d - 1);
                            let _ = write!(
                                s,
                                "if (c < 0 || c >= {d}) {{ c %= {p}; if (c < 0) c += {p}; \
                                 if (c >= {d}) c = {p} - c; }} "
                            );
                        }
                    }
                    let _ = write!(s, "o += c * {stride}; }} ");
                }
            }
            if !outer {
                let _ = write!(s, "t /= {size}; ");
            }
        }
        s.push_str("(void)t; return o;");
        s
    }
}

/// The common difference of `t` when it has two or more entries in
/// arithmetic progression.
fn arithmetic(t: &[i64]) -> Option<i64> {
    let step = t.get(1)? - t[0];
    t.windows(2).all(|w| w[1] - w[0] == step).then_some(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_axes_vanish_and_contiguous_axes_merge() {
        // [1,197,1,3,768] → [3,197,1,1,768] (ViT's q/k/v split).
        let x = [1usize, 197, 1, 3, 768];
        let s = [453_888i64, 2304, 2304, 768, 1];
        let perm = [3, 1, 2, 0, 4];
        let map = IndexMap {
            base: 0,
            axes: perm.iter().map(|&p| Axis::linear(x[p], s[p])).collect(),
        };
        let simple = map.simplified();
        assert_eq!(
            simple.axes,
            [
                Axis::linear(3, 768),
                Axis::linear(197, 2304),
                Axis::linear(768, 1)
            ]
        );
        assert_eq!(simple.vector(2), 8);
        assert_eq!(simple.vector(4), 4);
        assert!(simple.tile_split().is_none());
        for j in (0..map.total()).step_by(997) {
            assert_eq!(simple.offset(j), map.offset(j));
        }
        // A transpose of unit axes only is one contiguous axis.
        let unit = IndexMap {
            base: 0,
            axes: vec![
                Axis::linear(197, 768),
                Axis::linear(1, 151_296),
                Axis::linear(768, 1),
            ],
        };
        assert_eq!(unit.simplified().axes, [Axis::linear(151_296, 1)]);
    }

    #[test]
    fn a_transpose_of_the_innermost_axis_is_tiled() {
        // [1,768,196] → [1,196,768].
        let map = IndexMap {
            base: 0,
            axes: vec![
                Axis::linear(1, 150_528),
                Axis::linear(196, 1),
                Axis::linear(768, 196),
            ],
        }
        .simplified();
        let split = map.tile_split().expect("tiled");
        assert_eq!(
            (
                split.size_a,
                split.stride_a,
                split.size_b,
                split.out_stride_b
            ),
            (768, 196, 196, 768)
        );
        assert_eq!(split.planes(), 1);
        assert_eq!(split.tiles(), 24 * 7);
        assert_eq!(
            split.rest_body(true),
            "int t = r; int o = 0; (void)t; return o;"
        );
        // Swin's [64,49,3,3,32] → [3,64,3,49,32]: the innermost axis stays,
        // so vectors, not tiles.
        let (x, s) = ([64usize, 49, 3, 3, 32], [14_112i64, 288, 96, 32, 1]);
        let swin = IndexMap {
            base: 0,
            axes: [2, 0, 3, 1, 4]
                .iter()
                .map(|&p| Axis::linear(x[p], s[p]))
                .collect(),
        }
        .simplified();
        assert_eq!(swin.axes.len(), 5);
        assert!(swin.tile_split().is_none());
        assert_eq!(swin.vector(2), 8);
    }

    #[test]
    fn tables_in_progression_become_strides() {
        let map = IndexMap {
            base: 0,
            axes: vec![
                Axis {
                    size: 3,
                    map: AxisMap::Table(vec![10, 20, 30]),
                },
                Axis::linear(10, 1),
            ],
        };
        let simple = map.simplified();
        assert_eq!(simple.base, 10);
        assert_eq!(simple.axes, [Axis::linear(30, 1)]);
        let scalar = IndexMap {
            base: 0,
            axes: vec![
                Axis {
                    size: 1,
                    map: AxisMap::Table(vec![7]),
                },
                Axis::linear(4, 1),
            ],
        };
        assert_eq!(scalar.simplified().base, 7);
    }

    #[test]
    fn renders_each_map() {
        let map = IndexMap {
            base: 5,
            axes: vec![
                Axis {
                    size: 4,
                    map: AxisMap::Padded {
                        before: 1,
                        dim: 2,
                        stride: 6,
                        border: Border::Constant,
                    },
                },
                Axis {
                    size: 2,
                    map: AxisMap::Table(vec![3, 0]),
                },
                Axis::linear(3, -1),
            ],
        };
        assert_eq!(
            map.src_body(),
            "int t = j; int o = 5; o += (t % 3) * -1; t /= 3; \
             { static constexpr int T[2] = {3, 0}; o += T[t % 2]; } t /= 2; \
             { int c = t - 1; if (c < 0 || c >= 2) return -1; o += c * 6; } (void)t; return o;"
        );
        assert_eq!(map.offset(0), None);
        assert_eq!(map.offset(6), Some(5 + 3));
        // j = 10: padded row 1 (input row 0), table entry 1 (0), column 1 (−1).
        assert_eq!(map.offset(10), Some(5 - 1));
        assert_eq!(map.span(), (5 - 2, 5 + 6 + 3));
    }

    #[test]
    fn padded_sources_match_the_reference_rule() {
        let at = |border| {
            (0..9)
                .map(|i| padded_source(i, 3, 4, border))
                .collect::<Vec<_>>()
        };
        let reflect: Vec<i64> = at(Border::Reflect).into_iter().flatten().collect();
        assert_eq!(reflect, [3, 2, 1, 0, 1, 2, 3, 2, 1]);
        let edge: Vec<i64> = at(Border::Edge).into_iter().flatten().collect();
        assert_eq!(edge, [0, 0, 0, 0, 1, 2, 3, 3, 3]);
        assert_eq!(at(Border::Constant).iter().flatten().count(), 4);
    }
}
