//! One message-size limit end to end: what the edge accepts, every gRPC hop behind it
//! accepts too, in both directions. On both stores.

use serde_json::{Value, json};

use crate::common::{Backend, Sandgate, WEBHOOK_KEY};
use crate::on_both_backends;

/// A 5 MB profile passed the edge (8 MiB) and met the Settings service's 4 MiB gRPC
/// default: `400 decoded message length too large`, before its key was even checked.
async fn a_profile_larger_than_four_mebibytes_is_saved_and_read_back(backend: Backend) {
    let server = Sandgate::start(&backend).await;
    let path = server.url("/api/v1/settings/profiles/big");
    let notes = "n".repeat(5 * 1024 * 1024);
    let profile = json!({
        "llm": {"model": "gateway_proxy/claude", "base_url": "https://gw.example",
                "extra_headers": {"x-notes": notes}}
    });
    let unauthenticated = server
        .client
        .post(&path)
        .json(&profile)
        .send()
        .await
        .expect("post");
    assert_eq!(unauthenticated.status(), 401);
    let saved = server
        .client
        .post(&path)
        .header("x-session-api-key", WEBHOOK_KEY)
        .json(&profile)
        .send()
        .await
        .expect("post");
    assert_eq!(
        saved.status(),
        200,
        "{}",
        saved.text().await.unwrap_or_default()
    );
    let fetched = server
        .client
        .get(&path)
        .header("x-session-api-key", WEBHOOK_KEY)
        .send()
        .await
        .expect("get");
    assert_eq!(fetched.status(), 200);
    let fetched: Value = fetched.json().await.expect("JSON");
    assert_eq!(
        fetched["llm"]["extra_headers"]["x-notes"]
            .as_str()
            .map(str::len),
        Some(notes.len())
    );
}

on_both_backends!(a_profile_larger_than_four_mebibytes_is_saved_and_read_back);

/// gRPC health answers for the services the process serves, and NOT_FOUND for any other
/// (it said SERVING for every name).
#[tokio::test]
async fn grpc_health_knows_its_services() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let backend = Backend::embedded();
    let server = Sandgate::start(&backend).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url(""))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    for service in [
        "",
        "sandgate.conversations.v1.Conversations",
        "sandgate.models.v1.ModelGateway",
    ] {
        let answer = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap_or_else(|status| panic!("{service}: {status}"));
        assert_eq!(answer.get_ref().status, 1, "{service}: SERVING");
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".to_owned(),
        })
        .await
        .expect_err("an unknown service");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

/// A request message that does not decode is the caller's error: INVALID_ARGUMENT, not
/// INTERNAL (prost's codec's answer).
#[tokio::test]
async fn a_malformed_message_is_invalid_argument() {
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    /// Sends its bytes as they are; expects no answer to decode.
    #[derive(Default)]
    struct Raw;
    struct RawEncoder;
    struct NoDecoder;
    impl Codec for Raw {
        type Encode = Vec<u8>;
        type Decode = ();
        type Encoder = RawEncoder;
        type Decoder = NoDecoder;
        fn encoder(&mut self) -> RawEncoder {
            RawEncoder
        }
        fn decoder(&mut self) -> NoDecoder {
            NoDecoder
        }
    }
    impl Encoder for RawEncoder {
        type Item = Vec<u8>;
        type Error = tonic::Status;
        fn encode(&mut self, item: Vec<u8>, buf: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
            bytes::BufMut::put_slice(buf, &item);
            Ok(())
        }
    }
    impl Decoder for NoDecoder {
        type Item = ();
        type Error = tonic::Status;
        fn decode(&mut self, _: &mut DecodeBuf<'_>) -> Result<Option<()>, Self::Error> {
            Ok(Some(()))
        }
    }

    let backend = Backend::embedded();
    let server = Sandgate::start(&backend).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url(""))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let mut request = tonic::Request::new(vec![0xff, 0xff, 0xff, 0x0f]);
    request
        .metadata_mut()
        .insert("x-session-api-key", WEBHOOK_KEY.parse().expect("ascii"));
    let answer = grpc
        .unary::<Vec<u8>, (), Raw>(
            request,
            "/sandgate.conversations.v1.Conversations/GetConversation"
                .parse()
                .expect("path"),
            Raw,
        )
        .await
        .expect_err("garbage is refused");
    assert_eq!(answer.code(), tonic::Code::InvalidArgument, "{answer}");
}
