//! The GPU-free half of loading a model: checking that a [`ModelSpec`] is
//! consistent, and turning each launch's arguments into the device addresses
//! its kernel receives.
//!
//! A spec is checked once, before any device work: one row-major input
//! (f32, or f16/bf16 from `Build::input_dtype`) and one f32 row-major
//! output, every tensor slot inside the arena, every launch naming an
//! existing kernel and value, non-empty grid and block, and every argument
//! offset inside the arena or the weight blob. After that, resolving an
//! [`Arg`] is `base + offset`, and the runtime can launch without further
//! checks. Kernel parameters are all 8-byte pointers.

use aotune_spec::artifact::{Arg, Launch, LibraryMatmul, ModelSpec, TensorSlot, FORMAT_VERSION};
use aotune_spec::types::{DType, Layout};

use super::error::RuntimeError;

/// Where the arena and the weights live on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceBases {
    pub arena: u64,
    pub weights: u64,
}

/// The device address each argument resolves to, in parameter order.
pub fn resolve_args(args: &[Arg], bases: DeviceBases) -> Vec<u64> {
    args.iter()
        .map(|arg| match *arg {
            Arg::Arena(offset) => bases.arena + offset,
            Arg::Weights(offset) => bases.weights + offset,
        })
        .collect()
}

/// The largest dynamic shared memory any launch of each kernel asks for,
/// indexed like [`ModelSpec::kernels`].
pub fn max_shared_bytes_per_kernel(spec: &ModelSpec) -> Vec<u32> {
    let mut max = vec![0u32; spec.kernels.len()];
    for launch in spec.launches.iter() {
        if let Some(m) = max.get_mut(launch.kernel as usize) {
            *m = (*m).max(launch.smem_bytes);
        }
    }
    max
}

/// Checks everything the runtime relies on before touching the device.
pub fn validate(spec: &ModelSpec) -> Result<(), RuntimeError> {
    if spec.format_version != FORMAT_VERSION {
        return Err(RuntimeError::FormatVersion {
            origin: format!("the spec of model `{}`", spec.name),
            found: spec.format_version,
            expected: FORMAT_VERSION,
        });
    }
    let invalid = |reason: String| RuntimeError::InvalidSpec {
        model: spec.name.to_string(),
        reason,
    };
    if spec.arena_bytes == 0 {
        return Err(invalid("the arena is empty (arena_bytes = 0)".into()));
    }
    for (role, slots) in [("input", &spec.inputs), ("output", &spec.outputs)] {
        if slots.len() != 1 {
            return Err(invalid(format!(
                "the runtime supports exactly one graph {role}, the spec has {}",
                slots.len()
            )));
        }
        check_io_slot(role, &slots[0]).map_err(&invalid)?;
    }
    let all_slots = spec
        .inputs
        .iter()
        .map(|s| ("input", s))
        .chain(spec.outputs.iter().map(|s| ("output", s)))
        .chain(spec.values.iter().map(|s| ("value", s)));
    for (role, slot) in all_slots {
        let end = slot.offset.checked_add(slot.bytes);
        if end.is_none_or(|end| end > spec.arena_bytes) {
            return Err(invalid(format!(
                "{role} `{}` occupies bytes {}..{}+{} but the arena has {} bytes",
                slot.name, slot.offset, slot.offset, slot.bytes, spec.arena_bytes
            )));
        }
    }
    for (index, symbol) in spec.kernels.iter().enumerate() {
        if symbol.is_empty() || symbol.contains('\0') {
            return Err(invalid(format!(
                "kernels[{index}] = {symbol:?} is not a symbol name"
            )));
        }
    }
    for (index, launch) in spec.launches.iter().enumerate() {
        check_launch(spec, launch).map_err(|reason| {
            invalid(format!("launch {index} (node `{}`): {reason}", launch.node))
        })?;
    }
    Ok(())
}

/// A graph input or output: row-major, non-empty, `dtype.size()` bytes per
/// element; an output is f32, an input f32, f16 or bf16 (a build with
/// `Build::input_dtype`).
fn check_io_slot(role: &str, slot: &TensorSlot) -> Result<(), String> {
    let dtype_ok = slot.dtype == DType::F32 || role == "input";
    if !dtype_ok || slot.layout != Layout::RowMajor {
        return Err(format!(
            "graph {role} `{}` is {:?} {:?}; graph inputs must be row-major and outputs f32 \
             row-major",
            slot.name, slot.dtype, slot.layout
        ));
    }
    let elements = slot.elements();
    if elements == 0 || slot.bytes != (slot.dtype.size() * elements) as u64 {
        return Err(format!(
            "graph {role} `{}` has shape {:?} ({elements} elements) but {} bytes",
            slot.name, slot.shape, slot.bytes
        ));
    }
    Ok(())
}

