//! The two embedded agent-server schemas, merged into the one the service validates with.

use serde_json::Value;

const SCHEMA_1_58: &str = include_str!("../schema/conversation_info.agent-server-1.58.schema.json");
const SCHEMA_1_34: &str = include_str!("../schema/conversation_info.agent-server-1.34.schema.json");

/// 1.34's schema, as embedded.
pub(crate) fn schema_1_34() -> Result<Value, String> {
    serde_json::from_str(SCHEMA_1_34).map_err(|e| format!("1.34: {e}"))
}

/// 1.58's schema, with what `SkipJsonSchema` hides from it put back.
pub(crate) fn schema_1_58() -> Result<Value, String> {
    let mut schema = serde_json::from_str(SCHEMA_1_58).map_err(|e| format!("1.58: {e}"))?;
    unhide(&mut schema);
    Ok(schema)
}

/// Members of a field's type that the SDK marks `SkipJsonSchema`, absent from its JSON
/// Schema yet accepted: 1.58's `LLM.reasoning_effort` is
/// `Literal["low", …] | SkipJsonSchema[str] | None`, any string.
fn unhide(schema: &mut Value) {
    if let Some(Value::Array(members)) =
        schema.pointer_mut("/$defs/LLM/properties/reasoning_effort/anyOf")
        && members.iter().any(|m| m.get("enum").is_some())
        && members.len() == 2
    {
        members.push(serde_json::json!({ "type": "string" }));
    }
}

/// 1.58 is the base; definitions, properties and union variants only 1.34 has are added,
/// so senders of either release validate.
pub(crate) fn merged_schema() -> Result<Value, String> {
    let mut base = schema_1_58()?;
    let old = schema_1_34()?;
    merge_model(&mut base, &old);
    if let (Some(Value::Object(defs)), Some(Value::Object(old_defs))) =
        (base.get_mut("$defs"), old.get("$defs"))
    {
        for (name, old_def) in old_defs {
            match defs.get_mut(name) {
                Some(def) => merge_model(def, old_def),
                None => {
                    defs.insert(name.clone(), old_def.clone());
                }
            }
        }
    }
    Ok(base)
}

/// The schema the REST document shows: either release's ConversationInfo (`anyOf`), as the
/// service accepts a body that either release accepts. Definitions the two releases share
/// (the same, down to every definition they reach) appear once; 1.34's others are named
/// `{name}_1_34`.
pub(crate) fn documented_schema() -> Result<Value, String> {
    let (mut old, mut new) = (schema_1_34()?, schema_1_58()?);
    let take_defs =
        |schema: &mut Value| match schema.as_object_mut().and_then(|root| root.remove("$defs")) {
            Some(Value::Object(defs)) => defs,
            _ => serde_json::Map::new(),
        };
    let (old_defs, new_defs) = (take_defs(&mut old), take_defs(&mut new));
    let mut shared: std::collections::BTreeSet<&String> = old_defs
        .iter()
        .filter(|(name, def)| new_defs.get(*name) == Some(*def))
        .map(|(name, _)| name)
        .collect();
    // A definition is shared only if everything it reaches is.
    loop {
        let unshared: Vec<&String> = shared
            .iter()
            .filter(|name| {
                references(&old_defs[name.as_str()])
                    .iter()
                    .any(|target| !shared.iter().any(|kept| *kept == target))
            })
            .copied()
            .collect();
        if unshared.is_empty() {
            break;
        }
        for name in unshared {
            shared.remove(name);
        }
    }
    let renamed: Vec<&String> = old_defs
        .keys()
        .filter(|name| !shared.contains(name))
        .collect();
    let rename = |schema: &Value| -> Result<Value, String> {
        let mut text = schema.to_string();
        for name in &renamed {
            text = text.replace(
                &format!("\"#/$defs/{name}\""),
                &format!("\"#/$defs/{name}_1_34\""),
            );
        }
        serde_json::from_str(&text).map_err(|e| format!("1.34, renamed: {e}"))
    };
    let mut defs = new_defs.clone();
    for name in &renamed {
        defs.insert(format!("{name}_1_34"), rename(&old_defs[name.as_str()])?);
    }
    defs.insert("ConversationInfo_1_34".into(), rename(&old)?);
    defs.insert("ConversationInfo_1_58".into(), new);
    Ok(serde_json::json!({
        "title": "ConversationInfo",
        "description": "A conversation as the agent-server sends it: what either release's ConversationInfo accepts (agent-server 1.34, which openhands-ai 1.11 pins, or 1.58).",
        "anyOf": [
            { "$ref": "#/$defs/ConversationInfo_1_34" },
            { "$ref": "#/$defs/ConversationInfo_1_58" },
        ],
        "$defs": defs,
    }))
}

