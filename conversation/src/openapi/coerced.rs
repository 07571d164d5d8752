//! What the models' before-validators coerce: a field's schema widened to also take what
//! they turn into a value of that schema, so that the document does not call bodies
//! invalid that the models (and the service) accept.

use serde_json::{Map, Value};

use super::both_releases;

/// What the models' before-validators (`crate::hooks`, `BeforeHook`)
/// take and turn into what the field's schema says: the field's schema, with what they
/// also take beside it (`None`: any value), for both releases' models. Without it the
/// document would call bodies invalid that the models (and the service) accept.
pub(super) const COERCED_FIELDS: [(&str, &str, Option<&[&str]>); 9] = [
    // `LocalWorkspace.__init__`: `str(working_dir)`.
    ("LocalWorkspace", "working_dir", None),
    // `Agent._add_security_prompt_as_default`: anything but a dict becomes `{}`.
    ("Agent", "system_prompt_kwargs", None),
    // `Tool.validate_params`: `None` is `{}`.
    ("Tool", "params", Some(&[r#"{"type": "null"}"#])),
    // `AgentBase._validate_system_prompt_fields` (1.34.0): `None` is `""`.
    (
        "Agent",
        "security_policy_filename",
        Some(&[r#"{"type": "null"}"#]),
    ),
    (
        "ACPAgent",
        "security_policy_filename",
        Some(&[r#"{"type": "null"}"#]),
    ),
    // `Skill._parse_allowed_tools`: a string is split on whitespace, a list's items become
    // strings; `Skill._convert_metadata_values`: a dict's values become strings.
    (
        "Skill",
        "allowed_tools",
        Some(&[r#"{"type": "string"}"#, r#"{"type": "array"}"#]),
    ),
    ("Skill", "metadata", Some(&[r#"{"type": "object"}"#])),
    // `validate_secret`: a falsy value is `None`, and kept so.
    ("APIBasedCritic", "api_key", Some(FALSY)),
    ("ACPAgent", "acp_resume_session_id", Some(FALSY)),
];

/// Python's falsy JSON values but `""` (a string already): each is `None` to
/// `validate_secret`.
const FALSY: &[&str] = &[
    r#"{"type": "null"}"#,
    r#"{"const": false}"#,
    r#"{"const": 0}"#,
    r#"{"type": "array", "maxItems": 0}"#,
    r#"{"type": "object", "maxProperties": 0}"#,
];

/// The annotations of a field's schema, kept at its top when it is widened.
const ANNOTATIONS: [&str; 4] = ["title", "description", "default", "examples"];

/// Each of [`COERCED_FIELDS`] widened, in both releases' models, its annotations kept at
/// its top.
pub(super) fn widen_coerced_fields(schemas: &mut Map<String, Value>) {
    for (model, field, also) in COERCED_FIELDS {
        for name in both_releases(model) {
            let Some(Value::Object(schema)) = schemas
                .get_mut(&name)
                .and_then(|model| model.pointer_mut(&format!("/properties/{field}")))
            else {
                continue;
            };
            let annotations: Map<String, Value> = ANNOTATIONS
                .iter()
                .filter_map(|key| Some(((*key).to_owned(), schema.get(*key)?.clone())))
                .collect();
            let widened = also.map(|also| {
                let original = schema
                    .iter()
                    .filter(|(key, _)| !ANNOTATIONS.contains(&key.as_str()))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect();
                let alternatives = std::iter::once(Value::Object(original)).chain(
                    // Each is JSON (`tests::coerced_fields_widen_to_json_schemas`).
                    also.iter()
                        .filter_map(|text| serde_json::from_str(text).ok()),
                );
                ("anyOf".to_owned(), alternatives.collect())
            });
            *schema = annotations.into_iter().chain(widened).collect();
        }
    }
}
