//! Compile-fail snapshots of `include_model!` (trybuild): each
//! `tests/ui/**/*.rs` must fail to compile with exactly the error in the
//! `.stderr` beside it. `TRYBUILD=overwrite cargo test -p aotune-macros
//! --test include_model_ui` rewrites the snapshots after a deliberate change.
//!
//! The macro learns what the build step did from `$OUT_DIR/aotune/*/manifest.json`
//! (it reads only `batch` and `precision`), and the compiler running the
//! macro sees the `OUT_DIR` of its own process. trybuild's crates have no
//! build script, so cargo sets no `OUT_DIR` for them and passes ours down:
//! - `tests/ui/no_build_script/` runs with `OUT_DIR` unset (a crate that
//!   forgot its build.rs);
//! - `tests/ui/*.rs` runs with `OUT_DIR` = `tests/ui/out_dir`, which holds
//!   the manifests a build step would have written: `resnet50` for batch 1
//!   fp16 (one batch size), `resnet18_b1` + `resnet18_b4` for batches
//!   [1, 4] fp32 (several), and a truncated `broken`.
//!
//! So no case runs the build step, and none needs nvcc or a GPU. trybuild
//! builds its own small crate graph (this crate's dependencies and
//! dev-dependencies, `cargo check`, in `target/tests/trybuild`): it sets its
//! own target directory and rustflags, so the workspace's build cannot be
//! reused, and testing the macro crate (not `aotune`) keeps that graph to
//! syn, serde and trybuild instead of the whole compiler and runtime.

use std::path::Path;

#[test]
fn include_model_errors_are_clear() {
    let ui = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    // This binary holds one test, so changing the environment races nothing.
    std::env::remove_var("OUT_DIR");
    {
        let cases = trybuild::TestCases::new();
        cases.compile_fail("tests/ui/no_build_script/*.rs");
        // Runs the cases when dropped.
    }
    std::env::set_var("OUT_DIR", ui.join("out_dir"));
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
