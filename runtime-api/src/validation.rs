//! Validation failures of the model, as the error detail that travels over gRPC.

use sandgate_proto::error::{ErrorDetail, LocItem, ValidationError, loc_item};

/// Converts the model's errors into the detail of a 422-class status.
pub fn failure(errors: Vec<sandgate_conversation::ValidationError>) -> ErrorDetail {
    ErrorDetail::validation(errors.into_iter().map(to_proto).collect())
}

/// One error at `loc` with no input, for checks made outside the model.
pub fn single(
    error_type: &'static str,
    loc: Vec<sandgate_conversation::LocItem>,
    msg: impl Into<String>,
) -> ErrorDetail {
    failure(vec![sandgate_conversation::ValidationError {
        error_type,
        loc,
        msg: msg.into(),
        input: serde_json::Value::Null,
        ctx: None,
    }])
}

fn to_proto(error: sandgate_conversation::ValidationError) -> ValidationError {
    ValidationError {
        r#type: error.error_type.to_owned(),
        loc: error
            .loc
            .into_iter()
            .map(|item| LocItem {
                item: Some(match item {
                    sandgate_conversation::LocItem::Key(key) => loc_item::Item::Key(key),
                    sandgate_conversation::LocItem::Index(index) => {
                        loc_item::Item::Index(index as u64)
                    }
                }),
            })
            .collect(),
        msg: error.msg,
        input_json: serde_json::to_vec(&error.input).unwrap_or_default().into(),
        ctx_json: error
            .ctx
            .map(|ctx| serde_json::to_vec(&ctx).unwrap_or_default().into())
            .unwrap_or_default(),
    }
}

/// Bodies from this size on are parsed and validated off the serving thread.
const OFF_THREAD_BYTES: usize = 256 * 1024;

/// Parses or validates a body of `size` bytes: at once when it is small; when it is large
/// (a multi-megabyte delivery takes tens of milliseconds), on the blocking pool, so that
/// the other connections served by the caller's thread are not held meanwhile (measured
/// with `scripts/bench-cpu-neighbour`).
pub async fn judged<T: Send + 'static>(
    size: usize,
    judge: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ErrorDetail> {
    if size < OFF_THREAD_BYTES {
        return Ok(judge());
    }
    match tokio::task::spawn_blocking(judge).await {
        Ok(judged) => Ok(judged),
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(_) => Err(ErrorDetail::new(
            sandgate_proto::error::ErrorCode::Unavailable,
            "the server is stopping",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large body is judged on another thread than the caller's (whose other
    /// connections it would hold), a small one at once on the caller's.
    #[tokio::test]
    async fn only_large_bodies_leave_the_callers_thread() {
        let here = std::thread::current().id();
        let small = judged(OFF_THREAD_BYTES - 1, || std::thread::current().id()).await;
        assert_eq!(small.unwrap(), here);
        let large = judged(OFF_THREAD_BYTES, || std::thread::current().id()).await;
        assert_ne!(large.unwrap(), here);
    }

    /// A judge that panics off the thread panics the caller, as it would at once.
    #[tokio::test]
    #[should_panic(expected = "judged")]
    async fn a_panic_off_the_thread_reaches_the_caller() {
        drop(judged(OFF_THREAD_BYTES, || panic!("judged")).await);
    }
}
