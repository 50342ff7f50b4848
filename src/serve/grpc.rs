//! The KServe v2 / Triton gRPC service (`inference.GRPCInferenceService`,
//! tonic): ServerLive, ServerReady, ModelReady, ServerMetadata,
//! ModelMetadata, ModelConfig, ModelStatistics ([`super::statistics`]; an
//! empty name asks for every ready model), RepositoryIndex and ModelInfer.
//!
//! ModelInfer takes inputs from `raw_input_contents` (one entry per input, in
//! input order, as tritonclient sends them: little-endian elements of the
//! input's datatype, FP32 or FP16) or from each input's `contents`
//! (`fp32_contents`, rounded for an FP16 input; `bytes_contents` for BYTES
//! images), and answers in
//! `raw_output_contents` (f32 little-endian), as Triton does. Errors map to
//! gRPC codes: invalid argument, NOT_FOUND, UNAVAILABLE, RESOURCE_EXHAUSTED
//! (queue full or message too large), DEADLINE_EXCEEDED and INTERNAL. A
//! message that does not decode is answered by tonic with INTERNAL and the
//! decoder's message; one over `--max-body-bytes` with OUT_OF_RANGE /
//! RESOURCE_EXHAUSTED.

use super::backend::FP32;
use super::datatype::Datatype;
use super::error::InferError;
use super::model_info::{max_batch_size, PLATFORM};
use super::proto::grpc_inference_service_server::{
    GrpcInferenceService, GrpcInferenceServiceServer,
};
use super::proto::infer_parameter::ParameterChoice;
use super::proto::{
    model_infer_response, model_metadata_response, repository_index_response, DataType,
    InferBatchStatistics, InferParameter, InferStatistics, MemoryUsage, ModelConfig,
    ModelConfigRequest, ModelConfigResponse, ModelDynamicBatching, ModelInferRequest,
    ModelInferResponse, ModelInput, ModelInstanceGroup, ModelMetadataRequest,
    ModelMetadataResponse, ModelOutput, ModelReadyRequest, ModelReadyResponse, ModelStatistics,
    ModelStatisticsRequest, ModelStatisticsResponse, RepositoryIndexRequest,
    RepositoryIndexResponse, ServerLiveRequest, ServerLiveResponse, ServerMetadataRequest,
    ServerMetadataResponse, ServerReadyRequest, ServerReadyResponse, StatisticDuration,
};
use super::repository::{check_version, ModelState, VERSION};
use super::state::{InferCall, ServerState, EXTENSIONS, SERVER_NAME};
use super::statistics::{DurationStat, Report};
use super::tensor::{output_shape, InputData, RequestInput};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

/// When a gRPC request's headers arrived (a request extension).
#[derive(Debug, Clone, Copy)]
pub struct Received(pub Instant);

/// Stamps each HTTP/2 request with [`Received`] as its headers arrive, before
/// its body is read (a layer of the gRPC server), so that ModelInfer can
/// report how long the body's transfer and decoding took.
pub fn stamp_receipt<B>(mut request: http::Request<B>) -> http::Request<B> {
    request.extensions_mut().insert(Received(Instant::now()));
    request
}

/// The service over the shared state.
pub struct Service {
    state: Arc<ServerState>,
}

/// The tonic server of [`Service`], with message limits of `max_body_bytes`.
pub fn server(state: Arc<ServerState>) -> GrpcInferenceServiceServer<Service> {
    let limit = state.max_body_bytes;
    GrpcInferenceServiceServer::new(Service { state })
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX)
}

impl From<InferError> for Status {
    fn from(e: InferError) -> Status {
        let code = match e {
            InferError::InvalidArgument(_) => Code::InvalidArgument,
            InferError::NotFound(_) => Code::NotFound,
            InferError::Unavailable(_) => Code::Unavailable,
            InferError::QueueFull(_) | InferError::TooLarge(_) => Code::ResourceExhausted,
            InferError::Timeout(_) => Code::DeadlineExceeded,
            InferError::Internal(_) => Code::Internal,
        };
        Status::new(code, e.to_string())
    }
}

/// The request's `timeout` parameter (µs), as Triton reads it.
fn timeout_param(params: &HashMap<String, InferParameter>) -> Result<Option<Duration>, InferError> {
    let Some(p) = params.get("timeout") else {
        return Ok(None);
    };
    match p.parameter_choice {
        Some(ParameterChoice::Int64Param(us)) if us >= 0 => {
            Ok(Some(Duration::from_micros(us as u64)))
        }
        Some(ParameterChoice::Uint64Param(us)) => Ok(Some(Duration::from_micros(us))),
        _ => Err(InferError::invalid(
            "parameter \"timeout\" must be a non-negative integer (microseconds)",
        )),
    }
}

