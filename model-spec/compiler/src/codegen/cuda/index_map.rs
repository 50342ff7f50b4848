//! Index plumbing rendered into instantiations: from an output element's
//! physical index `j` to the physical offset of the input element it reads.
//!
//! Each value's physical order is its layout's permutation of the logical
//! axes ([`Layout::strides`]). A logical coordinate of physical index `j` is
//! `j / s % d` (s: the axis's physical stride, d: its size), and an offset
//! is a sum of coordinates times strides, so every map is one expression.
//! [`broadcast_src`] maps through the *logical coordinates* (numpy
//! broadcasting: input axes aligned to the right, size-1 axes read index 0),
//! [`reshape_src`] through the *logical row-major index* (views and
//! Converts, whose shapes may differ but whose logical order is the same).
//! Both collapse to `return j;` when the two physical orders coincide, which
//! the templates use to vectorize.

use crate::ir::{is_row_major_bytes, Layout};

/// True when a value of `shape` in layout `a` has the same element order as
/// in layout `b`.
pub fn same_order(shape: &[usize], a: Layout, b: Layout) -> bool {
    a == b || (is_row_major_bytes(shape, a) && is_row_major_bytes(shape, b))
}

/// Element strides of each logical axis of `shape` in `layout`.
fn strides(shape: &[usize], layout: Layout) -> Vec<usize> {
    if shape.len() == 4 {
        layout.strides(shape)
    } else {
        Layout::RowMajor.strides(shape)
    }
}

/// Expression of logical coordinate `axis` of physical index `var` in a
/// value of `shape` laid out in `layout`.
fn coordinate(var: &str, shape: &[usize], layout: Layout, axis: usize) -> String {
    let s = strides(shape, layout)[axis];
    let d = shape[axis];
    let total: usize = shape.iter().product();
    match (s, s * d == total) {
        (1, true) => var.to_string(),
        (1, false) => format!("{var} % {d}"),
        (s, true) => format!("{var} / {s}"),
        (s, false) => format!("{var} / {s} % {d}"),
    }
}

