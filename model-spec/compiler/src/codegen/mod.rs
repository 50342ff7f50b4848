//! Code generation from an optimized graph: [`cuda`] renders the kernels
//! (`kernels.cu`) and the launch table of a forward pass from the graph, its
//! memory plan and the tuned kernel configs.

pub mod cuda;