fn check_launch(spec: &ModelSpec, launch: &Launch) -> Result<(), String> {
    if let Some(m) = &launch.matmul {
        return check_matmul(spec, launch, m);
    }
    if launch.kernel as usize >= spec.kernels.len() {
        return Err(format!(
            "kernel index {} but the spec lists {} kernels",
            launch.kernel,
            spec.kernels.len()
        ));
    }
    if launch.output as usize >= spec.values.len() {
        return Err(format!(
            "output value index {} but the spec lists {} values",
            launch.output,
            spec.values.len()
        ));
    }
    if launch.grid.contains(&0) || launch.block.contains(&0) {
        return Err(format!(
            "empty grid {:?} or block {:?}",
            launch.grid, launch.block
        ));
    }
    for (position, arg) in launch.args.iter().enumerate() {
        let (region, offset, size) = match *arg {
            Arg::Arena(offset) => ("arena", offset, spec.arena_bytes),
            Arg::Weights(offset) => ("weights", offset, spec.weights.bytes),
        };
        if offset >= size {
            return Err(format!(
                "argument {position} points at {region} offset {offset} but the {region} has {size} bytes"
            ));
        }
    }
    Ok(())
}

/// A cuBLASLt launch: a 16-bit type, dimensions cuBLASLt takes, the args
/// its epilogue needs, and every operand's whole extent inside its region.
fn check_matmul(spec: &ModelSpec, launch: &Launch, m: &LibraryMatmul) -> Result<(), String> {
    if !matches!(m.dtype, DType::F16 | DType::BF16) {
        return Err(format!(
            "a cuBLASLt matmul of {:?} operands (f16 or bf16 only)",
            m.dtype
        ));
    }
    let limit = i32::MAX as u64;
    if [m.m, m.n, m.k].iter().any(|&d| d == 0 || d > limit) || m.k % 8 != 0 || m.n % 8 != 0 {
        return Err(format!(
            "cuBLASLt matmul dimensions M {} N {} K {} (each in 1..2^31, K and N multiples of 8)",
            m.m, m.n, m.k
        ));
    }
    if launch.args.len() != m.arg_count() {
        return Err(format!(
            "{} arguments where the matmul needs {}",
            launch.args.len(),
            m.arg_count()
        ));
    }
    let Some(out) = spec.values.get(launch.output as usize) else {
        return Err(format!(
            "output value index {} but the spec lists {} values",
            launch.output,
            spec.values.len()
        ));
    };
    let elem = m.dtype.size() as u64;
    if out.bytes != m.m * m.n * elem {
        return Err(format!(
            "its output `{}` has {} bytes, not M × N × {elem}",
            out.name, out.bytes
        ));
    }
    let mut extents = vec![m.m * m.k * elem, m.n * m.k * elem];
    if m.bias {
        extents.push(4 * m.n);
    }
    if m.residual {
        extents.push(m.m * m.n * elem);
    }
    extents.push(m.m * m.n * elem);
    for (position, (arg, bytes)) in launch.args.iter().zip(extents).enumerate() {
        let (region, offset, size) = match *arg {
            Arg::Arena(offset) => ("arena", offset, spec.arena_bytes),
            Arg::Weights(offset) => ("weights", offset, spec.weights.bytes),
        };
        if offset.checked_add(bytes).is_none_or(|end| end > size) {
            return Err(format!(
                "argument {position} ({bytes} bytes at {region} offset {offset}) runs past the \
                 {region}'s {size} bytes"
            ));
        }
    }
    if m.bias && !matches!(launch.args[2], Arg::Weights(_)) {
        return Err("the bias of a cuBLASLt matmul is not in the weights".into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use aotune_spec::artifact::WeightsInfo;
    use aotune_spec::types::Precision;

    fn slot(name: &str, elements: usize, offset: u64) -> TensorSlot {
        TensorSlot {
            name: name.to_string().into(),
            shape: vec![elements].into(),
            dtype: DType::F32,
            layout: Layout::RowMajor,
            offset,
            bytes: 4 * elements as u64,
        }
    }

    /// `y = relu(x + w)` over `n` floats as two launches, then `z = y` through a
    /// kernel that stages its block in `smem_bytes` of dynamic shared memory:
    /// x at arena 0, t at 4096, y at 8192, z at 12288; w at weights 0.
    pub(crate) fn relu_add_spec(n: usize, weights: &[u8], smem_bytes: u32) -> ModelSpec {
        assert!(4 * n <= 4096);
        let t = slot("t", n, 4096);
        let y = slot("y", n, 8192);
        let z = slot("z", n, 12288);
        let blocks = n.div_ceil(256) as u32;
        ModelSpec {
            format_version: FORMAT_VERSION,
            name: "relu_add".into(),
            build_key: "test".into(),
            batch: 1,
            precision: Precision::Fp32,
            arena_bytes: 16384,
            weights: WeightsInfo {
                bytes: weights.len() as u64,
                fnv1a64: aotune_spec::hash::fnv1a64(weights),
                file_name: "weights.bin".into(),
            },
            kernels: vec!["add_w".into(), "relu".into(), "copy_smem".into()].into(),
            launches: vec![
                Launch {
                    node: "add0".into(),
                    kernel: 0,
                    grid: [blocks, 1, 1],
                    block: [256, 1, 1],
                    smem_bytes: 0,
                    args: vec![Arg::Arena(0), Arg::Weights(0), Arg::Arena(4096)].into(),
                    output: 0,
                    matmul: None,
                },
                Launch {
                    node: "relu0".into(),
                    kernel: 1,
                    grid: [blocks, 1, 1],
                    block: [256, 1, 1],
                    smem_bytes: 0,
                    args: vec![Arg::Arena(4096), Arg::Arena(8192)].into(),
                    output: 1,
                    matmul: None,
                },
                Launch {
                    node: "copy0".into(),
                    kernel: 2,
                    grid: [blocks, 1, 1],
                    block: [256, 1, 1],
                    smem_bytes,
                    args: vec![Arg::Arena(8192), Arg::Arena(12288)].into(),
                    output: 2,
                    matmul: None,
                },
            ]
            .into(),
            inputs: vec![slot("x", n, 0)].into(),
            outputs: vec![z.clone()].into(),
            values: vec![t, y, z].into(),
            tuned_on: Vec::new().into(),
        }
    }

    fn weights(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| (i as f32 - 3.0).to_le_bytes())
            .collect()
    }

    #[test]
    fn args_resolve_to_base_plus_offset() {
        let spec = relu_add_spec(1000, &weights(1000), 0);
        let bases = DeviceBases {
            arena: 0x7f00_0000_0000,
            weights: 0x7e00_0000_0000,
        };
        assert_eq!(
            resolve_args(&spec.launches[0].args, bases),
            vec![0x7f00_0000_0000, 0x7e00_0000_0000, 0x7f00_0000_1000]
        );
        assert_eq!(
            resolve_args(&spec.launches[1].args, bases),
            vec![0x7f00_0000_1000, 0x7f00_0000_2000]
        );
    }

    #[test]
    fn max_shared_bytes_is_per_kernel() {
        let mut spec = relu_add_spec(100, &weights(100), 64 * 1024);
        spec.launches.to_mut()[1].smem_bytes = 128;
        assert_eq!(max_shared_bytes_per_kernel(&spec), vec![0, 128, 64 * 1024]);
    }

    #[test]
    fn a_consistent_spec_validates() {
        validate(&relu_add_spec(1000, &weights(1000), 64 * 1024)).unwrap();
    }

    fn rejection(edit: impl FnOnce(&mut ModelSpec)) -> String {
        let mut spec = relu_add_spec(1000, &weights(1000), 0);
        edit(&mut spec);
        match validate(&spec) {
            Ok(()) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn inconsistent_specs_are_rejected_with_the_reason() {
        let text = rejection(|s| s.launches.to_mut()[1].args.to_mut()[1] = Arg::Arena(16384));
        assert!(text.contains("launch 1 (node `relu0`)"), "{text}");
        assert!(text.contains("arena offset 16384"), "{text}");

        let text = rejection(|s| s.launches.to_mut()[0].args.to_mut()[1] = Arg::Weights(4000));
        assert!(text.contains("weights offset 4000"), "{text}");

        let text = rejection(|s| s.launches.to_mut()[2].kernel = 3);
        assert!(text.contains("kernel index 3"), "{text}");

        let text = rejection(|s| s.launches.to_mut()[0].output = 9);
        assert!(text.contains("output value index 9"), "{text}");

        let text = rejection(|s| s.launches.to_mut()[0].block = [0, 1, 1]);
        assert!(text.contains("empty grid"), "{text}");

        let text = rejection(|s| s.values.to_mut()[1].offset = 16000);
        assert!(text.contains("value `y`"), "{text}");

        let text = rejection(|s| s.inputs.to_mut()[0].bytes = 3);
        assert!(text.contains("graph input `x`"), "{text}");

        let text = rejection(|s| s.outputs.to_mut()[0].dtype = DType::F16);
        assert!(text.contains("outputs f32 row-major"), "{text}");

        // An f16 input holds 2 bytes per element, and only that.
        let text = rejection(|s| s.inputs.to_mut()[0].dtype = DType::F16);
        assert!(
            text.contains("graph input `x`") && text.contains("bytes"),
            "{text}"
        );
        let mut half_input = relu_add_spec(1000, &weights(1000), 0);
        let input = &mut half_input.inputs.to_mut()[0];
        input.dtype = DType::F16;
        input.bytes /= 2;
        assert!(validate(&half_input).is_ok());

        let text = rejection(|s| {
            let extra = s.values[0].clone();
            s.outputs.to_mut().push(extra)
        });
        assert!(text.contains("exactly one graph output"), "{text}");

        let text = rejection(|s| s.kernels.to_mut()[1] = "re\0lu".into());
        assert!(text.contains("not a symbol name"), "{text}");

        let text = rejection(|s| s.format_version = 99);
        assert!(text.contains("format version 99"), "{text}");
    }

    /// Launch 1 (`relu0`, writing `y`: 1000 f32 = 4000 bytes) as a cuBLASLt
    /// matmul of 25×8 by 8×80 into an f16 `[25, 80]`, edited by `edit`.
    fn with_matmul(edit: impl FnOnce(&mut Launch)) -> Result<(), String> {
        let mut spec = relu_add_spec(1000, &weights(1000), 0);
        let launch = &mut spec.launches.to_mut()[1];
        launch.grid = [0; 3];
        launch.block = [0; 3];
        launch.args = vec![Arg::Arena(4096), Arg::Weights(0), Arg::Arena(8192)].into();
        launch.matmul = Some(LibraryMatmul {
            m: 25,
            n: 80,
            k: 8,
            dtype: DType::F16,
            bias: false,
            residual: false,
            activation: aotune_spec::artifact::MatmulActivation::None,
            algo: 0,
        });
        edit(launch);
        validate(&spec).map_err(|e| e.to_string())
    }

    #[test]
    fn matmul_launches_are_checked_against_their_operands() {
        with_matmul(|_| {}).unwrap();
        let m = |l: &mut Launch| l.matmul.unwrap();
        let text = with_matmul(|l| {
            l.args.to_mut().pop();
        })
        .unwrap_err();
        assert!(
            text.contains("2 arguments where the matmul needs 3"),
            "{text}"
        );
        let text = with_matmul(|l| {
            let mut mm = m(l);
            mm.k = 12;
            l.matmul = Some(mm);
        })
        .unwrap_err();
        assert!(text.contains("multiples of 8"), "{text}");
        let text = with_matmul(|l| {
            let mut mm = m(l);
            mm.m = 26;
            l.matmul = Some(mm);
        })
        .unwrap_err();
        assert!(text.contains("not M × N × 2"), "{text}");
        let text = with_matmul(|l| l.args.to_mut()[0] = Arg::Arena(16000)).unwrap_err();
        assert!(
            text.contains("argument 0 (400 bytes at arena offset 16000)"),
            "{text}"
        );
        let text = with_matmul(|l| {
            let mut mm = m(l);
            mm.dtype = DType::F32;
            l.matmul = Some(mm);
        })
        .unwrap_err();
        assert!(text.contains("f16 or bf16 only"), "{text}");
        let text = with_matmul(|l| {
            let mut mm = m(l);
            mm.bias = true;
            l.matmul = Some(mm);
            l.args = vec![
                Arg::Arena(4096),
                Arg::Weights(0),
                Arg::Arena(0),
                Arg::Arena(8192),
            ]
            .into();
        })
        .unwrap_err();
        assert!(
            text.contains("bias of a cuBLASLt matmul is not in the weights"),
            "{text}"
        );
    }
}
