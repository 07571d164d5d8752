//! The conversation-update webhook body (`ConversationInfo` from the OpenHands
//! agent-server): parsed and validated exactly as the reference receiver (FastAPI +
//! pydantic v2) does, with secrets redacted, plus the small typed summary Sandgate
//! indexes conversations by.
//!
//! Validation is driven by the two embedded JSON Schemas (agent-server 1.58 and 1.34),
//! merged and compiled once into a validator tree (`schema`). One generic walker
//! (`validate`) applies pydantic's lax-mode rules (`scalars`) to any body; the few
//! Python validators a schema cannot express live in `hooks`, keyed by `$defs` name.
//!
//! ```text
//! bytes ──parse_json──▶ Value ──validate_conversation──▶ ValidConversation { record, summary }
//!                                      └──────────────▶ Vec<ValidationError> (pydantic's order)
//! ```

mod borrowed;
mod canonical;
mod datetime;
mod decode;
mod errors;
mod fast;
mod hooks;
mod merge;
mod openapi;
mod parse;
mod pending;
mod pyjson;
pub mod redact;
mod scalars;
mod schema;
mod summary;
mod tree;
mod validate;

use std::collections::BTreeMap;

use serde_json::Value;

pub use errors::{LocItem, ValidationError};
pub use openapi::openapi_schemas;
pub use redact::REDACTED;
pub use summary::{ConversationSummary, ExecutionStatus};

/// The ConversationInfo schema the REST document shows: either release's, as the service
/// accepts what either accepts (see `merge::documented_schema`).
pub fn documented_schema() -> &'static Value {
    static SCHEMA: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
        merge::documented_schema()
            .unwrap_or_else(|err| panic!("the embedded schemas do not parse: {err}"))
    });
    &SCHEMA
}

/// A body that validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidConversation {
    /// The body as received (key order kept), every secret replaced by [`REDACTED`]:
    /// those the schema marks, and those of credential shape (`crate::redact`).
    pub record: Value,
    pub summary: ConversationSummary,
}

/// Bytes of an HTTP body → JSON value.
///
/// Strips a UTF-8 BOM and accepts lone UTF-16 surrogates, escaped (`"\ud800"`) or
/// encoded (`ED A0 80`, which Python's `surrogatepass` decoding takes), as U+FFFD. An
/// empty, whitespace-only, malformed or too deeply nested body yields one `json_invalid`
/// error at the character offset and with the message of Python's `json.loads`.
#[expect(
    clippy::result_large_err,
    reason = "one error item, built only for a bad body"
)]
pub fn parse_json(body: &[u8]) -> Result<Value, ValidationError> {
    parse::parse_json(body)
}

/// The fast path of [`parse_json`] + [`validate_conversation`] for a body that validates:
/// the redacted record, serialized exactly as the `Value` path would, and its summary,
/// without building a `Value` tree. `None` when the body does not validate or needs what
/// only the `Value` path does; the caller then takes that path, which reports the errors.
pub fn validate_body(
    body: &[u8],
) -> Option<(Box<serde_json::value::RawValue>, ConversationSummary)> {
    let text = parse::prepare(body).ok()?;
    fast::validate(&schema::TREE, &text)
}

/// Validates a parsed body. On failure returns every error, in pydantic's order, with
/// inputs taken from the redacted body.
pub fn validate_conversation(body: Value) -> Result<ValidConversation, Vec<ValidationError>> {
    // The merged models settle most bodies. One they refuse is judged by each release on
    // its own (a field of one release only is an unknown key, ignored, to the other).
    let original = body.clone();
    let mut record = body;
    let mut walker = validate::Walker::new(&schema::TREE);
    let mut valid = walker.model(schema::TREE.root, &mut record);
    let mut errors = Vec::new();
    if !valid {
        for tree in schema::RELEASES.iter() {
            let mut candidate = original.clone();
            let mut release = validate::Walker::new(tree);
            if release.model(tree.root, &mut candidate) {
                // Its secrets are redacted; those only the other release names are too.
                validate::Walker::new(&schema::TREE).model(schema::TREE.root, &mut candidate);
                record = candidate;
                valid = true;
                break;
            }
            // The reference receiver's errors (1.34.0's), or 1.58.2's where 1.34.0 would
            // have crashed (1.58.2's tree never does). Echoed from `record`: redacted by
            // the merged models, both releases' secrets.
            if errors.is_empty() && !release.crashed {
                errors = release.errors;
            }
        }
    }
    parse::special_to_json(&mut record);
    // Errors echo their input: taken from the body redacted as a record would be.
    crate::redact::redact_record(&mut record);
    if !valid {
        return Err(errors.into_iter().map(|e| e.finish(&record)).collect());
    }
    match summary::summarize(&record) {
        Some(summary) => Ok(ValidConversation { record, summary }),
        // Unreachable for a record that validated; answered as a validation error rather
        // than a panic so no body can turn into a 500.
        None => Err(vec![ValidationError {
            error_type: "value_error",
            loc: Vec::new(),
            msg: "Value error, conversation record could not be summarised".to_owned(),
            input: Value::Null,
            ctx: None,
        }]),
    }
}

/// The tag rule, shared by the webhook and `PATCH /conversations/{id}`: keys match
/// Python's `^[a-z0-9]+$` (whose `$` also matches before one final `"\n"`), values are
/// strings of at most 256 characters. `null` means no tags.
///
/// Errors are located as in the webhook: rule violations are `value_error` at `["tags"]`,
/// a non-string value is `string_type` at `["tags", key]`, a non-object is `dict_type`.
pub fn validate_tags(tags: &Value) -> Result<BTreeMap<String, String>, Vec<ValidationError>> {
    let tree = &*schema::TREE;
    let root = tree.model(tree.root);
    let Some(field) = root
        .keys
        .find(&root.fields, "tags")
        .map(|i| &root.fields[i])
    else {
        return Ok(BTreeMap::new());
    };
    let mut value = tags.clone();
    let mut walker = validate::Walker::new(tree);
    if !walker.node(field.node, &mut value) {
        let tag_key = LocItem::Key("tags".to_owned());
        return Err(walker
            .errors
            .into_iter()
            .map(|mut e| {
                e.resolve_input(&value);
                e.loc_rev.push(tag_key.clone());
                e.finish(&value)
            })
            .collect());
    }
    Ok(match value {
        Value::Object(map) => map
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect(),
        _ => BTreeMap::new(),
    })
}

/// A date-time string as pydantic reads one (ISO 8601, naive taken as UTC), in
/// microseconds since the epoch; `None` when it is not one.
pub fn datetime_micros(text: &str) -> Option<i64> {
    datetime::parse_datetime(scalars::Scalar::String(text))
        .ok()
        .map(|datetime| datetime::epoch_micros(&datetime))
}

#[cfg(test)]
mod tests;
