//! Tests of the attention kernels' configs and rendering (`attention.rs`):
//! the shape a node gives (strides, the mask's batch period), defaults
//! valid and in their spaces, unique tags, the defaults for real models,
//! and every template variant × a sample of its space through nvcc without
//! spills (skipped without nvcc), with ptxas's registers of the defaults.

use super::attention::{attention_shape, AttentionConfig, AttentionMmaConfig, AttentionShape};
use crate::codegen::cuda::config::KernelConfig;
use crate::codegen::cuda::source::Instance;
use crate::codegen::cuda::test_support::{compile_all, node_instance, nvcc, sample};
use crate::ir::{DType, Graph, Layout, NodeId, Op, Precision};
use crate::test_graphs::{one_op, In};
use std::collections::HashSet;
use std::fmt::Write;

/// One attention case: q `[b, h, sq, d]`, k/v with `hkv` heads and `skv`
/// keys, optionally a mask of `mask` shape (constant f32, as the passes
/// leave it), at `precision`.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub label: &'static str,
    pub q: [usize; 4],
    pub hkv: usize,
    pub skv: usize,
    pub dv: usize,
    pub mask: Option<&'static [usize]>,
    pub causal: bool,
}

impl Case {
    fn graph(&self, precision: Precision) -> Graph {
        let s = precision.storage();
        let rm = Layout::RowMajor;
        let [b, h, sq, d] = self.q;
        let mut inputs = vec![
            In::act(&[b, h, sq, d], s, rm),
            In::act(&[b, self.hkv, self.skv, d], s, rm),
            In::act(&[b, self.hkv, self.skv, self.dv], s, rm),
        ];
        if let Some(m) = self.mask {
            inputs.push(In::constant(m, DType::F32, rm, 3));
        }
        let op = Op::Attention {
            scale: (d as f32).powf(-0.5),
            causal: self.causal,
            views: None,
        };
        one_op(op, &inputs, s, rm, precision).0
    }

    fn shape(&self, precision: Precision) -> AttentionShape {
        attention_shape(&self.graph(precision), NodeId(0)).unwrap()
    }
}

const fn case(label: &'static str, q: [usize; 4], skv: usize) -> Case {
    Case {
        label,
        q,
        hkv: q[1],
        skv,
        dv: q[3],
        mask: None,
        causal: false,
    }
}

/// The shapes of the issue and of real models.
pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("vit_b1", [1, 12, 197, 64], 197),
        case("vit_b64", [64, 12, 197, 64], 197),
        Case {
            mask: Some(&[64, 3, 49, 49]),
            ..case("swin_s1_shifted", [64, 3, 49, 32], 49)
        },
        Case {
            mask: Some(&[1, 24, 49, 49]),
            ..case("swin_s4", [1, 24, 49, 32], 49)
        },
        Case {
            mask: Some(&[3, 49, 49]),
            ..case("masked_4x3", [4, 3, 49, 32], 49)
        },
        Case {
            causal: true,
            ..case("causal", [1, 2, 130, 64], 130)
        },
        case("d128", [2, 4, 100, 128], 100),
        case("d32", [2, 4, 77, 32], 77),
        case("long_kv", [1, 1, 77, 64], 4096),
        Case {
            hkv: 2,
            dv: 32,
            mask: Some(&[1, 1, 1, 40]),
            causal: true,
            ..case("gqa_dv", [2, 4, 33, 64], 40)
        },
        case("d24", [2, 2, 21, 24], 21),
        case("d256", [1, 2, 16, 256], 16),
    ]
}

#[test]
fn the_mask_is_read_modulo_its_batch_with_zero_strides_on_broadcast_axes() {
    let c = Case {
        mask: Some(&[4, 1, 49, 49]),
        ..case("m", [8, 3, 49, 32], 49)
    };
    let shape = c.shape(Precision::Fp16);
    let mask = shape.mask.unwrap();
    assert_eq!((mask.groups, mask.strides), (4, [2401, 0, 49, 1]));
    assert_eq!(shape.q.strides, [3 * 49 * 32, 49 * 32, 32]);
    // A 3-D mask [H, Sq, Skv] is one batch; a key-only mask broadcasts rows.
    let c = Case {
        mask: Some(&[1, 1, 49]),
        ..c
    };
    let mask = c.shape(Precision::Fp32).mask.unwrap();
    assert_eq!((mask.groups, mask.strides), (1, [0, 0, 0, 1]));
}