/// A ModelInferRequest as a protocol-neutral call.
fn decode_infer(request: ModelInferRequest) -> Result<InferCall, InferError> {
    let raw = request.raw_input_contents;
    if !raw.is_empty() && raw.len() != request.inputs.len() {
        return Err(InferError::invalid(format!(
            "raw_input_contents has {} entries for {} inputs; give one per input or none",
            raw.len(),
            request.inputs.len()
        )));
    }
    let mut raw = raw.into_iter();
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in request.inputs {
        let data = match (raw.next(), input.contents) {
            (Some(_), Some(_)) => {
                return Err(InferError::invalid(format!(
                    "input '{}': contents and raw_input_contents are both given",
                    input.name
                )))
            }
            (Some(bytes), None) => InputData::Raw(bytes),
            (None, Some(c)) if !c.bytes_contents.is_empty() => InputData::Strings(c.bytes_contents),
            (None, Some(c)) => InputData::F32(c.fp32_contents),
            (None, None) => InputData::F32(Vec::new()),
        };
        inputs.push(RequestInput {
            name: input.name,
            datatype: input.datatype,
            shape: input.shape,
            data,
        });
    }
    Ok(InferCall {
        timeout: timeout_param(&request.parameters)?,
        model: request.model_name,
        version: request.model_version,
        inputs,
        outputs: request.outputs.into_iter().map(|o| o.name).collect(),
    })
}

/// Triton's model-configuration enum for `datatype`.
fn data_type(datatype: Datatype) -> DataType {
    match datatype {
        Datatype::FP32 => DataType::TypeFp32,
        Datatype::FP16 => DataType::TypeFp16,
    }
}

fn tensor_metadata(
    signature: &super::backend::Signature,
    tensors: &[super::backend::TensorSpec],
) -> Vec<model_metadata_response::TensorMetadata> {
    tensors
        .iter()
        .map(|t| model_metadata_response::TensorMetadata {
            name: t.name.clone(),
            datatype: t.datatype.name().into(),
            shape: signature.client_shape(t),
        })
        .collect()
}

fn duration(d: DurationStat) -> Option<StatisticDuration> {
    Some(StatisticDuration {
        count: d.count,
        ns: d.ns,
    })
}

