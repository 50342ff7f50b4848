//! What a loaded model reports about where it runs: the device (name,
//! compute capability, driver version, memory) and the memory the model
//! itself holds. Plain data, filled in by `Model`.

use std::fmt;

use super::error::CudaVersion;

/// The GPU a model runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal among the visible devices.
    pub ordinal: usize,
    /// `cuDeviceGetName`, e.g. `NVIDIA H200`.
    pub name: String,
    /// Compute capability, e.g. `(9, 0)`.
    pub compute_capability: (u32, u32),
    /// Newest CUDA version the driver supports.
    pub driver: CudaVersion,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
}

impl DeviceInfo {
    /// `10 * major + minor`, as in `sm_90`.
    pub fn sm(&self) -> u32 {
        10 * self.compute_capability.0 + self.compute_capability.1
    }
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (device {}, sm_{}, {} SMs, {:.1} GiB, driver CUDA {})",
            self.name,
            self.ordinal,
            self.sm(),
            self.multiprocessors,
            self.total_memory as f64 / (1u64 << 30) as f64,
            self.driver
        )
    }
}

/// Memory a model holds, and the device's state when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryReport {
    /// Device bytes of the uploaded weights.
    pub weights_bytes: u64,
    /// Device bytes of the activation arena.
    pub arena_bytes: u64,
    /// Pinned host bytes of the input and output staging buffers.
    pub staging_bytes: u64,
    /// Device bytes of cuBLASLt's workspace and the converted biases, for a
    /// model with Dense layers through cuBLASLt (else 0).
    pub library_bytes: u64,
    /// `cuMemGetInfo`: free device bytes (all processes).
    pub device_free: u64,
    /// `cuMemGetInfo`: total device bytes.
    pub device_total: u64,
}

impl MemoryReport {
    /// Device bytes owned by the model.
    pub fn device_bytes(&self) -> u64 {
        self.weights_bytes + self.arena_bytes + self.library_bytes
    }
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let library = if self.library_bytes > 0 {
            format!(" + cuBLASLt {:.1} MiB", mib(self.library_bytes))
        } else {
            String::new()
        };
        write!(
            f,
            "weights {:.1} MiB + arena {:.1} MiB{library} on the device, {:.2} MiB pinned \
             staging; device {:.0} of {:.0} MiB free",
            mib(self.weights_bytes),
            mib(self.arena_bytes),
            mib(self.staging_bytes),
            mib(self.device_free),
            mib(self.device_total)
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The H200 the project measures on, as the runtime would query it.
    pub(crate) fn h200() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            driver: CudaVersion(13000),
            total_memory: 143 << 30,
            multiprocessors: 132,
        }
    }

    #[test]
    fn device_info_prints_sm_and_driver() {
        let info = h200();
        assert_eq!(info.sm(), 90);
        let text = info.to_string();
        assert!(
            text.contains("sm_90") && text.contains("CUDA 13.0"),
            "{text}"
        );
    }

    #[test]
    fn memory_report_sums_device_bytes() {
        let report = MemoryReport {
            weights_bytes: 100 << 20,
            arena_bytes: 20 << 20,
            staging_bytes: 1 << 20,
            library_bytes: 0,
            device_free: 1 << 30,
            device_total: 2 << 30,
        };
        assert_eq!(report.device_bytes(), 120 << 20);
        assert!(report
            .to_string()
            .contains("weights 100.0 MiB + arena 20.0 MiB on"));
        let with_library = MemoryReport {
            library_bytes: 32 << 20,
            ..report
        };
        assert_eq!(with_library.device_bytes(), 152 << 20);
        assert!(with_library
            .to_string()
            .contains("+ cuBLASLt 32.0 MiB on the device"));
    }
}
