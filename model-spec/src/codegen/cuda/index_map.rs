//! Index plumbing rendered into instantiations: from an output element's
//! physical index `j` to the physical offset of the input element it reads.
//!
//! Each value's physical order is its layout's permutation of the logical
//! axes ([`Layout::physical_order`]). [`broadcast_src`] maps through the
//! *logical coordinates* (numpy broadcasting: input axes aligned to the
//! right, size-1 axes read index 0), [`reshape_src`] through the *logical
//! row-major index* (views and Converts, whose shapes may differ but whose
//! logical order is the same). Both collapse to `return j;` when the two
//! physical orders coincide, which the templates use to vectorize.

use crate::ir::{is_row_major_bytes, Layout};
use std::fmt::Write;

/// True when a value of `shape` in layout `a` has the same element order as
/// in layout `b`.
pub fn same_order(shape: &[usize], a: Layout, b: Layout) -> bool {
    a == b || (is_row_major_bytes(shape, a) && is_row_major_bytes(shape, b))
}

/// Statements declaring `{prefix}{axis}` = logical coordinate of each axis of
/// `shape` for physical index `var` (axes of size 1 are always 0 and get no
/// variable; [`offset`] never reads them).
pub fn decompose(shape: &[usize], layout: Layout, var: &str, prefix: &str) -> String {
    let order = if shape.len() == 4 {
        layout.physical_order(4)
    } else {
        (0..shape.len()).collect()
    };
    let mut s = format!("int {prefix}t = {var}; ");
    for &axis in order.iter().rev() {
        let d = shape[axis];
        if d != 1 {
            let _ = write!(
                s,
                "const int {prefix}{axis} = {prefix}t % {d}; {prefix}t /= {d}; "
            );
        }
    }
    let _ = write!(s, "(void){prefix}t; ");
    s
}

/// Element strides of each logical axis of `shape` in `layout`.
fn strides(shape: &[usize], layout: Layout) -> Vec<usize> {
    if shape.len() == 4 {
        layout.strides(shape)
    } else {
        Layout::RowMajor.strides(shape)
    }
}

/// Expression of the physical offset of logical coordinates
/// `{prefix}{axis + lead}` in a value of `shape`, where `lead` aligns its
/// axes to the right of a coordinate set of higher rank; size-1 axes
/// contribute nothing (broadcast).
fn offset(shape: &[usize], layout: Layout, prefix: &str, lead: usize) -> String {
    let terms: Vec<String> = strides(shape, layout)
        .iter()
        .enumerate()
        .filter(|&(axis, _)| shape[axis] != 1)
        .map(|(axis, &stride)| match stride {
            1 => format!("{prefix}{}", axis + lead),
            s => format!("{prefix}{} * {s}", axis + lead),
        })
        .collect();
    if terms.is_empty() {
        "0".to_string()
    } else {
        terms.join(" + ")
    }
}

/// Body of `int src(int j)` for an elementwise op: output `j` (physical, in
/// `out`'s layout) reads the input element numpy broadcasting assigns it.
pub fn broadcast_src(
    out_shape: &[usize],
    out_layout: Layout,
    in_shape: &[usize],
    in_layout: Layout,
) -> String {
    if in_shape == out_shape && same_order(out_shape, out_layout, in_layout) {
        return "return j;".to_string();
    }
    let lead = out_shape.len().saturating_sub(in_shape.len());
    format!(
        "{}return {};",
        decompose(out_shape, out_layout, "j", "o"),
        offset(in_shape, in_layout, "o", lead)
    )
}

/// True when [`broadcast_src`] is the identity.
pub fn broadcast_is_identity(
    out_shape: &[usize],
    out_layout: Layout,
    in_shape: &[usize],
    in_layout: Layout,
) -> bool {
    in_shape == out_shape && same_order(out_shape, out_layout, in_layout)
}

/// Body of `int src(int j)` for a copy between values with the same logical
/// row-major order (Convert, Flatten, Reshape, Identity): output `j` →
/// logical row-major index → input physical offset.
pub fn reshape_src(
    out_shape: &[usize],
    out_layout: Layout,
    in_shape: &[usize],
    in_layout: Layout,
) -> String {
    if reshape_is_identity(out_shape, out_layout, in_shape, in_layout) {
        return "return j;".to_string();
    }
    let mut s = String::new();
    let logical = if is_row_major_bytes(out_shape, out_layout) {
        "j".to_string()
    } else {
        s.push_str(&decompose(out_shape, out_layout, "j", "o"));
        offset(out_shape, Layout::RowMajor, "o", 0)
    };
    if is_row_major_bytes(in_shape, in_layout) {
        let _ = write!(s, "return {logical};");
    } else {
        let _ = write!(s, "const int li = {logical}; ");
        s.push_str(&decompose(in_shape, Layout::RowMajor, "li", "i"));
        let _ = write!(s, "return {};", offset(in_shape, in_layout, "i", 0));
    }
    s
}

