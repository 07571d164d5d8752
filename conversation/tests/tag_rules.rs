//! Property tests of the tag rule (spec 2.7, design "Conversation webhook"), through the
//! public API only: `validate_tags`, which `PATCH /conversations/{id}` applies, and the
//! webhook's two validation paths, which must apply the same rule.
//!
//! The rule, as the reference states it: a key passes Python's
//! `re.match(r"^[a-z0-9]+$", key)` (ASCII only; `$` also matches just before one final
//! newline), a value is a string of at most 256 characters (code points, not bytes),
//! `null` means no tags. A non-object is `dict_type`, a rule violation `value_error` at
//! `["tags"]` naming the key, a non-string value `string_type` at `["tags", key]`.
//! The oracle below is written from that statement, not from the implementation.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::SizeRange;
use sandgate_conversation::{
    LocItem, ValidationError, parse_json, validate_body, validate_conversation, validate_tags,
};
use serde_json::{Map, Value, json};

/// The maximum length of a value, in characters.
const MAX_CHARS: usize = 256;

/// Python's `re.match(r"^[a-z0-9]+$", key)`, written out.
fn python_key_matches(key: &str) -> bool {
    let in_class = |c: &char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let chars: Vec<char> = key.chars().collect();
    match chars.split_last() {
        // `$` matches before a final "\n": the class must cover everything before it.
        Some(('\n', before)) => !before.is_empty() && before.iter().all(in_class),
        Some(_) => chars.iter().all(in_class),
        None => false,
    }
}

/// What the rule accepts, and the tags it yields; `None` when it rejects.
fn oracle(tags: &Value) -> Option<BTreeMap<String, String>> {
    match tags {
        Value::Null => Some(BTreeMap::new()),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| match value {
                Value::String(s) if python_key_matches(key) && s.chars().count() <= MAX_CHARS => {
                    Some((key.clone(), s.clone()))
                }
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn tags_loc() -> Vec<LocItem> {
    vec![LocItem::Key("tags".into())]
}

/// Inserted in order: a repeated key keeps its first position and takes its last value,
/// as Python's `json.loads` (and serde_json's ordered map) do.
fn object(entries: impl IntoIterator<Item = (String, Value)>) -> Value {
    Value::Object(entries.into_iter().collect::<Map<_, _>>())
}

/// Characters of every UTF-8 width, with combining marks and the odd ones out.
fn any_width_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => proptest::char::range('a', 'z'),
        1 => Just('é'),
        1 => Just('\u{301}'),
        1 => Just('中'),
        1 => Just('😀'),
        1 => Just('\n'),
        2 => any::<char>(),
    ]
}

fn text(chars: impl Into<SizeRange>) -> impl Strategy<Value = String> {
    proptest::collection::vec(any_width_char(), chars).prop_map(|c| c.into_iter().collect())
}

/// A string of `chars` characters: a short random pattern, repeated (drawing hundreds of
/// characters one by one would make each case slow for nothing).
fn text_of(chars: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = String> {
    (chars, proptest::collection::vec(any_width_char(), 1..8))
        .prop_map(|(n, pattern)| pattern.into_iter().cycle().take(n).collect())
}

/// A value the rule accepts, often right at the limit.
fn valid_value() -> BoxedStrategy<String> {
    prop_oneof![
        2 => text(0..12),
        1 => text_of(0..=MAX_CHARS),
        1 => text_of(MAX_CHARS..=MAX_CHARS),
    ]
    .boxed()
}

fn valid_key() -> impl Strategy<Value = String> {
    "[a-z0-9]{1,12}\n?"
}

/// Characters a key must not hold, many of them close to `[a-z0-9]` in some way.
fn stray_char() -> impl Strategy<Value = char> {
    prop_oneof![
        proptest::char::range('A', 'Z'),
        proptest::sample::select(vec![
            '-', '_', ' ', '.', ':', '/', '\n', '\r', '\t', '\0', 'é', 'ß', 'ı', 'ſ', 'K', 'ａ',
            '٣', '¹', '😀',
        ]),
        any::<char>(),
    ]
}

/// A key the rule rejects: a valid key with one stray character, or anything at all.
fn invalid_key() -> impl Strategy<Value = String> {
    let near =
        (valid_key(), any::<prop::sample::Index>(), stray_char()).prop_map(|(key, at, stray)| {
            let mut chars: Vec<char> = key.chars().collect();
            chars.insert(at.index(chars.len() + 1), stray);
            chars.into_iter().collect::<String>()
        });
    let odd = proptest::sample::select(vec!["", "\n", "a\n\n", "\na", "a\r\n", "ab\nc"])
        .prop_map(str::to_owned);
    prop_oneof![3 => near, 1 => odd, 1 => any::<String>()]
        .prop_filter("a key the rule accepts", |key| !python_key_matches(key))
}

fn any_key() -> impl Strategy<Value = String> {
    prop_oneof![3 => valid_key(), 1 => invalid_key()]
}

/// Any JSON, small.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9..1e9f64).prop_map(Value::from),
        text(0..8).prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((any_key(), inner), 0..4).prop_map(object),
        ]
    })
}

