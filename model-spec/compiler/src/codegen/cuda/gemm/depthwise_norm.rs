//! The kernel of a `FusedConv` with a [`crate::ir::ChannelNorm`]: its
//! [`DepthwiseNormShape`] (the convolution's [`ConvShape`], ε and the
//! dtypes of γ and β) and the rendered instantiation of
//! `conv_depthwise_norm` (`conv_direct.cu`) for a [`DepthwiseNormConfig`].
//! Its tasks are their own kind: the op's key text carries the norm
//! (`epilogue=…layernorm(eps=…)`), and its configs are
//! [`DepthwiseNormConfig`]s, not [`super::conv::ConvConfig`]s.

use super::conv::conv_shape;
use super::depthwise_norm_config::{DepthwiseNormConfig, DepthwiseNormShape};
use super::source::{tiled_wrapper, Arg, DependencyWait, Instance, Params, Template, Workspace};
use crate::ir::{Graph, NodeId, Op};

/// The [`DepthwiseNormShape`] of a `FusedConv` node with a norm.
pub fn depthwise_norm_shape(graph: &Graph, node: NodeId) -> Result<DepthwiseNormShape, String> {
    let n = graph.node(node);
    let Op::FusedConv {
        norm: Some(norm), ..
    } = &n.op
    else {
        return Err(format!("{} has no channel norm", n.op.kind()));
    };
    let affine = |back: usize| {
        n.inputs
            .len()
            .checked_sub(back)
            .map(|i| graph.value(n.inputs[i]).dtype)
            .ok_or("missing the norm's scale or shift")
    };
    let shape = DepthwiseNormShape {
        conv: conv_shape(graph, node)?,
        epsilon: norm.epsilon,
        gamma: affine(2)?,
        beta: affine(1)?,
    };
    shape.check()?;
    Ok(shape)
}

/// Renders the instantiation of `config` for `shape` under `symbol`. The
/// kernel waits for the previous one itself, after staging its weights
/// (`DependencyWait::InTemplate`); `__launch_bounds__` states one CTA per
/// SM, so ptxas keeps the input window in registers (the config's
/// [`DepthwiseNormConfig::rows`] keeps it within the cap of the CTA's size).
pub fn instantiate(
    shape: &DepthwiseNormShape,
    config: &DepthwiseNormConfig,
    symbol: &str,
) -> Instance {
    let mut p = Params::new(format!("{symbol}_p"));
    shape.conv.render(&mut p);
    p.ty("TGamma", shape.gamma)
        .ty("TBeta", shape.beta)
        .float("EPS", shape.epsilon)
        .int("PER_THREAD", config.cols)
        .ints(&[
            ("DWN_STRIPS", i64::from(config.strips)),
            ("DWN_THREADS", config.threads(shape) as i64),
            ("DWN_ROWS", config.rows(shape) as i64),
        ]);
    let c = &shape.conv;
    let mut args = vec![Arg::input("x", c.x_dtype), Arg::input("w", c.w_dtype)];
    if let Some(dtype) = c.bias {
        args.push(Arg::input("bias", dtype));
    }
    args.push(Arg::input("gamma", shape.gamma));
    args.push(Arg::input("beta", shape.beta));
    args.push(Arg::output("y", c.out_dtype));
    let call = format!(
        "aotune::conv_depthwise_norm<{}>(x, w, {}, gamma, beta, y)",
        p.name(),
        if c.bias.is_some() { "bias" } else { "nullptr" },
    );
    let geometry = config.geometry(shape);
    let wrapped = tiled_wrapper(
        symbol,
        geometry.block[0],
        1,
        DependencyWait::InTemplate,
        &args,
        &call,
    );
    Instance {
        symbol: symbol.to_string(),
        template: Template::ConvDirect,
        config: serde_json::to_string(config).unwrap_or_default(),
        code: format!("{}{}", p.render(), wrapped),
        geometry,
        workspace: Workspace::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::KernelConfig;
    use super::super::depthwise_norm_config::tests::normed;
    use super::*;
    use crate::ir::DType;

    #[test]
    fn the_instance_names_its_parameters_and_asks_for_its_shared_memory() {
        let shape = normed(56, 96, 7, DType::F16);
        let config = DepthwiseNormConfig::default_for(&shape);
        let inst = instantiate(&shape, &config, "dwln_0123abcd_s8c2");
        let code = &inst.code;
        for want in [
            "typedef float TGamma;",
            "static constexpr float EPS = 1e-6f;",
            "static constexpr int PER_THREAD = 2;",
            "static constexpr int DWN_STRIPS = 8, DWN_THREADS = 192, DWN_ROWS = 7;",
            "__launch_bounds__(192, 1) dwln_0123abcd_s8c2(",
            "const float* __restrict__ gamma,",
            "aotune::conv_depthwise_norm<dwln_0123abcd_s8c2_p>(x, w, bias, gamma, beta, y);",
        ] {
            assert!(code.contains(want), "{want}:\n{code}");
        }
        // The template places the dependency wait after staging the taps.
        assert!(!code.contains("grid_dependency_wait"), "{code}");
        assert_eq!(inst.geometry.smem_bytes, (49 * 100 + 2 * 2 * 192) * 4);
    }
}
