//! The model compiled into this binary by `build.rs` (zoo ResNet-50, batch 1,
//! fp16), when nvcc was available at build time.

#[cfg(not(aotune_no_default_model))]
#[allow(dead_code)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/aotune/resnet50/executor.rs"));
}

/// Loads the embedded model, or says why this binary has none.
pub fn load() -> anyhow::Result<aotune::runtime::Model> {
    #[cfg(not(aotune_no_default_model))]
    {
        use aotune::runtime::{Model, RuntimeError};
        Model::load_embedded(&generated::SPEC, generated::KERNELS, generated::WEIGHTS)
            .map_err(|e: RuntimeError| anyhow::anyhow!(e))
    }
    #[cfg(aotune_no_default_model)]
    {
        anyhow::bail!(
            "this aotune binary was built without nvcc, so it embeds no GPU model; \
             run `make cuda-tools` and rebuild, or pass a model path to build its kernels now"
        )
    }
}