/// A value `len()` fails on: the reference crashed there; `dict[str, str]` answers.
fn non_string_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e9..1e9f64).prop_map(Value::from),
    ]
}

/// A list or an object within the length limit: `len()` works on it, so the rule goes on.
fn short_compound() -> impl Strategy<Value = Value> {
    json_value().prop_filter("a scalar", |v| v.is_array() || v.is_object())
}

/// Any tag value: mostly strings, some of them too long.
fn any_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => valid_value().prop_map(Value::from),
        1 => text_of(MAX_CHARS + 1..=MAX_CHARS + 40).prop_map(Value::from),
        1 => json_value(),
    ]
}

fn valid_entries() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((valid_key(), valid_value()), 0..6)
}

fn any_entries() -> impl Strategy<Value = Vec<(String, Value)>> {
    proptest::collection::vec((any_key(), any_value()), 0..6)
}

/// `valid` entries, then `key: value`, then those of `tail` that reuse none of their
/// keys (a repeated key would change an earlier entry's value).
fn with_entry(
    valid: Vec<(String, String)>,
    key: String,
    value: Value,
    tail: Vec<(String, Value)>,
) -> Value {
    let mut entries: Vec<(String, Value)> = valid
        .into_iter()
        .map(|(k, v)| (k, Value::from(v)))
        .collect();
    entries.push((key, value));
    let taken: Vec<String> = entries.iter().map(|(k, _)| k.clone()).collect();
    entries.extend(tail.into_iter().filter(|(k, _)| !taken.contains(k)));
    object(entries)
}

/// The minimal webhook body, with `tags` as JSON text.
fn webhook_body(tags: &str) -> String {
    format!(
        r#"{{"id": "7f3c2a10-0000-4000-8000-000000000901",
            "workspace": {{"kind": "LocalWorkspace", "working_dir": "/workspace"}},
            "agent": {{"kind": "Agent", "llm": {{"model": "gpt-4o"}}}},
            "tags": {tags}}}"#
    )
}

fn first(errors: &[ValidationError]) -> (&'static str, Vec<LocItem>, String) {
    let e = &errors[0];
    (e.error_type, e.loc.clone(), e.msg.clone())
}

