//! Tests of the verifier, the patch rewriter and the printer on small graphs.

use super::*;

/// x [1,2,4,4] → relu → y, plus an unused constant.
fn chain() -> Graph {
    let values = vec![
        Value {
            kind: ValueKind::Input,
            ..Value::activation("x", vec![1, 2, 4, 4])
        },
        Value::activation("r", vec![1, 2, 4, 4]),
        Value::activation("y", vec![1, 2, 4, 4]),
    ];
    Graph {
        values,
        nodes: vec![
            Node {
                name: "relu".into(),
                op: Op::Unary(UnaryOp::Relu),
                inputs: vec![ValueId(0)],
                output: ValueId(1),
            },
            Node {
                name: "sig".into(),
                op: Op::Unary(UnaryOp::Sigmoid),
                inputs: vec![ValueId(1)],
                output: ValueId(2),
            },
        ],
        inputs: vec![ValueId(0)],
        outputs: vec![ValueId(2)],
        precision: Precision::Fp32,
    }
}

#[test]
fn valid_chain_verifies_and_prints() {
    let g = chain();
    verify(&g).unwrap();
    let text = print_graph(&g);
    assert_eq!(
        text,
        "graph precision=fp32\n  input %0: f32[1,2,4,4]  # x\n  %1: f32[1,2,4,4] = Relu(%0)  # relu\n  %2: f32[1,2,4,4] = Sigmoid(%1)  # sig\n  return %2\n"
    );
}

#[test]
fn use_before_definition_is_caught() {
    let mut g = chain();
    g.nodes.swap(0, 1);
    let err = verify(&g).unwrap_err();
    assert!(err.message.contains("used before"), "{err}");
    assert!(err.location.contains("sig"), "{err}");
}

#[test]
fn wrong_shape_is_caught() {
    let mut g = chain();
    g.values[1].shape = vec![1, 2, 4, 5];
    let err = verify(&g).unwrap_err();
    assert!(err.message.contains("differs from inferred"), "{err}");
}

#[test]
fn double_producer_is_caught() {
    let mut g = chain();
    g.nodes[1].output = ValueId(1);
    assert!(verify(&g).unwrap_err().message.contains("produced twice"));
}

#[test]
fn channels_last_needs_rank_four() {
    let mut g = chain();
    g.values.push(Value {
        layout: Layout::ChannelsLast,
        ..Value::constant("c", vec![4], vec![0.0; 4])
    });
    assert!(verify(&g).unwrap_err().message.contains("not 4-D"));
}

#[test]
fn row_major_consumer_of_channels_last_value_is_caught() {
    let mut g = chain();
    g.values[1].layout = Layout::ChannelsLast;
    g.values.push(Value::activation("f", vec![1, 32]));
    g.nodes.push(Node {
        name: "flatten".into(),
        op: Op::Flatten { axis: 1 },
        inputs: vec![ValueId(1)],
        output: ValueId(3),
    });
    assert!(verify(&g).unwrap_err().message.contains("needs row-major"));
}

#[test]
fn constant_payload_must_match_shape() {
    let mut g = chain();
    g.values
        .push(Value::constant("c", vec![2, 2], vec![0.0; 3]));
    assert!(verify(&g).unwrap_err().message.contains("3 elements"));
}

#[test]
fn patch_replaces_removes_and_substitutes() {
    let mut g = chain();
    // Replace the sigmoid by a clip reading x directly, drop the relu.
    let mut patch = Patch::new(&g);
    let out = patch.add_value(Value::activation("clipped", vec![1, 2, 4, 4]));
    patch.replace_node(
        NodeId(1),
        Node {
            name: "clip".into(),
            op: Op::Unary(UnaryOp::Clip { min: 0.0, max: 6.0 }),
            inputs: vec![ValueId(0)],
            output: out,
        },
    );
    patch.remove_node(NodeId(0));
    patch.substitute(ValueId(2), out);
    patch.apply(&mut g);
    verify(&g).unwrap();
    assert_eq!(g.nodes.len(), 1);
    assert_eq!(g.values.len(), 2, "dead values are compacted away");
    assert_eq!(g.outputs, vec![g.nodes[0].output]);
    assert!(print_graph(&g).contains("Clip(%0) min=0 max=6"));
}

#[test]
fn substitution_chains_resolve_in_any_order() {
    let mut g = chain();
    let mut patch = Patch::new(&g);
    patch.remove_node(NodeId(0));
    patch.remove_node(NodeId(1));
    let copy = patch.add_value(Value::activation("copy", vec![1, 2, 4, 4]));
    patch.insert_before(
        NodeId(0),
        Node {
            name: "id".into(),
            op: Op::Identity,
            inputs: vec![ValueId(0)],
            output: copy,
        },
    );
    patch.substitute(ValueId(2), ValueId(1));
    patch.substitute(ValueId(1), copy);
    patch.apply(&mut g);
    verify(&g).unwrap();
    assert_eq!(g.outputs, vec![g.nodes[0].output]);
}