/// Expression of the physical offset, in a value of `in_shape` laid out in
/// `in_layout`, of the element whose logical coordinates are those of
/// physical index `var` of a value of `out_shape` in `out_layout`; input
/// axes align to the right of the output's and size-1 input axes read 0.
fn offset(
    var: &str,
    out_shape: &[usize],
    out_layout: Layout,
    in_shape: &[usize],
    in_layout: Layout,
) -> String {
    let lead = out_shape.len().saturating_sub(in_shape.len());
    let terms: Vec<String> = strides(in_shape, in_layout)
        .iter()
        .enumerate()
        .filter(|&(axis, _)| in_shape[axis] != 1)
        .map(|(axis, &stride)| {
            let c = coordinate(var, out_shape, out_layout, axis + lead);
            match stride {
                1 => format!("({c})"),
                s => format!("({c}) * {s}"),
            }
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
    if broadcast_is_identity(out_shape, out_layout, in_shape, in_layout) {
        return "return j;".to_string();
    }
    format!(
        "return {};",
        offset("j", out_shape, out_layout, in_shape, in_layout)
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

/// True when `v` consecutive output elements (physical, from a multiple of
/// `v`) read `v` consecutive input elements from a multiple of `v`, so both
/// move with one vector access: the output's innermost axis (stride 1) is
/// the input's innermost axis too, not broadcast, with a multiple of `v`
/// elements. Every other stride of a dense layout is then a multiple of
/// that extent.
pub fn moves_in_vectors(
    out_shape: &[usize],
    out_layout: Layout,
    in_shape: &[usize],
    in_layout: Layout,
    v: usize,
) -> bool {
    let Some(axis) = innermost_axis(out_shape, out_layout) else {
        return false;
    };
    let extent = out_shape[axis];
    let Some(skipped) = out_shape.len().checked_sub(in_shape.len()) else {
        return false;
    };
    if extent % v != 0 || axis < skipped {
        return false;
    }
    let in_axis = axis - skipped;
    in_shape[in_axis] == extent && innermost_axis(in_shape, in_layout) == Some(in_axis)
}

/// The axis of stride 1 and more than one element of a value of `shape` in
/// `layout`; `None` when every axis has one element.
fn innermost_axis(shape: &[usize], layout: Layout) -> Option<usize> {
    let strides = strides(shape, layout);
    (0..shape.len()).find(|&a| strides[a] == 1 && shape[a] > 1)
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
    let logical = if is_row_major_bytes(out_shape, out_layout) {
        "j".to_string()
    } else {
        offset("j", out_shape, out_layout, out_shape, Layout::RowMajor)
    };
    if is_row_major_bytes(in_shape, in_layout) {
        format!("return {logical};")
    } else {
        format!(
            "const int li = {logical}; return {};",
            offset("li", in_shape, Layout::RowMajor, in_shape, in_layout)
        )
    }
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
    format!("return {};", coordinate("j", shape, layout, 1))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Evaluates a rendered body (`return e;` or `const int v = e; return
    /// e;`) with `+ * / %` and parentheses, for `j`.
    pub(crate) fn eval(body: &str, j: i64) -> i64 {
        fn expr(tokens: &[&str], pos: &mut usize, vars: &[(String, i64)]) -> i64 {
            let mut value = term(tokens, pos, vars);
            while *pos < tokens.len() && tokens[*pos] == "+" {
                *pos += 1;
                value += term(tokens, pos, vars);
            }
            value
        }
        fn term(tokens: &[&str], pos: &mut usize, vars: &[(String, i64)]) -> i64 {
            let mut value = atom(tokens, pos, vars);
            while *pos < tokens.len() && matches!(tokens[*pos], "*" | "/" | "%") {
                let op = tokens[*pos];
                *pos += 1;
                let rhs = atom(tokens, pos, vars);
                value = match op {
                    "*" => value * rhs,
                    "/" => value / rhs,
                    _ => value % rhs,
                };
            }
            value
        }
        fn atom(tokens: &[&str], pos: &mut usize, vars: &[(String, i64)]) -> i64 {
            let t = tokens[*pos];
            *pos += 1;
            if t == "(" {
                let v = expr(tokens, pos, vars);
                *pos += 1; // ")"
                return v;
            }
            t.parse()
                .unwrap_or_else(|_| vars.iter().find(|(n, _)| n == t).expect(t).1)
        }
        let spaced = body.replace('(', " ( ").replace(')', " ) ");
        let mut vars = vec![("j".to_string(), j)];
        for stmt in spaced.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let tokens: Vec<&str> = stmt.split_whitespace().collect();
            match tokens.as_slice() {
                ["return", rest @ ..] => return expr(rest, &mut 0, &vars),
                ["const", "int", name, "=", rest @ ..] => {
                    let v = expr(rest, &mut 0, &vars);
                    vars.push((name.to_string(), v));
                }
                _ => panic!("unexpected statement {stmt}"),
            }
        }
        panic!("no return in {body}");
    }

    /// Where [`moves_in_vectors`] says yes, `v` consecutive outputs from a
    /// multiple of `v` read `v` consecutive inputs from a multiple of `v`.
    #[test]
    fn vector_moves_read_whole_aligned_vectors() {
        use Layout::{ChannelsLast as Cl, RowMajor as Rm};
        /// Output shape and layout, input shape and layout, vector, answer.
        type Case<'a> = (&'a [usize], Layout, &'a [usize], Layout, usize, bool);
        let cases: [Case; 10] = [
            // ViT's position embedding, broadcast over the batch.
            (&[4, 197, 768], Rm, &[1, 197, 768], Rm, 8, true),
            (&[4, 197, 768], Rm, &[197, 768], Rm, 8, true),
            (&[4, 197, 768], Rm, &[4, 197, 768], Rm, 8, true),
            // A per-channel scale against channels-last activations.
            (&[2, 16, 3, 3], Cl, &[16, 1, 1], Rm, 8, true),
            (&[2, 16, 3, 3], Cl, &[2, 16, 3, 3], Cl, 4, true),
            // The innermost axis broadcast, or not a multiple of v.
            (&[4, 6, 8], Rm, &[4, 6, 1], Rm, 2, false),
            (&[4, 6, 12], Rm, &[12], Rm, 8, false),
            // Different innermost axes.
            (&[2, 16, 3, 3], Cl, &[2, 16, 3, 3], Rm, 2, false),
            (&[2, 4, 4, 4], Rm, &[2, 4, 4, 4], Cl, 4, false),
            (&[3, 1], Rm, &[], Rm, 2, false),
        ];
        for (out, out_layout, input, in_layout, v, want) in cases {
            let got = moves_in_vectors(out, out_layout, input, in_layout, v);
            assert_eq!(
                got, want,
                "{out:?} {out_layout:?} <- {input:?} {in_layout:?} by {v}"
            );
            if !got {
                continue;
            }
            let body = broadcast_src(out, out_layout, input, in_layout);
            let total: usize = out.iter().product();
            for first in (0..total as i64).step_by(v) {
                let at = eval(&body, first);
                assert_eq!(at % v as i64, 0, "{body} at {first}");
                for e in 1..v as i64 {
                    assert_eq!(eval(&body, first + e), at + e, "{body} at {first}+{e}");
                }
            }
        }
    }

    #[test]
    fn nhwc_to_nchw_copy_reads_the_right_elements() {
        let shape = [2usize, 3, 4, 5];
        let body = reshape_src(&shape, Layout::RowMajor, &shape, Layout::ChannelsLast);
        let s = Layout::ChannelsLast.strides(&shape);
        for j in 0..120i64 {
            let (n, c, h, w) = (j / 60, (j / 20) % 3, (j / 5) % 4, j % 5);
            let want = n * s[0] as i64 + c * s[1] as i64 + h * s[2] as i64 + w * s[3] as i64;
            assert_eq!(eval(&body, j), want, "j={j} {body}");
        }
        let back = reshape_src(&shape, Layout::ChannelsLast, &shape, Layout::RowMajor);
        for j in 0..120i64 {
            assert_eq!(eval(&body, eval(&back, j)), j);
        }
    }

    #[test]
    fn flatten_of_channels_last_reads_through_the_layout() {
        // [2,3,2,2] NHWC flattened to [2,12] row-major.
        let body = reshape_src(
            &[2, 12],
            Layout::RowMajor,
            &[2, 3, 2, 2],
            Layout::ChannelsLast,
        );
        let s = Layout::ChannelsLast.strides(&[2, 3, 2, 2]);
        for j in 0..24i64 {
            let (n, c, h, w) = (j / 12, (j / 4) % 3, (j / 2) % 2, j % 2);
            let want = n * s[0] as i64 + c * s[1] as i64 + h * s[2] as i64 + w * s[3] as i64;
            assert_eq!(eval(&body, j), want, "{body}");
        }
    }

    #[test]
    fn broadcast_reads_size_one_axes_at_zero() {
        let body = broadcast_src(&[2, 3, 4], Layout::RowMajor, &[3, 1], Layout::RowMajor);
        assert_eq!(body, "return (j / 4 % 3);");
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
        // [5, 1, 1] against [1, 2, 3] → [5, 2, 3].
        let body = broadcast_src(&[5, 2, 3], Layout::RowMajor, &[1, 2, 3], Layout::RowMajor);
        for j in 0..30i64 {
            assert_eq!(eval(&body, j), j % 6);
        }
    }

    #[test]
    fn row_major_bytes_need_no_map() {
        assert!(reshape_is_identity(
            &[1, 2048],
            Layout::RowMajor,
            &[1, 2048, 1, 1],
            Layout::ChannelsLast
        ));
        assert_eq!(eval(&channel_of(&[2, 3, 4, 5], Layout::ChannelsLast), 7), 1);
        assert_eq!(eval(&channel_of(&[2, 3, 4, 5], Layout::RowMajor), 47), 2);
    }
}
