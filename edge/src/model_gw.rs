//! How the edge reaches the model gateway: through its gRPC client (over the network, or
//! to the services' routes in-process), or, when both run in one process (`sandgate
//! serve`), by calling the service itself. An LLM call is the edge's hottest call:
//! called directly it skips encoding, routing and decoding its request and every message
//! of its answer, yet the service sees the same metadata and answers the same codes and
//! details.

use std::sync::Arc;

use sandgate_proto::MAX_MESSAGE_BYTES;
use sandgate_proto::models::v1::model_gateway_client::ModelGatewayClient;
use sandgate_proto::models::v1::model_gateway_server::ModelGateway;
use sandgate_proto::models::v1::{
    AddModelRequest, AddModelResponse, CallRequest, GetModelInfoRequest, GetModelInfoResponse,
    GetModelRequest, GetModelResponse, ListModelsRequest, ListModelsResponse, ListSpendLogsRequest,
    ListSpendLogsResponse, ManageKeysRequest, ManageKeysResponse, ManageOrgsRequest,
    ManageOrgsResponse,
};
use sandgate_proto::models::{CallStream, ChatCompletionStream};
use tonic::{Request, Response, Status};

use crate::channel::GrpcChannel;

/// The ModelGateway service of this process.
pub type LocalModelGateway =
    Arc<dyn ModelGateway<CallStream = CallStream, ChatCompletionStream = ChatCompletionStream>>;

/// The model gateway, as the edge calls it.
#[derive(Clone)]
pub enum ModelGw {
    Grpc(ModelGatewayClient<GrpcChannel>),
    Local(LocalModelGateway),
}

/// A unary call, by either way.
macro_rules! unary {
    ($($call:ident($request:ty) -> $response:ty;)*) => {$(
        pub async fn $call(&self, request: Request<$request>) -> Result<$response, Status> {
            match self {
                Self::Grpc(client) => client.clone().$call(request).await,
                Self::Local(service) => service.$call(request).await,
            }
            .map(Response::into_inner)
        }
    )*};
}

impl ModelGw {
    /// The service's gRPC client over `channel`.
    pub fn grpc(channel: GrpcChannel) -> Self {
        Self::Grpc(
            ModelGatewayClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    unary! {
        list_models(ListModelsRequest) -> ListModelsResponse;
        get_model(GetModelRequest) -> GetModelResponse;
        add_model(AddModelRequest) -> AddModelResponse;
        get_model_info(GetModelInfoRequest) -> GetModelInfoResponse;
        list_spend_logs(ListSpendLogsRequest) -> ListSpendLogsResponse;
        manage_keys(ManageKeysRequest) -> ManageKeysResponse;
        manage_orgs(ManageOrgsRequest) -> ManageOrgsResponse;
    }

    /// A call of an LLM API: the answer's messages as the service yields them.
    pub async fn call(&self, request: Request<CallRequest>) -> Result<CallStream, Status> {
        Ok(match self {
            Self::Grpc(client) => Box::pin(client.clone().call(request).await?.into_inner()),
            Self::Local(service) => service.call(request).await?.into_inner(),
        })
    }
}
