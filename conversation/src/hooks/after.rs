//! The reference's `mode="after"` validators: field validators, which see a value its
//! type accepted, and model validators, which run once every field of a model validated.
//! Both walkers run them (the fast path only asks whether they pass).

use super::python::{is_python_space, python_float, python_repr};
use super::{AfterHook, FieldHook};
use crate::errors::LocItem;
use crate::pending::{PendingError, value_error};
use crate::scalars::Scalar;
use crate::summary::RecordNode;
use crate::tree::Model;

/// `MIN_CONTEXT_WINDOW_TOKENS` of the SDK.
const MIN_CONTEXT_WINDOW_TOKENS: f64 = 16_384.0;

/// The configured context window when it is below the SDK's minimum (`max_input_tokens or
/// …`: zero and null leave it to the model's metadata, which is not checked here).
pub(crate) fn context_window_too_small(max_input_tokens: Option<Scalar<'_>>) -> Option<f64> {
    let n = match max_input_tokens? {
        Scalar::Number(n) => n.as_f64()?,
        Scalar::Bool(b) => f64::from(u8::from(b)),
        Scalar::String(s) => crate::scalars::parse_int_str(s)?,
        Scalar::Special { value, .. } => value,
        Scalar::Null | Scalar::Compound => return None,
    };
    (n != 0.0 && n < MIN_CONTEXT_WINDOW_TOKENS).then_some(n)
}

/// Runs a model validator over `obj`, an object whose fields all validated; `model`
/// gives the defaults of the fields it lacks. Shared by both walkers: the fast path only
/// asks whether it is `None`.
pub(crate) fn run_after<R: RecordNode>(
    hook: AfterHook,
    model: &Model,
    obj: &R,
) -> Option<PendingError> {
    let text = |key| field_value(model, obj, key).and_then(scalar_str);
    let number = |key| field_value(model, obj, key).and_then(scalar_f64);
    match hook {
        AfterHook::SystemPromptExclusive => {
            let prompt_set = field_value(model, obj, "system_prompt").is_some_and(is_set);
            let custom_file = text("system_prompt_filename") != Some("system_prompt.j2");
            (prompt_set && custom_file).then(|| {
                value_error(
                    "Cannot set both 'system_prompt' and a non-default 'system_prompt_filename'. \
                     Use one or the other.",
                )
            })
        }
        AfterHook::McpServer => {
            let transport = obj.field("transport").and_then(R::text);
            let set = |key| {
                obj.field(key)
                    .and_then(R::text)
                    .is_some_and(|t| !t.is_empty())
            };
            let authorization_header = obj
                .field("auth")
                .is_some_and(|auth| !matches!(auth.scalar(), Scalar::Null))
                && obj.field("headers").and_then(R::keys).is_some_and(|keys| {
                    keys.iter()
                        .any(|key| key.eq_ignore_ascii_case("authorization"))
                });
            let message = match transport {
                Some("stdio") if !set("command") => "stdio MCP servers require 'command'",
                Some("http" | "streamable-http" | "sse") if !set("url") => {
                    "remote MCP servers require 'url'"
                }
                _ if authorization_header => {
                    "'auth' cannot be combined with an explicit top-level 'Authorization' \
                     header; use auth.strategy='header' instead."
                }
                _ => return None,
            };
            Some(value_error(message))
        }
        AfterHook::ContextWindow => {
            let window = context_window_too_small(obj.field("max_input_tokens").map(R::scalar))?;
            let mut e = value_error(&format!(
                "The configured model has a context window of {window} tokens, which is below \
                 the minimum of 16,384 tokens required for OpenHands to function properly."
            ));
            e.push_path(&LocItem::Key("max_input_tokens".into()));
            Some(e)
        }
        AfterHook::ThresholdsOrdered => {
            let (low, medium) = (number("low_threshold")?, number("medium_threshold")?);
            (low >= medium).then(|| {
                value_error(&format!(
                    "low_threshold ({}) must be less than medium_threshold ({})",
                    python_float(low),
                    python_float(medium)
                ))
            })
        }
        AfterHook::KeepFirstBelowHalf => {
            let (max_size, keep_first) = (number("max_size")?, number("keep_first")?);
            ((max_size / 2.0).floor() - keep_first - 1.0 <= 0.0).then(|| {
                value_error(
                    "keep_first must be less than max_size // 2 to leave room for condensation",
                )
            })
        }
        AfterHook::HookTypeFields => {
            let command = text("command").is_some_and(|c| !c.is_empty());
            let asynchronous = obj
                .field("async")
                .or_else(|| obj.field("async_"))
                .is_some_and(|a| matches!(a.scalar(), Scalar::Bool(true)));
            let message = match text("type").unwrap_or("command") {
                "command" if !command => "'command' is required when type is 'command'",
                "prompt" if text("prompt").is_none_or(str::is_empty) => {
                    "'prompt' is required when type is 'prompt'"
                }
                "agent" if command => {
                    "'command' must not be set when type is 'agent'; use 'system_prompt' instead"
                }
                "agent" if asynchronous => "'async' is not supported for agent hooks",
                _ => return None,
            };
            Some(value_error(message))
        }
    }
}

