//! An answer that is not streamed: read whole (within its limit and the call's
//! deadline), edited, and answered in messages of bounded size.

use bytes::{Bytes, BytesMut};
use sandgate_proto::models::v1::CallResponse;
use tonic::Status;

use super::clients::Answer;
use super::edit::edit_whole;
use super::failure::BodyFailure;
use super::record::CallRecord;
use crate::call::Prepared;
use crate::spend::Finished;
use crate::support::error;

/// The largest piece of a whole body one message carries.
const MESSAGE_CHUNK: usize = 1024 * 1024;

/// A body that is not streamed: read whole, edited on success, answered in messages of at
/// most [`MESSAGE_CHUNK`] bytes (no body is too large for one gRPC message).
pub(crate) async fn whole_answer(
    response: Answer,
    mut first: CallResponse,
    call: &Prepared,
    mut record: CallRecord,
    max_bytes: usize,
    deadline: tokio::time::Instant,
) -> (Vec<CallResponse>, Finished, Option<Status>) {
    let status = response.status();
    match whole_body(response, max_bytes, deadline).await {
        Ok(body) => {
            record.bytes_read = body.len() as u64;
            let upstream_succeeded = status.is_success();
            let (status, mut rest, usage) = edit_whole(call, status.as_u16(), body);
            first.status = u32::from(status);
            if !(200..300).contains(&status) {
                // A failed answer is an error object in the API's shape, whatever the
                // upstream's was.
                "application/json".clone_into(&mut first.content_type);
            }
            record.bytes_out = rest.len() as u64;
            first.chunk = rest.split_to(rest.len().min(MESSAGE_CHUNK));
            let mut messages = vec![first];
            while !rest.is_empty() {
                messages.push(CallResponse {
                    chunk: rest.split_to(rest.len().min(MESSAGE_CHUNK)),
                    ..CallResponse::default()
                });
            }
            // What a successful upstream answer generated is charged, by its usage or
            // the estimate where it reports none; a failure is not.
            let finished = if upstream_succeeded {
                record.finish_answered(status, usage, true)
            } else {
                record.finish(status, usage)
            };
            (messages, finished, None)
        }
        Err(failure) => {
            let (code, status, message) = failure.describe();
            (
                Vec::new(),
                record.finish(status, None),
                Some(error(code, message)),
            )
        }
    }
}

/// An answer's whole body, of at most `max_bytes`, by `deadline`. One with a length is
/// whole once that many bytes are in: its end-of-stream would come only after the task
/// hyper-util spawns to put the connection back in the pool has run (a wake-up of another
/// thread, on the call's path).
async fn whole_body(
    mut response: Answer,
    max_bytes: usize,
    deadline: tokio::time::Instant,
) -> Result<Bytes, BodyFailure> {
    let length = response.content_length();
    if length.is_some_and(|length| length > max_bytes as u64) {
        return Err(BodyFailure::TooLarge(max_bytes));
    }
    let mut next = async || {
        response
            .chunk(deadline)
            .await
            .map_err(BodyFailure::Upstream)
    };
    let Some(first) = next().await? else {
        return Ok(Bytes::new());
    };
    let whole = |body: &[u8]| length.is_some_and(|length| body.len() as u64 >= length);
    if whole(&first) {
        return Ok(first);
    }
    // Reserved from what arrived, not from the announced length: an upstream's header
    // does not size an allocation.
    let mut body = BytesMut::from(first);
    while !whole(&body) {
        match next().await? {
            Some(chunk) if body.len() + chunk.len() > max_bytes => {
                return Err(BodyFailure::TooLarge(max_bytes));
            }
            Some(chunk) => body.extend_from_slice(&chunk),
            None => break,
        }
    }
    if body.len() > max_bytes {
        return Err(BodyFailure::TooLarge(max_bytes));
    }
    Ok(body.freeze())
}