/// A model's statistics as the ModelStatistics message.
fn model_statistics(r: Report) -> ModelStatistics {
    let s = r.inference_stats;
    ModelStatistics {
        name: r.name,
        version: r.version,
        last_inference: r.last_inference,
        inference_count: r.inference_count,
        execution_count: r.execution_count,
        inference_stats: Some(InferStatistics {
            success: duration(s.success),
            fail: duration(s.fail),
            queue: duration(s.queue),
            compute_input: duration(s.compute_input),
            compute_infer: duration(s.compute_infer),
            compute_output: duration(s.compute_output),
            cache_hit: duration(s.cache_hit),
            cache_miss: duration(s.cache_miss),
        }),
        batch_stats: r
            .batch_stats
            .into_iter()
            .map(|b| InferBatchStatistics {
                batch_size: b.batch_size,
                compute_input: duration(b.compute_input),
                compute_infer: duration(b.compute_infer),
                compute_output: duration(b.compute_output),
            })
            .collect(),
        memory_usage: r
            .memory_usage
            .into_iter()
            .map(|m| MemoryUsage {
                r#type: m.kind.to_string(),
                id: m.id,
                byte_size: m.byte_size,
            })
            .collect(),
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(
        &self,
        _: Request<ServerLiveRequest>,
    ) -> Result<Response<ServerLiveResponse>, Status> {
        Ok(Response::new(ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<ServerReadyRequest>,
    ) -> Result<Response<ServerReadyResponse>, Status> {
        Ok(Response::new(ServerReadyResponse {
            ready: self.state.ready(),
        }))
    }

    async fn model_ready(
        &self,
        request: Request<ModelReadyRequest>,
    ) -> Result<Response<ModelReadyResponse>, Status> {
        let r = request.into_inner();
        check_version(&r.name, &r.version)?;
        match self.state.repository.get(&r.name) {
            None => Err(InferError::NotFound(format!("unknown model '{}'", r.name)).into()),
            Some(s) => Ok(Response::new(ModelReadyResponse {
                ready: matches!(s, ModelState::Ready(_)),
            })),
        }
    }

    async fn server_metadata(
        &self,
        _: Request<ServerMetadataRequest>,
    ) -> Result<Response<ServerMetadataResponse>, Status> {
        Ok(Response::new(ServerMetadataResponse {
            name: SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<ModelMetadataRequest>,
    ) -> Result<Response<ModelMetadataResponse>, Status> {
        let r = request.into_inner();
        let model = self.state.repository.ready(&r.name, &r.version)?;
        let s = model.backend.signature();
        Ok(Response::new(ModelMetadataResponse {
            name: model.name.clone(),
            versions: vec![VERSION.into()],
            platform: PLATFORM.into(),
            inputs: tensor_metadata(s, &s.inputs),
            outputs: tensor_metadata(s, &s.outputs),
        }))
    }

    async fn model_config(
        &self,
        request: Request<ModelConfigRequest>,
    ) -> Result<Response<ModelConfigResponse>, Status> {
        let r = request.into_inner();
        let model = self.state.repository.ready(&r.name, &r.version)?;
        let s = model.backend.signature();
        let dims =
            |t: &super::backend::TensorSpec| t.item_shape.iter().map(|&d| d as i64).collect();
        let config = ModelConfig {
            name: model.name.clone(),
            platform: PLATFORM.into(),
            backend: model.backend.describe(),
            max_batch_size: i32::try_from(max_batch_size(s)).unwrap_or(i32::MAX),
            input: s
                .inputs
                .iter()
                .map(|t| ModelInput {
                    name: t.name.clone(),
                    data_type: data_type(t.datatype) as i32,
                    dims: dims(t),
                })
                .collect(),
            output: s
                .outputs
                .iter()
                .map(|t| ModelOutput {
                    name: t.name.clone(),
                    data_type: data_type(t.datatype) as i32,
                    dims: dims(t),
                })
                .collect(),
            instance_group: vec![ModelInstanceGroup {
                name: model.name.clone(),
                count: i32::try_from(model.config.instances).unwrap_or(i32::MAX),
                kind: 0,
            }],
            dynamic_batching: Some(ModelDynamicBatching {
                preferred_batch_size: s
                    .batch_sizes
                    .iter()
                    .map(|&b| i32::try_from(b).unwrap_or(i32::MAX))
                    .collect(),
                max_queue_delay_microseconds: model.config.max_queue_delay.as_micros() as u64,
            }),
        };
        Ok(Response::new(ModelConfigResponse {
            config: Some(config),
        }))
    }

    async fn model_statistics(
        &self,
        request: Request<ModelStatisticsRequest>,
    ) -> Result<Response<ModelStatisticsResponse>, Status> {
        let r = request.into_inner();
        let reports = self.state.statistics(&r.name, &r.version)?;
        Ok(Response::new(ModelStatisticsResponse {
            model_stats: reports.into_iter().map(model_statistics).collect(),
        }))
    }

    async fn repository_index(
        &self,
        request: Request<RepositoryIndexRequest>,
    ) -> Result<Response<RepositoryIndexResponse>, Status> {
        let only_ready = request.into_inner().ready;
        let models = self
            .state
            .repository
            .index()
            .into_iter()
            .filter(|(_, s)| !only_ready || matches!(s, ModelState::Ready(_)))
            .map(|(name, s)| repository_index_response::ModelIndex {
                name,
                version: VERSION.into(),
                state: s.name().into(),
                reason: s.reason(),
            })
            .collect();
        Ok(Response::new(RepositoryIndexResponse { models }))
    }

    async fn model_infer(
        &self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let received = request.extensions().get::<Received>().map(|r| r.0);
        let decoded = Instant::now();
        let request = request.into_inner();
        let id = request.id.clone();
        let model_name = request.model_name.clone();
        let call = match decode_infer(request) {
            Ok(call) => call,
            Err(e) => {
                self.state.count_failure(&model_name, "grpc", &e);
                return Err(e.into());
            }
        };
        let done = self.state.infer(call, "grpc").await?;
        if let Some(received) = received {
            self.state
                .metrics
                .receive(&done.model.name, "grpc", decoded - received);
        }
        let signature = done.model.backend.signature();
        let mut outputs = Vec::with_capacity(done.outputs.len());
        let mut raw = Vec::with_capacity(done.outputs.len());
        for (index, values) in &done.outputs {
            outputs.push(model_infer_response::InferOutputTensor {
                name: signature.outputs[*index].name.clone(),
                datatype: FP32.into(),
                shape: output_shape(signature, *index, done.rows),
                parameters: HashMap::new(),
                contents: None,
            });
            raw.push(values.iter().flat_map(|v| v.to_le_bytes()).collect());
        }
        Ok(Response::new(ModelInferResponse {
            model_name: done.model.name.clone(),
            model_version: VERSION.into(),
            id,
            parameters: HashMap::new(),
            outputs,
            raw_output_contents: raw,
        }))
    }
}