/// Runs a field validator over a value its type accepted.
pub(crate) fn run_field<R: RecordNode>(hook: FieldHook, v: &R) -> Option<PendingError> {
    match hook {
        FieldHook::ToolName => {
            let name = v.text()?;
            name.trim_matches(is_python_space)
                .is_empty()
                .then(|| value_error("Tool name cannot be empty"))
        }
        FieldHook::ObjectSchema => {
            let kind = v.field("type").map(R::scalar);
            if kind.and_then(scalar_str) == Some("object") {
                return None;
            }
            let shown = kind.map_or_else(|| "None".to_owned(), python_repr);
            Some(value_error(&format!(
                "ClientToolSpec.parameters must be an object JSON Schema (got type={shown}). \
                 Example: {{\"type\": \"object\", \"properties\": {{...}}}}"
            )))
        }
        FieldHook::RiskThreshold => {
            (v.text() == Some("UNKNOWN")).then(|| value_error("Threshold cannot be UNKNOWN"))
        }
        FieldHook::RegexPatterns => (0..).map_while(|i| v.item(i)).find_map(|entry| {
            let pattern = entry.item(0)?.text()?;
            let fault = fancy_regex::Expr::parse_tree(pattern).err()?;
            Some(value_error(&format!(
                "pattern {pattern:?} does not compile: {fault}"
            )))
        }),
        FieldHook::HistoryWindow => {
            let window = scalar_f64(v.scalar())?;
            (window < 1.0).then(|| {
                value_error(&format!(
                    "history_window must be >= 1, got {}. Use 1 to disable cross-step context.",
                    python_float(window).trim_end_matches(".0")
                ))
            })
        }
    }
}

fn scalar_str(s: Scalar<'_>) -> Option<&str> {
    match s {
        Scalar::String(s) => Some(s),
        _ => None,
    }
}

/// A validated number field's value (NaN and the infinities included).
fn scalar_f64(s: Scalar<'_>) -> Option<f64> {
    match s {
        Scalar::Number(n) => n.as_f64(),
        Scalar::Special { value, .. } => Some(value),
        _ => None,
    }
}

fn is_set(s: Scalar<'_>) -> bool {
    !matches!(s, Scalar::Null)
}

/// The field `key` as a model validator sees it: the value of `obj` (validated already),
/// else the field's default.
fn field_value<'v, R: RecordNode>(model: &'v Model, obj: &'v R, key: &str) -> Option<Scalar<'v>> {
    match obj.field(key) {
        Some(value) => Some(value.scalar()),
        None => model
            .keys
            .find(&model.fields, key)
            .and_then(|i| model.fields[i].default.as_ref().map(Scalar::from)),
    }
}
