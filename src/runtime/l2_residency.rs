//! Keeping a model's weights in the GPU's L2 cache between inferences.
//!
//! At batch 1 ResNet-50's fp16 weights (48.7 MiB) are about the size of the
//! H200's L2 (50 MiB): read once per inference in the same order, they evict
//! each other and every layer streams its weights from DRAM. An L2 access
//! policy window (sm_80+) marks a share of the weights' lines *persisting*:
//! they stay in the L2's set-aside part across kernels and inferences, and
//! the other accesses to the window are *streaming* (evicted first). This
//! module only plans the window; `Model::load` sets the context's persisting
//! limit (`cuCtxSetLimit`, this process's context only: no device setting
//! changes) and attaches the window to every launch.

use std::fmt;
use std::str::FromStr;

/// Which of a model's weights are kept in L2 between inferences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L2Residency {
    /// No access policy window: the L2 caches as it always does.
    #[default]
    Off,
    /// The window spans all the weights; a fraction of its lines (the
    /// persisting limit over the window's size), spread over every layer,
    /// persists.
    Spread,
    /// The window is the weights' last bytes, as many as persist, all of
    /// them persisting (the deep layers, whose weights are the largest).
    Tail,
}

impl L2Residency {
    /// The values `--l2` accepts, for help and errors.
    pub const NAMES: [&'static str; 3] = ["off", "spread", "tail"];
}

impl fmt::Display for L2Residency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            L2Residency::Off => "off",
            L2Residency::Spread => "spread",
            L2Residency::Tail => "tail",
        })
    }
}

impl FromStr for L2Residency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(L2Residency::Off),
            "spread" => Ok(L2Residency::Spread),
            "tail" => Ok(L2Residency::Tail),
            _ => Err(format!(
                "unknown L2 residency `{s}` (expected one of {})",
                L2Residency::NAMES.join(", ")
            )),
        }
    }
}

/// What the device allows (`cuDeviceGetAttribute`); zero where it has no
/// persisting L2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct L2Limits {
    /// `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`.
    pub l2_bytes: u64,
    /// `CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`.
    pub max_persisting_bytes: u64,
    /// `CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE`.
    pub max_window_bytes: u64,
}

/// The window to attach to every launch, and the persisting limit to set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct L2Plan {
    /// `cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, ..)`.
    pub persisting_limit: u64,
    /// Device address where the window starts.
    pub base: u64,
    /// Window size in bytes.
    pub bytes: u64,
    /// Fraction of the window's lines that persist.
    pub hit_ratio: f32,
}

impl L2Plan {
    /// Bytes of the window expected to persist.
    pub fn persisting_bytes(&self) -> u64 {
        (self.bytes as f64 * self.hit_ratio as f64) as u64
    }
}

/// Plans `residency` for weights at `[base, base + bytes)`. `Ok(None)` for
/// [`L2Residency::Off`] and for no weights; an error (a sentence saying why)
/// where the device has no persisting L2.
pub fn plan(
    residency: L2Residency,
    limits: L2Limits,
    base: u64,
    bytes: u64,
) -> Result<Option<L2Plan>, String> {
    if residency == L2Residency::Off || bytes == 0 {
        return Ok(None);
    }
    if limits.max_persisting_bytes == 0 || limits.max_window_bytes == 0 {
        return Err(format!(
            "this GPU has no persisting L2 (max persisting {} B, max window {} B): \
             use `--l2 off`",
            limits.max_persisting_bytes, limits.max_window_bytes
        ));
    }
    let persisting = limits.max_persisting_bytes;
    let plan = match residency {
        L2Residency::Off => unreachable!("handled above"),
        L2Residency::Spread => {
            let window = bytes.min(limits.max_window_bytes);
            L2Plan {
                persisting_limit: persisting,
                base,
                bytes: window,
                hit_ratio: (persisting as f64 / window as f64).min(1.0) as f32,
            }
        }
        L2Residency::Tail => {
            let window = bytes.min(persisting).min(limits.max_window_bytes);
            L2Plan {
                persisting_limit: persisting,
                base: base + (bytes - window),
                bytes: window,
                hit_ratio: 1.0,
            }
        }
    };
    Ok(Some(plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: L2Limits = L2Limits {
        l2_bytes: 50 << 20,
        max_persisting_bytes: 30 << 20,
        max_window_bytes: 128 << 20,
    };

    #[test]
    fn off_and_empty_weights_plan_nothing() {
        assert_eq!(plan(L2Residency::Off, H200, 0x1000, 1 << 20), Ok(None));
        assert_eq!(plan(L2Residency::Tail, H200, 0x1000, 0), Ok(None));
    }

    #[test]
    fn spread_covers_all_weights_at_the_ratio_that_fits() {
        let p = plan(L2Residency::Spread, H200, 0x1000, 60 << 20)
            .unwrap()
            .unwrap();
        assert_eq!((p.base, p.bytes), (0x1000, 60 << 20));
        assert!((p.hit_ratio - 0.5).abs() < 1e-6);
        assert_eq!(p.persisting_bytes(), 30 << 20);
        assert_eq!(p.persisting_limit, 30 << 20);
    }

    #[test]
    fn spread_of_small_weights_persists_all_of_them() {
        let p = plan(L2Residency::Spread, H200, 0, 8 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(p.hit_ratio, 1.0);
        assert_eq!(p.bytes, 8 << 20);
    }

    #[test]
    fn tail_ends_where_the_weights_end() {
        let p = plan(L2Residency::Tail, H200, 0x1000, 60 << 20)
            .unwrap()
            .unwrap();
        assert_eq!(p.bytes, 30 << 20);
        assert_eq!(p.base + p.bytes, 0x1000 + (60 << 20));
        assert_eq!(p.hit_ratio, 1.0);
        let small = plan(L2Residency::Tail, H200, 0x1000, 4 << 20)
            .unwrap()
            .unwrap();
        assert_eq!((small.base, small.bytes), (0x1000, 4 << 20));
    }

    #[test]
    fn a_window_never_exceeds_the_device_maximum() {
        let limits = L2Limits {
            max_window_bytes: 16 << 20,
            ..H200
        };
        for r in [L2Residency::Spread, L2Residency::Tail] {
            let p = plan(r, limits, 0, 60 << 20).unwrap().unwrap();
            assert!(p.bytes <= 16 << 20, "{r}: {p:?}");
        }
    }

    #[test]
    fn a_gpu_without_persisting_l2_is_an_error_that_says_what_to_do() {
        let none = L2Limits::default();
        let e = plan(L2Residency::Spread, none, 0, 1 << 20).unwrap_err();
        assert!(e.contains("--l2 off"), "{e}");
    }

    #[test]
    fn names_round_trip() {
        for name in L2Residency::NAMES {
            assert_eq!(name.parse::<L2Residency>().unwrap().to_string(), name);
        }
        assert!("on".parse::<L2Residency>().unwrap_err().contains("spread"));
    }
}
