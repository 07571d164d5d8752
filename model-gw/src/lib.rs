//! The built-in model gateway (ModelGateway gRPC service): the model list (`/v1/models`,
//! `/model/new`, `/model/info`), the LLM APIs agents speak (chat completions, responses,
//! Anthropic messages, embeddings, completions) routed to external gateways with
//! streaming passed through, the header policy, and the spend log.

mod access;
mod added;
mod admit;
mod audit;
mod auth;
mod budget;
mod call;
pub mod config;
mod egress;
mod forward;
mod headers;
mod keys;
mod ledger;
mod loops;
mod manage;
#[doc(hidden)]
pub mod messages;
mod metrics;
mod openai;
mod org_budget;
mod orgs;
mod prepare;
mod registry;
#[doc(hidden)]
pub mod responses;
mod retry;
mod rewrite;
mod routing;
mod scan;
mod service;
mod session;
mod settling;
mod shares;
mod spend;
#[doc(hidden)]
pub mod sse;
mod strict;
mod support;
mod usage;

use sandgate_proto::MAX_MESSAGE_BYTES;
use sandgate_proto::models::v1::model_gateway_server::ModelGatewayServer;

pub use added::DEFAULT_MAX_ADDED_MODELS;
pub use config::{
    CallParams, ConfigFile, EnvironmentReference, GatewayConfig, ModelEntry, environment_references,
};
pub use egress::HOP_HEADER;
pub use forward::AnswerLimits;
/// What a listing applies when the caller names no size: the REST document's defaults.
pub use manage::DEFAULT_PAGE_SIZE as DEFAULT_KEY_PAGE_SIZE;
pub use metrics::describe_metrics;
/// The body rewriting, for the fuzz targets (`fuzz/`) and their regression test; not an
/// API of the crate.
#[doc(hidden)]
pub use rewrite::{ChatRequest, Usage, rename_model};
pub use service::{DEFAULT_SPEND_LOG_LIMIT, GatewayOptions, ModelGatewayService};
#[doc(hidden)]
pub use sse::SseRenamer;
#[doc(hidden)]
pub use strict::Refusal;

/// The gRPC service of `gateway`, ready to mount.
pub fn grpc_service(gateway: ModelGatewayService) -> ModelGatewayServer<ModelGatewayService> {
    ModelGatewayServer::new(gateway)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}
