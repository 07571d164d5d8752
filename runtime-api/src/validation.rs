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
