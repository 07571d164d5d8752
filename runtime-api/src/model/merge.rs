//! The two embedded agent-server schemas, merged into the one the service validates with.

use serde_json::Value;

const SCHEMA_1_58: &str =
    include_str!("../../schema/conversation_info.agent-server-1.58.schema.json");
const SCHEMA_1_34: &str =
    include_str!("../../schema/conversation_info.agent-server-1.34.schema.json");

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
