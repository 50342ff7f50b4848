//! Launch limits both the kernels and the runtime follow.

/// The largest batch the runtime launches as programmatic dependent
/// launches by default (`aotune::runtime::LaunchMode::Auto`); up to it the
/// tensor-core convs load their prologue's weight tiles before the grid
/// dependency wait (`WEIGHTS_FIRST`, conv_mma.cu's `load_prologue`), above
/// it each prologue tile's group holds its own activations and weights.
pub const PROGRAMMATIC_MAX_BATCH: usize = 8;