/// True when [`reshape_src`] is the identity.
pub fn reshape_is_identity(
    out_shape: &[usize],
    out_layout: Layout,
    in_shape: &[usize],
    in_layout: Layout,
) -> bool {
    (out_shape == in_shape && same_order(out_shape, out_layout, in_layout))
        || (is_row_major_bytes(out_shape, out_layout) && is_row_major_bytes(in_shape, in_layout))
}

/// Body of `int channel(int j)`: logical axis-1 coordinate of physical
/// index `j` of a value of `shape` in `layout`.
pub fn channel_of(shape: &[usize], layout: Layout) -> String {
    if shape.len() < 2 || shape[1] == 1 {
        return "return 0;".to_string();
    }
    format!("{}return o1;", decompose(shape, layout, "j", "o"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evaluates a rendered body for `j` with a tiny interpreter of the
    /// statement forms the renderer emits.
    pub(crate) fn eval(body: &str, j: i64) -> i64 {
        use std::collections::HashMap;
        let mut vars: HashMap<String, i64> = HashMap::new();
        vars.insert("j".into(), j);
        let value = |vars: &HashMap<String, i64>, e: &str| -> i64 {
            e.split(" + ")
                .map(|term| {
                    term.split(" * ")
                        .map(|f| f.trim().parse::<i64>().unwrap_or_else(|_| vars[f.trim()]))
                        .product::<i64>()
                })
                .sum()
        };
        for stmt in body.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(e) = stmt.strip_prefix("return ") {
                return value(&vars, e);
            }
            if stmt.starts_with("(void)") {
                continue;
            }
            let stmt = stmt.trim_start_matches("const ").trim_start_matches("int ");
            if let Some((lhs, rhs)) = stmt.split_once(" /= ") {
                let v = vars[lhs] / value(&vars, rhs);
                vars.insert(lhs.into(), v);
            } else if let Some((lhs, rhs)) = stmt.split_once(" = ") {
                let v = if let Some((a, m)) = rhs.split_once(" % ") {
                    vars[a] % m.parse::<i64>().unwrap()
                } else {
                    value(&vars, rhs)
                };
                vars.insert(lhs.into(), v);
            }
        }
        panic!("no return in {body}");
    }

    #[test]
    fn nhwc_to_nchw_copy_reads_the_right_elements() {
        let shape = [2usize, 3, 4, 5];
        let body = reshape_src(&shape, Layout::RowMajor, &shape, Layout::ChannelsLast);
        let s = Layout::ChannelsLast.strides(&shape);
        for j in 0..120i64 {
            let (n, c, h, w) = (j / 60, (j / 20) % 3, (j / 5) % 4, j % 5);
            let want = n * s[0] as i64 + c * s[1] as i64 + h * s[2] as i64 + w * s[3] as i64;
            assert_eq!(eval(&body, j), want, "j={j}");
        }
        let back = reshape_src(&shape, Layout::ChannelsLast, &shape, Layout::RowMajor);
        for j in 0..120i64 {
            assert_eq!(eval(&body, eval(&back, j)), j);
        }
    }

    #[test]
    fn broadcast_reads_size_one_axes_at_zero() {
        let body = broadcast_src(&[2, 3, 4], Layout::RowMajor, &[3, 1], Layout::RowMajor);
        for j in 0..24i64 {
            assert_eq!(eval(&body, j), (j / 4) % 3);
        }
        assert_eq!(
            broadcast_src(&[2, 3], Layout::RowMajor, &[2, 3], Layout::RowMajor),
            "return j;"
        );
        assert_eq!(
            eval(
                &broadcast_src(&[2, 3], Layout::RowMajor, &[], Layout::RowMajor),
                5
            ),
            0
        );
    }

    #[test]
    fn flatten_of_row_major_bytes_is_the_identity() {
        assert!(reshape_is_identity(
            &[1, 2048],
            Layout::RowMajor,
            &[1, 2048, 1, 1],
            Layout::ChannelsLast
        ));
        assert_eq!(
            channel_of(&[2, 3, 4, 5], Layout::ChannelsLast).ends_with("return o1;"),
            true
        );
        assert_eq!(eval(&channel_of(&[2, 3, 4, 5], Layout::ChannelsLast), 7), 1);
    }
}