#[test]
fn three_d_operands_read_as_one_batch_of_heads() {
    let rm = Layout::RowMajor;
    let inputs = [
        In::act(&[6, 10, 16], DType::F16, rm),
        In::act(&[6, 12, 16], DType::F16, rm),
        In::act(&[6, 12, 32], DType::F16, rm),
    ];
    let op = Op::Attention {
        scale: 0.25,
        causal: false,
        views: None,
    };
    let (g, _) = one_op(op, &inputs, DType::F16, rm, Precision::Fp16);
    let shape = attention_shape(&g, NodeId(0)).unwrap();
    assert_eq!(
        (shape.batch, shape.heads, shape.sq, shape.skv, shape.dv),
        (1, 6, 10, 12, 32)
    );
    assert_eq!(shape.out.strides, [6 * 10 * 32, 10 * 32, 32]);
}

#[test]
fn defaults_are_valid_and_in_their_spaces_with_unique_tags() {
    for c in cases() {
        for precision in Precision::ALL {
            let shape = c.shape(precision);
            let default = AttentionConfig::default_for(&shape);
            let what = format!("{} {precision}: {default:?}", c.label);
            assert_eq!(default.validate(&shape), Ok(()), "{what}");
            let space = AttentionConfig::search_space(&shape);
            assert!(space.contains(&default), "{what} not in its space");
            assert!(space.iter().all(|x| x.validate(&shape).is_ok()), "{what}");
            let tags: HashSet<String> = space.iter().map(KernelConfig::tag).collect();
            assert_eq!(tags.len(), space.len(), "{what}: duplicate tags");
            let tensor_cores = matches!(default, AttentionConfig::Mma(_));
            let expect = precision.storage() != DType::F32 && !matches!(c.q[3], 24 | 256);
            assert_eq!(tensor_cores, expect, "{what}");
        }
    }
}

#[test]
fn configs_round_trip_through_json_and_invalid_ones_say_why() {
    let shape = cases()[0].shape(Precision::Fp16);
    for c in AttentionConfig::search_space(&shape) {
        let json = serde_json::to_value(c).unwrap();
        assert_eq!(serde_json::from_value::<AttentionConfig>(json).unwrap(), c);
    }
    let bad: AttentionConfig = serde_json::from_value(serde_json::json!(
        {"kernel": "mma", "block_q": 48, "block_kv": 64, "stages": 2}
    ))
    .unwrap();
    assert!(bad.validate(&shape).unwrap_err().contains("block_q"));
    // The tensor-core kernel refuses f32 storage.
    let f32_shape = cases()[0].shape(Precision::Fp32);
    let mma = AttentionConfig::default_for(&shape);
    assert!(mma.validate(&f32_shape).unwrap_err().contains("f16/bf16"));
}

#[test]
fn key_groups_split_the_keys_and_hand_over_through_the_kv_stages() {
    // ViT-B/16 at batch 1: 197 keys, d = dv = 64.
    let shape = cases()[0].shape(Precision::Fp16);
    let json = serde_json::json!(
        {"kernel": "mma", "block_q": 32, "block_kv": 64, "stages": 2, "kv_split": 2}
    );
    let c: AttentionConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(c.validate(&shape), Ok(()));
    assert_eq!(c.tag(), "mma_q32k64s2x2");
    assert_eq!(serde_json::to_value(c).unwrap(), json);
    let AttentionConfig::Mma(m) = c else {
        unreachable!()
    };
    assert_eq!(m.threads(), 2 * 32 * 2);
    // Q tile 32 × 72 halves, 2 steps of 128 keys × (72 + 72) halves.
    assert_eq!(m.smem_bytes(&shape), 2 * 32 * 72 + 2 * 2 * 128 * 144);
    // Without the field: one group, as before.
    let old: AttentionConfig = serde_json::from_value(serde_json::json!(
        {"kernel": "mma", "block_q": 32, "block_kv": 64, "stages": 2}
    ))
    .unwrap();
    assert!(matches!(old, AttentionConfig::Mma(m) if m.kv_split == 1));
    assert_eq!(old.tag(), "mma_q32k64s2");
    let with = |block_kv, stages, kv_split| AttentionMmaConfig {
        block_q: 32,
        block_kv,
        stages,
        kv_split,
    };
    assert!(with(64, 1, 3)
        .validate(&shape)
        .unwrap_err()
        .contains("1, 2 or 4"));
    // 4 groups of 128 keys leave the last ones none of the 197.
    assert!(with(128, 1, 4)
        .validate(&shape)
        .unwrap_err()
        .contains("without keys"));
    // Two steps of 256 keys would need 394.
    assert!(with(128, 2, 2)
        .validate(&shape)
        .unwrap_err()
        .contains("key step"));
    let space = AttentionConfig::search_space(&shape);
    assert!(space.contains(&c));
    assert!(space
        .iter()
        .any(|c| matches!(c, AttentionConfig::Mma(m) if m.kv_split == 4)));
}

