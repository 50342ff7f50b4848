//! The KServe datatypes of the tensors this server exchanges: `FP32`, and
//! `FP16` for the input of a model built with an f16 input
//! (`"input_datatype": "FP16"` in its config). Outputs are always `FP32`.
//! Raw (binary) data is little-endian elements of the datatype; JSON and
//! `fp32_contents` numbers are accepted for either and rounded.

use serde::Deserialize;
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
pub enum Datatype {
    #[default]
    FP32,
    FP16,
}

impl Datatype {
    /// KServe's name (`"FP32"`), as requests and metadata spell it.
    pub fn name(self) -> &'static str {
        match self {
            Datatype::FP32 => "FP32",
            Datatype::FP16 => "FP16",
        }
    }

    /// Bytes per element of raw data.
    pub fn size(self) -> usize {
        match self {
            Datatype::FP32 => 4,
            Datatype::FP16 => 2,
        }
    }

    /// Triton's model-configuration name (`"TYPE_FP32"`).
    pub fn config_name(self) -> &'static str {
        match self {
            Datatype::FP32 => "TYPE_FP32",
            Datatype::FP16 => "TYPE_FP16",
        }
    }
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes() {
        assert_eq!(Datatype::default(), Datatype::FP32);
        assert_eq!((Datatype::FP16.name(), Datatype::FP16.size()), ("FP16", 2));
        assert_eq!(Datatype::FP16.config_name(), "TYPE_FP16");
        let parsed: Datatype = serde_json::from_str("\"FP16\"").unwrap();
        assert_eq!(parsed, Datatype::FP16);
        assert!(serde_json::from_str::<Datatype>("\"fp16\"").is_err());
    }
}