/// `x [1, 8, 4, 4]` → 3×3 conv with a channel norm; `groups` and the
/// epilogue as given.
fn normed_conv(groups: usize, epilogue: Epilogue) -> Graph {
    let mut values = vec![
        Value {
            kind: ValueKind::Input,
            ..Value::activation("x", vec![1, 8, 4, 4])
        },
        Value::constant("w", vec![8, 8 / groups, 3, 3], vec![0.1; 72 * 8 / groups]),
        Value::constant("gamma", vec![8], vec![1.0; 8]),
        Value::constant("beta", vec![8], vec![0.0; 8]),
        Value::activation("y", vec![1, 8, 4, 4]),
    ];
    let mut inputs = vec![ValueId(0), ValueId(1), ValueId(2), ValueId(3)];
    if epilogue.residual {
        values.push(Value::constant("res", vec![1, 8, 4, 4], vec![0.0; 128]));
        inputs.insert(2, ValueId(5));
    }
    Graph {
        values,
        nodes: vec![Node {
            name: "conv".into(),
            op: Op::FusedConv {
                conv: Conv2d {
                    kernel: [3, 3],
                    strides: [1, 1],
                    pads: [1; 4],
                    dilations: [1, 1],
                    groups,
                },
                epilogue,
                shortcut: None,
                pool: None,
                norm: Some(ChannelNorm { epsilon: 1e-6 }),
            },
            inputs,
            output: ValueId(4),
        }],
        inputs: vec![ValueId(0)],
        outputs: vec![ValueId(4)],
        precision: Precision::Fp32,
    }
}

#[test]
fn a_channel_norm_needs_a_plain_depthwise_conv() {
    verify(&normed_conv(8, Epilogue::NONE)).unwrap();
    let text = print_graph(&normed_conv(8, Epilogue::NONE));
    assert!(text.contains("epilogue=layernorm(eps=1e-6)"), "{text}");
    let err = verify(&normed_conv(2, Epilogue::NONE)).unwrap_err();
    assert!(err.message.contains("depthwise"), "{err}");
    let residual = Epilogue {
        residual: true,
        ..Epilogue::NONE
    };
    let err = verify(&normed_conv(8, residual)).unwrap_err();
    assert!(err.message.contains("no residual"), "{err}");
    let gelu = Epilogue {
        activation: Activation::Gelu { tanh: false },
        ..Epilogue::NONE
    };
    let err = verify(&normed_conv(8, gelu)).unwrap_err();
    assert!(err.message.contains("no activation"), "{err}");
    // γ and β are the last two inputs, [K] each.
    let mut g = normed_conv(8, Epilogue::NONE);
    g.nodes[0].inputs.pop();
    assert!(verify(&g).unwrap_err().message.contains("inputs"));
}

/// `x [20, 8]` → Dense `[20, 4]` with a row norm: x, w, bias, s (f32).
fn normed_dense() -> Graph {
    let values = vec![
        Value {
            kind: ValueKind::Input,
            ..Value::activation("x", vec![20, 8])
        },
        Value::constant("w", vec![4, 8], vec![0.1; 32]),
        Value::constant("b", vec![4], vec![0.0; 4]),
        Value::constant("s", vec![4], vec![0.8; 4]),
        Value::activation("y", vec![20, 4]),
    ];
    Graph {
        values,
        nodes: vec![Node {
            name: "fc".into(),
            op: Op::Dense {
                epilogue: Epilogue {
                    bias: true,
                    ..Epilogue::NONE
                },
                norm: Some(RowNorm { epsilon: 1e-6 }),
            },
            inputs: vec![ValueId(0), ValueId(1), ValueId(2), ValueId(3)],
            output: ValueId(4),
        }],
        inputs: vec![ValueId(0)],
        outputs: vec![ValueId(4)],
        precision: Precision::Fp32,
    }
}

#[test]
fn a_row_norm_needs_a_bias_and_f32_column_sums_last() {
    verify(&normed_dense()).unwrap();
    let text = print_graph(&normed_dense());
    assert!(text.contains("epilogue=bias norm=eps1e-6"), "{text}");
    let mut g = normed_dense();
    g.nodes[0].inputs.pop();
    assert!(verify(&g).unwrap_err().message.contains("inputs"));
    let mut g = normed_dense();
    g.nodes[0].op = Op::Dense {
        epilogue: Epilogue::NONE,
        norm: Some(RowNorm { epsilon: 1e-6 }),
    };
    g.nodes[0].inputs.remove(2);
    let err = verify(&g).unwrap_err();
    assert!(err.message.contains("needs a bias"), "{err}");
    let mut g = normed_dense();
    g.values[3].dtype = DType::F16;
    let err = verify(&g).unwrap_err();
    assert!(err.message.contains("must be f32"), "{err}");
}
