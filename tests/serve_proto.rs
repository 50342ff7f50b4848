//! The committed gRPC code (`src/serve/proto/inference.rs`) is what
//! `grpc_service.proto` generates: protox (pure Rust, no protoc) parses the
//! proto and tonic-prost-build writes the messages, the server and the
//! client. `AOTUNE_BLESS=1` rewrites the committed file.

use std::path::Path;

#[test]
fn committed_grpc_code_is_what_the_proto_generates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve/proto");
    let descriptors = protox::compile(["grpc_service.proto"], [&root]).expect("parse the proto");
    let out = std::env::temp_dir().join(format!("aotune-serve-proto-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The request's raw tensors stay slices of the received message
        // (`bytes::Bytes`): decoding a 600 KB image copies nothing.
        .bytes(".inference.ModelInferRequest.raw_input_contents")
        .out_dir(&out)
        .compile_fds(descriptors)
        .expect("generate the gRPC code");
    let generated = std::fs::read_to_string(out.join("inference.rs")).unwrap();
    let committed_path = root.join("inference.rs");
    if std::env::var_os("AOTUNE_BLESS").is_some() {
        std::fs::write(&committed_path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: run `AOTUNE_BLESS=1 cargo test --features serve --test serve_proto`",
        committed_path.display()
    );
    let _ = std::fs::remove_dir_all(&out);
}