proptest! {
    #[test]
    fn valid_tags_are_accepted_unchanged(entries in valid_entries()) {
        let tags = object(entries.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))));
        // The last value of a repeated key, as the body's JSON would have it.
        let expected: BTreeMap<String, String> = entries.into_iter().collect();
        prop_assert_eq!(validate_tags(&tags), Ok(expected));
    }

    /// The limit counts characters whatever their width in bytes (up to 4 × 256).
    #[test]
    fn the_limit_is_256_characters_of_any_width(c in any::<char>()) {
        let at_limit = json!({ "k": c.to_string().repeat(MAX_CHARS) });
        prop_assert!(validate_tags(&at_limit).is_ok());
        let over = json!({ "k": c.to_string().repeat(MAX_CHARS + 1) });
        prop_assert!(validate_tags(&over).is_err());
    }

    #[test]
    fn the_rule_matches_the_oracle(entries in any_entries()) {
        let tags = object(entries);
        let expected = oracle(&tags);
        let got = validate_tags(&tags);
        prop_assert_eq!(got.as_ref().ok(), expected.as_ref(), "{:?}", got);
    }

    #[test]
    fn a_non_object_is_dict_type(tags in json_value()) {
        prop_assume!(!tags.is_object() && !tags.is_null());
        let errors = validate_tags(&tags).err().unwrap_or_default();
        prop_assert_eq!(errors.len(), 1);
        prop_assert_eq!(errors[0].error_type, "dict_type");
        prop_assert_eq!(&errors[0].loc, &tags_loc());
    }

    /// The first key that breaks the rule is named, once, at `["tags"]`, whatever follows.
    #[test]
    fn an_invalid_key_is_named(
        valid in valid_entries(),
        key in invalid_key(),
        value in valid_value(),
        tail in any_entries(),
    ) {
        let tags = with_entry(valid, key.clone(), Value::from(value), tail);
        let errors = validate_tags(&tags).err().unwrap_or_default();
        prop_assert_eq!(errors.len(), 1, "{:?}", errors);
        prop_assert_eq!(
            first(&errors),
            (
                "value_error",
                tags_loc(),
                format!("Value error, Tag key '{key}' is invalid: keys must be lowercase alphanumeric only"),
            )
        );
    }

    #[test]
    fn a_long_value_is_named(
        valid in valid_entries(),
        key in valid_key(),
        value in text_of(MAX_CHARS + 1..=3 * MAX_CHARS),
        tail in any_entries(),
    ) {
        let tags = with_entry(valid, key.clone(), Value::from(value), tail);
        let errors = validate_tags(&tags).err().unwrap_or_default();
        prop_assert_eq!(errors.len(), 1, "{:?}", errors);
        prop_assert_eq!(
            first(&errors),
            (
                "value_error",
                tags_loc(),
                format!("Value error, Tag value for '{key}' exceeds maximum length of 256 characters"),
            )
        );
    }

    /// Past a value `len()` fails on, the reference crashed; what follows is not checked
    /// and every error is `string_type`, the first at that key.
    #[test]
    fn a_non_string_scalar_is_string_type_at_its_key(
        valid in valid_entries(),
        key in valid_key(),
        value in non_string_scalar(),
        tail in any_entries(),
    ) {
        let tags = with_entry(valid, key.clone(), value, tail);
        let errors = validate_tags(&tags).err().unwrap_or_default();
        prop_assert!(!errors.is_empty());
        prop_assert!(errors.iter().all(|e| e.error_type == "string_type"), "{:?}", errors);
        prop_assert_eq!(&errors[0].loc, &vec![LocItem::Key("tags".into()), LocItem::Key(key)]);
    }

    /// A short list or object passes the length rule, then is no string.
    #[test]
    fn a_compound_value_is_string_type_at_its_key(
        before in valid_entries(),
        key in valid_key(),
        value in short_compound(),
        after in valid_entries(),
    ) {
        let after = after.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        let tags = with_entry(before, key.clone(), value, after);
        let errors = validate_tags(&tags).err().unwrap_or_default();
        prop_assert_eq!(errors.len(), 1, "{:?}", errors);
        prop_assert_eq!(errors[0].error_type, "string_type");
        prop_assert_eq!(&errors[0].loc, &vec![LocItem::Key("tags".into()), LocItem::Key(key)]);
    }

    /// The webhook applies the same rule with the same errors, on both of its paths, even
    /// when the body repeats a key (serde_json keeps its first place and last value).
    #[test]
    fn the_webhook_applies_the_same_rule(
        entries in proptest::collection::vec((any_key(), any_value()), 0..6),
        repeats in proptest::collection::vec((any::<prop::sample::Index>(), any_value()), 0..3),
    ) {
        let mut members: Vec<String> = entries
            .iter()
            .map(|(k, v)| format!("{}: {v}", Value::from(k.as_str())))
            .collect();
        for (index, value) in repeats {
            if !entries.is_empty() {
                let key = &entries[index.index(entries.len())].0;
                members.push(format!("{}: {value}", Value::from(key.as_str())));
            }
        }
        let tags_text = format!("{{{}}}", members.join(", "));
        let tags = parse_json(tags_text.as_bytes()).unwrap_or_default();
        let rule = validate_tags(&tags);

        let body = webhook_body(&tags_text);
        let webhook = parse_json(body.as_bytes()).map_err(|e| vec![e]).and_then(validate_conversation);
        match (&rule, &webhook) {
            (Ok(expected), Ok(valid)) => {
                let stored: BTreeMap<String, String> =
                    serde_json::from_value(valid.record["tags"].clone()).unwrap_or_default();
                prop_assert_eq!(&stored, expected);
            }
            (Err(expected), Err(got)) => prop_assert_eq!(got, expected),
            _ => prop_assert!(false, "the rule says {:?}, the webhook {:?}", rule, webhook.map(|_| ())),
        }
        // The fast path accepts exactly what the rule does, and stores the same record.
        let fast = validate_body(body.as_bytes());
        prop_assert_eq!(fast.is_some(), rule.is_ok());
        if let (Some((record, _)), Ok(valid)) = (fast, webhook) {
            prop_assert_eq!(record.get(), serde_json::to_string(&valid.record).unwrap_or_default());
        }
    }
}