#[test]
fn default_configs_of_real_models() {
    let mut table = String::new();
    for c in cases() {
        for precision in [Precision::Fp16, Precision::Fp32] {
            let shape = c.shape(precision);
            let d = AttentionConfig::default_for(&shape);
            let grid = match d {
                AttentionConfig::Mma(m) => shape.ctas(m.block_q as usize),
                AttentionConfig::Simt(s) => shape.ctas(s.block_q as usize),
            };
            let _ = writeln!(
                table,
                "{:<16} {precision}  {:<18} {grid} CTAs",
                c.label,
                d.tag()
            );
        }
    }
    insta::assert_snapshot!(table, @r"
    vit_b1           fp16  mma_q32k64s2x2     84 CTAs
    vit_b1           fp32  simt_q16k32t8      156 CTAs
    vit_b64          fp16  mma_q128k64s2      1536 CTAs
    vit_b64          fp32  simt_q16k32t8      9984 CTAs
    swin_s1_shifted  fp16  mma_q32k64s1       384 CTAs
    swin_s1_shifted  fp32  simt_q32k32t4      384 CTAs
    swin_s4          fp16  mma_q16k64s1       96 CTAs
    swin_s4          fp32  simt_q32k32t4      48 CTAs
    masked_4x3       fp16  mma_q16k64s1       48 CTAs
    masked_4x3       fp32  simt_q32k32t4      24 CTAs
    causal           fp16  mma_q16k64s2       18 CTAs
    causal           fp32  simt_q16k32t8      18 CTAs
    d128             fp16  mma_q16k64s2       56 CTAs
    d128             fp32  simt_q16k32t8      56 CTAs
    d32              fp16  mma_q16k64s2       40 CTAs
    d32              fp32  simt_q32k32t4      24 CTAs
    long_kv          fp16  mma_q32k64s2x2     3 CTAs
    long_kv          fp32  simt_q16k32t8      5 CTAs
    gqa_dv           fp16  mma_q16k64s1       24 CTAs
    gqa_dv           fp32  simt_q32k32t4      16 CTAs
    d24              fp16  simt_q32k32t4      4 CTAs
    d24              fp32  simt_q32k32t4      4 CTAs
    d256             fp16  simt_q16k32t8      2 CTAs
    d256             fp32  simt_q16k32t8      2 CTAs
    ");
}

/// The instances the nvcc sweep compiles: per case and precision the
/// default and a sample of the space.
fn sweep_instances(per_case: usize) -> (Vec<Instance>, Vec<(String, String)>) {
    let mut instances = Vec::new();
    let mut defaults = Vec::new();
    for c in cases() {
        for precision in [
            Precision::Fp32,
            Precision::Tf32,
            Precision::Fp16,
            Precision::Bf16,
        ] {
            let graph = c.graph(precision);
            let shape = c.shape(precision);
            let label = format!("{}_{precision}", c.label);
            let default = node_instance::<AttentionConfig>(&graph, None, &label);
            defaults.push((label.clone(), default.symbol.clone()));
            instances.push(default);
            let space = AttentionConfig::search_space(&shape);
            let n = if precision == Precision::Fp16 || precision == Precision::Fp32 {
                per_case
            } else {
                2
            };
            let mut configs = sample(&space, n);
            // The first config with each key-group count (the merge path).
            for split in [2, 4] {
                configs.extend(
                    space
                        .iter()
                        .find(|c| matches!(c, AttentionConfig::Mma(m) if m.kv_split == split))
                        .copied(),
                );
            }
            // The whole-sequence query tile (a CTA of 3 to 16 warps).
            configs.extend(
                space
                    .iter()
                    .find(|c| matches!(c, AttentionConfig::Mma(m) if !m.block_q.is_power_of_two())),
            );
            for (i, config) in configs.iter().enumerate() {
                instances.push(node_instance(&graph, Some(config), &format!("{label}_{i}")));
            }
        }
    }
    (instances, defaults)
}

#[test]
fn attention_kernels_compile_without_spills() {
    let Some(nvcc) = nvcc::find_or_skip() else {
        return;
    };
    let (instances, defaults) = sweep_instances(6);
    let reports = compile_all(&nvcc, "attention_sweep", instances);
    for (label, symbol) in defaults {
        if let Some(r) = reports.iter().find(|r| r.name == symbol) {
            println!(
                "default {label:<24} {symbol}: {} registers, {} B stack",
                r.registers, r.stack_bytes
            );
        }
    }
}