/// The definitions `schema` refers to (`#/$defs/{name}`), however deep.
fn references(schema: &Value) -> Vec<String> {
    match schema {
        Value::Object(object) => object
            .iter()
            .flat_map(|(key, value)| match (key.as_str(), value) {
                ("$ref", Value::String(target)) => target
                    .strip_prefix("#/$defs/")
                    .map(|name| vec![name.to_owned()])
                    .unwrap_or_default(),
                _ => references(value),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(references).collect(),
        _ => Vec::new(),
    }
}

fn merge_model(def: &mut Value, old: &Value) {
    if let (Some(Value::Object(props)), Some(Value::Object(old_props))) =
        (def.get_mut("properties"), old.get("properties"))
    {
        for (k, v) in old_props {
            if !props.contains_key(k) {
                props.insert(k.clone(), v.clone());
            }
        }
    }
    if let (Some(Value::Array(one_of)), Some(Value::Array(old_one_of))) =
        (def.get_mut("oneOf"), old.get("oneOf"))
    {
        for v in old_one_of {
            if !one_of.contains(v) {
                one_of.push(v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document's schema is either release's, whole: every reference resolves, each
    /// release's root reaches only its own definitions (1.34's differing ones renamed), and
    /// a definition is shown once where the releases agree on it and all it reaches.
    #[test]
    fn the_documented_schema_is_either_release_whole() {
        let schema = documented_schema().expect("schema");
        let defs = schema["$defs"].as_object().expect("defs");
        for name in references(&schema) {
            assert!(defs.contains_key(&name), "{name} does not resolve");
        }
        for (name, def) in defs {
            for target in references(def) {
                assert!(
                    defs.contains_key(&target),
                    "{name} → {target} does not resolve"
                );
            }
        }
        let old = schema_1_34().expect("1.34");
        let new = schema_1_58().expect("1.58");
        // 1.58 as is: its root and every definition under its own name.
        let mut root_1_58 = new.clone();
        let new_defs = root_1_58
            .as_object_mut()
            .and_then(|root| root.remove("$defs"))
            .expect("1.58 defs");
        assert_eq!(defs["ConversationInfo_1_58"], root_1_58);
        for (name, def) in new_defs.as_object().expect("object") {
            assert_eq!(&defs[name], def, "{name}");
        }
        // 1.34: LLM differs between the releases (1.58 added fields), so 1.34's is its own,
        // and what reaches it (the agents) too; a definition with nothing differing below
        // it is shared.
        assert_eq!(
            defs["LLM_1_34"]["properties"],
            old["$defs"]["LLM"]["properties"]
        );
        assert!(defs.contains_key("Agent_1_34"));
        let old_defs = old["$defs"].as_object().expect("1.34 defs");
        let shared: Vec<&String> = old_defs
            .keys()
            .filter(|name| !defs.contains_key(&format!("{name}_1_34")))
            .collect();
        assert!(!shared.is_empty());
        for name in shared {
            assert_eq!(defs[name.as_str()], old_defs[name.as_str()], "{name}");
        }
        let root_refs = references(&defs["ConversationInfo_1_34"]);
        assert!(
            root_refs.iter().any(|name| name == "AgentBase_1_34"),
            "{root_refs:?}"
        );
    }
}
