//! The webhook body: the bytes a sandbox posts, through both of the service's paths
//! (`ConversationsService::admit`): the borrowed fast path `validate_body`, and
//! `parse_json` + `validate_conversation`, which reports the errors. The same value also
//! goes through `validate_tags`, the rule `PATCH /conversations/{id}` applies.

use sandgate_conversation::{LocItem, REDACTED, ValidationError};
use serde_json::Value;

pub fn webhook_body(data: &[u8]) {
    let fast = sandgate_conversation::validate_body(data);
    let parsed = match sandgate_conversation::parse_json(data) {
        Ok(parsed) => parsed,
        Err(error) => {
            assert!(
                fast.is_none(),
                "the fast path accepted a body parse_json refuses"
            );
            json_invalid_names_an_offset(&error, data.len());
            return;
        }
    };
    if let Err(errors) = sandgate_conversation::validate_tags(&parsed) {
        well_formed(&errors);
    }
    match sandgate_conversation::validate_conversation(parsed.clone()) {
        Ok(valid) => {
            let record = serde_json::to_string(&valid.record)
                .unwrap_or_else(|err| panic!("an accepted record does not serialize: {err}"));
            if let Some((fast_record, fast_summary)) = &fast {
                assert_eq!(
                    fast_record.get(),
                    record,
                    "the two paths stored different records"
                );
                assert_eq!(
                    fast_summary, &valid.summary,
                    "the two paths summarized differently"
                );
            }
            only_secrets_replaced(&parsed, &valid.record);
            // What the catalog stores and hands back is itself a valid record, unchanged
            // by a second pass: redaction is idempotent.
            let again = sandgate_conversation::parse_json(record.as_bytes())
                .map_err(|error| vec![error])
                .and_then(sandgate_conversation::validate_conversation)
                .unwrap_or_else(|errors| {
                    panic!("the stored record is refused: {:?}", errors.first())
                });
            assert_eq!(
                again.record, valid.record,
                "a second pass changed the record"
            );
            assert_eq!(again.summary, valid.summary);
            // The webhook's tag rule and PATCH's are one rule.
            let tags = valid.record.get("tags").cloned().unwrap_or(Value::Null);
            assert_eq!(
                sandgate_conversation::validate_tags(&tags),
                Ok(valid.summary.tags),
                "the record's tags and validate_tags disagree"
            );
        }
        Err(errors) => {
            assert!(
                fast.is_none(),
                "the fast path accepted a body the Value path refuses: {:?}",
                errors.first()
            );
            well_formed(&errors);
        }
    }
}

/// A refusal has at least one error, each with a type and a message, in FastAPI's shape.
fn well_formed(errors: &[ValidationError]) {
    assert!(!errors.is_empty(), "refused without an error");
    for error in errors {
        assert!(
            !error.error_type.is_empty() && !error.msg.is_empty(),
            "{error:?}"
        );
        let item = error.to_fastapi_json();
        assert_eq!(item["loc"][0], "body", "{item}");
        assert!(serde_json::to_string(error).is_ok());
    }
}

/// A body that is not JSON is one `json_invalid` error located at a byte of the body.
fn json_invalid_names_an_offset(error: &ValidationError, len: usize) {
    assert_eq!(error.error_type, "json_invalid");
    match error.loc.as_slice() {
        [LocItem::Index(offset)] => assert!(*offset <= len, "offset {offset} past {len} bytes"),
        other => panic!("json_invalid located at {other:?}"),
    }
}

/// `record` is `body` with some values replaced by [`REDACTED`]: same members in the same
/// order, same items, same scalars everywhere else.
fn only_secrets_replaced(body: &Value, record: &Value) {
    if record == &Value::String(REDACTED.to_owned()) {
        return;
    }
    match (body, record) {
        (Value::Object(body), Value::Object(record)) => {
            assert!(
                body.keys().eq(record.keys()),
                "the record's members differ from the body's"
            );
            for (body, record) in body.values().zip(record.values()) {
                only_secrets_replaced(body, record);
            }
        }
        (Value::Array(body), Value::Array(record)) => {
            assert_eq!(body.len(), record.len(), "the record's array differs");
            for (body, record) in body.iter().zip(record) {
                only_secrets_replaced(body, record);
            }
        }
        (body, record) => assert_eq!(body, record, "the record changed a value"),
    }
}
